/**
 * Exclusion calendars in the pure state machine: local dates in the calendar's zone, the next occurrence past an
 * excluded stretch on create, fire, skip and resume, the bound on jumps, unknown and deleted calendars, what a
 * calendar change does to an occurrence already computed, the preview, and the model's checks of the new command.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { limits, schedulerLimits } from '../core/limits.js';
import { calendarRule, dayNumber, excludedSpans, localDay, previewExcluding, skipExcluded, startOfLocalDay } from './calendar.js';
import { checkCalendarRecord, checkCommand, problemOf } from './check.js';
import { decodeCommand, encodeCommand } from './codec.js';
import type { Command } from './commands.js';
import { apply } from './machine.js';
import { MemoryStore } from './memory-store.js';
import { firstOccurrence, nextOccurrence } from './schedule.js';
import type { CalendarRecord, JobRecord, JobSpec, Schedule } from './types.js';

const H = 3_600_000;
const D = 24 * H;
const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

const calendar = (name: string, over: Partial<CalendarRecord> = {}): CalendarRecord => ({
  name,
  timezone: 'Europe/Berlin',
  dates: [],
  ranges: [],
  description: null,
  createdAtMs: 0,
  updatedAtMs: 0,
  ...over,
});

const spec = (id: string, schedule: JobSpec['schedule'], over: Partial<JobSpec> = {}): JobSpec => ({
  id,
  task: null,
  callback: {
    url: 'http://127.0.0.1:9/hook',
    method: 'POST',
    headers: {},
    timeoutMs: 1000,
    retry: { maxAttempts: 1, initialBackoffMs: 0, maxBackoffMs: 0, multiplier: 1, jitter: false },
    signingSecret: null,
    maxConcurrency: 1,
  },
  payload: new Uint8Array(0),
  payloadEncoding: 'json',
  schedule,
  endAtMs: null,
  maxRuns: 0,
  misfire: 'fire_once',
  overlap: 'allow',
  metadata: null,
  requestDigest: `d-${id}`,
  idempotencyKey: null,
  ...over,
});

/** 09:00 Berlin every day (08:00Z in winter). */
const dailyNine = (exclude?: string[]): Schedule => ({
  kind: 'cron', cron: '0 9 * * *', timezone: 'Europe/Berlin', startAtMs: null, ...(exclude ? { exclude } : {}),
});

function bed() {
  const store = new MemoryStore();
  const run = (c: Command) => apply(store, c);
  const putCalendar = (c: CalendarRecord, nowMs = 0) => run({ type: 'put_calendar', nowMs, calendar: c });
  const create = (s: JobSpec, nowMs: number) => {
    const r = run({ type: 'create_jobs', nowMs, shard: 0, jobs: [s] });
    if (r.result.type !== 'create_jobs') throw new Error('wrong result');
    return r.result.items[0]!;
  };
  const job = (id: string): JobRecord => store.getJob(id)!;
  const fire = (id: string, at: number) =>
    run({ type: 'fired', nowMs: at, nodeId: 'n1', items: [{ jobId: id, scheduledAtMs: at, attempt: 1, startedAtMs: at }] });
  return { store, run, putCalendar, create, job, fire };
}

