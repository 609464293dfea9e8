/**
 * How an attempt's result maps to an outcome kind (docs/api.md, "What counts as an answer"): 2xx succeeded;
 * 408, 429, 5xx, connection, DNS, protocol errors and timeouts retryable; every other status (3xx included:
 * redirects are not followed) permanent. Pure functions, so the rules are tested without a socket.
 */
import { limits } from '../core/limits.js';

export type OutcomeKind = 'succeeded' | 'retryable' | 'permanent';

export function classifyStatus(statusCode: number): OutcomeKind {
  if (statusCode >= 200 && statusCode <= 299) return 'succeeded';
  if (statusCode === 408 || statusCode === 429 || statusCode >= 500) return 'retryable';
  return 'permanent';
}

const secondsPattern = /^\s*(\d{1,12})\s*$/;

/**
 * A Retry-After value (delta-seconds or an HTTP date) as milliseconds from nowMs, clamped to
 * [0, limits.retryAfterMsMax]; null when absent or unparsable. A date in the past means "now": 0.
 */
export function parseRetryAfterMs(value: string | string[] | undefined, nowMs: number): number | null {
  const text = Array.isArray(value) ? value[0] : value;
  if (text === undefined || text.length === 0) return null;
  const seconds = secondsPattern.exec(text);
  let delayMs: number;
  if (seconds !== null) {
    delayMs = Number(seconds[1]) * 1000;
  } else {
    // Only dates that name a weekday or month: Date.parse also accepts bare numbers like "1.5", not HTTP dates.
    if (!/[a-z]/i.test(text)) return null;
    const atMs = Date.parse(text);
    if (Number.isNaN(atMs)) return null;
    delayMs = atMs - nowMs;
  }
  return Math.min(limits.retryAfterMsMax, Math.max(0, delayMs));
}

/** Error codes that no retry can fix: the request itself is wrong (bad header, unsupported option). */
const permanentErrorCodes = new Set(['UND_ERR_INVALID_ARG', 'UND_ERR_NOT_SUPPORTED', 'ERR_INVALID_URL']);

const errorTextLengthMax = 200;
/** TargetRefusedError's code (target-policy.ts). */
export const targetRefusedCode = 'PUNCTUAL_TARGET_REFUSED';
/** errno-style codes (ECONNRESET, EAI_AGAIN), not Node's ERR_* codes. */
const systemErrorPattern = /^E(?!RR_)[A-Z0-9_]+$/;

export interface ErrorVerdict {
  kind: 'retryable' | 'permanent';
  /** Short text: a system error code alone ('ECONNRESET'), else `code: message` (or `name: message`). */
  error: string;
}

/**
 * A transport error as an outcome. System errors (ECONNREFUSED, ECONNRESET, ENOTFOUND, EAI_AGAIN, ...), undici
 * socket errors and HTTP parser errors (a target answering garbage) are retryable: they say nothing about the
 * request, and the retry policy bounds the attempts.
 */
export function classifyError(err: unknown): ErrorVerdict {
  const code = errorCode(err);
  const message = err instanceof Error ? err.message : String(err);
  // The SSRF guard refused the address: no retry can change that, and the message says why.
  if (code === targetRefusedCode) return { kind: 'permanent', error: truncate(message) };
  if (code !== null && systemErrorPattern.test(code)) {
    return { kind: 'retryable', error: code };
  }
  // No code (undici's HTTPParserError often has none): the error's class names the problem instead.
  const label = code ?? (err instanceof Error && err.name !== 'Error' ? err.name : null);
  const text = truncate(label === null ? message : `${label}: ${message}`);
  if (code !== null && permanentErrorCodes.has(code)) return { kind: 'permanent', error: text };
  return { kind: 'retryable', error: text };
}

function errorCode(err: unknown): string | null {
  if (typeof err !== 'object' || err === null) return null;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && code.length > 0 ? code : null;
}

function truncate(text: string): string {
  return text.length <= errorTextLengthMax ? text : text.slice(0, errorTextLengthMax - 3) + '...';
}
