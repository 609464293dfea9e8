/**
 * NodeService: the SchedulerApi of the single node. Reads go straight to the shard stores (the node leads every
 * shard, so its applied state is current); writes are proposed, group-committed and applied by the Proposer,
 * and answered once applied. Job views carry the firing engine's volatile overlay (QUEUED / RUNNING).
 */
import type { Clock } from '../core/clock.js';
import { PunctualError, notFound } from '../core/errors.js';
import { shardOf } from '../core/ids.js';
import { nodeLimits } from '../core/limits.js';
import type { NodeMetrics } from '../metrics/metrics.js';
import type { Command } from '../scheduler/commands.js';
import { previewOccurrences } from '../scheduler/schedule.js';
import type {
  CallbackSpec,
  ExecutionRecord,
  JobListQuery,
  JobPatch,
  JobRecord,
  JobSpec,
  JobState,
  JobView,
  Schedule,
  TaskRecord,
} from '../scheduler/types.js';
import type { ClusterView, CreateJobResult, NodeConfig, SchedulerApi } from './api.js';
import { decodeExecutionCursor, decodeJobCursor, encodeCursor } from './cursor.js';
import type { FiringEngine } from './engine.js';
import { leaderTerm, type Proposer, type ShardStorage } from './proposer.js';
import { createItemsOf, deleteTaskOutcome, jobOf, putTaskOf } from './results.js';

export interface ServiceOptions {
  config: NodeConfig;
  shards: ShardStorage[];
  proposer: Proposer;
  engine: FiringEngine;
  clock: Clock;
  metrics: NodeMetrics;
}

export class NodeService implements SchedulerApi {
  readonly nodeId: string;
  apiPort = 0;
  ready = false;

  constructor(private readonly o: ServiceOptions) {
    this.nodeId = o.config.nodeId;
  }

  nowMs(): number {
    return this.o.clock.nowMs();
  }

  private shardFor(jobId: string): ShardStorage {
    return this.o.shards[shardOf(jobId, this.o.shards.length)];
  }

  private async proposeToAll(make: (nowMs: number) => Command): Promise<unknown[]> {
    const nowMs = this.nowMs();
    const applied = await Promise.all(this.o.shards.map((sh) => this.o.proposer.propose(sh.shard, make(nowMs))));
    return applied.map((a) => a.result);
  }

  // --- tasks (copied into every shard, so each shard can fire alone) ---------------------------------------

  async putTask(name: string, spec: CallbackSpec): Promise<{ task: TaskRecord; created: boolean }> {
    const existing = this.o.shards[0].store.getTask(name);
    const nowMs = this.nowMs();
    const task: TaskRecord = { ...spec, name, createdAtMs: existing?.createdAtMs ?? nowMs, updatedAtMs: nowMs };
    const results = await this.proposeToAll((now) => ({ type: 'put_task', nowMs: now, task }));
    return putTaskOf(results[0]);
  }

  async getTask(name: string): Promise<TaskRecord> {
    const task = this.o.shards[0].store.getTask(name);
    if (task === null) throw notFound('task', name);
    return task;
  }

  async listTasks(): Promise<TaskRecord[]> {
    return this.o.shards[0].store.listTasks();
  }

  async deleteTask(name: string): Promise<void> {
    if (this.o.shards[0].store.getTask(name) === null) throw notFound('task', name);
    // Checked on every shard first so that a refused delete leaves every copy in place.
    const live = this.o.shards.reduce((n, sh) => n + sh.store.countLiveJobsOfTask(name), 0);
    if (live > 0) throw new PunctualError('conflict', `task ${JSON.stringify(name)} has ${live} live job(s)`);
    const results = await this.proposeToAll((now) => ({ type: 'delete_task', nowMs: now, name }));
    for (const r of results) deleteTaskOutcome(r);
  }

  // --- jobs ------------------------------------------------------------------------------------------------

  async createJobs(specs: JobSpec[]): Promise<CreateJobResult[]> {
    const nowMs = this.nowMs();
    const groups = new Map<number, number[]>();
    specs.forEach((spec, i) => {
      const shard = shardOf(spec.id, this.o.shards.length);
      const g = groups.get(shard);
      if (g === undefined) groups.set(shard, [i]);
      else g.push(i);
    });
    const out: CreateJobResult[] = new Array(specs.length);
    let created = 0;
    await Promise.all(
      [...groups].map(async ([shard, indexes]) => {
        const jobs = indexes.map((i) => specs[i]);
        const applied = await this.o.proposer.propose(shard, { type: 'create_jobs', nowMs, shard, jobs });
        const items = createItemsOf(applied.result, jobs.length);
        items.forEach((item, k) => {
          if (item.ok) {
            if (item.created) created++;
            // A job created just now has no execution yet: skip the lookup (batches of 10,000).
            const job = item.created ? { ...item.job, state: this.o.engine.overlayState(item.job), lastExecution: null } : this.view(item.job);
            out[indexes[k]] = { ok: true, job, created: item.created };
          } else {
            out[indexes[k]] = { ok: false, id: item.id, error: item.error };
          }
        });
      }),
    );
    this.o.metrics.jobsSubmitted.inc(created);
    return out;
  }

  async getJob(id: string): Promise<JobView> {
    const job = this.shardFor(id).store.getJob(id);
    if (job === null) throw notFound('job', id);
    return this.view(job);
  }

