import { describe, expect, it } from 'vitest';
import type { NodeId } from '../core/ids.js';
import { Prng } from '../core/prng.js';
import { placementConfig } from './config.js';
import { plan } from './driver.js';
import { leaseExpiryMs, livenessOf, supportPeers } from './liveness.js';
import { stepRefusal } from './operator.js';
import type { ChangeRecord, ClusterModel, GroupId, GroupInfo, InFlight, NodeInfo, Operator } from './types.js';
import { emptyMemory } from './types.js';

const now = 10 * 60 * 60 * 1000;
const config = placementConfig();
const n = (i: number): NodeId => `n${i}` as NodeId;

function node(i: number, over: Partial<NodeInfo> = {}): NodeInfo {
  return { id: n(i), admin: 'active', lastHeartbeatMs: now, weight: 1, ...over };
}

function grp(id: number, nodes: number[], leader = nodes[0]!, over: Partial<GroupInfo> = {}): GroupInfo {
  return {
    id: id as GroupId,
    epoch: { confVer: 1, slotVer: 0 },
    slots: { lo: id * 4, hi: id * 4 + 4 },
    replicas: nodes.map((i) => ({ node: n(i), role: 'voter' as const })),
    leader: n(leader),
    sizeBytes: 1024 * 1024,
    firesPerS: 0,
    busyUntilMs: 0,
    ...over,
  };
}

function model(nodes: NodeInfo[], groups: GroupInfo[], history: ChangeRecord[] = [], inFlight: InFlight[] = []): ClusterModel {
  return { nodes, groups, replicationFactor: 3, inFlight, history };
}

function run(m: ClusterModel, c = config, seed = 1): readonly Operator[] {
  return plan(m, emptyMemory, now, c, new Prng(seed)).operators;
}

/** Groups 0..count-1, each on three of `nodes` in turn (every node holds the same number when count x 3 divides). */
function spreadGroups(count: number, nodes: number[], offset = 0): GroupInfo[] {
  const out: GroupInfo[] = [];
  for (let g = 0; g < count; g++) {
    const on = [0, 1, 2].map((k) => nodes[(g + k) % nodes.length]!);
    out.push(grp(g + offset, on, on[g % 3]));
  }
  return out;
}

describe('repair', () => {
  it('re-creates a dead node\'s replica elsewhere first: learner, promote, then remove the dead one', () => {
    const nodes = [node(1), node(2), node(3), node(4, { lastHeartbeatMs: now - config.deadAfterMs })];
    const ops = run(model(nodes, [grp(0, [1, 2, 4])]));
    expect(ops).toHaveLength(1);
    expect(ops[0]!.reason).toBe('repair');
    expect(ops[0]!.steps).toEqual([
      { kind: 'addLearner', node: n(3) },
      { kind: 'promote', node: n(3) },
      { kind: 'remove', node: n(4) },
    ]);
  });

  it('leaves a suspect node\'s replicas in place until dead-after', () => {
    const nodes = [node(1), node(2), node(3), node(4, { lastHeartbeatMs: now - config.deadAfterMs + 1 })];
    expect(run(model(nodes, [grp(0, [1, 2, 4])])).filter((o) => o.reason === 'repair')).toEqual([]);
  });

  it('moves the leadership off a decommissioning node before it removes that replica', () => {
    const nodes = [node(1, { admin: 'decommissioning' }), node(2), node(3), node(4)];
    const ops = run(model(nodes, [grp(0, [1, 2, 3], 1)]));
    const kinds = ops[0]!.steps.map((s) => s.kind);
    expect(ops[0]!.reason).toBe('decommission');
    expect(kinds).toEqual(['addLearner', 'promote', 'transferLeader', 'remove']);
    expect(ops[0]!.steps[3]).toEqual({ kind: 'remove', node: n(1) });
  });

  it('plans nothing for a group without an up quorum (2 of 3 voters dead)', () => {
    const dead = { lastHeartbeatMs: now - config.deadAfterMs };
    const nodes = [node(1), node(2, dead), node(3, dead), node(4), node(5)];
    expect(run(model(nodes, [grp(0, [1, 2, 3])]))).toEqual([]);
  });

  it('hands leaderships away from a draining node but keeps its replicas', () => {
    const nodes = [node(1, { admin: 'draining' }), node(2), node(3)];
    const ops = run(model(nodes, [grp(0, [1, 2, 3], 1), grp(1, [1, 2, 3], 2)]));
    expect(ops).toHaveLength(1);
    expect(ops[0]!.reason).toBe('drain');
    expect(ops[0]!.steps).toEqual([{ kind: 'transferLeader', to: n(3) }]);
  });

  it('removes a learner no operator owns, and adds a voter to an under-replicated group', () => {
    const nodes = [node(1), node(2), node(3), node(4)];
    const stray = grp(0, [1, 2, 3], 1, { replicas: [...grp(0, [1, 2, 3]).replicas, { node: n(4), role: 'learner' }] });
    const two = grp(1, [1, 2], 1);
    const ops = run(model(nodes, [stray, two]));
    expect(ops.find((o) => o.group === 0)!.steps).toEqual([{ kind: 'remove', node: n(4) }]);
    expect(ops.find((o) => o.group === 1)!.steps.map((s) => s.kind)).toEqual(['addLearner', 'promote']);
  });
});

