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
import { CronExpression, CronExpressionParser } from 'cron-parser';
import { invalid } from '../core/errors.js';
import { limits, schedulerLimits } from '../core/limits.js';
import { hash32 } from '../core/ids.js';
import type { DstPolicy, Schedule } from './types.js';

// ---------------------------------------------------------------- cron cache

/**
 * A parsed expression, with its last few answers: many jobs share an expression and fire at the same instant,
 * so the same questions come in a row (answers are a pure function of the question: replicas stay identical).
 */
interface CachedCron {
  expr: CronExpression;
  /** afterMs -> next match (or null) and the steps it cost, at most answersMax entries, oldest dropped first. */
  answers: Map<number, { at: number | null; steps: number; exhausted: boolean }>;
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

// ---------------------------------------------------------------- bounded search

/**
 * The work a cron search does is bounded in search steps, counted from the calendar the way cron-parser walks
 * it: a month the expression excludes costs one step, a month it includes one step per day, and every search
 * cronSearchBaseSteps more. A search is given
 * the instant its steps run out as cron-parser's endDate (startDate backwards), so no call can run long;
 * whole computations (a preview, a fire_all replay) share one budget. Steps depend only on the expression and
 * the instants, never on a clock: every replica finds the same answer or gives up at the same place.
 */
export interface SearchBudget {
  stepsLeft: number;
  /** Set when a search gave up because the budget ran out (rather than the expression having no match). */
  exhausted: boolean;
}

export function searchBudget(steps: number): SearchBudget {
  return { stepsLeft: steps, exhausted: false };
}

/** 0001-01-01 and 9999-12-31: searches never walk outside RFC 3339's range. */
const firstMs = -62_135_596_800_000;

interface Walk {
  /** The last instant the steps reach (forward: end of the last affordable month; backward: its start). */
  limitMs: number;
  /** Steps the walk costs from fromMs up to `toMs` (Infinity when toMs lies beyond limitMs). */
  costTo(toMs: number): number;
}

const dayMs = 86_400_000;

/**
 * Walks months from fromMs (UTC calendar) while their cost fits in `steps`. The first month counts from fromMs's
 * day on (forward) or back to the month's start (backward), so a match close by costs a step or two.
 */
function walkMonths(months: readonly number[], fromMs: number, steps: number, forward: boolean): Walk {
  const start = new Date(fromMs);
  let year = start.getUTCFullYear();
  let month0 = start.getUTCMonth();
  let left = steps;
  const spent: Array<{ fromMs: number; toMs: number; included: boolean; cost: number }> = [];
  for (;;) {
    const monthStartMs = Date.UTC(year, month0, 1);
    const monthEndMs = Date.UTC(year, month0 + 1, 1) - 1;
    if (monthStartMs > lastMs || monthEndMs < firstMs) break;
    const lo = forward && spent.length === 0 ? fromMs : monthStartMs;
    const hi = !forward && spent.length === 0 ? fromMs : monthEndMs;
    const included = months.includes(month0 + 1);
    const cost = included ? daysBetween(lo, hi) : 1;
    if (cost > left) break;
    left -= cost;
    spent.push({ fromMs: lo, toMs: hi, included, cost });
    month0 += forward ? 1 : -1;
    if (month0 === 12) [year, month0] = [year + 1, 0];
    if (month0 === -1) [year, month0] = [year - 1, 11];
  }
  const edge = forward ? spent[spent.length - 1]?.toMs : spent[spent.length - 1]?.fromMs;
  return {
    limitMs: edge ?? (forward ? fromMs - 1 : fromMs + 1),
    costTo: (toMs) => {
      let total = 0;
      for (const m of spent) {
        if (toMs >= m.fromMs && toMs <= m.toMs) {
          if (!m.included) return total + 1;
          // the day of the match itself costs nothing more: cron-parser matches it at once
          return total + (forward ? daysBetween(m.fromMs, toMs) : daysBetween(toMs, m.toMs)) - 1;
        }
        total += m.cost;
      }
      return Infinity;
    },
  };
}

/** UTC calendar days from loMs's day to hiMs's day, both counted. */
function daysBetween(loMs: number, hiMs: number): number {
  return Math.floor(hiMs / dayMs) - Math.floor(loMs / dayMs) + 1;
}

/**
 * One bounded cron-parser search: the match strictly after (or before) fromMs, or null. Steps spent are taken
 * from the budget; null with budget.exhausted set when the steps ran out before a match. `undefined` when
 * cron-parser itself gave up (its loop limit): it does so across Australia/Lord_Howe's 30-minute fall-back.
 */
function boundedSearch(cached: CachedCron, timezone: string, fromMs: number, forward: boolean, budget: SearchBudget): number | null | undefined {
  const steps = Math.min(budget.stepsLeft, schedulerLimits.cronSearchStepsMax);
  const base = schedulerLimits.cronSearchBaseSteps;
  const walk = walkMonths(cached.expr.fields.month.values, fromMs, steps - base, forward);
  const beyondRange = forward ? walk.limitMs >= lastMs : walk.limitMs <= firstMs;
  let found: number | null = null;
  if (forward ? walk.limitMs > fromMs : walk.limitMs < fromMs) {
    const expr = CronExpression.fieldsToExpression(cached.expr.fields, {
      tz: timezone,
      currentDate: new Date(fromMs),
      ...(forward ? { endDate: new Date(walk.limitMs) } : { startDate: new Date(walk.limitMs) }),
    });
    try {
      found = (forward ? expr.next() : expr.prev()).getTime();
    } catch (err) {
      // Charged nothing: the caller's fallback searches with the same budget (cron-parser's loop is bounded).
      if (err instanceof Error && /loop limit/i.test(err.message)) return undefined;
      found = null; // out of the span the steps allow, or out of range
    }
  }
  const cost = found === null ? steps : Math.min(steps, base + walk.costTo(found));
  budget.stepsLeft -= cost;
  if (found === null && !beyondRange) budget.exhausted = true;
  return found;
}

/**
 * The cron match strictly after afterMs, or null (none, or none within the budget: see budget.exhausted). A local
 * time that happens twice runs at its first occurrence only (docs/api.md), unless the hour field matches every
 * hour (elapsed time): cron-parser keeps to that when it walks from before the change, but asked from inside the
 * repeated stretch (a job created, resumed or caught up there) it answers the second copy, so that answer is
 * replaced by the first copy, or, when that is past, by the first match after the stretch.
 */
function cronAfter(cron: string, timezone: string, afterMs: number, budget: SearchBudget): number | null {
  const at = cronSearchAfter(cron, timezone, afterMs, budget);
  if (at === null || timezone === 'UTC') return at;
  const cached = parsedCron(cron, timezone);
  if (cached === null || cached.expr.fields.hour.values.length === 24) return at;
  const repeat = repeatedAt(timezone, at);
  if (repeat === null) return at;
  // The first copy shows the same wall time, so it matches too (cron-parser answers the second one when the change
  // falls back over midnight, Atlantic/Azores); when it is already past, go on after the repeated stretch.
  return repeat.firstMs > afterMs ? repeat.firstMs : cronSearchAfter(cron, timezone, repeat.endMs - 1, budget);
}

/**
 * When instant t shows a local time the zone already showed before (the clock fell back within dstWindowMs before
 * t, and t is less than the size of the jump after it): the instant that showed it first, and the end of the
 * repeated stretch; else null.
 */
function repeatedAt(timezone: string, t: number): { firstMs: number; endMs: number } | null {
  const now = offsetAt(timezone, t);
  const before = offsetAt(timezone, t - dstWindowMs);
  if (before <= now) return null;
  const changeMs = changeAt(timezone, t - dstWindowMs, t, before);
  const endMs = changeMs + (before - now);
  return t < endMs ? { firstMs: t - (before - now), endMs } : null;
}

function cronSearchAfter(cron: string, timezone: string, afterMs: number, budget: SearchBudget): number | null {
  const cached = parsedCron(cron, timezone);
  if (cached === null) return null;
  const known = cached.answers.get(afterMs);
  if (known !== undefined && known.steps <= budget.stepsLeft) {
    budget.stepsLeft -= known.steps;
    if (known.exhausted) budget.exhausted = true;
    return known.at;
  }
  const before = budget.stepsLeft;
  const inner = searchBudget(budget.stepsLeft);
  let at = boundedSearch(cached, timezone, afterMs, true, inner);
  if (at === undefined) {
    // cron-parser's own walk failed across a sub-hour change of offset (only Lord Howe's has been seen): match on
    // the wall clock instead, as cron-parser does elsewhere around such changes (a gap time does not run, a
    // repeated one runs once, at its first occurrence, whatever the hour field).
    at = timezone === 'UTC' ? null : dstCronAfter(cron, timezone, { gap: 'skip', repeat: 'first' }, afterMs, inner);
  }
  budget.stepsLeft = inner.stepsLeft;
  if (inner.exhausted) budget.exhausted = true;
  // An answer is kept only when found with the full per-search allowance: then it is the same for every caller.
  if (before >= schedulerLimits.cronSearchStepsMax) {
    if (cached.answers.size >= answersMax) cached.answers.delete(cached.answers.keys().next().value!);
    cached.answers.set(afterMs, { at, steps: before - inner.stepsLeft, exhausted: inner.exhausted });
  }
  return at;
}

/** The cron match strictly before beforeMs, or null. Used only to place a fire_all replay window. */
function cronBefore(cron: string, timezone: string, beforeMs: number, budget: SearchBudget): number | null {
  const cached = parsedCron(cron, timezone);
  if (cached === null) return null;
  return boundedSearch(cached, timezone, beforeMs, false, budget) ?? null;
}

// ---------------------------------------------------------------- occurrences

/**
 * First occurrence of a schedule at or after fromMs (once: its atMs, even if in the past; every: startAtMs +
 * k*everyMs >= fromMs; cron: next match >= fromMs in the zone, and >= startAtMs when set), or null if none. A
 * cron search has schedulerLimits.cronSearchStepsMax steps: a match further away counts as none.
 */
export function firstOccurrence(schedule: Schedule, fromMs: number, budget?: SearchBudget): number | null {
  const offsetMs = spreadOffsetOfSchedule(schedule);
  const nominal = firstOccurrenceAny(schedule, fromMs - offsetMs, budget ?? searchBudget(schedulerLimits.cronSearchStepsMax));
  const at = nominal === null ? null : nominal + offsetMs;
  // Times are RFC 3339 on output: a recurring schedule ends at the last millisecond of year 9999.
  return at !== null && schedule.kind !== 'once' && at > lastMs ? null : at;
}

/** 9999-12-31T23:59:59.999Z: the last time RFC 3339 can write. */
const lastMs = 253_402_300_799_999;

function firstOccurrenceAny(schedule: Schedule, fromMs: number, budget: SearchBudget): number | null {
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
      if (schedule.dst !== undefined) return dstCronAfter(schedule.cron, schedule.timezone, schedule.dst, from - 1, budget);
      return cronAfter(schedule.cron, schedule.timezone, from - 1, budget);
    }
  }
}

