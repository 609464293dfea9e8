/**
 * Exclusion calendars: a recurring schedule that names calendars in `exclude` does not run at an occurrence whose
 * local date, in a calendar's own time zone, is one of its dates or inside one of its ranges; the schedule moves
 * on to its first occurrence after the excluded stretch. Pure: the calendars are the ones in the shard's state
 * when the next occurrence is computed, so every replica finds the same one.
 */
import { invalid } from '../core/errors.js';
import { schedulerLimits } from '../core/limits.js';
import { firstOccurrence, nextOccurrence, offsetAt, previewOccurrences, searchBudget } from './schedule.js';
import type { CalendarRecord, Schedule } from './types.js';

const dayMs = 86_400_000;
const datePattern = /^(\d{4})-(\d{2})-(\d{2})$/;

/** Days since 1970-01-01 of a YYYY-MM-DD date, or null when it is not a real date from 0001-01-01 to 9999-12-31. */
export function dayNumber(date: string): number | null {
  const m = datePattern.exec(date);
  if (m === null) return null;
  const [y, mo, d] = [Number(m[1]), Number(m[2]), Number(m[3])];
  if (y < 1 || mo < 1 || mo > 12 || d < 1) return null;
  const t = new Date(0);
  t.setUTCFullYear(y, mo - 1, d);
  if (t.getUTCFullYear() !== y || t.getUTCMonth() !== mo - 1 || t.getUTCDate() !== d) return null;
  return Math.floor(t.getTime() / dayMs);
}

/** Excluded days of a calendar as sorted, merged, inclusive [from, to] day numbers (adjacent days merge). */
export function excludedSpans(calendar: Pick<CalendarRecord, 'dates' | 'ranges'>): Array<[number, number]> {
  const spans: Array<[number, number]> = [];
  for (const d of calendar.dates) {
    const n = dayNumber(d);
    if (n !== null) spans.push([n, n]);
  }
  for (const r of calendar.ranges) {
    const from = dayNumber(r.from);
    const to = dayNumber(r.to);
    if (from !== null && to !== null && from <= to) spans.push([from, to]);
  }
  spans.sort((a, b) => a[0] - b[0]);
  const merged: Array<[number, number]> = [];
  for (const s of spans) {
    const last = merged[merged.length - 1];
    if (last !== undefined && s[0] <= last[1] + 1) last[1] = Math.max(last[1], s[1]);
    else merged.push([s[0], s[1]]);
  }
  return merged;
}

/** The local wall-clock time of atMs in the zone, as if it were UTC (epoch ms, whole seconds). */
function wallMs(atMs: number, timezone: string): number {
  return atMs - (((atMs % 1000) + 1000) % 1000) + offsetAt(timezone, atMs);
}

/** The local date of atMs in the zone, as a day number. */
export function localDay(atMs: number, timezone: string): number {
  return Math.floor(wallMs(atMs, timezone) / dayMs);
}

/**
 * The first instant whose local date in the zone is `day` or later. Local midnight, found from the zone's offset
 * there; where midnight does not exist (a DST change at midnight) it is stepped forward to the day's first hour.
 */
export function startOfLocalDay(day: number, timezone: string): number {
  const midnight = day * dayMs;
  let t = midnight - (wallMs(midnight, timezone) - midnight);
  t = midnight - (wallMs(t, timezone) - t);
  for (let i = 0; i < 4 && localDay(t, timezone) < day; i++) t += 3_600_000;
  return t;
}

/** A calendar ready to ask: its zone and merged excluded days. */
export interface CalendarRule {
  timezone: string;
  spans: Array<[number, number]>;
}

export function calendarRule(calendar: CalendarRecord): CalendarRule {
  return { timezone: calendar.timezone, spans: excludedSpans(calendar) };
}

/** When atMs's local date is excluded by the rule: the first instant after the excluded stretch; else null. */
export function excludedUntil(rule: CalendarRule, atMs: number): number | null {
  const day = localDay(atMs, rule.timezone);
  let lo = 0;
  let hi = rule.spans.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const [from, to] = rule.spans[mid]!;
    if (day < from) hi = mid - 1;
    else if (day > to) lo = mid + 1;
    else return startOfLocalDay(to + 1, rule.timezone);
  }
  return null;
}

/** Jumps left to a search (one next occurrence, or a whole preview). */
export interface JumpAllowance {
  left: number;
}

/**
 * The first occurrence of `schedule` at or after `atMs` (itself an occurrence, or null) that no rule excludes:
 * past each excluded stretch, the schedule's first occurrence after it. Null when none, or when more than the
 * allowance of stretches (schedulerLimits.calendarJumpsMax) lie in the way: a calendar that excludes every day
 * ends the schedule instead of searching forever.
 */
export function skipExcluded(
  schedule: Schedule,
  atMs: number | null,
  rules: readonly CalendarRule[],
  allowance: JumpAllowance = { left: schedulerLimits.calendarJumpsMax },
): number | null {
  let at = atMs;
  while (at !== null && rules.length > 0) {
    let from: number | null = null;
    for (const rule of rules) {
      const until = excludedUntil(rule, at);
      if (until !== null && (from === null || until > from)) from = until;
    }
    if (from === null) return at;
    if (schedule.kind === 'once' || allowance.left <= 0) return null;
    allowance.left--;
    at = firstOccurrence(schedule, Math.max(from, at + 1));
  }
  return at;
}

/**
 * Up to `count` occurrences >= fromMs that the rules do not exclude (POST /v1/schedules:preview with `exclude`):
 * the whole preview shares schedulerLimits.calendarJumpsMax jumps (out of them, it ends early) and the cron
 * preview's search steps (out of them: invalid_argument on schedule.cron, as previewOccurrences).
 */
export function previewExcluding(schedule: Schedule, fromMs: number, count: number, rules: readonly CalendarRule[]): number[] {
  if (rules.length === 0 || schedule.kind === 'once') return previewOccurrences(schedule, fromMs, count);
  const n = Math.max(0, Math.min(Math.floor(count), schedulerLimits.occurrencesPerCallMax));
  const budget = searchBudget(schedulerLimits.cronPreviewStepsMax);
  const allowance: JumpAllowance = { left: schedulerLimits.calendarJumpsMax };
  const out: number[] = [];
  let at = n > 0 ? skipExcluded(schedule, firstOccurrence(schedule, fromMs, budget), rules, allowance) : null;
  while (at !== null && out.length < n) {
    out.push(at);
    at = out.length < n ? skipExcluded(schedule, nextOccurrence(schedule, at, budget), rules, allowance) : null;
  }
  if (budget.exhausted) {
    throw invalid('schedule.cron', `only ${out.length} occurrence(s) found within the search bound: the expression matches too rarely`);
  }
  return out;
}
