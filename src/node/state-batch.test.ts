/**
 * The node's two files (docs/design.md, "Storage"): the Raft log is made durable every round, the scheduler's
 * state is written in batches. Real nodes on real files:
 * - a crash image taken while a batch is open (the files as a kill -9 leaves them) holds the acknowledged jobs in
 *   the log only, and a node started on it has them all, replayed from the log: at open, committed in the state
 *   file before it serves, up to an entry that cannot be applied, which the applier quarantines as before;
 * - the log is never compacted past what the state file holds durably;
 * - a data directory of the one-file layout (or a restored backup) has its log moved into raft-log.db and keeps
 *   every job.
 */
import Database from 'better-sqlite3';
import { Packr } from 'msgpackr';
import { copyFileSync, existsSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PunctualError } from '../core/errors.js';
import { dbFilePath, logFilePath } from '../store/db.js';
import type { Applied } from '../nodecore/index.js';
import type { NodeConfig } from './api.js';
import type { NodeOptions, OpenNode } from './host.js';
import { callbackSpec, jobSpec, nodeConfig } from './testing/fixtures.js';
import { useNodeBed } from './testing/bed.js';
import { waitFor } from './testing/receiver.js';

const bed = useNodeBed('punctual-batch-', { closeGraceMs: 1_000 });
/** A batch that never commits by itself during a test. */
const longBatch: NodeOptions = { stateBatch: { intervalMs: 600_000, entriesMax: 1_000_000 } };
const start = (dir: string, options: NodeOptions = {}, over: Partial<NodeConfig> = {}): Promise<OpenNode> =>
  bed.startCore(nodeConfig(dir, { shards: 1, ...over }), options);

/** Reads a file of a data directory through a connection of its own: what is committed there. */
function committed<T>(path: string, sql: string): T {
  const db = new Database(path, { readonly: true });
  try {
    return db.prepare(sql).pluck().get() as T;
  } finally {
    db.close();
  }
}

/** The files as they are on disk now: what a kill -9 at this instant leaves (the OS keeps every write). */
function crashImage(from: string, to: string): void {
  mkdirSync(to, { recursive: true });
  for (const base of [dbFilePath(from), logFilePath(from)]) {
    for (const suffix of ['', '-wal']) {
      const file = base + suffix;
      if (existsSync(file)) copyFileSync(file, join(to, file.slice(from.length + 1)));
    }
  }
}

