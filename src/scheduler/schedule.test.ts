import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { PunctualError } from '../core/errors.js';
import { limits } from '../core/limits.js';
import {
  fireAllStart,
  firstOccurrence,
  nextOccurrence,
  previewOccurrences,
  validateCron,
} from './schedule.js';
import type { Schedule } from './types.js';

const ms = (iso: string): number => Date.parse(iso);
const iso = (t: number | null): string | null => (t === null ? null : new Date(t).toISOString());
const cron = (expr: string, timezone = 'UTC', startAtMs: number | null = null): Schedule => ({
  kind: 'cron',
  cron: expr,
  timezone,
  startAtMs,
});
/** n successive occurrences from fromMs (first at or after, then strictly after each). */
function walk(s: Schedule, fromMs: number, n: number): string[] {
  return previewOccurrences(s, fromMs, n).map((t) => iso(t)!);
}

describe('once (at / delay / now, resolved by the proposer)', () => {
  const s: Schedule = { kind: 'once', atMs: ms('2027-01-01T00:00:00.000Z') };
  it('first is atMs, even in the past', () => {
    expect(firstOccurrence(s, ms('2026-01-01T00:00:00Z'))).toBe(s.atMs);
    expect(firstOccurrence(s, ms('2028-01-01T00:00:00Z'))).toBe(s.atMs);
  });
  it('has no next after its time, and previews only when not past', () => {
    expect(nextOccurrence(s, s.atMs)).toBeNull();
    expect(nextOccurrence(s, s.atMs - 1)).toBe(s.atMs);
    expect(previewOccurrences(s, s.atMs, 5)).toEqual([s.atMs]);
    expect(previewOccurrences(s, s.atMs + 1, 5)).toEqual([]);
  });
});

describe('every', () => {
  const start = ms('2027-01-01T00:00:00.000Z');
  const s: Schedule = { kind: 'every', everyMs: 60_000, startAtMs: start };
  it('starts at startAtMs and steps by everyMs', () => {
    expect(firstOccurrence(s, start - 10_000)).toBe(start);
    expect(firstOccurrence(s, start)).toBe(start);
    expect(firstOccurrence(s, start + 1)).toBe(start + 60_000);
    expect(firstOccurrence(s, start + 60_000)).toBe(start + 60_000);
    expect(nextOccurrence(s, start)).toBe(start + 60_000);
    expect(nextOccurrence(s, start + 59_999)).toBe(start + 60_000);
    expect(previewOccurrences(s, start + 30_000, 3)).toEqual([start + 60_000, start + 120_000, start + 180_000]);
  });
});

