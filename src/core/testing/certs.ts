/**
 * Test fixture (not product code): a CA and certificates made with the real `openssl` command, the way
 * docs/security.md tells an operator to make them. One helper for the client API's server certificates
 * (IP/DNS names) and the peers' node certificates (SAN URI:punctual:node:<id>).
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface CertFiles {
  certFile: string;
  keyFile: string;
  caFile: string;
}

/** The names a server certificate for this machine carries: what clients on loopback dial. */
export const loopbackSans = ['IP:127.0.0.1', 'IP:::1', 'DNS:localhost'];

export function openssl(dir: string, args: string[]): string {
  return execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] }).toString('utf8');
}

/** A new CA (`<name>.crt`, `<name>.key`) in `dir`; returns the certificate's path. */
export function makeCa(dir: string, name = 'ca'): string {
  openssl(dir, [
    'req', '-x509', '-new', '-nodes', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1',
    '-keyout', `${name}.key`, '-out', `${name}.crt`, '-days', '30', '-subj', `/CN=punctual test ${name}`,
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
  ]); // prettier-ignore
  return join(dir, `${name}.crt`);
}

/**
 * A certificate signed by CA `ca` (default `ca`) with the subject alternative names `sans`, usable as server and
 * as client (a node certificate is used both ways). Files `<file>.crt` and `<file>.key`.
 */
export function makeCert(dir: string, file: string, sans: string[], ca = 'ca'): CertFiles {
  writeFileSync(join(dir, `${file}.ext`), [
    `subjectAltName=${sans.join(',')}`,
    'extendedKeyUsage=serverAuth,clientAuth',
    'basicConstraints=CA:FALSE',
    'keyUsage=digitalSignature',
  ].join('\n') + '\n'); // prettier-ignore
  openssl(dir, ['req', '-new', '-nodes', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1',
    '-keyout', `${file}.key`, '-out', `${file}.csr`, '-subj', `/CN=${file}`]); // prettier-ignore
  openssl(dir, ['x509', '-req', '-in', `${file}.csr`, '-CA', `${ca}.crt`, '-CAkey', `${ca}.key`, '-CAcreateserial',
    '-out', `${file}.crt`, '-days', '30', '-extfile', `${file}.ext`]); // prettier-ignore
  return { certFile: join(dir, `${file}.crt`), keyFile: join(dir, `${file}.key`), caFile: join(dir, `${ca}.crt`) };
}

/**
 * A node certificate naming `names` (node ids) as URI SANs, plus `extraSans` (e.g. loopbackSans when the same
 * certificate also serves the client API). `file` names the files; default the first id.
 */
export function makeNodeCert(dir: string, names: string[], opts: { ca?: string; file?: string; extraSans?: string[] } = {}): CertFiles {
  const sans = [...names.map((n) => `URI:punctual:node:${n}`), ...(opts.extraSans ?? [])];
  return makeCert(dir, opts.file ?? names[0]!, sans, opts.ca);
}