describe('local dates', () => {
  it('dayNumber takes real YYYY-MM-DD dates only', () => {
    expect(dayNumber('1970-01-02')).toBe(1);
    expect(dayNumber('2028-02-29')).not.toBeNull();
    for (const bad of ['2027-02-29', '2027-13-01', '2027-00-10', '2027-1-01', '27-01-01', '2027-01-01T00:00', '0000-01-01']) {
      expect(dayNumber(bad)).toBeNull();
    }
  });

  it('the date of an instant and the start of a day are the calendar zone\'s, DST days included', () => {
    const t = Date.parse('2027-12-24T23:30:00Z'); // 00:30 on the 25th in Berlin, still the 24th in UTC
    expect(localDay(t, 'Europe/Berlin')).toBe(dayNumber('2027-12-25'));
    expect(localDay(t, 'UTC')).toBe(dayNumber('2027-12-24'));
    expect(iso(startOfLocalDay(dayNumber('2027-12-25')!, 'Europe/Berlin'))).toBe('2027-12-24T23:00:00.000Z');
    expect(iso(startOfLocalDay(dayNumber('2027-07-01')!, 'Europe/Berlin'))).toBe('2027-06-30T22:00:00.000Z');
    expect(iso(startOfLocalDay(dayNumber('2027-03-28')!, 'Europe/Berlin'))).toBe('2027-03-27T23:00:00.000Z'); // spring forward day
    expect(iso(startOfLocalDay(dayNumber('2027-03-29')!, 'Europe/Berlin'))).toBe('2027-03-28T22:00:00.000Z');
    expect(iso(startOfLocalDay(dayNumber('2027-01-01')!, 'Pacific/Kiritimati'))).toBe('2026-12-31T10:00:00.000Z'); // UTC+14
    // Sao Paulo moved its clocks at midnight (2018-11-04 00:00 did not exist): the day starts at 01:00 local.
    expect(iso(startOfLocalDay(dayNumber('2018-11-04')!, 'America/Sao_Paulo'))).toBe('2018-11-04T03:00:00.000Z');
  });

  it('dates and ranges merge into sorted stretches (adjacent days join)', () => {
    const spans = excludedSpans({ dates: ['2027-12-25', '2027-12-23'], ranges: [{ from: '2027-12-26', to: '2027-12-31' }, { from: '2027-12-01', to: '2027-12-02' }] });
    const d = (s: string) => dayNumber(s)!;
    expect(spans).toEqual([[d('2027-12-01'), d('2027-12-02')], [d('2027-12-23'), d('2027-12-23')], [d('2027-12-25'), d('2027-12-31')]]);
  });
});

