/** views.ts round-trips (body -> JobSpec -> rendered JSON), times, ids and the digest helpers. */
import { describe, expect, it } from 'vitest';
import type { JobView } from '../scheduler/types.js';
import { resolveSchedule } from '../scheduler/policy.js';
import { canonicalJson, deriveJobId, requestDigest, sha256Hex } from './idempotency.js';
import { parseJob } from './parse-job.js';
import { parseRfc3339, renderTime } from './time.js';
import { clusterView, executionView, jobView, scheduleView, taskView } from './views.js';

const nowMs = Date.UTC(2026, 11, 1, 9, 0, 0);

function viewOf(body: Record<string, unknown>): Record<string, unknown> {
  const spec = parseJob(body, '', { nowMs, idempotencyKey: null, batchIndex: null });
  const view: JobView = { ...spec, schedule: resolveSchedule(spec.schedule, nowMs, spec.id), state: 'PENDING', nextFireAtMs: null, runs: 0, shard: 2, createdAtMs: nowMs, updatedAtMs: nowMs, lastExecution: null };
  return jobView(view);
}

describe('job view round-trips', () => {
  const schedules: Array<Record<string, unknown>> = [
    { at: '2026-12-01T09:00:00.000Z' },
    { cron: '0 0 9 * * MON-FRI', timezone: 'Europe/Berlin' },
    { cron: '*/5 * * * *', timezone: 'UTC', start_at: '2027-01-01T00:00:00.000Z' },
    { every_ms: 60_000, start_at: '2026-12-01T09:00:00.000Z' },
  ];
  it.each(schedules)('schedule %j renders back as given', (schedule) => {
    expect(viewOf({ callback: { url: 'https://e.com/' }, schedule }).schedule).toEqual(schedule);
  });

  it('every input time form renders as RFC 3339 UTC with milliseconds', () => {
    expect(viewOf({ task: 't', schedule: { at: '2026-12-01T10:30:00+01:30' } }).schedule).toEqual({ at: '2026-12-01T09:00:00.000Z' });
    expect(viewOf({ task: 't', schedule: { at: nowMs + 1 } }).schedule).toEqual({ at: '2026-12-01T09:00:00.001Z' });
    expect(viewOf({ task: 't', schedule: { delay_ms: 1500 } }).schedule).toEqual({ at: '2026-12-01T09:00:01.500Z' });
  });

  it('has exactly the docs/api.md fields, in order, and the inline callback with its secret redacted', () => {
    const body = {
      id: 'j-1',
      callback: { url: 'https://e.com/x', signing_secret: 'hunter2-hunter2-hunter2', headers: { 'X-Tenant': 'a' } },
      payload: { hello: ['w', 0] },
      schedule: { every_ms: 1000 },
      end_at: '2027-01-01T00:00:00Z',
      max_runs: 10,
      misfire: 'skip',
      overlap: 'buffer_one',
      metadata: { team: 'core' },
    };
    const view = viewOf(body);
    expect(Object.keys(view)).toEqual([
      'id', 'task', 'schedule', 'state', 'next_fire_at', 'created_at', 'updated_at', 'runs', 'shard', 'last_execution',
      'payload', 'callback', 'end_at', 'max_runs', 'misfire', 'misfire_threshold_ms', 'overlap', 'metadata',
    ]);
    expect(view).toMatchObject({
      id: 'j-1', task: null, payload: body.payload, end_at: '2027-01-01T00:00:00.000Z', max_runs: 10,
      misfire: 'skip', misfire_threshold_ms: 5_000, overlap: 'buffer_one', metadata: { team: 'core' }, shard: 2, created_at: '2026-12-01T09:00:00.000Z',
    });
    expect(view.callback).toEqual({
      url: 'https://e.com/x', method: 'POST', headers: { 'x-tenant': 'a' }, timeout_ms: 10_000,
      retry: { max_attempts: 5, initial_backoff_ms: 1000, max_backoff_ms: 60_000, multiplier: 2, jitter: true },
      signing_secret: '***', max_concurrency: 100,
    });
    expect(JSON.stringify(view)).not.toContain('hunter2-hunter2-hunter2');
  });

  it('misfire_threshold_ms: as given; a job stored before the field existed shows the 5000 it keeps', () => {
    expect(viewOf({ task: 't', schedule: { every_ms: 1000 }, misfire_threshold_ms: 60_000 }).misfire_threshold_ms).toBe(60_000);
    const spec = parseJob({ task: 't', schedule: { every_ms: 1000 } }, '', { nowMs, idempotencyKey: null, batchIndex: null });
    const { misfireThresholdMs: _dropped, ...legacy } = spec;
    const view: JobView = { ...legacy, schedule: resolveSchedule(spec.schedule, nowMs), state: 'PENDING', nextFireAtMs: null, runs: 0, shard: 0, createdAtMs: nowMs, updatedAtMs: nowMs, lastExecution: null };
    expect(jobView(view).misfire_threshold_ms).toBe(5_000);
    // every_ms without start_at reads back with the start it got when its command was stamped: its created_at.
    expect(jobView(view).schedule).toEqual({ every_ms: 1000, start_at: renderTime(nowMs) });
  });

  it('payload forms: JSON value, base64 bytes, null, none', () => {
    expect(viewOf({ task: 't', payload_base64: 'AAEC/w==' })).toMatchObject({ payload_base64: 'AAEC/w==' });
    expect(viewOf({ task: 't', payload: null })).toHaveProperty('payload', null);
    const none = viewOf({ task: 't' });
    expect(none).not.toHaveProperty('payload');
    expect(none).not.toHaveProperty('payload_base64');
    expect(none).not.toHaveProperty('callback');
  });

  it('a task without a secret omits signing_secret', () => {
    const view = taskView({
      name: 't', url: 'https://e.com', method: 'POST', headers: {}, timeoutMs: 1, maxConcurrency: 1, signingSecret: null,
      retry: { maxAttempts: 1, initialBackoffMs: 0, maxBackoffMs: 0, multiplier: 1, jitter: false }, createdAtMs: 0, updatedAtMs: 1,
    });
    expect(view).not.toHaveProperty('signing_secret');
    expect(view).toMatchObject({ name: 't', created_at: '1970-01-01T00:00:00.000Z', updated_at: '1970-01-01T00:00:00.001Z' });
  });

  it('execution id is {job_id}:{scheduled_at_ms}; nulls stay null', () => {
    expect(executionView({
      jobId: 'j:1', scheduledAtMs: nowMs, attempt: 2, state: 'QUEUED', startedAtMs: null, finishedAtMs: null,
      statusCode: null, error: null, latenessMs: null, nodeId: null, retryAtMs: nowMs + 1000,
    })).toEqual({
      id: `j:1:${nowMs}`, scheduled_at: '2026-12-01T09:00:00.000Z', attempt: 2, state: 'QUEUED', started_at: null,
      finished_at: null, status_code: null, error: null, lateness_ms: null, node_id: null, attempts: [],
    });
  });

  it('an execution lists its attempts oldest first, with duration_ms when start and end are known', () => {
    const view = executionView({
      jobId: 'j', scheduledAtMs: nowMs, attempt: 2, state: 'SUCCEEDED', startedAtMs: nowMs + 5, finishedAtMs: nowMs + 1300,
      statusCode: 200, error: null, latenessMs: 5, nodeId: 'n2', retryAtMs: null,
      attempts: [
        { attempt: 1, startedAtMs: nowMs + 5, finishedAtMs: nowMs + 30, statusCode: 503, error: 'HTTP 503', nodeId: 'n1', fencingToken: '0.3' },
        { attempt: 2, startedAtMs: null, finishedAtMs: nowMs + 1300, statusCode: 200, error: null, nodeId: 'n2', fencingToken: '0.4' },
      ],
    }); // prettier-ignore
    expect(view.started_at).toBe('2026-12-01T09:00:00.005Z');
    expect(view.attempts).toEqual([
      { attempt: 1, started_at: '2026-12-01T09:00:00.005Z', finished_at: '2026-12-01T09:00:00.030Z', duration_ms: 25, status_code: 503, error: 'HTTP 503', node_id: 'n1', fencing_token: '0.3' },
      { attempt: 2, started_at: null, finished_at: '2026-12-01T09:00:01.300Z', duration_ms: null, status_code: 200, error: null, node_id: 'n2', fencing_token: '0.4' },
    ]); // prettier-ignore
  });

  it('scheduleView renders a cron without start_at as {cron, timezone}', () => {
    expect(scheduleView({ kind: 'cron', cron: '@daily', timezone: 'UTC', startAtMs: null })).toEqual({ cron: '@daily', timezone: 'UTC' });
  });
});

