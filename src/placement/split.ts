/**
 * Splits: a group is cut in two at the middle of its slot range (the next hash bit, so each half gets about half
 * the jobs) when its rows pass splitSizeBytes, or when it fires above splitFiresPerS for splitLoadSustainMs on end
 * (TiKV's load split ignores bursts under about 10 s: a cron spike at :00 is no reason to split), or, with
 * groupsPerNodeMin set, while the cluster has fewer groups than that per placeable node (largest range first).
 * The new group is born with the parent's replicas and leader, so a split moves no data between nodes; balance
 * spreads the halves afterwards. No merges in v1, so a split can never be undone and re-done (no thrash).
 */
import type { PlanContext } from './context.js';
import { isUp } from './liveness.js';
import { splitPoint } from './slots.js';
import type { DriverMemory, GroupId, GroupInfo } from './types.js';

export function planSplits(ctx: PlanContext, memory: DriverMemory): DriverMemory {
  const { config, nowMs } = ctx;
  const since = new Map<GroupId, number>();
  for (const g of ctx.model.groups) {
    if (g.firesPerS > config.splitFiresPerS) since.set(g.id, memory.loadHighSinceMs.get(g.id) ?? nowMs);
  }
  const wanted = ctx.model.groups.filter(
    (g) => g.sizeBytes > config.splitSizeBytes || nowMs - (since.get(g.id) ?? Infinity) >= config.splitLoadSustainMs,
  );
  const placeable = ctx.placeable().length;
  const byCount = ctx.model.groups.length + ctx.splitsInFlight < config.groupsPerNodeMin * placeable;
  if (byCount) {
    const widest = [...ctx.model.groups].sort((a, b) => width(b) - width(a) || b.sizeBytes - a.sizeBytes || a.id - b.id);
    wanted.push(...widest.filter((g) => !wanted.includes(g)));
  }
  let groups = ctx.model.groups.length + ctx.splitsInFlight;
  let nextId = nextGroupId(ctx);
  for (const g of wanted) {
    if (ctx.splitsInFlight >= config.splitsInFlightMax || ctx.budgetLeft <= 0) break;
    if (byCount && groups >= config.groupsPerNodeMin * placeable && !overThreshold(ctx, g, since)) continue;
    if (((groups + 1) * ctx.model.replicationFactor) / Math.max(1, placeable) > config.replicasPerNodeMax) break;
    const at = splitPoint(g.slots);
    if (at === null || !splittable(ctx, g)) continue;
    ctx.plan(g, 'split', [{ kind: 'split', atSlot: at, newGroup: nextId as GroupId }]);
    since.delete(g.id);
    nextId++;
    groups++;
  }
  return { loadHighSinceMs: since };
}

function width(g: GroupInfo): number {
  return g.slots.hi - g.slots.lo;
}

function overThreshold(ctx: PlanContext, g: GroupInfo, since: ReadonlyMap<GroupId, number>): boolean {
  return g.sizeBytes > ctx.config.splitSizeBytes || ctx.nowMs - (since.get(g.id) ?? Infinity) >= ctx.config.splitLoadSustainMs;
}

function splittable(ctx: PlanContext, g: GroupInfo): boolean {
  if (ctx.busy.has(g.id) || g.leader === null || !isUp(ctx.liveness(g.leader))) return false;
  if (g.replicas.some((r) => r.role === 'learner')) return false;
  return ctx.nowMs - (ctx.lastReplicaChangeMs.get(g.id) ?? -Infinity) >= ctx.config.groupCooldownMs;
}

/** One above every group id in use, in flight splits' new groups included. */
function nextGroupId(ctx: PlanContext): number {
  let max = -1;
  for (const g of ctx.model.groups) max = Math.max(max, g.id);
  for (const f of ctx.model.inFlight) for (const s of f.op.steps) if (s.kind === 'split') max = Math.max(max, s.newGroup);
  for (const op of ctx.planned) for (const s of op.steps) if (s.kind === 'split') max = Math.max(max, s.newGroup);
  return max + 1;
}