describe('the next occurrence past excluded dates', () => {
  it('create: a daily job whose first date is excluded starts on the first date that is not', () => {
    const b = bed();
    b.putCalendar(calendar('hol', { dates: ['2027-12-25', '2027-12-26'], ranges: [{ from: '2027-12-28', to: '2027-12-29' }] }));
    const now = Date.parse('2027-12-24T12:00:00Z'); // after 09:00 Berlin on the 24th
    const item = b.create(spec('j', dailyNine(['hol'])), now);
    expect(item.ok).toBe(true);
    expect(iso(b.job('j').nextFireAtMs)).toBe('2027-12-27T08:00:00.000Z');
    // fired on the 27th: the 28th and 29th are excluded, the 30th runs
    b.fire('j', b.job('j').nextFireAtMs!);
    expect(iso(b.job('j').nextFireAtMs)).toBe('2027-12-30T08:00:00.000Z');
    expect(b.job('j').schedule).toMatchObject({ exclude: ['hol'] });
  });

  it('the date is the calendar\'s local date, not the job\'s zone nor UTC', () => {
    const b = bed();
    // 23:30 UTC every day: already the next day in Tokyo.
    b.putCalendar(calendar('jp', { timezone: 'Asia/Tokyo', dates: ['2027-05-04'] }));
    const sched: Schedule = { kind: 'cron', cron: '30 23 * * *', timezone: 'UTC', startAtMs: null, exclude: ['jp'] };
    b.create(spec('j', sched), Date.parse('2027-05-02T12:00:00Z'));
    expect(iso(b.job('j').nextFireAtMs)).toBe('2027-05-02T23:30:00.000Z'); // the 3rd in Tokyo
    b.fire('j', b.job('j').nextFireAtMs!);
    expect(iso(b.job('j').nextFireAtMs)).toBe('2027-05-04T23:30:00.000Z'); // the 3rd 23:30Z is the 4th in Tokyo
  });

  it('every_ms: past the stretch to the first multiple of the interval after it; skips, resumes and patches skip too', () => {
    const b = bed();
    const start = Date.parse('2027-06-01T00:00:00Z');
    b.putCalendar(calendar('june', { timezone: 'UTC', ranges: [{ from: '2027-06-02', to: '2027-06-03' }] }));
    b.create(spec('e', { kind: 'every', everyMs: 5 * H, startAtMs: start, exclude: ['june'] }, { misfire: 'skip' }), start - 1);
    expect(b.job('e').nextFireAtMs).toBe(start);
    // a skipped run advances past the excluded days as a fired one does: 06-02 and 06-03 are excluded, the first
    // occurrence of 06-04 is start + 75 h (the first multiple of 5 h from its midnight, start + 72 h)
    let at = start;
    for (const k of [1, 2, 3, 4]) {
      b.run({ type: 'skipped', nowMs: at, items: [{ jobId: 'e', scheduledAtMs: at, reason: 'overlap' }] });
      at = start + k * 5 * H;
      expect(b.job('e').nextFireAtMs).toBe(at);
    }
    b.run({ type: 'skipped', nowMs: at, items: [{ jobId: 'e', scheduledAtMs: at, reason: 'overlap' }] });
    expect(iso(b.job('e').nextFireAtMs)).toBe('2027-06-04T03:00:00.000Z');
    // paused, resumed on an excluded day long after: skip jumps to the first occurrence after now, then past the stretch
    b.run({ type: 'pause_job', nowMs: at, id: 'e' });
    b.putCalendar(calendar('june', { timezone: 'UTC', ranges: [{ from: '2027-06-02', to: '2027-06-03' }, { from: '2027-06-10', to: '2027-06-10' }] }), at);
    b.run({ type: 'resume_job', nowMs: Date.parse('2027-06-10T12:00:00Z'), id: 'e' });
    // skip: the first occurrence after now is 06-10T14:00 (start + 230 h), excluded since the change: 06-11T00:00
    expect(iso(b.job('e').nextFireAtMs)).toBe('2027-06-11T00:00:00.000Z');
    // a patched schedule is checked the same way
    const patched = b.run({
      type: 'patch_job', nowMs: Date.parse('2027-06-09T23:00:00Z'), id: 'e',
      patch: { schedule: { kind: 'every', everyMs: 7 * H, startAtMs: Date.parse('2027-06-10T00:00:00Z'), exclude: ['june'] } },
    });
    expect(patched.result).toMatchObject({ result: { ok: true } });
    expect(iso(b.job('e').nextFireAtMs)).toBe('2027-06-11T04:00:00.000Z'); // 28 h after its start
  });

  it('several calendars: an occurrence excluded by any of them does not run', () => {
    const b = bed();
    b.putCalendar(calendar('a', { dates: ['2027-12-25'] }));
    b.putCalendar(calendar('b', { timezone: 'America/New_York', dates: ['2027-12-26'] }));
    b.create(spec('j', dailyNine(['a', 'b'])), Date.parse('2027-12-24T12:00:00Z'));
    // 09:00 Berlin on the 26th is 03:00 on the 26th in New York: excluded by b
    expect(iso(b.job('j').nextFireAtMs)).toBe('2027-12-27T08:00:00.000Z');
  });

  it('a calendar that excludes every date ends nothing forever: create is refused at once, on schedule.exclude', () => {
    const b = bed();
    b.putCalendar(calendar('all', { ranges: [{ from: '0001-01-01', to: '9999-12-31' }] }));
    const item = b.create(spec('j', dailyNine(['all'])), Date.parse('2027-01-01T00:00:00Z'));
    expect(item).toMatchObject({ ok: false, code: 'invalid_argument', field: 'schedule.exclude' });
    expect(b.store.getJob('j')).toBeNull();
  });

  it('more excluded stretches in the way than calendarJumpsMax: no next occurrence (bounded work, same on every replica)', () => {
    const b = bed();
    const start = Date.parse('2030-01-01T12:00:00Z');
    // two calendars of 1,000 single days each, every other day between them: 2,000 stretches, each holding one
    // occurrence of an every-other-day schedule
    const days = (offset: number) => Array.from({ length: limits.calendarEntriesMax }, (_, i) => new Date(start + (4 * i + offset) * D).toISOString().slice(0, 10));
    b.putCalendar(calendar('even', { timezone: 'UTC', dates: days(0) }));
    b.putCalendar(calendar('odd', { timezone: 'UTC', dates: days(2) }));
    expect(schedulerLimits.calendarJumpsMax).toBeLessThan(2 * limits.calendarEntriesMax);
    const item = b.create(spec('j', { kind: 'every', everyMs: 2 * D, startAtMs: start, exclude: ['even', 'odd'] }), start - 1);
    expect(item).toMatchObject({ ok: false, field: 'schedule.exclude' });
    // with one of them, 1,000 stretches: found past the last
    const one = b.create(spec('k', { kind: 'every', everyMs: 4 * D, startAtMs: start, exclude: ['even'] }), start - 1);
    expect(one.ok).toBe(true);
    expect(b.job('k').nextFireAtMs).toBe(start + 4 * limits.calendarEntriesMax * D);
  });

  it('an unknown calendar is refused on create and on patch, naming the entry', () => {
    const b = bed();
    b.putCalendar(calendar('hol'));
    const item = b.create(spec('j', dailyNine(['hol', 'nope'])), 0);
    expect(item).toMatchObject({ ok: false, code: 'invalid_argument', field: 'schedule.exclude[1]' });
    b.create(spec('k', dailyNine()), 0);
    const r = b.run({ type: 'patch_job', nowMs: 1, id: 'k', patch: { schedule: dailyNine(['nope']) } });
    expect(r.result).toMatchObject({ result: { ok: false, field: 'schedule.exclude[0]' } });
    expect(b.job('k').schedule).not.toHaveProperty('exclude');
  });
});

