/**
 * Scenario tests of the features beyond the paper's core: PreVote, CheckQuorum, the lease, ReadIndex, leadership
 * transfer, learners, snapshots, in-flight limits, batching, checksums, and the voteWithoutPersist mutation.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Prng } from '../core/prng.js';
import { RaftBugs, resetRaftBugs } from './bugs.js';
import { makeEntry } from './crc32.js';
import { CorruptEntryError } from './log.js';
import { MemoryStorage } from './storage.js';
import type { Entry, LogIndex, Message, NodeId, Snapshot, Term } from './types.js';
import { Cluster, encodeText } from './testing/network.js';

afterEach(resetRaftBugs);

function three(config = {}): { c: Cluster; ids: NodeId[]; leader: NodeId } {
  const c = new Cluster({ config });
  const ids = c.addNodes(3);
  c.node(ids[0]!).raw.campaign();
  c.stabilize();
  return { c, ids, leader: ids[0]! };
}

const term = (c: Cluster, id: NodeId): number => c.node(id).raw.status().term;
const role = (c: Cluster, id: NodeId): string => c.node(id).raw.status().role;

describe('PreVote', () => {
  it('a partitioned node rejoining does not disrupt the leader', () => {
    const { c, leader } = three({ preVote: true });
    const t0 = term(c, leader);
    c.isolate('n3' as NodeId);
    c.tickAll(100);
    expect(term(c, 'n3' as NodeId)).toBe(t0); // pre-votes fail, so its term never grows
    c.heal();
    c.tickAll(5);
    expect(c.leader()).toBe(leader);
    expect(term(c, leader)).toBe(t0);
  });

  it('without PreVote the same rejoin forces an election at a higher term', () => {
    const { c, leader } = three({ preVote: false, checkQuorum: false });
    const t0 = term(c, leader);
    c.isolate('n3' as NodeId);
    c.tickAll(100);
    expect(term(c, 'n3' as NodeId)).toBeGreaterThan(t0 + 2);
    c.heal();
    c.tickAll(30);
    expect(term(c, c.electLeader())).toBeGreaterThan(t0 + 2);
  });
});

describe('boot campaign delay', () => {
  /** Three fresh nodes; all but `preferred` wait `delay` more ticks before their first campaign. */
  function boot(seed: number, delay: number, preferred = 'n2'): Cluster {
    const c = new Cluster({ seed });
    c.addNodes(3, (id) => ({ bootCampaignDelayTicks: id === preferred ? 0 : delay }));
    return c;
  }

  it('the preferred node wins the first election whatever the seed; without the delay it often does not', () => {
    const firsts = (delay: number): NodeId[] => Array.from({ length: 40 }, (_, i) => boot(i + 1, delay).electLeader());
    expect(new Set(firsts(20))).toEqual(new Set(['n2']));
    expect(firsts(0).filter((l) => l !== 'n2').length).toBeGreaterThan(5);
  });

  it('with the preferred node down, another leads once the delay has passed, and later elections have no delay', () => {
    const c = boot(7, 20);
    c.crash('n2' as NodeId);
    let ticks = 0;
    while (c.leader() === null) {
      c.tickAll();
      ticks++;
    }
    expect(ticks).toBeGreaterThanOrEqual(20 + 10);
    expect(ticks).toBeLessThan(20 + 2 * 10 + 5);
    const first = c.leader()!;
    c.crash(first);
    c.restart('n2' as NodeId);
    const survivor = c.ids().find((id) => id !== first && id !== 'n2')!;
    // Long past the boot delay: the next election takes an ordinary timeout.
    let again = 0;
    while (c.leader() === null) {
      c.tickAll();
      again++;
    }
    expect([survivor, 'n2']).toContain(c.leader());
    expect(again).toBeLessThan(2 * 10 + 12);
  });
});

describe('CheckQuorum', () => {
  it('an isolated leader steps down within two election timeouts', () => {
    const { c, leader } = three({ checkQuorum: true });
    c.isolate(leader);
    c.tickAll(20);
    expect(role(c, leader)).toBe('follower');
  });

  it('without CheckQuorum it stays leader', () => {
    const { c, leader } = three({ checkQuorum: false });
    c.isolate(leader);
    c.tickAll(40);
    expect(role(c, leader)).toBe('leader');
  });
});

