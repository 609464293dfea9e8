import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { limits } from '../core/limits.js';
import { checkSchedule, problemOf } from './check.js';
import { resolveSchedule } from './policy.js';
import { fireAllStart, firstOccurrence, nextOccurrence, offsetAt, previewOccurrences, spreadOffsetOf } from './schedule.js';
import { apply } from './machine.js';
import { MemoryStore } from './memory-store.js';
import type { DstPolicy, JobSpec, Schedule, TaskRecord } from './types.js';

const ms = (iso: string): number => Date.parse(iso);
const iso = (t: number): string => new Date(t).toISOString();
const cron = (expr: string, timezone: string, dst?: DstPolicy): Schedule =>
  dst === undefined ? { kind: 'cron', cron: expr, timezone, startAtMs: null } : { kind: 'cron', cron: expr, timezone, startAtMs: null, dst };
const walk = (s: Schedule, fromMs: number, n: number): string[] => previewOccurrences(s, fromMs, n).map(iso);

const gaps = ['shift_forward', 'skip'] as const;
const repeats = ['first', 'last', 'both'] as const;

describe('dst policies, America/New_York 2027 (the table in docs/api.md)', () => {
  const spring = ms('2027-03-13T12:00:00Z'); // 2027-03-14 02:00 EST -> 03:00 EDT
  const fall = ms('2027-11-06T12:00:00Z'); // 2027-11-07 02:00 EDT -> 01:00 EST
  it('02:30 on the spring-forward day: shift_forward runs at 03:30 EDT, skip does not run', () => {
    expect(walk(cron('30 2 * * *', 'America/New_York', { gap: 'shift_forward', repeat: 'first' }), spring, 2)).toEqual([
      '2027-03-14T07:30:00.000Z', // 03:30 EDT
      '2027-03-15T06:30:00.000Z',
    ]);
    expect(walk(cron('30 2 * * *', 'America/New_York', { gap: 'skip', repeat: 'first' }), spring, 2)).toEqual([
      '2027-03-15T06:30:00.000Z', // 2027-03-14 has no run
      '2027-03-16T06:30:00.000Z',
    ]);
  });
  it('01:30 on the fall-back day: first, last, both', () => {
    const runs = (repeat: DstPolicy['repeat'], n: number) =>
      walk(cron('30 1 * * *', 'America/New_York', { gap: 'shift_forward', repeat }), fall, n);
    expect(runs('first', 2)).toEqual(['2027-11-07T05:30:00.000Z', '2027-11-08T06:30:00.000Z']); // 01:30 EDT
    expect(runs('last', 2)).toEqual(['2027-11-07T06:30:00.000Z', '2027-11-08T06:30:00.000Z']); // 01:30 EST
    expect(runs('both', 3)).toEqual(['2027-11-07T05:30:00.000Z', '2027-11-07T06:30:00.000Z', '2027-11-08T06:30:00.000Z']);
  });
  it('without dst the schedule keeps cron-parser\'s rules (the same as shift_forward + first for a fixed time)', () => {
    const legacy = walk(cron('30 1 * * *', 'America/New_York'), fall, 3);
    expect(walk(cron('30 1 * * *', 'America/New_York', { gap: 'shift_forward', repeat: 'first' }), fall, 3)).toEqual(legacy);
    const legacySpring = walk(cron('30 2 * * *', 'America/New_York'), spring, 3);
    expect(walk(cron('30 2 * * *', 'America/New_York', { gap: 'shift_forward', repeat: 'first' }), spring, 3)).toEqual(legacySpring);
  });
  it('*/30 with a policy: the policy applies to every occurrence whose wall-clock time repeats', () => {
    const from = ms('2027-11-07T04:45:00Z');
    const at = (repeat: DstPolicy['repeat']) => walk(cron('*/30 * * * *', 'America/New_York', { gap: 'shift_forward', repeat }), from, 4);
    expect(at('first')).toEqual(['2027-11-07T05:00:00.000Z', '2027-11-07T05:30:00.000Z', '2027-11-07T07:00:00.000Z', '2027-11-07T07:30:00.000Z']);
    expect(at('last')).toEqual(['2027-11-07T06:00:00.000Z', '2027-11-07T06:30:00.000Z', '2027-11-07T07:00:00.000Z', '2027-11-07T07:30:00.000Z']);
    expect(at('both')).toEqual(['2027-11-07T05:00:00.000Z', '2027-11-07T05:30:00.000Z', '2027-11-07T06:00:00.000Z', '2027-11-07T06:30:00.000Z']);
    // without dst: cron-parser counts elapsed time through both copies (as `both`)
    expect(walk(cron('*/30 * * * *', 'America/New_York'), from, 4)).toEqual(at('both'));
  });
  it('*/30 across the gap: shift_forward and skip give the same runs (02:00 and 02:30 land on 03:00 and 03:30)', () => {
    const from = ms('2027-03-14T06:15:00Z');
    for (const gap of gaps) {
      expect(walk(cron('*/30 * * * *', 'America/New_York', { gap, repeat: 'first' }), from, 3)).toEqual([
        '2027-03-14T06:30:00.000Z', // 01:30 EST
        '2027-03-14T07:00:00.000Z', // 03:00 EDT
        '2027-03-14T07:30:00.000Z',
      ]);
    }
  });
  it('Australia/Lord_Howe (a 30-minute shift): shift_forward moves 02:15 by the gap, to 02:45', () => {
    // cron-parser alone skips this day: the policy runs it.
    const s = cron('15 2 * * *', 'Australia/Lord_Howe', { gap: 'shift_forward', repeat: 'first' });
    expect(walk(s, ms('2027-10-02T12:00:00Z'), 2)).toEqual(['2027-10-02T15:45:00.000Z', '2027-10-03T15:15:00.000Z']);
  });
});

