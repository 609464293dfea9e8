/**
 * Job bodies (POST /v1/jobs, each item of POST /v1/jobs:batch, PATCH /v1/jobs/{id}, POST /v1/schedules:preview)
 * -> JobSpec / JobPatch / preview arguments. See parse.ts for the conventions.
 */
import { PunctualError, invalid } from '../core/errors.js';
import { httpLimits, limits, schedulerLimits, searchLimits } from '../core/limits.js';
import { isNoSearch, type JobSearch } from '../scheduler/search.js';
import { jobIdPattern, nodeIdPattern, taskNamePattern } from '../core/ids.js';
import type { JobListQuery, JobPatch, JobSpec, JobState, PayloadRef, Schedule, ScheduleSpec } from '../scheduler/types.js';
import { resolveSchedule } from '../scheduler/policy.js';
import { jobStates } from '../scheduler/types.js';
import { firstOccurrence, firstOccurrenceOutOfBound } from '../scheduler/schedule.js';
import { deriveJobId, requestDigest } from './idempotency.js';
import { timeMsMax } from './time.js';
import { checkJobPatch, checkJobSpec, hasOwnProto } from '../scheduler/check.js';
import {
  callbackSchema,
  endsInModel,
  jobIdSchema,
  newJobIdSchema,
  misfirePolicies,
  overlapPolicies,
  parseCallback,
  parseSchedule,
  scheduleSchema,
  taskNameSchema,
  timeSchema,
  type CallbackUrlCheck,
  urlSchema,
} from './parse.js';
import { annotate, anyCaseEnum, anyJson, custom, enumOf, field, integer, intParam, named, object, pattern, query, string, textParam, type QueryParam } from './schema.js';
import { Issues, fieldAt, isObject, nonFiniteNumberIn, nonFiniteNumberMessage, readBase64, readTime, utf8Length, type JsonObject } from './validate.js';

const base64Pattern = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

const payloadField = field(
  anyJson(`Any JSON: the callback body is its JSON text in UTF-8 (null included: the 4 bytes null); at most ${limits.payloadBytesMax} bytes. Not together with payload_base64.`),
  { nullIsValue: true },
);
const payloadBase64Field = field(
  custom<Uint8Array>(
    {
      type: 'string',
      contentEncoding: 'base64',
      pattern: base64Pattern.source,
      description: `Strict base64 (RFC 4648, padded, canonical): the decoded bytes are the callback body; at most ${limits.payloadBytesMax} bytes decoded. Not together with payload.`,
    },
    readBase64,
  ),
);
const metadataField = field(
  custom<Record<string, unknown>>(
    { type: 'object', description: `Any JSON object, at most ${limits.metadataBytesMax} bytes serialized; no "__proto__" key at any depth.` },
    (value, field, issues) => readMetadata(value, field, issues),
  ),
);
const payloadRefFields = object(
  {
    url: field(urlSchema, { required: true }),
    sha256: field(pattern(/^[0-9a-fA-F]{64}$/, '64 hex digits (SHA-256)', 'The SHA-256 of the body: a fetched body that differs fails the attempt for good.')),
    content_type: field(string(255, 'The content-type sent with the callback (default: what the URL answered, else application/octet-stream).')),
  },
  'The callback body by reference: fetched from url when each attempt starts (size-capped, with its own timeout, under the callback address policy). Not together with payload or payload_base64.',
);
const payloadRefField = field(payloadRefFields);
const misfireThresholdSchema = integer(limits.misfireThresholdMsMin, limits.misfireThresholdMsMax, 'An occurrence more than this late is missed.');

