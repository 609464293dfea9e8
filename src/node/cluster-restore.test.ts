/**
 * A new cluster from a cluster member's backup, in one process over the real peer transport and real SQLite
 * files: three nodes take jobs; one of them (leader of some shards, follower of others) is backed up through
 * the service; `restoreBackup --new-cluster` makes a data directory whose node is the only voter of every shard;
 * it starts alone with every job, fires, and two empty nodes join it with add-node and receive the rows by
 * snapshot (docs/deploy.md, Backup and restore).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { shardOf } from '../core/ids.js';
import { restoreBackup } from '../store/backup.js';
import type { NodeConfig } from './api.js';
import type { OpenNode } from './host.js';
import { clusterConfigs, freePorts } from './testing/cluster.js';
import { callbackSpec, jobSpec, nodeConfig } from './testing/fixtures.js';
import { useNodeBed } from './testing/bed.js';
import { waitFor } from './testing/receiver.js';

const shards = 4;
const bed = useNodeBed('punctual-cluster-restore-', { closeGraceMs: 1_000, rebalanceIntervalMs: 0 });

describe('restore as a new cluster', () => {
  it('a member backup becomes a one-voter cluster with every job, which fires and grows with add-node', async () => {
    const configs = await clusterConfigs(bed.dir, 3, { shards });
    const cores = await Promise.all(configs.map((c) => bed.startCore(c)));
    await waitFor('old cluster ready', () => cores.every((c) => c.service.readiness().ready), 10_000);
    await cores[0].service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const far = cores[0].service.nowMs() + 3_600_000;
    const ids = Array.from({ length: 40 }, (_, i) => `kept-${i}`);
    for (const r of await cores[0].service.createJobs(ids.map((id) => jobSpec(id, { kind: 'once', atMs: far })))) expect(r).toMatchObject({ ok: true });

    // A member that follows at least one shard: its barrier there is a ReadIndex asked of that shard's leader.
    const member = cores.find((c) => c.host.groups.some((g) => g.role !== 'leader'))!;
    const copy = await member.service.backup();
    const chunks: Buffer[] = [];
    for await (const c of copy.stream) chunks.push(c as Buffer);
    const file = join(bed.dir, 'member.backup');
    writeFileSync(file, Buffer.concat(chunks));
    for (const c of cores) await bed.stop(c);

    const [p1, p2, p3] = await freePorts(3);
    const at = (port: number) => ({ host: '127.0.0.1', port });
    const restored = restoreBackup({ from: file, dataDir: join(bed.dir, 'new-a'), nodeId: 'a', newCluster: true });
    expect(restored).toMatchObject({ nodeId: member.service.nodeId, restoredNodeId: 'a', shards, jobs: ids.length });
    const a = await bed.startCore(nodeConfig(join(bed.dir, 'new-a'), { nodeId: 'a', peerListenPort: p1, shards }));
    await waitFor('a leads every shard', () => a.service.readiness().ready, 10_000);
    for (const g of a.host.groups) expect(g.raw.confState()).toEqual({ voters: ['a'], learners: [] });
    for (const id of ids) expect((await a.service.getJob(id)).state).toBe('PENDING');
    await a.service.createJobs([jobSpec('soon', { kind: 'once', atMs: a.service.nowMs() + 50 })]);
    await waitFor('a fires', () => bed.rx.of('soon').length === 1, 5_000);

    const join2 = (id: string, port: number, peers: NodeConfig['peers']): Promise<OpenNode> =>
      bed.startCore(nodeConfig(join(bed.dir, `new-${id}`), { nodeId: id, peerListenPort: port, shards, peers }), { join: true });
    const b = await join2('b', p2, [{ id: 'a', ...at(p1) }]);
    await a.service.addNode('b', `127.0.0.1:${p2}`);
    const c = await join2('c', p3, [{ id: 'a', ...at(p1) }, { id: 'b', ...at(p2) }]);
    const grown = await a.service.addNode('c', `127.0.0.1:${p3}`);
    for (const s of grown.shards) expect(s).toMatchObject({ voters: ['a', 'b', 'c'], learners: [] });
    await waitFor('b and c ready', () => b.service.readiness().ready && c.service.readiness().ready, 10_000);
    for (const id of ids) {
      for (const core of [b, c]) expect(core.host.groups[shardOf(id, shards)].store.getJob(id), `${id} on ${core.service.nodeId}`).not.toBeNull();
    }
  }, 60_000);
});
