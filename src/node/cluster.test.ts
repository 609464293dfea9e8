/**
 * Three nodes in one process, on real loopback sockets (the real PeerTransport over HTTP/2), real SQLite files,
 * a real callback receiver: elections, forwarding from a follower, firing once on the leader with its fencing
 * token, linearizable reads through a follower, leadership transfer and rebalancing, catch-up by snapshot after
 * compaction, and a node with the wrong cluster secret refused.
 */
import { describe, expect, it } from 'vitest';
import { shardOf } from '../core/ids.js';
import type { LogIndex, Message, NodeId, Term } from '../raft/index.js';
import { createLogger, silentLogger, type Logger } from '../core/log.js';
import type { NodeConfig } from './api.js';
import type { OpenNode, NodeOptions } from './host.js';
import { startNode } from './node.js';
import { clusterConfigs } from './testing/cluster.js';
import { callbackSpec, jobSpec } from './testing/fixtures.js';
import { useNodeBed } from './testing/bed.js';
import { sleep, waitFor } from './testing/receiver.js';

const bed = useNodeBed('punctual-cluster-', { closeGraceMs: 1_000 });
const startCore = (config: NodeConfig, options: NodeOptions = {}): Promise<OpenNode> => bed.startCore(config, options);
const stop = (core: OpenNode): Promise<void> => bed.stop(core);

async function startCluster(over: Partial<NodeConfig> = {}, options: NodeOptions = {}): Promise<{ configs: NodeConfig[]; cores: OpenNode[] }> {
  const configs = await clusterConfigs(bed.dir, 3, { shards: 4, ...over });
  const cores = await Promise.all(configs.map((c) => startCore(c, options)));
  await waitFor('every shard has a leader everywhere', () => cores.every((c) => c.service.readiness().ready), 10_000);
  return { configs, cores };
}

function leaderOf(cores: OpenNode[], shard: number): OpenNode {
  const id = cores[0].host.leaderOf(shard);
  const core = cores.find((c) => c.service.nodeId === id && c.host.isLeader(shard));
  if (core === undefined) throw new Error(`no leader for shard ${shard}`);
  return core;
}

