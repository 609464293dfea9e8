import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { AssertionError } from '../core/assert.js';
import { EntryPool } from './entry-pool.js';
import { TimerWheel, type TimerWheelOptions } from './wheel.js';

const hourMs = 60 * 60 * 1000;
const yearMs = 365 * 24 * hourMs;
const t0 = 1_733_043_600_000;

describe('TimerWheel basics', () => {
  it('fires a key exactly at its deadline, never before', () => {
    const wheel = new TimerWheel<string>(t0);
    wheel.add('a', t0 + 10);
    expect(wheel.advanceTo(t0 + 9)).toEqual([]);
    expect(wheel.has('a')).toBe(true);
    expect(wheel.advanceTo(t0 + 10)).toEqual(['a']);
    expect(wheel.has('a')).toBe(false);
    expect(wheel.size).toBe(0);
    expect(wheel.advanceTo(t0 + 1000)).toEqual([]);
  });

  it('cancel removes the timer and reports whether it existed', () => {
    const wheel = new TimerWheel<string>(t0);
    wheel.add('a', t0 + 5);
    wheel.add('b', t0 + 5);
    expect(wheel.cancel('a')).toBe(true);
    expect(wheel.cancel('a')).toBe(false);
    expect(wheel.cancel('never')).toBe(false);
    expect(wheel.size).toBe(1);
    expect(wheel.deadlineOf('a')).toBeUndefined();
    expect(wheel.advanceTo(t0 + 100)).toEqual(['b']);
  });

  it('cancelling the only timer empties nextDeadlineMs', () => {
    const wheel = new TimerWheel<string>(t0);
    wheel.add('a', t0 + 5 * hourMs);
    expect(wheel.nextDeadlineMs()).toBe(t0 + 5 * hourMs);
    wheel.cancel('a');
    expect(wheel.nextDeadlineMs()).toBeNull();
  });

  it('replace moves the deadline and counts as a new insertion for ties', () => {
    const wheel = new TimerWheel<string>(t0);
    wheel.add('a', t0 + 100);
    wheel.add('b', t0 + 100);
    wheel.add('a', t0 + 100);
    wheel.add('c', t0 + 50);
    wheel.add('c', t0 + 200);
    expect(wheel.size).toBe(3);
    expect(wheel.deadlineOf('c')).toBe(t0 + 200);
    expect(wheel.advanceTo(t0 + 150)).toEqual(['b', 'a']);
    expect(wheel.advanceTo(t0 + 199)).toEqual([]);
    expect(wheel.advanceTo(t0 + 200)).toEqual(['c']);
  });

  it('past deadlines are due on the next advanceTo, ordered by deadline then insertion', () => {
    const wheel = new TimerWheel<string>(t0);
    wheel.add('now', t0);
    wheel.add('ancient', t0 - 30 * yearMs);
    wheel.add('recent', t0 - 1);
    wheel.add('now2', t0);
    expect(wheel.nextDeadlineMs()).toBe(t0 - 30 * yearMs);
    expect(wheel.advanceTo(t0)).toEqual(['ancient', 'recent', 'now', 'now2']);
    expect(wheel.nextDeadlineMs()).toBeNull();
  });

  it('advancing backwards does not move time and fires nothing that is not due', () => {
    const wheel = new TimerWheel<string>(t0);
    wheel.add('a', t0 + 10);
    expect(wheel.advanceTo(t0 + 5)).toEqual([]);
    expect(wheel.currentMs).toBe(t0 + 5);
    expect(wheel.advanceTo(t0 - 1000)).toEqual([]);
    expect(wheel.currentMs).toBe(t0 + 5);
    // A past deadline added after time moved only fires for a nowMs at or past it.
    wheel.add('late', t0 + 2);
    expect(wheel.advanceTo(t0 + 1)).toEqual([]);
    expect(wheel.currentMs).toBe(t0 + 5);
    expect(wheel.advanceTo(t0 + 2)).toEqual(['late']);
    expect(wheel.advanceTo(t0 + 10)).toEqual(['a']);
  });

  it('holds deadlines years ahead by growing levels lazily, and fires them exactly', () => {
    const wheel = new TimerWheel<string>(t0);
    expect(wheel.levels).toBe(1);
    wheel.add('soon', t0 + 63);
    expect(wheel.levels).toBe(1);
    wheel.add('far', t0 + 3 * yearMs + 7);
    const levelsWithFar = wheel.levels;
    expect(levelsWithFar).toBeGreaterThan(4);
    expect(wheel.nextDeadlineMs()).toBe(t0 + 63);
    expect(wheel.advanceTo(t0 + 63)).toEqual(['soon']);
    expect(wheel.nextDeadlineMs()).toBe(t0 + 3 * yearMs + 7);
    for (const step of [yearMs, 2 * yearMs, 3 * yearMs, 3 * yearMs + 6]) {
      expect(wheel.advanceTo(t0 + step)).toEqual([]);
      expect(wheel.nextDeadlineMs()).toBe(t0 + 3 * yearMs + 7);
    }
    expect(wheel.advanceTo(t0 + 3 * yearMs + 7)).toEqual(['far']);
    expect(wheel.levels).toBe(levelsWithFar);
  });

  it('sorts due keys that come out of different levels in one advance', () => {
    const wheel = new TimerWheel<number>(0, { wheelSize: 4 });
    const deadlines = [5000, 3, 70, 3, 70, 900, 4, 5000, 17, 64, 16, 1];
    deadlines.forEach((d, i) => wheel.add(i, d));
    expect(wheel.levels).toBeGreaterThan(3);
    const fired = wheel.advanceTo(10_000);
    const expected = deadlines
      .map((d, i) => ({ d, i }))
      .sort((x, y) => x.d - y.d || x.i - y.i)
      .map((x) => x.i);
    expect(fired).toEqual(expected);
  });

  it('flushing a coarse bucket fires only its due entries and re-adds the rest', () => {
    const wheel = new TimerWheel<string>(0, { wheelSize: 4 });
    wheel.add('a', 100);
    wheel.add('b', 101);
    wheel.add('c', 127);
    expect(wheel.advanceTo(100)).toEqual(['a']);
    expect(wheel.nextDeadlineMs()).toBe(101);
    expect(wheel.advanceTo(126)).toEqual(['b']);
    expect(wheel.advanceTo(127)).toEqual(['c']);
  });

  it('orders equal deadlines by insertion even when they sit in different levels', () => {
    const wheel = new TimerWheel<string>(0);
    wheel.add('first', 1000); // lands in level 1 at time 0
    expect(wheel.advanceTo(990)).toEqual([]);
    wheel.add('second', 1000); // lands in level 0 at time 990
    wheel.add('third', 999);
    expect(wheel.advanceTo(1000)).toEqual(['third', 'first', 'second']);
  });

  it('a host loop on nextDeadlineMs fires everything in order, with no wake-up that finds nothing', () => {
    const wheel = new TimerWheel<string>(t0);
    const deadlines = [t0 + 3, t0 + 70, t0 + 4100, t0 + hourMs, t0 + 70, t0 + 2 * yearMs];
    deadlines.forEach((d, i) => wheel.add(`k${i}`, d));
    const fired: string[] = [];
    let wakeups = 0;
    for (let next = wheel.nextDeadlineMs(); next !== null; next = wheel.nextDeadlineMs()) {
      const due = wheel.advanceTo(next);
      expect(due.length).toBeGreaterThan(0);
      for (const key of due) expect(wheel.deadlineOf(key)).toBeUndefined();
      fired.push(...due);
      wakeups++;
    }
    expect(fired).toEqual(['k0', 'k1', 'k4', 'k2', 'k3', 'k5']);
    expect(wakeups).toBe(5);
  });

  it('after cancelling the earliest of a bucket, nextDeadlineMs stays a lower bound and recovers', () => {
    const wheel = new TimerWheel<string>(0);
    wheel.add('a', 1000);
    wheel.add('b', 1010);
    expect(wheel.nextDeadlineMs()).toBe(1000);
    wheel.cancel('a');
    const next = wheel.nextDeadlineMs();
    expect(next).not.toBeNull();
    expect(next as number).toBeLessThanOrEqual(1010);
    expect(wheel.advanceTo(next as number)).toEqual(next === 1010 ? ['b'] : []);
    expect(wheel.nextDeadlineMs()).toBe(1010);
    expect(wheel.advanceTo(1010)).toEqual(['b']);
  });

  it('works with coarse ticks and fractional times without firing early', () => {
    const wheel = new TimerWheel<string>(0.25, { tickMs: 10, wheelSize: 8 });
    wheel.add('a', 12.5);
    wheel.add('b', 11);
    wheel.add('c', 19.75);
    expect(wheel.nextDeadlineMs()).toBe(11);
    expect(wheel.advanceTo(10.99)).toEqual([]);
    expect(wheel.advanceTo(12.5)).toEqual(['b', 'a']);
    expect(wheel.nextDeadlineMs()).toBe(19.75);
    expect(wheel.advanceTo(19.7)).toEqual([]);
    expect(wheel.advanceTo(19.75)).toEqual(['c']);
  });

  it('accepts any key type and reuses freed entries', () => {
    const a = { id: 1 };
    const b = { id: 2 };
    const wheel = new TimerWheel<object>(0);
    for (let round = 0; round < 5000; round++) {
      wheel.add(a, round + 1);
      wheel.add(b, round + 1);
      expect(wheel.advanceTo(round + 1)).toEqual([a, b]);
    }
    expect(wheel.size).toBe(0);
  });

  it('rejects non-finite times and bad options as programmer errors', () => {
    const wheel = new TimerWheel<string>(0);
    expect(() => wheel.add('a', Number.NaN)).toThrow(AssertionError);
    expect(() => wheel.add('a', Infinity)).toThrow(AssertionError);
    expect(() => wheel.advanceTo(Number.NaN)).toThrow(AssertionError);
    expect(() => new TimerWheel<string>(0, { wheelSize: 1 })).toThrow(AssertionError);
    expect(() => new TimerWheel<string>(0, { tickMs: 0 })).toThrow(AssertionError);
    expect(wheel.size).toBe(0);
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Property tests against a sorted-array model: the model keeps every pending timer in an array and, on
// advanceTo(t), returns those with deadline <= t sorted by (deadline, insertion seq).

type Op =
  | { kind: 'add'; key: number; deltaMs: number }
  | { kind: 'addAt'; key: number; offsetMs: number }
  | { kind: 'cancel'; key: number }
  | { kind: 'advance'; deltaMs: number }
  | { kind: 'advanceNear'; offsetMs: number; backMs: number }
  | { kind: 'advanceToNext'; slackMs: number };

interface ModelTimer {
  key: number;
  deadlineMs: number;
  seq: number;
}

class SortedArrayModel {
  timers: ModelTimer[] = [];
  private seq = 0;
  constructor(public currentMs: number) {}

  add(key: number, deadlineMs: number): void {
    this.cancel(key);
    this.timers.push({ key, deadlineMs, seq: this.seq++ });
  }
  cancel(key: number): boolean {
    const i = this.timers.findIndex((t) => t.key === key);
    if (i >= 0) this.timers.splice(i, 1);
    return i >= 0;
  }
  advanceTo(nowMs: number): number[] {
    this.currentMs = Math.max(this.currentMs, nowMs);
    const due = this.timers.filter((t) => t.deadlineMs <= nowMs);
    this.timers = this.timers.filter((t) => t.deadlineMs > nowMs);
    return due.sort((a, b) => a.deadlineMs - b.deadlineMs || a.seq - b.seq).map((t) => t.key);
  }
  minDeadlineMs(): number | null {
    return this.timers.length === 0 ? null : Math.min(...this.timers.map((t) => t.deadlineMs));
  }
}

const keyArb = fc.integer({ min: 0, max: 24 });
/** Same-ms clusters, level boundaries for small wheels, far past, and big jumps up to years ahead. */
const deltaArb = fc.oneof(
  fc.integer({ min: -5, max: 80 }),
  fc.constantFrom(0, 1, 2, 3, 4, 15, 16, 17, 63, 64, 65, 255, 256, 257, 4095, 4096, 4097),
  fc.integer({ min: -20 * yearMs, max: 0 }),
  fc.integer({ min: 0, max: 5 * yearMs }),
);
/** Absolute deadlines (startMs + offset) shared by many ops: same-ms timers added at different times and levels. */
const anchorArb = fc.constantFrom(0, 1, 64, 100, 1000, 4096, 5000, 262_144, hourMs, yearMs);
const advanceArb = fc.oneof(
  fc.integer({ min: 0, max: 70 }),
  fc.integer({ min: -100, max: 0 }),
  fc.integer({ min: 0, max: 5 * yearMs }),
);
const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ kind: fc.constant('add' as const), key: keyArb, deltaMs: deltaArb }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('addAt' as const), key: keyArb, offsetMs: anchorArb }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('cancel' as const), key: keyArb }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('advance' as const), deltaMs: advanceArb }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('advanceNear' as const),
      offsetMs: anchorArb,
      backMs: fc.integer({ min: 0, max: 20 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant('advanceToNext' as const), slackMs: fc.integer({ min: 0, max: 3 }) }),
  },
);
const optionsArb: fc.Arbitrary<TimerWheelOptions> = fc.record({
  tickMs: fc.constantFrom(1, 1, 2, 7),
  wheelSize: fc.constantFrom(2, 3, 4, 8, 64, 256),
});
const startArb = fc.oneof(fc.constant(t0), fc.integer({ min: -yearMs, max: 2 * t0 }));

