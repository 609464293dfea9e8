/**
 * Request bodies -> the internal model (src/scheduler/types.ts). Every parser collects all field problems and
 * throws one invalid_argument PunctualError naming them (`errors: [{field, message}]`). Time-dependent values
 * (`delay_ms`, "now") are resolved here with the caller's nowMs; `every_ms` without `start_at` is resolved by apply
 * with its command's nowMs (parseSchedule). Apply never reads a clock.
 */
import { clockLimits, httpLimits, limits } from '../core/limits.js';
import { jobIdPattern, taskNamePattern } from '../core/ids.js';
import { isValidTimezone, validateCron } from '../scheduler/schedule.js';
import { dayNumber } from '../scheduler/calendar.js';
import type { CalendarBody } from './scheduler-api.js';
import {
  callbackMethods,
  checkCalendarRecord,
  checkCallbackSpec,
  dstGapPolicies,
  dstRepeatPolicies,
  headerNamePattern,
  headerValuePattern,
  problemOf,
  redactedSecret,
  reservedHeaders,
} from '../scheduler/check.js';
import type { CallbackSpec, DstPolicy, JobSpec, RetryPolicy, Schedule, ScheduleSpec } from '../scheduler/types.js';
import { PunctualError } from '../core/errors.js';
import { timeMsMax } from './time.js';
import {
  Issues,
  fieldAt,
  onlyKeys,
  readBase64,
  readBool,
  readEnum,
  readInt,
  readNumber,
  readObject,
  readPattern,
  readString,
  readTime,
  utf8Length,
  type JsonObject,
} from './validate.js';
import { splitTaskRetention, withTaskRetention } from './parse-retention.js';

// The model's own vocabulary (src/scheduler/check.ts), shared with the checks every parsed value ends in.
export { callbackMethods, misfirePolicies, overlapPolicies, redactedSecret } from '../scheduler/check.js';

// `spread_offset_ms` is shown by GET (views.ts) and derived from the job id: accepted back, and ignored.
const scheduleKeys = ['at', 'delay_ms', 'cron', 'timezone', 'every_ms', 'start_at', 'exclude', 'dst', 'spread_ms', 'spread_offset_ms'] as const;
const scheduleKinds = ['at', 'delay_ms', 'cron', 'every_ms'] as const;

/**
 * `schedule`: exactly one of at / delay_ms / cron(+timezone) / every_ms(+start_at); absent, null or {} = now.
 * `every_ms` without `start_at` is left without a start: the state machine starts it at the instant its command is
 * stamped with, the one instant its first occurrence is computed from (a preview resolves it at `from`).
 */
export function parseSchedule(value: unknown, field: string, nowMs: number, issues: Issues): ScheduleSpec | undefined {
  if (value === undefined || value === null) return { kind: 'once', atMs: nowMs };
  const given = readObject(value, field, issues);
  if (given === undefined) return undefined;
  onlyKeys(given, scheduleKeys, field, issues);
  // null is the same as absent here too (a serializer that writes every optional field as null must work).
  const o: JsonObject = Object.fromEntries(Object.entries(given).filter(([, v]) => v !== null));
  const kinds = scheduleKinds.filter((k) => o[k] !== undefined);
  if (kinds.length > 1) return issues.add(field, `give exactly one of at, delay_ms, cron, every_ms (got ${kinds.join(', ')})`);
  const kind = kinds[0];
  if (o.timezone !== undefined && kind !== 'cron') issues.add(fieldAt(field, 'timezone'), 'only allowed with cron');
  if (o.start_at !== undefined && kind !== 'every_ms' && kind !== 'cron') {
    issues.add(fieldAt(field, 'start_at'), 'only allowed with every_ms or cron');
  }
  if (o.dst !== undefined && kind !== 'cron') issues.add(fieldAt(field, 'dst'), 'only allowed with cron');
  if (o.spread_ms !== undefined && kind !== 'every_ms' && kind !== 'cron') {
    issues.add(fieldAt(field, 'spread_ms'), 'only allowed with every_ms or cron');
  }
  const exclude = parseExclude(o.exclude, fieldAt(field, 'exclude'), kind, issues);
  const schedule = parseScheduleKind(o, kind, field, nowMs, issues);
  return schedule === undefined || exclude === undefined || schedule.kind === 'once' ? schedule : { ...schedule, exclude };
}

