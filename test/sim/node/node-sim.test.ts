/**
 * The whole-node simulator in CI: seeds of 3 and 5 nodes (the production NodeCore behind the simulated shell)
 * pass every Raft and scheduler invariant, and a seed replays the same trace. Shorter phases than the CLI's
 * default keep the file inside the CI budget; `npm run sim -- --seeds N` runs the full length.
 */
import { describe, expect, it } from 'vitest';
import { runNodeSeeds } from '../runner.js';
import { ciNodeSimOptions as ciNodeOptions } from './params.js';
import { runNodeSeed } from './simulator.js';

describe('whole-node simulator: safety and liveness over many seeds', () => {
  for (const [nodes, seeds] of [[3, 20], [5, 12]] as const) {
    it(`${seeds} seeds of ${nodes} nodes x 2 shards pass every invariant`, () => {
      const s = runNodeSeeds({ startSeed: 1, seeds, base: { ...ciNodeOptions, nodes } });
      const failures = s.failures.map((f) => `seed ${f.seed}: ${f.message} (npm run sim -- --seed ${f.seed} --nodes ${nodes} --safety-ms 5000 --liveness-ms 8000)`);
      expect(failures).toEqual([]);
      expect(s.seeds).toBe(seeds);
      // The runs did real work: leaders elected, commands committed, client operations acknowledged, faults injected.
      expect(s.elections).toBeGreaterThanOrEqual(seeds * 2);
      expect(s.commits).toBeGreaterThan(seeds * 20);
      expect(s.acked).toBeGreaterThan(seeds * 5);
      expect(s.faults).toBeGreaterThan(seeds);
    }, 180_000);
  }
});

describe('whole-node simulator: determinism', () => {
  it('the same seed gives the same trace, line for line; another seed another trace', () => {
    const a = runNodeSeed({ ...ciNodeOptions, seed: 4, trace: true });
    const b = runNodeSeed({ ...ciNodeOptions, seed: 4, trace: true });
    const c = runNodeSeed({ ...ciNodeOptions, seed: 5 });
    expect(a.violation).toBeNull();
    expect(a.trace.length).toBeGreaterThan(1000);
    expect(b.trace).toEqual(a.trace);
    expect(b.traceHash).toBe(a.traceHash);
    expect(c.traceHash).not.toBe(a.traceHash);
    // The trace names what the scheduler did, not only Raft: callbacks sent and client operations answered.
    expect(a.trace.some((l) => / sends j\d+@\d+ attempt \d+ token \d+\.\d+$/.test(l))).toBe(true);
    expect(a.trace.some((l) => / ack create j\d+ via n\d: ok$/.test(l))).toBe(true);
  }, 120_000);
});