describe('a three-node cluster in one process', () => {
  it('elects a leader per shard; a job submitted through a follower fires once, from the leader, with its fencing token', async () => {
    const { cores } = await startCluster();
    const view = await cores[1].service.cluster();
    expect(view.nodes.map((n) => n.id)).toEqual(['n2', 'n1', 'n3']);
    expect(view.nodes.every((n) => n.reachable)).toBe(true);
    for (const s of view.shards) {
      expect(s.leader).not.toBeNull();
      expect(s.members.sort()).toEqual(['n1', 'n2', 'n3']);
    }
    await cores[2].service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const ids = Array.from({ length: 12 }, (_, i) => `follower-${i}`);
    const atMs = cores[0].service.nowMs() + 400;
    for (const id of ids) {
      const shard = shardOf(id, 4);
      const follower = cores.find((c) => !c.host.isLeader(shard))!;
      const [r] = await follower.service.createJobs([jobSpec(id, { kind: 'once', atMs })]);
      expect(r).toMatchObject({ ok: true, created: true });
    }
    await waitFor('all fired', () => ids.every((id) => bed.rx.of(id).length >= 1), 10_000);
    await sleep(300);
    for (const id of ids) {
      const got = bed.rx.of(id);
      expect(got).toHaveLength(1);
      expect(got[0].atMs).toBeGreaterThanOrEqual(atMs);
      const shard = shardOf(id, 4);
      const leader = leaderOf(cores, shard);
      // The token names the term the sender led in; a loaded machine may have elected again since (never lower).
      const term = (await leader.service.cluster()).shards[shard].term;
      const [tokenShard, tokenTerm] = String(got[0].headers['x-punctual-fencing-token']).split('.').map(Number);
      expect(tokenShard).toBe(shard);
      expect(tokenTerm).toBeGreaterThanOrEqual(1);
      expect(tokenTerm).toBeLessThanOrEqual(term);
      expect(got[0].headers['x-deduplication-key']).toBe(`${id}:${atMs}`);
    }
    // Reads through any node are linearizable: the outcome recorded by the leader is seen from a follower.
    for (const id of ids) {
      const follower = cores.find((c) => !c.host.isLeader(shardOf(id, 4)))!;
      await waitFor('recorded', async () => (await follower.service.getJob(id)).state === 'SUCCEEDED');
    }
  });

  it('a stale snapshot from the leader is answered at once (Raft ignores it; nothing waits for an install)', async () => {
    const { cores } = await startCluster();
    const leader = leaderOf(cores, 0);
    const follower = cores.find((c) => c !== leader)!;
    const s = leader.host.groups[0]!.raw.status();
    const stale: Message = {
      type: 'snapshot',
      group: 0,
      from: leader.service.nodeId as NodeId,
      to: follower.service.nodeId as NodeId,
      term: s.term,
      snapshot: { metadata: { index: 1 as LogIndex, term: 1 as Term, confState: s.confState }, data: new Uint8Array() },
    } as Message;
    const answered = await Promise.race([
      follower.host.installSnapshot(stale).then(() => 'installed-or-ignored'),
      sleep(5_000).then(() => 'still waiting'),
    ]);
    expect(answered).toBe('installed-or-ignored');
    expect(follower.host.groups[0]!.raw.hasPendingSnapshot()).toBe(false);
  });

  it('a task written through one node is read back through every other at once', async () => {
    const { cores } = await startCluster();
    const writer = cores.find((c) => !c.host.isLeader(0))!;
    for (let i = 0; i < 5; i++) {
      await writer.service.putTask(`t${i}`, callbackSpec(bed.rx.url(`/t${i}`)));
      for (const c of cores) {
        expect((await c.service.getTask(`t${i}`)).url).toBe(bed.rx.url(`/t${i}`));
        expect((await c.service.listTasks()).map((t) => t.name)).toContain(`t${i}`);
      }
    }
    await expect(cores[1].service.getTask('nope')).rejects.toMatchObject({ code: 'not_found' });
    await cores[0].service.deleteTask('t0');
    for (const c of cores) await expect(c.service.getTask('t0')).rejects.toMatchObject({ code: 'not_found' });
  });

  it('a cancel acknowledged through a follower is final', async () => {
    const { cores } = await startCluster();
    await cores[0].service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const atMs = cores[0].service.nowMs() + 600;
    const shard = shardOf('c1', 4);
    const follower = cores.find((c) => !c.host.isLeader(shard))!;
    await follower.service.createJobs([jobSpec('c1', { kind: 'once', atMs })]);
    expect((await follower.service.cancelJob('c1')).state).toBe('CANCELLED');
    expect(follower.service.nowMs()).toBeLessThan(atMs);
    await sleep(atMs - follower.service.nowMs() + 200);
    expect(bed.rx.of('c1')).toHaveLength(0);
    for (const c of cores) expect(c.engine.wheelSize).toBe(0);
  });

  it('moves a leader on request, and the rebalancer spreads leaders over the nodes', async () => {
    const { cores } = await startCluster({ shards: 6 }, { rebalanceIntervalMs: 200 });
    // Preferred leaders: sorted voters [n1, n2, n3][shard % 3], so each node ends up leading two shards.
    await waitFor('balanced', () => cores.every((c) => c.host.groups.filter((g) => g.firing).length === 2), 15_000);
    const target = cores.find((c) => !c.host.isLeader(0))!;
    // A transfer asked of a follower reaches the leader through Raft.
    const asked = cores.find((c) => c !== target && !c.host.isLeader(0))!;
    await asked.service.transferLeader(0, target.service.nodeId);
    await waitFor('transferred', () => target.host.isLeader(0), 5_000);
    await expect(asked.service.transferLeader(0, 'n9')).rejects.toMatchObject({ code: 'invalid_argument' });
  });

  it('a node restarted after the leader compacted its log catches up by snapshot and continues', async () => {
    const compaction = { keepEntries: 20, everyEntries: 10 };
    const configs = await clusterConfigs(bed.dir, 3, { shards: 1 });
    const cores = await Promise.all(configs.map((c) => startCore(c, { compaction, rebalanceIntervalMs: 0 })));
    await waitFor('leader', () => cores.every((c) => c.service.readiness().ready), 10_000);
    const leader = leaderOf(cores, 0);
    const lagging = cores.find((c) => c !== leader)!;
    const laggingConfig = configs.find((c) => c.nodeId === lagging.service.nodeId)!;
    await leader.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const far = leader.service.nowMs() + 3_600_000;
    await leader.service.createJobs([jobSpec('snap', { kind: 'once', atMs: far })]);
    await stop(lagging);
    // More entries than a follower may have in flight (maxInflightMsgs): the rest only exist in a snapshot.
    for (let round = 0; round < 6; round++) {
      await Promise.all(Array.from({ length: 60 }, (_, k) => leader.service.patchJob('snap', { metadata: { i: round * 60 + k } })));
    }
    // Compaction stops at what the leader's state file holds durably: its batch committed and synced, then more
    // entries for the next compaction check.
    expect(leader.host.batch.commit()).toBe(true);
    await leader.host.batch.synced();
    await Promise.all(Array.from({ length: 30 }, (_, k) => leader.service.patchJob('snap', { metadata: { i: 1000 + k } })));
    await leader.service.patchJob('snap', { metadata: { i: 79 } });
    const back = await startCore(laggingConfig, { compaction, rebalanceIntervalMs: 0 });
    await waitFor('caught up', () => back.host.groups[0].applied >= leader.host.groups[0].applied, 10_000);
    expect((await back.metrics.scrape()).body).toMatch(/punctual_raft_snapshots_total\{kind="installed"\} [1-9]/);
    expect(back.host.groups[0].store.getJob('snap')?.metadata).toEqual({ i: 79 });
    // And it keeps following: a later command reaches it through the log.
    await leader.service.patchJob('snap', { metadata: { i: 80 } });
    await waitFor('replicated', () => (back.host.groups[0].store.getJob('snap')?.metadata as { i: number } | null)?.i === 80, 5_000);
  });

  it('answers 503 with Retry-After while a shard has no leader, and /readyz says why', async () => {
    const [config] = await clusterConfigs(bed.dir, 3, { shards: 2 });
    const node = await startNode(config, { logger: silentLogger, closeGraceMs: 500 });
    try {
      const base = `http://127.0.0.1:${node.apiPort}`;
      const res = await fetch(`${base}/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id: 'x', callback: { url: bed.rx.url('/x') } }) });
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('1');
      expect(((await res.json()) as { code: string }).code).toBe('unavailable');
      const ready = await fetch(`${base}/readyz`);
      expect(ready.status).toBe(503);
      expect(((await ready.json()) as { detail: string }).detail).toMatch(/no known leader/);
    } finally {
      await node.close();
    }
  });

  it('refuses a node that presents the wrong cluster secret, and logs it', async () => {
    const configs = await clusterConfigs(bed.dir, 3, { shards: 2, clusterSecret: 'right-cluster-secret-0123' });
    configs[2] = { ...configs[2], clusterSecret: 'wrong-cluster-secret-0123' };
    const lines: string[] = [];
    const logger = silentLogger;
    const cores = [
      await startCore(configs[0], { logger: captureLogger(lines) }),
      await startCore(configs[1], { logger }),
      await startCore(configs[2], { logger }),
    ];
    await waitFor('n1 and n2 elect', () => cores[0].service.readiness().ready && cores[1].service.readiness().ready, 10_000);
    // n3 leads no shard by preference, so its first campaign (refused) comes after the boot delay.
    await waitFor('n3 refused', () => cores[0].transport!.stats().refused + cores[1].transport!.stats().refused > 0, 10_000);
    expect(cores[2].service.readiness().ready).toBe(false);
    expect(lines.some((l) => l.includes('n3') && /secret/i.test(l))).toBe(true);
    for (const s of (await cores[0].service.cluster()).shards) expect(['n1', 'n2']).toContain(s.leader);
  });
});

/** A real logger writing JSON lines into memory, so the test reads what an operator would read. */
function captureLogger(lines: string[]): Logger {
  return createLogger({ level: 'warn', format: 'json', write: (line) => lines.push(line) });
}