describe('offsetAt', () => {
  it('reads the zone offset from Intl', () => {
    expect(offsetAt('America/New_York', ms('2027-01-01T00:00:00Z'))).toBe(-5 * 3_600_000);
    expect(offsetAt('America/New_York', ms('2027-07-01T00:00:00Z'))).toBe(-4 * 3_600_000);
    expect(offsetAt('Asia/Kolkata', ms('2027-07-01T00:00:00.123Z'))).toBe(5.5 * 3_600_000);
    expect(offsetAt('UTC', ms('1970-01-01T00:00:00Z'))).toBe(0);
  });
});

/** The local date and time of an instant in a zone: [YYYY-MM-DD, HH:MM]. */
const localFormats = new Map<string, Intl.DateTimeFormat>();
function local(t: number, timeZone: string): [string, string] {
  let f = localFormats.get(timeZone);
  if (f === undefined) {
    f = new Intl.DateTimeFormat('en-CA', {
      timeZone, hourCycle: 'h23', year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit',
    });
    localFormats.set(timeZone, f);
  }
  const p = Object.fromEntries(f.formatToParts(t).map((x) => [x.type, x.value]));
  return [`${p.year}-${p.month}-${p.day}`, `${p.hour}:${p.minute}`];
}

/** The offset transitions of a zone in [fromMs, toMs) (binary search inside each day whose offset changes). */
function transitions(zone: string, fromMs: number, toMs: number): Array<{ atMs: number; before: number; after: number }> {
  const out: Array<{ atMs: number; before: number; after: number }> = [];
  const step = 7 * 86_400_000;
  let prev = offsetAt(zone, fromMs);
  for (let t = fromMs; t < toMs; t += step) {
    const next = offsetAt(zone, t + step);
    if (next === prev) continue;
    let lo = t;
    let hi = t + step;
    while (hi - lo > 60_000) {
      const mid = lo + Math.floor((hi - lo) / 2);
      if (offsetAt(zone, mid) === prev) lo = mid;
      else hi = mid;
    }
    const before = prev;
    const after = offsetAt(zone, hi);
    out.push({ atMs: hi - (hi % 60_000), before, after });
    prev = next;
  }
  return out;
}

const pad = (n: number): string => String(n).padStart(2, '0');

