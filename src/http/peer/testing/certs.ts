/**
 * Test fixture (not product code): a CA and node certificates made with the openssl command line, exactly as
 * docs/security.md tells an operator to make them (SAN URI:punctual:node:<id>).
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface CertFiles {
  certFile: string;
  keyFile: string;
  caFile: string;
}

function openssl(dir: string, args: string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
}

/** A new CA (`<name>.crt`, `<name>.key`) in `dir`; returns the certificate's path. */
export function makeCa(dir: string, name = 'ca'): string {
  openssl(dir, [
    'req', '-x509', '-new', '-nodes', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1',
    '-keyout', `${name}.key`, '-out', `${name}.crt`, '-days', '30', '-subj', `/CN=punctual test ${name}`,
  ]);
  return join(dir, `${name}.crt`);
}

/**
 * A node certificate signed by CA `ca`, naming `names` (node ids) as URI SANs. `file` names the files
 * (`<file>.crt`, `<file>.key`); default the first id.
 */
export function makeNodeCert(dir: string, names: string[], opts: { ca?: string; file?: string } = {}): CertFiles {
  const ca = opts.ca ?? 'ca';
  const file = opts.file ?? names[0]!;
  const ext = join(dir, `${file}.ext`);
  writeFileSync(ext, [
    `subjectAltName=${names.map((n) => `URI:punctual:node:${n}`).join(',')}`,
    'extendedKeyUsage=serverAuth,clientAuth',
    'basicConstraints=CA:FALSE',
    'keyUsage=digitalSignature',
  ].join('\n') + '\n');
  openssl(dir, ['req', '-new', '-nodes', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1',
    '-keyout', `${file}.key`, '-out', `${file}.csr`, '-subj', `/CN=${names[0]}`]);
  openssl(dir, ['x509', '-req', '-in', `${file}.csr`, '-CA', `${ca}.crt`, '-CAkey', `${ca}.key`, '-CAcreateserial',
    '-out', `${file}.crt`, '-days', '30', '-extfile', `${file}.ext`]);
  return { certFile: join(dir, `${file}.crt`), keyFile: join(dir, `${file}.key`), caFile: join(dir, `${ca}.crt`) };
}
