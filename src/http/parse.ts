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
import type { CallbackSpec, DstPolicy, RetryPolicy, Schedule, ScheduleSpec } from '../scheduler/types.js';
import { PunctualError } from '../core/errors.js';
import { timeMsMax, timeMsMin } from './time.js';
import {
  anyCaseEnum,
  anyJson,
  boolean,
  custom,
  annotate,
  enumOf,
  field,
  integer,
  named,
  number,
  object,
  pattern,
  recordOf,
  string,
  type Schema,
} from './schema.js';
import { Issues, fieldAt, isObject, readObject, readString, readTime, utf8Length, type JsonObject } from './validate.js';
import { splitTaskRetention, withTaskRetention } from './parse-retention.js';
import { taskRetentionMsMax } from '../scheduler/check.js';

// The model's own vocabulary (src/scheduler/check.ts), shared with the checks every parsed value ends in.
export { callbackMethods, misfirePolicies, overlapPolicies, redactedSecret } from '../scheduler/check.js';

// --- the schemas (schema.ts): what openapi.ts documents is what these parsers read ------------------------

export const taskNameSchema = pattern(taskNamePattern, '[A-Za-z0-9._-]{1,128}', 'A task or calendar name: [A-Za-z0-9._-]{1,128}.');
export const jobIdSchema = pattern(jobIdPattern, '[A-Za-z0-9._:-]{1,128}', 'A job id: [A-Za-z0-9._:-]{1,128}.');

/**
 * `.` and `..` match the id and name patterns, but URL parsing (WHATWG: fetch, browsers, the CLI) removes them as
 * dot segments, `%2e%2e` too, so `/v1/jobs/..` could never be read or cancelled: they are refused when created.
 */
function notDotSegment<T extends string>(schema: Schema<T>): Schema<T> {
  return custom(schema.json, (v, field, issues) => {
    const name = schema.read(v, field, issues);
    if (name === '.' || name === '..') return issues.add(field, 'must not be . or .. (a URL cannot address it)');
    return name;
  });
}

/** The id of a new job: as jobIdSchema, but not `.` or `..`. */
export const newJobIdSchema = notDotSegment(jobIdSchema);
const newNameSchema = notDotSegment(taskNameSchema);

/** A time on input: RFC 3339 with any offset, or an integer of epoch ms (docs/api.md, Conventions). */
export const timeSchema = named(
  'Time',
  custom(
    {
      description:
        'RFC 3339 with any offset (fractions beyond ms truncated), or an integer of epoch milliseconds; 1970-01-01 to 9999-12-31. Impossible dates, leap seconds and times without an offset are refused.',
      oneOf: [
        { type: 'string', format: 'date-time' },
        { type: 'integer', minimum: timeMsMin, maximum: timeMsMax },
      ],
    },
    readTime,
  ),
);

const dstSchema = object(
  {
    gap: field(enumOf(dstGapPolicies, 'A local time that does not exist that day: run it shifted forward by the gap, or skip it.'), { default: 'shift_forward' }),
    repeat: field(enumOf(dstRepeatPolicies, 'A local time that happens twice: run it at the first, the last or both.'), { default: 'first' }),
  },
  'Daylight-saving policies of a cron schedule (docs/api.md, Daylight-saving policies). Only with cron.',
);

const excludeSchema = custom<string[]>(
  {
    type: 'array',
    description: 'Calendars (PUT /v1/calendars/{name}) whose dates the schedule skips; cron and every_ms only. Each must exist when the job is written.',
    items: taskNameSchema.json,
    minItems: 1,
    maxItems: limits.calendarsPerScheduleMax,
    uniqueItems: true,
  },
  (value, field, issues) => {
    if (!Array.isArray(value) || value.length === 0 || value.length > limits.calendarsPerScheduleMax) {
      return issues.add(field, `must be an array of 1 to ${limits.calendarsPerScheduleMax} calendar names`);
    }
    const names: string[] = [];
    value.forEach((v: unknown, i) => {
      const name = taskNameSchema.read(v, `${field}[${i}]`, issues);
      if (name === undefined) return;
      if (names.includes(name)) issues.add(`${field}[${i}]`, 'is named twice');
      names.push(name);
    });
    return names.length === value.length ? names : undefined;
  },
);