describe('cluster view', () => {
  it('a member whose client address is not known yet shows api_addr null, not an empty string', () => {
    const view = clusterView({
      nodeId: 'n1',
      nodes: [
        { id: 'n1', peerAddr: '127.0.0.1:9001', apiAddr: '127.0.0.1:8001', reachable: true },
        { id: 'n2', peerAddr: '127.0.0.1:9002', apiAddr: '', reachable: false },
      ],
      shards: [],
    });
    expect(view.nodes).toEqual([
      { id: 'n1', peer_addr: '127.0.0.1:9001', api_addr: '127.0.0.1:8001', reachable: true },
      { id: 'n2', peer_addr: '127.0.0.1:9002', api_addr: null, reachable: false },
    ]);
  });
});

describe('times', () => {
  const good: Array<[string, number]> = [
    ['2026-12-01T09:00:00Z', nowMs],
    ['2026-12-01T09:00:00.000Z', nowMs],
    ['2026-12-01t09:00:00z', nowMs],
    ['2026-12-01T04:00:00-05:00', nowMs],
    ['2026-12-01T09:00:00.123456789Z', nowMs + 123],
    ['2024-02-29T00:00:00Z', Date.UTC(2024, 1, 29)],
    ['1970-01-01T00:00:00Z', 0],
  ];
  it.each(good)('parses %s', (text, ms) => expect(parseRfc3339(text)).toBe(ms));

  const bad = ['2025-02-29T00:00:00Z', '2026-13-01T00:00:00Z', '2026-12-01T09:00Z', '2026-12-01T09:00:00+25:00', '1969-12-31T23:59:59Z', '2026-12-01 09:00:00Z'];
  it.each(bad)('refuses %s', (text) => expect(typeof parseRfc3339(text)).toBe('string'));

  it('renders UTC with milliseconds', () => expect(renderTime(nowMs + 5)).toBe('2026-12-01T09:00:00.005Z'));
});

