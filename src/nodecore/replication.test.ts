import { afterEach, describe, expect, it } from 'vitest';
import { PunctualError } from '../core/errors.js';
import { clusterLimits, stallLimits } from '../core/limits.js';
import { Prng } from '../core/prng.js';
import { HostBugs, resetHostBugs } from '../raft/bugs.js';
import { MemoryStorage } from '../raft/storage.js';
import type { Entry, Message, NodeId } from '../raft/index.js';
import { Replication, type ReplicaEvent, type ReplicaRound } from './replication.js';

const tick = clusterLimits.tickMs;

/** One node: a Replication over MemoryStorages, carried out as a host would (persist, send, apply, advance). */
class Node {
  readonly rep: Replication;
  readonly storages: MemoryStorage[] = [];
  readonly events: ReplicaEvent[] = [];
  readonly outbox: Message[] = [];
  monoMs = 1_000;

  constructor(
    readonly id: string,
    voters: string[],
    seed: number,
    compaction: { keepEntries: number; everyEntries: number; keepBytes?: number } = { keepEntries: 1_000, everyEntries: 1_000_000 },
  ) {
    this.storages.push(new MemoryStorage({ voters: voters as NodeId[], learners: [] }));
    this.rep = new Replication({
      nodeId: id,
      shards: this.storages.map((storage) => ({ storage, applied: storage.firstIndex() - 1 })),
      rand: new Prng(seed),
      compaction,
      reachable: () => true,
    });
    this.rep.start(this.monoMs);
  }

  /** Persists the round (applying it in the write when inline); returns the messages it split. */
  persist(rd: ReplicaRound): { early: Message[]; late: Message[] } {
    const applied: Array<{ shard: number; entry: Entry }> = [];
    for (const { shard, ready } of rd.shards) {
      const st = this.storages[shard]!;
      if (ready.snapshot !== null) {
        st.applySnapshot(ready.snapshot);
        this.rep.snapshotInstalled(shard, ready.snapshot.metadata.index);
      }
      st.append(ready.entries);
      if (ready.hardState !== null) st.setHardState(ready.hardState);
      if (rd.inline) for (const entry of ready.committedEntries) if (this.rep.beginApply(shard, entry)) applied.push({ shard, entry });
    }
    const split = this.rep.persisted(rd);
    for (const a of applied) this.rep.answer(a.shard, a.entry.index, a.entry.term, { result: a.entry.index, effects: [] });
    for (const { shard } of rd.shards) if (rd.inline) this.rep.afterApply(shard, false);
    return split;
  }

  /** The applier: everything queued, in one write. */
  applyAll(): void {
    this.rep.applyMark();
    const touched = new Set<number>();
    for (let n = this.rep.nextApply(); n !== null; n = this.rep.nextApply()) {
      if (!this.rep.beginApply(n.shard, n.entry)) continue;
      this.rep.answer(n.shard, n.entry.index, n.entry.term, { result: n.entry.index, effects: [] });
      touched.add(n.shard);
    }
    for (const s of touched) this.rep.afterApply(s);
  }

  /** Whole rounds until none is left. */
  rounds(): void {
    for (let rd = this.rep.ready(); rd !== null; rd = this.rep.ready()) {
      const { early, late } = this.persist(rd);
      this.outbox.push(...early, ...late);
      this.rep.sent(rd);
      this.applyAll();
      this.rep.advance(rd);
    }
    this.events.push(...this.rep.take());
  }

  tickTo(monoMs: number): boolean {
    this.monoMs = monoMs;
    return this.rep.tick(monoMs);
  }

  kinds(): string[] {
    return this.events.map((e) => e.kind);
  }
}

/** Nodes that exchange messages at once (until quiet). */
function settle(nodes: Node[], deliver = (_m: Message) => true): void {
  for (let i = 0; i < 100; i++) {
    let moved = false;
    for (const n of nodes) n.rounds();
    for (const n of nodes) {
      for (const m of n.outbox.splice(0)) {
        const to = nodes.find((x) => x.id === m.to);
        if (to === undefined || !deliver(m)) continue;
        to.rep.step([m]);
        moved = true;
      }
    }
    if (!moved && nodes.every((n) => !n.rep.hasReady())) return;
  }
  throw new Error('did not settle');
}