describe('property: a daily cron with a dst policy on every IANA zone\'s transition days (next 10 years)', () => {
  const zones = Intl.supportedValuesOf('timeZone');
  const from = ms('2027-01-01T00:00:00Z');
  const to = from + 10 * 365 * 86_400_000;
  const seed = Number(process.env.DST_PROPERTY_SEED ?? 20271107);
  const numRuns = Number(process.env.DST_PROPERTY_RUNS ?? 400);
  it(`runs once a local day at the cron's time, as the policy says (seed ${seed}, ${numRuns} runs)`, () => {
    const zoneCache = new Map<string, ReturnType<typeof transitions>>();
    fc.assert(
      fc.property(
        fc.constantFrom(...zones),
        fc.nat(),
        fc.integer({ min: 0, max: 23 }),
        fc.constantFrom(0, 15, 30, 45),
        fc.constantFrom(...gaps),
        fc.constantFrom(...repeats),
        (zone, pick, hour, minute, gap, repeat) => {
          let ts = zoneCache.get(zone);
          if (ts === undefined) zoneCache.set(zone, (ts = transitions(zone, from, to)));
          if (ts.length === 0) return; // a zone without changes: nothing to check
          const tr = ts[pick % ts.length]!;
          // Put the cron's local time near the transition's local time, half the time.
          const wallAt = tr.atMs + tr.before;
          const h = pick % 2 === 0 ? new Date(wallAt).getUTCHours() : hour;
          const m = pick % 2 === 0 ? new Date(wallAt).getUTCMinutes() - (new Date(wallAt).getUTCMinutes() % 15) + (pick % 4 === 0 ? 0 : 15) : minute;
          const mm = m % 60;
          const hh = (h + Math.floor(m / 60)) % 24;
          const time = `${pad(hh)}:${pad(mm)}`;
          const s = cron(`${mm} ${hh} * * *`, zone, { gap, repeat });
          // The local days around the transition: two before to two after.
          const start = tr.atMs - 3 * 86_400_000;
          const end = tr.atMs + 3 * 86_400_000;
          const runs: Array<[string, string, number]> = [];
          let at = firstOccurrence(s, start);
          while (at !== null && at < end) {
            // A run at another local time is a shifted gap time: it belongs to the day of its wall time before the
            // shift (a gap at midnight shifts 23:30 into the next day).
            const [day, hm] = local(at, zone);
            runs.push([hm === time ? day : iso(at + tr.before).slice(0, 10), hm, at]);
            at = nextOccurrence(s, at);
          }
          // Which of the days has the time twice (repeat) or not at all (gap)? Asked of the zone, not the code.
          const shown = new Map<string, number[]>();
          for (let t = start - (start % 60_000); t < end; t += 15 * 60_000) {
            const [d, hm] = local(t, zone);
            if (hm === time) shown.set(d, [...(shown.get(d) ?? []), t]);
          }
          const days = [...new Set(runs.map((r) => r[0]))];
          const perDay = new Map<string, Array<[string, string, number]>>();
          for (const r of runs) perDay.set(r[0], [...(perDay.get(r[0]) ?? []), r]);
          const label = `${zone} ${time} ${gap}/${repeat} around ${iso(tr.atMs)}`;
          for (const [day, dayRuns] of perDay) {
            const copies = shown.get(day) ?? [];
            if (copies.length === 2 && repeat === 'both') expect(dayRuns.map((r) => r[2]), label).toEqual(copies);
            else expect(dayRuns.length, `${label}: ${day}`).toBe(1);
            const run = dayRuns[0]!;
            if (copies.length === 0) {
              // The time does not exist that day: only shift_forward runs it, shifted by the gap's length.
              expect(gap, `${label}: ${day}`).toBe('shift_forward');
              expect(run[2], label).toBe(ms(`${day}T${time}:00Z`) - tr.before);
            } else if (copies.length === 2 && repeat !== 'both') {
              expect(run[2], label).toBe(repeat === 'first' ? copies[0] : copies[1]);
            } else expect(run[1], label).toBe(time);
          }
          // Consecutive local days, except a day whose time does not exist under gap=skip.
          const allDays: string[] = [];
          for (let t = start + 86_400_000; t < end - 86_400_000; t += 86_400_000) allDays.push(local(t, zone)[0]);
          for (const day of allDays.slice(1, -1)) {
            if (days.includes(day)) continue;
            expect(gap, `${label}: no run on ${day}`).toBe('skip');
            expect(shown.get(day) ?? [], `${label}: no run on ${day}`).toEqual([]);
          }
        },
      ),
      { numRuns, seed },
    );
  });
});