/** The fields of a schedule; which of them go together is code (parseSchedule), written in the description. */
export const scheduleFields = object(
  {
    at: field(annotate(timeSchema, 'Once at this time (in the past: at once).')),
    delay_ms: field(integer(0, timeMsMax, 'Once at now + this many ms (at most up to 9999-12-31).')),
    cron: field(string(httpLimits.cronExpressionLengthMax, 'A cron expression: 5 fields, 6 with seconds first, or an @daily-style macro; H is refused. Must match at least once.')),
    timezone: field(string(httpLimits.timezoneLengthMax, 'IANA time zone of the cron (case-insensitive). Only with cron.'), { defaultJson: 'UTC' }),
    every_ms: field(integer(limits.everyMsMin, limits.everyMsMax, 'Every this many ms, at start_at + k * every_ms.')),
    start_at: field(annotate(timeSchema, 'cron: no occurrence before it; every_ms: the grid (default: when the job is created).')),
    exclude: field(excludeSchema),
    dst: field(dstSchema),
    spread_ms: field(integer(1, limits.spreadMsMax, 'Run each occurrence a stable offset (from the job id) within this many ms after its time; at most every_ms. cron and every_ms only.')),
    spread_offset_ms: field(anyJson('Shown by GET; accepted back and ignored (it always follows from the job id).')),
  },
  'Exactly one of at, delay_ms, cron (with timezone), every_ms; absent, null or {} is now. timezone and dst only with cron; start_at, spread_ms and exclude only with cron or every_ms. A recurring schedule must have an occurrence before 9999-12-31T23:59:59.999Z.',
);
const scheduleKinds = ['at', 'delay_ms', 'cron', 'every_ms'] as const;

/** `schedule` as a schema: read with the request's now (ReadContext.nowMs). */
export const scheduleSchema = named(
  'Schedule',
  custom(scheduleFields.json, (value, field, issues, ctx) => {
    if (ctx?.nowMs === undefined) throw new Error('a schedule is read with the node\'s now');
    return parseSchedule(value, field, ctx.nowMs, issues);
  }),
);

/**
 * `schedule`: exactly one of at / delay_ms / cron(+timezone) / every_ms(+start_at); absent, null or {} = now.
 * `every_ms` without `start_at` is left without a start: the state machine starts it at the instant its command is
 * stamped with, the one instant its first occurrence is computed from (a preview resolves it at `from`).
 */
export function parseSchedule(value: unknown, field: string, nowMs: number, issues: Issues): ScheduleSpec | undefined {
  if (value === undefined || value === null) return { kind: 'once', atMs: nowMs };
  const given = scheduleFields.open(value, field, issues);
  if (given === undefined) return undefined;
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
  const exclude = parseExclude(o, field, kind, issues);
  const schedule = parseScheduleKind(o, kind, field, nowMs, issues);
  return schedule === undefined || exclude === undefined || schedule.kind === 'once' ? schedule : { ...schedule, exclude };
}

/**
 * `exclude`: the names of 1 to limits.calendarsPerScheduleMax calendars (PUT /v1/calendars/{name}) whose dates a
 * recurring schedule skips. Whether they exist is the state machine's to say, when the job is created.
 */
function parseExclude(o: JsonObject, field: string, kind: string | undefined, issues: Issues): string[] | undefined {
  if (o.exclude === undefined) return undefined;
  if (kind !== 'cron' && kind !== 'every_ms') return issues.add(fieldAt(field, 'exclude'), 'only allowed with cron or every_ms');
  return scheduleFields.get(o, 'exclude', field, issues) ?? undefined;
}

