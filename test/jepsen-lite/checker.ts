/**
 * The checker: named checks over a run's history (client ops + deliveries + fault windows), each with counts and
 * a few examples; then the reported (never failed) figures: duplicates, lateness, recovery, stale fencing.
 * Pure: it reads a RunHistory and nothing else, so unit tests feed it hand-made histories.
 */
import type { Delivery, FaultWindow, JobPlan, Misfire, Op, RunHistory } from './history.js';
import { checkKey, toLinOp, type LinOp } from './linearizability.js';

export interface CheckResult {
  name: string;
  ok: boolean;
  counts: Record<string, number>;
  /** At most examplesMax violations, each with the history excerpt that shows it. */
  examples: unknown[];
}

export const examplesMax = 10;

/** Everything the checks need about one job id, folded once. */
interface JobFacts {
  id: string;
  plan: JobPlan;
  ops: Op[];
  creates: Op[];
  /** A create answered ok, or any other op answered with the job (it exists). */
  known: boolean;
  /** Every create definitely failed (4xx) and nothing ever showed the job. */
  refused: boolean;
  deliveries: Delivery[];
}

function foldJobs(h: RunHistory): Map<string, JobFacts> {
  const jobs = new Map<string, JobFacts>();
  for (const j of h.jobs) jobs.set(j.id, { id: j.id, plan: j.plan, ops: [], creates: [], known: false, refused: false, deliveries: [] });
  for (const op of h.ops) jobs.get(op.key)?.ops.push(op);
  for (const d of h.deliveries) jobs.get(d.jobId)?.deliveries.push(d);
  for (const f of jobs.values()) {
    f.creates = f.ops.filter((o) => o.f === 'create');
    const shown = f.ops.some((o) => o.f !== 'create' && o.type === 'ok' && o.state !== undefined && o.state !== 'absent');
    f.known = shown || f.creates.some((o) => o.type === 'ok');
    f.refused = !shown && f.creates.length > 0 && f.creates.every((o) => o.type === 'fail');
  }
  return jobs;
}

const isRecurring = (p: JobPlan): boolean => p.kind === 'every' || p.kind === 'cron';

/** Ops of one key in a compact form for examples. */
function excerpt(ops: readonly Op[]): string[] {
  return ops.map((o) => {
    const end = o.completeMs === undefined ? '?' : String(o.completeMs);
    const detail = o.state ?? o.error ?? '';
    return `p${o.process} ${o.f} ${o.type}${detail ? ' ' + detail : ''} [${o.invokeMs}..${end}] @${o.node}`;
  });
}

function result(name: string, counts: Record<string, number>, violations: unknown[]): CheckResult {
  return { name, ok: violations.length === 0, counts: { ...counts, violations: violations.length }, examples: violations.slice(0, examplesMax) };
}

/**
 * Must a once job have fired? Its create was acknowledged (or the job was seen), no cancel may have taken effect
 * (ok or info), and every pause (all definite) was followed by an acknowledged resume.
 */
function onceMustFire(f: JobFacts): { must: boolean; why: string } {
  if (!f.known) return { must: false, why: 'not-acknowledged' };
  if (f.ops.some((o) => o.f === 'cancel' && (o.type === 'ok' || o.type === 'info'))) return { must: false, why: 'cancelled' };
  const pauses = f.ops.filter((o) => o.f === 'pause' && o.type !== 'fail');
  for (const p of pauses) {
    if (p.type !== 'ok') return { must: false, why: 'paused' };
    const resumed = f.ops.some((r) => r.f === 'resume' && r.type === 'ok' && r.invokeMs > (p.completeMs ?? Infinity));
    if (!resumed) return { must: false, why: 'paused' };
  }
  return { must: true, why: '' };
}

function checkAckedFire(jobs: Map<string, JobFacts>): CheckResult {
  const counts = { once_jobs: 0, required: 0, fired: 0, exempt_cancelled: 0, exempt_paused: 0, not_acknowledged: 0 };
  const violations: unknown[] = [];
  for (const f of jobs.values()) {
    if (f.plan.kind !== 'once' && f.plan.kind !== 'delay') continue;
    counts.once_jobs++;
    const { must, why } = onceMustFire(f);
    if (!must) {
      if (why === 'cancelled') counts.exempt_cancelled++;
      else if (why === 'paused') counts.exempt_paused++;
      else counts.not_acknowledged++;
      continue;
    }
    counts.required++;
    if (f.deliveries.length > 0) counts.fired++;
    else violations.push({ job: f.id, plan: f.plan, history: excerpt(f.ops) });
  }
  return result('acked-jobs-fire', counts, violations);
}