describe('calendar changes', () => {
  it('apply to occurrences computed afterwards; the occurrence already computed stays', () => {
    const b = bed();
    b.putCalendar(calendar('hol'));
    b.create(spec('j', dailyNine(['hol'])), Date.parse('2027-12-24T12:00:00Z'));
    expect(iso(b.job('j').nextFireAtMs)).toBe('2027-12-25T08:00:00.000Z');
    b.putCalendar(calendar('hol', { dates: ['2027-12-25', '2027-12-26'] }), 1);
    expect(iso(b.job('j').nextFireAtMs)).toBe('2027-12-25T08:00:00.000Z'); // computed before the change: runs
    b.fire('j', b.job('j').nextFireAtMs!);
    expect(iso(b.job('j').nextFireAtMs)).toBe('2027-12-27T08:00:00.000Z'); // the 26th is excluded now
  });

  it('put keeps createdAtMs; delete is allowed while jobs name it, and the name then excludes nothing', () => {
    const b = bed();
    const first = b.putCalendar(calendar('hol', { dates: ['2027-12-25'] }), 10);
    expect(first.result).toMatchObject({ type: 'put_calendar', created: true, calendar: { createdAtMs: 10, updatedAtMs: 10 } });
    const again = b.putCalendar(calendar('hol', { dates: ['2027-12-25', '2027-12-26'] }), 20);
    expect(again.result).toMatchObject({ created: false, calendar: { createdAtMs: 10, updatedAtMs: 20 } });
    b.create(spec('j', dailyNine(['hol'])), Date.parse('2027-12-24T12:00:00Z'));
    expect(iso(b.job('j').nextFireAtMs)).toBe('2027-12-27T08:00:00.000Z');
    expect(b.run({ type: 'delete_calendar', nowMs: 30, name: 'hol' }).result).toEqual({ type: 'delete_calendar', result: { ok: true } });
    expect(b.run({ type: 'delete_calendar', nowMs: 31, name: 'hol' }).result).toMatchObject({ result: { ok: false, code: 'not_found' } });
    b.fire('j', b.job('j').nextFireAtMs!);
    expect(iso(b.job('j').nextFireAtMs)).toBe('2027-12-28T08:00:00.000Z');
  });
});

