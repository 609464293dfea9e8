/**
 * The shape of the internal model, checked with bounds: every value that enters a log goes through here. The
 * client API's parsers (src/http) end in these checks, a leader runs them on every operation forwarded by a peer,
 * and the log's decoder (codec.ts) runs them on every entry it reads. Types, sizes and counts stay within
 * src/core/limits.ts; a problem names the field as the client API names it (`jobs[3].payload`,
 * `callback.retry.max_attempts`), so a forwarded operation is refused with the same 400 and field as the API.
 * Pure: no IO, no clock.
 */
import { httpLimits, limits, retentionLimits, schedulerLimits, stallLimits } from '../core/limits.js';
import { jobIdPattern, nodeIdPattern, taskNamePattern } from '../core/ids.js';
import type { FieldError } from '../core/errors.js';
import { validateCron, isValidTimezone } from './schedule.js';
import { dayNumber } from './calendar.js';

/** One field of a value that does not have the model's shape. */
export class ShapeError extends Error {
  override name = 'ShapeError';
  constructor(
    readonly field: string,
    readonly detail: string,
  ) {
    super(`${field}: ${detail}`);
  }

  toFieldError(): FieldError {
    return { field: this.field, message: this.detail };
  }
}

/** 1970-01-01 .. 9999-12-31T23:59:59.999Z, the times the API accepts and renders. */
export const modelTimeMsMax = 253_402_300_799_999;
export const callbackMethods = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;
export const misfirePolicies = ['fire_once', 'skip', 'fire_all'] as const;
export const overlapPolicies = ['allow', 'skip', 'buffer_one'] as const;
/** A GET of a task or job shows a set secret as this; it is never stored. */
export const redactedSecret = '***';
/** Names the dispatcher sets itself (framing, routing, our own headers): a task may not override them. */
export const reservedHeaders: ReadonlySet<string> = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'transfer-encoding',
  'te', 'trailer', 'upgrade', 'host', 'content-length', 'x-deduplication-key',
  // Standard Webhooks signature headers (src/dispatch/signature.ts).
  'webhook-id', 'webhook-timestamp', 'webhook-signature',
]);
export const headerNamePattern = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
export const headerValuePattern = /^[\t\x20-\x7e\x80-\xff]*$/;
/** A request digest is a hex or base64url hash; generous, but bounded. */
const digestLengthMax = 256;
/** Items of one fired / outcomes / skipped command: the engine splits at engineItemsPerCommandMax. */
const itemsMax = Math.max(limits.batchJobsMax, stallLimits.engineItemsPerCommandMax);
/** Jobs of one create_jobs: a batch, or small creates merged by the proposer. */
const jobsMax = Math.max(limits.batchJobsMax, stallLimits.mergedCreateJobsMax);
const errorTextMax = 64 * 1024;

function at(prefix: string, key: string): string {
  return prefix === '' ? key : `${prefix}.${key}`;
}

function fail(field: string, detail: string): never {
  throw new ShapeError(field, detail);
}

function obj(v: unknown, field: string): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v) || v instanceof Uint8Array) fail(field, 'must be an object');
  return v as Record<string, unknown>;
}

function int(v: unknown, field: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max) fail(field, `must be an integer from ${min} to ${max}`);
  return v;
}

function time(v: unknown, field: string): number {
  return int(v, field, 0, modelTimeMsMax);
}

function str(v: unknown, field: string, lengthMax: number, minLength = 0): string {
  if (typeof v !== 'string' || v.length < minLength || v.length > lengthMax) {
    fail(field, `must be a string of ${minLength} to ${lengthMax} characters`);
  }
  return v;
}

function pattern(v: unknown, field: string, re: RegExp): string {
  if (typeof v !== 'string' || !re.test(v)) fail(field, `must match ${re.source}`);
  return v;
}

function oneOf<T extends string>(v: unknown, field: string, values: readonly T[]): T {
  if (typeof v !== 'string' || !(values as readonly string[]).includes(v)) fail(field, `must be one of ${values.join(', ')}`);
  return v as T;
}

