import { describe, expect, it } from 'vitest';
import { silentLogger } from '../core/log.js';
import { Prng } from '../core/prng.js';
import { MemoryStorage } from '../raft/storage.js';
import type { Entry, NodeId } from '../raft/index.js';
import { decodeCommand } from '../scheduler/codec.js';
import type { Command } from '../scheduler/commands.js';
import { apply } from '../scheduler/machine.js';
import { MemoryStore } from '../scheduler/memory-store.js';
import { Node } from './node.js';
import { once, T0, task } from './testing/harness.js';
import type { DispatchOrder, Reply, Withdrawal } from './types.js';

/**
 * A host that does only IO for a composed Node: persists rounds into MemoryStorages, applies committed entries
 * into MemoryStores and tells the node, and collects what NodeCore's ready() orders. It never calls NodeCore's
 * leaderStart / leaderStop / applied / proposalDone: those must come through the node.
 */
class Host {
  nowMs = T0;
  monoMs = 1_000;
  readonly storages: MemoryStorage[];
  readonly stores: MemoryStore[];
  readonly node: Node;
  readonly orders: DispatchOrder[] = [];
  readonly withdrawals: Withdrawal[] = [];
  readonly replies = new Map<number, Reply>();
  private opNext = 1;

  constructor(voters: string[], shards = 1) {
    this.storages = Array.from({ length: shards }, () => new MemoryStorage({ voters: voters as NodeId[], learners: [] }));
    this.stores = Array.from({ length: shards }, () => new MemoryStore());
    const rand = new Prng(7);
    this.node = new Node({
      replication: {
        nodeId: 'n1',
        shards: this.storages.map((storage) => ({ storage, applied: storage.firstIndex() - 1 })),
        rand,
        compaction: { keepEntries: 1_000, everyEntries: 1_000_000 },
        reachable: () => true,
      },
      core: { nodeId: 'n1', stores: this.stores, startMs: this.nowMs, rand01: () => rand.nextFloat(), mergeCreates: true, logger: silentLogger },
      clocks: { nowMs: () => this.nowMs, monoMs: () => this.monoMs },
    });
    this.node.replication.start(this.monoMs);
    this.settle();
  }

  /** Rounds, applies and the core's outputs, until neither side has anything. */
  settle(): void {
    for (let i = 0; i < 100; i++) {
      const round = this.round();
      const out = this.pump();
      if (!round && !out) return;
    }
    throw new Error('the node did not settle');
  }

  private round(): boolean {
    const rep = this.node.replication;
    const rd = rep.ready();
    if (rd === null) return false;
    for (const { shard, ready } of rd.shards) {
      const st = this.storages[shard]!;
      if (ready.snapshot !== null) st.applySnapshot(ready.snapshot);
      st.append(ready.entries);
      if (ready.hardState !== null) st.setHardState(ready.hardState);
    }
    rep.persisted(rd);
    this.node.take();
    if (rd.inline) {
      for (const { shard, ready } of rd.shards) {
        for (const e of ready.committedEntries) this.applyEntry(shard, e);
        rep.afterApply(shard, false);
      }
    }
    rep.sent(rd);
    rep.applyMark();
    const touched = new Set<number>();
    for (let n = rep.nextApply(); n !== null; n = rep.nextApply()) if (this.applyEntry(n.shard, n.entry)) touched.add(n.shard);
    for (const shard of touched) rep.afterApply(shard);
    rep.advance(rd);
    this.node.take();
    return true;
  }

  private applyEntry(shard: number, e: Entry): boolean {
    if (!this.node.replication.beginApply(shard, e)) return false;
    if (e.type !== 'normal' || e.data.length === 0) {
      this.node.applied(shard, e.index, e.term, null, null);
    } else {
      const command = decodeCommand(e.data);
      const { result, effects } = apply(this.stores[shard]!, command, e.term);
      this.node.applied(shard, e.index, e.term, command, { result, effects });
    }
    this.node.take();
    return true;
  }