/**
 * The occurrence strictly after afterMs, or null. A recurring job's next is derived from the occurrence that
 * fired, never from a clock. A cron whose next match lies beyond one search's steps has none: its schedule ends
 * there, on every replica alike.
 */
export function nextOccurrence(schedule: Schedule, afterMs: number, budget?: SearchBudget): number | null {
  if (schedule.kind === 'once') return schedule.atMs > afterMs ? schedule.atMs : null;
  return firstOccurrence(schedule, afterMs + 1, budget);
}

/**
 * Up to count occurrences >= fromMs (POST /v1/schedules:preview); count is clamped to [0, per-call max]. The
 * whole preview has schedulerLimits.cronPreviewStepsMax search steps; when they run out before `count`
 * occurrences are found, it throws invalid_argument on `schedule.cron`.
 */
export function previewOccurrences(schedule: Schedule, fromMs: number, count: number): number[] {
  const n = Math.max(0, Math.min(Math.floor(count), schedulerLimits.occurrencesPerCallMax));
  const budget = searchBudget(schedulerLimits.cronPreviewStepsMax);
  const out: number[] = [];
  let at = n > 0 ? firstOccurrence(schedule, fromMs, budget) : null;
  if (at !== null && at < fromMs) at = null; // a once schedule in the past has no occurrence left to preview
  while (at !== null && out.length < n) {
    out.push(at);
    at = out.length < n ? nextOccurrence(schedule, at, budget) : null;
  }
  if (budget.exhausted) {
    const found = out.length === 0 ? 'no occurrence' : `only ${out.length} occurrence(s)`;
    throw invalid(
      'schedule.cron',
      `${found} found within the search bound (${schedulerLimits.cronPreviewStepsMax} steps per preview, ` +
        `${schedulerLimits.cronSearchStepsMax} per occurrence): the expression matches too rarely; ask for fewer`,
    );
  }
  return out;
}

