/**
 * A follower that cannot persist an append does not acknowledge it. Three nodes in one process (real sockets,
 * real SQLite files); the follower's two files (state and log) are capped at their current size (PRAGMA max_page_count: SQLite then
 * answers SQLITE_FULL exactly as on a full disk). The leader and the other follower go on; the capped follower
 * stays up, refuses writes with 507, and the leader's view of its log (its match index) does not move past what it
 * had written. Uncapped, it catches up by itself and its replica equals the leader's.
 *
 * A state batch that SQLite rolled back (as it may on a full disk) while it held several rounds: the applied index
 * waits in memory until the batch's COMMIT, so the node applies again from the index the file committed, and
 * the rows and the index it commits next hold every job.
 */
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PunctualError } from '../core/errors.js';
import { shardOf } from '../core/ids.js';
import { dbFilePath } from '../store/db.js';
import type { OpenNode } from './host.js';
import { clusterConfigs } from './testing/cluster.js';
import { callbackSpec, jobSpec, nodeConfig } from './testing/fixtures.js';
import { useNodeBed } from './testing/bed.js';
import { waitFor } from './testing/receiver.js';

const bed = useNodeBed('punctual-disk-full-', { closeGraceMs: 1_000 });

/** The node's own SQLite connections, state and log (RaftHost keeps them private: reached here to cap them, as a full disk would). */
function dbsOf(core: OpenNode): Database.Database[] {
  const o = (core.host as unknown as { o: { db: Database.Database; logDb: Database.Database } }).o;
  return [o.db, o.logDb];
}

function jobsOf(core: OpenNode, shard: number): string[] {
  return core.host.groups[shard].store.listJobs({ state: null, task: null, limit: 1000, afterId: null }).map((j) => j.id);
}

describe('a follower whose disk is full', () => {
  it('acknowledges nothing it could not write, refuses writes with 507, and catches up by itself once it can write', async () => {
    const configs = await clusterConfigs(bed.dir, 3, { shards: 1 });
    const cores = await Promise.all(configs.map((c) => bed.startCore(c, { rebalanceIntervalMs: 0 })));
    await waitFor('ready', () => cores.every((c) => c.service.readiness().ready), 10_000);
    const leader = cores.find((c) => c.host.isLeader(0))!;
    const [full, other] = cores.filter((c) => c !== leader);
    const fullId = full.service.nodeId;
    await leader.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    await waitFor('follower applied the task', () => full.host.groups[0].applied === leader.host.groups[0].applied, 5_000);

    const dbs = dbsOf(full);
    for (const db of dbs) db.pragma(`max_page_count = ${db.pragma('page_count', { simple: true }) as number}`);
    const persistedBefore = full.host.groups[0].storage.lastIndex();

    const atMs = leader.service.nowMs() + 60_000;
    const ids = Array.from({ length: 20 }, (_, i) => `big-${i}`);
    for (const id of ids) {
      const [r] = await leader.service.createJobs([jobSpec(id, { kind: 'once', atMs }, { payload: new Uint8Array(64 * 1024).fill(7) })]);
      expect(r).toMatchObject({ ok: true, created: true });
    }
    expect(shardOf(ids[0], 1)).toBe(0);
    await waitFor('the capped follower found its disk full', () => full.host.diskFull(), 5_000);
    await waitFor('the other follower has every job', () => ids.every((id) => jobsOf(other, 0).includes(id)), 5_000);

    // Not acknowledged: the leader counts only what the follower wrote, and the follower wrote nothing new.
    const persisted = full.host.groups[0].storage.lastIndex();
    expect(persisted).toBeLessThan(leader.host.groups[0].storage.lastIndex());
    // Read from whoever leads when it is read: an election under a loaded machine may have moved the leadership.
    let match = -1;
    const leaderMatch = (): boolean => {
      const now = cores.find((c) => c !== full && c.host.isLeader(0));
      const m = now?.host.groups[0].raw.status().progress.get(fullId as never)?.match;
      if (m === undefined) return false;
      match = m;
      return true;
    };
    await waitFor('a leader that tracks the capped follower', leaderMatch, 10_000);
    expect(match).toBeLessThanOrEqual(persisted);
    expect(persisted).toBeGreaterThanOrEqual(persistedBefore);
    // Writes are refused on it, with the stable code.
    const refused = await new Promise<unknown>((resolve) => full.host.propose(0, new Uint8Array([0xc0]), { resolve, reject: resolve }));
    expect(refused).toBeInstanceOf(PunctualError);
    expect(refused).toMatchObject({ code: 'insufficient_storage', status: 507 });
    expect((await full.metrics.scrape()).body).toMatch(/punctual_disk_full 1/);

    for (const db of dbs) db.pragma('max_page_count = 1073741823');
    await waitFor('the follower caught up by itself', () => ids.every((id) => jobsOf(full, 0).includes(id)), 10_000);
    expect(full.host.diskFull()).toBe(false);
    // Whoever leads now (an election under a loaded machine may have moved it) counts the follower's log as written.
    const acked = (): boolean => {
      const now = cores.find((c) => c.host.isLeader(0));
      if (now === full) return true;
      const match = now?.host.groups[0].raw.status().progress.get(fullId as never)?.match ?? -1;
      return match >= full.host.groups[0].storage.lastIndex();
    };
    await waitFor('acknowledged up to the leader', acked, 5_000);
    expect(jobsOf(full, 0)).toEqual(jobsOf(other, 0));
    expect((await full.metrics.scrape()).body).toMatch(/punctual_disk_full 0/);
  });
});

