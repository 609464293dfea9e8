/**
 * The placement simulator's cluster: modelled nodes and groups on a virtual clock, driven by the real driver
 * (src/placement plan()) and executing its operators the way group leaders will: one step at a time, each checked
 * again right before it runs (stepRefusal, the hot-instant veto), with durations modelled (a learner's snapshot
 * takes size / rate), timeouts (stepTimeoutMs) and failures (a node that dies mid-step). Elections are modelled
 * (a leader on a dead node is replaced by a live voter after electionMs while a quorum is up). Everything the
 * driver did is recorded independently of its own history, to check it: reversed moves, steps refused, transfers
 * across hot instants.
 */
import { assert } from '../../../src/core/assert.js';
import type { NodeId } from '../../../src/core/ids.js';
import { Prng } from '../../../src/core/prng.js';
import type { ChangeRecord, ClusterModel, DriverMemory, GroupId, GroupInfo, NodeInfo, Operator, PlacementConfig, Step } from '../../../src/placement/index.js';
import { applyStep, emptyMemory, leadershipFrozen, livenessOf, plan, quorum, stepRefusal, stepTimeoutMs, votersOf } from '../../../src/placement/index.js';

export interface StepDurations {
  /** A conf change (learner added, promotion, removal) or a split applying. */
  readonly confChangeMs: number;
  /** A planned transfer: drain, then the election of the target. */
  readonly transferMs: number;
  /** A learner's catch-up after its snapshot. */
  readonly catchUpMs: number;
  /** The actual snapshot rate (the driver's timeouts assume config.snapshotBytesPerS). */
  readonly snapshotBytesPerS: number;
  /** A group whose leader died elects another after this long (a quorum up). */
  readonly electionMs: number;
}

export const realisticDurations: StepDurations = {
  confChangeMs: 50,
  transferMs: 150,
  catchUpMs: 200,
  snapshotBytesPerS: 32 * 1024 * 1024,
  electionMs: 1_000,
};

/** A recurring hot instant of a group (a cron burst): the forecast sees it leadMs ahead and it lasts afterMs. */
export interface HotSchedule {
  readonly periodMs: number;
  readonly offsetMs: number;
  readonly leadMs: number;
  readonly afterMs: number;
}

export interface SimOptions {
  readonly seed: number;
  readonly config: PlacementConfig;
  readonly durations: StepDurations;
  readonly tickMs: number;
  readonly driverIntervalMs: number;
  readonly hot: HotSchedule | null;
}

interface Running {
  readonly op: Operator;
  done: number;
  /** When the current step started (null: waiting to start) and when it ends. */
  startMs: number | null;
  endMs: number;
  deadlineMs: number;
}

interface SimNode {
  info: NodeInfo;
  alive: boolean;
}

export interface SimCounters {
  planned: Record<string, number>;
  finished: number;
  failed: number;
  timedOut: number;
  refused: number;
  stepsRun: number;
  replicaAdds: number;
  replicaRemoves: number;
  leaderTransfers: number;
  elections: number;
  splits: number;
  transfersAcrossHotInstants: number;
  snapshotBytes: number;
}

export class SimCluster {
  nowMs = 0;
  readonly nodes = new Map<NodeId, SimNode>();
  readonly groups = new Map<GroupId, GroupInfo>();
  readonly running: Running[] = [];
  history: ChangeRecord[] = [];
  memory: DriverMemory = emptyMemory;
  readonly counters: SimCounters = {
    planned: {},
    finished: 0,
    failed: 0,
    timedOut: 0,
    refused: 0,
    stepsRun: 0,
    replicaAdds: 0,
    replicaRemoves: 0,
    leaderTransfers: 0,
    elections: 0,
    splits: 0,
    transfersAcrossHotInstants: 0,
    snapshotBytes: 0,
  };
  /** Every replica change the executor made, by group:node, for the reversal check (kept apart from the driver's history). */
  readonly changes = new Map<string, { addedMs: number[]; removedMs: number[]; repairRemovals: number }>();
  readonly reversals: { group: GroupId; node: NodeId; firstMs: number; secondMs: number; kind: string }[] = [];
  private readonly leaderlessSince = new Map<GroupId, number>();
  private readonly rand: Prng;
  private readonly driverRand: Prng;
  private nextDriverMs = 0;
  planMsTotal = 0;
  plans = 0;