/** Is S a time this job's schedule could produce? (null = yes, else why not) */
function offSchedule(f: JobFacts, s: number, tolMs: number, behindMs: number): string | null {
  const p = f.plan;
  switch (p.kind) {
    case 'once':
      return s === p.atMs ? null : `scheduled ${s}, job is at ${p.atMs}`;
    case 'delay': {
      // The node adds delay_ms to its own clock: behind by X, the occurrence is scheduled X earlier.
      const lo = Math.min(...f.creates.map((o) => o.invokeMs)) + p.delayMs - behindMs;
      const done = f.creates.map((o) => (o.type === 'info' ? Infinity : o.completeMs ?? Infinity));
      const hi = Math.max(...done) + p.delayMs + tolMs;
      return s >= lo && s <= hi ? null : `scheduled ${s}, outside [${lo}, ${hi}] of delay_ms ${p.delayMs}`;
    }
    case 'every':
      if (s < p.startAtMs || s > p.endAtMs || (s - p.startAtMs) % p.everyMs !== 0) return `scheduled ${s} off the every_ms grid`;
      return null;
    case 'cron':
      if (s % p.periodMs !== 0 || s > p.endAtMs) return `scheduled ${s} is no occurrence of ${p.expr} before end_at`;
      return null;
    case 'invalid':
      return null; // refused-never-fire owns these
  }
}

function checkNoEarly(h: RunHistory, jobs: Map<string, JobFacts>): CheckResult {
  const tol = h.clockToleranceMs;
  const counts = {
    deliveries: h.deliveries.length, early: 0, off_schedule: 0, unknown_job: 0,
    clock_tolerance_ms: tol, clock_behind_ms: h.clockBehindMs, max_early_ms: 0,
  };
  const violations: unknown[] = [];
  for (const d of h.deliveries) {
    const earlyMs = d.scheduledAtMs - d.arrivalMs;
    counts.max_early_ms = Math.max(counts.max_early_ms, earlyMs);
    if (earlyMs > tol) {
      counts.early++;
      violations.push({ kind: 'early', delivery: d, early_ms: earlyMs });
    }
    const f = jobs.get(d.jobId);
    if (!f) {
      counts.unknown_job++;
      violations.push({ kind: 'unknown-job', delivery: d });
      continue;
    }
    const why = offSchedule(f, d.scheduledAtMs, tol, h.clockBehindMs);
    if (why !== null) {
      counts.off_schedule++;
      violations.push({ kind: 'off-schedule', delivery: d, why, history: excerpt(f.ops) });
    }
  }
  return result('no-early-delivery', counts, violations);
}

/** No occurrence scheduled after an acknowledged cancel fires; none scheduled after an acknowledged pause fires before a resume. */
function checkCancelFinal(h: RunHistory, jobs: Map<string, JobFacts>): CheckResult {
  const tol = h.clockToleranceMs;
  const counts = { acked_cancels: 0, acked_pauses: 0, after_cancel: 0, while_paused: 0 };
  const violations: unknown[] = [];
  for (const f of jobs.values()) {
    for (const op of f.ops) {
      if (op.type !== 'ok' || (op.f !== 'cancel' && op.f !== 'pause')) continue;
      const ackMs = op.completeMs!;
      // A resume that may have landed after this pause (not definitely over before it began) ends the pause.
      const resumes = f.ops.filter((r) => r.f === 'resume' && r.type !== 'fail' && (r.completeMs ?? Infinity) > op.invokeMs);
      const untilMs = op.f === 'cancel' ? Infinity : Math.min(Infinity, ...resumes.map((r) => r.invokeMs));
      if (op.f === 'cancel') counts.acked_cancels++;
      else counts.acked_pauses++;
      for (const d of f.deliveries) {
        if (d.scheduledAtMs <= ackMs + tol || d.arrivalMs >= untilMs) continue;
        if (op.f === 'cancel') counts.after_cancel++;
        else counts.while_paused++;
        violations.push({ kind: `after-${op.f}`, ack_ms: ackMs, delivery: d, history: excerpt(f.ops) });
      }
    }
  }
  return result('no-fire-after-cancel', counts, violations);
}