/**
 * `exclude`: the names of 1 to limits.calendarsPerScheduleMax calendars (PUT /v1/calendars/{name}) whose dates a
 * recurring schedule skips. Whether they exist is the state machine's to say, when the job is created.
 */
function parseExclude(value: unknown, field: string, kind: string | undefined, issues: Issues): string[] | undefined {
  if (value === undefined) return undefined;
  if (kind !== 'cron' && kind !== 'every_ms') return issues.add(field, 'only allowed with cron or every_ms');
  if (!Array.isArray(value) || value.length === 0 || value.length > limits.calendarsPerScheduleMax) {
    return issues.add(field, `must be an array of 1 to ${limits.calendarsPerScheduleMax} calendar names`);
  }
  const names: string[] = [];
  value.forEach((v: unknown, i) => {
    const name = readPattern(v, `${field}[${i}]`, taskNamePattern, '[A-Za-z0-9._-]{1,128}', issues);
    if (name === undefined) return;
    if (names.includes(name)) issues.add(`${field}[${i}]`, 'is named twice');
    names.push(name);
  });
  return names.length === value.length ? names : undefined;
}

function parseScheduleKind(o: JsonObject, kind: (typeof scheduleKinds)[number] | undefined, field: string, nowMs: number, issues: Issues): ScheduleSpec | undefined {
  switch (kind) {
    case undefined:
      return { kind: 'once', atMs: nowMs };
    case 'at': {
      const atMs = readTime(o.at, fieldAt(field, 'at'), issues);
      return atMs === undefined ? undefined : { kind: 'once', atMs };
    }
    case 'delay_ms': {
      const delayMs = readInt(o.delay_ms, fieldAt(field, 'delay_ms'), 0, Math.max(0, timeMsMax - nowMs), issues);
      return delayMs === undefined ? undefined : { kind: 'once', atMs: nowMs + delayMs };
    }
    case 'cron':
      return parseCron(o, field, issues);
    case 'every_ms': {
      const everyMs = readInt(o.every_ms, fieldAt(field, 'every_ms'), limits.everyMsMin, limits.everyMsMax, issues);
      const startAtMs = o.start_at === undefined ? null : readTime(o.start_at, fieldAt(field, 'start_at'), issues);
      const spread = readSpread(o.spread_ms, field, everyMs, issues);
      if (everyMs === undefined || startAtMs === undefined || spread === undefined) return undefined;
      return startAtMs === null ? { kind: 'every', everyMs, startAtMs: null, ...spread } : { kind: 'every', everyMs, startAtMs, ...spread };
    }
  }
}

function parseCron(o: JsonObject, field: string, issues: Issues): Schedule | undefined {
  const cron = readString(o.cron, fieldAt(field, 'cron'), httpLimits.cronExpressionLengthMax, issues);
  const timezone =
    o.timezone === undefined ? 'UTC' : readString(o.timezone, fieldAt(field, 'timezone'), httpLimits.timezoneLengthMax, issues);
  const startAtMs = o.start_at === undefined ? null : readTime(o.start_at, fieldAt(field, 'start_at'), issues);
  const dst = o.dst === undefined ? null : readDst(o.dst, fieldAt(field, 'dst'), issues);
  const spread = readSpread(o.spread_ms, field, undefined, issues);
  if (cron === undefined || timezone === undefined || startAtMs === undefined || dst === undefined || spread === undefined) return undefined;
  const problem = validateCron(cron, timezone);
  if (problem !== null) {
    // validateCron names `schedule.cron` / `schedule.timezone`; re-root it under this schedule's path.
    const leaf = problem.field.slice(problem.field.lastIndexOf('.') + 1);
    return issues.add(fieldAt(field, leaf), problem.message);
  }
  return { kind: 'cron', cron, timezone, startAtMs, ...(dst === null ? {} : { dst }), ...spread };
}

