/**
 * Seeds of the whole-node simulator that once found a bug, replayed with the CLI's default options (20 s of
 * faults, 15 s of liveness): each must pass every invariant. bench/NOTES.md ("What the whole-node simulator
 * found") tells each one's story; `npm run sim -- --seed N --trace` replays it with its event trace.
 */
import { describe, expect, it } from 'vitest';
import { defaultNodeSimOptions } from './params.js';
import { runNodeSeed } from './simulator.js';

const fixed: ReadonlyArray<{ cause: string; seeds: readonly number[] }> = [
  {
    cause: 'an overlap=buffer_one occurrence buffered behind an attempt out whose execution another leader closed',
    seeds: [2545, 4358, 4563, 4828, 4860],
  },
  {
    cause: "an order of an earlier term, waiting for its concurrency slot, kept the new term's load from arming the occurrence",
    seeds: [2955, 3606, 4012, 4929],
  },
  {
    cause: "a new term re-fired an attempt recorded by a node whose clock ran ahead before the occurrence's time on its own clock",
    seeds: [22951],
  },
  {
    cause: 'the checker counted an occurrence held (buffer_one) by a manual run from a clock ahead as late',
    seeds: [14087],
  },
  {
    cause: 'the checker counted an occurrence still held (buffer_one) behind a run whose retry a clock ahead had timed after the end as late',
    seeds: [45551],
  },
  {
    cause: "the simulator's network lost a snapshot sent to a node that was down without telling the sender, so the leader waited for it for ever",
    seeds: [138481],
  },
  {
    cause: 'a patch stamped just before an occurrence fired scheduled that occurrence again (a once job patched to the time it was firing at was sent twice, then stayed pending)',
    seeds: [120280],
  },
  {
    cause: "a new term's re-fire of a RUNNING execution was due at its load's now on a wall clock ahead, and waited for that clock again once it stepped back",
    seeds: [901519],
  },
];

describe('whole-node simulator: seeds that found a bug pass every invariant', () => {
  for (const { cause, seeds } of fixed) {
    it(`${cause} (seeds ${seeds.join(', ')})`, () => {
      const failures: string[] = [];
      for (const seed of seeds) {
        const r = runNodeSeed({ ...defaultNodeSimOptions, seed });
        if (r.violation !== null) failures.push(`seed ${seed}: ${r.violation.message} (npm run sim -- --seed ${seed})`);
      }
      expect(failures).toEqual([]);
    }, 120_000);
  }
});
