/**
 * The state machine reads and writes one shard's state through this interface. Two implementations run the
 * same contract suite (store.contract.ts): MemoryStore (src/scheduler/memory-store.ts, the simulator and unit
 * tests) and SqliteShardStore (src/store, the node). Synchronous on purpose: apply is synchronous, and the
 * node applies into one open SQLite transaction that commits in batches (src/store/state-batch.ts).
 */
import type { JobSearch } from './search.js';
import type { CalendarRecord, ExecutionRecord, JobRecord, JobState, TaskRecord } from './types.js';

export interface JobPageQuery {
  state: JobState | null;
  task: string | null;
  limit: number;
  /** Return jobs with id > afterId, ordered by id. */
  afterId: string | null;
  /** Only jobs matching it (search.ts matchesSearch); absent = every job. */
  search?: JobSearch;
}

/** A PENDING job's key in the loader's order (SchedulerStore.dueJobs). */
export interface DueJob {
  id: string;
  nextFireAtMs: number;
}

export interface SchedulerStore {
  getTask(name: string): TaskRecord | null;
  putTask(task: TaskRecord): void;
  deleteTask(name: string): boolean;
  listTasks(): TaskRecord[];
  /** Jobs of this task that can still fire (state not SUCCEEDED, FAILED or CANCELLED). */
  countLiveJobsOfTask(name: string): number;

  getCalendar(name: string): CalendarRecord | null;
  putCalendar(calendar: CalendarRecord): void;
  deleteCalendar(name: string): boolean;
  /** Ordered by name. */
  listCalendars(): CalendarRecord[];

  /**
   * apply brackets every command with `commandStarted()` and `commandEnded()` (also when it throws). Between them
   * nothing but the command writes the shard and nothing is rolled back, so a store may keep what it read for the
   * command (SqliteShardStore keeps the row of the job being worked on) and must drop it at either call.
   */
  commandStarted?(): void;
  /** `failure`: the command threw this (its writes may be rolled back by the caller's savepoint, or kept). */
  commandEnded?(failure?: { error: unknown }): void;

  getJob(id: string): JobRecord | null;
  /** Insert or replace. */
  putJob(job: JobRecord): void;
  /** Ordered by id; the state filter matches the stored state. */
  listJobs(query: JobPageQuery): JobRecord[];
  /**
   * Jobs in state PENDING whose nextFireAtMs <= untilMs, ordered by (nextFireAtMs, id), strictly after
   * `after` when given: the loader pages through them. Only their keys: the loader arms (id, nextFireAtMs) and
   * the fire reads the job anyway, so the rows' records are neither read nor decoded here.
   */
  dueJobs(untilMs: number, limit: number, after: { atMs: number; id: string } | null): DueJob[];
  countJobsByState(): Record<JobState, number>;

  getExecution(jobId: string, scheduledAtMs: number): ExecutionRecord | null;
  /** Insert or replace, keyed by (jobId, scheduledAtMs). */
  putExecution(execution: ExecutionRecord): void;
  /** The execution with the greatest scheduledAtMs. */
  lastExecution(jobId: string): ExecutionRecord | null;
  /** Newest first (scheduledAtMs descending), strictly before beforeScheduledAtMs when given. */
  listExecutions(jobId: string, limit: number, beforeScheduledAtMs: number | null): ExecutionRecord[];
  /** Executions in state QUEUED or RUNNING (no final outcome yet) of this job. */
  openExecutions(jobId: string): ExecutionRecord[];
  /**
   * Every open execution of the shard, ordered by (jobId, scheduledAtMs), strictly after `after`: a new leader
   * re-fires RUNNING ones and re-arms QUEUED ones at retryAtMs.
   */
  allOpenExecutions(limit: number, after: { jobId: string; scheduledAtMs: number } | null): ExecutionRecord[];

  // --- retention (the `retention` command; docs/api.md "Retention")
  /**
   * Ids of finished jobs (SUCCEEDED, FAILED, CANCELLED) whose retention ended at nowMs, at most `limit`, in a fixed
   * order: first those whose task had a `retentionMs` when they finished (finish + that <= nowMs, by expiry), then
   * the others (finish + retentionMs <= nowMs, by finish; none when retentionMs is null). A job's finish is its
   * updatedAtMs as written in a final state.
   */
  expiredJobs(nowMs: number, retentionMs: number | null, limit: number): string[];
  /** Deletes up to executionsMax of the job's executions (oldest first), and the job once none is left. */
  deleteJob(id: string, executionsMax: number): { executions: number; deleted: boolean };
  /** Deletes up to `max` of the job's finished executions older than its newest `keep` executions (oldest first). */
  trimExecutions(jobId: string, keep: number, max: number): number;
}
