/**
 * The error catalog (Fastify lib/errors.js style): stable codes, one HTTP status each, mapped to
 * application/problem+json (RFC 9457) in one place: toProblem().
 */

export const errorCatalog = {
  invalid_argument: { status: 400, title: 'Invalid argument' },
  unauthorized: { status: 401, title: 'Unauthorized' },
  forbidden: { status: 403, title: 'Forbidden' },
  not_found: { status: 404, title: 'Not found' },
  method_not_allowed: { status: 405, title: 'Method not allowed' },
  conflict: { status: 409, title: 'Conflict' },
  payload_too_large: { status: 413, title: 'Payload too large' },
  unsupported_media_type: { status: 415, title: 'Unsupported media type' },
  rate_limited: { status: 429, title: 'Too many requests' },
  internal: { status: 500, title: 'Internal error' },
  unavailable: { status: 503, title: 'Service unavailable' },
  timeout: { status: 504, title: 'Timed out' },
  insufficient_storage: { status: 507, title: 'Insufficient storage' },
} as const;

export type ErrorCode = keyof typeof errorCatalog;

export interface FieldError {
  field: string;
  message: string;
}

export class PunctualError extends Error {
  override name = 'PunctualError';
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly errors: FieldError[] = [],
  ) {
    super(message);
    this.status = errorCatalog[code].status;
  }
}

/** A validation error on one field. */
export function invalid(field: string, message: string): PunctualError {
  return new PunctualError('invalid_argument', `${field}: ${message}`, [{ field, message }]);
}

export function notFound(what: string, id: string): PunctualError {
  return new PunctualError('not_found', `${what} ${JSON.stringify(id)} not found`);
}

export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: ErrorCode;
  errors?: FieldError[];
}

/** The one mapping from an error to its problem+json body; unknown errors become `internal`. */
export function toProblem(err: unknown): Problem {
  const e = err instanceof PunctualError ? err : new PunctualError('internal', 'internal error');
  const entry = errorCatalog[e.code];
  const problem: Problem = {
    type: `https://punctual.dev/problems/${e.code.replace(/_/g, '-')}`,
    title: entry.title,
    status: entry.status,
    detail: e.message,
    code: e.code,
  };
  if (e.errors.length > 0) problem.errors = e.errors;
  return problem;
}