describe('lease', () => {
  it('is valid after a quorum answers a heartbeat round, and expires leaseTicks after the last answered round', () => {
    const { c, leader } = three({ leaseTicks: 6, electionTicks: 10 });
    expect(c.node(leader).raw.leaseValid()).toBe(false); // no heartbeat round answered yet
    c.tickAll(1);
    expect(c.node(leader).raw.leaseValid()).toBe(true);
    c.isolate(leader);
    let validFor = 0;
    for (let t = 0; t < 12; t++) {
      c.tickAll(1);
      if (c.node(leader).raw.leaseValid()) validFor++;
    }
    expect(validFor).toBe(5); // the round sent at tick k covers ticks k..k+5; we are at k+1 .. k+5
    expect(role(c, leader)).toBe('leader'); // still leader (CheckQuorum not due), but without a lease
  });

  it('leaseTicksLeft says how many more ticks the lease holds without a renewal, and is 0 once it does not', () => {
    const { c, leader } = three({ leaseTicks: 6, electionTicks: 10 });
    expect(c.node(leader).raw.leaseTicksLeft()).toBe(0);
    c.tickAll(1);
    c.isolate(leader);
    const left = c.node(leader).raw.leaseTicksLeft();
    expect(left).toBeGreaterThan(0);
    for (let t = 0; t < left; t++) {
      expect(c.node(leader).raw.leaseValid()).toBe(true);
      expect(c.node(leader).raw.leaseTicksLeft()).toBe(left - t);
      c.tickAll(1);
    }
    expect(c.node(leader).raw.leaseValid()).toBe(false);
    expect(c.node(leader).raw.leaseTicksLeft()).toBe(0);
  });

  it('an isolated leader loses its lease before the majority elects a new leader', () => {
    const { c, leader } = three();
    c.tickAll(3);
    c.isolate(leader);
    let lastLeaseTick = -1;
    let newLeaderTick = -1;
    for (let t = 0; t < 60 && newLeaderTick < 0; t++) {
      c.tickAll(1);
      if (c.node(leader).raw.leaseValid()) lastLeaseTick = t;
      const others = c.ids().filter((id) => id !== leader && role(c, id) === 'leader');
      if (others.length > 0) newLeaderTick = t;
    }
    expect(lastLeaseTick).toBeGreaterThanOrEqual(0);
    expect(newLeaderTick).toBeGreaterThan(lastLeaseTick);
  });

  it('no two nodes hold a valid lease at once, over seeded partitions and restarts', () => {
    let ticksWithLease = 0;
    for (const seed of [11, 12, 13, 14]) {
      const rand = new Prng(seed);
      const c = new Cluster({ seed });
      const ids = c.addNodes(5);
      for (let t = 0; t < 400; t++) {
        const r = rand.nextFloat();
        if (r < 0.04) {
          const cut = 1 + rand.int(4);
          const s = ids.slice().sort(() => rand.nextFloat() - 0.5);
          c.partition(s.slice(0, cut), s.slice(cut));
        } else if (r < 0.08) c.heal();
        else if (r < 0.1) {
          const id = ids[rand.int(5)]!;
          if (c.node(id).crashed) c.restart(id);
          else c.crash(id);
        }
        if (rand.nextFloat() < 0.3) c.propose(`v${t}`);
        c.tickAll(1);
        const holders = ids.filter((id) => !c.node(id).crashed && c.node(id).raw.leaseValid());
        expect(holders.length, `seed ${seed} tick ${t}: ${holders.join(',')}`).toBeLessThanOrEqual(1);
        if (holders.length === 1) ticksWithLease++;
      }
    }
    expect(ticksWithLease).toBeGreaterThan(200);
  });
});