/** Three nodes, n1 elected and firing shard 0, its lease confirmed by a heartbeat round. */
function cluster(): Node[] {
  const ids = ['n1', 'n2', 'n3'];
  const nodes = ids.map((id, i) => new Node(id, ids, i + 1));
  nodes[0]!.rep.shards[0]!.raw.campaign();
  settle(nodes);
  for (let t = 1; t <= 4; t++) {
    for (const n of nodes) n.tickTo(1_000 + t * tick);
    settle(nodes);
  }
  return nodes;
}

function failures(n: Node): Array<string | null> {
  return n.events.flatMap((e) => (e.kind === 'proposal' && !e.ok ? [e.error.reason] : []));
}

afterEach(() => resetHostBugs());

describe('Replication: time', () => {
  it('ticks once per tickMs of monotonic time; after a stall the lease is lapsed until the missed ticks ran, and they expire it', () => {
    const [n1] = cluster();
    const leader = n1!;
    expect(leader.kinds()).toContain('leader_start');
    expect(leader.rep.leaseValid(0, leader.monoMs)).toBe(true);

    // Frozen for 40 ticks: Raft still sees its lease (no tick counted it), the replication layer does not trust it.
    const woke = leader.monoMs + 40 * tick;
    expect(leader.tickTo(woke)).toBe(false);
    expect(leader.rep.shards[0]!.raw.leaseValid()).toBe(true);
    expect(leader.rep.leaseValid(0, woke)).toBe(false);
    expect(leader.rep.take().filter((e) => e.kind === 'catch_up')).toHaveLength(1); // asked once per stall
    expect(leader.tickTo(woke + 1)).toBe(false);
    expect(leader.rep.take()).toEqual([]);

    leader.rep.catchUp(woke + 1);
    expect(leader.rep.shards[0]!.raw.leaseValid()).toBe(false); // the missed ticks expired it
    expect(leader.rep.leaseValid(0, woke + 1)).toBe(false);
    expect(leader.tickTo(woke + tick)).toBe(true); // counting again
  });

  it('leaseUntilMono is the time from which leaseValid says no, unless a heartbeat round renews the lease', () => {
    const nodes = cluster();
    const leader = nodes[0]!;
    const until = leader.rep.leaseUntilMono(0, leader.monoMs);
    expect(until).toBeGreaterThan(leader.monoMs);
    expect(until - leader.monoMs).toBeLessThanOrEqual(clusterLimits.leaseTicks * tick);
    // Its followers' answers never arrive: every tick up to the deadline keeps the lease, the one at it ends it.
    for (let t = leader.monoMs + 1; t < until; t += 7) {
      leader.tickTo(t);
      expect(leader.rep.leaseValid(0, t)).toBe(true);
      expect(leader.rep.leaseUntilMono(0, t)).toBe(until);
    }
    leader.tickTo(until);
    expect(leader.rep.leaseValid(0, until)).toBe(false);
    expect(leader.rep.leaseUntilMono(0, until)).toBe(Number.NEGATIVE_INFINITY);
  });

  it('leaseUntilMono after a stall, before the catch-up: the same deadline while it is ahead, none once it passed', () => {
    const nodes = cluster();
    const leader = nodes[0]!;
    const until = leader.rep.leaseUntilMono(0, leader.monoMs);
    // Frozen for 2 ticks: leaseValid does not trust the lease until the missed ticks ran; the deadline is still
    // the time its last tick is due.
    const woke = leader.monoMs + 2 * tick + 1;
    expect(woke).toBeLessThan(until);
    expect(leader.rep.leaseValid(0, woke)).toBe(false);
    expect(leader.rep.leaseUntilMono(0, woke)).toBe(until);
    leader.rep.catchUp(woke);
    expect(leader.rep.leaseValid(0, woke)).toBe(true);
    expect(leader.rep.leaseUntilMono(0, woke)).toBe(until);
    // Frozen past it: no deadline, before or after the catch-up.
    expect(leader.rep.leaseUntilMono(0, until + 3 * tick)).toBe(Number.NEGATIVE_INFINITY);
    leader.rep.catchUp(until + 3 * tick);
    expect(leader.rep.leaseUntilMono(0, until + 3 * tick)).toBe(Number.NEGATIVE_INFINITY);
    expect(nodes[1]!.rep.leaseUntilMono(0, nodes[1]!.monoMs)).toBe(Number.NEGATIVE_INFINITY); // a follower holds none
  });

  it('a follower that stalled gets at most followerCatchUpTicksMax ticks and does not campaign on frozen time', () => {
    const nodes = cluster();
    const f = nodes[1]!;
    // Almost an election timeout without a tick, then a stall: it must not campaign on the stall's ticks.
    const woke = f.monoMs + 100 * tick;
    expect(f.tickTo(woke)).toBe(false);
    f.rep.catchUp(woke);
    f.rounds();
    expect(stallLimits.followerCatchUpTicksMax).toBeLessThan(clusterLimits.electionTicks);
    expect(f.outbox.filter((m) => m.type === 'pre_vote' || m.type === 'vote')).toEqual([]);
    expect(f.rep.shards[0]!.role).toBe('follower');
  });

  it('HostBugs.leaseOnStaleTicks (a mutation switch) restores the old rule: one tick per interval, the lease as Raft saw it', () => {
    const [leader] = cluster();
    HostBugs.leaseOnStaleTicks = true;
    const woke = leader!.monoMs + 40 * tick;
    expect(leader!.tickTo(woke)).toBe(true);
    expect(leader!.rep.leaseValid(0, woke)).toBe(true);
  });
});

