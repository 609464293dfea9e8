/**
 * kill -9 safety with a REAL process and a REAL signal: a child node (src/node/testing/crash-child.mjs, which
 * runs the BUILT code in dist/: `npm test` builds first) takes jobs over HTTP, is killed with SIGKILL, and is
 * restarted on the same data directory. Every acknowledged job must still be there, every occurrence that
 * came due while it was down must fire after restart per its misfire policy, and a callback that was in flight
 * at the kill must be delivered again with the same X-Deduplication-Key and a higher attempt.
 */
import { describe, expect, it } from 'vitest';
import { limits, stallLimits } from '../core/limits.js';
import { nodeConfig } from './testing/fixtures.js';
import { useProcessBed } from './testing/bed.js';
import { call, kill9, spawnNode as spawnTestNode, type Child } from './testing/processes.js';
import { waitFor, type Receiver } from './testing/receiver.js';

const spawnNode = (dataDir: string): Promise<Child> => spawnTestNode(nodeConfig(dataDir, { shards: 4, logLevel: 'warn' }));

const scheduledAt = (receiver: Receiver, id: string): number[] => receiver.of(id).map((r) => Number(r.headers['x-punctual-scheduled-at']));

describe('kill -9 and restart on the same data directory', () => {
  const bed = useProcessBed('punctual-crash-');
  let child: Child | null = null;

  it('keeps every acknowledged job and fires every due occurrence after restart', async () => {
    // The in-flight callback hangs until the child is killed; every other request succeeds.
    bed.rx.respond = (r, n) => (r.path === '/hang' && n === 1 ? { status: 200, hang: true } : { status: 200 });
    child = bed.track(await spawnNode(bed.dir));
    const retry = { max_attempts: 5, initial_backoff_ms: 50, max_backoff_ms: 200, multiplier: 2, jitter: false };
    expect((await call(child, 'PUT', '/v1/tasks/hook', { url: bed.rx.url('/hook'), retry })).status).toBe(201);
    expect((await call(child, 'PUT', '/v1/tasks/hang', { url: bed.rx.url('/hang'), retry })).status).toBe(201);

    const t0 = Date.now();
    // Everything falls due 2 s after the in-flight callback's record is written (a one-off's first fired record
    // waits up to stallLimits.firedHoldMs for its outcome; 2 s is a margin for a slow machine to get to the kill first); the
    // restart comes late enough that the first two occurrences of the recurring jobs are more than the misfire
    // threshold late.
    const dueAt = t0 + stallLimits.firedHoldMs + 2_000;
    const restartAt = dueAt + limits.misfireThresholdMs + 1_500;
    const created = await Promise.all([
      call(child, 'POST', '/v1/jobs', { id: 'inflight', task: 'hang', payload: { n: 1 } }),
      call(child, 'POST', '/v1/jobs', { id: 'once-down', task: 'hook', schedule: { at: dueAt } }),
      call(child, 'POST', '/v1/jobs', { id: 'far', task: 'hook', schedule: { at: t0 + 3_600_000 } }),
      call(child, 'POST', '/v1/jobs', {
        id: 'every-skip', task: 'hook', misfire: 'skip', schedule: { every_ms: 1_000, start_at: dueAt },
      }),
      call(child, 'POST', '/v1/jobs', {
        id: 'every-once', task: 'hook', misfire: 'fire_once', schedule: { every_ms: 1_000, start_at: dueAt },
      }),
    ]);
    for (const c of created) expect(c.status).toBe(201);
    const batch = await call(child, 'POST', '/v1/jobs:batch', {
      jobs: Array.from({ length: 200 }, (_, i) => ({ id: `b-${i}`, task: 'hook', schedule: { at: dueAt + i } })),
    });
    expect(batch.status).toBe(200);
    expect(batch.json.results.every((r: { status: number }) => r.status === 201)).toBe(true);

    // The in-flight callback: its `fired` is committed (execution RUNNING) and the receiver holds the request.
    await waitFor('inflight RUNNING', async () => {
      const h = await call(child!, 'GET', '/v1/jobs/inflight/executions');
      return h.json.executions?.[0]?.state === 'RUNNING' && bed.rx.of('inflight').length === 1;
    }, stallLimits.firedHoldMs + 5_000);
    await kill9(child);
    child = null;
    expect(Date.now()).toBeLessThan(dueAt);
    expect(bed.rx.of('once-down')).toHaveLength(0);

    // Down past the misfire threshold, then restart on the same directory.
    await new Promise((r) => setTimeout(r, Math.max(0, restartAt - Date.now())));
    const restartedAtMs = Date.now();
    child = bed.track(await spawnNode(bed.dir));

    for (const id of ['inflight', 'once-down', 'far', 'every-skip', 'every-once', 'b-0', 'b-199']) {
      expect((await call(child, 'GET', `/v1/jobs/${id}`)).status).toBe(200);
    }
    await waitFor('due occurrences fired', () =>
      bed.rx.of('once-down').length === 1 &&
      Array.from({ length: 200 }, (_, i) => bed.rx.of(`b-${i}`).length).every((n) => n >= 1) &&
      bed.rx.of('inflight').length >= 2 &&
      bed.rx.of('every-once').length >= 1 &&
      bed.rx.of('every-skip').length >= 1,
    10_000);

    // Redelivered with the same key and a higher attempt.
    const inflight = bed.rx.of('inflight');
    expect(inflight[1].headers['x-deduplication-key']).toBe(inflight[0].headers['x-deduplication-key']);
    expect(Number(inflight[1].headers['x-punctual-attempt'])).toBeGreaterThan(1);
    await waitFor('inflight SUCCEEDED', async () => (await call(child!, 'GET', '/v1/jobs/inflight')).json.state === 'SUCCEEDED');

    // Each due occurrence after restart, never before its time, the 200 batch jobs exactly once each.
    expect(bed.rx.of('once-down')[0].atMs).toBeGreaterThanOrEqual(restartedAtMs);
    for (let i = 0; i < 200; i++) expect(scheduledAt(bed.rx, `b-${i}`)).toEqual([dueAt + i]);
    for (const r of bed.rx.received) expect(r.atMs).toBeGreaterThanOrEqual(Number(r.headers['x-punctual-scheduled-at']));

    // Misfire: fire_once sends one catch-up for the missed occurrences (its first, dueAt) then moves on;
    // skip drops every occurrence more than the threshold late at restart (dueAt and dueAt + 1000 at least).
    const lateLimitMs = restartedAtMs - limits.misfireThresholdMs;
    expect(lateLimitMs).toBeGreaterThan(dueAt + 1_000);
    expect(scheduledAt(bed.rx, 'every-once').filter((at) => at < lateLimitMs)).toEqual([dueAt]);
    expect(scheduledAt(bed.rx, 'every-skip').filter((at) => at < lateLimitMs)).toEqual([]);
    expect(bed.rx.of('far')).toHaveLength(0);

    // Graceful stop of the restarted node.
    const exited = new Promise<number | null>((resolve) => child!.proc.once('exit', (code) => resolve(code)));
    child.proc.kill('SIGTERM');
    expect(await exited).toBe(0);
    child = null;
  });
});