describe('the state batch and the log', () => {
  it('recovers every acknowledged job from the log when the crash came before the batch committed', async () => {
    const dir = join(bed.dir, 'a');
    const core = await start(dir, longBatch);
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const far = core.service.nowMs() + 3_600_000;
    const ids = Array.from({ length: 25 }, (_, i) => `j${i}`);
    for (const r of await core.service.createJobs(ids.map((id) => jobSpec(id, { kind: 'once', atMs: far })))) expect(r.ok).toBe(true);
    await core.service.patchJob('j3', { metadata: { patched: 'yes' } });
    // Acknowledged, readable by the node, and not in the state file yet: only the log holds them durably.
    expect((await core.service.getJob('j3')).metadata).toEqual({ patched: 'yes' });
    expect(committed<number>(dbFilePath(dir), 'SELECT count(*) FROM jobs')).toBe(0);
    expect(committed<number>(logFilePath(dir), 'SELECT count(*) FROM raft_log')).toBeGreaterThan(3);

    const image = join(bed.dir, 'image');
    crashImage(dir, image);
    const again = await start(image);
    for (const id of ids) expect((await again.service.getJob(id)).state).toBe('PENDING');
    expect((await again.service.getJob('j3')).metadata).toEqual({ patched: 'yes' });
    expect((await again.service.listTasks()).map((t) => t.name)).toEqual(['hook']);
    // The replay was applied into the new node's state: once its batch commits, the file holds the jobs.
    await again.close();
    expect(committed<number>(dbFilePath(image), 'SELECT count(*) FROM jobs')).toBe(ids.length);
    await core.close();
  });

  it('replays the log at open up to an entry that cannot be applied; the applier quarantines it and goes on', async () => {
    const dir = join(bed.dir, 'r');
    const core = await start(dir, longBatch);
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const far = core.service.nowMs() + 3_600_000;
    const before = ['r0', 'r1', 'r2'];
    const after = ['r3', 'r4'];
    await core.service.createJobs(before.map((id) => jobSpec(id, { kind: 'once', atMs: far })));
    // A create whose payload is a map: it decodes, its apply throws (quarantine.test.ts has it on a cluster).
    const packr = new Packr({ useRecords: false, mapsAsObjects: true });
    const poison = packr.pack({ type: 'create_jobs', nowMs: core.service.nowMs(), shard: 0, jobs: [{ ...jobSpec('bad', { kind: 'once', atMs: far }), payload: { not: 'bytes' } }] });
    const refused = await new Promise<Applied>((resolve, reject) => core.host.propose(0, new Uint8Array(poison), { resolve, reject })).then(() => null, (err: unknown) => err);
    expect(refused).toBeInstanceOf(PunctualError);
    await core.service.createJobs(after.map((id) => jobSpec(id, { kind: 'once', atMs: far })));
    expect(committed<number>(dbFilePath(dir), 'SELECT count(*) FROM jobs')).toBe(0);

    const image = join(bed.dir, 'r-image');
    crashImage(dir, image);
    // The restarted node's own batch never commits by itself: what the state file holds now, the open committed.
    const again = await start(image, longBatch);
    expect(committed<number>(dbFilePath(image), 'SELECT count(*) FROM jobs')).toBe(before.length);
    for (const id of [...before, ...after]) expect((await again.service.getJob(id)).state).toBe('PENDING');
    const [q] = again.host.quarantined.list();
    expect(q).toMatchObject({ shard: 0, error: expect.stringMatching(/payload: must be bytes/) });
    expect(again.host.groups[0]!.store.getJob('bad')).toBeNull();
    await again.close();
    expect(committed<number>(dbFilePath(image), 'SELECT count(*) FROM jobs')).toBe(before.length + after.length);
    await core.close();
  });

  it('never compacts the log past the applied index the state file holds durably', async () => {
    const dir = join(bed.dir, 'b');
    const core = await start(dir, { ...longBatch, compaction: { keepEntries: 5, everyEntries: 10 } });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    await core.service.createJobs([jobSpec('p', { kind: 'once', atMs: core.service.nowMs() + 3_600_000 })]);
    const g = core.host.groups[0]!;
    const firstBefore = g.storage.firstIndex();
    for (let i = 0; i < 60; i++) await core.service.patchJob('p', { metadata: { i: String(i) } });
    // Nothing of the batch is durable: the log keeps every entry after the state file's applied index.
    expect(g.storage.firstIndex()).toBe(firstBefore);
    expect(core.host.batch.durableApplied(0)).toBeLessThan(firstBefore);

    expect(core.host.batch.commit()).toBe(true);
    await core.host.batch.synced();
    const durable = core.host.batch.durableApplied(0);
    expect(durable).toBe(g.applied);
    for (let i = 0; i < 30; i++) await core.service.patchJob('p', { metadata: { i: `again-${i}` } });
    await waitFor('compacted up to the durable index', () => g.storage.firstIndex() > firstBefore, 5_000);
    expect(g.storage.firstIndex() - 1).toBeLessThanOrEqual(durable);
    expect(committed<number>(dbFilePath(dir), 'SELECT applied_index FROM shard_meta WHERE shard = 0')).toBeGreaterThanOrEqual(g.storage.firstIndex() - 1);
  });

  it('moves the log of a one-file data directory into raft-log.db and keeps every job', async () => {
    const dir = join(bed.dir, 'c');
    const core = await start(dir);
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const now = core.service.nowMs();
    await core.service.createJobs([jobSpec('old-far', { kind: 'once', atMs: now + 3_600_000 }), jobSpec('old-soon', { kind: 'once', atMs: now + 1_500 })]);
    const lastIndex = core.host.groups[0]!.storage.lastIndex();
    await bed.stop(core);
    // The layout before the log had its own file: the Raft tables in punctual.db, no raft-log.db.
    const state = new Database(dbFilePath(dir));
    state.prepare('ATTACH DATABASE ? AS lg').run(logFilePath(dir));
    for (const t of ['raft_hard_state', 'raft_snapshot']) state.exec(`INSERT INTO main.${t} SELECT * FROM lg.${t}`);
    state.exec('INSERT INTO main.raft_entries (group_id, idx, term, type, data, crc) SELECT group_id, idx, term, type, data, crc FROM lg.raft_log');
    state.exec('DETACH DATABASE lg');
    state.close();
    for (const suffix of ['', '-wal', '-shm']) rmSync(logFilePath(dir) + suffix, { force: true });

    const again = await start(dir);
    expect(again.host.groups[0]!.storage.lastIndex()).toBeGreaterThanOrEqual(lastIndex);
    expect((await again.service.getJob('old-far')).state).toBe('PENDING');
    await waitFor('the old job fires', () => bed.rx.of('old-soon').length === 1, 5_000);
    await again.close();
    expect(committed<number>(dbFilePath(dir), 'SELECT count(*) FROM raft_entries')).toBe(0);
    expect(committed<number>(logFilePath(dir), 'SELECT count(*) FROM raft_log')).toBeGreaterThan(0);
  });
});