export const jobFields = object(
  {
    id: field(annotate(newJobIdSchema, 'The job id (not . or ..); default derived from the Idempotency-Key header, else a random UUID.')),
    task: field(annotate(taskNameSchema, 'The task to call (it must exist). Exactly one of task or callback.')),
    callback: field(callbackSchema, { description: 'An inline callback (the fields of a task; errors under callback.*). Exactly one of task or callback.' }),
    payload: payloadField,
    payload_base64: payloadBase64Field,
    schedule: field(scheduleSchema, { description: 'When it runs; absent, null or {} is now.' }),
    end_at: field(annotate(timeSchema, 'For a recurring schedule: no occurrence after it; after its start_at (every_ms without start_at: in the future).')),
    max_runs: field(integer(0, Number.MAX_SAFE_INTEGER, 'Regular runs before the job ends; 0 = unlimited.'), { default: 0 }),
    misfire: field(enumOf(misfirePolicies, 'What a recurring job does with missed occurrences.'), { default: 'fire_once' }),
    overlap: field(enumOf(overlapPolicies, 'What a recurring job does with an occurrence due while its previous run is in flight.'), { default: 'allow' }),
    metadata: metadataField,
    misfire_threshold_ms: field(misfireThresholdSchema, { default: limits.misfireThresholdMs }),
    payload_ref: payloadRefField,
  },
  'A job: exactly one of task or callback. The schedule\'s first occurrence must be findable (docs/api.md, Schedule preview).',
);
export const jobSchema = named('JobInput', custom(jobFields.json, () => undefined));

export interface JobContext {
  nowMs: number;
  /** The Idempotency-Key header, already validated (parseIdempotencyKey). */
  idempotencyKey: string | null;
  /** The item's index in a batch, null for POST /v1/jobs. */
  batchIndex: number | null;
  /** The SSRF guard's check of an inline callback's literal address (none: not checked here). */
  urlCheck?: CallbackUrlCheck;
}

/** One job body -> JobSpec; throws invalid_argument naming every bad field (prefixed, e.g. `jobs[3].schedule`). */
export function parseJob(body: unknown, prefix: string, ctx: JobContext): JobSpec {
  const issues = new Issues();
  const o = jobFields.open(body, prefix, issues);
  if (o === undefined) throw issues.toError();
  const get = <K extends keyof typeof jobFields.fields & string>(key: K) => jobFields.get(o, key, prefix, issues, { nowMs: ctx.nowMs });
  const id = o.id == null ? deriveJobId(ctx.idempotencyKey, ctx.batchIndex) : get('id');
  const target = parseTarget(o, prefix, issues, ctx.urlCheck);
  const payload = parsePayload(o, prefix, issues);
  const payloadRef = parsePayloadRef(o, prefix, issues, ctx.urlCheck);
  const schedule = parseSchedule(o.schedule, fieldAt(prefix, 'schedule'), ctx.nowMs, issues);
  const endAtMs = get('end_at');
  const maxRuns = get('max_runs');
  const misfire = get('misfire');
  const overlap = get('overlap');
  const misfireThresholdMs = get('misfire_threshold_ms') ?? limits.misfireThresholdMs;
  const metadata = get('metadata');
  checkEnd(schedule, endAtMs, ctx.nowMs, fieldAt(prefix, 'end_at'), issues);
  checkRenderable(schedule, ctx.nowMs, fieldAt(prefix, 'schedule'), issues);
  if (!issues.ok) throw issues.toError();
  const spec: JobSpec = {
    id: id as string,
    task: target!.task,
    callback: target!.callback,
    payload: payload!.payload,
    payloadEncoding: payload!.payloadEncoding,
    schedule: schedule!,
    endAtMs: endAtMs!,
    maxRuns: maxRuns!,
    misfire: misfire!,
    misfireThresholdMs,
    overlap: overlap!,
    metadata: metadata!,
    requestDigest: requestDigest(body),
    idempotencyKey: ctx.idempotencyKey,
  };
  if (payloadRef != null) spec.payloadRef = payloadRef;
  return endsInModel(spec, () => checkJobSpec(spec, prefix, true));
}

function parseTarget(o: JsonObject, prefix: string, issues: Issues, urlCheck?: CallbackUrlCheck): Pick<JobSpec, 'task' | 'callback'> | undefined {
  const hasTask = o.task != null;
  const hasCallback = o.callback != null;
  if (hasTask === hasCallback) return issues.add(fieldAt(prefix, 'task'), 'give exactly one of task or callback');
  if (hasTask) {
    const task = jobFields.get(o, 'task', prefix, issues);
    return task == null ? undefined : { task, callback: null };
  }
  const callback = parseCallback(o.callback, fieldAt(prefix, 'callback'), issues, urlCheck);
  return callback === undefined ? undefined : { task: null, callback };
}

type PayloadPart = Pick<JobSpec, 'payload' | 'payloadEncoding'>;

/**
 * `payload` (any JSON, sent as its UTF-8 JSON text, `null` included) or `payload_base64` (raw bytes); neither =
 * an empty body.
 */
