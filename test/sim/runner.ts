/** Runs many seeds and folds their results into one summary (the CLI and the vitest tests share it). */
import type { NodeSimOptions } from './node/params.js';
import { runNodeSeed } from './node/simulator.js';
import type { SimOptions } from './params.js';
import type { SeedResult } from './simulator.js';
import { runSeed } from './simulator.js';

export interface FailedSeed {
  readonly seed: number;
  readonly nodes: number;
  readonly kind: string;
  readonly message: string;
  readonly step: number;
}

export interface Summary {
  seeds: number;
  steps: number;
  messages: number;
  faults: number;
  elections: number;
  commits: number;
  acked: number;
  violations: number;
  /** The first failing seeds (at most failuresKept), in seed order. */
  failures: FailedSeed[];
}

export const failuresKept = 20;

export function emptySummary(): Summary {
  return { seeds: 0, steps: 0, messages: 0, faults: 0, elections: 0, commits: 0, acked: 0, violations: 0, failures: [] };
}

export function addResult(s: Summary, r: SeedResult): void {
  s.seeds++;
  s.steps += r.steps;
  s.messages += r.messages;
  s.faults += r.faults;
  s.elections += r.elections;
  s.commits += r.commits;
  s.acked += r.acked;
  if (!r.violation) return;
  s.violations++;
  if (s.failures.length < failuresKept) {
    s.failures.push({ seed: r.seed, nodes: r.nodes, kind: r.violation.kind, message: r.violation.message, step: r.violation.step });
  }
}

export function mergeSummaries(parts: readonly Summary[]): Summary {
  const s = emptySummary();
  for (const p of parts) {
    s.seeds += p.seeds;
    s.steps += p.steps;
    s.messages += p.messages;
    s.faults += p.faults;
    s.elections += p.elections;
    s.commits += p.commits;
    s.acked += p.acked;
    s.violations += p.violations;
    s.failures.push(...p.failures);
  }
  s.failures.sort((a, b) => a.seed - b.seed);
  s.failures = s.failures.slice(0, failuresKept);
  return s;
}

export interface RunSeedsOptions {
  readonly startSeed: number;
  readonly seeds: number;
  readonly base: Omit<SimOptions, 'seed'>;
  /** Stop at the first violation (the mutation check). */
  readonly stopAtFirst?: boolean;
  readonly onResult?: (r: SeedResult) => void;
}

export function runSeeds(o: RunSeedsOptions): Summary {
  return loop(o, (seed) => runSeed({ ...o.base, seed }));
}

export interface RunNodeSeedsOptions extends Omit<RunSeedsOptions, 'base'> {
  readonly base: Omit<NodeSimOptions, 'seed'>;
}

/** The whole-node simulator over many seeds (node/simulator.ts). */
export function runNodeSeeds(o: RunNodeSeedsOptions): Summary {
  return loop(o, (seed) => runNodeSeed({ ...o.base, seed }));
}

function loop(o: Omit<RunSeedsOptions, 'base'>, run: (seed: number) => SeedResult): Summary {
  const s = emptySummary();
  for (let seed = o.startSeed; seed < o.startSeed + o.seeds; seed++) {
    const r = run(seed);
    addResult(s, r);
    o.onResult?.(r);
    if (r.violation && o.stopAtFirst) break;
  }
  return s;
}

/**
 * The mutation check: the first seed in [startSeed, startSeed + within) where the run with `base.bug` switched on
 * violates an invariant and the same seed with it off does not (so the violation is the mutation's, not another
 * bug's).
 */
export function firstCatch(base: Omit<NodeSimOptions, 'seed'>, within: number, startSeed = 1): { seed: number; kind: string; message: string } | null {
  for (let seed = startSeed; seed < startSeed + within; seed++) {
    const r = runNodeSeed({ ...base, seed });
    if (!r.violation) continue;
    if (runNodeSeed({ ...base, seed, bug: null }).violation) continue;
    return { seed, kind: r.violation.kind, message: r.violation.message };
  }
  return null;
}
