/**
 * Test fixture (not product code): a CA and server certificates for 127.0.0.1 / localhost, made by the real
 * `openssl` command (src/core/testing/certs.ts) as an operator would make them (docs/security.md).
 */
import { readFileSync } from 'node:fs';
import { loopbackSans, makeCa, makeCert, openssl } from '../../core/testing/certs.js';

export interface TestCa {
  dir: string;
  /** PEM file of the CA certificate (what the CLI's --cacert takes). */
  caFile: string;
  caPem: string;
  /** Issues a server certificate for 127.0.0.1, ::1 and localhost; returns its files and PEM texts. */
  issue(name: string): { certFile: string; keyFile: string; cert: string; key: string; serial: string };
}

export function makeTestCa(dir: string, name = 'punctual-test-ca'): TestCa {
  const caFile = makeCa(dir, name);
  return {
    dir,
    caFile,
    caPem: readFileSync(caFile, 'utf8'),
    issue(cn) {
      const { certFile, keyFile } = makeCert(dir, cn, loopbackSans, name);
      const serial = openssl(dir, ['x509', '-in', certFile, '-noout', '-serial']).trim().replace(/^serial=/, '');
      return { certFile, keyFile, cert: readFileSync(certFile, 'utf8'), key: readFileSync(keyFile, 'utf8'), serial };
    },
  };
}