function parsePayload(o: JsonObject, prefix: string, issues: Issues): PayloadPart | undefined {
  const hasJson = o.payload !== undefined;
  const hasBytes = o.payload_base64 != null;
  if (hasJson && hasBytes) return issues.add(fieldAt(prefix, 'payload'), 'give payload or payload_base64, not both');
  let part: PayloadPart = { payload: new Uint8Array(0), payloadEncoding: 'json' };
  if (hasJson) {
    const text = JSON.stringify(o.payload);
    const bad = nonFiniteNumberIn(o.payload, text, fieldAt(prefix, 'payload'));
    if (bad !== null) return issues.add(bad, nonFiniteNumberMessage);
    part = { payload: new TextEncoder().encode(text), payloadEncoding: 'json' };
  }
  if (hasBytes) {
    const bytes = jobFields.get(o, 'payload_base64', prefix, issues);
    if (bytes == null) return undefined;
    part = { payload: bytes, payloadEncoding: 'base64' };
  }
  if (part.payload.byteLength > limits.payloadBytesMax) {
    const field = fieldAt(prefix, hasBytes ? 'payload_base64' : 'payload');
    return issues.add(field, `must be at most ${limits.payloadBytesMax} bytes (got ${part.payload.byteLength})`);
  }
  return part;
}

/**
 * `payload_ref: {"url", "sha256"?, "content_type"?}`: the body fetched when each attempt starts, instead of an
 * inline payload. null = none; undefined = invalid (or given together with payload / payload_base64).
 */
function parsePayloadRef(o: JsonObject, prefix: string, issues: Issues, urlCheck?: CallbackUrlCheck): PayloadRef | null | undefined {
  if (o.payload_ref == null) return null;
  const field = fieldAt(prefix, 'payload_ref');
  if (o.payload !== undefined || o.payload_base64 != null) return issues.add(field, 'give payload_ref or payload / payload_base64, not both');
  const r = payloadRefFields.read(o.payload_ref, field, issues, urlCheck === undefined ? undefined : { urlCheck });
  if (r === undefined || r.url == null) return undefined;
  return { url: r.url, sha256: r.sha256 == null ? null : r.sha256.toLowerCase(), contentType: r.content_type ?? null };
}

/** Given metadata (absent and null are decided by the caller); undefined = invalid. */
function readMetadata(value: unknown, field: string, issues: Issues): Record<string, unknown> | undefined {
  if (!isObject(value)) return issues.add(field, 'must be a JSON object');
  // The store's encoder (msgpackr) renames a `__proto__` key to `__proto_` on the way back (a prototype-pollution
  // guard), so such metadata would silently read back changed: refuse it instead.
  if (hasOwnProto(value)) return issues.add(field, 'must not contain a "__proto__" key');
  const text = JSON.stringify(value);
  const bad = nonFiniteNumberIn(value, text, field);
  if (bad !== null) return issues.add(bad, nonFiniteNumberMessage);
  const bytes = utf8Length(text);
  if (bytes > limits.metadataBytesMax) return issues.add(field, `must be at most ${limits.metadataBytesMax} bytes as JSON (got ${bytes})`);
  return value;
}

/**
 * A recurring schedule whose first occurrence is after 9999-12-31 (a cron starting late in 9999) would
 * show a `next_fire_at` that is not RFC 3339 (`+010000-...`) and never fire: refuse it.
 */
function checkRenderable(schedule: ScheduleSpec | undefined, nowMs: number, field: string, issues: Issues): void {
  if (schedule === undefined || schedule.kind === 'once') return;
  const resolved = resolveSchedule(schedule, nowMs);
  const first = firstOccurrence(resolved, nowMs);
  if (first === null && firstOccurrenceOutOfBound(resolved, nowMs)) {
    issues.add(`${field}.cron`, `no occurrence found within the search bound (${schedulerLimits.cronSearchStepsMax} steps): the expression matches too rarely`);
  } else if (first === null || first > timeMsMax) issues.add(field, 'has no occurrence before 9999-12-31T23:59:59.999Z');
}