describe('ReadIndex', () => {
  it('the leader confirms its commit index with a quorum before answering', () => {
    const { c, leader } = three();
    c.propose('a');
    c.stabilize();
    const commit = c.node(leader).raw.status().commit;
    expect(c.node(leader).raw.readIndex('r1')).toBe(true);
    c.processReady(leader); // heartbeats with ctx r1 go out; no read state yet
    expect(c.node(leader).readStates).toEqual([]);
    c.stabilize();
    expect(c.node(leader).readStates).toEqual([{ index: commit, ctx: 'r1' }]);
  });

  it('a follower forwards the read and gets the leader index', () => {
    const { c } = three();
    c.propose('a');
    c.stabilize();
    expect(c.node('n2').raw.readIndex('f1')).toBe(true);
    c.stabilize();
    expect(c.node('n2').readStates).toEqual([{ index: c.node('n1').raw.status().commit, ctx: 'f1' }]);
  });

  it('a deposed leader cut off from the majority never answers (no stale read)', () => {
    const { c, leader } = three();
    c.isolate(leader);
    c.node(leader).raw.readIndex('stale');
    c.tickAll(40);
    expect(c.node(leader).readStates).toEqual([]);
    const other = c.electLeader();
    expect(other).not.toBe(leader);
  });

  it('a new leader answers only after committing an entry of its term', () => {
    const c = new Cluster();
    c.addNodes(3);
    c.node('n1').raw.campaign();
    // Drive to leadership but hold back the no-op's replication.
    for (let i = 0; i < 6 && role(c, 'n1' as NodeId) !== 'leader'; i++) {
      c.processAll();
      c.deliver();
    }
    expect(role(c, 'n1' as NodeId)).toBe('leader');
    c.node('n1').raw.readIndex('early');
    c.processReady('n1' as NodeId);
    expect(c.queue.some((m) => m.type === 'heartbeat' && m.ctx === 'early')).toBe(false);
    c.stabilize();
    expect(c.node('n1').readStates.map((r) => r.ctx)).toEqual(['early']);
    expect(c.node('n1').readStates[0]!.index).toBe(c.node('n1').raw.status().commit);
  });
});

describe('leadership transfer', () => {
  it('catches a lagging transferee up, then it wins the next term at once', () => {
    const { c, leader } = three();
    c.partition([leader, 'n2' as NodeId], ['n3' as NodeId]);
    c.propose('x');
    c.stabilize();
    c.heal();
    const t0 = term(c, leader);
    c.node(leader).raw.transferLeader('n3' as NodeId);
    expect(c.node(leader).raw.leaseValid()).toBe(false);
    expect(c.propose('refused', leader)).toEqual({ ok: false, reason: 'transferring' });
    c.stabilize();
    expect(c.leader()).toBe('n3');
    expect(term(c, 'n3' as NodeId)).toBe(t0 + 1);
    expect(c.node('n3').state.map((e) => e.data)).toContain('x');
  });

  it('is abandoned after an election timeout if the transferee is unreachable', () => {
    const { c, leader } = three();
    c.dropWhere((m) => m.to === 'n3' || m.from === 'n3');
    c.propose('y');
    c.stabilize();
    c.node(leader).raw.transferLeader('n3' as NodeId);
    expect(c.propose('during', leader).ok).toBe(false);
    c.tickAll(11);
    expect(c.leader()).toBe(leader);
    expect(c.propose('after', leader).ok).toBe(true);
  });

  it('a transfer whose timeout_now was lost: the leader steps down, and the next leader holds a lease', () => {
    const { c, leader } = three();
    c.propose('z');
    c.stabilize(); // the transferee is caught up: timeout_now goes out at once
    c.dropWhere((m) => m.to === 'n3' || m.from === 'n3');
    const t0 = term(c, leader);
    c.node(leader).raw.transferLeader('n3' as NodeId);
    expect(c.node(leader).raw.leaseValid()).toBe(false);
    c.tickAll(11); // abandoned after an election timeout: its lease would stay void for the whole term
    expect(role(c, leader)).not.toBe('leader');
    c.tickAll(60);
    const next = c.leader();
    expect(next === null || next === 'n3').toBe(false);
    expect(term(c, next as NodeId)).toBeGreaterThan(t0);
    expect(c.node(next as NodeId).raw.leaseValid()).toBe(true);
    expect(c.propose('after', next as NodeId).ok).toBe(true);
  });
});