function bytes(v: unknown, field: string, bytesMax: number): Uint8Array {
  if (!(v instanceof Uint8Array)) fail(field, 'must be bytes');
  if (v.byteLength > bytesMax) fail(field, `must be at most ${bytesMax} bytes (got ${v.byteLength})`);
  return v;
}

function nullable<T>(v: unknown, check: (v: unknown) => T): T | null {
  return v === null ? null : check(v);
}

/** UTF-8 length without encoding (lone surrogates count 3, as TextEncoder writes U+FFFD). */
function utf8Length(text: string): number {
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 4;
      i++;
    } else n += 3;
  }
  return n;
}

/**
 * Answers of checks that cost a parse (a cron expression and its zone: about a millisecond; a URL), remembered
 * per input so a batch of 10,000 jobs on one schedule or one receiver parses it once. Bounded, cleared when full.
 */
class Memo<T> {
  private readonly answers = new Map<string, T>();

  get(key: string, compute: () => T): T {
    const hit = this.answers.get(key);
    if (hit !== undefined || this.answers.has(key)) return hit as T;
    const value = compute();
    if (this.answers.size >= schedulerLimits.cronCacheEntriesMax) this.answers.clear();
    this.answers.set(key, value);
    return value;
  }
}

const cronProblems = new Memo<{ field: string; message: string } | null>();
const urlProblems = new Memo<string | null>();

/**
 * Strict: no field beyond the model's (what a peer forwards, what the API parsed). The log's decoder is not strict,
 * so an entry written by a newer version with a field this one does not know is still applied, not quarantined.
 */
function known(o: Record<string, unknown>, keys: readonly string[], prefix: string, strict: boolean): void {
  if (!strict) return;
  for (const key in o) if (!keys.includes(key)) fail(at(prefix, key), 'unknown field');
}

const callbackKeys = ['url', 'method', 'headers', 'timeoutMs', 'retry', 'signingSecret', 'signingSecretNext', 'maxConcurrency'];
const taskKeys = [...callbackKeys, 'name', 'createdAtMs', 'updatedAtMs', 'retentionMs'];
/** A task's `retention_ms`: 1 s .. 100 years. */
export const taskRetentionMsMax = 100 * 366 * 24 * 60 * 60 * 1000;
const retryKeys = ['maxAttempts', 'initialBackoffMs', 'maxBackoffMs', 'multiplier', 'jitter'];
const jobKeys = [
  'id', 'task', 'callback', 'payload', 'payloadEncoding', 'schedule', 'endAtMs', 'maxRuns', 'misfire', 'overlap', 'metadata',
  'requestDigest', 'idempotencyKey', 'misfireThresholdMs', 'payloadRef',
];
const scheduleKeys: Record<string, readonly string[]> = {
  once: ['kind', 'atMs'],
  cron: ['kind', 'cron', 'timezone', 'startAtMs', 'exclude', 'dst', 'spreadMs', 'spreadOffsetMs'],
  every: ['kind', 'everyMs', 'startAtMs', 'exclude', 'spreadMs', 'spreadOffsetMs'],
};
export const dstGapPolicies = ['shift_forward', 'skip'] as const;
export const dstRepeatPolicies = ['first', 'last', 'both'] as const;

// --- the model -------------------------------------------------------------------------------------------

/** A task body or a job's inline callback, as stored. */
export function checkCallbackSpec(v: unknown, prefix: string, strict = false): void {
  const o = obj(v, prefix);
  checkCallbackFields(o, prefix, strict);
  known(o, callbackKeys, prefix, strict);
}

function checkCallbackFields(o: Record<string, unknown>, prefix: string, strict: boolean): void {
  checkUrl(o.url, at(prefix, 'url'));
  oneOf(o.method, at(prefix, 'method'), callbackMethods);
  checkHeaders(o.headers, at(prefix, 'headers'));
  int(o.timeoutMs, at(prefix, 'timeout_ms'), 1, limits.callbackTimeoutMsMax);
  checkRetry(o.retry, at(prefix, 'retry'), strict);
  nullable(o.signingSecret, (s) => checkSecret(s, at(prefix, 'signing_secret')));
  if (o.signingSecretNext !== undefined) nullable(o.signingSecretNext, (s) => checkSecret(s, at(prefix, 'signing_secret_next')));
  int(o.maxConcurrency, at(prefix, 'max_concurrency'), 1, limits.maxConcurrencyMax);
}