function checkEnd(schedule: ScheduleSpec | undefined, endAtMs: number | null | undefined, nowMs: number, field: string, issues: Issues): void {
  if (schedule === undefined || endAtMs == null || schedule.kind === 'once') return;
  if (schedule.kind === 'every' && schedule.startAtMs === null) {
    // Starts when its command is stamped, about now.
    if (endAtMs <= nowMs) issues.add(field, 'must be in the future (every_ms without start_at starts now)');
    return;
  }
  const startAtMs = schedule.startAtMs;
  if (startAtMs !== null && endAtMs <= startAtMs) issues.add(field, 'must be after schedule.start_at');
}

export type BatchItem = { ok: true; spec: JobSpec } | { ok: false; id: string | null; error: PunctualError };

export const batchFields = object(
  {
    jobs: field(
      custom<unknown[]>({ type: 'array', items: jobSchema.json, maxItems: limits.batchJobsMax, description: 'Each item is checked and answered on its own.' }, (v) => v as unknown[]),
      { required: true },
    ),
  },
  `At most ${limits.batchJobsMax} jobs; the body at most ${limits.batchBodyBytesMax} bytes.`,
);

/** POST /v1/jobs:batch: `{"jobs": [...]}`; each item is parsed on its own so one bad item never fails the others. */
export function parseBatch(body: unknown, nowMs: number, idempotencyKey: string | null, urlCheck?: CallbackUrlCheck): BatchItem[] {
  const issues = new Issues();
  const o = batchFields.open(body, '', issues);
  if (o === undefined) throw issues.toError();
  if (!Array.isArray(o.jobs)) issues.add('jobs', 'must be an array of jobs');
  else if (o.jobs.length > limits.batchJobsMax) issues.add('jobs', `at most ${limits.batchJobsMax} jobs per batch (got ${o.jobs.length})`);
  issues.throwIfAny();
  return (o.jobs as unknown[]).map((item, i): BatchItem => {
    try {
      return { ok: true, spec: parseJob(item, `jobs[${i}]`, { nowMs, idempotencyKey, batchIndex: i, urlCheck }) };
    } catch (err) {
      const id = isObject(item) && typeof item.id === 'string' && jobIdPattern.test(item.id) ? item.id : null;
      if (err instanceof PunctualError) return { ok: false, id, error: err };
      throw err;
    }
  });
}

export const patchFields = object(
  {
    schedule: field(annotate(scheduleSchema, 'A new schedule, replacing the whole schedule (exclude included); its first occurrence from the moment of the patch.')),
    payload: payloadField,
    payload_base64: payloadBase64Field,
    metadata: field(metadataField.schema, { nullIsValue: true, description: 'New metadata; null clears it.' }),
    misfire_threshold_ms: field(misfireThresholdSchema),
    payload_ref: field(payloadRefFields, { nullIsValue: true, description: 'A new body by reference (replacing an inline payload); null goes back to no payload.' }),
  },
  'Any of these; absent fields are unchanged; an empty object changes nothing.',
);

/** PATCH /v1/jobs/{id}: any of schedule, payload | payload_base64, metadata (null clears it). */
export function parsePatch(body: unknown, nowMs: number): JobPatch {
  const issues = new Issues();
  const o = patchFields.open(body, '', issues);
  if (o === undefined) throw issues.toError();
  const patch: JobPatch = {};
  const misfireThresholdMs = patchFields.get(o, 'misfire_threshold_ms', '', issues);
  if (misfireThresholdMs != null) patch.misfireThresholdMs = misfireThresholdMs;
  // null is absent here as everywhere: the schedule stays (parseSchedule would read null as "now" and fire the job).
  if (o.schedule != null) {
    patch.schedule = parseSchedule(o.schedule, 'schedule', nowMs, issues);
    checkRenderable(patch.schedule, nowMs, 'schedule', issues);
  }
  if (o.payload !== undefined || o.payload_base64 != null) {
    const part = parsePayload(o, '', issues);
    if (part !== undefined) Object.assign(patch, part);
  }
  if (o.metadata !== undefined) patch.metadata = o.metadata === null ? null : patchFields.get(o, 'metadata', '', issues);
  if (o.payload_ref !== undefined) {
    const ref = o.payload_ref === null ? null : parsePayloadRef(o, '', issues);
    if (ref !== undefined) patch.payloadRef = ref;
  }
  issues.throwIfAny();
  return endsInModel(patch, () => checkJobPatch(patch, '', true));
}