function parseScheduleKind(o: JsonObject, kind: (typeof scheduleKinds)[number] | undefined, field: string, nowMs: number, issues: Issues): ScheduleSpec | undefined {
  const get = <K extends keyof typeof scheduleFields.fields & string>(key: K) => scheduleFields.get(o, key, field, issues);
  switch (kind) {
    case undefined:
      return { kind: 'once', atMs: nowMs };
    case 'at': {
      const atMs = get('at');
      return atMs == null ? undefined : { kind: 'once', atMs };
    }
    case 'delay_ms': {
      const delayMs = get('delay_ms');
      // The document's bound is 9999-12-31 ahead of 1970; the node's now narrows it.
      const max = Math.max(0, timeMsMax - nowMs);
      if (delayMs != null && delayMs > max) return issues.add(fieldAt(field, 'delay_ms'), `must be between 0 and ${max}`);
      return delayMs == null ? undefined : { kind: 'once', atMs: nowMs + delayMs };
    }
    case 'cron':
      return parseCron(o, field, issues);
    case 'every_ms': {
      const everyMs = get('every_ms');
      const startAtMs = get('start_at');
      const spread = readSpread(o, field, everyMs ?? undefined, issues);
      if (everyMs == null || startAtMs === undefined || spread === undefined) return undefined;
      return startAtMs === null ? { kind: 'every', everyMs, startAtMs: null, ...spread } : { kind: 'every', everyMs, startAtMs, ...spread };
    }
  }
}

function parseCron(o: JsonObject, field: string, issues: Issues): Schedule | undefined {
  const cron = scheduleFields.get(o, 'cron', field, issues);
  const timezone = o.timezone === undefined ? 'UTC' : scheduleFields.get(o, 'timezone', field, issues);
  const startAtMs = scheduleFields.get(o, 'start_at', field, issues);
  const dst = scheduleFields.get(o, 'dst', field, issues);
  const spread = readSpread(o, field, undefined, issues);
  const cronOk = cron != null && timezone != null && checkCron(cron, timezone, field, issues);
  if (!cronOk || startAtMs === undefined || dst === undefined || spread === undefined) return undefined;
  const policy: DstPolicy | null = dst === null ? null : { gap: dst.gap!, repeat: dst.repeat! }; // defaults filled in
  return { kind: 'cron', cron, timezone, startAtMs, ...(policy === null ? {} : { dst: policy }), ...spread };
}

/**
 * The expression and the zone, each named when bad (one 400 lists every bad field): with an unknown zone the
 * expression is still judged, in UTC.
 */
function checkCron(cron: string, timezone: string, field: string, issues: Issues): boolean {
  const zoneOk = isValidTimezone(timezone);
  if (!zoneOk) issues.add(fieldAt(field, 'timezone'), `unknown time zone ${JSON.stringify(timezone)}`);
  const problem = validateCron(cron, zoneOk ? timezone : 'UTC');
  if (problem !== null) {
    // validateCron names `schedule.cron` / `schedule.timezone`; re-root it under this schedule's path.
    const leaf = problem.field.slice(problem.field.lastIndexOf('.') + 1);
    issues.add(fieldAt(field, leaf), problem.message);
  }
  return zoneOk && problem === null;
}

/** `schedule.spread_ms`: 1 to limits.spreadMsMax, and at most every_ms; {} when absent, undefined when invalid. */
function readSpread(o: JsonObject, field: string, everyMs: number | undefined, issues: Issues): { spreadMs?: number } | undefined {
  if (o.spread_ms === undefined) return {};
  const spreadMs = scheduleFields.get(o, 'spread_ms', field, issues);
  if (spreadMs == null) return undefined;
  if (everyMs !== undefined && spreadMs > everyMs) return issues.add(fieldAt(field, 'spread_ms'), `must be between 1 and ${Math.min(limits.spreadMsMax, everyMs)}`);
  return { spreadMs };
}

/**
 * Why the node refuses a callback URL whose host is a literal address (the SSRF guard, src/dispatch/
 * target-policy.ts), or null. Names are only checked when connecting: what they resolve to may change.
 */
export type CallbackUrlCheck = (url: string) => string | null;

export const urlSchema = custom<string>(
  {
    type: 'string',
    format: 'uri',
    minLength: 1,
    maxLength: limits.urlLengthMax,
    pattern: '^[Hh][Tt][Tt][Pp][Ss]?://',
    description:
      'Absolute http or https URL written scheme://host..., without user:pass@. Stored and answered WHATWG-normalized. A literal address the node\'s callback policy refuses (link-local, unspecified, its own ports, --callback-deny) is refused.',
  },
  (value, field, issues, ctx) => {
    const url = readUrl(value, field, issues);
    if (url === undefined) return undefined;
    const refused = ctx?.urlCheck?.(url) ?? null;
    return refused === null ? url : issues.add(field, refused);
  },
);

