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
import { endsInModel, misfirePolicies, overlapPolicies, parseCallback, parseSchedule, parseUrl, type CallbackUrlCheck } from './parse.js';
import {
  Issues,
  fieldAt,
  isObject,
  onlyKeys,
  readBase64,
  readEnum,
  readInt,
  readObject,
  readPattern,
  readString,
  readTime,
  utf8Length,
  type JsonObject,
} from './validate.js';

const jobKeys = [
  'id', 'task', 'callback', 'payload', 'payload_base64', 'schedule', 'end_at', 'max_runs', 'misfire', 'overlap', 'metadata',
  'misfire_threshold_ms', 'payload_ref',
] as const;

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
  const o = readObject(body, prefix, issues);
  if (o === undefined) throw issues.toError();
  onlyKeys(o, jobKeys, prefix, issues);
  const id = o.id == null ? deriveJobId(ctx.idempotencyKey, ctx.batchIndex) : readPattern(o.id, fieldAt(prefix, 'id'), jobIdPattern, '[A-Za-z0-9._:-]{1,128}', issues);
  const target = parseTarget(o, prefix, issues, ctx.urlCheck);
  const payload = parsePayload(o, prefix, issues);
  const payloadRef = parsePayloadRef(o, prefix, issues, ctx.urlCheck);
  const schedule = parseSchedule(o.schedule, fieldAt(prefix, 'schedule'), ctx.nowMs, issues);
  const endAtMs = o.end_at == null ? null : readTime(o.end_at, fieldAt(prefix, 'end_at'), issues);
  const maxRuns = o.max_runs == null ? 0 : readInt(o.max_runs, fieldAt(prefix, 'max_runs'), 0, Number.MAX_SAFE_INTEGER, issues);
  const misfire = o.misfire == null ? 'fire_once' : readEnum(o.misfire, fieldAt(prefix, 'misfire'), misfirePolicies, issues);
  const overlap = o.overlap == null ? 'allow' : readEnum(o.overlap, fieldAt(prefix, 'overlap'), overlapPolicies, issues);
  const misfireThresholdMs = readMisfireThreshold(o.misfire_threshold_ms, fieldAt(prefix, 'misfire_threshold_ms'), issues) ?? limits.misfireThresholdMs;
  const metadata = parseMetadata(o.metadata, fieldAt(prefix, 'metadata'), issues);
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
    const task = readPattern(o.task, fieldAt(prefix, 'task'), taskNamePattern, '[A-Za-z0-9._-]{1,128}', issues);
    return task === undefined ? undefined : { task, callback: null };
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
  if (hasJson) part = { payload: new TextEncoder().encode(JSON.stringify(o.payload)), payloadEncoding: 'json' };
  if (hasBytes) {
    const bytes = readBase64(o.payload_base64, fieldAt(prefix, 'payload_base64'), issues);
    if (bytes === undefined) return undefined;
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
  const r = readObject(o.payload_ref, field, issues);
  if (r === undefined) return undefined;
  onlyKeys(r, ['url', 'sha256', 'content_type'], field, issues);
  const url = parseUrl(r.url, fieldAt(field, 'url'), issues, urlCheck);
  let sha256: string | null = null;
  if (r.sha256 != null) {
    if (typeof r.sha256 !== 'string' || !/^[0-9a-fA-F]{64}$/.test(r.sha256)) issues.add(fieldAt(field, 'sha256'), 'must be 64 hex digits (SHA-256)');
    else sha256 = r.sha256.toLowerCase();
  }
  const contentType = r.content_type == null ? null : readString(r.content_type, fieldAt(field, 'content_type'), 255, issues);
  if (url === undefined || contentType === undefined) return undefined;
  return { url, sha256, contentType };
}