  constructor(
    readonly opts: SimOptions,
    private readonly replicationFactor = opts.config.replicationFactorDefault,
    private readonly clockMs: () => number = () => 0,
    private readonly onPlan: ((model: ClusterModel, ops: readonly Operator[]) => void) | null = null,
  ) {
    const root = new Prng(opts.seed);
    this.rand = root.fork();
    this.driverRand = root.fork();
  }

  addNode(id: string, weight = 1): NodeId {
    const nid = id as NodeId;
    assert(!this.nodes.has(nid), `node ${id} exists`);
    this.nodes.set(nid, { info: { id: nid, admin: 'active', lastHeartbeatMs: this.nowMs, weight }, alive: true });
    return nid;
  }

  addGroup(g: GroupInfo): void {
    assert(!this.groups.has(g.id), `group ${g.id} exists`);
    this.groups.set(g.id, g);
  }

  kill(id: NodeId): void {
    const n = this.node(id);
    n.alive = false;
    n.info = { ...n.info, lastHeartbeatMs: this.nowMs };
  }

  setAdmin(id: NodeId, admin: NodeInfo['admin']): void {
    const n = this.node(id);
    n.info = { ...n.info, admin };
  }

  private node(id: NodeId): SimNode {
    const n = this.nodes.get(id);
    assert(n !== undefined, `no node ${id}`);
    return n;
  }

  model(): ClusterModel {
    return {
      // An alive node heartbeats every livenessHeartbeatMs; the model sees its latest (a dead one's stays put).
      nodes: [...this.nodes.values()].map((n) => (n.alive ? { ...n.info, lastHeartbeatMs: this.nowMs } : n.info)),
      groups: [...this.groups.values()].map((g) => ({ ...g, busyUntilMs: this.busyUntil() })),
      replicationFactor: this.replicationFactor,
      inFlight: this.running.map((r) => ({ op: r.op, done: r.done })),
      history: this.history,
    };
  }

  /** The forecast: a hot instant within leadMs makes every group busy until it is over (the sim's groups share it). */
  private busyUntil(): number {
    const h = this.opts.hot;
    if (h === null) return 0;
    const next = this.nextHotMs(this.nowMs - h.afterMs);
    return next - this.nowMs <= h.leadMs ? next + h.afterMs : 0;
  }

  private nextHotMs(fromMs: number): number {
    const h = this.opts.hot!;
    return Math.ceil((fromMs - h.offsetMs) / h.periodMs) * h.periodMs + h.offsetMs;
  }

  runUntil(untilMs: number, onTick?: (c: SimCluster) => boolean | void): void {
    while (this.nowMs < untilMs) {
      this.nowMs += this.opts.tickMs;
      this.tick();
      if (onTick?.(this) === true) return;
    }
  }

  private tick(): void {
    this.elect();
    this.advance();
    this.retireDecommissioned();
    if (this.nowMs >= this.nextDriverMs) {
      this.nextDriverMs = this.nowMs + this.opts.driverIntervalMs;
      this.runDriver();
    }
  }

  private liveness = (n: NodeId) => {
    const node = this.nodes.get(n);
    if (node === undefined) return 'dead';
    return livenessOf(node.alive ? { ...node.info, lastHeartbeatMs: this.nowMs } : node.info, this.nowMs, this.opts.config);
  };