const headersSchema = recordOf(
  headerNamePattern,
  { type: 'string', pattern: headerValuePattern.source },
  limits.callbackHeadersMax,
  `Headers sent with every callback: names are HTTP tokens, stored lower case, each once in any case; values without control characters, trimmed; at most ${limits.callbackHeaderBytesMax} bytes of names and values. Refused: ${[...reservedHeaders].join(', ')}, x-punctual-*, __proto__.`,
  (value, field, issues) => parseHeaders(value, field, issues),
);

const retrySchema = object(
  {
    max_attempts: field(integer(1, limits.retryMaxAttemptsMax, 'Attempts in all, the first included.'), { default: limits.retryMaxAttemptsDefault }),
    initial_backoff_ms: field(integer(0, limits.retryBackoffMsMax), { default: limits.retryInitialBackoffMsDefault }),
    max_backoff_ms: field(integer(0, limits.retryBackoffMsMax, 'At least initial_backoff_ms.'), { default: limits.retryMaxBackoffMsDefault }),
    multiplier: field(number(1, limits.retryMultiplierMax), { default: limits.retryMultiplierDefault }),
    jitter: field(boolean('Each delay uniform in [base/2, base].'), { default: true }),
  },
  'Retries of a failed attempt (408, 429, 5xx, timeouts, connection errors), with exponential backoff.',
);

const secretSchema = (what: string): Schema<string> =>
  custom(
    {
      type: 'string',
      minLength: 1,
      description: `${what} ${limits.signingSecretBytesMin} to ${limits.signingSecretBytesMax} bytes, or whsec_<base64> (Standard Webhooks: the decoded key, at least ${limits.signingSecretBytesMin} bytes). "***" (the redaction) is refused. Never answered: a set secret shows as "***".`,
    },
    (value, field, issues) => readSecret(value, field, issues),
  );

/** A task body (PUT /v1/tasks/{name}) or a job's inline `callback`. */
export const callbackFields = object(
  {
    url: field(urlSchema, { required: true }),
    method: field(anyCaseEnum(callbackMethods, 'The callback\'s method, stored upper case.'), { default: 'POST' }),
    headers: field(headersSchema, { defaultJson: {} }),
    timeout_ms: field(integer(1, limits.callbackTimeoutMsMax, 'One budget for connecting, sending and receiving the status.'), { default: limits.callbackTimeoutMsDefault }),
    retry: field(retrySchema),
    signing_secret: field(secretSchema('Signs every callback (Standard Webhooks headers and X-Punctual-Signature):')),
    signing_secret_next: field(secretSchema('The next secret while rotating (needs signing_secret, and must differ from it): every callback is signed with both.')),
    max_concurrency: field(integer(1, limits.maxConcurrencyMax, 'Requests of this task (or inline callback) in flight at once, per node.'), { default: limits.maxConcurrencyDefault }),
  },
  'Where and how to call: a task (PUT /v1/tasks/{name}) or a job\'s inline callback. name, created_at and updated_at are read-only.',
);
/** PUT /v1/tasks/{name}: the callback's fields and the task's own retention_ms (read apart: parse-retention.ts). */
export const taskBodySchema = named('TaskInput', custom({
  ...callbackFields.json,
  properties: {
    ...(callbackFields.json.properties as Record<string, unknown>),
    retention_ms: {
      type: ['integer', 'null'],
      minimum: 1000,
      maximum: taskRetentionMsMax,
      description: 'How long this task\'s finished jobs are kept (overrides the node\'s --retention); null or absent: the node\'s.',
    },
  },
}, () => undefined));
export const callbackSchema = named('CallbackInput', custom(callbackFields.json, (value, field, issues, ctx) => parseCallback(value, field, issues, ctx?.urlCheck)));

