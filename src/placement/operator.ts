/**
 * Operators' steps: when a step is safe to run, what it does to a group, how long it may take. The executor (a
 * group's leader, later; the simulator now) checks every step again right before it runs it, because the cluster
 * may have changed since the plan.
 */
import { assert, unreachable } from '../core/assert.js';
import type { NodeId } from '../core/ids.js';
import type { PlacementConfig } from './config.js';
import { isUp } from './liveness.js';
import type { GroupId, GroupInfo, NodeLiveness, ReplicaInfo, Step } from './types.js';

export function quorum(voters: number): number {
  return Math.floor(voters / 2) + 1;
}

export function votersOf(group: GroupInfo): ReplicaInfo[] {
  return group.replicas.filter((r) => r.role === 'voter');
}

export function upVoters(group: GroupInfo, liveness: (n: NodeId) => NodeLiveness): number {
  return votersOf(group).filter((r) => isUp(liveness(r.node))).length;
}

/** The group can commit a conf change: a quorum of its voters is up. */
export function hasQuorum(group: GroupInfo, liveness: (n: NodeId) => NodeLiveness): boolean {
  return upVoters(group, liveness) >= quorum(votersOf(group).length);
}

/**
 * Why `step` must not run on `group` now, or null when it may. The rule behind the remove and promote checks:
 * after the step, a quorum of the (new) voters is up, so no step ever plans a group out of its quorum.
 */
export function stepRefusal(group: GroupInfo, step: Step, liveness: (n: NodeId) => NodeLiveness): string | null {
  const replica = (n: NodeId): ReplicaInfo | undefined => group.replicas.find((r) => r.node === n);
  const voters = votersOf(group).length;
  const up = upVoters(group, liveness);
  switch (step.kind) {
    case 'addLearner':
      if (replica(step.node) !== undefined) return `${step.node} already holds group ${group.id}`;
      if (!isUp(liveness(step.node))) return `${step.node} is not up`;
      return null;
    case 'promote': {
      const r = replica(step.node);
      if (r === undefined || r.role !== 'learner') return `${step.node} is no learner of group ${group.id}`;
      if (!isUp(liveness(step.node))) return `${step.node} is not up`;
      return up + 1 >= quorum(voters + 1) ? null : `group ${group.id} would have no up quorum`;
    }
    case 'transferLeader': {
      const r = replica(step.to);
      if (group.leader === null) return `group ${group.id} has no leader`;
      if (r === undefined || r.role !== 'voter') return `${step.to} is no voter of group ${group.id}`;
      if (step.to === group.leader) return `${step.to} leads group ${group.id} already`;
      return isUp(liveness(step.to)) ? null : `${step.to} is not up`;
    }
    case 'remove': {
      const r = replica(step.node);
      if (r === undefined) return `${step.node} holds no replica of group ${group.id}`;
      if (step.node === group.leader) return `${step.node} leads group ${group.id}: transfer first`;
      if (r.role === 'learner') return null;
      if (voters - 1 < 1) return `group ${group.id} would have no voter`;
      const upAfter = up - (isUp(liveness(step.node)) ? 1 : 0);
      return upAfter >= quorum(voters - 1) ? null : `group ${group.id} would have no up quorum`;
    }
    case 'split':
      if (!(step.atSlot > group.slots.lo && step.atSlot < group.slots.hi)) return `slot ${step.atSlot} not inside group ${group.id}`;
      return group.leader === null ? `group ${group.id} has no leader` : null;
    default:
      return unreachable(step);
  }
}

/** The group after the step ran, and for a split the new group (born with the parent's replicas and leader). */
export function applyStep(group: GroupInfo, step: Step): { group: GroupInfo; born: GroupInfo | null } {
  const conf = { ...group.epoch, confVer: group.epoch.confVer + 1 };
  switch (step.kind) {
    case 'addLearner':
      return { group: { ...group, epoch: conf, replicas: [...group.replicas, { node: step.node, role: 'learner' }] }, born: null };
    case 'promote':
      return {
        group: { ...group, epoch: conf, replicas: group.replicas.map((r) => (r.node === step.node ? { node: r.node, role: 'voter' } : r)) },
        born: null,
      };
    case 'transferLeader':
      return { group: { ...group, leader: step.to }, born: null };
    case 'remove':
      assert(step.node !== group.leader, 'a leader is never removed');
      return { group: { ...group, epoch: conf, replicas: group.replicas.filter((r) => r.node !== step.node) }, born: null };
    case 'split':
      return splitGroup(group, step.atSlot, step.newGroup);
    default:
      return unreachable(step);
  }
}

function splitGroup(group: GroupInfo, atSlot: number, newGroup: GroupId): { group: GroupInfo; born: GroupInfo } {
  const share = (atSlot - group.slots.lo) / (group.slots.hi - group.slots.lo);
  const epoch = { ...group.epoch, slotVer: group.epoch.slotVer + 1 };
  const left: GroupInfo = {
    ...group,
    epoch,
    slots: { lo: group.slots.lo, hi: atSlot },
    sizeBytes: group.sizeBytes * share,
    firesPerS: group.firesPerS * share,
  };
  const born: GroupInfo = {
    ...group,
    id: newGroup,
    epoch: { confVer: 0, slotVer: 0 },
    slots: { lo: atSlot, hi: group.slots.hi },
    sizeBytes: group.sizeBytes * (1 - share),
    firesPerS: group.firesPerS * (1 - share),
  };
  return { group: left, born };
}

/**
 * The veto hook: the due forecast holds a hot instant for this group before busyUntilMs, so its leadership must not
 * move now (a transfer drains the group and holds its firing for an election). Checked when planning and again by
 * the executor right before a transfer step starts.
 */
export function leadershipFrozen(group: GroupInfo, nowMs: number): boolean {
  return group.busyUntilMs > nowMs;
}

/** How long a step may take before its operator fails: a learner's by its snapshot's size (PD: by region size). */
export function stepTimeoutMs(step: Step, group: GroupInfo, config: PlacementConfig): number {
  if (step.kind === 'transferLeader') return config.transferTimeoutMs;
  if (step.kind !== 'addLearner') return config.confChangeTimeoutMs;
  const snapshotMs = (group.sizeBytes / config.snapshotBytesPerS) * 1000;
  return config.confChangeTimeoutMs + config.snapshotTimeoutFactor * snapshotMs;
}