  private runDriver(): void {
    const cutoff = this.nowMs - this.opts.config.reversalWindowMs;
    if (this.history.length > 0 && this.history[0]!.atMs < cutoff) this.history = this.history.filter((c) => c.atMs >= cutoff);
    const t0 = this.clockMs();
    const model = this.model();
    const p = plan(model, this.memory, this.nowMs, this.opts.config, this.driverRand);
    this.planMsTotal += this.clockMs() - t0;
    this.onPlan?.(model, p.operators);
    this.plans++;
    this.memory = p.memory;
    for (const op of p.operators) {
      this.counters.planned[op.reason] = (this.counters.planned[op.reason] ?? 0) + 1;
      const r: Running = { op, done: 0, startMs: null, endMs: 0, deadlineMs: 0 };
      this.running.push(r);
      this.start(r);
    }
  }

  private stepDurationMs(step: Step, g: GroupInfo): number {
    const d = this.opts.durations;
    switch (step.kind) {
      case 'addLearner':
        return d.confChangeMs + (g.sizeBytes / d.snapshotBytesPerS) * 1000 + d.catchUpMs;
      case 'transferLeader':
        return d.transferMs;
      default:
        return d.confChangeMs;
    }
  }

  /** Starts the operator's next step, or leaves it waiting (no live leader, a hot instant ahead), or fails it. */
  private start(r: Running): void {
    const g = this.groups.get(r.op.group);
    if (g === undefined) return this.fail(r, 'refused');
    const step = r.op.steps[r.done]!;
    if (r.startMs === null && r.deadlineMs === 0) r.deadlineMs = this.nowMs + stepTimeoutMs(step, g, this.opts.config);
    if (r.done === 0 && g.epoch.confVer !== r.op.confVer) return this.fail(r, 'refused');
    const leader = g.leader === null ? undefined : this.nodes.get(g.leader);
    if (leader === undefined || !leader.alive) return;
    if (step.kind === 'transferLeader' && leadershipFrozen({ ...g, busyUntilMs: this.busyUntil() }, this.nowMs)) return;
    if (stepRefusal(g, step, this.liveness) !== null) return this.fail(r, 'refused');
    r.startMs = this.nowMs;
    r.endMs = this.nowMs + this.stepDurationMs(step, g);
  }

  private fail(r: Running, why: 'refused' | 'timedOut' | 'failed'): void {
    this.running.splice(this.running.indexOf(r), 1);
    this.counters.failed++;
    if (why === 'refused') this.counters.refused++;
    if (why === 'timedOut') this.counters.timedOut++;
  }

  private advance(): void {
    for (const r of [...this.running]) {
      if (this.nowMs > r.deadlineMs) {
        this.fail(r, 'timedOut');
        continue;
      }
      if (r.startMs === null) {
        this.start(r);
        continue;
      }
      if (this.nowMs >= r.endMs) this.finishStep(r);
    }
  }

  /** The step's work is done: it takes effect if every node it needs is still alive. */
  private finishStep(r: Running): void {
    const g = this.groups.get(r.op.group)!;
    const step = r.op.steps[r.done]!;
    const needs = [g.leader, step.kind === 'addLearner' || step.kind === 'promote' ? step.node : null, step.kind === 'transferLeader' ? step.to : null];
    if (needs.some((n) => n !== null && this.nodes.get(n)?.alive !== true)) return this.fail(r, 'failed');
    const refusal = stepRefusal(g, step, this.liveness);
    if (refusal !== null) return this.fail(r, 'refused');
    const { group, born } = applyStep(g, step);
    const bad = checkGroup(group);
    assert(bad === null, `after ${step.kind} of operator ${r.op.id}: ${bad}`);
    this.groups.set(group.id, group);
    if (born !== null) this.groups.set(born.id, born);
    this.record(r.op, g, step);
    this.counters.stepsRun++;
    r.done++;
    r.startMs = null;
    r.deadlineMs = 0;
    if (r.done === r.op.steps.length) {
      this.running.splice(this.running.indexOf(r), 1);
      this.counters.finished++;
      return;
    }
    this.start(r);
  }

