/**
 * Test fixture (not product code): a CA and server certificates for 127.0.0.1 / localhost made by the real
 * `openssl` command in a directory, as an operator would make them (docs/security.md).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface TestCa {
  dir: string;
  /** PEM file of the CA certificate (what the CLI's --cacert takes). */
  caFile: string;
  caPem: string;
  /** Issues a server certificate for 127.0.0.1, ::1 and localhost; returns its files and PEM texts. */
  issue(name: string): { certFile: string; keyFile: string; cert: string; key: string; serial: string };
}

function openssl(dir: string, args: string[]): string {
  return execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] }).toString('utf8');
}

export function makeTestCa(dir: string, name = 'punctual-test-ca'): TestCa {
  const caKey = join(dir, `${name}.key`);
  const caFile = join(dir, `${name}.pem`);
  openssl(dir, ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', caKey, '-out', caFile,
    '-days', '2', '-subj', `/CN=${name}`, '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign']); // prettier-ignore
  return {
    dir,
    caFile,
    caPem: readFileSync(caFile, 'utf8'),
    issue(cn) {
      const keyFile = join(dir, `${cn}.key`);
      const csr = join(dir, `${cn}.csr`);
      const certFile = join(dir, `${cn}.pem`);
      const ext = join(dir, `${cn}.ext`);
      writeFileSync(ext, 'subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\nextendedKeyUsage=serverAuth\n');
      openssl(dir, ['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', keyFile, '-out', csr, '-subj', `/CN=${cn}`]);
      openssl(dir, ['x509', '-req', '-in', csr, '-CA', caFile, '-CAkey', caKey, '-CAcreateserial', '-out', certFile, '-days', '2', '-extfile', ext]);
      const serial = openssl(dir, ['x509', '-in', certFile, '-noout', '-serial']).trim().replace(/^serial=/, '');
      return { certFile, keyFile, cert: readFileSync(certFile, 'utf8'), key: readFileSync(keyFile, 'utf8'), serial };
    },
  };
}