describe('learners', () => {
  it('join, catch up, are promoted only when caught up, and do not count before', () => {
    const { c, leader } = three();
    const [n4] = c.addNodes(1) as [NodeId];
    expect(c.node(leader).raw.proposeConfChange({ type: 'add_voter', node: n4 })).toEqual({ ok: false, reason: 'invalid_change' });
    c.crash(n4);
    expect(c.node(leader).raw.proposeConfChange({ type: 'add_learner', node: n4 }).ok).toBe(true);
    c.stabilize();
    for (let i = 0; i < 5; i++) c.propose(`p${i}`);
    c.stabilize();
    expect(c.node(leader).raw.status().confState.learners).toEqual([n4]);
    // The learner is down, yet everything commits: it is not in the quorum.
    expect(c.node(leader).raw.status().commit).toBe(c.node(leader).raw.status().lastIndex);
    expect(c.node(leader).raw.proposeConfChange({ type: 'add_voter', node: n4 })).toEqual({ ok: false, reason: 'not_caught_up' });
    c.restart(n4);
    c.tickAll(2);
    expect(c.node(n4).raw.status().commit).toBe(c.node(leader).raw.status().commit);
    c.tickAll(30);
    expect(role(c, n4)).toBe('follower'); // a learner never campaigns
    expect(c.node(leader).raw.proposeConfChange({ type: 'add_voter', node: n4 }).ok).toBe(true);
    expect(c.node(leader).raw.proposeConfChange({ type: 'remove', node: 'n2' as NodeId })).toEqual({ ok: false, reason: 'conf_change_pending' });
    c.stabilize();
    expect(c.node(leader).raw.status().confState.voters).toEqual(['n1', 'n2', 'n3', 'n4']);
    // Now n4 counts: with n2 and n3 down, n1 + n4 are not a majority of 4, so nothing commits.
    c.crash('n2' as NodeId);
    c.crash('n3' as NodeId);
    const before = c.node(leader).raw.status().commit;
    c.propose('needs-3-of-4');
    c.stabilize();
    expect(c.node(leader).raw.status().commit).toBe(before);
  });

  it('a removed leader steps down and the rest elect a new one', () => {
    const { c, leader } = three();
    expect(c.node(leader).raw.proposeConfChange({ type: 'remove', node: leader }).ok).toBe(true);
    c.stabilize();
    expect(role(c, leader)).toBe('follower');
    const next = c.electLeader();
    expect(next).not.toBe(leader);
    expect(c.node(next).raw.status().confState.voters).toEqual(['n2', 'n3']);
    c.tickAll(40);
    expect(role(c, leader)).toBe('follower'); // no longer a voter: never campaigns
    expect(c.propose('z').ok).toBe(true);
  });

  it('membership survives a restart (conf changes replayed from the log)', () => {
    const { c, leader } = three();
    c.addNodes(1);
    c.node(leader).raw.proposeConfChange({ type: 'add_learner', node: 'n4' as NodeId });
    c.stabilize();
    c.crash('n2' as NodeId);
    c.restart('n2' as NodeId);
    expect(c.node('n2').raw.confState()).toEqual({ voters: ['n1', 'n2', 'n3'], learners: ['n4'] });
  });
});