/** null = none; undefined = invalid. */
function parseMetadata(value: unknown, field: string, issues: Issues): Record<string, unknown> | null | undefined {
  if (value === undefined || value === null) return null;
  if (!isObject(value)) return issues.add(field, 'must be a JSON object');
  // The store's encoder (msgpackr) renames a `__proto__` key to `__proto_` on the way back (a prototype-pollution
  // guard), so such metadata would silently read back changed: refuse it instead.
  if (hasOwnProto(value)) return issues.add(field, 'must not contain a "__proto__" key');
  const bytes = utf8Length(JSON.stringify(value));
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

/** `misfire_threshold_ms`: absent or null = undefined (the default, or unchanged in a patch). */
function readMisfireThreshold(value: unknown, field: string, issues: Issues): number | undefined {
  if (value == null) return undefined;
  return readInt(value, field, limits.misfireThresholdMsMin, limits.misfireThresholdMsMax, issues);
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

/** POST /v1/jobs:batch: `{"jobs": [...]}`; each item is parsed on its own so one bad item never fails the others. */
export function parseBatch(body: unknown, nowMs: number, idempotencyKey: string | null, urlCheck?: CallbackUrlCheck): BatchItem[] {
  const issues = new Issues();
  const o = readObject(body, '', issues);
  if (o === undefined) throw issues.toError();
  onlyKeys(o, ['jobs'], '', issues);
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

/** PATCH /v1/jobs/{id}: any of schedule, payload | payload_base64, metadata (null clears it). */
export function parsePatch(body: unknown, nowMs: number): JobPatch {
  const issues = new Issues();
  const o = readObject(body, '', issues);
  if (o === undefined) throw issues.toError();
  onlyKeys(o, ['schedule', 'payload', 'payload_base64', 'metadata', 'misfire_threshold_ms', 'payload_ref'], '', issues);
  const patch: JobPatch = {};
  const misfireThresholdMs = readMisfireThreshold(o.misfire_threshold_ms, 'misfire_threshold_ms', issues);
  if (misfireThresholdMs !== undefined) patch.misfireThresholdMs = misfireThresholdMs;
  if (o.schedule !== undefined) patch.schedule = parseSchedule(o.schedule, 'schedule', nowMs, issues);
  if (o.schedule !== undefined) checkRenderable(patch.schedule, nowMs, 'schedule', issues);
  if (o.payload !== undefined || o.payload_base64 != null) {
    const part = parsePayload(o, '', issues);
    if (part !== undefined) Object.assign(patch, part);
  }
  if (o.metadata !== undefined) patch.metadata = parseMetadata(o.metadata, 'metadata', issues);
  if (o.payload_ref !== undefined) {
    const ref = o.payload_ref === null ? null : parsePayloadRef(o, '', issues);
    if (ref !== undefined) patch.payloadRef = ref;
  }
  issues.throwIfAny();
  return endsInModel(patch, () => checkJobPatch(patch, '', true));
}

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
  const o = body === undefined ? {} : readObject(body, '', issues);
  if (o === undefined) throw issues.toError();
  onlyKeys(o, ['schedule', 'from', 'count', 'id'], '', issues);
  const fromMs = o.from == null ? nowMs : readTime(o.from, 'from', issues);
  const count = o.count == null ? limits.previewCountDefault : readInt(o.count, 'count', 1, limits.previewCountMax, issues);
  const id = o.id == null ? undefined : readPattern(o.id, 'id', jobIdPattern, '[A-Za-z0-9._:-]{1,128}', issues);
  const schedule = parseSchedule(o.schedule, 'schedule', fromMs ?? nowMs, issues);
  if (!issues.ok) throw issues.toError();
  // `every_ms` without `start_at` previews as a job created at `from` would run.
  return { schedule: resolveSchedule(schedule!, fromMs!, id), fromMs: fromMs!, count: count! };
}

/** POST /v1/cluster/shards/{id}/transfer-leader: `{"to": "n2"}`. */
export function parseTransfer(shardText: string, body: unknown): { shard: number; to: string } {
  const issues = new Issues();
  const shard = /^\d{1,9}$/.test(shardText) ? Number(shardText) : issues.add('shard', 'must be a shard number');
  const o = readObject(body, '', issues);
  if (o !== undefined) onlyKeys(o, ['to'], '', issues);
  const to = o === undefined ? undefined : readPattern(o.to, 'to', nodeIdPattern, '[a-z0-9-]{1,32}', issues);
  if (!issues.ok) throw issues.toError();
  return { shard: shard!, to: to! };
}

/**
 * GET /v1/jobs?state=&task=&limit=&cursor= and the search filters `metadata.KEY=VALUE` (repeatable, AND),
 * `next_fire_after=`, `next_fire_before=` (RFC 3339). Empty values count as absent; unknown parameters are refused.
 */
export function parseJobListQuery(params: URLSearchParams): JobListQuery {
  const issues = new Issues();
  onlyParams(params, ['state', 'task', 'limit', 'cursor', 'next_fire_after', 'next_fire_before'], issues, metadataParamPrefix);
  const stateText = param(params, 'state');
  const state = stateText === null ? null : readEnum(stateText.toUpperCase(), 'state', jobStates, issues);
  const taskText = param(params, 'task');
  const task = taskText === null ? null : readPattern(taskText, 'task', taskNamePattern, '[A-Za-z0-9._-]{1,128}', issues);
  const page = readPage(params, issues);
  const search = readSearch(params, issues);
  if (!issues.ok) throw issues.toError();
  const query: JobListQuery = { state: state as JobState | null, task: task as string | null, ...page };
  if (!isNoSearch(search)) query.search = search;
  return query;
}

const metadataParamPrefix = 'metadata.';

function readSearch(params: URLSearchParams, issues: Issues): JobSearch {
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
  const afterText = param(params, 'next_fire_after');
  const beforeText = param(params, 'next_fire_before');
  const after = afterText === null ? null : (readTime(afterText, 'next_fire_after', issues) ?? null);
  const before = beforeText === null ? null : (readTime(beforeText, 'next_fire_before', issues) ?? null);
  if (after !== null && before !== null && before <= after) issues.add('next_fire_before', 'must be after next_fire_after');
  return { metadata, nextFireAfterMs: after, nextFireBeforeMs: before };
}

/** GET /v1/tasks: a list route without parameters (every task); any parameter is refused by name. */
export function parseNoQuery(params: URLSearchParams): void {
  const issues = new Issues();
  onlyParams(params, [], issues);
  issues.throwIfAny();
}

/** GET /v1/jobs/{id}/executions?limit=&cursor=. */
export function parsePageQuery(params: URLSearchParams): { limit: number; cursor: string | null } {
  const issues = new Issues();
  onlyParams(params, ['limit', 'cursor'], issues);
  const page = readPage(params, issues);
  issues.throwIfAny();
  return page;
}

function readPage(params: URLSearchParams, issues: Issues): { limit: number; cursor: string | null } {
  const limitText = param(params, 'limit');
  let limit: number = limits.listLimitDefault;
  if (limitText !== null) {
    const n = /^\d{1,9}$/.test(limitText) ? Number(limitText) : NaN;
    limit = readInt(n, 'limit', 1, limits.listLimitMax, issues) ?? limit;
  }
  const cursor = param(params, 'cursor');
  if (cursor !== null && cursor.length > httpLimits.listCursorLengthMax) issues.add('cursor', 'is too long');
  return { limit, cursor };
}

function param(params: URLSearchParams, name: string): string | null {
  const value = params.get(name);
  return value === null || value === '' ? null : value;
}

function onlyParams(params: URLSearchParams, allowed: readonly string[], issues: Issues, allowedPrefix: string | null = null): void {
  for (const name of new Set(params.keys())) {
    if (allowedPrefix !== null && name.startsWith(allowedPrefix)) continue;
    if (!allowed.includes(name)) issues.add(name, 'unknown query parameter');
  }
}

/** The Idempotency-Key header: 1..255 characters, or absent. */
export function parseIdempotencyKey(header: string | undefined): string | null {
  if (header === undefined) return null;
  if (header.length === 0 || header.length > httpLimits.idempotencyKeyLengthMax) {
    throw invalid('Idempotency-Key', `must be 1 to ${httpLimits.idempotencyKeyLengthMax} characters`);
  }
  return header;
}
