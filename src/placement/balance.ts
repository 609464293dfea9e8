/**
 * Replica balance (after repair): CockroachDB's hysteresis band. A node is overfull when it holds more than its
 * share (total x its weight / all weights, over placeable nodes) by more than 5 % AND by at least 2 replicas;
 * underfull is the mirror image. A replica moves only from an overfull node, or to an underfull one, and only when
 * the move leaves neither end out of the band on the other side and narrows their gap (source - target >= 2),
 * so every move lowers the sum of squared deviations and the driver cannot oscillate. Followers move before
 * leaders (PD's balance-region order); a leader moves only with a transfer first.
 */
import type { NodeId } from '../core/ids.js';
import type { NodeTally, PlanContext } from './context.js';
import { isUp } from './liveness.js';
import { votersOf } from './operator.js';
import { leaderTarget, replicaScore, targetAmong } from './targets.js';
import type { GroupInfo, Step } from './types.js';

interface Band {
  share(t: NodeTally): number;
  over(t: NodeTally, replicas?: number): boolean;
  under(t: NodeTally, replicas?: number): boolean;
}

export function replicaBand(ctx: PlanContext, nodes: readonly NodeTally[]): Band {
  const weight = nodes.reduce((s, t) => s + t.info.weight, 0);
  const total = nodes.reduce((s, t) => s + t.replicas, 0);
  const share = (t: NodeTally): number => (total * t.info.weight) / weight;
  const { rebalanceThresholdFraction: frac, rebalanceThresholdReplicasMin: min } = ctx.config;
  const beyond = (d: number, s: number): boolean => d > frac * s && d >= min;
  return {
    share,
    over: (t, replicas = t.replicas) => beyond(replicas - share(t), share(t)),
    under: (t, replicas = t.replicas) => beyond(share(t) - replicas, share(t)),
  };
}

export function balanceReplicas(ctx: PlanContext): void {
  const nodes = ctx.placeable();
  if (nodes.length < 2) return;
  const band = replicaBand(ctx, nodes);
  const dev = (t: NodeTally): number => (t.replicas - band.share(t)) / t.info.weight;
  const exhausted = new Set<NodeId>();
  while (ctx.budgetLeft > 0) {
    const anyUnder = nodes.some((t) => band.under(t));
    const sources = nodes
      .filter((t) => !exhausted.has(t.info.id) && t.removes < ctx.config.removesPerNodePerMinuteMax)
      .filter((t) => band.over(t) || (anyUnder && dev(t) > 0))
      .sort((a, b) => dev(b) - dev(a));
    const source = sources[0];
    if (source === undefined) return;
    if (!moveOne(ctx, band, source)) exhausted.add(source.info.id);
  }
}

/** A group that may be moved by balance: healthy, idle, not cooling down. */
function movable(ctx: PlanContext, g: GroupInfo): boolean {
  if (ctx.busy.has(g.id) || g.leader === null) return false;
  const voters = votersOf(g);
  if (voters.length !== ctx.model.replicationFactor || voters.length !== g.replicas.length) return false;
  if (!voters.every((v) => isUp(ctx.liveness(v.node)))) return false;
  return ctx.nowMs - (ctx.lastReplicaChangeMs.get(g.id) ?? -Infinity) >= ctx.config.groupCooldownMs;
}

function moveOne(ctx: PlanContext, band: Band, source: NodeTally): boolean {
  const s = source.info.id;
  const candidates = ctx.groupsOn(s).filter((g) => movable(ctx, g) && !ctx.addedWithinWindow(g.id, s) && ctx.maySendSnapshot(g.leader));
  // Followers first, in an order drawn from the seed so equal candidates do not always favour low group ids.
  const order = shuffle(ctx, candidates).sort((a, b) => Number(a.leader === s) - Number(b.leader === s));
  const sourceOver = band.over(source);
  const accept = (t: NodeTally): boolean =>
    !band.over(t, t.replicas + 1) &&
    !band.under(source, source.replicas - 1) &&
    source.replicas / source.info.weight - t.replicas / t.info.weight >= 2 &&
    (sourceOver || band.under(t));
  const open = ctx
    .placeable()
    .filter((t) => t !== source && ctx.mayReceive(t) && accept(t))
    .sort((a, b) => replicaScore(a) - replicaScore(b));
  if (open.length === 0) return false;
  for (const g of order) {
    const target = targetAmong(ctx, g, open, false);
    if (target === null) continue;
    const t = target.info.id;
    let off: Step[] = [];
    if (g.leader === s) {
      if (ctx.leaderMoveVetoed(g) || !ctx.mayHandLeadershipAway(s)) continue;
      const to = leaderTarget(ctx, g, s, t);
      if (to === null) continue;
      off = [{ kind: 'transferLeader', to }];
    }
    ctx.plan(g, 'rebalance', [{ kind: 'addLearner', node: t }, { kind: 'promote', node: t }, ...off, { kind: 'remove', node: s }]);
    return true;
  }
  return false;
}

function shuffle<T>(ctx: PlanContext, items: readonly T[]): T[] {
  const a = [...items];
  for (let i = a.length - 1; i > 0; i--) {
    const j = ctx.rand.int(i + 1);
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}
