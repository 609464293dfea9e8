/**
 * The ONE mapping from the internal model (camelCase, epoch ms: src/scheduler/types.ts) to the JSON of docs/api.md
 * (snake_case, RFC 3339 UTC with milliseconds). A signing secret is never echoed: it shows as "***".
 */
import type { ClusterView } from './scheduler-api.js';
import type { AttemptRecord, CalendarRecord, CallbackSpec, ExecutionRecord, JobView, Schedule, TaskRecord } from '../scheduler/types.js';
import { unreachable } from '../core/assert.js';
import { misfireThresholdOf } from '../scheduler/policy.js';
import { redactedSecret } from './parse.js';
import { renderTime, renderTimeOrNull } from './time.js';

export function scheduleView(s: Schedule): Record<string, unknown> {
  const view = scheduleKindView(s);
  if (s.kind !== 'once' && s.exclude !== undefined) view.exclude = [...s.exclude];
  return view;
}

function scheduleKindView(s: Schedule): Record<string, unknown> {
  switch (s.kind) {
    case 'once':
      return { at: renderTime(s.atMs) };
    case 'cron': {
      const view: Record<string, unknown> = { cron: s.cron, timezone: s.timezone };
      if (s.startAtMs !== null) view.start_at = renderTime(s.startAtMs);
      if (s.dst !== undefined) view.dst = { gap: s.dst.gap, repeat: s.dst.repeat };
      return { ...view, ...spreadView(s) };
    }
    case 'every':
      return { every_ms: s.everyMs, start_at: renderTime(s.startAtMs), ...spreadView(s) };
    default:
      return unreachable(s, 'schedule kind');
  }
}

/** `spread_ms` as given, and the job's offset within it (its runs are that much after the nominal times). */
function spreadView(s: { spreadMs?: number; spreadOffsetMs?: number }): Record<string, unknown> {
  return s.spreadMs === undefined ? {} : { spread_ms: s.spreadMs, spread_offset_ms: s.spreadOffsetMs ?? 0 };
}

export function callbackView(c: CallbackSpec): Record<string, unknown> {
  const view: Record<string, unknown> = {
    url: c.url,
    method: c.method,
    headers: { ...c.headers },
    timeout_ms: c.timeoutMs,
    retry: {
      max_attempts: c.retry.maxAttempts,
      initial_backoff_ms: c.retry.initialBackoffMs,
      max_backoff_ms: c.retry.maxBackoffMs,
      multiplier: c.retry.multiplier,
      jitter: c.retry.jitter,
    },
  };
  if (c.signingSecret !== null) view.signing_secret = redactedSecret;
  if (c.signingSecretNext != null) view.signing_secret_next = redactedSecret;
  view.max_concurrency = c.maxConcurrency;
  return view;
}

export function calendarView(c: CalendarRecord): Record<string, unknown> {
  return {
    name: c.name,
    timezone: c.timezone,
    dates: [...c.dates],
    ranges: c.ranges.map((r) => ({ from: r.from, to: r.to })),
    description: c.description,
    created_at: renderTime(c.createdAtMs),
    updated_at: renderTime(c.updatedAtMs),
  };
}

export function taskView(t: TaskRecord): Record<string, unknown> {
  return { name: t.name, ...callbackView(t), retention_ms: t.retentionMs ?? null, created_at: renderTime(t.createdAtMs), updated_at: renderTime(t.updatedAtMs) };
}

export function executionView(e: ExecutionRecord): Record<string, unknown> {
  return {
    id: `${e.jobId}:${e.scheduledAtMs}`,
    scheduled_at: renderTime(e.scheduledAtMs),
    attempt: e.attempt,
    state: e.state,
    started_at: renderTimeOrNull(e.startedAtMs),
    finished_at: renderTimeOrNull(e.finishedAtMs),
    status_code: e.statusCode,
    error: e.error,
    lateness_ms: e.latenessMs,
    node_id: e.nodeId,
    attempts: (e.attempts ?? []).map(attemptView),
  };
}

/** One attempt of an execution (docs/api.md): `duration_ms` when both its start and its end are known. */
function attemptView(a: AttemptRecord): Record<string, unknown> {
  return {
    attempt: a.attempt,
    started_at: renderTimeOrNull(a.startedAtMs),
    finished_at: renderTimeOrNull(a.finishedAtMs),
    duration_ms: a.startedAtMs !== null && a.finishedAtMs !== null ? a.finishedAtMs - a.startedAtMs : null,
    status_code: a.statusCode,
    error: a.error,
    node_id: a.nodeId,
    fencing_token: a.fencingToken,
  };
}

/** `payload` (the JSON value), `payload_base64`, or neither when the job was created without a payload. */
function payloadView(j: JobView): Record<string, unknown> {
  if (j.payloadRef != null) {
    return { payload_ref: { url: j.payloadRef.url, sha256: j.payloadRef.sha256, content_type: j.payloadRef.contentType } };
  }
  if (j.payloadEncoding === 'base64') return { payload_base64: Buffer.from(j.payload).toString('base64') };
  if (j.payload.byteLength === 0) return {};
  return { payload: JSON.parse(new TextDecoder().decode(j.payload)) as unknown };
}

export function jobView(j: JobView): Record<string, unknown> {
  const view: Record<string, unknown> = {
    id: j.id,
    task: j.task,
    schedule: scheduleView(j.schedule),
    state: j.state,
    next_fire_at: renderTimeOrNull(j.nextFireAtMs),
    created_at: renderTime(j.createdAtMs),
    updated_at: renderTime(j.updatedAtMs),
    runs: j.runs,
    shard: j.shard,
    last_execution: j.lastExecution === null ? null : executionView(j.lastExecution),
    ...payloadView(j),
  };
  if (j.callback !== null) view.callback = callbackView(j.callback);
  view.end_at = renderTimeOrNull(j.endAtMs);
  view.max_runs = j.maxRuns;
  view.misfire = j.misfire;
  view.misfire_threshold_ms = misfireThresholdOf(j);
  view.overlap = j.overlap;
  view.metadata = j.metadata;
  return view;
}

export function clusterView(c: ClusterView): Record<string, unknown> {
  return {
    node_id: c.nodeId,
    // A member whose client address is not known yet (never reached) has `api_addr: null`, not "".
    nodes: c.nodes.map((n) => ({ id: n.id, peer_addr: n.peerAddr, api_addr: n.apiAddr === '' ? null : n.apiAddr, reachable: n.reachable })),
    shards: c.shards.map((s) => ({
      id: s.id,
      leader: s.leader,
      term: s.term,
      commit_index: s.commitIndex,
      applied_index: s.appliedIndex,
      members: [...s.members],
    })),
  };
}
