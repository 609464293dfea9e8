/**
 * One plan's view of the cluster: each node's liveness, replica and leader counts with the influence of every
 * operator in flight or planned in this round (PD's OpInfluence: a move counts as done from the moment it is
 * planned, so two plans never both fill the same hole), the throttle tallies and the recent changes per group.
 */
import type { NodeId } from '../core/ids.js';
import type { Rand } from '../core/prng.js';
import type { PlacementConfig } from './config.js';
import { isPlaceable, livenessOf } from './liveness.js';
import { leadershipFrozen } from './operator.js';
import type { ClusterModel, GroupId, GroupInfo, InFlight, NodeInfo, NodeLiveness, Operator, Step } from './types.js';

export interface NodeTally {
  readonly info: NodeInfo;
  readonly liveness: NodeLiveness;
  replicas: number;
  leaders: number;
  /** Replicas added within the last minute, planned ones included. */
  adds: number;
  /** Replicas removed within the last minute, planned ones included. */
  removes: number;
  /** Leaderships handed away within the last second, planned ones included. */
  leadersOut: number;
  /** Snapshots planned or running into / out of this node. */
  snapshotsIn: number;
  snapshotsOut: number;
}

const minuteMs = 60_000;
const secondMs = 1_000;

export class PlanContext {
  readonly nodes = new Map<NodeId, NodeTally>();
  readonly groups: Map<GroupId, GroupInfo>;
  /** Groups with an operator in flight or planned now: one operator per group at a time. */
  readonly busy = new Set<GroupId>();
  readonly planned: Operator[] = [];
  inFlight: number;
  splitsInFlight = 0;
  readonly inFlightMax: number;
  /** The last replica change (or split) of each group, and the last leadership change. */
  readonly lastReplicaChangeMs = new Map<GroupId, number>();
  readonly lastLeaderChangeMs = new Map<GroupId, number>();
  private readonly addedAt = new Map<string, number>();
  private readonly removedAt = new Map<string, number>();
  private nextId = 0;

  constructor(
    readonly model: ClusterModel,
    readonly nowMs: number,
    readonly config: PlacementConfig,
    readonly rand: Rand,
  ) {
    this.groups = new Map(model.groups.map((g) => [g.id, g]));
    for (const n of model.nodes) {
      const t = { info: n, liveness: livenessOf(n, nowMs, config), replicas: 0, leaders: 0, adds: 0, removes: 0, leadersOut: 0 };
      this.nodes.set(n.id, { ...t, snapshotsIn: 0, snapshotsOut: 0 });
    }
    for (const g of model.groups) {
      for (const r of g.replicas) this.tally(r.node).replicas++;
      if (g.leader !== null) this.tally(g.leader).leaders++;
    }
    this.readHistory();
    this.inFlight = model.inFlight.length;
    this.inFlightMax = Math.max(config.operatorsInFlightMin, Math.ceil(model.groups.length * config.operatorsInFlightFraction));
    for (const f of model.inFlight) this.influence(f.op, f.done);
  }

  private tally(node: NodeId): NodeTally {
    let t = this.nodes.get(node);
    if (t === undefined) {
      // A replica on a node the model no longer lists (removed from the node table): treat it as dead.
      const info: NodeInfo = { id: node, admin: 'active', lastHeartbeatMs: -Infinity, weight: 0 };
      t = { info, liveness: 'dead', replicas: 0, leaders: 0, adds: 0, removes: 0, leadersOut: 0, snapshotsIn: 0, snapshotsOut: 0 };
      this.nodes.set(node, t);
    }
    return t;
  }

  private readHistory(): void {
    for (const c of this.model.history) {
      const age = this.nowMs - c.atMs;
      const key = `${c.group}:${c.node}`;
      if (c.kind === 'added' || c.kind === 'removed') {
        const last = this.lastReplicaChangeMs.get(c.group) ?? -Infinity;
        if (!c.repair) this.lastReplicaChangeMs.set(c.group, Math.max(last, c.atMs));
        const map = c.kind === 'added' ? this.addedAt : this.removedAt;
        map.set(key, Math.max(map.get(key) ?? -Infinity, c.atMs));
        if (age < minuteMs) this.tally(c.node)[c.kind === 'added' ? 'adds' : 'removes']++;
      } else {
        this.lastLeaderChangeMs.set(c.group, Math.max(this.lastLeaderChangeMs.get(c.group) ?? -Infinity, c.atMs));
        if (c.kind === 'leaderOut' && age < secondMs) this.tally(c.node).leadersOut++;
      }
    }
  }