describe('Replication: the round', () => {
  it('persist, then heartbeats and a leader appends before the sync, votes and answers after it; one round at a time', () => {
    const ids = ['n1', 'n2', 'n3'];
    const nodes = ids.map((id, i) => new Node(id, ids, i + 1));
    const [n1, n2] = nodes as [Node, Node];
    n1.rep.shards[0]!.raw.campaign();
    const rd = n1.rep.ready()!;
    expect(rd.mustSync).toBe(false); // a pre-vote changes neither term nor vote
    expect(n1.rep.ready()).toBeNull(); // in flight until advanced
    const { early, late } = n1.persist(rd);
    expect(early).toEqual([]);
    expect(late.map((m) => m.type)).toEqual(['pre_vote', 'pre_vote']);
    expect(() => n1.rep.advance({ ...rd })).toThrow(); // only the round in flight
    n1.rep.sent(rd);
    n1.rep.advance(rd);
    n1.outbox.push(...late);
    settle(nodes);
    expect(n1.rep.shards[0]!.role).toBe('leader');

    // The leader's appends leave early; the follower's answers only after its sync.
    const p = n1.rep.propose(0, new Uint8Array([1]), n1.monoMs);
    expect(p.ok).toBe(true);
    const lr = n1.rep.ready()!;
    const ls = n1.persist(lr);
    expect(ls.early.map((m) => m.type)).toEqual(['append', 'append']);
    expect(ls.late).toEqual([]);
    n1.rep.sent(lr);
    n1.rep.advance(lr);
    n2.rep.step(ls.early.filter((m) => m.to === 'n2'));
    const fr = n2.rep.ready()!;
    expect(fr.mustSync).toBe(true);
    const fs = n2.persist(fr);
    expect(fs.early).toEqual([]);
    expect(fs.late.map((m) => m.type)).toEqual(['append_resp']);
  });

  it('a large batch of committed entries goes to the applier only once the round was sent, and is answered in log order', () => {
    const n = new Node('n1', ['n1'], 1);
    n.rounds();
    const count = stallLimits.applySliceEntriesMax + 10;
    const tickets: number[] = [];
    for (let i = 0; i < count; i++) {
      const r = n.rep.propose(0, new Uint8Array([i & 0xff]), n.monoMs);
      if (!r.ok) throw r.error;
      tickets.push(r.ticket);
    }
    const persistRound = n.rep.ready()!;
    n.persist(persistRound);
    n.rep.sent(persistRound);
    n.rep.advance(persistRound); // the single voter counts its own copy now: everything commits
    const rd = n.rep.ready()!;
    expect(rd.shards[0]!.ready.committedEntries).toHaveLength(count);
    expect(rd.inline).toBe(false);
    n.persist(rd);
    expect(n.rep.applyBacklog()).toBe(0);
    n.rep.sent(rd);
    expect(n.rep.applyBacklog()).toBe(count);
    n.applyAll();
    n.rep.advance(rd);
    const answered = n.rep.take().flatMap((e) => (e.kind === 'proposal' && e.ok ? [e.ticket] : []));
    expect(answered).toEqual(tickets);
  });

  it('a committed conf change waits for the applier before Raft applies it at advance', () => {
    const n = new Node('n1', ['n1'], 1);
    n.rounds();
    n.rep.proposeConfChange(0, { type: 'add_learner', node: 'n2' as NodeId });
    for (let rd = n.rep.ready(); rd !== null; rd = n.rep.ready()) {
      n.persist(rd);
      n.rep.sent(rd);
      if (rd.confChange) {
        expect(rd.inline).toBe(false);
        expect(n.rep.applyBacklog()).toBeGreaterThan(0);
        expect(() => n.rep.advance(rd)).toThrow(/applied/);
        expect(n.rep.shards[0]!.raw.confState().learners).toEqual([]);
        n.applyAll();
      }
      n.rep.advance(rd);
    }
    const conf = n.rep.take().find((e) => e.kind === 'conf_change');
    expect(conf).toEqual({ kind: 'conf_change', shard: 0, conf: { voters: ['n1'], learners: ['n2'] } });
  });

  it('asks for compaction every everyEntries applied entries, keeping keepEntries', () => {
    const n = new Node('n1', ['n1'], 1, { keepEntries: 3, everyEntries: 5 });
    n.rounds();
    for (let i = 0; i < 5; i++) n.rep.propose(0, new Uint8Array([i]), n.monoMs);
    n.rounds();
    const c = n.events.find((e) => e.kind === 'compact');
    expect(c).toMatchObject({ kind: 'compact', shard: 0, index: 7, upTo: 4 });
  });

  it('keeps no more than about keepBytes of log: large entries are compacted sooner and fewer are kept', () => {
    const n = new Node('n1', ['n1'], 1, { keepEntries: 1_000, everyEntries: 1_000_000, keepBytes: 40_000 });
    n.rounds();
    // 1,000-byte entries: 40,000 bytes hold about 38 of them (with each entry's overhead); a quarter of that
    // applied since the last compaction asks for one.
    for (let i = 0; i < 12; i++) n.rep.propose(0, new Uint8Array(1_000).fill(i), n.monoMs);
    n.rounds();
    const c = n.events.find((e) => e.kind === 'compact');
    expect(c).toBeUndefined(); // fewer than keepBytes applied in all: nothing to drop yet
    for (let i = 0; i < 60; i++) n.rep.propose(0, new Uint8Array(1_000).fill(i), n.monoMs);
    n.rounds();
    const compacts = n.events.filter((e) => e.kind === 'compact');
    expect(compacts.length).toBeGreaterThan(0);
    const last = compacts[compacts.length - 1] as Extract<ReplicaEvent, { kind: 'compact' }>;
    expect(last.index - last.upTo).toBeLessThanOrEqual(40_000 / 1_000);
    expect(last.index - last.upTo).toBeGreaterThan(30);
  });
});