function checkRefused(jobs: Map<string, JobFacts>): CheckResult {
  const counts = { refused_jobs: 0, fired: 0, info_creates: 0, info_creates_fired: 0 };
  const violations: unknown[] = [];
  for (const f of jobs.values()) {
    if (f.refused) {
      counts.refused_jobs++;
      if (f.deliveries.length > 0) {
        counts.fired++;
        violations.push({ job: f.id, plan: f.plan, deliveries: f.deliveries.slice(0, 3), history: excerpt(f.ops) });
      }
    } else if (!f.creates.some((o) => o.type === 'ok') && f.creates.some((o) => o.type === 'info')) {
      counts.info_creates++;
      if (f.deliveries.length > 0) counts.info_creates_fired++;
    }
  }
  return result('refused-never-fire', counts, violations);
}

function checkLinearizable(jobs: Map<string, JobFacts>): CheckResult {
  const counts = { keys: 0, ops: 0, explored: 0, gave_up: 0 };
  const violations: unknown[] = [];
  for (const f of jobs.values()) {
    if (f.plan.kind === 'invalid') continue;
    const linOps = f.ops.map(toLinOp).filter((o): o is LinOp => o !== null);
    if (linOps.length === 0) continue;
    counts.keys++;
    counts.ops += linOps.length;
    const r = checkKey(linOps, isRecurring(f.plan));
    counts.explored += r.explored;
    if (r.gaveUp) counts.gave_up++;
    if (!r.ok) violations.push({ job: f.id, recurring: isRecurring(f.plan), history: excerpt(f.ops) });
  }
  return result('linearizable-job-reads', counts, violations);
}

/** Intervals in which the cluster was disturbed, widened by the misfire threshold (a missed run is explained). */
function disturbed(h: RunHistory): Array<[number, number]> {
  const margin = h.misfireThresholdMs + h.clockToleranceMs;
  return h.faults.map((w) => [w.startMs - 1_000, (w.recoveredMs ?? h.endMs) + margin]);
}

/** The occurrences of a recurring job that must be delivered, and the window they are drawn from. */
function requiredOccurrences(h: RunHistory, f: JobFacts): { times: number[]; excusedPaused: number } {
  const p = f.plan;
  if (p.kind !== 'every' && p.kind !== 'cron') return { times: [], excusedPaused: 0 };
  const margin = h.misfireThresholdMs + h.clockToleranceMs;
  // The job surely exists once an answer showed it (an acknowledged create, or any op that returned the job); an
  // unknown create may be applied late, and runs due before it was applied are not owed.
  const shownMs = f.ops
    .filter((o) => o.type === 'ok' && (o.f === 'create' || (o.state !== undefined && o.state !== 'absent')))
    .map((o) => o.completeMs!);
  const fromMs = Math.min(...shownMs) + h.clockToleranceMs;
  const cancels = f.ops.filter((o) => o.f === 'cancel' && o.type !== 'fail');
  const untilMs = Math.min(p.endAtMs, ...cancels.map((o) => o.invokeMs - margin));
  const pauses: Array<[number, number]> = f.ops
    .filter((o) => o.f === 'pause' && o.type !== 'fail')
    .map((o) => {
      // An unknown pause may be applied after any later resume: it may last to the end.
      const resume = f.ops.find((r) => r.f === 'resume' && r.type === 'ok' && r.invokeMs > (o.completeMs ?? Infinity));
      return [o.invokeMs - margin, resume && o.type === 'ok' ? resume.completeMs! + margin : Infinity];
    });
  const times: number[] = [];
  let excusedPaused = 0;
  const period = p.kind === 'every' ? p.everyMs : p.periodMs;
  const base = p.kind === 'every' ? p.startAtMs : 0;
  let s = fromMs <= base ? base : base + Math.ceil((fromMs - base) / period) * period;
  for (; s <= untilMs; s += period) {
    if (pauses.some(([a, b]) => s >= a && s <= b)) excusedPaused++;
    else times.push(s);
  }
  return { times, excusedPaused };
}