/** `schedule.dst`: `{gap, repeat}`, each optional (shift_forward, first); null = absent = cron-parser's rules. */
function readDst(value: unknown, field: string, issues: Issues): DstPolicy | undefined {
  const o = readObject(value, field, issues);
  if (o === undefined) return undefined;
  onlyKeys(o, ['gap', 'repeat'], field, issues);
  const gap = o.gap == null ? 'shift_forward' : readEnum(o.gap, fieldAt(field, 'gap'), dstGapPolicies, issues);
  const repeat = o.repeat == null ? 'first' : readEnum(o.repeat, fieldAt(field, 'repeat'), dstRepeatPolicies, issues);
  return gap === undefined || repeat === undefined ? undefined : { gap, repeat };
}

/** `schedule.spread_ms`: 1 to limits.spreadMsMax, and at most every_ms; {} when absent, undefined when invalid. */
function readSpread(value: unknown, field: string, everyMs: number | undefined, issues: Issues): { spreadMs?: number } | undefined {
  if (value === undefined) return {};
  const max = everyMs === undefined ? limits.spreadMsMax : Math.min(limits.spreadMsMax, everyMs);
  const spreadMs = readInt(value, fieldAt(field, 'spread_ms'), 1, max, issues);
  return spreadMs === undefined ? undefined : { spreadMs };
}

const callbackKeys = [
  'url', 'method', 'headers', 'timeout_ms', 'retry', 'signing_secret', 'signing_secret_next', 'max_concurrency',
] as const;

/**
 * Why the node refuses a callback URL whose host is a literal address (the SSRF guard, src/dispatch/
 * target-policy.ts), or null. Names are only checked when connecting: what they resolve to may change.
 */
export type CallbackUrlCheck = (url: string) => string | null;

/** A task body (PUT /v1/tasks/{name}) or a job's inline `callback`. */
export function parseCallback(value: unknown, prefix: string, issues: Issues, urlCheck?: CallbackUrlCheck): CallbackSpec | undefined {
  const o = readObject(value, prefix, issues);
  if (o === undefined) return undefined;
  onlyKeys(o, callbackKeys, prefix, issues);
  const url = parseUrl(o.url, fieldAt(prefix, 'url'), issues, urlCheck);
  const method = parseMethod(o.method, fieldAt(prefix, 'method'), issues);
  const headers = o.headers == null ? {} : parseHeaders(o.headers, fieldAt(prefix, 'headers'), issues);
  const timeoutMs =
    o.timeout_ms == null
      ? limits.callbackTimeoutMsDefault
      : readInt(o.timeout_ms, fieldAt(prefix, 'timeout_ms'), 1, limits.callbackTimeoutMsMax, issues);
  const retry = parseRetry(o.retry, fieldAt(prefix, 'retry'), issues);
  const signingSecret = parseSecret(o.signing_secret, fieldAt(prefix, 'signing_secret'), issues);
  const signingSecretNext = parseSecret(o.signing_secret_next, fieldAt(prefix, 'signing_secret_next'), issues);
  if (signingSecretNext != null && o.signing_secret == null) {
    issues.add(fieldAt(prefix, 'signing_secret_next'), 'needs signing_secret (the current secret) as well');
  } else if (signingSecretNext != null && signingSecretNext === signingSecret) {
    issues.add(fieldAt(prefix, 'signing_secret_next'), 'must differ from signing_secret');
  }
  const maxConcurrency =
    o.max_concurrency == null
      ? limits.maxConcurrencyDefault
      : readInt(o.max_concurrency, fieldAt(prefix, 'max_concurrency'), 1, limits.maxConcurrencyMax, issues);
  if (url === undefined || method === undefined || headers === undefined || timeoutMs === undefined) return undefined;
  if (retry === undefined || signingSecret === undefined || maxConcurrency === undefined) return undefined;
  if (signingSecretNext === undefined) return undefined;
  const spec: CallbackSpec = { url, method, headers, timeoutMs, retry, signingSecret, maxConcurrency };
  // Only when set: a spec without rotation stays byte for byte what it was before the field existed.
  if (signingSecretNext !== null) spec.signingSecretNext = signingSecretNext;
  return spec;
}