/** Runs ops on a wheel and the model side by side; returns nothing, fails through expect. */
function runAgainstModel(startMs: number, options: TimerWheelOptions, ops: Op[]): void {
  const wheel = new TimerWheel<number>(startMs, options);
  const model = new SortedArrayModel(startMs);
  let detached = false; // a cancel or replace may leave nextDeadlineMs a strict lower bound
  for (const op of ops) {
    if (op.kind === 'add') {
      detached ||= wheel.has(op.key);
      wheel.add(op.key, model.currentMs + op.deltaMs);
      model.add(op.key, model.currentMs + op.deltaMs);
    } else if (op.kind === 'addAt') {
      detached ||= wheel.has(op.key);
      wheel.add(op.key, startMs + op.offsetMs);
      model.add(op.key, startMs + op.offsetMs);
    } else if (op.kind === 'cancel') {
      const existed = model.cancel(op.key);
      detached ||= existed;
      expect(wheel.cancel(op.key)).toBe(existed);
    } else {
      const next = wheel.nextDeadlineMs();
      const nowMs =
        op.kind === 'advance'
          ? model.currentMs + op.deltaMs
          : op.kind === 'advanceNear'
            ? startMs + op.offsetMs - op.backMs
            : next === null
              ? model.currentMs
              : next + op.slackMs;
      const fired = wheel.advanceTo(nowMs);
      const byKey = new Map(model.timers.map((t) => [t.key, t.deadlineMs]));
      for (const key of fired) expect(byKey.get(key)).toBeLessThanOrEqual(nowMs); // nothing fires early
      expect(fired).toEqual(model.advanceTo(nowMs));
      const after = wheel.nextDeadlineMs();
      if (after !== null) expect(after).toBeGreaterThan(nowMs); // the host loop always makes progress
    }
    checkState(wheel, model, detached);
  }
}

