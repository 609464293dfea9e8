/**
 * The placement driver's one pure step: plan(model, memory, nowMs, config, rand) -> operators. It decides; it runs
 * nothing (the group leaders execute operators, the simulator does now). Rules in strict priority, as PD's
 * schedulers and CockroachDB's allocator order them:
 *   1. repair (dead or decommissioning nodes, wrong voter counts, stray learners, leaderships off draining nodes);
 *   2. splits (size, sustained load, or too few groups for the nodes);
 *   3. replica balance, only while no repair remains (repairs get the operator budget first);
 *   4. leader balance.
 * Every operator planned counts at once in the tallies the next rule reads (influence), and the whole plan stays
 * within the cluster's in-flight budget.
 */
import type { Rand } from '../core/prng.js';
import { balanceReplicas } from './balance.js';
import type { PlacementConfig } from './config.js';
import { PlanContext } from './context.js';
import { balanceLeaders } from './leaders.js';
import { planRepairs } from './repair.js';
import { planSplits } from './split.js';
import type { ClusterModel, DriverMemory, Operator } from './types.js';

export interface Plan {
  readonly operators: readonly Operator[];
  readonly memory: DriverMemory;
  /** Repairs remain (planned, in flight or throttled): replica balance waited for them. */
  readonly repairPending: boolean;
}

export function plan(model: ClusterModel, memory: DriverMemory, nowMs: number, config: PlacementConfig, rand: Rand): Plan {
  const ctx = new PlanContext(model, nowMs, config, rand);
  const repairPending = planRepairs(ctx);
  const next = planSplits(ctx, memory);
  if (!repairPending) balanceReplicas(ctx);
  balanceLeaders(ctx);
  return { operators: ctx.planned, memory: next, repairPending };
}
