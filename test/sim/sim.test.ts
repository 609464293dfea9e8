/**
 * The simulator in CI: a few hundred seeds of 3 and 5 nodes must pass every invariant; a seed must replay the
 * same trace; and each deliberate Raft bug must be caught within a bounded number of seeds (the checker has teeth).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { RaftBugs, resetRaftBugs } from '../../src/raft/index.js';
import { defaultSimOptions } from './params.js';
import type { SimOptions } from './params.js';
import { runSeeds } from './runner.js';
import { runSeed } from './simulator.js';

/** Shorter than the CLI's default so 300 seeds stay well inside the CI budget. */
const ci: Omit<SimOptions, 'seed'> = { ...defaultSimOptions, steps: 700, livenessSteps: 1500 };

afterEach(() => resetRaftBugs());

describe('simulator: safety and liveness over many seeds', () => {
  for (const nodes of [3, 5] as const) {
    it(`150 seeds of ${nodes} nodes x 2 groups pass every invariant`, () => {
      const s = runSeeds({ startSeed: 1, seeds: 150, base: { ...ci, nodes } });
      const failures = s.failures.map((f) => `reproduce with: npm run sim -- --seed ${f.seed} --nodes ${nodes} --steps ${ci.steps} (${f.message})`);
      expect(failures).toEqual([]);
      expect(s.seeds).toBe(150);
      // The runs did real work: leaders were elected, entries committed, faults injected.
      expect(s.elections).toBeGreaterThan(150);
      expect(s.commits).toBeGreaterThan(150 * 10);
      expect(s.faults).toBeGreaterThan(0);
      expect(s.acked).toBeGreaterThan(0);
    }, 120_000);
  }
});

describe('simulator: determinism', () => {
  it('the same seed gives the same trace; another seed another trace', () => {
    const a = runSeed({ ...ci, seed: 42 });
    const b = runSeed({ ...ci, seed: 42 });
    const c = runSeed({ ...ci, seed: 43 });
    expect(a.traceHash).toBe(b.traceHash);
    expect(a.messages).toBe(b.messages);
    expect(a.commits).toBe(b.commits);
    expect(c.traceHash).not.toBe(a.traceHash);
  });

  it('a kept trace is the same line for line', () => {
    const a = runSeed({ ...ci, seed: 7, steps: 200, trace: true });
    const b = runSeed({ ...ci, seed: 7, steps: 200, trace: true });
    expect(a.trace.length).toBeGreaterThan(100);
    expect(b.trace).toEqual(a.trace);
  });
});

describe('simulator: mutation check (each RaftBugs switch is caught)', () => {
  const cases = [
    // Caught first at seed 112 (two leaders in one term) with the default options; see bench/NOTES.md, "Mutation check".
    { bug: 'voteWithoutPersist' as const, within: 400 },
    // Caught first at seed 11 (a leader commits an older-term entry by counting).
    { bug: 'commitPreviousTermByCount' as const, within: 100 },
  ];
  for (const { bug, within } of cases) {
    it(`${bug} is caught within ${within} seeds`, () => {
      const s = runSeeds({ startSeed: 1, seeds: within, base: { ...defaultSimOptions, bug }, stopAtFirst: true });
      expect(s.violations).toBe(1);
      expect(s.failures[0]!.kind).not.toBe('liveness');
      expect(RaftBugs[bug]).toBe(false); // the run switched it off again
    }, 300_000);
  }

  it('the first catching seed passes with the bug switched off', () => {
    expect(runSeed({ ...defaultSimOptions, seed: 112 }).violation).toBeNull();
    expect(runSeed({ ...defaultSimOptions, seed: 11 }).violation).toBeNull();
  });
});