  private record(op: Operator, g: GroupInfo, step: Step): void {
    const repair = op.reason === 'repair' || op.reason === 'decommission' || op.reason === 'drain';
    const at = this.nowMs;
    const add = (node: NodeId, kind: ChangeRecord['kind']): void => {
      this.history.push({ group: g.id, node, kind, atMs: at, repair });
    };
    if (step.kind === 'addLearner') {
      add(step.node, 'added');
      this.counters.replicaAdds++;
      this.counters.snapshotBytes += g.sizeBytes;
      this.checkReversal(g.id, step.node, 'added', repair);
    } else if (step.kind === 'remove') {
      add(step.node, 'removed');
      this.counters.replicaRemoves++;
      this.checkReversal(g.id, step.node, 'removed', repair);
    } else if (step.kind === 'transferLeader') {
      add(g.leader!, 'leaderOut');
      add(step.to, 'leaderIn');
      this.counters.leaderTransfers++;
      if (this.opts.hot !== null && this.crossesHotInstant(at - this.opts.durations.transferMs, at)) this.counters.transfersAcrossHotInstants++;
    } else if (step.kind === 'split') {
      this.counters.splits++;
    }
  }

  /** A transfer ran over [fromMs, toMs]: did a hot instant (or the afterMs it lasts) fall inside? */
  private crossesHotInstant(fromMs: number, toMs: number): boolean {
    const h = this.opts.hot!;
    const next = this.nextHotMs(fromMs - h.afterMs);
    return next <= toMs;
  }

  /** A replica added to a node and removed from it again (or the reverse) within the window is a reversed move. */
  private checkReversal(group: GroupId, node: NodeId, kind: 'added' | 'removed', repair: boolean): void {
    const key = `${group}:${node}`;
    let c = this.changes.get(key);
    if (c === undefined) this.changes.set(key, (c = { addedMs: [], removedMs: [], repairRemovals: 0 }));
    const window = this.opts.config.reversalWindowMs;
    const before = kind === 'added' ? c.removedMs : c.addedMs;
    const last = before[before.length - 1];
    if (last !== undefined && this.nowMs - last < window) {
      this.reversals.push({ group, node, firstMs: last, secondMs: this.nowMs, kind: `${kind} after ${kind === 'added' ? 'removed' : 'added'}${repair ? ' (repair)' : ''}` });
    }
    (kind === 'added' ? c.addedMs : c.removedMs).push(this.nowMs);
  }

  private elect(): void {
    // Only a dead node leaves groups leaderless in this model (the executor never removes a leader).
    if (this.leaderlessSince.size === 0 && [...this.nodes.values()].every((n) => n.alive)) return;
    for (const g of this.groups.values()) {
      const leaderAlive = g.leader !== null && this.nodes.get(g.leader)?.alive === true && g.replicas.some((r) => r.node === g.leader);
      if (leaderAlive) {
        this.leaderlessSince.delete(g.id);
        continue;
      }
      const since = this.leaderlessSince.get(g.id) ?? this.nowMs;
      this.leaderlessSince.set(g.id, since);
      if (this.nowMs - since < this.opts.durations.electionMs) continue;
      const alive = votersOf(g).filter((v) => this.nodes.get(v.node)?.alive === true);
      if (alive.length < quorum(votersOf(g).length)) continue;
      this.groups.set(g.id, { ...g, leader: alive[this.rand.int(alive.length)]!.node });
      this.counters.elections++;
      this.leaderlessSince.delete(g.id);
    }
  }

  /** A decommissioning node that holds nothing more leaves the node table (the operator would stop it). */
  private retireDecommissioned(): void {
    for (const [id, n] of this.nodes) {
      if (n.info.admin !== 'decommissioning') continue;
      if ([...this.groups.values()].some((g) => g.replicas.some((r) => r.node === id))) continue;
      this.nodes.delete(id);
    }
  }