function checkSecret(v: unknown, field: string): void {
  const secret = str(v, field, limits.signingSecretBytesMax, 1);
  if (utf8Length(secret) > limits.signingSecretBytesMax) fail(field, `must be at most ${limits.signingSecretBytesMax} bytes`);
  if (secret === redactedSecret) fail(field, 'is the redacted placeholder "***"');
}

function checkUrl(v: unknown, field: string): void {
  const text = str(v, field, limits.urlLengthMax, 1);
  const problem = urlProblems.get(text, () => urlProblem(text));
  if (problem !== null) fail(field, problem);
}

function urlProblem(text: string): string | null {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return 'must be an absolute http or https URL';
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return 'must be an absolute http or https URL';
  if (url.username !== '' || url.password !== '') return 'must not carry credentials (use headers)';
  return null;
}

function checkHeaders(v: unknown, field: string): void {
  const o = obj(v, field);
  const names = Object.keys(o);
  if (names.length > limits.callbackHeadersMax) fail(field, `at most ${limits.callbackHeadersMax} headers`);
  let total = 0;
  for (const name of names) {
    const f = `${field}.${name}`;
    const value = o[name];
    if (!headerNamePattern.test(name) || name !== name.toLowerCase()) fail(f, 'is not a valid (lower-case) header name');
    if (reservedHeaders.has(name) || name.startsWith('x-punctual-')) fail(f, 'is set by Punctual and may not be given');
    if (typeof value !== 'string' || !headerValuePattern.test(value)) fail(f, 'must be a string without control characters');
    total += utf8Length(name) + utf8Length(value);
  }
  if (total > limits.callbackHeaderBytesMax) fail(field, `at most ${limits.callbackHeaderBytesMax} bytes of names and values`);
}

function checkRetry(v: unknown, field: string, strict: boolean): void {
  const o = obj(v, field);
  known(o, retryKeys, field, strict);
  int(o.maxAttempts, at(field, 'max_attempts'), 1, limits.retryMaxAttemptsMax);
  const initial = int(o.initialBackoffMs, at(field, 'initial_backoff_ms'), 0, limits.retryBackoffMsMax);
  const max = int(o.maxBackoffMs, at(field, 'max_backoff_ms'), 0, limits.retryBackoffMsMax);
  const m = o.multiplier;
  if (typeof m !== 'number' || !Number.isFinite(m) || m < 1 || m > limits.retryMultiplierMax) {
    fail(at(field, 'multiplier'), `must be a number from 1 to ${limits.retryMultiplierMax}`);
  }
  if (typeof o.jitter !== 'boolean') fail(at(field, 'jitter'), 'must be true or false');
  if (max < initial) fail(at(field, 'max_backoff_ms'), 'must be at least initial_backoff_ms');
}

export function checkSchedule(v: unknown, field: string, strict = false): void {
  const o = obj(v, field);
  if (typeof o.kind === 'string' && Object.hasOwn(scheduleKeys, o.kind)) known(o, scheduleKeys[o.kind]!, field, strict);
  switch (o.kind) {
    case 'once':
      time(o.atMs, at(field, 'at'));
      return;
    case 'cron': {
      const cron = str(o.cron, at(field, 'cron'), httpLimits.cronExpressionLengthMax, 1);
      const timezone = str(o.timezone, at(field, 'timezone'), httpLimits.timezoneLengthMax, 1);
      nullable(o.startAtMs, (s) => time(s, at(field, 'start_at')));
      const problem = cronProblems.get(`${timezone} ${cron}`, () => validateCron(cron, timezone));
      if (problem !== null) fail(at(field, problem.field.slice(problem.field.lastIndexOf('.') + 1)), problem.message);
      checkExclude(o.exclude, at(field, 'exclude'));
      if (o.dst !== undefined) checkDst(o.dst, at(field, 'dst'), strict);
      checkSpread(o, field, limits.spreadMsMax);
      return;
    }
    case 'every': {
      const everyMs = int(o.everyMs, at(field, 'every_ms'), limits.everyMsMin, limits.everyMsMax);
      // null: no start_at given, apply starts it at its command's nowMs.
      nullable(o.startAtMs, (s) => time(s, at(field, 'start_at')));
      checkExclude(o.exclude, at(field, 'exclude'));
      checkSpread(o, field, Math.min(limits.spreadMsMax, everyMs));
      return;
    }
    default:
      fail(field, 'must be one of at, delay_ms, cron, every_ms');
  }
}

