/**
 * The placement scenarios of issue 24, each asserting its targets on the simulated cluster (cluster.ts) and
 * returning its figures for the result file. Sizes are parameters so the tests run smaller versions of the same code.
 */
import type { NodeId } from '../../../src/core/ids.js';
import { Prng } from '../../../src/core/prng.js';
import type { ClusterModel, GroupId, GroupInfo, PlacementConfig } from '../../../src/placement/index.js';
import {
  idleMessagesPerS,
  leaseExpiryMs,
  legacyShardRange,
  perGroupHeartbeatMessagesPerS,
  placementConfig,
  slotSpace,
  supportPeers,
} from '../../../src/placement/index.js';
import type { HotSchedule, SimOptions } from './cluster.js';
import { realisticDurations, SimCluster, spread } from './cluster.js';

export interface Target {
  readonly name: string;
  readonly target: string;
  readonly measured: number | string;
  readonly pass: boolean;
}

export interface ScenarioResult {
  readonly name: string;
  readonly seed: number;
  readonly params: Record<string, unknown>;
  readonly figures: Record<string, unknown>;
  readonly targets: readonly Target[];
  /** Wall-clock time of the run and of the driver's plan() calls in it (ms). */
  readonly wallMs: number;
  readonly planMs: number;
  readonly plans: number;
}

export type Clock = () => number;
const MiB = 1024 * 1024;
const minute = 60_000;

/** The driver runs every 500 ms on small clusters, every 1 s on large ones (PD patrols regions continuously). */
function options(seed: number, config: PlacementConfig, hot: HotSchedule | null = null, driverIntervalMs = 500): SimOptions {
  return { seed, config, durations: realisticDurations, tickMs: 100, driverIntervalMs, hot };
}

function group(id: number, lo: number, hi: number, nodes: readonly NodeId[], leader: NodeId, sizeBytes: number, firesPerS = 0): GroupInfo {
  return {
    id: id as GroupId,
    epoch: { confVer: 1, slotVer: 0 },
    slots: { lo, hi },
    replicas: nodes.map((node) => ({ node, role: 'voter' as const })),
    leader,
    sizeBytes,
    firesPerS,
    busyUntilMs: 0,
  };
}

/** A cluster made by today's code: every node in each of the `shards` groups, group g owning legacy shard g's slots. */
function legacyCluster(sim: SimCluster, nodes: readonly NodeId[], shards: number, sizeBytes: number, leaderOf: (g: number) => NodeId, firesPerS = 0): void {
  const space = slotSpace(shards);
  for (let g = 0; g < shards; g++) {
    const r = legacyShardRange(space, g);
    sim.addGroup(group(g, r.lo, r.hi, nodes, leaderOf(g), sizeBytes, firesPerS));
  }
}

/** `count` groups over `slots` slots, each on the rf nodes with the fewest replicas so far (ties drawn): balanced. */
function balancedGroups(sim: SimCluster, nodes: readonly NodeId[], count: number, slots: number, rand: Prng, size: () => number): void {
  const load = new Map<NodeId, number>(nodes.map((n) => [n, 0]));
  const leads = new Map<NodeId, number>(nodes.map((n) => [n, 0]));
  for (let i = 0; i < count; i++) {
    const order = [...nodes].map((n) => ({ n, k: load.get(n)! + rand.nextFloat() })).sort((a, b) => a.k - b.k);
    const chosen = order.slice(0, 3).map((o) => o.n);
    for (const n of chosen) load.set(n, load.get(n)! + 1);
    const leader = [...chosen].sort((a, b) => leads.get(a)! - leads.get(b)!)[0]!;
    leads.set(leader, leads.get(leader)! + 1);
    sim.addGroup(group(i, Math.floor((i * slots) / count), Math.floor(((i + 1) * slots) / count), chosen, leader, size()));
  }
}

/** `count` groups on 3 nodes drawn at random (a spread of about +-20 % at 30 per node): what balance starts from. */
function randomGroups(sim: SimCluster, nodes: readonly NodeId[], count: number, slots: number, rand: Prng, size: () => number): void {
  for (let i = 0; i < count; i++) {
    const chosen: NodeId[] = [];
    while (chosen.length < 3) {
      const n = nodes[rand.int(nodes.length)]!;
      if (!chosen.includes(n)) chosen.push(n);
    }
    sim.addGroup(group(i, Math.floor((i * slots) / count), Math.floor(((i + 1) * slots) / count), chosen, chosen[rand.int(3)]!, size()));
  }
}