describe('snapshots', () => {
  it('a follower behind the compacted log gets a snapshot, then the trailing entries', () => {
    const { c, leader } = three();
    c.crash('n3' as NodeId);
    for (let i = 0; i < 20; i++) c.propose(`e${i}`);
    c.stabilize();
    const l = c.node(leader);
    l.snapshotNow();
    l.storage.compact((l.appliedIndex - 5) as LogIndex);
    for (let i = 20; i < 23; i++) c.propose(`e${i}`);
    c.stabilize();
    const sent: Message[] = [];
    c.tamper = (m) => (sent.push(m), m);
    c.restart('n3' as NodeId);
    c.tickAll(3);
    expect(sent.filter((m) => m.type === 'snapshot' && m.to === 'n3')).toHaveLength(1);
    const n3 = c.node('n3');
    expect(n3.storage.firstIndex()).toBeGreaterThan(1);
    expect(n3.state.map((e) => e.data)).toEqual(l.state.map((e) => e.data));
    expect(n3.raw.status().applied).toBe(l.raw.status().applied);
  });

  it('asks the host for a snapshot when storage has none, and retries once it exists', () => {
    class NoSnapshotYet extends MemoryStorage {
      available = false;
      override snapshot(): Snapshot | null {
        return this.available ? super.snapshot() : null;
      }
    }
    const c = new Cluster();
    c.addNodes(3);
    const n1 = c.node('n1');
    const storage = new NoSnapshotYet({ voters: ['n1', 'n2', 'n3'] as NodeId[], learners: [] });
    (n1 as { storage: MemoryStorage }).storage = storage;
    n1.restart();
    n1.raw.campaign();
    c.stabilize();
    c.crash('n3' as NodeId);
    for (let i = 0; i < 5; i++) c.propose(`e${i}`);
    c.stabilize();
    n1.snapshotNow();
    storage.compact(n1.appliedIndex);
    c.restart('n3' as NodeId);
    const origHandle = n1.handleReady.bind(n1);
    let requested = 0;
    n1.handleReady = () => {
      const rd = origHandle();
      if (rd.snapshotRequested) {
        requested++;
        storage.available = true;
      }
      return rd;
    };
    c.tickAll(4);
    expect(requested).toBe(1);
    expect(c.node('n3').state.map((e) => e.data)).toEqual(n1.state.map((e) => e.data));
  });

  it('a failed snapshot send falls back to probing and is retried', () => {
    const { c, leader } = three();
    c.crash('n3' as NodeId);
    for (let i = 0; i < 5; i++) c.propose(`e${i}`);
    c.stabilize();
    const l = c.node(leader);
    l.snapshotNow();
    l.storage.compact(l.appliedIndex);
    c.restart('n3' as NodeId);
    let snapshots = 0;
    c.dropWhere((m) => m.type === 'snapshot' && ++snapshots === 1); // the first stream breaks
    c.tickAll(1);
    expect(l.raw.status().progress.get('n3' as NodeId)?.state).toBe('snapshot');
    l.raw.reportSnapshot('n3' as NodeId, false);
    expect(l.raw.status().progress.get('n3' as NodeId)?.state).toBe('probe');
    c.tickAll(3);
    expect(snapshots).toBe(2);
    expect(c.node('n3').raw.status().applied).toBe(l.raw.status().applied);
  });
});

