/**
 * Occurrences of a schedule: pure functions of (schedule, instant). cron-parser is deterministic when it is given
 * currentDate (we always give it) and a hashSeed (we refuse `H` fields anyway), so every replica computes the same
 * instants. All instants are integer epoch milliseconds.
 *
 * cron-parser's `next()` is strictly after currentDate, so "first at or after fromMs" asks for next() after
 * fromMs - 1. DST (what cron-parser 5.10 computes, asserted in schedule.test.ts): a local time that does not
 * exist runs one hour later; a fixed local time that happens twice runs once, at its first occurrence; step
 * expressions keep counting through both copies of the repeated hour.
 */
import { CronExpressionParser, type CronExpression } from 'cron-parser';
import { limits, schedulerLimits } from '../core/limits.js';
import type { Schedule } from './types.js';

// ---------------------------------------------------------------- cron cache

/**
 * A parsed expression, with its last few answers: many jobs share an expression and fire at the same instant,
 * so the same questions come in a row (answers are a pure function of the question: replicas stay identical).
 */
interface CachedCron {
  expr: CronExpression;
  /** afterMs -> next match (or null), at most answersMax entries, oldest dropped first. */
  answers: Map<number, number | null>;
}
const answersMax = 8;

/** A bounded LRU of parsed expressions (Map keeps insertion order; a hit re-inserts). null = does not parse. */
const cronCache = new Map<string, CachedCron | null>();

function parsedCron(cron: string, timezone: string): CachedCron | null {
  const key = `${timezone}\n${cron}`;
  const hit = cronCache.get(key);
  if (hit !== undefined) {
    cronCache.delete(key);
    cronCache.set(key, hit);
    return hit;
  }
  let parsed: CachedCron | null = null;
  if (validateCron(cron, timezone) === null) {
    // currentDate is reset before every use; hashSeed makes `H` (refused by validateCron) deterministic anyway.
    const expr = CronExpressionParser.parse(cron, { currentDate: new Date(0), tz: timezone, hashSeed: cron });
    parsed = { expr, answers: new Map() };
  }
  cronCache.set(key, parsed);
  if (cronCache.size > schedulerLimits.cronCacheEntriesMax) {
    const oldest = cronCache.keys().next().value;
    if (oldest !== undefined) cronCache.delete(oldest);
  }
  return parsed;
}

/** The cron match strictly after afterMs, or null (no match within cron-parser's search limit). */
function cronAfter(cron: string, timezone: string, afterMs: number): number | null {
  const cached = parsedCron(cron, timezone);
  if (cached === null) return null;
  const known = cached.answers.get(afterMs);
  if (known !== undefined) return known;
  let nextMs: number | null;
  try {
    cached.expr.reset(new Date(afterMs));
    nextMs = cached.expr.next().getTime();
  } catch {
    nextMs = null; // "loop limit exceeded" / out of range: an expression that never matches again
  }
  if (cached.answers.size >= answersMax) cached.answers.delete(cached.answers.keys().next().value!);
  cached.answers.set(afterMs, nextMs);
  return nextMs;
}

/** The cron match strictly before beforeMs, or null. Used only to place a fire_all replay window. */
function cronBefore(cron: string, timezone: string, beforeMs: number): number | null {
  const cached = parsedCron(cron, timezone);
  if (cached === null) return null;
  try {
    cached.expr.reset(new Date(beforeMs));
    return cached.expr.prev().getTime();
  } catch {
    return null;
  }
}

// ---------------------------------------------------------------- occurrences

/**
 * First occurrence of a schedule at or after fromMs (once: its atMs, even if in the past; every: startAtMs +
 * k*everyMs >= fromMs; cron: next match >= fromMs in the zone, and >= startAtMs when set), or null if none.
 */
export function firstOccurrence(schedule: Schedule, fromMs: number): number | null {
  const at = firstOccurrenceAny(schedule, fromMs);
  // Times are RFC 3339 on output: a recurring schedule ends at the last millisecond of year 9999.
  return at !== null && schedule.kind !== 'once' && at > lastMs ? null : at;
}

/** 9999-12-31T23:59:59.999Z: the last time RFC 3339 can write. */
const lastMs = 253_402_300_799_999;

function firstOccurrenceAny(schedule: Schedule, fromMs: number): number | null {
  switch (schedule.kind) {
    case 'once':
      return schedule.atMs;
    case 'every': {
      if (!(schedule.everyMs > 0)) return null;
      if (fromMs <= schedule.startAtMs) return schedule.startAtMs;
      const k = Math.ceil((fromMs - schedule.startAtMs) / schedule.everyMs);
      return schedule.startAtMs + k * schedule.everyMs;
    }
    case 'cron': {
      const from = schedule.startAtMs !== null ? Math.max(fromMs, schedule.startAtMs) : fromMs;
      return cronAfter(schedule.cron, schedule.timezone, from - 1);
    }
  }
}

/**
 * The occurrence strictly after afterMs, or null. A recurring job's next is derived from the occurrence that
 * fired, never from a clock.
 */
