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

/**
 * Why a write failed `unavailable` (503) or `rate_limited` (429), carried on the error and as the `reason` member of
 * its problem+json: what the failure proves about the write decides whether repeating it is safe.
 * Proven not applied: not_leader, no_leader, shutting_down, proposal_refused, proposal_lost, and the back-pressure
 * reasons (*_full). Outcome unknown (the write may still apply): proposal_timeout, snapshot_overtook, interrupted,
 * leader_unreachable, read_timeout.
 */
export type FailureReason =
  | 'not_leader'
  | 'no_leader'
  | 'shutting_down'
  | 'proposal_refused'
  | 'proposal_lost'
  | 'proposal_timeout'
  | 'snapshot_overtook'
  | 'interrupted'
  | 'leader_unreachable'
  | 'read_timeout'
  | 'proposer_queue_full'
  | 'apply_queue_full'
  | 'wheel_full';

const provenNotApplied: ReadonlySet<FailureReason> = new Set<FailureReason>([
  'not_leader',
  'no_leader',
  'shutting_down',
  'proposal_refused',
  'proposal_lost',
  'proposer_queue_full',
  'apply_queue_full',
  'wheel_full',
]);

/** The failure proves the write never applied and never will: repeating it cannot apply it twice. */
export function provesNotApplied(err: unknown): boolean {
  return err instanceof PunctualError && err.reason !== null && provenNotApplied.has(err.reason);
}

/** The same proof from a reason as a problem+json carries it (the package's client reads answers, not errors). */
export function reasonProvesNotApplied(reason: string): boolean {
  return provenNotApplied.has(reason as FailureReason);
}

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
    readonly reason: FailureReason | null = null,
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
  /** Why a 503 or 429 happened (FailureReason), when known. */
  reason?: FailureReason;
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
  if (e.reason !== null) problem.reason = e.reason;
  return problem;
}