/** True when the cron schedule's first occurrence from fromMs cannot be found within one search's steps. */
export function firstOccurrenceOutOfBound(schedule: Schedule, fromMs: number): boolean {
  if (schedule.kind !== 'cron') return false;
  const budget = searchBudget(schedulerLimits.cronSearchStepsMax);
  firstOccurrence(schedule, fromMs, budget);
  return budget.exhausted;
}

/**
 * Where a fire_all replay starts when occurrences from `nextMs` up to `limitMs` (inclusive) were missed: `nextMs`
 * itself when at most `limits.misfireFireAllMax` were missed, else the earliest of the latest
 * misfireFireAllMax (older ones are dropped). Work is bounded by about 2 x misfireFireAllMax occurrences and
 * by schedulerLimits.cronPreviewStepsMax search steps (out of steps: the replay starts at `nextMs`).
 */
export function fireAllStart(schedule: Schedule, nextMs: number, limitMs: number): number {
  const offsetMs = spreadOffsetOfSchedule(schedule);
  if (offsetMs === 0 || schedule.kind === 'once') return fireAllStartNominal(schedule, nextMs, limitMs);
  // Spread occurrences are the nominal ones moved by one constant: count them on the nominal times.
  return fireAllStartNominal({ ...schedule, spreadOffsetMs: 0 }, nextMs - offsetMs, limitMs - offsetMs) + offsetMs;
}