export function parseCallback(value: unknown, prefix: string, issues: Issues, urlCheck?: CallbackUrlCheck): CallbackSpec | undefined {
  const o = callbackFields.open(value, prefix, issues);
  if (o === undefined) return undefined;
  const get = <K extends keyof typeof callbackFields.fields & string>(key: K) => callbackFields.get(o, key, prefix, issues, { urlCheck });
  const url = get('url');
  const method = get('method');
  const headers = get('headers');
  const timeoutMs = get('timeout_ms');
  const retry = parseRetry(o.retry, fieldAt(prefix, 'retry'), issues);
  const signingSecret = get('signing_secret');
  const signingSecretNext = get('signing_secret_next');
  if (signingSecretNext != null && o.signing_secret == null) {
    issues.add(fieldAt(prefix, 'signing_secret_next'), 'needs signing_secret (the current secret) as well');
  } else if (signingSecretNext != null && signingSecretNext === signingSecret) {
    issues.add(fieldAt(prefix, 'signing_secret_next'), 'must differ from signing_secret');
  }
  const maxConcurrency = get('max_concurrency');
  if (url == null || method == null || headers === undefined || timeoutMs == null) return undefined;
  if (retry === undefined || signingSecret === undefined || maxConcurrency == null) return undefined;
  if (signingSecretNext === undefined) return undefined;
  const spec: CallbackSpec = { url, method, headers: headers ?? {}, timeoutMs, retry, signingSecret, maxConcurrency };
  // Only when set: a spec without rotation stays byte for byte what it was before the field existed.
  if (signingSecretNext !== null) spec.signingSecretNext = signingSecretNext;
  return spec;
}