export const previewFields = object(
  {
    schedule: field(annotate(scheduleSchema, 'As for jobs (absent = now; every_ms without start_at starts at from).')),
    from: field(annotate(timeSchema, 'The first time listed is at or after it (default: now).')),
    count: field(integer(1, limits.previewCountMax), { default: limits.previewCountDefault }),
    id: field(annotate(jobIdSchema, 'Preview the times of the job with this id (its spread_ms offset added).')),
  },
  'An empty body is {}.',
);

export interface PreviewRequest {
  schedule: Schedule;
  fromMs: number;
  count: number;
}

/**
 * POST /v1/schedules:preview: `{"schedule", "from" (default now), "count" (default 10, at most 1000), "id"}`.
 * `id` places a `spread_ms` schedule's times as the job with that id runs them (without it: the nominal times).
 */
export function parsePreview(body: unknown, nowMs: number): PreviewRequest {
  const issues = new Issues();
  const o = body === undefined ? {} : previewFields.open(body, '', issues);
  if (o === undefined) throw issues.toError();
  const fromMs = previewFields.get(o, 'from', '', issues) ?? nowMs;
  const count = previewFields.get(o, 'count', '', issues);
  const id = previewFields.get(o, 'id', '', issues) ?? undefined;
  const schedule = parseSchedule(o.schedule, 'schedule', fromMs ?? nowMs, issues);
  if (!issues.ok) throw issues.toError();
  // `every_ms` without `start_at` previews as a job created at `from` would run.
  return { schedule: resolveSchedule(schedule!, fromMs!, id), fromMs: fromMs!, count: count! };
}

export const nodeIdSchema = pattern(nodeIdPattern, '[a-z0-9-]{1,32}', 'A node id: [a-z0-9-]{1,32}.');
export const shardSchema = pattern(/^\d{1,9}$/, 'a shard number', 'A shard number.');

export const transferFields = object({ to: field(annotate(nodeIdSchema, 'The node to hand the leadership to.'), { required: true }) });

/** POST /v1/cluster/shards/{id}/transfer-leader: `{"to": "n2"}`. */
export function parseTransfer(shardText: string, body: unknown): { shard: number; to: string } {
  const issues = new Issues();
  const shard = shardSchema.read(shardText, 'shard', issues);
  const t = transferFields.read(body, '', issues);
  if (!issues.ok) throw issues.toError();
  return { shard: Number(shard), to: t!.to! };
}

export const addNodeFields = object({
  id: field(annotate(nodeIdSchema, 'The new node\'s id (started with serve --join).'), { required: true }),
  peer_addr: field(string(300, 'Its peer address HOST:PORT.'), { required: true }),
});

/** POST /v1/cluster/nodes: `{"id": "n4", "peer_addr": "HOST:PORT"}`. */
export function parseAddNode(body: unknown): { id: string; peerAddr: string } {
  const issues = new Issues();
  const n = addNodeFields.read(body, '', issues);
  if (!issues.ok || n === undefined) throw issues.toError();
  return { id: n.id!, peerAddr: n.peer_addr! };
}

/** A node id in a path (DELETE /v1/cluster/nodes/{id}). */
export function parseNodeId(id: string): string {
  const issues = new Issues();
  nodeIdSchema.read(id, 'id', issues);
  issues.throwIfAny();
  return id;
}

const limitParam = intParam(1, limits.listLimitMax, limits.listLimitDefault, 'Items per page.');
const cursorParam: QueryParam<string> = {
  json: { type: 'string', maxLength: httpLimits.listCursorLengthMax },
  description: 'Opaque: the next_cursor of the previous page. Follow it until it is null.',
  read: (text, name, issues) => (text.length > httpLimits.listCursorLengthMax ? issues.add(name, 'is too long') : text),
};

/** GET /v1/jobs (empty values count as absent; a parameter given twice: the first counts). */
const metadataParamPrefix = 'metadata.';
const fireTimeParam = (description: string): QueryParam<number> => ({
  json: { type: 'string', description: 'RFC 3339, or epoch milliseconds' },
  description,
  read: (text, name, issues) => readTime(/^\d{1,16}$/.test(text) ? Number(text) : text, name, issues),
});