describe('flow control', () => {
  it('caps appends in flight per follower by count', () => {
    const { c, leader } = three({ maxInflightMsgs: 2 });
    c.dropWhere((m) => m.from === 'n3' && m.type === 'append_resp'); // n3 never acknowledges
    for (let i = 0; i < 10; i++) {
      c.propose(`p${i}`);
      c.stabilize();
    }
    // n3 got the first append of each replicate burst only up to the cap; n2 got every entry.
    const pr = c.node(leader).raw.status().progress.get('n3' as NodeId)!;
    expect(pr.state).toBe('replicate');
    expect(pr.inflight).toBe(2);
    expect(c.node('n3').raw.status().lastIndex).toBeLessThan(c.node('n2').raw.status().lastIndex);
  });

  it('caps appends in flight per follower by bytes', () => {
    const { c, leader } = three({ maxInflightBytes: 10 });
    c.dropWhere((m) => m.from === 'n3' && m.type === 'append_resp');
    const sentToN3: number[] = [];
    c.tamper = (m) => {
      if (m.type === 'append' && m.to === 'n3' && m.entries.length > 0) sentToN3.push(m.entries.length);
      return m;
    };
    for (let i = 0; i < 10; i++) {
      c.propose('4byt');
      c.stabilize();
    }
    // 4 bytes each: the third append reaches 12 >= 10 bytes, then the pipe is full.
    expect(sentToN3).toHaveLength(3);
    expect(c.node(leader).raw.status().progress.get('n3' as NodeId)!.inflightBytes).toBe(12);
  });

  it('batches many entries per append, bounded by maxMsgBytes', () => {
    const { c, leader } = three({ maxMsgBytes: 100 });
    c.isolate('n3' as NodeId);
    for (let i = 0; i < 50; i++) c.propose('0123456789'); // 10 bytes each
    c.stabilize();
    c.heal();
    const sizes: number[] = [];
    c.tamper = (m) => {
      if (m.type === 'append' && m.to === 'n3' && m.entries.length > 0) sizes.push(m.entries.length);
      return m;
    };
    c.tickAll(2);
    expect(Math.max(...sizes)).toBe(10);
    expect(sizes.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(50);
    expect(c.node('n3').raw.status().commit).toBe(c.node(leader).raw.status().commit);
  });
});

describe('checksums', () => {
  it('a corrupted append is dropped unanswered, then replicated cleanly', () => {
    const { c, leader } = three();
    let corrupted = 0;
    c.tamper = (m) => {
      if (m.type !== 'append' || m.to !== 'n2' || m.entries.length === 0 || corrupted > 0) return m;
      corrupted++;
      const [e, ...rest] = m.entries as Entry[];
      const bad: Entry = { ...e!, data: encodeText('tampered') };
      return { ...m, entries: [bad, ...rest] };
    };
    c.propose('original');
    c.stabilize();
    expect(corrupted).toBe(1);
    expect(c.node('n2').raw.status().corruptMessages).toBe(1);
    c.tickAll(3);
    expect(c.node('n2').raw.status().commit).toBe(c.node(leader).raw.status().commit);
    expect(c.node('n2').state.map((e) => e.data)).toContain('original');
    expect(c.node('n2').state.map((e) => e.data)).not.toContain('tampered');
  });

  it('an entry corrupted on disk is detected when read back', () => {
    const s = new MemoryStorage({ voters: ['n1'] as NodeId[], learners: [] });
    const good = makeEntry(2 as LogIndex, 1 as Term, 'normal', encodeText('ok'));
    s.append([{ ...good, data: encodeText('ko') }]);
    s.setHardState({ term: 1 as Term, vote: 'n1' as NodeId, commit: 2 as LogIndex });
    const c = new Cluster();
    c.addNodes(1);
    const n1 = c.node('n1');
    (n1 as { storage: MemoryStorage }).storage = s;
    expect(() => n1.restart() ?? n1.raw.ready()).toThrow(CorruptEntryError);
  });
});

describe('RaftBugs.voteWithoutPersist (mutation switch)', () => {
  function doubleVote(): number {
    const c = new Cluster({ config: { preVote: false, checkQuorum: false } });
    c.addNodes(3);
    const [n1, n2, n3] = ['n1', 'n2', 'n3'] as NodeId[];
    c.partition([n1!, n2!], [n3!]);
    c.dropWhere((m) => m.type === 'append'); // keep n2's log as short as n3's
    c.node(n1!).raw.campaign(); // term 1: n2 votes for n1
    c.stabilize();
    expect(role(c, n1!)).toBe('leader');
    c.crash(n2!);
    c.restart(n2!); // what n2 persisted is all it remembers
    c.partition([n2!, n3!], [n1!]);
    c.node(n3!).raw.campaign(); // n3 also campaigns in term 1
    c.stabilize();
    return c.leadersByTerm.get(1)?.size ?? 0;
  }

  it('off: a restarted voter remembers its vote, one leader in the term', () => {
    expect(doubleVote()).toBe(1);
  });

  it('on: the vote is lost in a crash and the term gets two leaders', () => {
    RaftBugs.voteWithoutPersist = true;
    expect(doubleVote()).toBe(2);
  });
});

describe('basicStatus', () => {
  it('tells the role, term and last index status() tells, before and after an election and a proposal', () => {
    const c = new Cluster({ config: {} });
    const ids = c.addNodes(3);
    const same = (): void => {
      for (const id of ids) {
        const s = c.node(id).raw.status();
        expect(c.node(id).raw.basicStatus()).toEqual({ role: s.role, term: s.term, lastIndex: s.lastIndex });
      }
    };
    same();
    c.node(ids[0]!).raw.campaign();
    c.stabilize();
    same();
    expect(c.node(ids[0]!).raw.basicStatus().role).toBe('leader');
    expect(c.node(ids[0]!).raw.propose(encodeText('x')).ok).toBe(true);
    c.stabilize();
    same();
  });
});
