/**
 * Peer TLS material: this node's certificate and key and the CA that signs every node certificate, read from PEM
 * files at start and again on SIGHUP. Loading checks what would otherwise fail on the first connection: the key
 * matches the certificate, the CA parses, and the certificate names this node (SAN `URI:punctual:node:<id>`).
 */
import { readFileSync } from 'node:fs';
import { createSecureContext, type PeerCertificate } from 'node:tls';
import { X509Certificate } from 'node:crypto';
import { certNodeIds, certNodeUriPrefix } from './auth.js';

export interface PeerTlsFiles {
  certFile: string;
  keyFile: string;
  caFile: string;
}

export interface PeerTlsMaterial {
  readonly cert: Buffer;
  readonly key: Buffer;
  readonly ca: Buffer;
  /** For the log: the certificate's SHA-256 fingerprint and end of validity. */
  readonly fingerprint: string;
  readonly validTo: string;
}

function read(flag: string, file: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new Error(`${flag}: cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

/** Reads and checks the three files; throws an Error that names the file or the problem. */
export function loadPeerTls(files: PeerTlsFiles, nodeId: string): PeerTlsMaterial {
  const cert = read('--peer-tls-cert-file', files.certFile);
  const key = read('--peer-tls-key-file', files.keyFile);
  const ca = read('--peer-tls-ca-file', files.caFile);
  try {
    createSecureContext({ cert, key, ca });
  } catch (err) {
    throw new Error(`peer TLS files do not make a usable TLS context: ${(err as Error).message}`);
  }
  let x509: X509Certificate;
  try {
    x509 = new X509Certificate(cert);
  } catch (err) {
    throw new Error(`--peer-tls-cert-file: not a PEM certificate: ${(err as Error).message}`);
  }
  const names = certNodeIds({ subjectaltname: x509.subjectAltName } as PeerCertificate);
  if (!names.has(nodeId)) {
    throw new Error(`--peer-tls-cert-file: the certificate does not name this node: it needs the SAN URI:${certNodeUriPrefix}${nodeId}`);
  }
  return { cert, key, ca, fingerprint: x509.fingerprint256, validTo: x509.validTo };
}
