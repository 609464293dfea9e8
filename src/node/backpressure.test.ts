/**
 * Back-pressure: a real node (in-process, real SQLite in a temp dir, the real HTTP app on 127.0.0.1, a real
 * callback receiver) with a queue limit lowered for the test. Client writes past a full queue get 429 with
 * Retry-After and lose nothing acknowledged; the firing side (wheel, due backlog, dispatcher queue, proposer)
 * holds work back and fires every stored occurrence once, late rather than never.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { PunctualError } from '../core/errors.js';
import { queueLimits } from '../core/limits.js';
import { silentLogger } from '../core/log.js';
import { createApp } from '../http/app.js';
import { startApiServer, type ApiServer } from '../http/server.js';
import type { OpenNode } from './host.js';
import { callbackSpec, jobSpec, nodeConfig } from './testing/fixtures.js';
import { useNodeBed } from './testing/bed.js';
import { sleep, waitFor } from './testing/receiver.js';

const bed = useNodeBed('punctual-backpressure-', { closeGraceMs: 1_000 });

type QueueLimit = Exclude<keyof typeof queueLimits, 'retryAfterS'>;
const saved = { ...queueLimits };
/** Lowers limits for one test (before the node opens: the wheel and the dispatcher read theirs at construction). */
function lower(over: Partial<Record<QueueLimit, number>>): void {
  Object.assign(queueLimits as Record<string, number>, over);
}
afterEach(() => {
  Object.assign(queueLimits as Record<string, number>, saved);
});

async function serve(core: OpenNode): Promise<{ server: ApiServer; url: (path: string) => string }> {
  const app = createApp({ api: core.service, authToken: null, metricsAuth: false, metrics: () => core.metrics.scrape(), logger: silentLogger });
  const server = await startApiServer(app, '127.0.0.1', 0);
  return { server, url: (path) => `http://127.0.0.1:${server.port}${path}` };
}

/** Samples `f` every ms until stop(), which returns the largest value seen. */
function sampleMax(f: () => number): { stop(): number } {
  let max = f();
  const timer = setInterval(() => (max = Math.max(max, f())), 1);
  return {
    stop() {
      clearInterval(timer);
      return Math.max(max, f());
    },
  };
}

describe('client writes past a full queue', () => {
  it('a flood past the proposer limit gets 429 with Retry-After; every job answered 201 fires once, no refused one exists', async () => {
    const core = await bed.startCore(nodeConfig(bed.dir));
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const { server, url } = await serve(core);
    lower({ proposerCommandsMax: 2 });
    try {
      const accepted: string[] = [];
      const refused: Array<{ id: string; headers: Headers; body: { code: string; reason: string } }> = [];
      for (let round = 0; round < 20 && refused.length === 0; round++) {
        const ids = Array.from({ length: 64 }, (_, i) => `flood-${round}-${i}`);
        const answers = await Promise.all(
          ids.map((id) =>
            fetch(url('/v1/jobs'), {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: JSON.stringify({ id, task: 'hook', schedule: { delay_ms: 300 } }),
            }).then(async (res) => ({ id, res, body: (await res.json()) as { code: string; reason: string } })),
          ),
        );
        for (const { id, res, body } of answers) {
          if (res.status === 201) accepted.push(id);
          else if (res.status === 429) refused.push({ id, headers: res.headers, body });
          else throw new Error(`unexpected ${res.status} for ${id}: ${JSON.stringify(body)}`);
        }
      }
      expect(refused.length).toBeGreaterThan(0);
      expect(accepted.length).toBeGreaterThan(0);
      for (const r of refused) {
        expect(r.headers.get('retry-after')).toBe(String(queueLimits.retryAfterS));
        expect(r.headers.get('ratelimit')).toBe(`"proposer_queue_full";r=0;t=${queueLimits.retryAfterS}`);
        expect(r.body).toMatchObject({ code: 'rate_limited', reason: 'proposer_queue_full', status: 429 });
      }
      await waitFor('every accepted job fired', () => accepted.every((id) => bed.rx.of(id).length >= 1), 15_000);
      await sleep(200);
      for (const id of accepted) expect(bed.rx.of(id)).toHaveLength(1);
      for (const r of refused) {
        expect(bed.rx.of(r.id)).toHaveLength(0);
        expect((await fetch(url(`/v1/jobs/${r.id}`))).status).toBe(404);
      }
    } finally {
      await server.close();
    }
  });

  it('while the applier is behind its limit every write gets 429 apply_queue_full; reads still answer', async () => {
    const core = await bed.startCore(nodeConfig(bed.dir));
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const { server, url } = await serve(core);
    try {
      lower({ applyQueueEntriesMax: 0 });
      const res = await fetch(url('/v1/jobs'), {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ id: 'behind', task: 'hook', schedule: { delay_ms: 10 } }),
      });
      expect(res.status).toBe(429);
      expect(res.headers.get('retry-after')).toBe('1');
      expect(await res.json()).toMatchObject({ code: 'rate_limited', reason: 'apply_queue_full' });
      expect((await fetch(url('/v1/tasks/hook'))).status).toBe(200);
      const metrics = await (await fetch(url('/metrics'))).text();
      expect(metrics).toContain('punctual_queue_limit{queue="apply"} 0');
      expect(metrics).toMatch(/punctual_queue_depth\{queue="proposer"\} 0/);
      Object.assign(queueLimits as Record<string, number>, { applyQueueEntriesMax: saved.applyQueueEntriesMax });
      const again = await fetch(url('/v1/jobs'), {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ id: 'behind', task: 'hook', schedule: { delay_ms: 10 } }),
      });
      expect(again.status).toBe(201);
      await waitFor('fired', () => bed.rx.of('behind').length === 1);
    } finally {
      await server.close();
    }
  });
});