function checkState(wheel: TimerWheel<number>, model: SortedArrayModel, detached: boolean): void {
  expect(wheel.size).toBe(model.timers.length);
  expect(wheel.currentMs).toBe(model.currentMs);
  const min = model.minDeadlineMs();
  const next = wheel.nextDeadlineMs();
  if (min === null) {
    expect(next).toBeNull();
    return;
  }
  expect(next).not.toBeNull();
  expect(next as number).toBeLessThanOrEqual(min);
  if (!detached) expect(next).toBe(min);
  for (const t of model.timers) expect(wheel.deadlineOf(t.key)).toBe(t.deadlineMs);
}

describe('TimerWheel against a sorted-array model (fast-check)', () => {
  it('returns the same due keys in the same order, and nextDeadlineMs <= the earliest deadline', () => {
    fc.assert(
      fc.property(startArb, optionsArb, fc.array(opArb, { maxLength: 200 }), (start, options, ops) => {
        runAgainstModel(start, options, ops);
      }),
      { numRuns: 400 },
    );
  });

  it('orders same-ms deadlines added at different times (and so in different levels) by insertion', () => {
    const nearAnchorArb = fc.constantFrom(0, 1, 30, 64, 65, 100, 1000);
    const denseOps: fc.Arbitrary<Op[]> = fc.array(
      fc.oneof(
        { weight: 4, arbitrary: fc.record({ kind: fc.constant('addAt' as const), key: keyArb, offsetMs: nearAnchorArb }) },
        { weight: 2, arbitrary: fc.record({ kind: fc.constant('advance' as const), deltaMs: fc.integer({ min: 0, max: 70 }) }) },
        {
          weight: 1,
          arbitrary: fc.record({
            kind: fc.constant('advanceNear' as const),
            offsetMs: nearAnchorArb,
            backMs: fc.integer({ min: 0, max: 40 }),
          }),
        },
      ),
      { maxLength: 60 },
    );
    fc.assert(fc.property(startArb, optionsArb, denseOps, runAgainstModel), { numRuns: 500 });
  });

  it('is exact for nextDeadlineMs when nothing was cancelled or replaced', () => {
    const noDetachOps = fc.array(
      fc.oneof(
        fc.record({ kind: fc.constant('add' as const), key: fc.nat(), deltaMs: deltaArb }),
        fc.record({ kind: fc.constant('advance' as const), deltaMs: advanceArb }),
      ),
      { maxLength: 150 },
    );
    fc.assert(
      fc.property(startArb, optionsArb, noDetachOps, (start, options, ops) => {
        // fc.nat() keys rarely repeat; make them unique so no add is a replace.
        const unique = ops.map((op, i) => (op.kind === 'add' ? { ...op, key: i } : op));
        runAgainstModel(start, options, unique);
      }),
      { numRuns: 200 },
    );
  });

  it('handles fractional deadlines and times exactly', () => {
    const fractionalOps = fc.array(
      fc.oneof(
        fc.record({
          kind: fc.constant('add' as const),
          key: keyArb,
          deltaMs: fc.double({ min: -50, max: 500, noNaN: true }),
        }),
        fc.record({ kind: fc.constant('advance' as const), deltaMs: fc.double({ min: -5, max: 60, noNaN: true }) }),
      ),
      { maxLength: 150 },
    );
    fc.assert(
      fc.property(fc.double({ min: -1e6, max: 1e6, noNaN: true }), optionsArb, fractionalOps, runAgainstModel),
      { numRuns: 200 },
    );
  });
});