function fireAllStartNominal(schedule: Schedule, nextMs: number, limitMs: number): number {
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
  const budget = searchBudget(schedulerLimits.cronPreviewStepsMax);
  let at: number | null = nextMs;
  for (let i = 0; i < max && at !== null && at <= limitMs; i++) at = nextOccurrence(schedule, at, budget);
  if (at === null || at > limitMs) return nextMs;
  // More than max were missed: step back max matches from limitMs, then snap forward so the start is an
  // instant forward iteration also yields (prev() may return the second copy of a repeated local hour).
  let back: number | null = limitMs + 1;
  for (let i = 0; i < max && back !== null; i++) {
    if (schedule.dst === undefined) back = cronBefore(schedule.cron, schedule.timezone, back, budget);
    else {
      // Step back on the wall clock; the snap forward below lands on an occurrence the policy yields.
      const offset = offsetAt(schedule.timezone, back);
      const wall = cronBefore(schedule.cron, 'UTC', back + offset, budget);
      back = wall === null ? null : wall - offset;
    }
  }
  const start = back === null ? null : firstOccurrence(schedule, back, budget);
  return start !== null && start > nextMs && !budget.exhausted ? start : nextMs;
}

// ---------------------------------------------------------------- spread

/** The offset of a job's occurrences within [0, spreadMs): FNV-1a of its id (as shards use), stable everywhere. */
export function spreadOffsetOf(jobId: string, spreadMs: number): number {
  return hash32(jobId) % spreadMs;
}

function spreadOffsetOfSchedule(schedule: Schedule): number {
  return schedule.kind === 'once' ? 0 : (schedule.spreadOffsetMs ?? 0);
}

// ---------------------------------------------------------------- daylight-saving policies

/**
 * A cron with a `dst` policy is matched on the zone's wall clock: cron-parser runs it in UTC over "wall time as
 * if it were UTC" (a floating time), and each wall-clock match maps to the instants that show it: one on an
 * ordinary day, none in a spring-forward gap, two in a fall-back repeat. The policy picks among them
 * (instantsOf). Offsets come from Intl, so every replica with the same zone data computes the same instants.
 *
 * The occurrence strictly after afterMs: every instant s > afterMs shows a wall time L = s + o, o the offset at s
 * (a gap time shifted forward: the offset before the gap). Away from a change one offset holds and the first
 * wall match after afterMs + o is the answer. Within dstWindowMs of a change at T, each side is walked on its own:
 * the offset before it (while afterMs < T + the jump: later, no instant of it is left) from afterMs, the offset
 * after it from T; each walk stops as soon as its wall times cannot beat the best instant found.
 */