function checkRecurring(h: RunHistory, jobs: Map<string, JobFacts>): CheckResult {
  // skip_policy_late_runs (reported, not failed): first attempts of a `skip` job that arrived past the threshold
  // (plus clock skew and 1 s); the policy should have skipped them, unless the node stalled right after deciding.
  const counts = { recurring_jobs: 0, required: 0, delivered: 0, excused_misfire: 0, excused_pause_cancel: 0, skipped: 0, skip_policy_late_runs: 0 };
  const violations: unknown[] = [];
  const windows = disturbed(h);
  for (const f of jobs.values()) {
    const p = f.plan;
    if ((p.kind !== 'every' && p.kind !== 'cron') || !f.known) continue;
    counts.recurring_jobs++;
    const { times, excusedPaused } = requiredOccurrences(h, f);
    counts.excused_pause_cancel += excusedPaused;
    const got = new Set(f.deliveries.map((d) => d.scheduledAtMs));
    const firstArrival = firstArrivals(f.deliveries);
    const lastFirstAttempt = lastFirstAttemptArrivals(f.deliveries);
    if (p.misfire === 'skip') {
      const lateMs = h.misfireThresholdMs + h.clockBehindMs + 1_000;
      counts.skip_policy_late_runs += f.deliveries.filter((d) => d.attempt === 1 && d.arrivalMs - d.scheduledAtMs > lateMs).length;
    }
    for (const s of times) {
      counts.required++;
      if (got.has(s)) {
        counts.delivered++;
        continue;
      }
      if (misfireExplains(h, p.misfire, s, windows, firstArrival, lastFirstAttempt)) {
        counts.excused_misfire++;
        continue;
      }
      counts.skipped++;
      violations.push({ job: f.id, plan: p, missing_scheduled_at: s, delivered: [...got].sort((a, b) => a - b), history: excerpt(f.ops) });
    }
  }
  return result('recurring-no-skip', counts, violations);
}

/** First arrival per scheduled time. */
function firstArrivals(ds: readonly Delivery[]): Map<number, number> {
  const m = new Map<number, number>();
  for (const d of ds) m.set(d.scheduledAtMs, Math.min(m.get(d.scheduledAtMs) ?? Infinity, d.arrivalMs));
  return m;
}

/**
 * Last arrival per scheduled time among first attempts. Two first attempts of one occurrence mean the earlier
 * fire was never recorded (a deposed leader sent it, its `fired` record was lost), so the later one is the fire
 * the cluster decided on, and the time the next occurrence was chosen from.
 */
function lastFirstAttemptArrivals(ds: readonly Delivery[]): Map<number, number> {
  const m = new Map<number, number>();
  for (const d of ds) if (d.attempt === 1) m.set(d.scheduledAtMs, Math.max(m.get(d.scheduledAtMs) ?? -Infinity, d.arrivalMs));
  return m;
}

/**
 * Is a missed occurrence S within the job's misfire policy (docs/api.md, First runs, misfires and overlap)? A run
 * is missed when the node handles it more than the threshold late. fire_all: never skips. fire_once: the earliest
 * missed run still fires (late: the catch-up) and firing it jumps past every occurrence due by then, so a skipped
 * S always follows a catch-up run P < S delivered more than the threshold after P and not before S (its first
 * delivery, or a later first attempt that replaced an unrecorded fire of a deposed leader: jepsen-lite seed
 * 20261130 with 5 nodes). skip: the missed runs are skipped outright, so a fault window around S (to recovery,
 * plus the threshold) also explains it.
 */
function misfireExplains(h: RunHistory, policy: Misfire, s: number, windows: Array<[number, number]>,
  firstArrival: Map<number, number>, lastFirstAttempt: Map<number, number>): boolean {
  if (policy === 'fire_all') return false;
  if (policy === 'skip' && windows.some(([a, b]) => s >= a && s <= b)) return true;
  let prev = -Infinity;
  for (const t of firstArrival.keys()) if (t < s && t > prev) prev = t;
  // 1 s of slack: the node decides on its own clock when it records the fire, a little after the send.
  const slackMs = h.clockToleranceMs + 1_000;
  const catchUp = (atMs: number | undefined) => atMs !== undefined && atMs - prev >= h.misfireThresholdMs - slackMs && atMs >= s - slackMs;
  return catchUp(firstArrival.get(prev)) || catchUp(lastFirstAttempt.get(prev));
}

export interface Percentiles {
  count: number;
  p50: number;
  p90: number;
  p99: number;
  p999: number;
  max: number;
}

export function percentiles(values: number[]): Percentiles {
  const v = [...values].sort((a, b) => a - b);
  const at = (q: number): number => (v.length === 0 ? 0 : v[Math.min(v.length - 1, Math.floor(q * v.length))]);
  return { count: v.length, p50: at(0.5), p90: at(0.9), p99: at(0.99), p999: at(0.999), max: v.length === 0 ? 0 : v[v.length - 1] };
}