  private pump(): boolean {
    let worked = false;
    for (;;) {
      const rd = this.node.ready();
      if (rd.propose.length + rd.dispatch.length + rd.withdraw.length + rd.replies.length === 0) {
        if (rd.flushAtMs !== null && rd.flushAtMs <= this.nowMs) {
          this.node.core.flush(this.nowMs);
          continue;
        }
        return worked;
      }
      worked = true;
      this.orders.push(...rd.dispatch);
      this.withdrawals.push(...rd.withdraw);
      for (const r of rd.replies) this.replies.set(r.opId, r);
    }
  }

  client(shard: number, command: Command): Reply | undefined {
    const opId = this.opNext++;
    expect(this.node.core.propose(opId, shard, command, this.nowMs)).toBeNull();
    this.node.core.flush(this.nowMs);
    this.settle();
    return this.replies.get(opId);
  }

  advance(ms: number): void {
    this.nowMs = ms;
    this.node.core.tick(this.nowMs);
    this.settle();
  }
}

describe('Node: Replication and NodeCore composed', () => {
  it('an applied create fires through the composed core, with no host glue between the two halves', () => {
    const h = new Host(['n1']);
    // Elected and caught up in Replication: NodeCore fires the shard in that term without the host saying so.
    const term = h.node.replication.shards[0]!.lead.term;
    expect(term).toBeGreaterThan(0);
    expect(h.node.core.firingShards().get(0)).toBe(term);
    expect(h.client(0, { type: 'put_task', nowMs: h.nowMs, task: task() })).toMatchObject({ ok: true });
    const created = h.client(0, { type: 'create_jobs', nowMs: h.nowMs, shard: 0, jobs: [once('j1', T0 + 500)] });
    // The proposal went into the log and its answer came back through the node, after the job was armed.
    expect(created).toMatchObject({ ok: true });
    expect(h.stores[0]!.getJob('j1')).not.toBeNull();
    expect(h.orders).toEqual([]);
    h.advance(T0 + 499);
    expect(h.orders).toEqual([]);
    h.advance(T0 + 500);
    expect(h.orders.map((o) => [o.jobId, o.scheduledAtMs, o.attempt, o.fencingToken])).toEqual([['j1', T0 + 500, 1, `0.${term}`]]);
  });

  it('leadership lost in Replication withdraws the order NodeCore gave, in the same call that learns it', () => {
    const h = new Host(['n1']);
    const term = h.node.replication.shards[0]!.lead.term;
    h.client(0, { type: 'put_task', nowMs: h.nowMs, task: task() });
    h.client(0, { type: 'create_jobs', nowMs: h.nowMs, shard: 0, jobs: [once('j1', T0 + 100)] });
    h.advance(T0 + 100);
    expect(h.orders).toHaveLength(1);
    // A leader of a later term is heard of: Raft steps down; the round that persists it tells the node.
    h.node.replication.step([{ type: 'heartbeat', group: 0, from: 'n2' as NodeId, to: 'n1' as NodeId, term: term + 1, commit: 0, sentTick: 0, ctx: '' } as never]);
    const rd = h.node.replication.ready()!;
    expect(rd).not.toBeNull();
    h.node.replication.persisted(rd);
    expect(h.node.core.firingShards().get(0)).toBe(term);
    h.node.take();
    expect(h.node.core.firingShards().has(0)).toBe(false);
    expect(h.node.ready().withdraw).toEqual([{ key: h.orders[0]!.key, shard: 0, reason: 'leadership_lost' }]);
    h.node.replication.sent(rd);
    h.node.replication.advance(rd);
    h.node.take();
    // Nothing more is ordered for the shard, and a client write is refused by Raft, through the core's reply.
    h.advance(T0 + 10_000);
    expect(h.orders).toHaveLength(1);
    const refused = h.client(0, { type: 'put_task', nowMs: h.nowMs, task: task('other') });
    expect(refused).toMatchObject({ ok: false, error: { reason: 'not_leader' } });
  });

  it('a full disk refuses the core proposals through their replies; writes go on once it has room', () => {
    const h = new Host(['n1']);
    h.node.setStorageFull(true);
    expect(h.client(0, { type: 'put_task', nowMs: h.nowMs, task: task() })).toMatchObject({ ok: false, error: { code: 'insufficient_storage' } });
    h.node.setStorageFull(false);
    expect(h.client(0, { type: 'put_task', nowMs: h.nowMs, task: task() })).toMatchObject({ ok: true });
  });
});