describe('Replication: proposals and their failure reasons', () => {
  it('not_leader on a follower, interrupted at close, shutting_down after it', () => {
    const nodes = cluster();
    const f = nodes[1]!.rep.propose(0, new Uint8Array([1]), 0);
    expect(f.ok).toBe(false);
    if (!f.ok) expect([f.error.code, f.error.reason]).toEqual(['unavailable', 'not_leader']);

    const leader = nodes[0]!;
    const p = leader.rep.propose(0, new Uint8Array([2]), leader.monoMs);
    expect(p.ok).toBe(true);
    leader.rep.close();
    const events = leader.rep.take();
    expect(events).toContainEqual(expect.objectContaining({ kind: 'proposal', ok: false, error: expect.objectContaining({ reason: 'interrupted' }) }));
    expect(events).toContainEqual({ kind: 'leader_stop', shard: 0 });
    const after = leader.rep.propose(0, new Uint8Array([3]), leader.monoMs);
    expect(!after.ok && after.error.reason).toBe('shutting_down');
  });

  it('proposal_timeout once proposalTimeoutMs of ticks passed without its entry applying', () => {
    const nodes = cluster();
    const leader = nodes[0]!;
    leader.rep.propose(0, new Uint8Array([1]), leader.monoMs);
    const start = leader.monoMs;
    // The followers hear nothing: the entry never commits.
    for (let t = 1; t * tick <= clusterLimits.proposalTimeoutMs + 20 * tick; t++) {
      leader.tickTo(start + t * tick);
      leader.rounds();
      leader.outbox.length = 0;
    }
    expect(failures(leader)).toContain('proposal_timeout');
  });

  it('proposal_lost when another term committed at its index, snapshot_overtook when a snapshot covers it, internal when quarantined', () => {
    const n = new Node('n1', ['n1'], 1);
    n.rounds();
    const a = n.rep.propose(0, new Uint8Array([1]), n.monoMs);
    const b = n.rep.propose(0, new Uint8Array([2]), n.monoMs);
    const c = n.rep.propose(0, new Uint8Array([3]), n.monoMs);
    if (!a.ok || !b.ok || !c.ok) throw new Error('refused');
    n.rep.answer(0, a.index, a.term + 1, { result: null, effects: [] });
    n.rep.answer(0, b.index, b.term, null);
    n.rep.snapshotInstalled(0, c.index);
    const byTicket = new Map(n.rep.take().flatMap((e) => (e.kind === 'proposal' && !e.ok ? [[e.ticket, e.error] as const] : [])));
    expect(byTicket.get(a.ticket)?.reason).toBe('proposal_lost');
    expect(byTicket.get(b.ticket)).toBeInstanceOf(PunctualError);
    expect(byTicket.get(b.ticket)?.code).toBe('internal');
    expect(byTicket.get(c.ticket)?.reason).toBe('snapshot_overtook');
    expect(n.rep.idle()).toBe(true);
  });
});

