/**
 * Leader balance: counts, tolerance 1 (PD's and CockroachDB's 5 are for thousands of leaders per node; Punctual
 * has about 10). A leadership moves from A to another voter B of the same group only when A leads at least 2 more
 * than B (per unit of weight): each transfer lowers the sum of squared deviations, so transfers never ping-pong,
 * and at rest no node leads 2 more than a node it shares a group with. Never across a forecast hot instant (the
 * veto), at most leaderTransfersPerNodePerSecondMax per node per second, and a group whose leadership just moved
 * waits leaderCooldownMs.
 */
import type { NodeId } from '../core/ids.js';
import type { NodeTally, PlanContext } from './context.js';
import { isUp } from './liveness.js';
import { votersOf } from './operator.js';
import { leaderScore } from './targets.js';
import type { GroupInfo } from './types.js';

export function balanceLeaders(ctx: PlanContext): void {
  const nodes = ctx.placeable();
  if (nodes.length < 2) return;
  const exhausted = new Set<NodeId>();
  while (ctx.budgetLeft > 0) {
    // At rest no node leads 2 more than the least-leading one: nothing to look at (the common case, so it is cheap).
    const least = Math.min(...nodes.map((t) => (t.leaders + 1) / t.info.weight));
    const sources = nodes.filter((t) => !exhausted.has(t.info.id) && leaderScore(t) - least >= 1 - 1e-9 && ctx.mayHandLeadershipAway(t.info.id));
    if (sources.length === 0) return;
    sources.sort((a, b) => leaderScore(b) - leaderScore(a) || (a.info.id < b.info.id ? -1 : 1));
    const source = sources[0]!;
    if (!transferOne(ctx, source)) exhausted.add(source.info.id);
  }
}

function transferable(ctx: PlanContext, g: GroupInfo, from: NodeId): boolean {
  if (ctx.busy.has(g.id) || g.leader !== from || ctx.leaderMoveVetoed(g)) return false;
  if (g.replicas.some((r) => r.role === 'learner')) return false;
  if (!votersOf(g).every((v) => isUp(ctx.liveness(v.node)))) return false;
  return ctx.nowMs - (ctx.lastLeaderChangeMs.get(g.id) ?? -Infinity) >= ctx.config.leaderCooldownMs;
}

/** The best transfer out of `source`: to the least-leading voter of any of its groups, if 2 or more below it. */
function transferOne(ctx: PlanContext, source: NodeTally): boolean {
  const s = source.info.id;
  let best: { g: GroupInfo; to: NodeTally } | null = null;
  for (const g of ctx.groupsOn(s)) {
    if (!transferable(ctx, g, s)) continue;
    for (const v of votersOf(g)) {
      const t = ctx.tallyOf(v.node);
      if (v.node === s || t.liveness !== 'live' || t.info.weight <= 0) continue;
      if (leaderScore(source) - (t.leaders + 1) / t.info.weight < 1 - 1e-9) continue;
      if (best === null || leaderScore(t) < leaderScore(best.to)) best = { g, to: t };
    }
  }
  if (best === null) return false;
  ctx.plan(best.g, 'leader', [{ kind: 'transferLeader', to: best.to.info.id }]);
  return true;
}
