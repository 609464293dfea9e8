/**
 * The domain model, in internal (camelCase, epoch-ms) form. The HTTP layer maps it to and from the
 * snake_case JSON of docs/api.md in one place (src/http/views.ts). Pure: no IO, no clock.
 */
import type { JobSearch } from './search.js';
import type { ErrorClass } from './failure.js';

export type JobState = 'PENDING' | 'QUEUED' | 'RUNNING' | 'SUCCEEDED' | 'FAILED' | 'PAUSED' | 'CANCELLED';
export const jobStates: readonly JobState[] = [
  'PENDING',
  'QUEUED',
  'RUNNING',
  'SUCCEEDED',
  'FAILED',
  'PAUSED',
  'CANCELLED',
];

/**
 * An execution's state. QUEUED = waiting in the wheel for its (re)try, RUNNING = callback in flight,
 * SUCCEEDED / FAILED final, CANCELLED = its job was cancelled before it finished.
 */
export type ExecutionState = 'QUEUED' | 'RUNNING' | 'SUCCEEDED' | 'FAILED' | 'CANCELLED';

export type MisfirePolicy = 'fire_once' | 'skip' | 'fire_all';
export type OverlapPolicy = 'allow' | 'skip' | 'buffer_one';

export interface RetryPolicy {
  maxAttempts: number;
  initialBackoffMs: number;
  maxBackoffMs: number;
  multiplier: number;
  jitter: boolean;
}

/** Where and how to call: the body of a task, or a job's inline `callback`. */
export interface CallbackSpec {
  url: string;
  method: string;
  /** Lower-cased header names. */
  headers: Record<string, string>;
  timeoutMs: number;
  retry: RetryPolicy;
  signingSecret: string | null;
  /**
   * The next signing secret during a rotation: while set, every callback is signed with both. Absent (records
   * written before it existed) or null = none.
   */
  signingSecretNext?: string | null;
  maxConcurrency: number;
}

export interface TaskRecord extends CallbackSpec {
  name: string;
  /**
   * How long this task's finished jobs are kept, overriding the node's `--retention`. Absent or null: the node's.
   * Fixed for a job when it finishes (a later change applies to jobs that finish after it).
   */
  retentionMs?: number | null;
  createdAtMs: number;
  updatedAtMs: number;
}

/**
 * A named exclusion calendar (PUT /v1/calendars/{name}), copied into every shard like tasks. A recurring schedule
 * that names it in `exclude` does not run on its dates (local dates in the calendar's zone): calendar.ts.
 */
export interface CalendarRecord {
  name: string;
  /** IANA zone the dates are local dates of. */
  timezone: string;
  /** Excluded local dates, YYYY-MM-DD, sorted, without repeats. */
  dates: string[];
  /** Excluded inclusive ranges of local dates (from <= to), in the order given. */
  ranges: Array<{ from: string; to: string }>;
  description: string | null;
  createdAtMs: number;
  updatedAtMs: number;
}

/**
 * A schedule after the proposer resolved every time-dependent value: `now` and `delay_ms` become `once` with
 * an absolute atMs (apply never reads a clock).
 */
export type Schedule =
  | { kind: 'once'; atMs: number }
  | ({ kind: 'cron'; cron: string; timezone: string; startAtMs: number | null; exclude?: string[]; dst?: DstPolicy } & Spread)
  | ({ kind: 'every'; everyMs: number; startAtMs: number; exclude?: string[] } & Spread);

/**
 * What a cron schedule does with a local time that does not exist (`gap`) or happens twice (`repeat`) on a
 * daylight-saving change (docs/api.md, "Daylight-saving changes"). Absent: cron-parser's own rules (schedule.ts).
 */
export interface DstPolicy {
  gap: 'shift_forward' | 'skip';
  repeat: 'first' | 'last' | 'both';
}

/**
 * `spreadMs`: each occurrence runs `spreadOffsetMs` (in [0, spreadMs), a hash of the job id) after the schedule's
 * nominal time. The offset is set when the job is created or re-scheduled (resolveSchedule); absent = 0.
 */
export interface Spread {
  spreadMs?: number;
  spreadOffsetMs?: number;
}

/**
 * A schedule as a command carries it: also `every` without a start, which apply starts at the command's nowMs (the
 * one instant a first occurrence is computed from; see resolveSchedule in schedule.ts). Stored jobs never have it.
 */
export type ScheduleSpec = Schedule | ({ kind: 'every'; everyMs: number; startAtMs: null; exclude?: string[] } & Spread);