describe('cron', () => {
  it('5 fields: first is at or after fromMs, next strictly after', () => {
    const s = cron('0 * * * *');
    const t = ms('2027-01-01T00:00:00.000Z');
    expect(firstOccurrence(s, t)).toBe(t);
    expect(firstOccurrence(s, t + 1)).toBe(t + 3_600_000);
    expect(nextOccurrence(s, t)).toBe(t + 3_600_000);
    expect(nextOccurrence(s, t - 1)).toBe(t);
  });
  it('6 fields: seconds first', () => {
    expect(walk(cron('*/15 * * * * *'), ms('2027-01-01T00:00:00.500Z'), 3)).toEqual([
      '2027-01-01T00:00:15.000Z',
      '2027-01-01T00:00:30.000Z',
      '2027-01-01T00:00:45.000Z',
    ]);
    expect(walk(cron('30 0 9 * * MON-FRI', 'Europe/Berlin'), ms('2027-03-26T12:00:00Z'), 2)).toEqual([
      '2027-03-29T07:00:30.000Z', // Monday, CEST (UTC+2): the weekend is skipped
      '2027-03-30T07:00:30.000Z',
    ]);
  });
  it('respects startAtMs', () => {
    const s = cron('0 0 * * *', 'UTC', ms('2027-06-01T12:00:00Z'));
    expect(iso(firstOccurrence(s, ms('2027-01-01T00:00:00Z')))).toBe('2027-06-02T00:00:00.000Z');
  });
  it('computes in the zone', () => {
    expect(iso(firstOccurrence(cron('0 9 * * *', 'Asia/Tokyo'), ms('2027-01-01T00:00:00Z')))).toBe(
      '2027-01-01T00:00:00.000Z',
    );
    expect(iso(firstOccurrence(cron('0 9 * * *', 'America/New_York'), ms('2027-01-01T00:00:00Z')))).toBe(
      '2027-01-01T14:00:00.000Z',
    );
  });
  it('an expression that never matches has no occurrence', () => {
    expect(firstOccurrence(cron('0 0 30 2 *'), 0)).toBeNull();
    expect(validateCron('0 0 30 2 *', 'UTC')).toEqual({ field: 'schedule.cron', message: 'never matches: no month has that day' });
  });
  it('a recurring schedule ends with year 9999 (the last time RFC 3339 writes)', () => {
    const last = ms('9999-12-31T23:59:59.999Z');
    const every: Schedule = { kind: 'every', everyMs: 60_000, startAtMs: ms('9999-12-31T23:58:00Z') };
    expect(nextOccurrence(every, ms('9999-12-31T23:58:00Z'))).toBe(ms('9999-12-31T23:59:00Z'));
    expect(nextOccurrence(every, ms('9999-12-31T23:59:00Z'))).toBeNull();
    expect(firstOccurrence({ kind: 'every', everyMs: 1, startAtMs: last }, last)).toBe(last);
    expect(firstOccurrence({ kind: 'every', everyMs: 1, startAtMs: last + 1 }, 0)).toBeNull();
  });
  it('memoized answers equal fresh ones whatever the order of questions', () => {
    const s = cron('*/7 3-9 * * *', 'America/New_York');
    const from = ms('2027-03-13T00:00:00Z');
    const inOrder = previewOccurrences(s, from, 30);
    const shuffled = [...inOrder].reverse().map((t, i) => [t, nextOccurrence(s, t), nextOccurrence(s, from + i)] as const);
    for (const [t, next] of shuffled) {
      const i = inOrder.indexOf(t);
      if (i + 1 < inOrder.length) expect(next).toBe(inOrder[i + 1]);
    }
    expect(previewOccurrences(s, from, 30)).toEqual(inOrder);
  });
  it('@macros', () => {
    expect(iso(firstOccurrence(cron('@daily', 'UTC'), ms('2027-01-01T00:00:01Z')))).toBe('2027-01-02T00:00:00.000Z');
  });
});

