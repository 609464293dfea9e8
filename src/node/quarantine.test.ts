/**
 * A committed entry that no replica can decode (the poison of issue 9: a create_jobs whose payload is a map),
 * appended through a real leader of a three-node in-process cluster (real sockets, real SQLite files): every
 * replica quarantines the same index instead of exiting, keeps serving and firing, a node that was down applies
 * the same entry the same way when it catches up, every node survives a restart, and the replicas stay equal.
 */
import { Packr } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { PunctualError } from '../core/errors.js';
import { shardOf } from '../core/ids.js';
import type { NodeConfig } from './api.js';
import type { OpenNode } from './host.js';
import type { Applied } from '../nodecore/index.js';
import { clusterConfigs } from './testing/cluster.js';
import { callbackSpec, jobSpec } from './testing/fixtures.js';
import { useNodeBed } from './testing/bed.js';
import { waitFor } from './testing/receiver.js';

const bed = useNodeBed('punctual-quarantine-', { closeGraceMs: 1_000 });
const shards = 2;
const packr = new Packr({ useRecords: false, mapsAsObjects: true });

function leaderOf(cores: OpenNode[], shard: number): OpenNode {
  const core = cores.find((c) => c.host.isLeader(shard));
  if (core === undefined) throw new Error(`no leader for shard ${shard}`);
  return core;
}

/** Proposes raw bytes on the leader's RaftHost, below every check: what a buggy or hostile leader could append. */
function proposeRaw(leader: OpenNode, shard: number, data: Uint8Array): Promise<Applied> {
  return new Promise<Applied>((resolve, reject) => leader.host.propose(shard, data, { resolve, reject }));
}

/** Everything a shard replica holds (tasks, jobs, executions), to compare replicas. */
function image(core: OpenNode, shard: number): unknown {
  const store = core.host.groups[shard].store;
  const jobs = store.listJobs({ state: null, task: null, limit: 1000, afterId: null });
  return { tasks: store.listTasks(), jobs, executions: jobs.map((j) => store.listExecutions(j.id, 1000, null)) };
}

function caughtUp(cores: OpenNode[], shard: number): boolean {
  const commit = leaderOf(cores, shard).host.groups[shard].raw.status().commit;
  return cores.every((c) => c.host.groups[shard].applied >= commit);
}

async function startAll(configs: NodeConfig[]): Promise<OpenNode[]> {
  const cores = await Promise.all(configs.map((c) => bed.startCore(c)));
  await waitFor('every shard has a leader everywhere', () => cores.every((c) => c.service.readiness().ready), 10_000);
  return cores;
}

describe('a committed entry that cannot be decoded', () => {
  it('is quarantined at the same index on every replica; the cluster keeps serving and firing, across restarts', async () => {
    const configs = await clusterConfigs(bed.dir, 3, { shards });
    let cores = await startAll(configs);
    await cores[0].service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const shard = shardOf('before', shards);
    const nowMs = cores[0].service.nowMs();
    await cores[1].service.createJobs([jobSpec('before', { kind: 'once', atMs: nowMs + 200 })]);

    // A follower of the shard is down while the poison is committed: it meets the entry when it catches up.
    const leader = leaderOf(cores, shard);
    const away = cores.find((c) => c !== leader)!;
    const awayConfig = configs.find((c) => c.nodeId === away.service.nodeId)!;
    await bed.stop(away);
    cores = cores.filter((c) => c !== away);

    const poisonJob = { ...jobSpec('poison', { kind: 'once', atMs: nowMs + 200 }), payload: { not: 'bytes' } };
    const poison = new Uint8Array(packr.pack({ type: 'create_jobs', nowMs, shard, jobs: [poisonJob] }));
    const refused = await proposeRaw(leader, shard, poison).then(() => null, (err: unknown) => err);
    expect(refused).toBeInstanceOf(PunctualError);
    expect((refused as PunctualError).message).toMatch(/quarantined/);
    const index = leader.host.quarantined.list()[0]?.index;
    expect(index).toBeGreaterThan(0);

    // Still serving: a job created after the poison fires, on the same shard.
    const afterId = ['after', 'after-1', 'after-2', 'after-3'].find((id) => shardOf(id, shards) === shard)!;
    await cores[0].service.createJobs([jobSpec(afterId, { kind: 'once', atMs: cores[0].service.nowMs() + 100 })]);
    await waitFor('both jobs fired', () => bed.rx.of('before').length >= 1 && bed.rx.of(afterId).length >= 1, 10_000);

    const back = await bed.startCore(awayConfig);
    cores.push(back);
    await waitFor('the restarted node caught up', () => caughtUp(cores, shard), 10_000);
    for (const c of cores) {
      const [q] = c.host.quarantined.list();
      expect(q).toMatchObject({ shard, index, error: expect.stringMatching(/jobs\[0\]\.payload: must be bytes/) });
      // The bytes (the leader applies the proposed array itself, which msgpackr marks with a cached DataView).
      expect(Buffer.from(q!.data).equals(Buffer.from(poison))).toBe(true);
      expect(c.host.quarantined.list()).toHaveLength(1);
      expect(c.host.groups[shard].store.getJob('poison')).toBeNull();
    }
    expect((await back.metrics.scrape()).body).toMatch(new RegExp(`punctual_raft_entries_quarantined_total\\{shard="${shard}"\\} 1`));
    await waitFor('replicas equal', () => caughtUp(cores, shard) && cores.every((c) => JSON.stringify(image(c, shard)) === JSON.stringify(image(cores[0], shard))), 10_000);

    // Every node restarts on its data (the poison is in every log) and the cluster goes on.
    for (const c of cores) await bed.stop(c);
    cores = await startAll(configs);
    const lastId = ['last', 'last-1', 'last-2', 'last-3'].find((id) => shardOf(id, shards) === shard)!;
    const [created] = await cores[2].service.createJobs([jobSpec(lastId, { kind: 'once', atMs: cores[2].service.nowMs() + 100 })]);
    expect(created).toMatchObject({ ok: true, created: true });
    await waitFor('fired after the restart', () => bed.rx.of(lastId).length >= 1, 10_000);
    for (const c of cores) expect(c.host.quarantined.list().map((q) => q.index)).toEqual([index]);
    await waitFor('replicas equal after the restart', () => caughtUp(cores, shard) && cores.every((c) => JSON.stringify(image(c, shard)) === JSON.stringify(image(cores[0], shard))), 10_000);
  });
});
