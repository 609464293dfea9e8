/**
 * Every way a call fails, as one error class: the server answered with a problem (status, code, field, reason,
 * retryAfterMs from docs/api.md), it answered something that is not the API (a proxy's page), or it could not be
 * reached or did not answer in time (status 0). The retry decision reads these fields and nothing else.
 */
import { reasonProvesNotApplied } from '../core/errors.js';
import type { Problem } from './types.js';

/** The `reason` of a 503 or 429 (docs/api.md, "503 and 429: the reason, and what is safe to repeat"). */
export type { FailureReason } from '../core/errors.js';

/**
 * Whether a reason proves the request was never proposed (or never applies), so any request may be repeated:
 * the node's own rule, plus `read_timeout`, which only a read meets (always safe to repeat).
 */
function provesNotApplied(reason: string): boolean {
  return reason === 'read_timeout' || reasonProvesNotApplied(reason);
}

/** Codes of the client itself, for calls that got no API answer. */
export type ClientErrorCode = 'unreachable' | 'timeout' | 'bad_response' | 'aborted';

export interface PunctualErrorInit {
  status: number;
  code: string;
  message: string;
  method: string;
  url: string;
  problem?: Problem | null;
  bodyText?: string;
  retryAfterMs?: number | null;
  /** True when the request certainly never reached the server (connection refused, DNS failure). */
  notSent?: boolean;
  cause?: unknown;
}

export class PunctualError extends Error {
  override name = 'PunctualError';
  /** The HTTP status; 0 when no answer came (unreachable, timeout, aborted). */
  readonly status: number;
  /** The problem's stable `code` (`invalid_argument`, `rate_limited`, ...), or a ClientErrorCode. */
  readonly code: string;
  /** The first field error's field (`schedule.cron`, `jobs[3].task`), null when none. */
  readonly field: string | null;
  /** Every field error of a 400. */
  readonly errors: ReadonlyArray<{ field: string; message: string }>;
  /** What a 503 or 429 proves about a write (FailureReason), null when the answer gave none. */
  readonly reason: string | null;
  /** The answer's Retry-After in ms, null without one. */
  readonly retryAfterMs: number | null;
  /** The problem's `detail`, or the message. */
  readonly detail: string;
  /** The problem+json as answered, null when the answer was not one. */
  readonly problem: Problem | null;
  /** The answer's body text (at most what was read), '' without an answer. */
  readonly bodyText: string;
  readonly method: string;
  readonly url: string;
  /** The request certainly never reached the server. */
  readonly notSent: boolean;

  constructor(init: PunctualErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.status = init.status;
    this.code = init.code;
    this.problem = init.problem ?? null;
    const errors = Array.isArray(this.problem?.errors) ? this.problem.errors : [];
    this.errors = errors.filter((e) => typeof e === 'object' && e !== null && typeof e.field === 'string');
    this.field = this.errors[0]?.field ?? null;
    this.reason = typeof this.problem?.reason === 'string' ? this.problem.reason : null;
    this.retryAfterMs = init.retryAfterMs ?? null;
    this.detail = typeof this.problem?.detail === 'string' ? this.problem.detail : init.message;
    this.bodyText = init.bodyText ?? '';
    this.method = init.method;
    this.url = init.url;
    this.notSent = init.notSent === true;
  }

  /** The failure proves the request was not applied: repeating it is safe whatever it was. */
  get provesNotApplied(): boolean {
    if (this.notSent) return true;
    if (this.status === 429) return true; // every 429 reason says "was not proposed"
    return this.status === 503 && this.reason !== null && provesNotApplied(this.reason);
  }

  /**
   * The outcome is unknown but the request may be repeated if it is idempotent (docs/api.md: a 503 without a
   * proof, a 504, an answer that never came). 4xx other than 429, 500 and 507 are not transient.
   */
  get transient(): boolean {
    if (this.provesNotApplied) return true;
    return this.status === 503 || this.status === 504 || this.code === 'unreachable' || this.code === 'timeout';
  }
}

/** Parses a problem+json body; null when the text is not one (a proxy's page, an empty body). */
export function parseProblem(text: string): Problem | null {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return null;
  const problem = value as Problem;
  return typeof problem.code === 'string' ? problem : null;
}

/** Retry-After in seconds or as an HTTP date, in ms from nowMs; null when absent or unparsable. */
export function parseRetryAfter(value: string | undefined, nowMs: number): number | null {
  if (value === undefined) return null;
  const text = value.trim();
  if (/^\d{1,9}$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  if (Number.isNaN(at) || !/[a-z]/i.test(text)) return null;
  return Math.max(0, at - nowMs);
}