describe('digests and ids', () => {
  it('canonical JSON sorts keys at every depth and keeps arrays in order', () => {
    expect(canonicalJson({ b: [{ z: 1, a: 2 }], a: null })).toBe('{"a":null,"b":[{"a":2,"z":1}]}');
    expect(requestDigest({ x: 1, y: { q: 1, p: 2 } })).toBe(requestDigest({ y: { p: 2, q: 1 }, x: 1 }));
    expect(requestDigest({ x: 1 })).not.toBe(requestDigest({ x: 2 }));
    expect(requestDigest({ x: 1 })).toBe(sha256Hex('{"x":1}'));
  });

  it('derived ids are deterministic per key (and per batch index), random without a key', () => {
    expect(deriveJobId('k')).toBe('ik-' + sha256Hex('k').slice(0, 32));
    expect(deriveJobId('k')).toBe(deriveJobId('k'));
    expect(deriveJobId('k', 0)).toBe('ik-' + sha256Hex('k#0').slice(0, 32));
    expect(deriveJobId('k', 0)).not.toBe(deriveJobId('k', 1));
    expect(deriveJobId(null)).not.toBe(deriveJobId(null));
  });

  it('the digest is recorded on the spec, with the key', () => {
    const body = { task: 't', payload: [1] };
    const spec = parseJob(body, '', { nowMs, idempotencyKey: 'key-1', batchIndex: null });
    expect(spec.requestDigest).toBe(requestDigest(body));
    expect(spec.idempotencyKey).toBe('key-1');
    expect(spec.id).toBe(deriveJobId('key-1'));
  });
});
