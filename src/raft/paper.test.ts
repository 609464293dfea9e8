/**
 * One test per safety rule of the Raft paper (Figure 3), checked over seeded chaos runs (partitions, crashes,
 * restarts, lost messages, compaction), plus Figure 8 built step by step. Each chaos run also checks that it
 * was not vacuous (several terms, many commits).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Prng } from '../core/prng.js';
import { RaftBugs, resetRaftBugs } from './bugs.js';
import type { NodeId } from './types.js';
import type { TestConfig } from './testing/network.js';
import { Cluster } from './testing/network.js';

afterEach(resetRaftBugs);

interface ChaosResult {
  cluster: Cluster;
  terms: number;
  maxApplied: number;
  leaseTicks: number;
}

type Check = (c: Cluster, tick: number) => void;

/** A seeded run of 5 nodes: every tick maybe re-partitions, crashes, restarts, proposes, compacts. */
function chaos(seed: number, ticks: number, check: Check, config: TestConfig = {}): ChaosResult {
  const rand = new Prng(seed);
  const c = new Cluster({ seed, config });
  const ids = c.addNodes(5);
  let leaseTicks = 0;
  for (let t = 0; t < ticks; t++) {
    const r = rand.nextFloat();
    if (r < 0.03) {
      const shuffled = ids.slice().sort(() => rand.nextFloat() - 0.5);
      const cut = 1 + rand.int(ids.length - 1);
      c.partition(shuffled.slice(0, cut), shuffled.slice(cut));
    } else if (r < 0.06) c.heal();
    else if (r < 0.075) {
      const live = ids.filter((id) => !c.node(id).crashed);
      if (live.length > 3) c.crash(live[rand.int(live.length)]!);
    } else if (r < 0.1) {
      const down = ids.filter((id) => c.node(id).crashed);
      if (down.length > 0) c.restart(down[rand.int(down.length)]!);
    } else if (r < 0.12) {
      const n = c.node(ids[rand.int(ids.length)]!);
      if (!n.crashed && n.appliedIndex > 5) {
        n.snapshotNow();
        n.storage.compact((n.appliedIndex - 3) as never);
      }
    }
    if (rand.nextFloat() < 0.5) c.propose(`v${t}`);
    if (rand.nextFloat() < 0.05) c.dropQueued(() => rand.nextFloat() < 0.5);
    c.tickAll(1);
    check(c, t === ticks - 1 ? 0 : t + 1);
    if ([...c.nodes.values()].some((n) => !n.crashed && n.raw.leaseValid())) leaseTicks++;
  }
  const maxApplied = Math.max(...[...c.nodes.values()].map((n) => n.appliedIndex));
  return { cluster: c, terms: c.leadersByTerm.size, maxApplied, leaseTicks };
}

const seeds = [1, 2, 3, 4, 5, 6];

function logTerm(c: Cluster, id: NodeId, index: number): number | null {
  const s = c.node(id).storage;
  if (index < s.firstIndex() - 1 || index > s.lastIndex()) return null;
  return s.term(index as never);
}

describe('Raft paper, Figure 3 properties', () => {
  it('election safety: at most one leader per term', () => {
    let terms = 0;
    for (const seed of seeds) {
      const r = chaos(seed, 400, () => {});
      for (const [term, leaders] of r.cluster.leadersByTerm) expect(leaders.size, `seed ${seed} term ${term}`).toBe(1);
      terms += r.terms;
    }
    expect(terms, 'elections happened').toBeGreaterThan(seeds.length * 2);
  });

  it('log matching: same index and term means identical logs up to there', () => {
    for (const seed of seeds) {
      const r = chaos(seed, 300, (c, t) => {
        if (t % 10 !== 0) return; // a full comparison every 10 ticks and at the end
        const ids = c.ids();
        for (let a = 0; a < ids.length; a++) {
          for (let b = a + 1; b < ids.length; b++) {
            const sa = c.node(ids[a]!).storage;
            const sb = c.node(ids[b]!).storage;
            const lo = Math.max(sa.firstIndex(), sb.firstIndex());
            const hi = Math.min(sa.lastIndex(), sb.lastIndex());
            let top = hi;
            while (top >= lo && sa.term(top as never) !== sb.term(top as never)) top--;
            if (top < lo) continue;
            const ea = sa.entries(lo as never, (top + 1) as never, Infinity);
            const eb = sb.entries(lo as never, (top + 1) as never, Infinity);
            const differ = ea.findIndex((e, k) => e.crc !== eb[k]!.crc || e.term !== eb[k]!.term);
            expect(differ, `seed ${seed}: ${ids[a]}/${ids[b]} match at ${top} but differ below`).toBe(-1);
          }
        }
      });
      expect(r.maxApplied).toBeGreaterThan(20);
    }
  });

  it('leader completeness: every leader holds every entry committed before it', () => {
    for (const seed of seeds) {
      const committed = new Map<number, number>(); // index -> term, from what any node applied
      chaos(seed, 300, (c) => {
        for (const n of c.nodes.values()) for (const e of n.state) committed.set(e.index, e.term);
        const leader = c.leader();
        if (!leader) return;
        const s = c.node(leader).storage;
        for (const [index, term] of committed) {
          if (index < s.firstIndex()) continue; // inside the leader's snapshot
          expect(logTerm(c, leader, index), `seed ${seed}: leader ${leader} at ${index}`).toBe(term);
        }
      });
      expect(committed.size).toBeGreaterThan(20);
    }
  });

  it('state machine safety: no two nodes apply different entries at one index', () => {
    for (const seed of seeds) {
      const r = chaos(seed, 400, (c, t) => {
        if (t % 5 !== 0) return; // a full comparison every 5 ticks and at the end
        const byIndex = new Map<number, string>();
        for (const n of c.nodes.values()) {
          for (const e of n.state) {
            const key = `${e.term}:${e.data}`;
            const seen = byIndex.get(e.index);
            if (seen === undefined) byIndex.set(e.index, key);
            else expect(key, `seed ${seed}: index ${e.index} on ${n.id}`).toBe(seen);
          }
        }
      });
      expect(r.maxApplied).toBeGreaterThan(20);
    }
  });
});

