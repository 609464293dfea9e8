/**
 * Every rule about firing one occurrence, in one place: what to do with a due attempt (`decideDue`) and what its
 * callback's outcome becomes (`outcomeOf`). The scheduler decides the policies (src/scheduler/policy.ts
 * dueAction: misfire, overlap); these functions read the stored facts and ask it, never re-deciding it.
 */
import { retryDelayMs } from '../dispatch/backoff.js';
import type { AttemptOutcome } from '../dispatch/dispatcher.js';
import type { OutcomeItem } from '../scheduler/commands.js';
import { dueAction } from '../scheduler/policy.js';
import type { CallbackSpec, ExecutionRecord, JobRecord } from '../scheduler/types.js';

/** One armed attempt of an occurrence. */
export interface Attempt {
  shard: number;
  jobId: string;
  scheduledAtMs: number;
  attempt: number;
  dueAtMs: number;
  /** Armed by an applied command's effect (trusted) rather than by the loader (re-checked against the store). */
  fromEffect: boolean;
  /** The occurrence overlap=buffer_one held, let go because the run before it finished (policy.ts dueAction). */
  released: boolean;
  /** The committed records the core holds for it (firing.ts), or none: the fire reads them from the store. */
  held?: Held;
  /** Decided at its due time, not staged ahead of it (stagedEarlyHolds said no, or the staged orders were at their limit). */
  unstaged?: boolean;
}

/**
 * What the applied command that armed an attempt left stored: its job, and its occurrence's execution when that
 * command wrote it or created the job (`null`: none exists; undefined: not known, read it). Valid while no later
 * command touched the job and the shard's `epoch` is unchanged (firing.ts Firing.forget).
 */
export interface Held {
  job: JobRecord;
  execution: ExecutionRecord | null | undefined;
  epoch: number;
}

export type DueDecision =
  /** Not sent: the occurrence is over, cancelled, paused, already recorded, or not this node's to fire. */
  | { kind: 'drop' }
  /** overlap=buffer_one: wait for the job's `finished` effect. */
  | { kind: 'buffer' }
  /** The scheduler's policy skips it, or it is the job's next occurrence and already ran: record a `skipped` item. */
  | { kind: 'skip'; reason: 'misfire' | 'overlap' }
  /** Send it now; `firstOfOnce`: a one-off's first attempt, whose fired record may wait for its outcome. */
  | { kind: 'send'; job: JobRecord; firstOfOnce: boolean };

/** What the decision reads about the occurrence, besides the store's job and execution. */
export interface DueFacts {
  /** A fired or skipped record of it is proposed and not applied yet. */
  recording: boolean;
  /** Another occurrence of the job is in flight on this node or open in the store. */
  otherOpen: () => boolean;
}

const finalExecution = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);

/** The execution is closed: nothing recorded for it changes it any more (a later fired or outcome record is ignored). */
export function isFinal(exec: ExecutionRecord | null): boolean {
  return exec !== null && finalExecution.has(exec.state);
}

/**
 * A due attempt of a shard this node fires, with a valid lease, at `nowMs >= dueAtMs`: is it still wanted, and
 * does the scheduler's policy fire, buffer or skip it?
 */
export function decideDue(a: Attempt, job: JobRecord | null, exec: ExecutionRecord | null, nowMs: number, facts: DueFacts): DueDecision {
  if (job === null || job.state === 'CANCELLED') return { kind: 'drop' };
  if (isFinal(exec)) {
    // The job's next regular occurrence already ran (a new schedule or a resume computed from a wall clock
    // behind the job's history): it can never fire again, and dropping it would leave the job there forever.
    if (job.state === 'PENDING' && job.nextFireAtMs === a.scheduledAtMs && !facts.recording) return { kind: 'skip', reason: 'misfire' };
    return { kind: 'drop' };
  }
  // A paused job fires nothing regular; an open execution (run_job, a retry armed before) may still start.
  if (job.state === 'PAUSED' && exec === null) return { kind: 'drop' };
  const regular = exec === null && job.nextFireAtMs === a.scheduledAtMs;
  // The loader's arm is only a hint: without an execution it must be the job's next occurrence.
  if (exec === null && (facts.recording || (!regular && !a.fromEffect))) return { kind: 'drop' };
  const first = regular && a.attempt === 1;
  if (!first || job.schedule.kind === 'once') return { kind: 'send', job, firstOfOnce: first };
  const runInFlight = job.overlap !== 'allow' && facts.otherOpen();
  const action = dueAction(job, a.scheduledAtMs, nowMs, runInFlight, a.released);
  if (action === 'fire') return { kind: 'send', job, firstOfOnce: false };
  if (action === 'buffer') return { kind: 'buffer' };
  return { kind: 'skip', reason: action === 'skip_misfire' ? 'misfire' : 'overlap' };
}

/**
 * A `send` decided before the due time (the attempt staged) is still the decision at the due time, unless the
 * scheduler's overlap policy looks at the run before it (a recurring job's regular first attempt without
 * overlap=allow): that run may finish in between, so the attempt is decided at its due time.
 */
export function stagedEarlyHolds(a: Attempt, job: JobRecord, exec: ExecutionRecord | null): boolean {
  const first = exec === null && job.nextFireAtMs === a.scheduledAtMs && a.attempt === 1;
  return !first || job.schedule.kind === 'once' || job.overlap === 'allow';
}

/** The record of a finished attempt: succeeded; a retry at finishedAt + backoff while attempts remain; else failed. */
export function outcomeOf(a: Pick<Attempt, 'jobId' | 'scheduledAtMs' | 'attempt'>, spec: CallbackSpec, o: AttemptOutcome, rand01: () => number): OutcomeItem {
  const base = { jobId: a.jobId, scheduledAtMs: a.scheduledAtMs, attempt: a.attempt, statusCode: o.statusCode, error: o.error, finishedAtMs: o.finishedAtMs };
  if (o.kind === 'succeeded') return { ...base, result: 'succeeded', retryAtMs: null };
  if (o.kind === 'retryable' && a.attempt < spec.retry.maxAttempts) {
    return { ...base, result: 'retry', retryAtMs: o.finishedAtMs + retryDelayMs(spec.retry, a.attempt, o.retryAfterMs, rand01()) };
  }
  return { ...base, result: 'failed', retryAtMs: null };
}

/** A callback that cannot be sent at all (its task is gone): failed at once. */
export function missingTaskOutcome(a: Pick<Attempt, 'jobId' | 'scheduledAtMs' | 'attempt'>, task: string | null, nowMs: number): OutcomeItem {
  return { jobId: a.jobId, scheduledAtMs: a.scheduledAtMs, attempt: a.attempt, result: 'failed', statusCode: null, error: `task ${task} not found`, finishedAtMs: nowMs, retryAtMs: null };
}

export function occurrenceKey(jobId: string, scheduledAtMs: number): string {
  return `${jobId}\n${scheduledAtMs}`;
}
