/**
 * Every state change is a Command, msgpackr-encoded into the log (local in one node, replicated by Raft in a
 * cluster) and applied by the deterministic state machine (machine.ts). A command targets one shard.
 *
 * Determinism: apply(store, command) reads no clock and no randomness. The proposer writes every
 * time-dependent input into the command: `nowMs` is the proposer's clock when it built the command, and apply
 * uses it (first occurrence, misfire decisions, updatedAtMs). Replaying the log gives the same state everywhere.
 */
import type { CalendarRecord, ExecutionRecord, JobPatch, JobRecord, JobSpec, TaskRecord } from './types.js';

export type Command =
  /** Create or replace a task (tasks are copied into every shard so each shard leader can fire alone). */
  | { type: 'put_task'; nowMs: number; task: TaskRecord }
  | { type: 'delete_task'; nowMs: number; name: string }
  /** Create or replace an exclusion calendar (copied into every shard, like tasks). */
  | { type: 'put_calendar'; nowMs: number; calendar: CalendarRecord }
  | { type: 'delete_calendar'; nowMs: number; name: string }
  /** Create jobs; each item succeeds or fails on its own (id repeat with same digest -> existing job). */
  | { type: 'create_jobs'; nowMs: number; shard: number; jobs: JobSpec[] }
  | { type: 'cancel_job'; nowMs: number; id: string }
  | { type: 'pause_job'; nowMs: number; id: string }
  | { type: 'resume_job'; nowMs: number; id: string }
  /**
   * One extra run at nowMs (its scheduledAtMs is nowMs), besides the regular schedule. `runKey` names the request
   * (fixed by the node that took it): a run_job whose key the job remembers answers that run again, runs nothing.
   */
  | { type: 'run_job'; nowMs: number; id: string; runKey?: string }
  /**
   * `afterFired` (written by every node since it was added; absent in older entries, which apply as they did): a new
   * schedule's first occurrence skips those that already have an execution. A patch stamped just before an
   * occurrence fires is applied after that occurrence's `fired` record, and recomputing from its stamp would
   * schedule the occurrence again.
   */
  | { type: 'patch_job'; nowMs: number; id: string; patch: JobPatch; afterFired?: true }
  /** The leader sent (or is sending) these attempts: executions become RUNNING, recurring jobs advance. */
  | { type: 'fired'; nowMs: number; nodeId: string; items: FiredItem[] }
  /**
   * Attempts finished: success, permanent failure, or a retry due at retryAtMs. An item with `startedAtMs` also
   * stands for its attempt's `fired` item (the leader folds the two when the callback finished before the fired
   * item was proposed): it applies exactly as that fired item followed by this outcome. `nodeId` is the sender.
   */
  | { type: 'outcomes'; nowMs: number; nodeId?: string; items: OutcomeItem[] }
  /** Occurrences the leader decided not to fire (misfire=skip after downtime, overlap=skip). */
  | { type: 'skipped'; nowMs: number; items: SkippedItem[] }
  /**
   * Data retention, proposed by the leader's driver (src/node/retention.ts) with the leader's time: deletes at
   * most `jobsMax` finished jobs whose retention ended at nowMs (the task's `retentionMs` when it had one at the
   * job's finish, else `retentionMs`; null = kept forever) with their executions, and trims each job of `trim` to
   * its newest `keep` executions. Apply picks the rows from the state, so every replica deletes the same ones.
   */
  | { type: 'retention'; nowMs: number; retentionMs: number | null; jobsMax: number; trim: TrimItem[] }
  /**
   * Replays dead letters: each job of `ids` that is FAILED gets one new run at nowMs (as run_job) and is RUNNING
   * until it ends; the others are left alone.
   */
  | { type: 'replay_jobs'; nowMs: number; ids: string[] }
  /** Appended by a new leader (and at start) so it can commit; changes nothing. */
  | { type: 'noop' };

export interface FiredItem {
  jobId: string;
  scheduledAtMs: number;
  attempt: number;
  startedAtMs: number;
}

export interface OutcomeItem {
  jobId: string;
  scheduledAtMs: number;
  attempt: number;
  result: 'succeeded' | 'failed' | 'retry';
  statusCode: number | null;
  error: string | null;
  finishedAtMs: number;
  /** Set when result is 'retry': when the next attempt is due. */
  retryAtMs: number | null;
  /** Present when the attempt's `fired` item was folded into this outcome (see the `outcomes` command). */
  startedAtMs?: number;
}

export interface TrimItem {
  jobId: string;
  /** Finished executions older than the newest `keep` are deleted (open ones never). */
  keep: number;
}

export interface SkippedItem {
  jobId: string;
  scheduledAtMs: number;
  reason: 'misfire' | 'overlap';
}

/**
 * What applying a command asks of the host (the leader's wheel). Followers ignore effects; a new leader
 * rebuilds its wheel from the store (loader + open executions) instead.
 */
export type Effect =
  /**
   * Fire attempt `attempt` of occurrence (jobId, scheduledAtMs) at dueAtMs (>= scheduledAtMs). `job` and
   * `execution` are what the same command left stored, when it wrote them (an execution `null`: the job was created
   * by it, so none exists), so the leader need not read them back at the due ms; absent: not written by it. They
   * are apply's output, never part of a log entry, and shared with the command's result: read-only.
   */
  | { type: 'arm'; jobId: string; scheduledAtMs: number; attempt: number; dueAtMs: number; job?: JobRecord; execution?: ExecutionRecord | null }
  /** Drop every timer and pending retry of this job (cancel, pause, patch of the schedule). */
  | { type: 'disarm'; jobId: string }
  /** An execution reached a final state (the leader may fire a buffered occurrence: overlap=buffer_one). */
  | { type: 'finished'; jobId: string; scheduledAtMs: number };