describe('DST (exact instants computed by cron-parser 5.10)', () => {
  it('America/New_York spring forward 2027-03-14: 02:30 runs at 03:30 EDT', () => {
    expect(walk(cron('30 2 * * *', 'America/New_York'), ms('2027-03-12T12:00:00Z'), 4)).toEqual([
      '2027-03-13T07:30:00.000Z', // 02:30 EST
      '2027-03-14T07:30:00.000Z', // 02:30 does not exist: 03:30 EDT
      '2027-03-15T06:30:00.000Z', // 02:30 EDT
      '2027-03-16T06:30:00.000Z',
    ]);
  });
  it('America/New_York fall back 2027-11-07: 01:30 runs once, at its first occurrence', () => {
    expect(walk(cron('30 1 * * *', 'America/New_York'), ms('2027-11-05T12:00:00Z'), 4)).toEqual([
      '2027-11-06T05:30:00.000Z',
      '2027-11-07T05:30:00.000Z', // 01:30 EDT; 01:30 EST (06:30Z) is not a second run
      '2027-11-08T06:30:00.000Z',
      '2027-11-09T06:30:00.000Z',
    ]);
    expect(iso(nextOccurrence(cron('30 1 * * *', 'America/New_York'), ms('2027-11-07T05:30:00Z')))).toBe(
      '2027-11-08T06:30:00.000Z',
    );
  });
  it('America/New_York */30 keeps counting through both copies of the repeated hour', () => {
    expect(walk(cron('*/30 * * * *', 'America/New_York'), ms('2027-11-07T04:45:00Z'), 7)).toEqual([
      '2027-11-07T05:00:00.000Z', // 01:00 EDT
      '2027-11-07T05:30:00.000Z', // 01:30 EDT
      '2027-11-07T06:00:00.000Z', // 01:00 EST
      '2027-11-07T06:30:00.000Z', // 01:30 EST
      '2027-11-07T07:00:00.000Z', // 02:00 EST
      '2027-11-07T07:30:00.000Z',
      '2027-11-07T08:00:00.000Z',
    ]);
    expect(walk(cron('*/30 * * * *', 'America/New_York'), ms('2027-03-14T06:15:00Z'), 3)).toEqual([
      '2027-03-14T06:30:00.000Z', // 01:30 EST
      '2027-03-14T07:00:00.000Z', // 03:00 EDT (02:xx does not exist)
      '2027-03-14T07:30:00.000Z',
    ]);
  });
  it('America/New_York: the hour field, not a step, decides whether the repeated hour runs twice (docs/api.md)', () => {
    // every hour: elapsed time, both copies of 01:00
    expect(walk(cron('0 * * * *', 'America/New_York'), ms('2027-11-07T04:30:00Z'), 3)).toEqual([
      '2027-11-07T05:00:00.000Z', // 01:00 EDT
      '2027-11-07T06:00:00.000Z', // 01:00 EST
      '2027-11-07T07:00:00.000Z', // 02:00 EST
    ]);
    // a step in the minutes with a fixed hour: the first copies only
    expect(walk(cron('*/30 1 * * *', 'America/New_York'), ms('2027-11-07T04:30:00Z'), 3)).toEqual([
      '2027-11-07T05:00:00.000Z', // 01:00 EDT
      '2027-11-07T05:30:00.000Z', // 01:30 EDT
      '2027-11-08T06:00:00.000Z', // 01:00 EST the next day
    ]);
  });
  it('Europe/Berlin 2027: 02:30 on 03-28 runs at 03:30 CEST; on 10-31 once at 02:30 CEST', () => {
    expect(walk(cron('30 2 * * *', 'Europe/Berlin'), ms('2027-03-26T12:00:00Z'), 4)).toEqual([
      '2027-03-27T01:30:00.000Z',
      '2027-03-28T01:30:00.000Z',
      '2027-03-29T00:30:00.000Z',
      '2027-03-30T00:30:00.000Z',
    ]);
    expect(walk(cron('30 2 * * *', 'Europe/Berlin'), ms('2027-10-29T12:00:00Z'), 4)).toEqual([
      '2027-10-30T00:30:00.000Z',
      '2027-10-31T00:30:00.000Z',
      '2027-11-01T01:30:00.000Z',
      '2027-11-02T01:30:00.000Z',
    ]);
  });
  it('a repeated local time runs at its first occurrence also when asked from inside the repeated stretch', () => {
    // 01:30 EDT (05:30Z) is past at 06:10Z (01:10 EST): the 01:30 EST copy does not run; the next is the 8th.
    expect(walk(cron('30 1 * * *', 'America/New_York'), ms('2027-11-07T06:10:00Z'), 2)).toEqual([
      '2027-11-08T06:30:00.000Z',
      '2027-11-09T06:30:00.000Z',
    ]);
    // what a fire_once catch-up of 05:30Z started at 06:10Z computes next: not 06:30Z (a second run of 01:30)
    expect(iso(nextOccurrence(cron('30 1 * * *', 'America/New_York'), ms('2027-11-07T06:10:00Z')))).toBe('2027-11-08T06:30:00.000Z');
    // an every-hour expression counts elapsed time: the second copy runs
    expect(walk(cron('30 * * * *', 'America/New_York'), ms('2027-11-07T06:10:00Z'), 1)).toEqual(['2027-11-07T06:30:00.000Z']);
    // Atlantic/Azores falls back over midnight (01:00 +00:00 to 00:00 -01:00 on 2027-10-31): 00:00 at its first copy
    expect(walk(cron('0 0 * * *', 'Atlantic/Azores'), ms('2027-10-29T12:00:00Z'), 3)).toEqual([
      '2027-10-30T00:00:00.000Z',
      '2027-10-31T00:00:00.000Z',
      '2027-11-01T01:00:00.000Z',
    ]);
    // Antarctica/Troll falls back two hours (03:00 +02:00 to 01:00 +00:00 on 2027-10-31): 02:00 runs once, at 00:00Z
    expect(walk(cron('0 2 * * *', 'Antarctica/Troll'), ms('2027-10-30T00:00:00Z'), 3)).toEqual([
      '2027-10-30T00:00:00.000Z',
      '2027-10-31T00:00:00.000Z',
      '2027-11-01T02:00:00.000Z',
    ]);
  });
  // Lord Howe falls back 30 minutes at 02:00 local (+11:00) on 2027-04-04: 01:30 .. 01:59 happen twice, then +10:30.
  // cron-parser's own walk gives up there ("loop limit exceeded"), which ended every daily job of the zone.
  it('Australia/Lord_Howe fall back 2027-04-04 (30 min): daily jobs go on, a repeated time runs once', () => {
    const daily = cron('0 12 * * *', 'Australia/Lord_Howe');
    expect(walk(daily, ms('2027-04-01T00:00:00Z'), 5)).toEqual([
      '2027-04-01T01:00:00.000Z',
      '2027-04-02T01:00:00.000Z',
      '2027-04-03T01:00:00.000Z',
      '2027-04-04T01:30:00.000Z',
      '2027-04-05T01:30:00.000Z',
    ]);
    // the next of a job that just ran on the 3rd, with one search's steps (what `fired` computes)
    expect(iso(nextOccurrence(daily, ms('2027-04-03T01:00:00Z')))).toBe('2027-04-04T01:30:00.000Z');
    // 01:45 happens at 14:45Z (+11:00) and 15:15Z (+10:30): the first one
    expect(walk(cron('45 1 * * *', 'Australia/Lord_Howe'), ms('2027-04-02T00:00:00Z'), 3)).toEqual([
      '2027-04-02T14:45:00.000Z',
      '2027-04-03T14:45:00.000Z',
      '2027-04-04T15:15:00.000Z',
    ]);
    // hourly on the wall clock: 01:00 (+11:00), then 02:00 (+10:30) an hour and a half later
    expect(walk(cron('0 * * * *', 'Australia/Lord_Howe'), ms('2027-04-03T13:30:00Z'), 3)).toEqual([
      '2027-04-03T14:00:00.000Z',
      '2027-04-03T15:30:00.000Z',
      '2027-04-03T16:30:00.000Z',
    ]);
  });
});

