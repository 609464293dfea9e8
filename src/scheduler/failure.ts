/**
 * The error class of a failed attempt (docs/api.md, "Dead letters"): a small, stable set a dead letter is filtered
 * and grouped by, derived from the attempt's status code and error text (src/dispatch/classify.ts writes them).
 * Pure and deterministic: every replica derives the same class from the same replicated outcome.
 */

export const errorClasses = ['http_3xx', 'http_4xx', 'http_5xx', 'timeout', 'connection', 'tls', 'target_refused', 'other'] as const;
export type ErrorClass = (typeof errorClasses)[number];

/** TLS failures as Node and undici name them (certificate checks, handshake errors). */
const tlsPattern = /CERT|TLS|SSL|self[- ]signed|certificate|UNABLE_TO_VERIFY|UNABLE_TO_GET_ISSUER/i;
/** System errors and undici's socket errors: no status came because the connection failed or broke. */
const connectionPattern = /^(ECONNREFUSED|ECONNRESET|ECONNABORTED|EPIPE|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH|EHOSTDOWN|ENETDOWN|ETIMEDOUT|UND_ERR_SOCKET|UND_ERR_CLOSED|UND_ERR_CONNECT)/;

export function errorClassOf(statusCode: number | null, error: string | null): ErrorClass {
  if (statusCode !== null) {
    if (statusCode >= 300 && statusCode <= 399) return 'http_3xx';
    if (statusCode >= 400 && statusCode <= 499) return 'http_4xx';
    if (statusCode >= 500) return 'http_5xx';
  }
  if (error === null) return 'other';
  if (error.startsWith('timeout after ')) return 'timeout';
  if (error.startsWith('callback target ')) return 'target_refused';
  if (tlsPattern.test(error)) return 'tls';
  if (connectionPattern.test(error)) return 'connection';
  return 'other';
}