describe('steps', () => {
  it('never removes a leader, and never a voter whose removal leaves no up quorum', () => {
    const g = grp(0, [1, 2, 3], 1);
    const live = (): 'live' => 'live';
    expect(stepRefusal(g, { kind: 'remove', node: n(1) }, live)).toMatch(/transfer first/);
    const oneDown = (x: NodeId) => (x === n(3) ? 'dead' : 'live') as 'dead' | 'live';
    expect(stepRefusal(g, { kind: 'remove', node: n(2) }, oneDown)).toMatch(/no up quorum/);
    expect(stepRefusal(g, { kind: 'remove', node: n(3) }, oneDown)).toBeNull();
    expect(stepRefusal(g, { kind: 'addLearner', node: n(2) }, live)).toMatch(/already holds/);
  });
});

describe('replica balance', () => {
  it('moves nothing inside the band: 31 against a mean of 30 is not overfull, 32 is', () => {
    const nodes = [1, 2, 3, 4].map((i) => node(i));
    // 40 groups over 4 nodes: 30 each; then one group moves a replica from n4 to n1 by hand: 31, 30, 30, 29.
    const groups = spreadGroups(40, [1, 2, 3, 4]);
    const idx = groups.findIndex((g) => g.replicas.some((r) => r.node === n(4)) && !g.replicas.some((r) => r.node === n(1)) && g.leader !== n(4));
    const swap = (g: GroupInfo, from: number, to: number): GroupInfo => ({ ...g, replicas: g.replicas.map((r) => (r.node === n(from) ? { ...r, node: n(to) } : r)) });
    groups[idx] = swap(groups[idx]!, 4, 1);
    expect(run(model(nodes, groups)).filter((o) => o.reason === 'rebalance')).toEqual([]);
    const idx2 = groups.findIndex((g, i) => i !== idx && g.replicas.some((r) => r.node === n(4)) && !g.replicas.some((r) => r.node === n(1)) && g.leader !== n(4));
    groups[idx2] = swap(groups[idx2]!, 4, 1); // 32, 30, 30, 28
    const ops = run(model(nodes, groups)).filter((o) => o.reason === 'rebalance');
    expect(ops.length).toBeGreaterThan(0);
    expect(ops[0]!.steps.at(-1)).toEqual({ kind: 'remove', node: n(1) });
    expect(ops[0]!.steps[0]).toEqual({ kind: 'addLearner', node: n(4) });
  });

  it('fills a new node from the full ones, within the add throttle and the snapshot limit', () => {
    const nodes = [1, 2, 3, 4].map((i) => node(i));
    const ops = run(model(nodes, spreadGroups(30, [1, 2, 3])));
    const adds = ops.filter((o) => o.reason === 'rebalance').map((o) => o.steps[0]);
    expect(adds.length).toBe(config.snapshotsPerNodeMax);
    expect(adds.every((s) => s!.kind === 'addLearner' && s!.node === n(4))).toBe(true);
  });

  it('never removes a replica added to that node within the reversal window, nor re-adds one removed', () => {
    const nodes = [1, 2, 3, 4].map((i) => node(i));
    const groups = spreadGroups(30, [1, 2, 3]);
    // Every replica on n1..n3 came there 10 minutes ago: none may be moved away, so n4 stays empty.
    const history: ChangeRecord[] = groups.flatMap((g) => g.replicas.map((r) => ({ group: g.id, node: r.node, kind: 'added' as const, atMs: now - 600_000, repair: false })));
    expect(run(model(nodes, groups, history)).filter((o) => o.reason === 'rebalance')).toEqual([]);
    // Every group left n4 10 minutes ago: none may come back.
    const left: ChangeRecord[] = groups.map((g) => ({ group: g.id, node: n(4), kind: 'removed', atMs: now - 600_000, repair: false }));
    expect(run(model(nodes, groups, left)).filter((o) => o.reason === 'rebalance')).toEqual([]);
  });

  it('stops at the add throttle: 15 adds in the last minute to the only target', () => {
    const nodes = [1, 2, 3, 4].map((i) => node(i));
    const groups = spreadGroups(30, [1, 2, 3], 100);
    const history: ChangeRecord[] = Array.from({ length: config.addsPerNodePerMinuteMax }, (_, i) => ({ group: (200 + i) as GroupId, node: n(4), kind: 'added', atMs: now - 30_000, repair: false }));
    expect(run(model(nodes, groups, history)).filter((o) => o.reason === 'rebalance')).toEqual([]);
  });

  it('counts operators in flight: a planned add fills the same hole once, and the in-flight budget is a ceiling', () => {
    const nodes = [1, 2, 3, 4].map((i) => node(i));
    const groups = spreadGroups(30, [1, 2, 3]);
    const first = run(model(nodes, groups));
    const inFlight = first.map((op) => ({ op, done: 0 }));
    const second = run(model(nodes, groups, [], inFlight));
    // The two snapshots into n4 are in flight: no third one starts.
    expect(second.filter((o) => o.steps.some((s) => s.kind === 'addLearner' && s.node === n(4)))).toEqual([]);
    const tight = placementConfig({ operatorsInFlightMin: first.length, operatorsInFlightFraction: 0 });
    expect(run(model(nodes, groups, [], inFlight), tight)).toEqual([]);
  });
});

