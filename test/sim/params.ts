/**
 * What one simulated run is made of: the options a person picks (seed, nodes, groups, steps, bug) and the
 * fault mix the seed picks (SimParams). Deriving the mix from the seed means 1,000 seeds cover calm networks,
 * lossy ones, crash-heavy ones and small-message ones without anyone choosing.
 */
import type { Prng } from '../../src/core/prng.js';
import type { RaftBugName } from '../../src/raft/index.js';

export interface SimOptions {
  readonly seed: number;
  /** 3 or 5; null: the seed picks one of the two. */
  readonly nodes: 3 | 5 | null;
  readonly groups: number;
  /** Steps of the safety phase (with faults). One step is one unit of simulated time (about half a tick). */
  readonly steps: number;
  /** At most this many steps for the healed cluster to commit everything proposed after healing. */
  readonly livenessSteps: number;
  /** A RaftBugs switch to turn on for the run (the mutation check), or null. */
  readonly bug: RaftBugName | null;
  /** Keep a readable event trace (slow; for --seed N investigations). */
  readonly trace: boolean;
}

export const defaultSimOptions: SimOptions = {
  seed: 1,
  nodes: null,
  groups: 2,
  steps: 1500,
  livenessSteps: 1500,
  bug: null,
  trace: false,
};

/** The fault mix and host behaviour, drawn from the seed. Rates are per step unless said otherwise. */
export interface SimParams {
  readonly nodes: 3 | 5;
  /** Per message. */
  readonly dropRate: number;
  readonly dupRate: number;
  /** Per message: delivered after a long delay (this is what reorders messages). */
  readonly longDelayRate: number;
  readonly delayMinSteps: number;
  readonly delayMaxSteps: number;
  readonly longDelayMaxSteps: number;
  readonly crashRate: number;
  /** A crash followed by a restart within a few steps (the window that catches unsynced votes). */
  readonly rebootRate: number;
  readonly downMaxSteps: number;
  /** Per granted vote: the voter reboots right after sending it (the window where an unsynced vote is lost). */
  readonly voteCrashRate: number;
  /** Per crash: the victim is a leader rather than any node (leader changes with a half-replicated tail). */
  readonly leaderCrashBias: number;
  readonly pauseRate: number;
  readonly pauseMaxSteps: number;
  readonly partitionRate: number;
  readonly partitionMaxSteps: number;
  /** Relative clock drift bound: each node ticks at 0.5 * (1 +- drift) ticks per step. */
  readonly driftMax: number;
  readonly proposeRate: number;
  /** Per Ready without mustSync: the host syncs anyway (otherwise those writes stay volatile). */
  readonly lazySyncRate: number;
  /** Per crash: a random prefix of the unsynced writes reaches the disk (torn tail). */
  readonly tornRate: number;
  /** Per node and step: snapshot the state machine and compact the log. */
  readonly compactRate: number;
  readonly compactKeep: number;
  readonly maxMsgBytes: number;
  readonly maxInflightMsgs: number;
}

/** Ticks per step at zero drift: two steps per tick, so a message delay of 1 step is half a tick. */
export const ticksPerStep = 0.5;

export function deriveParams(rand: Prng, options: SimOptions): SimParams {
  const pick = <T>(xs: readonly T[]): T => xs[rand.int(xs.length)]!;
  const nodes = options.nodes ?? pick([3, 5] as const);
  return {
    nodes,
    dropRate: pick([0, 0.01, 0.05, 0.15]),
    dupRate: pick([0, 0.02, 0.1]),
    longDelayRate: pick([0, 0.02, 0.1]),
    delayMinSteps: 1,
    delayMaxSteps: pick([1, 2, 4]),
    longDelayMaxSteps: pick([10, 40]),
    crashRate: pick([0, 0.002, 0.01]),
    rebootRate: pick([0, 0.005, 0.02]),
    downMaxSteps: pick([20, 100]),
    voteCrashRate: pick([0, 0.1, 0.3]),
    leaderCrashBias: pick([0, 0.5, 0.9]),
    pauseRate: pick([0, 0.003]),
    pauseMaxSteps: pick([10, 60]),
    partitionRate: pick([0, 0.003, 0.01]),
    partitionMaxSteps: pick([30, 150]),
    driftMax: pick([0, 0.02, 0.05]),
    proposeRate: pick([0.05, 0.2, 0.5]),
    lazySyncRate: pick([0, 0.5]),
    tornRate: pick([0, 0.5]),
    compactRate: pick([0, 0.002, 0.02]),
    compactKeep: pick([0, 2, 10]),
    maxMsgBytes: pick([1, 64, 1 << 20]),
    maxInflightMsgs: pick([1, 4, 256]),
  };
}