describe('spread_ms', () => {
  const daily = (spreadMs: number, id: string): Schedule =>
    resolveSchedule({ kind: 'cron', cron: '0 9 * * *', timezone: 'UTC', startAtMs: null, spreadMs }, 0, id);
  it('the offset is FNV-1a of the id mod spread_ms, and every occurrence moves by it', () => {
    const s = daily(3_600_000, 'report-42');
    const offset = spreadOffsetOf('report-42', 3_600_000);
    expect(s.kind === 'cron' && s.spreadOffsetMs).toBe(offset);
    expect(walk(s, ms('2027-01-01T00:00:00Z'), 2)).toEqual([
      iso(ms('2027-01-01T09:00:00Z') + offset),
      iso(ms('2027-01-02T09:00:00Z') + offset),
    ]);
  });
  it('a preview without a job id shows the nominal times', () => {
    expect(walk(daily(3_600_000, '') && resolveSchedule({ kind: 'cron', cron: '0 9 * * *', timezone: 'UTC', startAtMs: null, spreadMs: 3_600_000 }, 0), ms('2027-01-01T00:00:00Z'), 1)).toEqual([
      '2027-01-01T09:00:00.000Z',
    ]);
  });
  it('every_ms: the first run is at creation plus the offset', () => {
    const s = resolveSchedule({ kind: 'every', everyMs: 60_000, startAtMs: null, spreadMs: 60_000 }, 1_000_000, 'job-a');
    const offset = spreadOffsetOf('job-a', 60_000);
    expect(firstOccurrence(s, 1_000_000)).toBe(1_000_000 + offset);
    expect(nextOccurrence(s, 1_000_000 + offset)).toBe(1_060_000 + offset);
  });
  it('property: offsets lie in [0, spread_ms), are stable, occurrences stay strictly increasing', () => {
    fc.assert(
      fc.property(
        fc.stringMatching(/^[A-Za-z0-9._:-]{1,40}$/),
        fc.integer({ min: 1, max: limits.spreadMsMax }),
        fc.integer({ min: ms('2027-01-01T00:00:00Z'), max: ms('2030-01-01T00:00:00Z') }),
        (id, spreadMs, fromMs) => {
          const offset = spreadOffsetOf(id, spreadMs);
          expect(offset).toBeGreaterThanOrEqual(0);
          expect(offset).toBeLessThan(spreadMs);
          expect(spreadOffsetOf(id, spreadMs)).toBe(offset);
          const s = daily(spreadMs, id);
          const nominal = cron('0 9 * * *', 'UTC');
          const first = firstOccurrence(s, fromMs)!;
          expect(first).toBeGreaterThanOrEqual(fromMs);
          expect(first - offset).toBe(firstOccurrence(nominal, fromMs - offset));
          expect(nextOccurrence(s, first)).toBe(first + 86_400_000);
        },
      ),
      { numRuns: 200, seed: 42 },
    );
  });
  it('fire_all counts missed spread occurrences on the spread times', () => {
    const s = resolveSchedule({ kind: 'every', everyMs: 1_000, startAtMs: 0, spreadMs: 1_000 }, 0, 'x');
    const offset = spreadOffsetOf('x', 1_000);
    const start = fireAllStart(s, offset, offset + 5_000_000);
    expect(start).toBe(offset + (5_000 + 1 - limits.misfireFireAllMax) * 1_000);
  });
});

describe('the model check (check.ts) on dst and spread fields', () => {
  const base = { kind: 'cron', cron: '30 1 * * *', timezone: 'America/New_York', startAtMs: null };
  const problem = (v: unknown, strict: boolean) => problemOf(() => checkSchedule(v, 'schedule', strict));
  it('dst: both policies required; an unknown key is refused strictly and kept leniently (a newer log entry)', () => {
    expect(problem({ ...base, dst: { gap: 'skip', repeat: 'last' } }, true)).toBeNull();
    expect(problem({ ...base, dst: { gap: 'skip' } }, true)?.field).toBe('schedule.dst.repeat');
    expect(problem({ ...base, dst: { gap: 'later', repeat: 'first' } }, false)?.field).toBe('schedule.dst.gap');
    expect(problem({ ...base, dst: { gap: 'skip', repeat: 'first', fold: 1 } }, true)?.field).toBe('schedule.dst.fold');
    expect(problem({ ...base, dst: { gap: 'skip', repeat: 'first', fold: 1 } }, false)).toBeNull();
  });
  it('spread: spreadMs within bounds (at most everyMs), its offset below it, no offset without it', () => {
    expect(problem({ ...base, spreadMs: 1000, spreadOffsetMs: 999 }, true)).toBeNull();
    expect(problem({ ...base, spreadMs: 1000, spreadOffsetMs: 1000 }, true)?.field).toBe('schedule.spread_offset_ms');
    expect(problem({ ...base, spreadMs: limits.spreadMsMax + 1 }, true)?.field).toBe('schedule.spread_ms');
    expect(problem({ ...base, spreadOffsetMs: 3 }, true)?.field).toBe('schedule.spread_ms');
    expect(problem({ kind: 'every', everyMs: 500, startAtMs: null, spreadMs: 501 }, true)?.field).toBe('schedule.spread_ms');
    expect(problem({ kind: 'every', everyMs: 500, startAtMs: null, spreadMs: 500 }, true)).toBeNull();
  });
});