/** A recurring schedule's `exclude`: absent, or 1 to calendarsPerScheduleMax distinct calendar names. */
function checkExclude(v: unknown, field: string): void {
  if (v === undefined) return;
  const names = list(v, field, limits.calendarsPerScheduleMax);
  if (names.length === 0) fail(field, 'must name at least one calendar (or be left out)');
  names.forEach((name, i) => {
    pattern(name, `${field}[${i}]`, taskNamePattern);
    if (names.indexOf(name) !== i) fail(`${field}[${i}]`, 'is named twice');
  });
}

/** A calendar as stored: its dates sorted without repeats, at most calendarEntriesMax dates and ranges in all. */
export function checkCalendarRecord(v: unknown, prefix: string, strict = false): void {
  const o = obj(v, prefix);
  known(o, ['name', 'timezone', 'dates', 'ranges', 'description', 'createdAtMs', 'updatedAtMs'], prefix, strict);
  pattern(o.name, at(prefix, 'name'), taskNamePattern);
  const timezone = str(o.timezone, at(prefix, 'timezone'), httpLimits.timezoneLengthMax, 1);
  if (!isValidTimezone(timezone)) fail(at(prefix, 'timezone'), `unknown time zone ${JSON.stringify(timezone)}`);
  const dates = list(o.dates, at(prefix, 'dates'), limits.calendarEntriesMax);
  const ranges = list(o.ranges, at(prefix, 'ranges'), limits.calendarEntriesMax);
  if (dates.length + ranges.length > limits.calendarEntriesMax) {
    fail(at(prefix, 'dates'), `at most ${limits.calendarEntriesMax} dates and ranges in all`);
  }
  let previous = -Infinity;
  dates.forEach((d, i) => {
    const day = calendarDate(d, at(prefix, `dates[${i}]`));
    if (day <= previous) fail(at(prefix, `dates[${i}]`), 'must come after the date before it (sorted, no repeats)');
    previous = day;
  });
  ranges.forEach((r, i) => {
    const f = at(prefix, `ranges[${i}]`);
    const range = obj(r, f);
    known(range, ['from', 'to'], f, strict);
    const from = calendarDate(range.from, at(f, 'from'));
    if (calendarDate(range.to, at(f, 'to')) < from) fail(at(f, 'to'), 'must not be before from');
  });
  nullable(o.description, (d) => str(d, at(prefix, 'description'), limits.calendarDescriptionLengthMax));
  time(o.createdAtMs, at(prefix, 'created_at'));
  time(o.updatedAtMs, at(prefix, 'updated_at'));
}

/** A YYYY-MM-DD date that exists, as a day number. */
function calendarDate(v: unknown, field: string): number {
  const day = typeof v === 'string' ? dayNumber(v) : null;
  if (day === null) fail(field, 'must be a date YYYY-MM-DD');
  return day;
}

/** Absent: cron-parser's own DST rules (schedule.ts); else both policies. */
function checkDst(v: unknown, field: string, strict: boolean): void {
  const o = obj(v, field);
  known(o, ['gap', 'repeat'], field, strict);
  oneOf(o.gap, at(field, 'gap'), dstGapPolicies);
  oneOf(o.repeat, at(field, 'repeat'), dstRepeatPolicies);
}

/** `spreadMs` from 1 to spreadMsMax; its offset (set by resolveSchedule) within [0, spreadMs). Both absent: none. */
function checkSpread(o: Record<string, unknown>, field: string, spreadMsMax: number): void {
  if (o.spreadMs === undefined) {
    if (o.spreadOffsetMs !== undefined) fail(at(field, 'spread_ms'), 'must be given with its offset');
    return;
  }
  const spreadMs = int(o.spreadMs, at(field, 'spread_ms'), 1, spreadMsMax);
  if (o.spreadOffsetMs !== undefined) int(o.spreadOffsetMs, at(field, 'spread_offset_ms'), 0, spreadMs - 1);
}