  /**
   * The first operator of `ops` that is unsafe on the model it was planned from: one of its steps, run in order on
   * the group as the driver saw it (liveness at plan time), is refused (a quorum planned away, a node twice, a
   * leader removed). Null when all are safe.
   */
  static unsafeOperator(model: ClusterModel, ops: readonly Operator[], config: PlacementConfig): string | null {
    const at = Math.max(...model.nodes.map((n) => n.lastHeartbeatMs));
    const byId = new Map(model.nodes.map((n) => [n.id, n]));
    const live = (id: NodeId) => {
      const n = byId.get(id);
      return n === undefined ? ('dead' as const) : livenessOf(n, at, config);
    };
    for (const op of ops) {
      let g = model.groups.find((x) => x.id === op.group);
      if (g === undefined) return `operator ${op.id} names no group`;
      for (const step of op.steps) {
        const refusal = stepRefusal(g, step, live);
        if (refusal !== null) return `operator ${op.id} (${op.reason}), step ${step.kind}: ${refusal}`;
        g = applyStep(g, step).group;
        const bad = checkGroup(g);
        if (bad !== null) return `operator ${op.id}: ${bad}`;
      }
    }
    return null;
  }

  // --- measures

  /** Nodes that take replicas and leaderships: alive and active. */
  placeableNodes(): NodeId[] {
    return [...this.nodes.values()].filter((n) => n.alive && n.info.admin === 'active').map((n) => n.info.id);
  }

  counts(kind: 'replicas' | 'leaders'): Map<NodeId, number> {
    const m = new Map<NodeId, number>(this.placeableNodes().map((n) => [n, 0]));
    for (const g of this.groups.values()) {
      if (kind === 'leaders') {
        if (g.leader !== null && m.has(g.leader)) m.set(g.leader, m.get(g.leader)! + 1);
      } else for (const r of g.replicas) if (m.has(r.node)) m.set(r.node, m.get(r.node)! + 1);
    }
    return m;
  }

  /** Every group has exactly RF voters, all on alive nodes, and no learner. */
  allAtReplicationFactor(): boolean {
    for (const g of this.groups.values()) {
      if (g.replicas.length !== this.replicationFactor) return false;
      if (!g.replicas.every((r) => r.role === 'voter' && this.nodes.get(r.node)?.alive === true)) return false;
    }
    return true;
  }

  /** Invariants of every group at every moment: no node twice, a leader that is a voter, a voter at least. */
  checkInvariants(): string | null {
    for (const g of this.groups.values()) {
      const bad = checkGroup(g);
      if (bad !== null) return bad;
    }
    return null;
  }
}

export function checkGroup(g: GroupInfo): string | null {
  const nodes = g.replicas.map((r) => r.node);
  if (new Set(nodes).size !== nodes.length) return `group ${g.id} has two replicas on one node: ${nodes.join(',')}`;
  if (votersOf(g).length === 0) return `group ${g.id} has no voter`;
  if (g.leader !== null && !votersOf(g).some((v) => v.node === g.leader)) return `group ${g.id} is led by ${g.leader}, no voter of it`;
  return null;
}

export interface Spread {
  readonly nodes: number;
  readonly mean: number;
  readonly min: number;
  readonly max: number;
  /** The largest distance from the mean, in units and as a fraction of the mean. */
  readonly maxDeviation: number;
  readonly maxDeviationFraction: number;
}

export function spread(counts: ReadonlyMap<NodeId, number>): Spread {
  const values = [...counts.values()];
  const mean = values.reduce((s, v) => s + v, 0) / Math.max(1, values.length);
  const min = Math.min(...values);
  const max = Math.max(...values);
  const maxDeviation = Math.max(max - mean, mean - min);
  return { nodes: values.length, mean, min, max, maxDeviation, maxDeviationFraction: mean === 0 ? 0 : maxDeviation / mean };
}