/** The local calendar day of an instant in a zone, as YYYY-MM-DD. */
const dayFormats = new Map<string, Intl.DateTimeFormat>();
function localDay(t: number, timeZone: string): string {
  let f = dayFormats.get(timeZone);
  if (f === undefined) {
    f = new Intl.DateTimeFormat('en-CA', { timeZone, year: 'numeric', month: '2-digit', day: '2-digit' });
    dayFormats.set(timeZone, f);
  }
  return f.format(t);
}

describe('properties (fast-check)', () => {
  const zones = ['America/New_York', 'Europe/Berlin', 'Australia/Sydney', 'America/Santiago'];
  const start2027 = ms('2027-01-01T00:00:00Z');

  it('nextOccurrence is strictly increasing', () => {
    const schedules = fc.oneof(
      fc.record({
        kind: fc.constant('cron' as const),
        cron: fc.constantFrom('*/30 * * * *', '30 2 * * *', '0 1-3 * * *', '15 */7 * * * *', '0 0 9 * * MON-FRI'),
        timezone: fc.constantFrom(...zones),
        startAtMs: fc.constant(null),
      }),
      fc.record({
        kind: fc.constant('every' as const),
        everyMs: fc.integer({ min: 10, max: 86_400_000 }),
        startAtMs: fc.integer({ min: start2027 - 1e10, max: start2027 + 1e10 }),
      }),
    );
    fc.assert(
      fc.property(schedules, fc.integer({ min: start2027, max: start2027 + 2 * 365 * 86_400_000 }), (s, from) => {
        let prev = firstOccurrence(s, from);
        expect(prev).not.toBeNull();
        expect(prev!).toBeGreaterThanOrEqual(from);
        for (let i = 0; i < 20; i++) {
          const next = nextOccurrence(s, prev!);
          expect(next).not.toBeNull();
          expect(next!).toBeGreaterThan(prev!);
          prev = next;
        }
      }),
      { numRuns: 60, seed: 20270314 },
    );
  });

  it('a daily cron in a DST zone fires exactly once per local day over 2 years', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...zones),
        fc.integer({ min: 0, max: 23 }),
        fc.constantFrom(0, 15, 30, 45),
        (zone, hour, minute) => {
          const s = cron(`${minute} ${hour} * * *`, zone);
          const from = ms('2027-01-01T12:00:00Z');
          const days: string[] = [];
          let at = firstOccurrence(s, from);
          while (at !== null && at < from + 730 * 86_400_000) {
            days.push(localDay(at, zone));
            at = nextOccurrence(s, at);
          }
          expect(new Set(days).size).toBe(days.length); // never twice a day
          // never skips a day: consecutive fires are on consecutive local days
          for (let i = 1; i < days.length; i++) {
            const gapDays = (Date.parse(days[i]!) - Date.parse(days[i - 1]!)) / 86_400_000;
            expect(gapDays, `${zone} ${hour}:${minute} ${days[i - 1]} -> ${days[i]}`).toBe(1);
          }
          expect(days.length).toBeGreaterThanOrEqual(729);
        },
      ),
      { numRuns: 12, seed: 1107 },
    );
  });
});