/** The URL as the callback will really request it, without the policy check (urlSchema adds it). */
function readUrl(value: unknown, field: string, issues: Issues): string | undefined {
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
  return url.href;
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

function parseRetry(value: unknown, field: string, issues: Issues): RetryPolicy | undefined {
  const r = retrySchema.read(value == null ? {} : value, field, issues);
  if (r === undefined) return undefined;
  const { max_attempts: maxAttempts, initial_backoff_ms: initialBackoffMs, max_backoff_ms: maxBackoffMs, multiplier, jitter } = r;
  // Every field has a default: none is null.
  if (maxAttempts === null || initialBackoffMs === null || maxBackoffMs === null || multiplier === null || jitter === null) return undefined;
  if (maxBackoffMs < initialBackoffMs) return issues.add(`${field}.max_backoff_ms`, 'must be at least initial_backoff_ms');
  return { maxAttempts, initialBackoffMs, maxBackoffMs, multiplier, jitter };
}

const whsecPattern = /^whsec_([A-Za-z0-9+/]+={0,2})$/;

/**
 * A given secret (absent and null are "no secret", decided by the caller); undefined = invalid. A
 * `whsec_<base64>` secret (Standard Webhooks) is measured by its decoded key; any other by its UTF-8 bytes.
 */
function readSecret(value: unknown, field: string, issues: Issues): string | undefined {
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

const dateSchema = custom<string>(
  { type: 'string', format: 'date', pattern: '^\\d{4}-\\d{2}-\\d{2}$', description: 'A real date YYYY-MM-DD (0001 .. 9999).' },
  (value, field, issues) => (typeof value === 'string' && dayNumber(value) !== null ? value : issues.add(field, 'must be a date YYYY-MM-DD')),
);

const rangeSchema = object(
  { from: field(dateSchema, { required: true }), to: field(dateSchema, { required: true }) },
  'Both dates inclusive; to not before from.',
);

/** An array of calendar entries: every item read, so one 400 names each bad one. */
function entries<T>(item: Schema<T>, description: string): Schema<T[]> {
  const json = { type: 'array', items: item.json, maxItems: limits.calendarEntriesMax, description };
  return custom(json, (value, field, issues) => {
    if (!Array.isArray(value)) return issues.add(field, 'must be an array');
    const out: T[] = [];
    value.forEach((v: unknown, i) => {
      const read = item.read(v, `${field}[${i}]`, issues);
      if (read !== undefined) out.push(read);
    });
    return out.length === value.length ? out : undefined;
  });
}

export const calendarFields = object(
  {
    timezone: field(string(httpLimits.timezoneLengthMax, 'IANA zone: the dates are local dates there.'), { default: 'UTC' }),
    dates: field(entries(dateSchema, 'Stored sorted, each once.'), { defaultJson: [] }),
    ranges: field(entries(rangeSchema, 'Stretches of dates.'), { defaultJson: [] }),
    description: field(string(limits.calendarDescriptionLengthMax)),
  },
  `An exclusion calendar: at most ${limits.calendarEntriesMax} dates and ranges in all. name, created_at and updated_at are read-only.`,
);

/**
 * PUT /v1/calendars/{name}: `{"timezone" (default UTC), "dates": ["YYYY-MM-DD"], "ranges": [{"from", "to"}],
 * "description"}`, at most limits.calendarEntriesMax dates and ranges in all. Dates are stored sorted, once each.
 */
export function parseCalendarBody(body: unknown, name: string): CalendarBody {
  const issues = new Issues();
  const o = calendarFields.open(body, '', issues) ?? {};
  const timezone = calendarFields.get(o, 'timezone', '', issues);
  if (timezone != null && !isValidTimezone(timezone)) issues.add('timezone', `unknown time zone ${JSON.stringify(timezone)}`);
  const givenDates = calendarFields.get(o, 'dates', '', issues);
  const givenRanges = calendarFields.get(o, 'ranges', '', issues);
  const count = (Array.isArray(o.dates) ? o.dates.length : 0) + (Array.isArray(o.ranges) ? o.ranges.length : 0);
  if (count > limits.calendarEntriesMax) issues.add('dates', `at most ${limits.calendarEntriesMax} dates and ranges in all (got ${count})`);
  const ranges: CalendarBody['ranges'] = [];
  // One 400 names every bad field: a range out of order is reported even when another range is malformed.
  const rawRanges: unknown[] = givenRanges ?? (Array.isArray(o.ranges) ? o.ranges : []);
  rawRanges.forEach((r, i) => {
    if (!isObject(r) || typeof r.from !== 'string' || typeof r.to !== 'string') return;
    const [from, to] = [dayNumber(r.from), dayNumber(r.to)];
    if (from === null || to === null) return;
    if (to < from) issues.add(`ranges[${i}].to`, 'must not be before from');
    else ranges.push({ from: r.from, to: r.to });
  });
  const description = calendarFields.get(o, 'description', '', issues);
  if (!issues.ok || timezone == null || givenDates === undefined || description === undefined) throw issues.toError();
  const days = new Map<number, string>();
  for (const d of givenDates ?? []) days.set(dayNumber(d)!, d);
  const dates = [...days.entries()].sort((a, b) => a[0] - b[0]).map(([, d]) => d);
  const calendar: CalendarBody = { timezone, dates, ranges, description };
  return endsInModel(calendar, () => checkCalendarRecord({ ...calendar, name, createdAtMs: 0, updatedAtMs: 0 }, '', true));
}

export function parseTaskName(name: string): string {
  const issues = new Issues();
  taskNameSchema.read(name, 'name', issues);
  issues.throwIfAny();
  return name;
}

/** The name of a task or calendar being put: as parseTaskName, but not `.` or `..`. */
export function parseNewName(name: string): string {
  const issues = new Issues();
  newNameSchema.read(name, 'name', issues);
  issues.throwIfAny();
  return name;
}

export function parseJobId(id: string, field = 'id'): string {
  const issues = new Issues();
  jobIdSchema.read(id, field, issues);
  issues.throwIfAny();
  return id;
}

export const clockAdvanceFields = object(
  {
    by_ms: field(integer(1, clockLimits.advanceByMsMax, 'Advance by this many ms.')),
    to: field(annotate(timeSchema, 'Advance to this time (not before the node\'s now, at most by_ms\'s bound ahead).')),
  },
  'Exactly one of by_ms or to.',
);

/**
 * POST /v1/clock:advance: exactly one of `by_ms` (1..clockLimits.advanceByMsMax) or `to` (a time). Whether `to`
 * is not in the past is the node's to say: it reads its clock when the advance starts (advances run in turn).
 */
export function parseClockAdvance(body: unknown): { byMs: number } | { toMs: number } {
  const issues = new Issues();
  const o = clockAdvanceFields.open(body, '', issues);
  if (o === undefined) throw issues.toError();
  if ((o.by_ms == null) === (o.to == null)) issues.add('body', 'give exactly one of by_ms or to');
  const byMs = clockAdvanceFields.get(o, 'by_ms', '', issues);
  const toMs = clockAdvanceFields.get(o, 'to', '', issues);
  issues.throwIfAny();
  return byMs != null ? { byMs } : { toMs: toMs! };
}
