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

/** delta-seconds: digits only, any number of them (RFC 9110 puts no bound; a huge value is clamped, not ignored). */
const secondsPattern = /^\s*(\d+)\s*$/;

const monthNames = 'jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec';
const dayNames = 'mon|tue|wed|thu|fri|sat|sun';
const timeOfDay = '(\\d{2}):(\\d{2}):(\\d{2})';
/** IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`. */
const imfFixdate = new RegExp(`^(?:${dayNames}), (\\d{2}) (${monthNames}) (\\d{4}) ${timeOfDay} GMT$`, 'i');
/** Obsolete RFC 850: `Sunday, 06-Nov-94 08:49:37 GMT`. */
const rfc850Date = new RegExp(`^(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday), (\\d{2})-(${monthNames})-(\\d{2}) ${timeOfDay} GMT$`, 'i');
/** Obsolete asctime: `Sun Nov  6 08:49:37 1994`. */
const asctimeDate = new RegExp(`^(?:${dayNames}) (${monthNames}) ( \\d|\\d{2}) ${timeOfDay} (\\d{4})$`, 'i');

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
    // Number() of a few hundred digits is Infinity, which the clamp below brings back to the bound.
    delayMs = Number(seconds[1]) * 1000;
  } else {
    const atMs = parseHttpDateMs(text.trim(), nowMs);
    if (atMs === null) return null;
    delayMs = atMs - nowMs;
  }
  return Math.min(limits.retryAfterMsMax, Math.max(0, delayMs));
}

/**
 * An HTTP-date (RFC 9110 section 5.6.7: IMF-fixdate and the two obsolete forms recipients must accept) as epoch
 * ms; null for anything else. Date.parse is not used: it reads nearly any text with a number in it as a date
 * (`x 2027` is January 2027), and such a value must be ignored, not obeyed for an hour.
 */
function parseHttpDateMs(text: string, nowMs: number): number | null {
  let day: string, month: string, year: number, hh: string, mm: string, ss: string;
  let m = imfFixdate.exec(text);
  if (m !== null) {
    [, day, month, , hh, mm, ss] = m;
    year = Number(m[3]);
  } else if ((m = rfc850Date.exec(text)) !== null) {
    [, day, month, , hh, mm, ss] = m;
    // A two-digit year more than 50 years ahead is the latest such year in the past (RFC 9110).
    const nowYear = new Date(nowMs).getUTCFullYear();
    year = nowYear - (nowYear % 100) + Number(m[3]);
    if (year > nowYear + 50) year -= 100;
  } else if ((m = asctimeDate.exec(text)) !== null) {
    [, month, day, hh, mm, ss] = m;
    year = Number(m[6]);
  } else {
    return null;
  }
  const monthIndex = monthNames.split('|').indexOf(month.toLowerCase());
  const d = Number(day);
  if (Number(hh) > 23 || Number(mm) > 59 || Number(ss) > 60) return null;
  const at = new Date(0);
  at.setUTCFullYear(year, monthIndex, d);
  // An impossible date (Feb 30) rolls over into the next month: refused, not moved.
  if (at.getUTCMonth() !== monthIndex || at.getUTCDate() !== d) return null;
  at.setUTCHours(Number(hh), Number(mm), Number(ss), 0);
  return at.getTime();
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