describe('leader balance', () => {
  it('spreads 8 leaderships off one node, at most leaderTransfersPerNodePerSecondMax at once', () => {
    const nodes = [1, 2, 3].map((i) => node(i));
    const groups = Array.from({ length: 8 }, (_, g) => grp(g, [1, 2, 3], 3));
    const ops = run(model(nodes, groups));
    expect(ops).toHaveLength(config.leaderTransfersPerNodePerSecondMax);
    expect(ops.every((o) => o.reason === 'leader' && o.steps[0]!.kind === 'transferLeader')).toBe(true);
    const to = ops.map((o) => (o.steps[0] as { to: NodeId }).to);
    expect(to.filter((x) => x === n(1)).length).toBe(2);
    expect(to.filter((x) => x === n(2)).length).toBe(2);
  });

  it('leaves 3-3-2 alone (within +-1) and never moves a leadership across a forecast hot instant', () => {
    const nodes = [1, 2, 3].map((i) => node(i));
    const even = Array.from({ length: 8 }, (_, g) => grp(g, [1, 2, 3], (g % 3) + 1));
    expect(run(model(nodes, even))).toEqual([]);
    const busy = Array.from({ length: 8 }, (_, g) => grp(g, [1, 2, 3], 3, { busyUntilMs: now + 500 }));
    expect(run(model(nodes, busy))).toEqual([]);
  });

  it('waits out a group\'s leader cooldown', () => {
    const nodes = [1, 2, 3].map((i) => node(i));
    const groups = [grp(0, [1, 2, 3], 3), grp(1, [1, 2, 3], 3)];
    const history: ChangeRecord[] = groups.map((g) => ({ group: g.id, node: n(3), kind: 'leaderIn', atMs: now - 1000, repair: false }));
    expect(run(model(nodes, groups, history))).toEqual([]);
    expect(run(model(nodes, groups))).toHaveLength(1);
  });
});