describe('preview', () => {
  it('lists the occurrences that are not excluded; without calendars it is the plain preview', () => {
    const hol = calendarRule(calendar('hol', { dates: ['2027-12-25', '2027-12-26'] }));
    const from = Date.parse('2027-12-24T00:00:00Z');
    expect(previewExcluding(dailyNine(['hol']), from, 3, [hol]).map(iso)).toEqual([
      '2027-12-24T08:00:00.000Z', '2027-12-27T08:00:00.000Z', '2027-12-28T08:00:00.000Z',
    ]);
    expect(previewExcluding(dailyNine(), from, 2, []).map(iso)).toEqual(['2027-12-24T08:00:00.000Z', '2027-12-25T08:00:00.000Z']);
    const all = calendarRule(calendar('all', { ranges: [{ from: '2027-01-01', to: '9999-12-31' }] }));
    expect(previewExcluding(dailyNine(['all']), from, 3, [all])).toEqual([]);
  });

  it('the example of docs/api.md: Christmas week in Berlin', () => {
    const hol = calendarRule(calendar('holidays-de', { dates: ['2027-12-25', '2027-12-26'], ranges: [{ from: '2027-12-24', to: '2027-12-31' }] }));
    expect(previewExcluding(dailyNine(['holidays-de']), Date.parse('2027-12-20T06:00:00Z'), 5, [hol]).map(iso)).toEqual([
      '2027-12-20T08:00:00.000Z', '2027-12-21T08:00:00.000Z', '2027-12-22T08:00:00.000Z', '2027-12-23T08:00:00.000Z',
      '2028-01-01T08:00:00.000Z',
    ]);
  });

  it('skipExcluded of a once occurrence that is excluded: none (only recurring schedules move on)', () => {
    const hol = calendarRule(calendar('hol', { dates: ['2027-12-25'] }));
    expect(skipExcluded({ kind: 'once', atMs: Date.parse('2027-12-25T12:00:00Z') }, Date.parse('2027-12-25T12:00:00Z'), [hol])).toBeNull();
  });
});

describe('checks of the new command and field', () => {
  const good = calendar('hol', { dates: ['2027-12-25', '2027-12-26'], ranges: [{ from: '2027-12-27', to: '2027-12-31' }], description: 'x' });

  it('put_calendar and delete_calendar pass checkCommand and round-trip through the codec', () => {
    const put: Command = { type: 'put_calendar', nowMs: 5, calendar: good };
    const del: Command = { type: 'delete_calendar', nowMs: 6, name: 'hol' };
    for (const c of [put, del]) {
      expect(() => checkCommand(c)).not.toThrow();
      expect(decodeCommand(encodeCommand(c))).toEqual(c);
    }
  });

  it.each([
    ['bad name', { name: 'a/b' }, 'calendar.name'],
    ['unknown zone', { timezone: 'Mars/Olympus' }, 'calendar.timezone'],
    ['not a date', { dates: ['2027-02-30'] }, 'calendar.dates[0]'],
    ['unsorted dates', { dates: ['2027-12-26', '2027-12-25'] }, 'calendar.dates[1]'],
    ['repeated date', { dates: ['2027-12-25', '2027-12-25'] }, 'calendar.dates[1]'],
    ['range backwards', { ranges: [{ from: '2027-12-31', to: '2027-12-01' }] }, 'calendar.ranges[0].to'],
    ['too many entries', { dates: Array.from({ length: limits.calendarEntriesMax + 1 }, (_, i) => new Date(Date.UTC(2027, 0, 1 + i)).toISOString().slice(0, 10)) }, 'calendar.dates'],
    ['description too long', { description: 'x'.repeat(limits.calendarDescriptionLengthMax + 1) }, 'calendar.description'],
  ])('put_calendar with %s is refused, naming the field', (_name, over, field) => {
    expect(problemOf(() => checkCommand({ type: 'put_calendar', nowMs: 1, calendar: { ...good, ...over } }))?.field).toBe(field);
  });

  it('an unknown field: refused strictly (a forwarded op), accepted leniently (the log of a newer version)', () => {
    const extra = { ...good, colour: 'red', ranges: [{ from: '2027-12-27', to: '2027-12-31', note: 'x' }] };
    expect(problemOf(() => checkCalendarRecord(extra, '', true))?.field).toBe('colour');
    expect(problemOf(() => checkCalendarRecord(extra, ''))).toBeNull();
    expect(problemOf(() => checkCommand({ type: 'put_calendar', nowMs: 1, calendar: extra }))).toBeNull();
  });

  it('schedule.exclude: 1 to calendarsPerScheduleMax distinct names, recurring schedules only', () => {
    const job = (schedule: unknown) => ({ type: 'create_jobs', nowMs: 1, shard: 0, jobs: [{ ...spec('j', dailyNine()), schedule }] });
    expect(problemOf(() => checkCommand(job(dailyNine(['a', 'b']))))).toBeNull();
    expect(problemOf(() => checkCommand(job(dailyNine([]))))?.field).toBe('jobs[0].schedule.exclude');
    expect(problemOf(() => checkCommand(job(dailyNine(['a', 'a']))))?.field).toBe('jobs[0].schedule.exclude[1]');
    expect(problemOf(() => checkCommand(job(dailyNine(['a/b']))))?.field).toBe('jobs[0].schedule.exclude[0]');
    const many = Array.from({ length: limits.calendarsPerScheduleMax + 1 }, (_, i) => `c${i}`);
    expect(problemOf(() => checkCommand(job(dailyNine(many))))?.field).toBe('jobs[0].schedule.exclude');
    expect(problemOf(() => checkCommand(job({ kind: 'once', atMs: 5, exclude: ['a'] })))).toBeNull(); // lenient: ignored
    const strict = problemOf(() => checkCommand({ type: 'put_calendar', nowMs: 1, calendar: good }));
    expect(strict).toBeNull();
  });
});