describe('the firing side held back, never dropped', () => {
  it('the dispatcher waiting queue stays at its limit; every due job still fires once', async () => {
    lower({ dispatchQueuedMax: 3 });
    const core = await bed.startCore(nodeConfig(bed.dir));
    bed.rx.respond = () => ({ status: 200, delayMs: 20 });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook'), { maxConcurrency: 1 }));
    const atMs = core.service.nowMs() + 200;
    const ids = Array.from({ length: 25 }, (_, i) => `q-${i}`);
    const queued = sampleMax(() => core.engine.queueDepths().dispatchQueued);
    const backlog = sampleMax(() => core.engine.queueDepths().dueBacklog);
    const results = await core.service.createJobs(ids.map((id) => jobSpec(id, { kind: 'once', atMs })));
    expect(results.every((r) => r.ok)).toBe(true);
    await waitFor('every job fired', () => ids.every((id) => bed.rx.of(id).length >= 1), 15_000);
    expect(queued.stop()).toBeLessThanOrEqual(3);
    expect(backlog.stop()).toBeGreaterThan(0); // the rest waited, due, in the engine
    await sleep(200);
    for (const id of ids) expect(bed.rx.of(id)).toHaveLength(1);
  });

  it('the wheel fills only to the loader limit: the rest waits in SQLite and fires once; a run is refused 429 meanwhile', async () => {
    lower({ wheelLoadedMax: 10, wheelEntriesMax: 20 });
    const core = await bed.startCore(nodeConfig(bed.dir));
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const wheel = sampleMax(() => core.engine.wheelSize);
    const atMs = core.service.nowMs() + 1_000;
    const ids = Array.from({ length: 25 }, (_, i) => `w-${i}`);
    const results = await core.service.createJobs(ids.map((id, i) => jobSpec(id, { kind: 'once', atMs: atMs + i })));
    expect(results.every((r) => r.ok)).toBe(true);
    expect(core.engine.wheelSize).toBe(10);
    const err = await core.service.runJob('w-0').then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(PunctualError);
    expect(err).toMatchObject({ code: 'rate_limited', reason: 'wheel_full', status: 429 });
    await waitFor('every job fired', () => ids.every((id) => bed.rx.of(id).length >= 1), 15_000);
    expect(wheel.stop()).toBeLessThanOrEqual(10);
    await sleep(200);
    for (const id of ids) expect(bed.rx.of(id)).toHaveLength(1);
    for (const id of ids) expect(bed.rx.of(id)[0].atMs).toBeGreaterThanOrEqual(atMs);
  });

  it('a hot instant bigger than the due backlog and the proposer limit fires every occurrence once', async () => {
    lower({ dueBacklogMax: 4, proposerEngineItemsMax: 3 });
    const core = await bed.startCore(nodeConfig(bed.dir));
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const backlog = sampleMax(() => core.engine.queueDepths().dueBacklog);
    const atMs = core.service.nowMs() + 300;
    const ids = Array.from({ length: 40 }, (_, i) => `hot-${i}`);
    await core.service.createJobs(ids.map((id) => jobSpec(id, { kind: 'every', everyMs: 3_600_000, startAtMs: atMs })));
    await waitFor('every job fired', () => ids.every((id) => bed.rx.of(id).length >= 1), 15_000);
    expect(backlog.stop()).toBeLessThanOrEqual(4);
    await sleep(200);
    for (const id of ids) expect(bed.rx.of(id)).toHaveLength(1);
    for (const id of ids) await waitFor('recorded', async () => (await core.service.getJob(id)).runs === 1);
  });

  it('retries that find the wheel at its ceiling wait parked and fire once there is room', async () => {
    lower({ wheelLoadedMax: 3, wheelEntriesMax: 4 });
    const core = await bed.startCore(nodeConfig(bed.dir));
    // Every first attempt of an r-job fails (a retry, 20 ms later); everything else succeeds.
    bed.rx.respond = (r) => ({ status: String(r.headers['x-punctual-job-id']).startsWith('r') && r.headers['x-punctual-attempt'] === '1' ? 500 : 200 });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const wheel = sampleMax(() => core.engine.wheelSize);
    const parked = sampleMax(() => core.engine.queueDepths().parked);
    const nowMs = core.service.nowMs();
    const rs = ['r1', 'r2', 'r3'];
    const bs = ['b1', 'b2', 'b3'];
    // The r-jobs fill the wheel to the loader limit; the b-jobs wait in SQLite and are loaded when the r-jobs
    // fire. Their retries then find the wheel (three b-jobs and the first retry) at its ceiling.
    await core.service.createJobs(rs.map((id) => jobSpec(id, { kind: 'once', atMs: nowMs + 200 })));
    await core.service.createJobs(bs.map((id) => jobSpec(id, { kind: 'once', atMs: nowMs + 1_500 })));
    await waitFor('every job fired and every retry sent', () => [...rs, ...bs].every((id) => bed.rx.of(id).length === (id.startsWith('r') ? 2 : 1)), 15_000);
    expect(wheel.stop()).toBeLessThanOrEqual(4);
    expect(parked.stop()).toBeGreaterThan(0);
    await sleep(200);
    for (const id of rs) expect(bed.rx.of(id).map((r) => r.headers['x-punctual-attempt'])).toEqual(['1', '2']);
    for (const id of bs) expect(bed.rx.of(id)).toHaveLength(1);
    expect(core.engine.queueDepths().parked).toBe(0);
  });
});
