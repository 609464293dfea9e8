/**
 * Repair, the first rule (CockroachDB's replicate queue order: repair, then down-replicate, then rebalance): a
 * replica on a dead or decommissioning node is re-created elsewhere first (learner, catch up, promote) and removed
 * only then (cockroachdb#28875); a group with too few or too many voters, or a learner no operator owns, is put
 * right; leaderships leave draining and decommissioning nodes. A group without a quorum of up voters cannot commit
 * a change, and a group without an up leader is Raft's to re-elect first: the driver leaves both alone.
 */
import type { NodeId } from '../core/ids.js';
import type { PlanContext } from './context.js';
import { isUp } from './liveness.js';
import { hasQuorum, quorum, upVoters, votersOf } from './operator.js';
import { leaderTarget, replicaScore, replicaTarget } from './targets.js';
import type { GroupInfo, OperatorReason, ReplicaInfo, Step } from './types.js';

/** Why a replica must go: its node is dead, or being decommissioned. */
function leaving(ctx: PlanContext, r: ReplicaInfo): OperatorReason | null {
  const l = ctx.liveness(r.node);
  if (l === 'dead') return 'repair';
  if (l === 'decommissioning') return 'decommission';
  return null;
}

/**
 * Plans the repairs this round can afford, most urgent groups first (fewest up voters above quorum). Returns true
 * while repair work remains (planned, in flight, or waiting for a throttle): balance waits for it.
 */
export function planRepairs(ctx: PlanContext): boolean {
  let pending = ctx.model.inFlight.some((f) => f.op.reason === 'repair' || f.op.reason === 'decommission');
  const urgency = (g: GroupInfo): number => upVoters(g, (n) => ctx.liveness(n)) - quorum(votersOf(g).length);
  const needy = ctx.model.groups.filter((g) => !ctx.busy.has(g.id) && needsRepair(ctx, g));
  needy.sort((a, b) => urgency(a) - urgency(b) || a.id - b.id);
  for (const g of needy) {
    if (ctx.budgetLeft <= 0) return true;
    const result = repairGroup(ctx, g);
    if (result !== 'none') pending = true;
  }
  return pending;
}

function needsRepair(ctx: PlanContext, g: GroupInfo): boolean {
  const rf = ctx.model.replicationFactor;
  const voters = votersOf(g);
  if (voters.length !== rf || voters.length !== g.replicas.length) return true;
  if (g.replicas.some((r) => leaving(ctx, r) !== null)) return true;
  const ll = g.leader === null ? 'dead' : ctx.liveness(g.leader);
  return ll === 'draining' || ll === 'decommissioning';
}

type RepairResult = 'planned' | 'blocked' | 'none';

function repairGroup(ctx: PlanContext, g: GroupInfo): RepairResult {
  const live = (n: NodeId) => ctx.liveness(n);
  if (!hasQuorum(g, live)) return 'none';
  if (g.leader === null || !isUp(live(g.leader))) return 'none';
  const stray = g.replicas.find((r) => r.role === 'learner');
  if (stray !== undefined) return plan(ctx, g, 'repair', [{ kind: 'remove', node: stray.node }]);
  const voters = votersOf(g);
  const gone = voters.find((r) => leaving(ctx, r) !== null);
  if (gone !== undefined) return replace(ctx, g, gone, leaving(ctx, gone)!);
  const rf = ctx.model.replicationFactor;
  if (voters.length < rf) return addVoter(ctx, g);
  if (voters.length > rf) return removeVoter(ctx, g);
  return drainLeader(ctx, g);
}

function plan(ctx: PlanContext, g: GroupInfo, reason: OperatorReason, steps: Step[]): RepairResult {
  ctx.plan(g, reason, steps);
  return 'planned';
}

/** Steps that move the leadership off `node` first when it leads, or null when that must wait (veto, throttle). */
function leaderOff(ctx: PlanContext, g: GroupInfo, node: NodeId, newcomer: NodeId | null): Step[] | null {
  if (g.leader !== node) return [];
  if (ctx.leaderMoveVetoed(g) || !ctx.mayHandLeadershipAway(node)) return null;
  const to = leaderTarget(ctx, g, node, newcomer);
  return to === null ? null : [{ kind: 'transferLeader', to }];
}

function replace(ctx: PlanContext, g: GroupInfo, old: ReplicaInfo, reason: OperatorReason): RepairResult {
  const rf = ctx.model.replicationFactor;
  if (votersOf(g).length > rf) {
    const off = leaderOff(ctx, g, old.node, null);
    return off === null ? 'blocked' : plan(ctx, g, reason, [...off, { kind: 'remove', node: old.node }]);
  }
  if (!ctx.maySendSnapshot(g.leader)) return 'blocked';
  const target = replicaTarget(ctx, g, () => true, true);
  if (target === null) return anyHome(ctx, g) ? 'blocked' : 'none';
  const t = target.info.id;
  const off = leaderOff(ctx, g, old.node, t);
  if (off === null) return 'blocked';
  return plan(ctx, g, reason, [{ kind: 'addLearner', node: t }, { kind: 'promote', node: t }, ...off, { kind: 'remove', node: old.node }]);
}

/** Some placeable node could take a replica of `g` once its throttles allow (else the repair is impossible for now). */
function anyHome(ctx: PlanContext, g: GroupInfo): boolean {
  const holds = new Set(g.replicas.map((r) => r.node));
  return ctx.placeable().some((t) => !holds.has(t.info.id));
}

function addVoter(ctx: PlanContext, g: GroupInfo): RepairResult {
  if (!ctx.maySendSnapshot(g.leader)) return 'blocked';
  const target = replicaTarget(ctx, g, () => true, true);
  if (target === null) return anyHome(ctx, g) ? 'blocked' : 'none';
  return plan(ctx, g, 'repair', [{ kind: 'addLearner', node: target.info.id }, { kind: 'promote', node: target.info.id }]);
}

/** Down-replicate: drop the voter on the fullest node (the leader's only after its leadership moved). */
function removeVoter(ctx: PlanContext, g: GroupInfo): RepairResult {
  const voters = votersOf(g).map((v) => ctx.tallyOf(v.node));
  voters.sort((a, b) => replicaScore(b) - replicaScore(a) || (a.info.id < b.info.id ? -1 : 1));
  const victim = voters.find((t) => t.info.id !== g.leader) ?? voters[0]!;
  const off = leaderOff(ctx, g, victim.info.id, null);
  return off === null ? 'blocked' : plan(ctx, g, 'repair', [...off, { kind: 'remove', node: victim.info.id }]);
}

function drainLeader(ctx: PlanContext, g: GroupInfo): RepairResult {
  if (g.leader === null) return 'none';
  // A drain waiting for its veto or throttle is no repair: balance need not wait for it.
  const off = leaderOff(ctx, g, g.leader, null);
  return off === null || off.length === 0 ? 'none' : plan(ctx, g, 'drain', off);
}