describe('skipExcluded, on random calendars and schedules', () => {
  const zones = ['UTC', 'Europe/Berlin', 'America/New_York', 'Asia/Tokyo', 'Australia/Lord_Howe', 'America/Sao_Paulo', 'Pacific/Kiritimati'];
  const base = Date.parse('2027-03-01T00:00:00Z');
  const dayText = (n: number) => new Date(base + n * D).toISOString().slice(0, 10);
  const arbCalendar = fc.record({
    timezone: fc.constantFrom(...zones),
    days: fc.uniqueArray(fc.integer({ min: 0, max: 300 }), { maxLength: 40 }),
    ranges: fc.array(fc.tuple(fc.integer({ min: 0, max: 300 }), fc.integer({ min: 0, max: 20 })), { maxLength: 5 }),
  });
  const arbSchedule: fc.Arbitrary<Schedule> = fc.oneof(
    fc.record({ everyMs: fc.constantFrom(H, 5 * H, 7 * H, D, 3 * D), offsetMs: fc.integer({ min: 0, max: D }) }).map(
      ({ everyMs, offsetMs }): Schedule => ({ kind: 'every', everyMs, startAtMs: base + offsetMs }),
    ),
    fc.record({ cron: fc.constantFrom('0 9 * * *', '30 2 * * *', '0 0 * * 1-5', '15 */6 * * *', '0 12 1 * *'), timezone: fc.constantFrom(...zones) }).map(
      ({ cron, timezone }): Schedule => ({ kind: 'cron', cron, timezone, startAtMs: null }),
    ),
  );

  it('the answer is an occurrence of the schedule, not excluded, and no occurrence between is left out that is not', () => {
    fc.assert(
      fc.property(fc.array(arbCalendar, { minLength: 1, maxLength: 3 }), arbSchedule, fc.integer({ min: 0, max: 200 * D }), (cals, schedule, fromOffset) => {
        const rules = cals.map((c, i) =>
          calendarRule(calendar(`c${i}`, {
            timezone: c.timezone,
            dates: [...c.days].sort((a, b) => a - b).map(dayText),
            ranges: c.ranges.map(([from, len]) => ({ from: dayText(from), to: dayText(from + len) })),
          })),
        ); // prettier-ignore
        const excluded = (at: number) =>
          cals.some((c, i) => rules[i]!.spans.some(([from, to]) => localDay(at, c.timezone) >= from && localDay(at, c.timezone) <= to));
        const first = firstOccurrence(schedule, base + fromOffset);
        const found = skipExcluded(schedule, first, rules);
        // walk the occurrences one by one from `first`: every one before `found` is excluded, `found` is not
        let at = first;
        for (let i = 0; at !== null && at !== found && i < 10_000; i++) {
          expect(excluded(at), new Date(at).toISOString()).toBe(true);
          at = nextOccurrence(schedule, at);
        }
        expect(at).toBe(found);
        if (found !== null) expect(excluded(found)).toBe(false);
      }),
      { numRuns: 150 },
    );
  });
});