describe('Replication: reads', () => {
  it('a follower read waits for the leader ReadIndex and its own apply; unanswered, it fails with read_timeout', () => {
    const nodes = cluster();
    const f = nodes[1]!;
    expect(f.rep.readBarrier(0, f.monoMs).kind).toBe('refused'); // only a leader serves a plain read barrier
    const r = f.rep.readBarrier(0, f.monoMs, true);
    if (r.kind !== 'wait') throw new Error(`expected to wait, got ${r.kind}`);
    settle(nodes);
    expect(f.events).toContainEqual({ kind: 'read', ticket: r.ticket, shard: 0, error: null });

    const lost = f.rep.readBarrier(0, f.monoMs, true);
    if (lost.kind !== 'wait') throw new Error(`expected to wait, got ${lost.kind}`);
    // The leader never hears of it (heartbeats still flow, so the follower keeps its leader).
    const start = f.monoMs;
    for (let t = 1; t * tick <= clusterLimits.readIndexTimeoutMs + 20 * tick; t++) {
      for (const n of nodes) n.tickTo(start + t * tick);
      settle(nodes, (m) => m.type !== 'read_index');
    }
    const answer = f.events.find((e) => e.kind === 'read' && e.ticket === lost.ticket);
    expect(answer?.kind === 'read' && answer.error?.reason).toBe('read_timeout');
  });
});

describe('Replication: leadership', () => {
  it('starts firing only once the new leader applied its term first entry, in that term', () => {
    const n = new Node('n1', ['n1'], 1);
    // Elected, its no-op appended and persisted: rounds until the one in which the no-op commits.
    let rd = n.rep.ready()!;
    while (rd.shards[0]!.ready.committedEntries.length === 0) {
      n.persist(rd);
      n.rep.sent(rd);
      n.rep.advance(rd);
      rd = n.rep.ready()!;
    }
    expect(n.rep.take().map((e) => e.kind)).toEqual(['leading']);
    const noop = rd.shards[0]!.ready.committedEntries[0]!;
    expect(noop.data.length).toBe(0);
    // A host that has not applied the no-op yet (its write still to come): no start at advance.
    n.rep.persisted(rd);
    n.rep.sent(rd);
    n.rep.advance(rd);
    expect(n.rep.take().filter((e) => e.kind === 'leader_start')).toEqual([]);
    expect(n.rep.leaseValid(0, n.monoMs)).toBe(false);
    expect(n.rep.beginApply(0, noop)).toBe(true);
    n.rep.answer(0, noop.index, noop.term, null);
    n.rep.afterApply(0);
    expect(n.rep.take()).toEqual([{ kind: 'leader_start', shard: 0, term: noop.term }]);
    expect(n.rep.shards[0]!.lead.firing).toBe(true);
  });

  it('stops firing when deposed, and a read barrier on a follower is refused with not_leader', () => {
    const nodes = cluster();
    const [n1, n2] = nodes as [Node, Node];
    expect(n1.rep.readBarrier(0, n1.monoMs)).toEqual({ kind: 'now' });
    n1.events.length = 0;
    // n2 takes over (n1 hears nothing of the transfer until the new term reaches it).
    n1.rep.transferLeader(0, 'n2');
    settle(nodes);
    expect(n2.rep.shards[0]!.role).toBe('leader');
    expect(n1.kinds()).toContain('leader_stop');
    const r = n1.rep.readBarrier(0, n1.monoMs);
    expect(r.kind === 'refused' && r.error.reason).toBe('not_leader');
  });
});