  /** Counts the steps of `op` from index `done` on as if they had run. */
  private influence(op: Operator, done: number): void {
    this.busy.add(op.group);
    const g = this.groups.get(op.group);
    let leader = g?.leader ?? null;
    for (const step of op.steps.slice(done)) {
      this.influenceStep(step, leader, g);
      if (step.kind === 'transferLeader') leader = step.to;
    }
    if (op.steps.some((s) => s.kind === 'split')) this.splitsInFlight++;
  }

  private influenceStep(step: Step, leader: NodeId | null, g: GroupInfo | undefined): void {
    switch (step.kind) {
      case 'addLearner':
        this.tally(step.node).replicas++;
        this.tally(step.node).adds++;
        this.tally(step.node).snapshotsIn++;
        if (leader !== null) this.tally(leader).snapshotsOut++;
        return;
      case 'remove':
        this.tally(step.node).replicas--;
        this.tally(step.node).removes++;
        return;
      case 'transferLeader':
        this.tally(step.to).leaders++;
        if (leader !== null) {
          this.tally(leader).leaders--;
          this.tally(leader).leadersOut++;
        }
        return;
      case 'promote':
        return;
      case 'split':
        for (const r of g?.replicas ?? []) this.tally(r.node).replicas++;
        if (leader !== null) this.tally(leader).leaders++;
        return;
    }
  }

  /** Adds an operator to this round's plan, counting its influence at once. */
  plan(group: GroupInfo, reason: Operator['reason'], steps: Step[]): Operator {
    const op: Operator = { id: `${this.nowMs}-${this.nextId++}-g${group.id}`, group: group.id, reason, steps, confVer: group.epoch.confVer, createdMs: this.nowMs };
    this.planned.push(op);
    this.inFlight++;
    this.influence(op, 0);
    return op;
  }

  get budgetLeft(): number {
    return this.inFlightMax - this.inFlight;
  }

  private byNode: Map<NodeId, GroupInfo[]> | null = null;

  /** The groups with a replica on `node` (as the model has them, before this round's plan). */
  groupsOn(node: NodeId): readonly GroupInfo[] {
    if (this.byNode === null) {
      this.byNode = new Map();
      for (const g of this.model.groups) {
        for (const r of g.replicas) {
          const list = this.byNode.get(r.node);
          if (list === undefined) this.byNode.set(r.node, [g]);
          else list.push(g);
        }
      }
    }
    return this.byNode.get(node) ?? [];
  }

  /** Picks one of the two best at random (CockroachDB's allocatorRandomCount = 2), so nodes do not all pile onto one. */
  pickOfTwoBest<T>(candidates: readonly T[], score: (c: T) => number): T | null {
    if (candidates.length === 0) return null;
    const sorted = [...candidates].sort((a, b) => score(a) - score(b));
    const best = sorted[0]!;
    const second = sorted[1];
    // A clearly worse second is not worth the spread: the two must be within one replica (or leader) of each other.
    if (second === undefined || score(second) - score(best) >= 1) return best;
    return this.rand.int(2) === 0 ? best : second;
  }

  tallyOf(node: NodeId): NodeTally {
    return this.tally(node);
  }

  liveness(node: NodeId): NodeLiveness {
    return this.nodes.get(node)?.liveness ?? 'dead';
  }

  /** Nodes that may take new replicas and leaderships, in id order. */
  placeable(): NodeTally[] {
    return [...this.nodes.values()].filter((t) => isPlaceable(t.liveness) && t.info.weight > 0).sort((a, b) => (a.info.id < b.info.id ? -1 : 1));
  }

  addedWithinWindow(group: GroupId, node: NodeId): boolean {
    return this.nowMs - (this.addedAt.get(`${group}:${node}`) ?? -Infinity) < this.config.reversalWindowMs;
  }

  removedWithinWindow(group: GroupId, node: NodeId): boolean {
    return this.nowMs - (this.removedAt.get(`${group}:${node}`) ?? -Infinity) < this.config.reversalWindowMs;
  }

  /** A node may take one more snapshot and one more replica this minute. */
  mayReceive(t: NodeTally): boolean {
    return t.adds < this.config.addsPerNodePerMinuteMax && t.snapshotsIn < this.config.snapshotsPerNodeMax;
  }

  maySendSnapshot(leader: NodeId | null): boolean {
    return leader !== null && this.tally(leader).snapshotsOut < this.config.snapshotsPerNodeMax;
  }

  mayHandLeadershipAway(node: NodeId): boolean {
    return this.tally(node).leadersOut < this.config.leaderTransfersPerNodePerSecondMax;
  }

  /** The forecast holds a hot instant for this group: its leadership stays where it is (the veto hook). */
  leaderMoveVetoed(group: GroupInfo): boolean {
    return leadershipFrozen(group, this.nowMs);
  }
}

export type { InFlight };