export interface RunStats {
  deliveries: number;
  uniqueOccurrences: number;
  duplicates: number;
  duplicateRate: number;
  /** afterPause: of a job paused before the delivery arrived (late by design until its resume); underFaults: the
   * others scheduled inside a fault window (to recovery, plus the misfire threshold); quiet: the rest. */
  lateness: { all: Percentiles; underFaults: Percentiles; afterPause: Percentiles; quiet: Percentiles };
  /** Deliveries whose fencing term is below one already seen for that shard (a deposed leader firing). */
  staleFencing: number;
  recovery: Array<{ kind: string; detail: string; faultMs: number; readyAfterHealMs: number | null; firstOkAfterHealMs: number | null }>;
  ops: Record<string, number>;
}

export function runStats(h: RunHistory): RunStats {
  const first = new Map<string, Delivery>();
  for (const d of h.deliveries) {
    const prev = first.get(d.key);
    if (!prev || d.arrivalMs < prev.arrivalMs) first.set(d.key, d);
  }
  // Lateness counts as under faults when the occurrence fell due between a fault's start and its recovery.
  const windows = h.faults.map((w) => [w.startMs, (w.recoveredMs ?? h.endMs) + 500]);
  const pausedSince = new Map<string, number>();
  for (const o of h.ops) {
    if (o.f === 'pause' && o.type !== 'fail') pausedSince.set(o.key, Math.min(o.invokeMs, pausedSince.get(o.key) ?? Infinity));
  }
  const all: number[] = [];
  const faulted: number[] = [];
  const paused: number[] = [];
  const quiet: number[] = [];
  for (const d of first.values()) {
    const late = d.arrivalMs - d.scheduledAtMs;
    all.push(late);
    // A client pause first: a job held by a pause is late by design, whether or not a fault was on too.
    if ((pausedSince.get(d.jobId) ?? Infinity) <= d.arrivalMs) paused.push(late);
    else if (windows.some(([a, b]) => d.scheduledAtMs >= a && d.scheduledAtMs <= b)) faulted.push(late);
    else quiet.push(late);
  }
  const dups = h.deliveries.length - first.size;
  return {
    deliveries: h.deliveries.length,
    uniqueOccurrences: first.size,
    duplicates: dups,
    duplicateRate: first.size === 0 ? 0 : dups / first.size,
    lateness: { all: percentiles(all), underFaults: percentiles(faulted), afterPause: percentiles(paused), quiet: percentiles(quiet) },
    staleFencing: staleFencing(h.deliveries),
    recovery: h.faults.map((w) => recovery(w, h.ops, h.endMs)),
    ops: opCounts(h.ops),
  };
}

function staleFencing(ds: readonly Delivery[]): number {
  const maxTerm = new Map<string, number>();
  let stale = 0;
  for (const d of [...ds].sort((a, b) => a.arrivalMs - b.arrivalMs)) {
    const [shard, termText] = d.fencingToken.split('.');
    const term = Number(termText);
    const seen = maxTerm.get(shard) ?? -Infinity;
    if (term < seen) stale++;
    else maxTerm.set(shard, term);
  }
  return stale;
}

/** Recovery of one fault. The first ok op counts only workload ops (invoked before endMs): a fault healed after
 * the workload stopped would otherwise report the final reads, seconds later, as its recovery. */
function recovery(w: FaultWindow, ops: readonly Op[], endMs: number): RunStats['recovery'][number] {
  let firstOk: number | null = null;
  for (const o of ops) {
    if (o.type !== 'ok' || o.invokeMs < w.healMs || o.invokeMs >= endMs) continue;
    if (firstOk === null || o.completeMs! < firstOk) firstOk = o.completeMs!;
  }
  return {
    kind: w.kind,
    detail: w.detail,
    faultMs: w.healMs - w.startMs,
    readyAfterHealMs: w.recoveredMs === null ? null : w.recoveredMs - w.healMs,
    firstOkAfterHealMs: firstOk === null ? null : firstOk - w.healMs,
  };
}

function opCounts(ops: readonly Op[]): Record<string, number> {
  const c: Record<string, number> = {};
  for (const o of ops) c[`${o.f}:${o.type}`] = (c[`${o.f}:${o.type}`] ?? 0) + 1;
  return c;
}

export interface CheckReport {
  valid: boolean;
  checks: CheckResult[];
  stats: RunStats;
}

export function checkRun(h: RunHistory): CheckReport {
  const jobs = foldJobs(h);
  const checks = [
    checkAckedFire(jobs),
    checkNoEarly(h, jobs),
    checkCancelFinal(h, jobs),
    checkRefused(jobs),
    checkLinearizable(jobs),
    checkRecurring(h, jobs),
  ];
  return { valid: checks.every((c) => c.ok), checks, stats: runStats(h) };
}