function dstCronAfter(cron: string, timezone: string, dst: DstPolicy, afterMs: number, budget: SearchBudget): number | null {
  const before = offsetAt(timezone, afterMs - dstWindowMs);
  const after = offsetAt(timezone, afterMs + dstWindowMs);
  const walks: Array<{ offset: number; fromMs: number }> = [];
  if (before === after) walks.push({ offset: before, fromMs: afterMs });
  else {
    const changeMs = changeAt(timezone, afterMs - dstWindowMs, afterMs + dstWindowMs, before);
    if (afterMs < changeMs + Math.abs(after - before)) walks.push({ offset: before, fromMs: afterMs });
    walks.push({ offset: after, fromMs: Math.max(afterMs, changeMs - 1) });
  }
  let best: number | null = null;
  for (const { offset, fromMs } of walks) {
    let cursor = fromMs + offset;
    for (;;) {
      const wall = cronAfter(cron, 'UTC', cursor, budget);
      if (wall === null) break;
      for (const s of instantsOf(wall, timezone, dst)) if (s > afterMs && (best === null || s < best)) best = s;
      // A later wall time of this walk shows an instant after wall - offset: no better than best any more.
      if (best !== null && wall - offset >= best) break;
      cursor = wall;
    }
  }
  return best;
}

/**
 * How far from afterMs a change of offset can matter: before it, a gap time shifted forward uses the offset
 * before the gap; after it, a fall-back shows wall times up to the size of its jump again. No change in the tz
 * database of the years the API accepts moves a clock back by more (date-line moves jump forward).
 */
const dstWindowMs = 3 * 60 * 60 * 1000;

/** The first instant in (loMs, hiMs] whose offset is not `offset` (changes fall on whole seconds). */
function changeAt(timezone: string, loMs: number, hiMs: number, offset: number): number {
  let lo = Math.floor(loMs / 1000);
  let hi = Math.ceil(hiMs / 1000);
  while (hi - lo > 1) {
    const mid = lo + Math.floor((hi - lo) / 2);
    if (offsetAt(timezone, mid * 1000) === offset) lo = mid;
    else hi = mid;
  }
  return hi * 1000;
}

/**
 * The instants a wall-clock time (floating ms) runs at under the policy, ascending. Transitions are assumed to
 * be more than a day apart (true of every zone's rules), so the offsets a day before and after bracket it.
 */
function instantsOf(wall: number, timezone: string, dst: DstPolicy): number[] {
  const before = offsetAt(timezone, wall - dayMs);
  const after = offsetAt(timezone, wall + dayMs);
  const shown: number[] = [];
  for (const o of new Set([before, after, offsetAt(timezone, wall - before)])) {
    const s = wall - o;
    if (offsetAt(timezone, s) === o && !shown.includes(s)) shown.push(s);
  }
  shown.sort((a, b) => a - b);
  if (shown.length === 0) return dst.gap === 'skip' ? [] : [wall - before]; // shifted forward by the gap's length
  if (shown.length === 1) return shown;
  if (dst.repeat === 'both') return shown;
  return [dst.repeat === 'first' ? shown[0]! : shown[shown.length - 1]!];
}

/** One formatter per zone (bounded like the cron cache: cleared when full). */
const zoneFormats = new Map<string, Intl.DateTimeFormat>();

/** The zone's UTC offset at instant t, in ms (whole seconds: Intl shows no milliseconds). */
export function offsetAt(timezone: string, t: number): number {
  let f = zoneFormats.get(timezone);
  if (f === undefined) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone: timezone,
      hourCycle: 'h23',
      era: 'short',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    });
    if (zoneFormats.size >= schedulerLimits.cronCacheEntriesMax) zoneFormats.clear();
    zoneFormats.set(timezone, f);
  }
  const p: Record<string, string> = {};
  for (const part of f.formatToParts(t)) p[part.type] = part.value;
  const year = p.era === 'BC' ? 1 - Number(p.year) : Number(p.year);
  const local = new Date(0);
  local.setUTCFullYear(year, Number(p.month) - 1, Number(p.day));
  local.setUTCHours(Number(p.hour), Number(p.minute), Number(p.second), 0);
  return local.getTime() - (t - (((t % 1000) + 1000) % 1000));
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
    // An expression that parses but never matches (0 0 31 4 *) fails here; the search is bounded like every
    // other (a rare one that merely runs out of steps is judged when a job's first occurrence is computed).
    const budget = searchBudget(schedulerLimits.cronSearchStepsMax);
    if (boundedSearch({ expr: parsed, answers: new Map() }, timezone, 0, true, budget) === null && !budget.exhausted) {
      return { field: 'schedule.cron', message: 'never matches' };
    }
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    // cron-parser says "Invalid explicit day of month definition" for a date that never exists (Feb 30).
    if (/explicit day of month/i.test(message)) return { field: 'schedule.cron', message: 'never matches: no month has that day' };
    return { field: 'schedule.cron', message };
  }
  return null;
}