describe('dst schedules within the search bounds', () => {
  const policy: DstPolicy = { gap: 'shift_forward', repeat: 'both' };
  it('a preview of 1000 daily occurrences fits, as without dst', () => {
    expect(previewOccurrences(cron('30 1 * * *', 'America/New_York', policy), ms('2027-01-01T00:00:00Z'), 1000)).toHaveLength(1000);
    expect(previewOccurrences(cron('0 9 * * MON', 'Europe/Berlin', policy), ms('2027-01-01T00:00:00Z'), 1000)).toHaveLength(1000);
  });
  it('fire_all keeps the latest misfireFireAllMax occurrences across a fall-back day', () => {
    const s = cron('* * * * *', 'America/New_York', policy);
    const nextMs = ms('2027-11-06T00:00:00Z');
    const limitMs = ms('2027-11-07T12:00:00Z');
    const start = fireAllStart(s, nextMs, limitMs);
    let count = 0;
    for (let at: number | null = start; at !== null && at <= limitMs; at = nextOccurrence(s, at)) count++;
    expect(count).toBe(limits.misfireFireAllMax);
    // with repeat: first the repeated hour's second copy does not run: one hour fewer in the same span
    const first = cron('* * * * *', 'America/New_York', { gap: 'shift_forward', repeat: 'first' });
    const from = ms('2027-11-07T04:00:00Z');
    expect(previewOccurrences(first, from, 1000).filter((t) => t < ms('2027-11-07T08:00:00Z'))).toHaveLength(180);
    expect(previewOccurrences(s, from, 1000).filter((t) => t < ms('2027-11-07T08:00:00Z'))).toHaveLength(240);
  });
});

describe('the state machine derives the spread offset from the job id', () => {
  const T0 = ms('2027-01-04T00:00:00.000Z');
  const jobSpecOf = (id: string, schedule: JobSpec['schedule']): JobSpec => ({
    id, task: 'email', callback: null, payload: new Uint8Array(0), payloadEncoding: 'json', schedule, endAtMs: null,
    maxRuns: 0, misfire: 'fire_once', overlap: 'allow', metadata: null, requestDigest: `d-${id}`, idempotencyKey: null,
  });
  it('on create and on patch, whatever offset a command carries; fired occurrences move on by the period', () => {
    const store = new MemoryStore();
    const task: TaskRecord = {
      name: 'email', url: 'https://example.com/', method: 'POST', headers: {}, timeoutMs: 1000,
      retry: { maxAttempts: 1, initialBackoffMs: 0, maxBackoffMs: 0, multiplier: 1, jitter: false },
      signingSecret: null, maxConcurrency: 1, createdAtMs: T0, updatedAtMs: T0,
    };
    apply(store, { type: 'put_task', nowMs: T0, task });
    const offset = spreadOffsetOf('s-1', 60_000);
    apply(store, { type: 'create_jobs', nowMs: T0, shard: 0, jobs: [jobSpecOf('s-1', { kind: 'every', everyMs: 60_000, startAtMs: null, spreadMs: 60_000, spreadOffsetMs: 7 })] });
    expect(store.getJob('s-1')).toMatchObject({ nextFireAtMs: T0 + offset, schedule: { spreadOffsetMs: offset } });
    apply(store, { type: 'fired', nowMs: T0 + offset, nodeId: 'n1', items: [{ jobId: 's-1', scheduledAtMs: T0 + offset, attempt: 1, startedAtMs: T0 + offset }] });
    expect(store.getJob('s-1')?.nextFireAtMs).toBe(T0 + 60_000 + offset);
    const cronOffset = spreadOffsetOf('s-1', 600_000);
    apply(store, { type: 'patch_job', nowMs: T0 + 1000, id: 's-1', patch: { schedule: { kind: 'cron', cron: '0 9 * * *', timezone: 'UTC', startAtMs: null, spreadMs: 600_000 } } });
    expect(store.getJob('s-1')).toMatchObject({ nextFireAtMs: T0 + 9 * 3_600_000 + cronOffset, schedule: { spreadOffsetMs: cronOffset } });
  });
});
