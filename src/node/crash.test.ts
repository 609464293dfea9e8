/**
 * kill -9 safety with a REAL process and a REAL signal: a child node (src/node/testing/crash-child.mjs, which
 * runs the BUILT code in dist/: `npm test` builds first) takes jobs over HTTP, is killed with SIGKILL, and is
 * restarted on the same data directory. Every acknowledged job must still be there, every occurrence that
 * came due while it was down must fire after restart per its misfire policy, and a callback that was in flight
 * at the kill must be delivered again with the same X-Deduplication-Key and a higher attempt. Under a stream of
 * creates and callbacks, the kill leaves acknowledged jobs and outcomes in the Raft log only (the state file is
 * written in batches): the restarted node replays them, and every acknowledged job is delivered, none early, and
 * no cancelled one at all.
 */
import Database from 'better-sqlite3';
import { copyFileSync, existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { dbFilePath } from '../store/db.js';
import { limits, stallLimits } from '../core/limits.js';
import { nodeConfig } from './testing/fixtures.js';
import { useProcessBed } from './testing/bed.js';
import { call, kill9, spawnNode as spawnTestNode, type Child } from './testing/processes.js';
import { waitFor, type Receiver } from './testing/receiver.js';

const spawnNode = (dataDir: string): Promise<Child> => spawnTestNode(nodeConfig(dataDir, { shards: 4, logLevel: 'warn' }));

/** The jobs a copy of the state file holds committed (a copy: opening the file itself could change it). */
function committedJobs(dataDir: string, copyDir: string): number {
  mkdirSync(copyDir, { recursive: true });
  const file = dbFilePath(dataDir);
  for (const suffix of ['', '-wal']) if (existsSync(file + suffix)) copyFileSync(file + suffix, join(copyDir, `state.db${suffix}`));
  const db = new Database(join(copyDir, 'state.db'));
  try {
    return db.prepare('SELECT count(*) FROM jobs').pluck().get() as number;
  } finally {
    db.close();
  }
}

/** Deliveries per job id, in one pass over what the receiver got. */
function deliveries(receiver: Receiver): Map<string, number> {
  const n = new Map<string, number>();
  for (const r of receiver.received) {
    const id = String(r.headers['x-punctual-job-id']);
    n.set(id, (n.get(id) ?? 0) + 1);
  }
  return n;
}

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

  it('delivers every job acknowledged before a kill under a stream of creates, none early, no cancelled one', async () => {
    bed.rx.respond = () => ({ status: 200 });
    const dir = join(bed.dir, 'stream');
    // The state batch commits only at its first interval here: everything acknowledged is in the log alone.
    const batch = { stateBatch: { intervalMs: 600_000, entriesMax: 1_000_000 } };
    child = bed.track(await spawnTestNode(nodeConfig(dir, { shards: 4, logLevel: 'warn' }), batch));
    expect((await call(child, 'PUT', '/v1/tasks/stream', { url: bed.rx.url('/stream') })).status).toBe(201);

    // Cancelled before the kill, due after the restart: a cancel stays final.
    const cancelAt = Date.now() + 8_000;
    const cancelled = Array.from({ length: 20 }, (_, i) => `c-${i}`);
    const c = await call(child, 'POST', '/v1/jobs:batch', { jobs: cancelled.map((id) => ({ id, task: 'stream', schedule: { at: cancelAt } })) });
    expect(c.json.results.every((r: { status: number }) => r.status === 201)).toBe(true);
    for (const id of cancelled) expect((await call(child, 'POST', `/v1/jobs/${id}/cancel`)).status).toBe(200);

    // Four writers create batches of 50 jobs, each due 300 to 800 ms after its batch left, until the kill.
    const acked = new Map<string, number>();
    let killed = false;
    const writer = async (w: number): Promise<void> => {
      for (let b = 0; !killed; b++) {
        const t = Date.now() + 300;
        const jobs = Array.from({ length: 50 }, (_, i) => ({ id: `s-${w}-${b}-${i}`, task: 'stream', schedule: { at: t + i * 10 } }));
        const r = await call(child!, 'POST', '/v1/jobs:batch', { jobs }).catch(() => null);
        if (r === null) return;
        r.json.results.forEach((x: { status: number }, i: number) => x.status === 201 && acked.set(jobs[i]!.id, jobs[i]!.schedule.at));
      }
    };
    const writers = [0, 1, 2, 3].map(writer);
    // Killed while creates are in flight and callbacks (with their outcomes) are flowing.
    await waitFor('a stream under way', () => acked.size >= 2_000 && bed.rx.received.length >= 500, 20_000);
    await kill9(child);
    killed = true;
    await Promise.all(writers);
    child = null;
    // The kill left the acknowledged jobs in the log only: the restart has to replay them.
    expect(committedJobs(dir, join(bed.dir, 'stream-copy'))).toBeLessThan(acked.size);

    child = bed.track(await spawnNode(dir));
    await waitFor('every acknowledged job delivered', () => {
      const n = deliveries(bed.rx);
      return [...acked.keys()].every((id) => (n.get(id) ?? 0) >= 1);
    }, 30_000);
    for (const id of cancelled) expect((await call(child, 'GET', `/v1/jobs/${id}`)).json.state).toBe('CANCELLED');
    // Past their due time, the cancelled jobs stayed cancelled.
    await waitFor('past the cancelled jobs\' due time', () => Date.now() > cancelAt + 500, 15_000);
    const n = deliveries(bed.rx);
    for (const id of cancelled) expect(n.get(id) ?? 0).toBe(0);
    for (const r of bed.rx.received) expect(r.atMs).toBeGreaterThanOrEqual(Number(r.headers['x-punctual-scheduled-at']));
    const exited = new Promise<number | null>((resolve) => child!.proc.once('exit', (code) => resolve(code)));
    child.proc.kill('SIGTERM');
    expect(await exited).toBe(0);
    child = null;
  }, 90_000);
});