/** A job as submitted, after validation and normalization by the proposer. */
export interface JobSpec {
  id: string;
  /** Task name, or null when `callback` is inline. */
  task: string | null;
  callback: CallbackSpec | null;
  /** The callback body. */
  payload: Uint8Array;
  /** How the payload was given, so GET can echo it: JSON text, or raw bytes (payload_base64). */
  payloadEncoding: 'json' | 'base64';
  /**
   * The callback body by reference, fetched when each attempt starts (src/dispatch/payload-ref.ts); the inline
   * payload is then empty. Absent (records written before it existed) or null = the inline payload.
   */
  payloadRef?: PayloadRef | null;
  schedule: ScheduleSpec;
  endAtMs: number | null;
  /** 0 = unlimited. */
  maxRuns: number;
  misfire: MisfirePolicy;
  /**
   * An occurrence is missed when it is due more than this before Punctual gets to it (misfire.ts). Absent on jobs
   * written before it existed: they keep the threshold they had (misfireThresholdMsUnset).
   */
  misfireThresholdMs?: number;
  overlap: OverlapPolicy;
  metadata: Record<string, unknown> | null;
  /**
   * A digest of the request body that created it (id or Idempotency-Key repeat: same digest -> 200 with the
   * existing job, another digest -> 409).
   */
  requestDigest: string;
  /** The Idempotency-Key header, when given. */
  idempotencyKey: string | null;
}

/** `payload_ref`: where the callback body is fetched from, and what it must be. */
export interface PayloadRef {
  /** http or https; fetched under the callbacks' target policy (SSRF guard). */
  url: string;
  /** Lower-case hex SHA-256 the fetched body must have (a mismatch fails the attempt for good), or null. */
  sha256: string | null;
  /** The body's content type; null = the fetched response's, else application/octet-stream. */
  contentType: string | null;
}

/** One attempt of an execution, as the history lists it (docs/api.md, executions). */
export interface AttemptRecord {
  attempt: number;
  /** null when the attempt's start was never recorded (its outcome came alone). */
  startedAtMs: number | null;
  /** null while in flight, or when its outcome was lost (a crash or a leader change: a later attempt follows). */
  finishedAtMs: number | null;
  statusCode: number | null;
  error: string | null;
  /** The node that sent it. */
  nodeId: string | null;
  /** `{shard}.{term}` of the leader that recorded it (the callback's X-Punctual-Fencing-Token); null when unknown. */
  fencingToken: string | null;
}

export interface ExecutionRecord {
  jobId: string;
  /** The occurrence's fire time: with the job id it is the X-Deduplication-Key. */
  scheduledAtMs: number;
  attempt: number;
  state: ExecutionState;
  startedAtMs: number | null;
  finishedAtMs: number | null;
  statusCode: number | null;
  error: string | null;
  /** First attempt's start minus scheduled time. */
  latenessMs: number | null;
  nodeId: string | null;
  /** When the next attempt is due, while state is QUEUED after a failed attempt. */
  retryAtMs: number | null;
  /**
   * Every attempt, oldest first (at most schedulerLimits.attemptsPerExecutionMax, the latest kept). Absent on
   * executions written before attempts were recorded.
   */
  attempts?: AttemptRecord[];
}

export interface JobRecord extends JobSpec {
  /** Resolved when the job was created or patched. */
  schedule: Schedule;
  /** The stored state (QUEUED and RUNNING are overlaid by the leader from its wheel and dispatcher). */
  state: JobState;
  /** The occurrence to fire next, or null when none remains. */
  nextFireAtMs: number | null;
  runs: number;
  shard: number;
  createdAtMs: number;
  updatedAtMs: number;
  /**
   * The run keys of the job's latest extra runs (run_job), oldest first, at most schedulerLimits.runKeysPerJobMax:
   * a repeated run with one of them answers the run it made. Absent until the first keyed run.
   */
  runKeys?: Array<{ key: string; runAtMs: number }>;
}

/** What the API shows: the record plus its last execution. */
export interface JobView extends JobRecord {
  lastExecution: ExecutionRecord | null;
}

export interface JobPatch {
  schedule?: ScheduleSpec;
  misfireThresholdMs?: number;
  payload?: Uint8Array;
  payloadEncoding?: 'json' | 'base64';
  /** A new reference (the inline payload becomes empty), or null to drop it; a new inline payload drops it too. */
  payloadRef?: PayloadRef | null;
  metadata?: Record<string, unknown> | null;
}

/** A dead letter: a FAILED job (its retries exhausted), as GET /v1/dead-letters lists it. */
export interface DeadLetter {
  jobId: string;
  task: string | null;
  errorClass: ErrorClass;
  /** The failed execution's last attempt: its error, status and attempt count. */
  error: string | null;
  statusCode: number | null;
  attempts: number;
  /** The failed occurrence (null when its execution is gone). */
  scheduledAtMs: number | null;
  /** When the job failed (its finish). */
  failedAtMs: number;
}

/** Which dead letters a list, a count or a replay by filter takes: failed in [sinceMs, untilMs). */
export interface DeadLetterFilter {
  task: string | null;
  errorClass: ErrorClass | null;
  sinceMs: number | null;
  untilMs: number | null;
}

export interface DeadLetterGroup {
  task: string | null;
  errorClass: ErrorClass;
  count: number;
  lastFailedAtMs: number;
}

export interface JobListQuery {
  state: JobState | null;
  task: string | null;
  limit: number;
  cursor: string | null;
  /** metadata and next fire time filters (search.ts); absent = none. */
  search?: JobSearch;
}