describe('previewOccurrences', () => {
  it('returns count occurrences, clamps negative counts', () => {
    const s = cron('0 0 * * *');
    expect(previewOccurrences(s, ms('2027-01-01T00:00:00Z'), 3).map(iso)).toEqual([
      '2027-01-01T00:00:00.000Z',
      '2027-01-02T00:00:00.000Z',
      '2027-01-03T00:00:00.000Z',
    ]);
    expect(previewOccurrences(s, 0, -1)).toEqual([]);
    expect(previewOccurrences(s, 0, 0)).toEqual([]);
  });
});

describe('fireAllStart', () => {
  it('keeps the first missed when at most misfireFireAllMax were missed', () => {
    const s: Schedule = { kind: 'every', everyMs: 1000, startAtMs: 0 };
    expect(fireAllStart(s, 5000, 5000 + (limits.misfireFireAllMax - 1) * 1000)).toBe(5000);
  });
  it('every: replays only the latest misfireFireAllMax', () => {
    const s: Schedule = { kind: 'every', everyMs: 1000, startAtMs: 0 };
    const limitMs = 5000 + (limits.misfireFireAllMax + 9) * 1000;
    const start = fireAllStart(s, 5000, limitMs);
    expect(start).toBe(5000 + 10 * 1000);
    expect((limitMs - start) / 1000 + 1).toBe(limits.misfireFireAllMax);
  });
  it('cron: replays only the latest misfireFireAllMax', () => {
    const s = cron('* * * * *');
    const next = ms('2027-01-01T00:00:00Z');
    const limitMs = next + (limits.misfireFireAllMax + 99) * 60_000 + 30_000;
    const start = fireAllStart(s, next, limitMs);
    expect(start).toBe(next + 100 * 60_000);
    expect(previewOccurrences(s, start, limits.misfireFireAllMax + 1).filter((t) => t <= limitMs)).toHaveLength(
      limits.misfireFireAllMax,
    );
    expect(fireAllStart(s, next, next + 10 * 60_000)).toBe(next);
  });
});