describe('splits', () => {
  it('splits a group past the size cap at the middle of its range, with a new id', () => {
    const nodes = [1, 2, 3].map((i) => node(i));
    const groups = [grp(0, [1, 2, 3], 1, { sizeBytes: config.splitSizeBytes + 1 }), grp(5, [1, 2, 3], 2)];
    const ops = run(model(nodes, groups)).filter((o) => o.reason === 'split');
    expect(ops).toHaveLength(1);
    expect(ops[0]!.steps).toEqual([{ kind: 'split', atSlot: 2, newGroup: 6 }]);
  });

  it('splits for load only once it is sustained for splitLoadSustainMs', () => {
    // The nodes keep heartbeating: each model is as the driver sees it at its time.
    const at = (t: number) => model([1, 2, 3].map((i) => node(i, { lastHeartbeatMs: t })), [grp(0, [1, 2, 3], 1, { firesPerS: config.splitFiresPerS + 1 })]);
    const m = at(now);
    const first = plan(m, emptyMemory, now, config, new Prng(1));
    expect(first.operators).toEqual([]);
    const t1 = now + config.splitLoadSustainMs - 1;
    const early = plan(at(t1), first.memory, t1, config, new Prng(1));
    expect(early.operators).toEqual([]);
    const t2 = now + config.splitLoadSustainMs;
    const later = plan(at(t2), early.memory, t2, config, new Prng(1));
    expect(later.operators.map((o) => o.reason)).toEqual(['split']);
    // A dip below the threshold starts the wait again.
    const calm = plan({ ...m, groups: [grp(0, [1, 2, 3], 1)] }, early.memory, now + 1, config, new Prng(1));
    expect(calm.memory.loadHighSinceMs.size).toBe(0);
  });
});

describe('liveness', () => {
  it('is live, suspect, then dead as heartbeats stop; admin states show while heard', () => {
    expect(livenessOf(node(1), now, config)).toBe('live');
    expect(livenessOf(node(1, { lastHeartbeatMs: now - config.suspectAfterMs }), now, config)).toBe('suspect');
    expect(livenessOf(node(1, { lastHeartbeatMs: now - config.deadAfterMs }), now, config)).toBe('dead');
    expect(livenessOf(node(1, { admin: 'draining' }), now, config)).toBe('draining');
    expect(livenessOf(node(1, { admin: 'decommissioning', lastHeartbeatMs: now - config.suspectAfterMs }), now, config)).toBe('decommissioning');
  });

  it('gives a leader the lease a quorum of its voters supports, and none without a quorum', () => {
    const g = grp(0, [1, 2, 3], 1);
    const until = new Map([[`${n(2)}>${n(1)}`, 900], [`${n(3)}>${n(1)}`, 700]]);
    const support = (from: NodeId, to: NodeId): number => until.get(`${from}>${to}`) ?? -Infinity;
    expect(leaseExpiryMs(g, support)).toBe(900);
    until.delete(`${n(2)}>${n(1)}`);
    expect(leaseExpiryMs(g, support)).toBe(700);
    until.delete(`${n(3)}>${n(1)}`);
    expect(leaseExpiryMs(g, support)).toBe(-Infinity);
  });

  it('heartbeats every member, or only peers sharing a group', () => {
    const m = model([1, 2, 3, 4, 5].map((i) => node(i)), [grp(0, [1, 2, 3])]);
    expect(supportPeers(n(1), m, config)).toEqual([n(2), n(3), n(4), n(5)]);
    expect(supportPeers(n(1), m, placementConfig({ supportScope: 'shared' }))).toEqual([n(2), n(3)]);
  });
});
