import { describe, expect, test } from 'vitest';
import { CallbackHistory } from './history.js';

describe('CallbackHistory', () => {
  test('one sample per aligned interval: the deltas of the running totals, the current one partial', () => {
    const h = new CallbackHistory(10_000, 6);
    h.observe({ sent: 100, failed: 5 }, 1_003_000); // the first observation is the base, not a sample
    h.observe({ sent: 104, failed: 5 }, 1_008_000);
    h.observe({ sent: 110, failed: 6 }, 1_012_000); // closes [1000000, 1010000)
    expect(h.snapshot({ sent: 113, failed: 8 }, 1_015_000)).toEqual([
      { startMs: 1_000_000, sent: 10, failed: 1 },
      { startMs: 1_010_000, sent: 3, failed: 2 },
    ]);
  });

  test('intervals without an observation are empty, and the buffer keeps only the last hour (here 6 intervals)', () => {
    const h = new CallbackHistory(10_000, 6);
    h.observe({ sent: 0, failed: 0 }, 0);
    h.observe({ sent: 2, failed: 0 }, 35_000); // [0,10s) gets the 2; 10s and 20s were never observed
    expect(h.snapshot({ sent: 2, failed: 0 }, 35_000)).toEqual([
      { startMs: 0, sent: 2, failed: 0 },
      { startMs: 10_000, sent: 0, failed: 0 },
      { startMs: 20_000, sent: 0, failed: 0 },
      { startMs: 30_000, sent: 0, failed: 0 },
    ]);
    for (let t = 40_000; t <= 200_000; t += 10_000) h.observe({ sent: t / 10_000, failed: 0 }, t);
    const s = h.snapshot({ sent: 20, failed: 0 }, 205_000);
    expect(s.length).toBe(6);
    expect(s.map((x) => x.startMs)).toEqual([150_000, 160_000, 170_000, 180_000, 190_000, 200_000]);
  });

  test('a stall longer than the buffer leaves at most one hour of empty intervals', () => {
    const h = new CallbackHistory(10_000, 6);
    h.observe({ sent: 0, failed: 0 }, 0);
    const s = h.snapshot({ sent: 7, failed: 1 }, 10_000_000);
    expect(s.length).toBe(6);
    expect(s[s.length - 1]).toEqual({ startMs: 10_000_000, sent: 0, failed: 0 });
  });
});
