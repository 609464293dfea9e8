/**
 * The cluster model the placement driver reads: nodes and what they reported, groups and their replica sets, the
 * operators in flight and the recent changes. The meta group (not built yet) holds it; the driver only reads it.
 */
import type { Brand, NodeId } from '../core/ids.js';

export type GroupId = Brand<number, 'GroupId'>;

/** What an operator asked of a node (an admin state), apart from whether it is heard. */
export type NodeAdmin = 'active' | 'draining' | 'decommissioning';

/**
 * live: heard within suspectAfterMs; suspect: not, but within deadAfterMs (no new work goes to it; its leaders are
 * re-elected by Raft, not by the driver); dead: its replicas are re-created elsewhere. draining: keeps its replicas,
 * hands its leaderships away; decommissioning: hands away both.
 */
export type NodeLiveness = 'live' | 'suspect' | 'dead' | 'draining' | 'decommissioning';

export interface NodeInfo {
  readonly id: NodeId;
  readonly admin: NodeAdmin;
  /** The last liveness heartbeat the meta group's leader saw from it (the driver's clock). */
  readonly lastHeartbeatMs: number;
  /** Relative capacity: a node of weight 2 is given twice the replicas and leaderships of one of weight 1. */
  readonly weight: number;
}

export type ReplicaRole = 'voter' | 'learner';

export interface ReplicaInfo {
  readonly node: NodeId;
  readonly role: ReplicaRole;
}

/** A contiguous range of slots [lo, hi): src/placement/slots.ts. */
export interface SlotRange {
  readonly lo: number;
  readonly hi: number;
}

/** TiKV's RegionEpoch: confVer grows with each membership change, slotVer with each split. */
export interface GroupEpoch {
  readonly confVer: number;
  readonly slotVer: number;
}

export interface GroupInfo {
  readonly id: GroupId;
  readonly epoch: GroupEpoch;
  readonly slots: SlotRange;
  readonly replicas: readonly ReplicaInfo[];
  /** The leader its last report named, or null while it has none. */
  readonly leader: NodeId | null;
  /** Bytes of its rows (a snapshot's size). */
  readonly sizeBytes: number;
  /** Callbacks fired per second (a 1-minute EWMA, from the leader's report). */
  readonly firesPerS: number;
  /**
   * From the due forecast: the group has a hot instant before this time, so its leadership must not move until then
   * (a transfer drains the group and holds its firing for an election). 0 when nothing is forecast.
   */
  readonly busyUntilMs: number;
}

/** One finished change, as the operator controller records it; the driver reads those of the last reversal window. */
export interface ChangeRecord {
  readonly group: GroupId;
  readonly node: NodeId;
  readonly kind: 'added' | 'removed' | 'leaderIn' | 'leaderOut';
  readonly atMs: number;
  /** A change made by a repair (a dead or decommissioning node): it does not count as a rebalance. */
  readonly repair: boolean;
}

export type Step =
  | { readonly kind: 'addLearner'; readonly node: NodeId }
  | { readonly kind: 'promote'; readonly node: NodeId }
  | { readonly kind: 'transferLeader'; readonly to: NodeId }
  | { readonly kind: 'remove'; readonly node: NodeId }
  | { readonly kind: 'split'; readonly atSlot: number; readonly newGroup: GroupId };

export type OperatorReason = 'repair' | 'decommission' | 'drain' | 'rebalance' | 'leader' | 'split';

/** A list of steps for one group, run in order by its leader (executed elsewhere); the driver plans, never runs. */
export interface Operator {
  readonly id: string;
  readonly group: GroupId;
  readonly reason: OperatorReason;
  readonly steps: readonly Step[];
  /** The group's confVer the plan was made against: a leader refuses an operator for another epoch. */
  readonly confVer: number;
  readonly createdMs: number;
}

/** An operator being executed: `done` steps have finished. */
export interface InFlight {
  readonly op: Operator;
  readonly done: number;
}

export interface ClusterModel {
  readonly nodes: readonly NodeInfo[];
  readonly groups: readonly GroupInfo[];
  readonly replicationFactor: number;
  readonly inFlight: readonly InFlight[];
  /** Changes of the last reversal window (older ones may be dropped by the caller). */
  readonly history: readonly ChangeRecord[];
}

/** What the driver carries from one plan to the next (pure: returned, never mutated). */
export interface DriverMemory {
  /** Groups above the split rate, since when (a split needs it sustained). */
  readonly loadHighSinceMs: ReadonlyMap<GroupId, number>;
}

export const emptyMemory: DriverMemory = { loadHighSinceMs: new Map() };