function names(prefix: string, from: number, to: number): string[] {
  const out: string[] = [];
  for (let i = from; i <= to; i++) out.push(`${prefix}${String(i).padStart(3, '0')}`);
  return out;
}

function result(name: string, seed: number, sim: SimCluster | null, clock: Clock, t0: number, params: Record<string, unknown>, figures: Record<string, unknown>, targets: Target[]): ScenarioResult {
  return { name, seed, params, figures, targets, wallMs: Math.round(clock() - t0), planMs: Math.round(sim?.planMsTotal ?? 0), plans: sim?.plans ?? 0 };
}

function simFigures(sim: SimCluster): Record<string, unknown> {
  return {
    replicas: spread(sim.counts('replicas')),
    leaders: spread(sim.counts('leaders')),
    groups: sim.groups.size,
    operators: { ...sim.counters },
    reversals: sim.reversals.length,
    reversalsPlanned: sim.reversals.filter((r) => !r.kind.includes('repair')).length,
    reversalSamples: sim.reversals.slice(0, 5),
  };
}

/**
 * Checks every group's invariants each second of virtual time (the executor checks the group a step changed at
 * once); the first violation throws with the virtual time.
 */
function guarded(sim: SimCluster, untilMs: number, onTick?: (c: SimCluster) => boolean | void): void {
  sim.runUntil(untilMs, (c) => {
    const bad = c.nowMs % 1_000 === 0 ? c.checkInvariants() : null;
    if (bad !== null) throw new Error(`invariant broken at ${c.nowMs} ms: ${bad}`);
    return onTick?.(c);
  });
}

const leadersBalanced = (sim: SimCluster): boolean => spread(sim.counts('leaders')).maxDeviation <= 1;
const replicasWithinOne = (sim: SimCluster): boolean => spread(sim.counts('replicas')).maxDeviation <= 1;

/** 3 nodes, today's 8 groups, every leadership on one node (issue 24: `{"n3": 8}` after start): balanced within 5 s. */
export function leadersOnOneNode(seed: number, clock: Clock): ScenarioResult {
  const t0 = clock();
  const sim = new SimCluster(options(seed, placementConfig()), 3, clock);
  const nodes = ['n1', 'n2', 'n3'].map((n) => sim.addNode(n));
  legacyCluster(sim, nodes, 8, 64 * MiB, () => nodes[2]!);
  let balancedAtMs: number | null = null;
  guarded(sim, 30_000, (c) => {
    if (balancedAtMs === null && leadersBalanced(c) && c.running.length === 0) balancedAtMs = c.nowMs;
  });
  const ok = balancedAtMs !== null && leadersBalanced(sim);
  return result('leaders-3x8', seed, sim, clock, t0, { nodes: 3, groups: 8 }, { balancedAtMs, ...simFigures(sim) }, [
    { name: 'leaders balanced (within +-1 per node), from all on one node', target: '<= 5000 ms', measured: balancedAtMs ?? 'never', pass: ok && balancedAtMs! <= 5_000 },
    { name: 'replica moves (every node holds every group already)', target: '0', measured: sim.counters.replicaAdds, pass: sim.counters.replicaAdds === 0 },
  ]);
}

/** 3 -> 6 nodes under load (cron bursts every minute, 64 MiB groups): replicas and leaders within +-1 per node. */
export function growThreeToSix(seed: number, clock: Clock): ScenarioResult {
  const t0 = clock();
  const hot: HotSchedule = { periodMs: minute, offsetMs: 20_000, leadMs: 2_000, afterMs: 500 };
  const sim = new SimCluster(options(seed, placementConfig(), hot), 3, clock);
  const old = ['n1', 'n2', 'n3'].map((n) => sim.addNode(n));
  legacyCluster(sim, old, 8, 64 * MiB, (g) => old[g % 3]!, 125);
  guarded(sim, 5_000);
  for (const n of ['n4', 'n5', 'n6']) sim.addNode(n);
  const addedMs = sim.nowMs;
  let balancedAtMs: number | null = null;
  guarded(sim, addedMs + 5 * minute, (c) => {
    if (balancedAtMs === null && replicasWithinOne(c) && leadersBalanced(c) && c.running.length === 0) balancedAtMs = c.nowMs - addedMs;
  });
  const ok = balancedAtMs !== null && replicasWithinOne(sim) && leadersBalanced(sim);
  return result('grow-3-6', seed, sim, clock, t0, { groups: 8, groupBytes: 64 * MiB, firesPerS: 1000, hot }, { balancedAfterMs: balancedAtMs, ...simFigures(sim) }, [
    { name: 'replicas and leaders within +-1 per node after 3 nodes join', target: '<= 60000 ms', measured: balancedAtMs ?? 'never', pass: ok && balancedAtMs! <= 60_000 },
    { name: 'leader transfers across a forecast hot instant', target: '0', measured: sim.counters.transfersAcrossHotInstants, pass: sim.counters.transfersAcrossHotInstants === 0 },
    { name: 'moves reversed within 1 h', target: '0', measured: sim.reversals.length, pass: sim.reversals.length === 0 },
  ]);
}