describe('TimerWheel limits', () => {
  it('holds at most entriesMax timers: a new key past it is refused, replace and cancel still work', () => {
    const wheel = new TimerWheel<string>(t0, { entriesMax: 3 });
    wheel.add('a', t0 + 5);
    wheel.add('b', t0 + 6);
    wheel.add('c', t0 + 7);
    expect(wheel.full).toBe(true);
    expect(() => wheel.add('d', t0 + 8)).toThrow(AssertionError);
    expect(wheel.size).toBe(3);
    wheel.add('a', t0 + 9); // a replace takes no new entry
    expect(wheel.cancel('b')).toBe(true);
    expect(wheel.full).toBe(false);
    wheel.add('d', t0 + 8);
    expect(wheel.advanceTo(t0 + 100)).toEqual(['c', 'd', 'a']);
    expect(wheel.full).toBe(false);
  });

  it('the entry pool stops growing at its ceiling instead of doubling past it', () => {
    const pool = new EntryPool<number>(1500);
    for (let i = 0; i < 1500; i++) pool.keys[pool.alloc()] = i;
    expect(pool.capacity).toBe(1500);
    expect(() => pool.alloc()).toThrow(AssertionError);
    pool.release(7);
    expect(pool.alloc()).toBe(7); // a freed handle is reused at the ceiling
    expect(pool.capacity).toBe(1500);
  });

  it('a wheel filled to entriesMax many times over never grows its pool past the ceiling', () => {
    const wheel = new TimerWheel<number>(0, { entriesMax: 2000 });
    for (let round = 0; round < 5; round++) {
      for (let i = 0; i < 2000; i++) wheel.add(i, round * 10_000 + i);
      expect(wheel.full).toBe(true);
      expect(wheel.advanceTo(round * 10_000 + 9_999)).toHaveLength(2000);
    }
    expect((wheel as unknown as { pool: EntryPool<number> }).pool.capacity).toBeLessThanOrEqual(2000 + 64 * 64 + 1);
  });

  it('advanceTo(t, max) returns the first max due keys and keeps the rest due, in the same order', () => {
    const wheel = new TimerWheel<string>(t0);
    ['a', 'b', 'c', 'd', 'e'].forEach((k, i) => wheel.add(k, t0 + 10 - i)); // e earliest
    wheel.add('late', t0 + 1000);
    expect(wheel.advanceTo(t0 + 20, 2)).toEqual(['e', 'd']);
    expect(wheel.nextDeadlineMs()).toBeLessThanOrEqual(t0 + 20); // still due: the host wakes again at once
    expect(wheel.has('c')).toBe(true);
    expect(wheel.advanceTo(t0 + 20, 0)).toEqual([]);
    expect(wheel.advanceTo(t0 + 20, 2)).toEqual(['c', 'b']);
    expect(wheel.advanceTo(t0 + 20)).toEqual(['a']);
    expect(wheel.nextDeadlineMs()).toBe(t0 + 1000);
  });

  it('draining with a small max gives the same keys in the same order as one unlimited advance (fast-check)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ key: fc.integer({ min: 0, max: 40 }), deltaMs: fc.integer({ min: -50, max: 200 }) }), { maxLength: 80 }),
        fc.integer({ min: 1, max: 7 }),
        fc.integer({ min: 0, max: 250 }),
        (adds, max, stepMs) => {
          const whole = new TimerWheel<number>(t0, { wheelSize: 4 });
          const limited = new TimerWheel<number>(t0, { wheelSize: 4 });
          for (const a of adds) {
            whole.add(a.key, t0 + a.deltaMs);
            limited.add(a.key, t0 + a.deltaMs);
          }
          const expected = whole.advanceTo(t0 + stepMs);
          const got: number[] = [];
          for (;;) {
            const part = limited.advanceTo(t0 + stepMs, max);
            expect(part.length).toBeLessThanOrEqual(max);
            if (part.length === 0) break;
            got.push(...part);
          }
          expect(got).toEqual(expected);
          expect(limited.size).toBe(whole.size);
          expect(limited.nextDeadlineMs()).toBe(whole.nextDeadlineMs());
        },
      ),
    );
  });
});