/** What the state file of `dir` holds committed: a connection of its own. */
function committedState<T>(dir: string, sql: string): T {
  const db = new Database(dbFilePath(dir), { readonly: true });
  try {
    return db.prepare(sql).pluck().get() as T;
  } finally {
    db.close();
  }
}

describe('a state batch lost while it held several rounds', () => {
  it('is applied again from the applied index the file committed, and the next commit holds every job', async () => {
    const dir = join(bed.dir, 'lost');
    const options = { stateBatch: { intervalMs: 600_000, entriesMax: 1_000_000 } };
    const core = await bed.startCore(nodeConfig(dir, { shards: 1 }), options);
    await waitFor('ready', () => core.service.readiness().ready, 10_000);
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    expect(core.host.batch.commit()).toBe(true);
    const g = core.host.groups[0];
    const appliedSql = 'SELECT applied_index FROM shard_meta WHERE shard = 0';
    const before = committedState<number>(dir, appliedSql);
    expect(before).toBe(g.applied);

    // One create per round: the open batch holds several rounds.
    const far = core.service.nowMs() + 3_600_000;
    const ids = Array.from({ length: 8 }, (_, i) => `lost-${i}`);
    for (const id of ids) expect((await core.service.createJobs([jobSpec(id, { kind: 'once', atMs: far })]))[0]).toMatchObject({ ok: true });
    expect(g.applied).toBeGreaterThanOrEqual(before + ids.length);
    const [state] = dbsOf(core);
    // Inside the batch the index waits for the COMMIT: the rows moved, shard_meta did not.
    expect(state.prepare(appliedSql).pluck().get()).toBe(before);
    expect(jobsOf(core, 0)).toEqual(expect.arrayContaining(ids));

    // SQLite rolled the batch back (what a full disk may do): the next commit finds it lost and writes it again.
    state.exec('ROLLBACK');
    expect(core.host.batch.commit()).toBe(false);
    expect(core.host.batch.commit()).toBe(true);
    expect(core.host.diskFull()).toBe(false);
    expect(committedState<number>(dir, appliedSql)).toBe(g.applied);
    expect(committedState<number>(dir, "SELECT count(*) FROM jobs WHERE shard = 0 AND id LIKE 'lost-%'")).toBe(ids.length);

    // And the node goes on: a later create is applied and committed with its index.
    expect((await core.service.createJobs([jobSpec('after', { kind: 'once', atMs: far })]))[0]).toMatchObject({ ok: true });
    expect(core.host.batch.commit()).toBe(true);
    expect(committedState<number>(dir, appliedSql)).toBe(g.applied);
    expect(jobsOf(core, 0)).toEqual(expect.arrayContaining([...ids, 'after']));
  });
});
