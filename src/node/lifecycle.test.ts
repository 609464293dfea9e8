/**
 * Node lifecycle against real parts: graceful close with a callback in flight, restart on the same data
 * directory (jobs kept, occurrences that came due while down fire, per misfire policy), tasks, cluster view,
 * readiness, metrics, overlap, and every --fsync mode.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../core/clock.js';
import { limits, nodeLimits } from '../core/limits.js';
import { silentLogger } from '../core/log.js';
import { decodeCommand } from '../scheduler/codec.js';
import { openNodeDbs } from '../store/db.js';
import { SqliteRaftStorage } from '../store/raft-storage.js';
import { AppliedIndexes } from '../store/shard-snapshot.js';
import type { LogIndex } from '../raft/index.js';
import type { JobSpec } from '../scheduler/types.js';
import type { NodeConfig } from './api.js';
import { openNode, type OpenNode } from './host.js';
import { callbackSpec, jobSpec, nodeConfig } from './testing/fixtures.js';
import { useNodeBed } from './testing/bed.js';
import { sleep, waitFor } from './testing/receiver.js';

const bed = useNodeBed('punctual-life-', { closeGraceMs: 2_000 });
const start = (over: Partial<NodeConfig> = {}): Promise<OpenNode> => bed.startCore(nodeConfig(bed.dir, over));
const stop = (core: OpenNode): Promise<void> => bed.stop(core);

async function create(core: OpenNode, specs: JobSpec[]): Promise<void> {
  for (const r of await core.service.createJobs(specs)) if (!r.ok) throw r.error;
}

describe('close and restart', () => {
  it('close lets an in-flight callback finish and records it; nothing fires again after restart', async () => {
    const core = await start();
    bed.rx.respond = () => ({ status: 200, delayMs: 250 });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/slow')));
    await create(core, [jobSpec('inflight', { kind: 'once', atMs: core.service.nowMs() })]);
    await waitFor('in flight', () => bed.rx.of('inflight').length === 1);
    await stop(core);
    const again = await start();
    expect((await again.service.getJob('inflight')).state).toBe('SUCCEEDED');
    await sleep(150);
    expect(bed.rx.of('inflight')).toHaveLength(1);
  });

  it('keeps every acknowledged job across restart and fires what came due while down', async () => {
    const core = await start();
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const now = core.service.nowMs();
    await create(core, [
      jobSpec('down-once', { kind: 'once', atMs: now + 150 }),
      jobSpec('down-skip', { kind: 'every', everyMs: 1_000, startAtMs: now + 100 }, { misfire: 'skip' }),
      jobSpec('down-once-every', { kind: 'every', everyMs: 1_000, startAtMs: now + 100 }, { misfire: 'fire_once' }),
      jobSpec('later', { kind: 'once', atMs: now + 3_600_000 }),
    ]);
    await stop(core);
    // Down for longer than the misfire threshold (5 s) would slow the suite: the skip job is tested with its
    // occurrence less than the threshold late, so both policies fire it; the child-process crash test covers
    // the far side.
    await sleep(300);
    const again = await start();
    for (const id of ['down-once', 'down-skip', 'down-once-every', 'later']) {
      expect((await again.service.getJob(id)).id).toBe(id);
    }
    await waitFor('due occurrences fired', () => ['down-once', 'down-skip', 'down-once-every'].every((id) => bed.rx.of(id).length >= 1));
    expect(bed.rx.of('down-once')[0].headers['x-punctual-scheduled-at']).toBe(String(now + 150));
    expect(bed.rx.of('later')).toHaveLength(0);
    await waitFor('once done', async () => (await again.service.getJob('down-once')).state === 'SUCCEEDED');
  });

  it('refuses a data directory created with another shard count or node id', async () => {
    const core = await start({ shards: 4 });
    await stop(core);
    await expect(openNode(nodeConfig(bed.dir, { shards: 8 }), { logger: silentLogger })).rejects.toThrow(/shards/);
    await expect(openNode(nodeConfig(bed.dir, { nodeId: 'n2' }), { logger: silentLogger })).rejects.toThrow(/node/);
  });

  it('is ready once started, not before, and not after close', async () => {
    const core = await openNode(nodeConfig(bed.dir), { logger: silentLogger });
    bed.track(core);
    expect(core.service.readiness().ready).toBe(false);
    await core.start();
    expect(core.service.readiness()).toEqual({ ready: true, reason: null });
    await stop(core);
    expect(core.service.readiness().ready).toBe(false);
    await expect(core.service.cancelJob('x')).rejects.toMatchObject({ code: 'unavailable' });
  });
});

describe('tasks, cluster, metrics', () => {
  it('puts tasks into every shard, refuses deleting a task with live jobs', async () => {
    const core = await start();
    const put = await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    expect(put.created).toBe(true);
    const again = await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook2')));
    expect(again.created).toBe(false);
    expect(again.task.createdAtMs).toBe(put.task.createdAtMs);
    expect((await core.service.getTask('hook')).url).toBe(bed.rx.url('/hook2'));
    expect((await core.service.listTasks()).map((t) => t.name)).toEqual(['hook']);
    await create(core, [jobSpec('uses-hook', { kind: 'once', atMs: core.service.nowMs() + 3_600_000 })]);
    await expect(core.service.deleteTask('hook')).rejects.toMatchObject({ code: 'conflict' });
    await core.service.cancelJob('uses-hook');
    await core.service.deleteTask('hook');
    await expect(core.service.getTask('hook')).rejects.toMatchObject({ code: 'not_found' });
    await expect(core.service.deleteTask('hook')).rejects.toMatchObject({ code: 'not_found' });
  });

  // Each shard group: the bootstrap snapshot is index 1, the leader's no-op of term 1 index 2, put_task index 3.
  it('shows one node leading every shard in term 1 with its applied index', async () => {
    const core = await start({ shards: 3 });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const c = await core.service.cluster();
    expect(c.nodeId).toBe('n1');
    expect(c.nodes).toHaveLength(1);
    expect(c.nodes[0]).toMatchObject({ id: 'n1', reachable: true });
    expect(c.shards.map((s) => [s.id, s.leader, s.term, s.members])).toEqual([
      [0, 'n1', 1, ['n1']],
      [1, 'n1', 1, ['n1']],
      [2, 'n1', 1, ['n1']],
    ]);
    for (const s of c.shards) {
      expect(s.appliedIndex).toBe(3);
      expect(s.commitIndex).toBe(3);
    }
  });

  it('counts callbacks, submissions, lateness and commits in its metrics', async () => {
    const core = await start();
    bed.rx.respond = (_r, n) => (n === 1 ? { status: 503 } : { status: 200 });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/m')));
    await create(core, [jobSpec('m1', { kind: 'once', atMs: core.service.nowMs() })]);
    await waitFor('done', async () => (await core.service.getJob('m1')).state === 'SUCCEEDED');
    // The state batch's commits are counted as they happen (at most stateBatchIntervalMs apart).
    await waitFor('a state commit', async () => /punctual_commit_batch_size_count [1-9]/.test((await core.metrics.scrape()).body), 2_000);
    const { body } = await core.metrics.scrape();
    expect(body).toContain('punctual_callbacks_total{outcome="retryable"} 1');
    expect(body).toContain('punctual_callbacks_total{outcome="succeeded"} 1');
    expect(body).toContain('punctual_jobs_submitted_total 1');
    expect(body).toContain('punctual_jobs{state="SUCCEEDED"} 1');
    expect(body).toContain('punctual_fire_lateness_ms_count 1');
    expect(body).toMatch(/punctual_commit_batch_size_count [1-9]/);
  });
});

describe('overlap and durability modes', () => {
  it('overlap=skip skips occurrences while one runs; buffer_one fires one after it finishes', async () => {
    const core = await start();
    bed.rx.respond = (r, n) => (n === 1 ? { status: 200, delayMs: 350 } : { status: 200 });
    await core.service.putTask('skip', callbackSpec(bed.rx.url('/skip')));
    await core.service.putTask('buffer', callbackSpec(bed.rx.url('/buffer')));
    const startAtMs = core.service.nowMs() + 20;
    const every = { kind: 'every' as const, everyMs: 100, startAtMs };
    await create(core, [
      jobSpec('ov-skip', every, { task: 'skip', overlap: 'skip', maxRuns: 0 }),
      jobSpec('ov-buffer', every, { task: 'buffer', overlap: 'buffer_one', maxRuns: 0 }),
    ]);
    await waitFor('first finished', () => bed.rx.of('ov-skip').length >= 2 && bed.rx.of('ov-buffer').length >= 2, 3_000);
    await core.service.cancelJob('ov-skip');
    await core.service.cancelJob('ov-buffer');
    const at = (id: string): number[] => bed.rx.of(id).map((r) => Number(r.headers['x-punctual-scheduled-at']) - startAtMs);
    // skip: the run at 0 holds the callback 350 ms, so 100, 200 and 300 are skipped; the next one fired is 400
    // (or later when a loaded machine records the first outcome late), never two at once.
    const skipAt = at('ov-skip');
    expect(skipAt[0]).toBe(0);
    expect(skipAt[1]).toBeGreaterThanOrEqual(400);
    expect(skipAt[1] % 100).toBe(0);
    expect(bed.rx.of('ov-skip')[1].atMs).toBeGreaterThanOrEqual(bed.rx.of('ov-skip')[0].atMs + 350);
    // buffer_one: 100 waits for the run at 0 to finish and fires then, late; 200 and 300 are skipped meanwhile
    // or buffered in turn, never two at once.
    expect(at('ov-buffer')[1]).toBe(100);
    expect(bed.rx.of('ov-buffer')[1].atMs).toBeGreaterThanOrEqual(bed.rx.of('ov-buffer')[0].atMs + 350);
  });

  for (const fsync of ['always', 'off'] as const) {
    it(`--fsync ${fsync} stores and fires like the default`, async () => {
      const core = await start({ fsync });
      await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
      const now = core.service.nowMs();
      await create(core, [jobSpec('f1', { kind: 'once', atMs: now }), jobSpec('f2', { kind: 'once', atMs: now + 3_600_000 })]);
      await waitFor('fired', () => bed.rx.of('f1').length === 1);
      await waitFor('done', async () => (await core.service.getJob('f1')).state === 'SUCCEEDED');
      await stop(core);
      const again = await start({ fsync });
      expect((await again.service.getJob('f1')).state).toBe('SUCCEEDED');
      expect((await again.service.getJob('f2')).state).toBe('PENDING');
    });
  }
});

describe('loader', () => {
  it('keeps far jobs in SQLite and moves them into the wheel as they come within the horizon', async () => {
    const t = Date.now();
    const clock = new ManualClock(t);
    const core = await openNode(nodeConfig(bed.dir), { logger: silentLogger, clock });
    bed.track(core);
    await core.start();
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const far = t + 2 * limits.wheelHorizonMs;
    await create(core, [jobSpec('far', { kind: 'once', atMs: far }), jobSpec('farther', { kind: 'once', atMs: far + limits.wheelHorizonMs })]);
    expect((await core.service.getJob('far')).state).toBe('PENDING');
    expect(core.engine.wheelSize).toBe(0);
    clock.set(far - limits.wheelHorizonMs + 1_000);
    await core.engine.runLoader();
    expect((await core.service.getJob('far')).state).toBe('QUEUED');
    expect((await core.service.getJob('farther')).state).toBe('PENDING');
    expect(core.engine.wheelSize).toBe(1);
    await sleep(50);
    expect(bed.rx.of('far')).toHaveLength(0);
    // Time reaches the occurrence: it fires (the next loader run re-arms the host timer after the clock step).
    clock.set(far);
    await core.engine.runLoader();
    await waitFor('far fired', () => bed.rx.of('far').length === 1);
    expect(bed.rx.of('far')[0].headers['x-punctual-scheduled-at']).toBe(String(far));
    // A clock jump straight past an unloaded job: the next run loads it overdue and it fires at once.
    clock.set(far + 2 * limits.wheelHorizonMs);
    await core.engine.runLoader();
    await waitFor('farther fired', () => bed.rx.of('farther').length === 1);
  });
});

describe('log', () => {
  // Index 1 is the bootstrap snapshot, index 2 the no-op of term 1: the n + 2 commands end at n + 4.
  it('appends every command to its shard log, applies it into the state file, and compacts old entries', async () => {
    const core = await start({ shards: 1 });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const far = core.service.nowMs() + 3_600_000;
    await create(core, [jobSpec('j', { kind: 'once', atMs: far })]);
    const n = nodeLimits.logKeepEntries + nodeLimits.logCompactEveryEntries + 50;
    // Concurrent patches: each its own command and log entry, in one or a few group commits.
    await Promise.all(Array.from({ length: n }, (_, i) => core.service.patchJob('j', { metadata: { i } })));
    await stop(core);
    const dbs = openNodeDbs(bed.dir, 'off');
    try {
      const log = new SqliteRaftStorage(dbs.log, 0);
      // Closed cleanly: the state batch committed everything applied.
      expect(new AppliedIndexes(dbs.state).of(0)).toBe(n + 4);
      expect(log.lastIndex()).toBe(n + 4);
      expect(log.firstIndex()).toBeGreaterThan(1);
      expect(log.lastIndex() - log.firstIndex() + 1).toBeGreaterThanOrEqual(nodeLimits.logKeepEntries);
      const [last] = log.entries((n + 4) as LogIndex, (n + 5) as LogIndex, Infinity);
      const cmd = decodeCommand(last.data);
      expect(cmd.type).toBe('patch_job');
      expect(last.term).toBe(1);
    } finally {
      dbs.log.close();
      dbs.state.close();
    }
    const again = await start({ shards: 1 });
    expect((await again.service.getJob('j')).metadata).toEqual({ i: n - 1 });
    // The restart is term 2: its no-op is one more entry.
    expect((await again.service.cluster()).shards[0].appliedIndex).toBe(n + 5);
  });

  it('merges a burst of single-job creates of one shard into one command, answering each caller alone', async () => {
    const core = await start({ shards: 1 });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const far = core.service.nowMs() + 3_600_000;
    await create(core, [jobSpec('taken', { kind: 'once', atMs: far })]);
    const specs = Array.from({ length: 50 }, (_, i) => jobSpec(`m${i}`, { kind: 'once', atMs: far }));
    specs[20] = { ...jobSpec('taken', { kind: 'once', atMs: far }), requestDigest: 'different' };
    specs[30] = jobSpec('m30', { kind: 'once', atMs: far }, { task: 'missing' });
    const results = await Promise.all(specs.map((s) => core.service.createJobs([s])));
    results.forEach((r, i) => {
      expect(r).toHaveLength(1);
      if (i === 20) expect(r[0]).toMatchObject({ ok: false, error: { code: 'conflict' } });
      else if (i === 30) expect(r[0]).toMatchObject({ ok: false, error: { code: 'not_found' } });
      else expect(r[0]).toMatchObject({ ok: true, created: true, job: { id: `m${i}` } });
    });
    expect((await core.service.cluster()).shards[0].appliedIndex).toBeLessThan(3 + 1 + 50);
  });
});
