/**
 * The time rules of a recurring job, in one place (docs/api.md, "First runs, misfires and overlap"): the instant a
 * first occurrence is computed from, when an occurrence is missed, and what the misfire and overlap policies do.
 * machine.ts applies them when a command advances a job; the firing engine asks `dueAction` when an occurrence
 * comes due and does what it answers. Pure: every instant is an argument.
 */
import { fireAllStart, nextOccurrence, spreadOffsetOf } from './schedule.js';
import type { JobRecord, Schedule, ScheduleSpec } from './types.js';

/**
 * The threshold of a job written before `misfireThresholdMs` existed. Part of the log's format (replaying an old
 * entry must decide as it did), so it is a fixed value here, not a tunable limit.
 */
export const misfireThresholdMsUnset = 5_000;

/** The job's threshold as stored (jobs written before the field existed keep the one they had). */
export function misfireThresholdOf(job: Pick<JobRecord, 'misfireThresholdMs'>): number {
  return job.misfireThresholdMs ?? misfireThresholdMsUnset;
}

/**
 * `every` without a start starts at nowMs, the instant the command is stamped with: the first occurrence of a new
 * (or re-scheduled) job is computed from that one instant, so `every_ms` alone always runs first at creation.
 * A schedule with `spreadMs` gets the offset of `jobId` (none given, as in a preview without `id`: offset 0).
 */
export function resolveSchedule(schedule: ScheduleSpec, nowMs: number, jobId?: string): Schedule {
  let resolved = schedule as Schedule;
  if (schedule.kind === 'every' && schedule.startAtMs === null) resolved = { ...schedule, startAtMs: nowMs };
  if (resolved.kind !== 'once' && resolved.spreadMs !== undefined) {
    resolved = { ...resolved, spreadOffsetMs: jobId === undefined ? 0 : spreadOffsetOf(jobId, resolved.spreadMs) };
  }
  return resolved;
}

/** A regular occurrence of a recurring job is missed when Punctual gets to it (atMs) more than the threshold late. */
export function isMissed(job: Pick<JobRecord, 'schedule' | 'misfireThresholdMs'>, scheduledAtMs: number, atMs: number): boolean {
  return job.schedule.kind !== 'once' && atMs - scheduledAtMs > misfireThresholdOf(job);
}

/** What the leader does with a regular occurrence that is due. */
export type DueAction = 'fire' | 'skip_misfire' | 'skip_overlap' | 'buffer';

/**
 * The decision for the pending regular occurrence of `job`, due, looked at nowMs. `runInFlight`: another run of the
 * job is open. `released`: it is the occurrence buffer_one held, let go because the run before it finished: it runs
 * whatever its lateness (it waited on purpose; the next one is computed from its start, see nextAfter).
 */
export function dueAction(
  job: Pick<JobRecord, 'schedule' | 'misfire' | 'misfireThresholdMs' | 'overlap'>,
  scheduledAtMs: number,
  nowMs: number,
  runInFlight: boolean,
  released = false,
): DueAction {
  if (job.schedule.kind === 'once') return 'fire';
  if (!released && job.misfire === 'skip' && isMissed(job, scheduledAtMs, nowMs)) return 'skip_misfire';
  if (!runInFlight || job.overlap === 'allow') return 'fire';
  return job.overlap === 'skip' ? 'skip_overlap' : 'buffer';
}

/**
 * The occurrence after the regular one at `firedAtMs`, which started at `startedAtMs` (null: it was skipped), as
 * of nowMs; before end_at and max_runs. In order:
 * - buffer_one, a run: the first occurrence after its start. The ones that came due while the run before it was
 *   in flight (beyond it, the one buffered) are dropped, so lateness never accumulates.
 * - it was missed: fire_once (it was the one catch-up run) and skip jump past every occurrence due by then;
 *   fire_all replays the next one, keeping only the latest misfireFireAllMax when a backlog starts (the job
 *   unchanged since its occurrence came due).
 * - else the next occurrence: late ones within the threshold still run, late.
 */
export function nextAfter(job: JobRecord, firedAtMs: number, startedAtMs: number | null, nowMs: number): number | null {
  const s = job.schedule;
  if (s.kind === 'once') return nextOccurrence(s, firedAtMs);
  if (startedAtMs !== null && job.overlap === 'buffer_one') return nextOccurrence(s, Math.max(firedAtMs, startedAtMs));
  const atMs = startedAtMs ?? nowMs;
  const next = nextOccurrence(s, firedAtMs);
  if (next === null || !isMissed(job, firedAtMs, atMs)) return next;
  if (job.misfire !== 'fire_all') return nextOccurrence(s, Math.max(firedAtMs, atMs));
  const limitMs = atMs - misfireThresholdOf(job);
  return job.updatedAtMs < firedAtMs && next <= limitMs ? fireAllStart(s, next, limitMs) : next;
}

/**
 * The pending occurrence of a job resumed at nowMs, before end_at and max_runs. Not missed: it (late, within the
 * threshold). Missed: fire_once keeps it (the catch-up, its fire jumps past the rest: nextAfter); skip jumps to
 * the first occurrence after nowMs; fire_all keeps it, or the earliest of the latest misfireFireAllMax.
 */
export function resumedNext(job: JobRecord, nowMs: number): number | null {
  const n = job.nextFireAtMs;
  const s = job.schedule;
  if (n === null || s.kind === 'once' || !isMissed(job, n, nowMs)) return n; // a once job whose time passed fires now
  switch (job.misfire) {
    case 'skip':
      return nextOccurrence(s, nowMs);
    case 'fire_once':
      return n;
    case 'fire_all':
      return fireAllStart(s, n, nowMs - misfireThresholdOf(job));
  }
}