function checkPayload(payload: unknown, encoding: unknown, prefix: string): void {
  const e = oneOf(encoding, at(prefix, 'payload_encoding'), ['json', 'base64'] as const);
  bytes(payload, at(prefix, e === 'base64' ? 'payload_base64' : 'payload'), limits.payloadBytesMax);
}

const sha256Pattern = /^[0-9a-f]{64}$/;
const contentTypeLengthMax = 255;

/** `payload_ref` of a job: absent or null, or a reference with an empty inline payload. */
function checkPayloadRefOf(o: Record<string, unknown>, prefix: string, strict: boolean): void {
  if (o.payloadRef == null) return;
  checkPayloadRef(o.payloadRef, at(prefix, 'payload_ref'), strict);
  const payload = o.payload as Uint8Array;
  if (payload.byteLength > 0 || o.payloadEncoding !== 'json') {
    fail(at(prefix, 'payload_ref'), 'give payload_ref or payload / payload_base64, not both');
  }
}

/** A payload reference: an http(s) URL without credentials, an optional hex SHA-256 and content type. */
export function checkPayloadRef(v: unknown, field: string, strict = false): void {
  const o = obj(v, field);
  known(o, ['url', 'sha256', 'contentType'], field, strict);
  checkUrl(o.url, at(field, 'url'));
  nullable(o.sha256, (h) => pattern(h, at(field, 'sha256'), sha256Pattern));
  nullable(o.contentType, (t) => {
    const text = str(t, at(field, 'content_type'), contentTypeLengthMax, 1);
    if (!headerValuePattern.test(text)) fail(at(field, 'content_type'), 'must be a string without control characters');
  });
}

function checkMetadata(v: unknown, field: string): void {
  if (v === null) return;
  const o = obj(v, field);
  let json: string;
  try {
    json = JSON.stringify(o);
  } catch {
    fail(field, 'must be a JSON object');
  }
  if (utf8Length(json) > limits.metadataBytesMax) fail(field, `must be at most ${limits.metadataBytesMax} bytes as JSON`);
  if (hasOwnProto(o)) fail(field, 'must not contain a "__proto__" key');
}

/** True when an object at any depth of `value` has an own `__proto__` key (as JSON.parse creates it). */
export function hasOwnProto(value: unknown): boolean {
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v !== 'object' || v === null) continue;
    if (!Array.isArray(v) && Object.hasOwn(v, '__proto__')) return true;
    stack.push(...(Array.isArray(v) ? v : Object.values(v)));
  }
  return false;
}

/** A job as the proposer puts it in create_jobs. */
export function checkJobSpec(v: unknown, prefix: string, strict = false): void {
  const o = obj(v, prefix);
  known(o, jobKeys, prefix, strict);
  pattern(o.id, at(prefix, 'id'), jobIdPattern);
  if ((o.task === null) === (o.callback === null)) fail(at(prefix, 'task'), 'give exactly one of task or callback');
  if (o.task !== null) pattern(o.task, at(prefix, 'task'), taskNamePattern);
  else checkCallbackSpec(o.callback, at(prefix, 'callback'), strict);
  checkPayload(o.payload, o.payloadEncoding, prefix);
  checkPayloadRefOf(o, prefix, strict);
  checkSchedule(o.schedule, at(prefix, 'schedule'), strict);
  const endAtMs = nullable(o.endAtMs, (e) => time(e, at(prefix, 'end_at')));
  int(o.maxRuns, at(prefix, 'max_runs'), 0, Number.MAX_SAFE_INTEGER);
  oneOf(o.misfire, at(prefix, 'misfire'), misfirePolicies);
  checkMisfireThreshold(o.misfireThresholdMs, prefix);
  oneOf(o.overlap, at(prefix, 'overlap'), overlapPolicies);
  checkMetadata(o.metadata, at(prefix, 'metadata'));
  str(o.requestDigest, at(prefix, 'request_digest'), digestLengthMax);
  nullable(o.idempotencyKey, (k) => str(k, 'Idempotency-Key', httpLimits.idempotencyKeyLengthMax, 1));
  const schedule = o.schedule as { kind: string; startAtMs?: number | null };
  if (endAtMs !== null && schedule.kind !== 'once' && typeof schedule.startAtMs === 'number' && endAtMs <= schedule.startAtMs) {
    fail(at(prefix, 'end_at'), 'must be after schedule.start_at');
  }
}

