/**
 * What one whole-node run is made of: the options a person picks and the fault mix the seed draws (like
 * ../params.ts for the Raft-only mode). Rates are mean intervals between faults of a kind (null: none).
 */
import type { Prng } from '../../../src/core/prng.js';
import type { HostBugName, RaftBugName } from '../../../src/raft/bugs.js';

export type SimBugName = RaftBugName | HostBugName;

export interface NodeSimOptions {
  readonly seed: number;
  /** 3 or 5; null: the seed picks. */
  readonly nodes: 3 | 5 | null;
  readonly shards: number;
  /** Simulated ms of the safety phase (faults on). */
  readonly safetyMs: number;
  /** Simulated ms of the liveness phase (everything healed). */
  readonly livenessMs: number;
  /** Every occurrence due once the cluster is healthy starts within this many ms of its time (or of the healing). */
  readonly boundMs: number;
  readonly bug: SimBugName | null;
  /** Leadership transfers among the faults (the "abandoned transfer" mutation needs them). */
  readonly transfers: boolean;
  /**
   * Check Raft's lease invariant (one lease holder per shard) after every event. Off, a stale lease is left for
   * the scheduler's invariants to catch by what it fires (the SIGSTOP mutation test shows both do).
   */
  readonly leaseInvariant: boolean;
  readonly trace: boolean;
  /**
   * How far ahead of their due time the nodes order attempts (staged); null: the seed picks 0, 20 or 100 ms by its
   * remainder, drawing nothing, so a seed with 0 runs exactly as before staging existed.
   */
  readonly stageLeadMs: number | null;
}

export const defaultNodeSimOptions: NodeSimOptions = {
  seed: 1,
  nodes: null,
  shards: 2,
  safetyMs: 20_000,
  livenessMs: 15_000,
  boundMs: 5_000,
  bug: null,
  transfers: true,
  leaseInvariant: true,
  trace: false,
  stageLeadMs: null,
};

/** The CI runs (vitest): the default faults, leadership transfers included, over shorter phases. */
export const ciNodeSimOptions: Omit<NodeSimOptions, 'seed'> = { ...defaultNodeSimOptions, safetyMs: 5_000, livenessMs: 8_000 };

export interface NodeSimParams {
  readonly nodes: 3 | 5;
  readonly dropRate: number;
  readonly dupRate: number;
  readonly delayMaxMs: number;
  readonly longDelayRate: number;
  readonly longDelayMaxMs: number;
  readonly crashEveryMs: number | null;
  readonly downMaxMs: number;
  readonly tornRate: number;
  /** SIGSTOP of a whole process. */
  readonly pauseEveryMs: number | null;
  readonly pauseMaxMs: number;
  readonly partitionEveryMs: number | null;
  readonly partitionMaxMs: number;
  /** Wall-clock steps, forward or back. */
  readonly jumpEveryMs: number | null;
  readonly jumpMaxMs: number;
  /** Leadership transfers (an operator's transfer-leader, the rebalancer). */
  readonly transferEveryMs: number | null;
  /** Per fault: it picks a leader rather than any node. */
  readonly leaderBias: number;
  /** Monotonic clock drift bound (each node draws its own in [-d, d]). */
  readonly driftMax: number;
  readonly opEveryMs: number;
  readonly receivers: number;
  /** How far ahead of their due time the nodes order attempts (staged); 0: at the due time. */
  readonly stageLeadMs: number;
}

export function deriveNodeParams(rand: Prng, options: NodeSimOptions): NodeSimParams {
  const pick = <T>(xs: readonly T[]): T => xs[rand.int(xs.length)]!;
  return {
    nodes: options.nodes ?? pick([3, 5] as const),
    dropRate: pick([0, 0.01, 0.05]),
    dupRate: pick([0, 0.02]),
    delayMaxMs: pick([2, 5, 15]),
    longDelayRate: pick([0, 0.02]),
    longDelayMaxMs: pick([100, 400]),
    crashEveryMs: pick([null, 8_000, 3_000]),
    downMaxMs: pick([500, 3_000]),
    tornRate: pick([0, 0.5]),
    pauseEveryMs: pick([null, 5_000, 2_000]),
    pauseMaxMs: pick([1_000, 4_000]),
    partitionEveryMs: pick([null, 8_000, 3_000]),
    partitionMaxMs: pick([1_000, 4_000]),
    jumpEveryMs: pick([null, 6_000, 2_000]),
    jumpMaxMs: pick([500, 5_000]),
    transferEveryMs: pick([null, 4_000, 1_500]),
    leaderBias: pick([0.3, 0.8]),
    driftMax: pick([0, 0.02, 0.05]),
    opEveryMs: pick([60, 200, 600]),
    receivers: 4,
    stageLeadMs: options.stageLeadMs ?? [0, 20, 100][options.seed % 3]!,
  };
}