/** 6 nodes, 8 groups, one node killed: every group back to 3 voters within dead-after + 60 s. */
export function killOneOfSix(seed: number, clock: Clock, deadAfterMs = placementConfig().deadAfterMs): ScenarioResult {
  const t0 = clock();
  const config = placementConfig({ deadAfterMs });
  const sim = new SimCluster(options(seed, config), 3, clock);
  const nodes = ['n1', 'n2', 'n3', 'n4', 'n5', 'n6'].map((n) => sim.addNode(n));
  const space = slotSpace(8);
  for (let g = 0; g < 8; g++) {
    const r = legacyShardRange(space, g);
    sim.addGroup(group(g, r.lo, r.hi, [0, 1, 2].map((k) => nodes[(g + k) % 6]!), nodes[g % 6]!, 64 * MiB, 125));
  }
  guarded(sim, 10_000);
  sim.kill(nodes[0]!);
  const killedMs = sim.nowMs;
  let repairedAfterMs: number | null = null;
  guarded(sim, killedMs + deadAfterMs + 5 * minute, (c) => {
    if (repairedAfterMs === null && c.allAtReplicationFactor()) repairedAfterMs = c.nowMs - killedMs;
  });
  const bound = deadAfterMs + 60_000;
  return result('kill-1-of-6', seed, sim, clock, t0, { nodes: 6, groups: 8, deadAfterMs }, { repairedAfterMs, ...simFigures(sim) }, [
    { name: 'every group back to 3 voters after a node of 6 is killed', target: `<= dead-after + 60 s = ${bound} ms`, measured: repairedAfterMs ?? 'never', pass: repairedAfterMs !== null && repairedAfterMs <= bound },
    { name: 'leaders within +-1 per node at the end', target: 'true', measured: String(leadersBalanced(sim)), pass: leadersBalanced(sim) },
  ]);
}

export interface ScaleParams {
  readonly nodes: number;
  readonly groups: number;
  readonly durationMs: number;
}

/**
 * N nodes x G groups placed at random (about +-20 % per node), then one node killed and one decommissioned:
 * replicas within +-5 % of the mean at the end, no move reversed within 1 h.
 */
export function scale(seed: number, clock: Clock, p: ScaleParams = { nodes: 100, groups: 1000, durationMs: 120 * minute }): ScenarioResult {
  const t0 = clock();
  const rand = new Prng(seed ^ 0x5ca1e);
  const sim = new SimCluster(options(seed, placementConfig(), null, 1_000), 3, clock);
  const nodes = names('n', 1, p.nodes).map((n) => sim.addNode(n));
  randomGroups(sim, nodes, p.groups, slotSpace(1).slots, rand, () => (16 + rand.int(48)) * MiB);
  const start = spread(sim.counts('replicas'));
  let withinAtMs: number | null = null;
  const within = (c: SimCluster): boolean => spread(c.counts('replicas')).maxDeviationFraction <= 0.05;
  guarded(sim, p.durationMs / 4, (c) => {
    if (withinAtMs === null && c.nowMs % 10_000 === 0 && within(c)) withinAtMs = c.nowMs;
  });
  sim.kill(nodes[p.nodes - 1]!);
  guarded(sim, (p.durationMs * 3) / 8);
  sim.setAdmin(nodes[p.nodes - 2]!, 'decommissioning');
  guarded(sim, p.durationMs);
  return growthTargets('scale', seed, sim, clock, t0, { ...p, events: 'random start; kill 1 at 1/4; decommission 1 at 3/8' }, { start, withinAtMs });
}

