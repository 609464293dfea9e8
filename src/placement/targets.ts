/** Choosing where a replica or a leadership goes: shared by repair and balance. */
import type { NodeId } from '../core/ids.js';
import type { NodeTally, PlanContext } from './context.js';
import { votersOf } from './operator.js';
import type { GroupInfo } from './types.js';

/** Replicas per unit of weight: what balance compares. */
export function replicaScore(t: NodeTally): number {
  return t.replicas / t.info.weight;
}

export function leaderScore(t: NodeTally): number {
  return t.leaders / t.info.weight;
}

/**
 * A placeable node for a new replica of `group`: never one that holds it already (no two replicas on a node),
 * within its add and snapshot throttles, passing `accept`; a node the group left within the reversal window only
 * when `allowReversal` (a repair with no other choice). Fewest replicas per weight first.
 */
export function replicaTarget(
  ctx: PlanContext,
  group: GroupInfo,
  accept: (t: NodeTally) => boolean,
  allowReversal: boolean,
): NodeTally | null {
  const open = ctx.placeable().filter((t) => ctx.mayReceive(t) && accept(t));
  return targetAmong(ctx, group, open.sort((a, b) => replicaScore(a) - replicaScore(b)), allowReversal);
}

/**
 * The pick among `sorted` (open targets, fewest replicas per weight first, computed once for many groups): the two
 * best that do not hold the group and did not lose it within the reversal window, one of them at random.
 */
export function targetAmong(ctx: PlanContext, group: GroupInfo, sorted: readonly NodeTally[], allowReversal: boolean): NodeTally | null {
  const holds = new Set(group.replicas.map((r) => r.node));
  const fresh: NodeTally[] = [];
  let reversal: NodeTally | null = null;
  for (const t of sorted) {
    if (holds.has(t.info.id)) continue;
    if (ctx.removedWithinWindow(group.id, t.info.id)) {
      reversal ??= t;
      continue;
    }
    fresh.push(t);
    if (fresh.length === 2) break;
  }
  if (fresh.length === 0) return allowReversal ? reversal : null;
  return ctx.pickOfTwoBest(fresh, replicaScore);
}

/** The placeable voter (other than `except`) that should lead `group` next: fewest leaders per weight. */
export function leaderTarget(ctx: PlanContext, group: GroupInfo, except: NodeId, extra: NodeId | null = null): NodeId | null {
  const names = votersOf(group).map((v) => v.node);
  if (extra !== null) names.push(extra);
  const open = names
    .filter((n) => n !== except)
    .map((n) => ctx.tallyOf(n))
    .filter((t) => t.liveness === 'live' && t.info.weight > 0);
  if (open.length === 0) return null;
  open.sort((a, b) => leaderScore(a) - leaderScore(b) || (a.info.id < b.info.id ? -1 : 1));
  return open[0]!.info.id;
}