/** Absent: a job written before the field existed (policy.ts misfireThresholdMsUnset); else within its bounds. */
function checkMisfireThreshold(v: unknown, prefix: string): void {
  if (v !== undefined) int(v, at(prefix, 'misfire_threshold_ms'), limits.misfireThresholdMsMin, limits.misfireThresholdMsMax);
}

/** PATCH of a job: any of schedule, payload (with its encoding), metadata, misfire threshold. */
export function checkJobPatch(v: unknown, prefix: string, strict = false): void {
  const o = obj(v, prefix);
  known(o, ['schedule', 'payload', 'payloadEncoding', 'metadata', 'misfireThresholdMs', 'payloadRef'], prefix, strict);
  if (o.payloadRef !== undefined) nullable(o.payloadRef, (r) => checkPayloadRef(r, at(prefix, 'payload_ref'), strict));
  if (o.payloadRef != null && o.payload !== undefined) fail(at(prefix, 'payload_ref'), 'give payload_ref or payload / payload_base64, not both');
  if (o.schedule !== undefined) checkSchedule(o.schedule, at(prefix, 'schedule'), strict);
  checkMisfireThreshold(o.misfireThresholdMs, prefix);
  const encoding = o.payloadEncoding === undefined ? undefined : oneOf(o.payloadEncoding, at(prefix, 'payload_encoding'), ['json', 'base64'] as const);
  if (o.payload !== undefined) bytes(o.payload, at(prefix, encoding === 'base64' ? 'payload_base64' : 'payload'), limits.payloadBytesMax);
  if (o.metadata !== undefined) checkMetadata(o.metadata, at(prefix, 'metadata'));
}

export function checkTaskRecord(v: unknown, prefix: string, strict = false): void {
  const o = obj(v, prefix);
  known(o, taskKeys, prefix, strict);
  pattern(o.name, at(prefix, 'name'), taskNamePattern);
  checkCallbackFields(o, prefix, strict);
  time(o.createdAtMs, at(prefix, 'created_at'));
  time(o.updatedAtMs, at(prefix, 'updated_at'));
  if (o.retentionMs !== undefined) nullable(o.retentionMs, (r) => int(r, at(prefix, 'retention_ms'), 1000, taskRetentionMsMax));
}

// --- commands --------------------------------------------------------------------------------------------

function list(v: unknown, field: string, max: number): unknown[] {
  if (!Array.isArray(v)) fail(field, 'must be an array');
  if (v.length > max) fail(field, `at most ${max} items (got ${v.length})`);
  return v;
}

function checkFiredItem(v: unknown, f: string): void {
  const o = obj(v, f);
  pattern(o.jobId, at(f, 'jobId'), jobIdPattern);
  time(o.scheduledAtMs, at(f, 'scheduledAtMs'));
  int(o.attempt, at(f, 'attempt'), 0, Number.MAX_SAFE_INTEGER);
  time(o.startedAtMs, at(f, 'startedAtMs'));
}

function checkOutcomeItem(v: unknown, f: string): void {
  const o = obj(v, f);
  pattern(o.jobId, at(f, 'jobId'), jobIdPattern);
  time(o.scheduledAtMs, at(f, 'scheduledAtMs'));
  int(o.attempt, at(f, 'attempt'), 0, Number.MAX_SAFE_INTEGER);
  oneOf(o.result, at(f, 'result'), ['succeeded', 'failed', 'retry'] as const);
  nullable(o.statusCode, (c) => int(c, at(f, 'statusCode'), 0, 999));
  nullable(o.error, (e) => str(e, at(f, 'error'), errorTextMax));
  time(o.finishedAtMs, at(f, 'finishedAtMs'));
  nullable(o.retryAtMs, (r) => time(r, at(f, 'retryAtMs')));
  if (o.startedAtMs !== undefined) time(o.startedAtMs, at(f, 'startedAtMs'));
}