export interface GrowParams {
  readonly groups: number;
  readonly waves: readonly number[];
  readonly waveEveryMs: number;
  readonly settleMs: number;
}

/** 3 nodes holding every one of G groups, then nodes join in waves up to the last count; settle, then measure. */
export function grow(seed: number, clock: Clock, p: GrowParams = { groups: 1000, waves: [6, 12, 25, 50, 100], waveEveryMs: 10 * minute, settleMs: 150 * minute }): ScenarioResult {
  const t0 = clock();
  const rand = new Prng(seed ^ 0x9a0);
  const sim = new SimCluster(options(seed, placementConfig(), null, 1_000), 3, clock);
  const first = ['n001', 'n002', 'n003'].map((n) => sim.addNode(n));
  for (let i = 0; i < p.groups; i++) {
    const slots = slotSpace(1).slots;
    sim.addGroup(group(i, Math.floor((i * slots) / p.groups), Math.floor(((i + 1) * slots) / p.groups), first, first[i % 3]!, (16 + rand.int(48)) * MiB));
  }
  let count = 3;
  for (const target of p.waves) {
    guarded(sim, sim.nowMs + p.waveEveryMs);
    for (const n of names('n', count + 1, target)) sim.addNode(n);
    count = target;
  }
  const lastWaveMs = sim.nowMs;
  let withinAtMs: number | null = null;
  guarded(sim, lastWaveMs + p.settleMs, (c) => {
    if (withinAtMs === null && c.nowMs % 10_000 === 0 && spread(c.counts('replicas')).maxDeviationFraction <= 0.05) withinAtMs = c.nowMs - lastWaveMs;
  });
  return growthTargets('grow', seed, sim, clock, t0, { ...p, start: '3 nodes, every group on each' }, { withinAfterLastWaveMs: withinAtMs });
}

function growthTargets(name: string, seed: number, sim: SimCluster, clock: Clock, t0: number, params: Record<string, unknown>, extra: Record<string, unknown>): ScenarioResult {
  const r = spread(sim.counts('replicas'));
  const planned = sim.reversals.filter((x) => !x.kind.includes('repair')).length;
  return result(name, seed, sim, clock, t0, params, { ...extra, ...simFigures(sim) }, [
    { name: 'replicas per node at the end: largest distance from the mean', target: '<= 5 % of the mean', measured: `${(r.maxDeviationFraction * 100).toFixed(2)} % (${r.min}..${r.max}, mean ${r.mean.toFixed(2)})`, pass: r.maxDeviationFraction <= 0.05 },
    { name: 'moves reversed within 1 h (planned moves)', target: '0', measured: planned, pass: planned === 0 },
    { name: 'every group at 3 voters on live nodes at the end', target: 'true', measured: String(sim.allAtReplicationFactor()), pass: sim.allAtReplicationFactor() },
  ]);
}

interface IdleCase {
  readonly replicasPerNode: number;
  readonly groups: number;
  readonly scope: PlacementConfig['supportScope'];
  readonly msgsPerNodePerS: { mean: number; max: number };
  readonly formulaPerNodePerS: number;
  readonly perGroupMessagesWhileIdle: number;
  readonly groupsWithValidLease: number;
  readonly todayPerGroupHeartbeatsPerNodePerS: number;
}

/**
 * Idle cost at R replicas per node: N nodes, no proposals, for durationMs of heartbeats. Each node heartbeats its
 * support peers once per interval and answers theirs; a group sends nothing (its leader is fortified by that
 * support), and every group's lease must still be valid at the end.
 */
