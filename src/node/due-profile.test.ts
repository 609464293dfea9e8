/**
 * The due profile and the admission report over real sockets: a real node (startNode, temp data dir), the real
 * HTTP app, jobs stored in SQLite. Counts come from the store, never from timing.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { limits } from '../core/limits.js';
import { silentLogger } from '../core/log.js';
import { startNode, type NodeHandle } from './node.js';
import { nodeConfig, apiCall } from './testing/fixtures.js';
import { startReceiver, waitFor, type Receiver } from './testing/receiver.js';

let dir: string;
let rx: Receiver;
let node: NodeHandle;

function call(path: string, init: { method?: string; body?: unknown } = {}): ReturnType<typeof apiCall> {
  return apiCall(node.apiPort, path, init);
}

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-due-'));
  rx = await startReceiver();
  node = await startNode(nodeConfig(dir), { logger: silentLogger });
  expect((await call('/v1/tasks/hook', { method: 'PUT', body: { url: rx.url('/hook') } })).status).toBe(201);
});

afterEach(async () => {
  await node.close();
  await rx.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('GET /v1/due-profile', () => {
  it('counts PENDING occurrences per second from now, over every shard; seconds is checked', async () => {
    const from = Date.now();
    // Far enough ahead that nothing fires during the test: 3 jobs in second ~30, 2 in second ~45 (+-1 for the clock's move).
    const at30 = from + 30_500;
    const at45 = from + 45_500;
    const jobs = [
      ...['a', 'b', 'c'].map((id) => ({ id: `p-${id}`, task: 'hook', schedule: { at: at30 } })),
      ...['d', 'e'].map((id) => ({ id: `p-${id}`, task: 'hook', schedule: { at: at45 } })),
      { id: 'p-far', task: 'hook', schedule: { at: from + 3_600_000 } },
    ];
    expect((await call('/v1/jobs:batch', { method: 'POST', body: { jobs } })).status).toBe(200);
    const r = await call('/v1/due-profile');
    expect(r.status).toBe(200);
    const fromMs = Date.parse(r.json.from);
    expect(r.json.per_second).toHaveLength(60);
    expect(r.json.per_second[Math.floor((at30 - fromMs) / 1000)]).toBe(3);
    expect(r.json.per_second[Math.floor((at45 - fromMs) / 1000)]).toBe(2);
    expect(r.json.per_second.reduce((a: number, b: number) => a + b, 0)).toBe(5);
    expect(r.json).toHaveProperty('drain_rate_per_s');
    const short = await call('/v1/due-profile?seconds=10');
    expect(short.json.per_second).toHaveLength(10);
    expect(short.json.per_second.reduce((a: number, b: number) => a + b, 0)).toBe(0);
    expect((await call('/v1/due-profile?seconds=600')).json.per_second).toHaveLength(600);
    // An empty value counts as absent, as for every query parameter of the API: the default.
    expect((await call('/v1/due-profile?seconds=')).json.per_second).toHaveLength(60);
    for (const bad of ['0', '601', 'x', '1.5', '-3']) {
      const res = await call(`/v1/due-profile?seconds=${bad}`);
      expect(res.status, bad).toBe(400);
      expect(res.json.code).toBe('invalid_argument');
      expect(res.json.errors.map((e: { field: string }) => e.field), bad).toEqual(['seconds']);
    }
    const metrics = await call('/metrics');
    expect(metrics.text).toMatch(/punctual_due_next_minute\{second="\d+"\} 3/);
  });
});

describe('the admission report (Punctual-Hot-Instant)', () => {
  it('a submission that crowds one instant past what the node can drain in time is told the count and spread', async () => {
    const atMs = Date.now() + 120_000;
    // The assumed drain rate (nothing measured yet) spreads this many past the report threshold.
    const crowd = Math.ceil((limits.hotInstantSpreadReportMs * limits.drainRatePerSAssumed) / 1000) + 1;
    const small = await call('/v1/jobs', { method: 'POST', body: { id: 'h-0', task: 'hook', schedule: { at: atMs } } });
    expect(small.status).toBe(201);
    expect(small.headers.get('punctual-hot-instant')).toBeNull();
    const jobs = Array.from({ length: crowd }, (_, i) => ({ id: `h-${i + 1}`, task: 'hook', schedule: { at: atMs } }));
    const batch = await call('/v1/jobs:batch', { method: 'POST', body: { jobs } });
    expect(batch.status).toBe(200);
    const header = batch.headers.get('punctual-hot-instant');
    const due = crowd + 1;
    const spread = Math.ceil((due * 1000) / limits.drainRatePerSAssumed);
    expect(header).toBe(`at="${new Date(atMs).toISOString()}", due=${due}, spread_ms=${spread}, drain_rate_per_s=${limits.drainRatePerSAssumed}, measured=false`);
    // One more at the same instant: reported on the single-job answer too.
    const one = await call('/v1/jobs', { method: 'POST', body: { id: 'h-last', task: 'hook', schedule: { at: atMs } } });
    expect(one.headers.get('punctual-hot-instant')).toMatch(new RegExp(`due=${due + 1},`));
  });

  it('counts the instant again once its count is older than the recount period: cancelled jobs leave it', async () => {
    const atMs = Date.now() + 120_000;
    const crowd = Math.ceil((limits.hotInstantSpreadReportMs * limits.drainRatePerSAssumed) / 1000) + 20;
    const jobs = Array.from({ length: crowd }, (_, i) => ({ id: `c-${i}`, task: 'hook', schedule: { at: atMs } }));
    const batch = await call('/v1/jobs:batch', { method: 'POST', body: { jobs } });
    expect(batch.headers.get('punctual-hot-instant')).toMatch(new RegExp(`due=${crowd},`));
    for (let i = 0; i < 10; i++) expect((await call(`/v1/jobs/c-${i}/cancel`, { method: 'POST' })).status).toBe(200);
    await new Promise((r) => setTimeout(r, limits.hotInstantRecountMs + 50));
    const one = await call('/v1/jobs', { method: 'POST', body: { id: 'c-last', task: 'hook', schedule: { at: atMs } } });
    expect(one.headers.get('punctual-hot-instant')).toMatch(new RegExp(`due=${crowd - 10 + 1},`));
  });

  it('counts only the instant: jobs due at the other ms of its neighbourhood are neither counted nor reported', async () => {
    const bucketStart = Math.floor((Date.now() + 120_000) / limits.hotInstantBucketMs) * limits.hotInstantBucketMs;
    const atMs = bucketStart + Math.floor(limits.hotInstantBucketMs / 2);
    const crowd = Math.ceil((limits.hotInstantSpreadReportMs * limits.drainRatePerSAssumed) / 1000) + 1;
    // The neighbourhood holds more than a hot instant, spread over its other ms (none at atMs): nothing to report.
    const others = [-2, -1, 1, 2].flatMap((b) => Array.from({ length: limits.hotInstantBucketMs }, (_, k) => bucketStart + b * limits.hotInstantBucketMs + k));
    others.push(...Array.from({ length: limits.hotInstantBucketMs }, (_, k) => bucketStart + k).filter((t) => t !== atMs));
    const spread = Array.from({ length: crowd * 2 }, (_, i) => ({ id: `n-${i}`, task: 'hook', schedule: { at: others[i % others.length]! } }));
    expect(spread.every((j) => j.schedule.at !== atMs)).toBe(true);
    const first = await call('/v1/jobs:batch', { method: 'POST', body: { jobs: spread.slice(0, crowd) } });
    expect(first.status).toBe(200);
    expect(first.headers.get('punctual-hot-instant')).toBeNull();
    const second = await call('/v1/jobs:batch', { method: 'POST', body: { jobs: spread.slice(crowd) } });
    expect(second.headers.get('punctual-hot-instant')).toBeNull();
    // Single submissions at the instant itself: reported exactly once it alone is crowded, with its own count.
    for (let i = 0; i < crowd - 1; i++) {
      const r = await call('/v1/jobs', { method: 'POST', body: { id: `i-${i}`, task: 'hook', schedule: { at: atMs } } });
      expect(r.status).toBe(201);
      expect(r.headers.get('punctual-hot-instant'), `job ${i}`).toBeNull();
    }
    const last = await call('/v1/jobs', { method: 'POST', body: { id: 'i-last', task: 'hook', schedule: { at: atMs } } });
    expect(last.headers.get('punctual-hot-instant')).toMatch(new RegExp(`^at="${new Date(atMs).toISOString()}", due=${crowd},`));
  });

  it('overdue callbacks seconds apart measure no drain rate: nothing is reported afterwards', async () => {
    // Due a minute ago: each starts late, but behind no other start (the node was idle).
    for (const id of ['o-1', 'o-2', 'o-3']) {
      expect((await call('/v1/jobs', { method: 'POST', body: { id, task: 'hook', schedule: { at: Date.now() - 60_000 } } })).status).toBe(201);
      await waitFor(`${id} delivered`, () => rx.of(id).length === 1);
      await new Promise((r) => setTimeout(r, 1100));
    }
    expect((await call('/v1/due-profile')).json.drain_rate_per_s).toBeNull();
    const one = await call('/v1/jobs', { method: 'POST', body: { id: 'o-next', task: 'hook', schedule: { at: Date.now() + 60_000 } } });
    expect(one.status).toBe(201);
    expect(one.headers.get('punctual-hot-instant')).toBeNull();
  });

  it('a hot instant delivered measures the drain rate, which later reports use', async () => {
    const n = 1000;
    const atMs = Date.now() + 1500;
    const jobs = Array.from({ length: n }, (_, i) => ({ id: `d-${i}`, task: 'hook', schedule: { at: atMs } }));
    expect((await call('/v1/jobs:batch', { method: 'POST', body: { jobs } })).status).toBe(200);
    await waitFor('the instant delivered', () => rx.received.length >= n, 30_000);
    const rate = (await call('/v1/due-profile')).json.drain_rate_per_s;
    expect(rate).toBeGreaterThan(0);
    const metrics = await call('/metrics');
    expect(metrics.text).toMatch(new RegExp(`punctual_drain_rate_per_second ${rate}\\b`));
    // A crowd the measured rate cannot deliver within the report threshold is reported with that rate.
    const later = Date.now() + 120_000;
    const crowd = Math.ceil((limits.hotInstantSpreadReportMs * rate) / 1000) + 1;
    const batch = await call('/v1/jobs:batch', { method: 'POST', body: { jobs: Array.from({ length: crowd }, (_, i) => ({ id: `l-${i}`, task: 'hook', schedule: { at: later } })) } });
    expect(batch.headers.get('punctual-hot-instant')).toMatch(new RegExp(`due=${crowd}, spread_ms=\\d+, drain_rate_per_s=\\d+, measured=true$`));
  }, 60_000);
});