  private view(job: JobRecord): JobView {
    const store = this.o.shards[job.shard]?.store ?? this.shardFor(job.id).store;
    return { ...job, state: this.o.engine.overlayState(job), lastExecution: store.lastExecution(job.id) };
  }

  private async jobCommand(id: string, make: (nowMs: number) => Command): Promise<JobView> {
    const sh = this.shardFor(id);
    const applied = await this.o.proposer.propose(sh.shard, make(this.nowMs()));
    return this.view(jobOf(applied.result, id));
  }

  cancelJob(id: string): Promise<JobView> {
    return this.jobCommand(id, (nowMs) => ({ type: 'cancel_job', nowMs, id }));
  }

  pauseJob(id: string): Promise<JobView> {
    return this.jobCommand(id, (nowMs) => ({ type: 'pause_job', nowMs, id }));
  }

  resumeJob(id: string): Promise<JobView> {
    return this.jobCommand(id, (nowMs) => ({ type: 'resume_job', nowMs, id }));
  }

  runJob(id: string): Promise<JobView> {
    return this.jobCommand(id, (nowMs) => ({ type: 'run_job', nowMs, id }));
  }

  patchJob(id: string, patch: JobPatch): Promise<JobView> {
    return this.jobCommand(id, (nowMs) => ({ type: 'patch_job', nowMs, id, patch }));
  }

  async listJobs(query: JobListQuery): Promise<{ jobs: JobView[]; nextCursor: string | null }> {
    const afterId = decodeJobCursor(query.cursor);
    const page = mergedJobPage(this.o.shards, query, afterId, (job) => this.o.engine.overlayState(job));
    return { jobs: page.jobs.map((j) => this.view(j)), nextCursor: page.nextAfterId === null ? null : encodeCursor(page.nextAfterId) };
  }

  async listExecutions(
    id: string,
    page: { limit: number; cursor: string | null },
  ): Promise<{ executions: ExecutionRecord[]; nextCursor: string | null }> {
    const before = decodeExecutionCursor(page.cursor);
    const store = this.shardFor(id).store;
    if (store.getJob(id) === null) throw notFound('job', id);
    const rows = store.listExecutions(id, page.limit + 1, before);
    if (rows.length <= page.limit) return { executions: rows, nextCursor: null };
    const executions = rows.slice(0, page.limit);
    return { executions, nextCursor: encodeCursor(String(executions[executions.length - 1].scheduledAtMs)) };
  }

  previewSchedule(schedule: Schedule, fromMs: number, count: number): number[] {
    return previewOccurrences(schedule, fromMs, count);
  }

  // --- cluster ---------------------------------------------------------------------------------------------

  async cluster(): Promise<ClusterView> {
    const c = this.o.config;
    return {
      nodeId: this.nodeId,
      nodes: [
        {
          id: this.nodeId,
          peerAddr: `${c.peerListenHost}:${c.peerListenPort}`,
          apiAddr: `${c.listenHost}:${this.apiPort}`,
          reachable: true,
        },
      ],
      shards: this.o.shards.map((sh) => ({
        id: sh.shard,
        leader: this.nodeId,
        term: leaderTerm,
        commitIndex: sh.appliedIndex,
        appliedIndex: sh.appliedIndex,
        members: [this.nodeId],
      })),
    };
  }

  readiness(): { ready: boolean; reason: string | null } {
    return this.ready ? { ready: true, reason: null } : { ready: false, reason: 'node is starting' };
  }
}

/** The stored states that can show as `state` once the overlay is applied. */
function storedStatesFor(state: JobState | null): Array<JobState | null> {
  if (state === null) return [null];
  if (state === 'QUEUED' || state === 'RUNNING') return ['PENDING', 'RUNNING'];
  return [state];
}

/**
 * One page of jobs over every shard, ordered by id: a k-way merge of per-shard pages, filtered by the overlaid
 * state. Examines at most nodeLimits.listScanRowsMax stored rows; a page may then hold fewer than `limit` jobs
 * and still carry a cursor.
 */
export function mergedJobPage(
  shards: ShardStorage[],
  query: JobListQuery,
  afterId: string | null,
  overlay: (job: JobRecord) => JobState,
): { jobs: JobRecord[]; nextAfterId: string | null } {
  const states = storedStatesFor(query.state);
  const pageSize = query.limit + 1;
  const jobs: JobRecord[] = [];
  let cursor = afterId;
  let scanned = 0;
  for (;;) {
    let candidates: JobRecord[] = [];
    let boundary: string | null = null;
    for (const sh of shards) {
      for (const state of states) {
        const rows = sh.store.listJobs({ state, task: query.task, limit: pageSize, afterId: cursor });
        candidates = candidates.concat(rows);
        if (rows.length === pageSize) {
          const last = rows[rows.length - 1].id;
          if (boundary === null || last < boundary) boundary = last;
        }
      }
    }
    candidates.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    for (const job of candidates) {
      if (boundary !== null && job.id > boundary) break;
      scanned++;
      cursor = job.id;
      if (query.state !== null && overlay(job) !== query.state) continue;
      if (jobs.length === query.limit) return { jobs, nextAfterId: jobs[jobs.length - 1].id };
      jobs.push(job);
    }
    if (boundary === null) return { jobs, nextAfterId: null };
    if (scanned >= nodeLimits.listScanRowsMax) return { jobs, nextAfterId: cursor };
  }
}