export const jobListQuery = query(
  {
    state: textParam(anyCaseEnum(jobStates, 'Only jobs in this state.'), 'Only jobs in this state (any case).'),
    task: textParam(taskNameSchema, 'Only jobs of this task.'),
    next_fire_after: fireTimeParam('Only jobs whose next fire time is at or after this instant.'),
    next_fire_before: fireTimeParam('Only jobs whose next fire time is before this instant.'),
    limit: limitParam,
    cursor: cursorParam,
  },
  [{
    prefix: metadataParamPrefix,
    json: { type: 'string', maxLength: searchLimits.metadataValueBytesMax },
    description: `metadata.KEY=VALUE: only jobs whose metadata has this top-level KEY with this value (a string, or a number or boolean by its JSON text); up to ${searchLimits.metadataFiltersMax} of them, all must match; KEY 1..${searchLimits.metadataKeyBytesMax} bytes, VALUE at most ${searchLimits.metadataValueBytesMax} bytes.`,
  }],
);
/** GET /v1/jobs/{id}/executions. */
export const pageQuery = query({ limit: limitParam, cursor: cursorParam });
/** A list route without paging (GET /v1/tasks, /v1/calendars): any parameter is refused by name. */
export const noQuery = query({});

/** GET /v1/jobs?state=&task=&limit=&cursor= (empty values count as absent; unknown parameters are refused). */
export function parseJobListQuery(params: URLSearchParams): JobListQuery {
  const issues = new Issues();
  const q = jobListQuery.read(params, issues);
  const search = readSearch(params, q.next_fire_after, q.next_fire_before, issues);
  issues.throwIfAny();
  const out: JobListQuery = { state: q.state as JobState | null, task: q.task, limit: q.limit ?? limits.listLimitDefault, cursor: q.cursor };
  if (!isNoSearch(search)) out.search = search;
  return out;
}

/** The search filters of GET /v1/jobs: `metadata.KEY=VALUE` (AND) and the next fire time range. */
function readSearch(params: URLSearchParams, after: number | null, before: number | null, issues: Issues): JobSearch {
  const metadata: Array<[string, string]> = [];
  for (const [name, value] of params) {
    if (!name.startsWith(metadataParamPrefix)) continue;
    const key = name.slice(metadataParamPrefix.length);
    if (key.length === 0 || utf8Length(key) > searchLimits.metadataKeyBytesMax) {
      issues.add(name, `a metadata key of 1 to ${searchLimits.metadataKeyBytesMax} bytes`);
    } else if (utf8Length(value) > searchLimits.metadataValueBytesMax) {
      issues.add(name, `must be at most ${searchLimits.metadataValueBytesMax} bytes (longer values are not indexed)`);
    } else if (metadata.some(([k]) => k === key)) issues.add(name, 'is given twice');
    else metadata.push([key, value]);
  }
  if (metadata.length > searchLimits.metadataFiltersMax) {
    issues.add('metadata', `at most ${searchLimits.metadataFiltersMax} metadata filters (got ${metadata.length})`);
  }
  if (after !== null && before !== null && before <= after) issues.add('next_fire_before', 'must be after next_fire_after');
  return { metadata, nextFireAfterMs: after, nextFireBeforeMs: before };
}

/** GET /v1/tasks: a list route without parameters (every task); any parameter is refused by name. */
export function parseNoQuery(params: URLSearchParams): void {
  const issues = new Issues();
  noQuery.read(params, issues);
  issues.throwIfAny();
}

/** GET /v1/jobs/{id}/executions?limit=&cursor=. */
export function parsePageQuery(params: URLSearchParams): { limit: number; cursor: string | null } {
  const issues = new Issues();
  const q = pageQuery.read(params, issues);
  issues.throwIfAny();
  return { limit: q.limit ?? limits.listLimitDefault, cursor: q.cursor };
}

/** The Idempotency-Key header (1..255 characters): documented as a header parameter. */
export const idempotencyKeySchema = string(httpLimits.idempotencyKeyLengthMax);

/** The Idempotency-Key header: 1..255 characters, or absent. */
export function parseIdempotencyKey(header: string | undefined): string | null {
  if (header === undefined) return null;
  if (header.length === 0 || header.length > httpLimits.idempotencyKeyLengthMax) {
    throw invalid('Idempotency-Key', `must be 1 to ${httpLimits.idempotencyKeyLengthMax} characters`);
  }
  return header;
}
