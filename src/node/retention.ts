/**
 * The retention driver (docs/api.md "Retention"): on the leader of each shard, it proposes `retention` commands
 * that delete finished jobs (SUCCEEDED, FAILED, CANCELLED) whose retention ended and trim every job to its newest
 * `--retention-executions` executions. The leader's time and `--retention` are written into the command; apply
 * picks the rows from the replicated state (src/scheduler/machine.ts), so every replica deletes the same ones,
 * and a restart or a new leader simply goes on from the state.
 *
 * It never stalls firing: one command per shard per pass, each bounded (retentionLimits.jobsPerCommandMax jobs,
 * schedulerLimits.retentionExecutionsMax executions), proposed through the proposer like any write (refused while
 * its queues are full: the pass is simply tried again later), the shards looked at one per macrotask; while a
 * backlog is being deleted (a full batch) the next pass comes after retentionLimits.batchPauseMs, else after
 * intervalMs.
 *
 * Trimming sweeps every job of the shard in id order, retentionLimits.trimScanJobsMax per pass, and names in the
 * command the jobs that hold more executions than kept (a recurring job gains about one per run).
 */
import type { Clock } from '../core/clock.js';
import type { Logger } from '../core/log.js';
import { retentionLimits, schedulerLimits } from '../core/limits.js';
import type { Command, TrimItem } from '../scheduler/commands.js';
import type { CommandResult } from '../scheduler/machine.js';
import type { ShardStorage } from './group.js';
import type { Applied } from '../nodecore/index.js';

export interface RetentionOptions {
  shards: readonly ShardStorage[];
  /** The shards this node fires (leads, caught up): only their leader proposes. */
  leading(): Iterable<number>;
  propose(shard: number, command: Command): Promise<Applied>;
  clock: Clock;
  logger: Logger;
  /** `--retention` (null: off, only tasks with their own retention_ms expire). */
  retentionMs: number | null;
  /** `--retention-executions`. */
  executionsKeep: number;
}

export class RetentionDriver {
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  /** Per shard: where the trim sweep goes on (null: from the first job). */
  private readonly sweep = new Map<number, string | null>();
  /** Rows deleted since start (a figure for tests and the soak). */
  jobsDeletedTotal = 0;
  executionsDeletedTotal = 0;

  constructor(private readonly o: RetentionOptions) {}

  start(): void {
    this.schedule(retentionLimits.intervalMs);
  }

  /**
   * No pass starts after this. A proposal in flight is not waited for (without a quorum it would hold the shutdown
   * until it times out): it applies or fails on its own, and the pass ends at its next shard.
   */
  stop(): void {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  /** One pass over the shards this node leads now (tests call it directly); true when a backlog remains. */
  async pass(): Promise<boolean> {
    let backlog = false;
    for (const shard of [...this.o.leading()]) {
      if (this.stopped) break;
      try {
        if (await this.passShard(shard)) backlog = true;
      } catch (err) {
        // Not leading any more, queues full, shutting down: the next pass tries again.
        this.o.logger.debug('retention pass failed', { shard, err });
      }
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    return backlog;
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.pass().then(
        (backlog) => this.schedule(backlog ? retentionLimits.batchPauseMs : retentionLimits.intervalMs),
        () => this.schedule(retentionLimits.intervalMs),
      );
    }, delayMs);
    this.timer.unref();
  }

  private async passShard(shard: number): Promise<boolean> {
    const store = this.o.shards[shard]!.store;
    const nowMs = this.o.clock.nowMs();
    const expired = store.expiredJobs(nowMs, this.o.retentionMs, 1).length > 0;
    const trim = this.trimCandidates(shard);
    if (!expired && trim.length === 0) return false;
    const command: Command = { type: 'retention', nowMs, retentionMs: this.o.retentionMs, jobsMax: retentionLimits.jobsPerCommandMax, trim };
    const { result } = await this.o.propose(shard, command);
    const r = result as CommandResult;
    if (r.type !== 'retention') return false;
    this.jobsDeletedTotal += r.jobsDeleted;
    this.executionsDeletedTotal += r.executionsDeleted;
    if (r.jobsDeleted + r.executionsDeleted > 0) {
      this.o.logger.debug('retention deleted', { shard, jobs: r.jobsDeleted, executions: r.executionsDeleted });
    }
    // A full batch: more is waiting (a backlog after a restart or a lowered --retention), deleted batch by batch.
    return r.jobsDeleted >= retentionLimits.jobsPerCommandMax || r.executionsDeleted >= schedulerLimits.retentionExecutionsMax;
  }

  /** The next jobs of the sweep that hold more executions than kept (at most trimJobsPerCommandMax). */
  private trimCandidates(shard: number): TrimItem[] {
    const store = this.o.shards[shard]!.store;
    const after = this.sweep.get(shard) ?? null;
    const page = store.jobsOverExecutions(after, retentionLimits.trimScanJobsMax, this.o.executionsKeep);
    const ids = page.ids.slice(0, retentionLimits.trimJobsPerCommandMax);
    // A page with more candidates than one command takes: the sweep resumes after the last one taken.
    const next = ids.length < page.ids.length ? ids[ids.length - 1]! : page.nextAfterId;
    this.sweep.set(shard, next);
    return ids.map((jobId) => ({ jobId, keep: this.o.executionsKeep }));
  }
}