describe('validateCron', () => {
  it('accepts 5 and 6 fields and macros', () => {
    expect(validateCron('*/5 * * * *', 'UTC')).toBeNull();
    expect(validateCron('0 0 9 * * MON-FRI', 'Europe/Berlin')).toBeNull();
    expect(validateCron('0 0 * * THU', 'America/New_York')).toBeNull();
    expect(validateCron('@daily', 'UTC')).toBeNull();
  });
  it('names the field at fault', () => {
    expect(validateCron('* * * *', 'UTC')).toEqual({
      field: 'schedule.cron',
      message: 'expected 5 fields, or 6 with seconds first; got 4',
    });
    expect(validateCron('* * * * * * *', 'UTC')?.field).toBe('schedule.cron');
    expect(validateCron('61 * * * *', 'UTC')?.message).toMatch(/61/);
    expect(validateCron('H * * * *', 'UTC')?.message).toMatch(/H/);
    expect(validateCron('0 0 31 2 *', 'UTC')?.field).toBe('schedule.cron');
    expect(validateCron('', 'UTC')?.field).toBe('schedule.cron');
    expect(validateCron('@often', 'UTC')?.field).toBe('schedule.cron');
    expect(validateCron('* * * * *', 'Mars/Olympus')).toEqual({
      field: 'schedule.timezone',
      message: 'unknown time zone "Mars/Olympus"',
    });
    expect(validateCron('* * * * *', '')?.field).toBe('schedule.timezone');
  });
});

describe('cron searches are bounded in steps (schedulerLimits)', () => {
  const rare = (tz = 'UTC'): Schedule => cron('0 0 0 ? 2 1#5', tz); // the fifth Monday of February: Feb 29 on a Monday
  const from = ms('2026-12-01T00:00:00Z');

  it('a preview that would search too far is refused on schedule.cron instead of running for seconds', () => {
    let thrown: unknown = null;
    try {
      previewOccurrences(rare('Europe/Berlin'), from, 1000);
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(PunctualError);
    const e = thrown as PunctualError;
    expect(e.code).toBe('invalid_argument');
    expect(e.errors).toEqual([{ field: 'schedule.cron', message: expect.stringContaining('search bound') }]);
  });

  it('a next match within one search is found; one beyond it ends the schedule, the same answer every time', () => {
    expect(iso(firstOccurrence(rare(), from))).toBe('2044-02-29T00:00:00.000Z');
    // 2044 -> 2072 is 28 years of February days: more than one search's steps
    const after = ms('2044-02-29T00:00:00Z');
    expect(nextOccurrence(rare(), after)).toBeNull();
    expect(nextOccurrence(rare(), after)).toBeNull(); // a cached answer is the same answer
    expect(iso(nextOccurrence(rare(), ms('2071-01-01T00:00:00Z')))).toBe('2072-02-29T00:00:00.000Z');
  });

  it('common expressions are not affected: 1000 occurrences of a daily, a weekly and a per-second cron', () => {
    expect(walk(cron('30 2 * * *', 'America/New_York'), from, 1000)).toHaveLength(1000);
    expect(walk(cron('0 0 12 * * SUN', 'Europe/Berlin'), from, 1000)).toHaveLength(1000);
    expect(walk(cron('*/5 * * * * *'), from, 1000)).toHaveLength(1000);
    expect(walk(cron('0 0 29 2 *'), from, 20)).toHaveLength(20); // Feb 29: every 4 years, 8 across 2100
  });

  it('a preview that ran out of steps leaves later computations their full allowance', () => {
    expect(() => previewOccurrences(rare(), from, 10)).toThrow(/search bound/);
    expect(iso(firstOccurrence(rare(), from))).toBe('2044-02-29T00:00:00.000Z');
  });

  it('validateCron stays bounded and still refuses an expression that never matches', () => {
    expect(validateCron('0 0 0 ? 2 1#5', 'UTC')).toBeNull();
    expect(validateCron('0 0 31 4 *', 'UTC')?.field).toBe('schedule.cron');
  });
});