function idleCase(seed: number, nodesCount: number, replicasPerNode: number, scope: PlacementConfig['supportScope'], durationMs: number): IdleCase {
  const config = placementConfig({ supportScope: scope });
  const rand = new Prng(seed);
  const sim = new SimCluster(options(seed, config), 3);
  const nodes = names('n', 1, nodesCount).map((n) => sim.addNode(n));
  const groups = Math.round((replicasPerNode * nodesCount) / 3);
  balancedGroups(sim, nodes, groups, 1 << 16, rand, () => 0);
  const model: ClusterModel = sim.model();
  const peers = new Map(nodes.map((n) => [n, supportPeers(n, model, config)]));
  const sent = new Map<NodeId, number>(nodes.map((n) => [n, 0]));
  const heard = new Map<string, number>();
  let groupMessages = 0;
  for (let t = 0; t < durationMs; t += config.livenessHeartbeatMs) {
    for (const [from, list] of peers) {
      for (const to of list) {
        sent.set(from, sent.get(from)! + 1); // the heartbeat
        sent.set(to, sent.get(to)! + 1); // its answer, which extends to's support for `from`
        heard.set(`${to}>${from}`, t);
      }
    }
    for (const g of model.groups) groupMessages += idleGroupMessages(g);
  }
  const end = durationMs;
  const supportUntil = (from: NodeId, to: NodeId): number => (heard.get(`${from}>${to}`) ?? -Infinity) + config.livenessSupportMs;
  const valid = model.groups.filter((g) => leaseExpiryMs(g, supportUntil) > end - config.livenessHeartbeatMs).length;
  const perS = [...sent.values()].map((v) => (v * 1000) / durationMs);
  const counts = [...peers.values()].map((l) => l.length);
  return {
    replicasPerNode,
    groups,
    scope,
    msgsPerNodePerS: { mean: perS.reduce((s, v) => s + v, 0) / perS.length, max: Math.max(...perS) },
    formulaPerNodePerS: idleMessagesPerS(counts.reduce((s, v) => s + v, 0) / counts.length, config),
    perGroupMessagesWhileIdle: groupMessages,
    groupsWithValidLease: valid,
    todayPerGroupHeartbeatsPerNodePerS: perGroupHeartbeatMessagesPerS(nodes[0]!, model.groups, 100),
  };
}

/** A group with no proposal and its followers caught up sends nothing: no heartbeat, no tick (fortified leader). */
function idleGroupMessages(g: GroupInfo): number {
  return g.firesPerS > 0 ? 1 : 0;
}

export function idleMessages(seed: number, clock: Clock, nodesCount = 100, durationMs = 10_000): ScenarioResult {
  const t0 = clock();
  const cases: IdleCase[] = [];
  for (const scope of ['members', 'shared'] as const) for (const r of [30, 1000]) cases.push(idleCase(seed, nodesCount, r, scope, durationMs));
  const members = cases.filter((c) => c.scope === 'members');
  const ratio = members[1]!.msgsPerNodePerS.mean / members[0]!.msgsPerNodePerS.mean;
  const shared = cases.filter((c) => c.scope === 'shared');
  const sharedRatio = shared[1]!.msgsPerNodePerS.mean / shared[0]!.msgsPerNodePerS.mean;
  const leasesOk = cases.every((c) => c.groupsWithValidLease === c.groups);
  const quiet = cases.every((c) => c.perGroupMessagesWhileIdle === 0);
  return result('idle-messages', seed, null, clock, t0, { nodes: nodesCount, durationMs }, { cases, sharedScopeRatio: sharedRatio }, [
    { name: 'idle messages per node per second, 1,000 vs 30 replicas per node (support to every member)', target: 'ratio within 0.9..1.1', measured: `${ratio.toFixed(3)} (${members[0]!.msgsPerNodePerS.mean.toFixed(0)}/s vs ${members[1]!.msgsPerNodePerS.mean.toFixed(0)}/s)`, pass: ratio >= 0.9 && ratio <= 1.1 },
    { name: 'messages sent by idle groups', target: '0', measured: cases.reduce((s, c) => s + c.perGroupMessagesWhileIdle, 0), pass: quiet },
    { name: 'groups whose leader lease is valid at the end (on node-pair support alone)', target: 'all', measured: String(leasesOk), pass: leasesOk },
  ]);
}

export const scenarioNames = ['leaders-3x8', 'grow-3-6', 'kill-1-of-6', 'idle-messages', 'scale', 'grow'] as const;
export type ScenarioName = (typeof scenarioNames)[number];

export function runScenario(name: ScenarioName, seed: number, clock: Clock): ScenarioResult {
  switch (name) {
    case 'leaders-3x8':
      return leadersOnOneNode(seed, clock);
    case 'grow-3-6':
      return growThreeToSix(seed, clock);
    case 'kill-1-of-6':
      return killOneOfSix(seed, clock);
    case 'idle-messages':
      return idleMessages(seed, clock);
    case 'scale':
      return scale(seed, clock);
    case 'grow':
      return grow(seed, clock);
  }
}