function checkSkippedItem(v: unknown, f: string): void {
  const o = obj(v, f);
  pattern(o.jobId, at(f, 'jobId'), jobIdPattern);
  time(o.scheduledAtMs, at(f, 'scheduledAtMs'));
  oneOf(o.reason, at(f, 'reason'), ['misfire', 'overlap'] as const);
}

function checkItems(v: unknown, field: string, item: (v: unknown, f: string) => void): void {
  list(v, field, itemsMax).forEach((x, i) => item(x, `${field}[${i}]`));
}

const commandTypes = new Set<string>([
  'put_task', 'delete_task', 'put_calendar', 'delete_calendar', 'create_jobs', 'cancel_job', 'pause_job', 'resume_job', 'run_job', 'patch_job', 'fired',
  'outcomes', 'skipped', 'retention', 'replay_jobs', 'noop',
]);

/**
 * Throws ShapeError unless `v` is a Command of a known type whose every field has the model's type and bounds.
 * A command that passes applies without tripping any of apply's own assertions on its input.
 */
export function checkCommand(v: unknown): void {
  const o = obj(v, 'command');
  if (typeof o.type !== 'string' || !commandTypes.has(o.type)) {
    fail('type', `unknown type ${typeof o.type === 'string' ? JSON.stringify(o.type.slice(0, 64)) : typeof o.type}`);
  }
  if (o.type === 'noop') return;
  time(o.nowMs, 'nowMs');
  switch (o.type) {
    case 'put_task':
      return checkTaskRecord(o.task, 'task');
    case 'delete_task':
      pattern(o.name, 'name', taskNamePattern);
      return;
    case 'put_calendar':
      return checkCalendarRecord(o.calendar, 'calendar');
    case 'delete_calendar':
      pattern(o.name, 'name', taskNamePattern);
      return;
    case 'create_jobs':
      int(o.shard, 'shard', 0, Number.MAX_SAFE_INTEGER);
      list(o.jobs, 'jobs', jobsMax).forEach((j, i) => checkJobSpec(j, `jobs[${i}]`));
      return;
    case 'cancel_job':
    case 'pause_job':
    case 'resume_job':
      pattern(o.id, 'id', jobIdPattern);
      return;
    case 'run_job':
      pattern(o.id, 'id', jobIdPattern);
      if (o.runKey !== undefined) str(o.runKey, 'runKey', schedulerLimits.runKeyLengthMax, 1);
      return;
    case 'patch_job':
      pattern(o.id, 'id', jobIdPattern);
      if (o.afterFired !== undefined && o.afterFired !== true) fail('afterFired', 'must be true when present');
      return checkJobPatch(o.patch, '');
    case 'fired':
      pattern(o.nodeId, 'nodeId', nodeIdPattern);
      return checkItems(o.items, 'items', checkFiredItem);
    case 'outcomes':
      if (o.nodeId !== undefined) pattern(o.nodeId, 'nodeId', nodeIdPattern);
      return checkItems(o.items, 'items', checkOutcomeItem);
    case 'skipped':
      return checkItems(o.items, 'items', checkSkippedItem);
    case 'retention':
      nullable(o.retentionMs, (r) => int(r, 'retentionMs', 0, Number.MAX_SAFE_INTEGER));
      int(o.jobsMax, 'jobsMax', 0, retentionLimits.jobsPerCommandMax);
      list(o.trim, 'trim', retentionLimits.trimJobsPerCommandMax).forEach((t, i) => {
        const item = obj(t, `trim[${i}]`);
        pattern(item.jobId, `trim[${i}].jobId`, jobIdPattern);
        int(item.keep, `trim[${i}].keep`, 1, retentionLimits.executionsKeepMax);
      });
      return;
    case 'replay_jobs':
      list(o.ids, 'ids', retentionLimits.replayJobsMax).forEach((id, i) => pattern(id, `ids[${i}]`, jobIdPattern));
      return;
  }
}

/** The first problem of `check(v)` as a FieldError, or null. */
export function problemOf(check: () => void): FieldError | null {
  try {
    check();
    return null;
  } catch (err) {
    if (err instanceof ShapeError) return err.toFieldError();
    throw err;
  }
}