/**
 * Figure 8 of the paper with 5 nodes (classic Raft: no PreVote/CheckQuorum). Index 3 "xx" of term 1 reaches
 * n1, n2; n5 wins term 2 holding its own index 3; n1 comes back in term 3 and replicates 3/1 to a majority.
 * Counting replicas must not commit 3/1 (it is from an old term): n5 can still win and overwrite it.
 */
function figure8(): { c: Cluster; n1CommitAfterC: number; divergent: boolean } {
  const c = new Cluster({ config: { preVote: false, checkQuorum: false } });
  const [n1, n2, n3, n4, n5] = c.addNodes(5) as [NodeId, NodeId, NodeId, NodeId, NodeId];
  const leadBy = (id: NodeId): void => {
    for (let i = 0; i < 10 && c.node(id).raw.status().role !== 'leader'; i++) {
      c.node(id).raw.campaign();
      c.stabilize();
    }
    expect(c.node(id).raw.status().role).toBe('leader');
  };
  leadBy(n1); // term 1, no-op at index 2 everywhere
  // (a) 3/1 reaches n2 only.
  c.partition([n1, n2], [n3, n4, n5]);
  expect(c.propose('xx', n1).ok).toBe(true);
  c.stabilize();
  c.crash(n1);
  // (b) n5 wins term 2 with n3, n4 and writes its no-op 3/2, then crashes before sending it.
  c.partition([n2], [n3, n4, n5]);
  c.node(n5).raw.campaign();
  for (let i = 0; i < 6 && c.node(n5).raw.status().role !== 'leader'; i++) {
    c.processAll();
    c.deliver();
  }
  expect(c.node(n5).raw.status().role).toBe('leader');
  c.processReady(n5);
  c.crash(n5);
  // (c) n1 returns, wins term 3 with n2, n3, and sends 3/1 to n3 but none of its no-op 4/3.
  c.restart(n1);
  c.partition([n1, n2, n3], [n4]);
  c.tamper = (m) =>
    m.type === 'append' && m.from === n1
      ? { ...m, entries: m.entries.filter((e) => e.index < 4), commit: Math.min(m.commit, 2) as never }
      : m;
  leadBy(n1);
  expect(logTerm(c, n3, 3)).toBe(1);
  const n1CommitAfterC = c.node(n1).raw.status().commit;
  // (d) n1 crashes; n5 returns and wins with n2, n3, n4: its 3/2 overwrites 3/1.
  c.crash(n1);
  c.tamper = null;
  c.restart(n5);
  c.partition([n2, n3, n4, n5]);
  leadBy(n5);
  c.stabilize();
  const at3 = (id: NodeId): string | undefined => {
    const e = c.node(id).state.find((x) => x.index === 3);
    return e ? `${e.term}:${e.data}` : undefined;
  };
  const divergent = at3(n1) !== undefined && at3(n2) !== undefined && at3(n1) !== at3(n2);
  void n4;
  return { c, n1CommitAfterC, divergent };
}

describe('Figure 8: a previous-term entry is not committed by counting replicas', () => {
  it('keeps 3/1 uncommitted, so n5 overwriting it is safe', () => {
    const { c, n1CommitAfterC, divergent } = figure8();
    expect(n1CommitAfterC).toBe(2);
    expect(divergent).toBe(false);
    expect(c.node('n2').state.find((e) => e.index === 3)?.term).toBe(2);
  });

  it('with RaftBugs.commitPreviousTermByCount the state machines diverge', () => {
    RaftBugs.commitPreviousTermByCount = true;
    const { n1CommitAfterC, divergent } = figure8();
    expect(n1CommitAfterC).toBe(3);
    expect(divergent).toBe(true);
  });
});