export function nextOccurrence(schedule: Schedule, afterMs: number): number | null {
  if (schedule.kind === 'once') return schedule.atMs > afterMs ? schedule.atMs : null;
  return firstOccurrence(schedule, afterMs + 1);
}

/** Up to count occurrences >= fromMs (POST /v1/schedules:preview); count is clamped to [0, per-call max]. */
export function previewOccurrences(schedule: Schedule, fromMs: number, count: number): number[] {
  const n = Math.max(0, Math.min(Math.floor(count), schedulerLimits.occurrencesPerCallMax));
  const out: number[] = [];
  let at = n > 0 ? firstOccurrence(schedule, fromMs) : null;
  if (at !== null && at < fromMs) at = null; // a once schedule in the past has no occurrence left to preview
  while (at !== null && out.length < n) {
    out.push(at);
    at = nextOccurrence(schedule, at);
  }
  return out;
}

/**
 * Where a fire_all replay starts when occurrences from `nextMs` up to `limitMs` (inclusive) were missed: `nextMs`
 * itself when at most `limits.misfireFireAllMax` were missed, else the earliest of the latest
 * misfireFireAllMax (older ones are dropped). Work is bounded by about 2 x misfireFireAllMax occurrences.
 */
export function fireAllStart(schedule: Schedule, nextMs: number, limitMs: number): number {
  const max = limits.misfireFireAllMax;
  if (schedule.kind === 'once' || limitMs < nextMs) return nextMs;
  if (schedule.kind === 'every') {
    const missed = Math.floor((limitMs - nextMs) / schedule.everyMs) + 1;
    return missed <= max ? nextMs : nextMs + (missed - max) * schedule.everyMs;
  }
  // Cheap bound first: matches are at least a second (6 fields) or a minute (5 fields) apart.
  const text = schedule.cron.trim();
  const gapMinMs = text.split(/\s+/).length === 6 || text.toLowerCase() === '@secondly' ? 1_000 : 60_000;
  if ((limitMs - nextMs) / gapMinMs + 1 <= max) return nextMs;
  let at: number | null = nextMs;
  for (let i = 0; i < max && at !== null && at <= limitMs; i++) at = nextOccurrence(schedule, at);
  if (at === null || at > limitMs) return nextMs;
  // More than max were missed: step back max matches from limitMs, then snap forward so the start is an
  // instant forward iteration also yields (prev() may return the second copy of a repeated local hour).
  let back: number | null = limitMs + 1;
  for (let i = 0; i < max && back !== null; i++) back = cronBefore(schedule.cron, schedule.timezone, back);
  const start = back === null ? null : firstOccurrence(schedule, back);
  return start !== null && start > nextMs ? start : nextMs;
}

// ---------------------------------------------------------------- validation

const macros = new Set([
  '@yearly',
  '@annually',
  '@monthly',
  '@weekly',
  '@daily',
  '@hourly',
  '@minutely',
  '@secondly',
  '@weekdays',
  '@weekends',
]);

/** True when `timezone` is an IANA zone (or UTC) this runtime knows. */
export function isValidTimezone(timezone: string): boolean {
  if (timezone.length === 0 || timezone.length > 64) return false;
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: timezone });
    return true;
  } catch {
    return false;
  }
}

/**
 * Validates a cron expression (5 or 6 fields, seconds first when 6, or an @macro such as @daily) and an IANA
 * zone; returns an error message or null. `H` (hashed, i.e. random) fields are refused: replicas must agree.
 */
export function validateCron(
  expr: string,
  timezone: string,
): { field: 'schedule.cron' | 'schedule.timezone'; message: string } | null {
  if (!isValidTimezone(timezone)) {
    return { field: 'schedule.timezone', message: `unknown time zone ${JSON.stringify(timezone)}` };
  }
  const text = expr.trim();
  if (text.length === 0 || text.length > 256) return { field: 'schedule.cron', message: 'empty or too long' };
  if (text.startsWith('@')) {
    if (macros.has(text.toLowerCase())) return null;
    return { field: 'schedule.cron', message: `unknown macro ${JSON.stringify(text)}` };
  }
  const fields = text.split(/\s+/);
  if (fields.length !== 5 && fields.length !== 6) {
    return { field: 'schedule.cron', message: `expected 5 fields, or 6 with seconds first; got ${fields.length}` };
  }
  if (fields.some((f) => /(^|[,/(-])H/i.test(f))) {
    return { field: 'schedule.cron', message: 'H (hashed) values are not supported' };
  }
  try {
    const parsed = CronExpressionParser.parse(text, { currentDate: new Date(0), tz: timezone, hashSeed: text });
    parsed.next(); // an expression that parses but never matches (0 0 31 4 *) fails here
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    // cron-parser says "Invalid explicit day of month definition" for a date that never exists (Feb 30).
    if (/explicit day of month/i.test(message)) return { field: 'schedule.cron', message: 'never matches: no month has that day' };
    return { field: 'schedule.cron', message };
  }
  return null;
}