function parseUrl(value: unknown, field: string, issues: Issues, urlCheck?: CallbackUrlCheck): string | undefined {
  if (value === undefined || value === null) return issues.add(field, 'is required');
  const text = readString(value, field, limits.urlLengthMax, issues);
  if (text === undefined) return undefined;
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return issues.add(field, 'must be an absolute http or https URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return issues.add(field, 'must be an absolute http or https URL');
  if (!/^https?:\/\//i.test(text)) return issues.add(field, 'must be an absolute http or https URL (scheme://host/...)');
  if (url.username !== '' || url.password !== '') return issues.add(field, 'must not carry credentials (use headers)');
  // Stored (and answered) as the URL the callback will really request: WHATWG-normalized (host lower case and
  // punycode, path percent-encoded), so a GET of the task shows what the receiver will see.
  if (url.href.length > limits.urlLengthMax) return issues.add(field, `must be at most ${limits.urlLengthMax} characters once normalized`);
  const refused = urlCheck?.(url.href) ?? null;
  if (refused !== null) return issues.add(field, refused);
  return url.href;
}

function parseMethod(value: unknown, field: string, issues: Issues): string | undefined {
  if (value === undefined || value === null) return 'POST';
  if (typeof value !== 'string') return issues.add(field, 'must be a string');
  return readEnum(value.toUpperCase(), field, callbackMethods, issues);
}

function parseHeaders(value: unknown, field: string, issues: Issues): Record<string, string> | undefined {
  const o = readObject(value, field, issues);
  if (o === undefined) return undefined;
  const out: Record<string, string> = {};
  let bytes = 0;
  const before = issues.list.length;
  for (const [rawName, rawValue] of Object.entries(o)) {
    const name = rawName.toLowerCase();
    const f = `${field}.${rawName}`;
    if (!headerNamePattern.test(rawName)) issues.add(f, 'is not a valid header name');
    else if (name === '__proto__') issues.add(f, 'is not accepted as a header name'); // would be lost on an object
    else if (reservedHeaders.has(name) || name.startsWith('x-punctual-')) issues.add(f, 'is set by Punctual and may not be given');
    else if (Object.hasOwn(out, name)) issues.add(f, 'is given twice (header names are case-insensitive)');
    else if (typeof rawValue !== 'string') issues.add(f, 'must be a string');
    else if (!headerValuePattern.test(rawValue)) issues.add(f, 'must not contain control characters');
    else out[name] = rawValue.trim();
    bytes += utf8Length(name) + (typeof rawValue === 'string' ? utf8Length(rawValue) : 0);
  }
  if (Object.keys(o).length > limits.callbackHeadersMax) issues.add(field, `at most ${limits.callbackHeadersMax} headers`);
  if (bytes > limits.callbackHeaderBytesMax) issues.add(field, `at most ${limits.callbackHeaderBytesMax} bytes of names and values`);
  return issues.list.length === before ? out : undefined;
}

const retryKeys = ['max_attempts', 'initial_backoff_ms', 'max_backoff_ms', 'multiplier', 'jitter'] as const;

function parseRetry(value: unknown, field: string, issues: Issues): RetryPolicy | undefined {
  const o = value == null ? {} : readObject(value, field, issues);
  if (o === undefined) return undefined;
  onlyKeys(o, retryKeys, field, issues);
  const backoffMax = limits.retryBackoffMsMax;
  const r = {
    maxAttempts: orDefault(o.max_attempts, limits.retryMaxAttemptsDefault, (v) =>
      readInt(v, `${field}.max_attempts`, 1, limits.retryMaxAttemptsMax, issues)),
    initialBackoffMs: orDefault(o.initial_backoff_ms, limits.retryInitialBackoffMsDefault, (v) =>
      readInt(v, `${field}.initial_backoff_ms`, 0, backoffMax, issues)),
    maxBackoffMs: orDefault(o.max_backoff_ms, limits.retryMaxBackoffMsDefault, (v) =>
      readInt(v, `${field}.max_backoff_ms`, 0, backoffMax, issues)),
    multiplier: orDefault(o.multiplier, limits.retryMultiplierDefault, (v) =>
      readNumber(v, `${field}.multiplier`, 1, limits.retryMultiplierMax, issues)),
    jitter: orDefault(o.jitter, true, (v) => readBool(v, `${field}.jitter`, issues)),
  };
  if (r.maxAttempts === undefined || r.initialBackoffMs === undefined || r.maxBackoffMs === undefined) return undefined;
  if (r.multiplier === undefined || r.jitter === undefined) return undefined;
  if (r.maxBackoffMs < r.initialBackoffMs) return issues.add(`${field}.max_backoff_ms`, 'must be at least initial_backoff_ms');
  return r as RetryPolicy;
}

/** An absent or null field takes its default; anything else goes through the reader. */
function orDefault<T>(value: unknown, fallback: T, read: (v: unknown) => T | undefined): T | undefined {
  return value === undefined || value === null ? fallback : read(value);
}

const whsecPattern = /^whsec_([A-Za-z0-9+/]+={0,2})$/;

/**
 * null = no secret; undefined = invalid. A `whsec_<base64>` secret (Standard Webhooks) is measured by its
 * decoded key; any other by its UTF-8 bytes.
 */
function parseSecret(value: unknown, field: string, issues: Issues): string | null | undefined {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string' || value.length === 0) return issues.add(field, 'must be a non-empty string');
  if (utf8Length(value) > limits.signingSecretBytesMax) return issues.add(field, `must be at most ${limits.signingSecretBytesMax} bytes`);
  if (value === redactedSecret) return issues.add(field, 'is the redacted placeholder "***"; give the real secret or omit it');
  const min = limits.signingSecretBytesMin;
  if (value.startsWith('whsec_')) {
    const m = whsecPattern.exec(value);
    if (m === null || m[1]!.length % 4 === 1) return issues.add(field, 'a whsec_ secret must be whsec_ followed by base64');
    const keyBytes = Buffer.from(m[1]!, 'base64').length;
    if (keyBytes < min) return issues.add(field, `must decode to at least ${min} bytes (got ${keyBytes})`);
    return value;
  }
  if (utf8Length(value) < min) return issues.add(field, `must be at least ${min} bytes`);
  return value;
}

/** PUT /v1/tasks/{name}: the callback fields only (name comes from the path; created_at/updated_at are read-only). */
export function parseTaskBody(body: unknown, urlCheck?: CallbackUrlCheck): CallbackSpec {
  const issues = new Issues();
  // retention_ms belongs to the task, not to a callback (parse-retention.ts): read apart, added after the checks.
  const { callback, retentionMs } = splitTaskRetention(body, issues);
  const spec = parseCallback(callback, '', issues, urlCheck);
  if (spec === undefined || !issues.ok) throw issues.toError();
  return withTaskRetention(endsInModel(spec, () => checkCallbackSpec(spec, '', true)), retentionMs);
}

/**
 * Every parsed task, job and patch ends in the model's checks (src/scheduler/check.ts): the same ones a leader
 * runs on an operation forwarded by a peer and the log's decoder runs on every entry, so there is one validation
 * path. The parsers above refuse first, with the API's messages; this never refuses what they accepted.
 */
export function endsInModel<T>(value: T, check: () => void): T {
  const problem = problemOf(check);
  if (problem !== null) throw new PunctualError('invalid_argument', `${problem.field}: ${problem.message}`, [problem]);
  return value;
}

const calendarKeys = ['timezone', 'dates', 'ranges', 'description'] as const;

/**
 * PUT /v1/calendars/{name}: `{"timezone" (default UTC), "dates": ["YYYY-MM-DD"], "ranges": [{"from", "to"}],
 * "description"}`, at most limits.calendarEntriesMax dates and ranges in all. Dates are stored sorted, once each.
 */
export function parseCalendarBody(body: unknown, name: string): CalendarBody {
  const issues = new Issues();
  const o = readObject(body, 'body', issues) ?? {};
  onlyKeys(o, calendarKeys, '', issues);
  const timezone = o.timezone == null ? 'UTC' : readString(o.timezone, 'timezone', httpLimits.timezoneLengthMax, issues);
  if (timezone !== undefined && !isValidTimezone(timezone)) issues.add('timezone', `unknown time zone ${JSON.stringify(timezone)}`);
  const entries = (v: unknown, field: string): unknown[] => {
    if (v == null) return [];
    if (!Array.isArray(v)) return issues.add(field, 'must be an array') ?? [];
    return v;
  };
  const givenDates = entries(o.dates, 'dates');
  const givenRanges = entries(o.ranges, 'ranges');
  if (givenDates.length + givenRanges.length > limits.calendarEntriesMax) {
    issues.add('dates', `at most ${limits.calendarEntriesMax} dates and ranges in all (got ${givenDates.length + givenRanges.length})`);
  }
  const date = (v: unknown, field: string): number | undefined => {
    const day = typeof v === 'string' ? dayNumber(v) : null;
    return day === null ? issues.add(field, 'must be a date YYYY-MM-DD') : day;
  };
  const days = new Map<number, string>();
  givenDates.forEach((v, i) => {
    if (date(v, `dates[${i}]`) !== undefined) days.set(dayNumber(v as string)!, v as string);
  });
  const ranges: CalendarBody['ranges'] = [];
  givenRanges.forEach((v, i) => {
    const f = `ranges[${i}]`;
    const r = readObject(v, f, issues);
    if (r === undefined) return;
    onlyKeys(r, ['from', 'to'], f, issues);
    const from = date(r.from, `${f}.from`);
    const to = date(r.to, `${f}.to`);
    if (from === undefined || to === undefined) return;
    if (to < from) return void issues.add(`${f}.to`, 'must not be before from');
    ranges.push({ from: r.from as string, to: r.to as string });
  });
  const description = o.description == null ? null : readString(o.description, 'description', limits.calendarDescriptionLengthMax, issues);
  if (!issues.ok || timezone === undefined || description === undefined) throw issues.toError();
  const dates = [...days.entries()].sort((a, b) => a[0] - b[0]).map(([, d]) => d);
  const calendar: CalendarBody = { timezone, dates, ranges, description };
  return endsInModel(calendar, () => checkCalendarRecord({ ...calendar, name, createdAtMs: 0, updatedAtMs: 0 }, '', true));
}

export function parseTaskName(name: string): string {
  const issues = new Issues();
  readPattern(name, 'name', taskNamePattern, '[A-Za-z0-9._-]{1,128}', issues);
  issues.throwIfAny();
  return name;
}

export function parseJobId(id: string, field = 'id'): string {
  const issues = new Issues();
  readPattern(id, field, jobIdPattern, '[A-Za-z0-9._:-]{1,128}', issues);
  issues.throwIfAny();
  return id;
}

/**
 * POST /v1/clock:advance: exactly one of `by_ms` (1..clockLimits.advanceByMsMax) or `to` (a time). Whether `to`
 * is not in the past is the node's to say: it reads its clock when the advance starts (advances run in turn).
 */
export function parseClockAdvance(body: unknown): { byMs: number } | { toMs: number } {
  const issues = new Issues();
  const o = readObject(body, '', issues);
  if (o === undefined) throw issues.toError();
  onlyKeys(o, ['by_ms', 'to'], '', issues);
  if ((o.by_ms === undefined) === (o.to === undefined)) issues.add('body', 'give exactly one of by_ms or to');
  const byMs = o.by_ms === undefined ? undefined : readInt(o.by_ms, 'by_ms', 1, clockLimits.advanceByMsMax, issues);
  const toMs = o.to === undefined ? undefined : readTime(o.to, 'to', issues);
  issues.throwIfAny();
  return byMs !== undefined ? { byMs } : { toMs: toMs! };
}
