/**
 * NodeService: the SchedulerApi of a node. Every call that must see or change a shard's current state runs on
 * that shard's leader (ShardRouter: locally when this node leads it, else forwarded once over the peer
 * transport). Writes are proposed to the shard's Raft group and answered once applied; reads of one job are
 * linearizable (the leader's lease, else a ReadIndex round). Lists and tasks are read from this node's own
 * replicas (possibly a little behind on a follower; QUEUED / RUNNING overlays are known only where the shard
 * fires). Job views carry the firing engine's volatile overlay.
 */
import { randomUUID } from 'node:crypto';
import type { Clock } from '../core/clock.js';
import { PunctualError, invalid, notFound } from '../core/errors.js';
import { shardOf } from '../core/ids.js';
import { limits, nodeLimits } from '../core/limits.js';
import type { NodeMetrics } from '../metrics/metrics.js';
import type { Command } from '../scheduler/commands.js';
import { calendarRule, previewExcluding } from '../scheduler/calendar.js';
import type {
  CalendarRecord,
  CallbackSpec,
  DeadLetter,
  DeadLetterFilter,
  DeadLetterGroup,
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
import type { BackupDownload } from '../http/admin-routes.js';
import type { BackupTaker } from '../store/backup.js';
import type { CalendarBody, ClockAdvanceResult, ClockView, ClusterView, CreateJobResult, DueProfile, HotInstantReport, OverviewData, SchedulerApi } from '../http/scheduler-api.js';
import type { NodeConfig } from './api.js';
import type { ClockDriver } from './clock-driver.js';
import type { ClusterOps } from './cluster-ops.js';
import { decodeExecutionCursor, decodeJobCursor, encodeCursor } from './cursor.js';
import type { ShardStorage } from './group.js';
import { queueFull } from '../nodecore/index.js';
import type { NodeShell } from './shell.js';
import { notLeader, type RaftHost } from './raft-host.js';
import { createItemsOf, deleteCalendarOutcome, deleteTaskOutcome, jobOf, putCalendarOf, putTaskOf } from './results.js';
import { checkForwardOp } from './forward-check.js';
import { deadLetterGroups, deadLetterPage, replayDeadLetters, type ReplayRequest, type ReplayResult } from './dead-letters.js';
import { fromWireError, toWireError, type ForwardOp, type ShardRouter, type WireError } from './router.js';

export interface ServiceOptions {
  config: NodeConfig;
  shards: ShardStorage[];
  /** Client writes go through the shell's NodeCore (group commit). */
  proposer: Pick<NodeShell, 'propose'>;
  /** The firing side's views: the overlay, and room in the wheel for a run. */
  engine: Pick<NodeShell, 'overlayState' | 'hasRoom' | 'drainRatePerS'>;
  host: RaftHost;
  router: ShardRouter;
  cluster: ClusterOps;
  clock: Clock;
  metrics: NodeMetrics;
  /** `serve --clock manual`: what moves the scheduler's clock (absent or null: the system clock). */
  clockDriver?: ClockDriver | null;
  /** GET /v1/admin/backup (absent or null: answered 503). */
  backups?: BackupTaker | null;
}

type JobAction = 'cancel' | 'pause' | 'resume' | 'run' | 'patch';

const commandOf: Record<JobAction, Command['type']> = {
  cancel: 'cancel_job',
  pause: 'pause_job',
  resume: 'resume_job',
  run: 'run_job',
  patch: 'patch_job',
};

/** A create result as it travels between nodes (its error as a value). */
type WireCreateResult = { ok: true; job: JobView; created: boolean } | { ok: false; id: string | null; error: WireError };

export class NodeService implements SchedulerApi {
  readonly nodeId: string;
  apiPort = 0;
  ready = false;

  /** hotInstant's recent counts per due ms (bounded by limits.hotInstantCountsMax). */
  private readonly dueAtCounts = new Map<number, { due: number; countedAtMs: number }>();
  /** The same per bucket of limits.hotInstantBucketMs (keyed by its first ms). */
  private readonly bucketCounts = new Map<number, { due: number; countedAtMs: number }>();

  constructor(private readonly o: ServiceOptions) {
    this.nodeId = o.config.nodeId;
  }

  nowMs(): number {
    return this.o.clock.nowMs();
  }

  private shardFor(jobId: string): ShardStorage {
    return this.o.shards[shardOf(jobId, this.o.shards.length)];
  }

  /** Proposes `command` to the shard's leader (here or forwarded) and returns the command's result. */
  private proposeVia(shard: number, command: Command): Promise<unknown> {
    return this.o.router.call(shard, { op: 'propose', shard, command }, () => this.proposeLocal(shard, command));
  }

  private async proposeLocal(shard: number, command: Command): Promise<unknown> {
    if (!this.o.host.isLeader(shard)) throw notLeader(shard);
    return (await this.o.proposer.propose(shard, command)).result;
  }

  private proposeToAll(make: (nowMs: number) => Command): Promise<unknown[]> {
    const nowMs = this.nowMs();
    return Promise.all(this.o.shards.map((sh) => this.proposeVia(sh.shard, make(nowMs))));
  }

  // --- forwarded calls: run here, on the shard's leader ---------------------------------------------------

  /**
   * A call forwarded by another node: this node must lead the shard (it never forwards again). It is checked
   * first, as the client API checks a request (forward-check.ts): nothing a peer sends enters the log unchecked.
   */
  async runForwarded(forwarded: unknown): Promise<unknown> {
    const op = checkForwardOp(forwarded, this.o.shards.length);
    switch (op.op) {
      case 'create_jobs': {
        const results = await this.createLocal(op.shard, op.nowMs, op.jobs as JobSpec[]);
        return results.map((r): WireCreateResult => (r.ok ? r : { ok: false, id: r.id, error: toWireError(r.error) }));
      }
      case 'job':
        return this.jobLocal(op.action, op.id, op.patch as JobPatch | null, op.runKey ?? null);
      case 'get_job':
        return this.getJobLocal(op.id);
      case 'list_executions':
        return this.listExecutionsLocal(op.id, { limit: op.limit, cursor: op.cursor });
      case 'propose':
        return this.proposeLocal(op.shard, op.command as Command);
      case 'transfer_leader':
        return this.o.cluster.transferLeader(op.shard, op.to);
      case 'get_task':
        return this.getTaskLocal(op.name);
      case 'list_tasks':
        return this.listTasksLocal();
      case 'get_calendar':
        return this.getCalendarLocal(op.name);
      case 'list_calendars':
        return this.listCalendarsLocal();
      case 'info':
        return this.o.cluster.info();
    }
  }

  // --- tasks (copied into every shard, so each shard can fire alone) ---------------------------------------

  async putTask(name: string, spec: CallbackSpec): Promise<{ task: TaskRecord; created: boolean }> {
    const existing = this.o.shards[0].store.getTask(name);
    const nowMs = this.nowMs();
    const task: TaskRecord = { ...spec, name, createdAtMs: existing?.createdAtMs ?? nowMs, updatedAtMs: nowMs };
    const results = await this.proposeToAll((now) => ({ type: 'put_task', nowMs: now, task }));
    return putTaskOf(results[0]);
  }

  /**
   * Task reads are linearizable like job reads: they run on shard 0's leader (every shard holds a copy, and a
   * put answers once every shard applied it), so a task written through one node is read back through any other.
   */
  getTask(name: string): Promise<TaskRecord> {
    return this.o.router.call(0, { op: 'get_task', name }, () => this.getTaskLocal(name));
  }

  private async getTaskLocal(name: string): Promise<TaskRecord> {
    await this.o.host.readBarrier(0);
    const task = this.o.shards[0].store.getTask(name);
    if (task === null) throw notFound('task', name);
    return task;
  }

  listTasks(): Promise<TaskRecord[]> {
    return this.o.router.call(0, { op: 'list_tasks' }, () => this.listTasksLocal());
  }

  private async listTasksLocal(): Promise<TaskRecord[]> {
    await this.o.host.readBarrier(0);
    return this.o.shards[0].store.listTasks();
  }

  async deleteTask(name: string): Promise<void> {
    await this.getTask(name); // not_found, read on shard 0's leader
    // Checked on every shard first so that a refused delete leaves every copy in place.
    const live = this.o.shards.reduce((n, sh) => n + sh.store.countLiveJobsOfTask(name), 0);
    if (live > 0) throw new PunctualError('conflict', `task ${JSON.stringify(name)} has ${live} live job(s)`);
    const results = await this.proposeToAll((now) => ({ type: 'delete_task', nowMs: now, name }));
    for (const r of results) deleteTaskOutcome(r);
  }

  // --- calendars (copied into every shard like tasks: each shard computes its jobs' occurrences alone) -------

  async putCalendar(name: string, body: CalendarBody): Promise<{ calendar: CalendarRecord; created: boolean }> {
    const existing = this.o.shards[0].store.getCalendar(name);
    const nowMs = this.nowMs();
    const calendar: CalendarRecord = { ...body, name, createdAtMs: existing?.createdAtMs ?? nowMs, updatedAtMs: nowMs };
    const results = await this.proposeToAll((now) => ({ type: 'put_calendar', nowMs: now, calendar }));
    return putCalendarOf(results[0]);
  }

  /** Linearizable like task reads: on shard 0's leader. */
  getCalendar(name: string): Promise<CalendarRecord> {
    return this.o.router.call(0, { op: 'get_calendar', name }, () => this.getCalendarLocal(name));
  }

  private async getCalendarLocal(name: string): Promise<CalendarRecord> {
    await this.o.host.readBarrier(0);
    const calendar = this.o.shards[0].store.getCalendar(name);
    if (calendar === null) throw notFound('calendar', name);
    return calendar;
  }

  listCalendars(): Promise<CalendarRecord[]> {
    return this.o.router.call(0, { op: 'list_calendars' }, () => this.listCalendarsLocal());
  }

  private async listCalendarsLocal(): Promise<CalendarRecord[]> {
    await this.o.host.readBarrier(0);
    return this.o.shards[0].store.listCalendars();
  }

  /** Allowed while jobs name the calendar: from their next computed occurrence on it excludes nothing. */
  async deleteCalendar(name: string): Promise<void> {
    await this.getCalendar(name); // not_found, read on shard 0's leader
    const results = await this.proposeToAll((now) => ({ type: 'delete_calendar', nowMs: now, name }));
    for (const r of results) deleteCalendarOutcome(r);
  }

  // --- jobs ------------------------------------------------------------------------------------------------

  async createJobs(specs: JobSpec[]): Promise<CreateJobResult[]> {
    const nowMs = this.nowMs();
    // One job (POST /v1/jobs): one shard, nothing to group or merge back.
    if (specs.length === 1) return this.createOnShard(shardOf(specs[0]!.id, this.o.shards.length), nowMs, specs);
    const groups = new Map<number, number[]>();
    specs.forEach((spec, i) => {
      const shard = shardOf(spec.id, this.o.shards.length);
      const g = groups.get(shard);
      if (g === undefined) groups.set(shard, [i]);
      else g.push(i);
    });
    const out: CreateJobResult[] = new Array(specs.length);
    await Promise.all(
      [...groups].map(async ([shard, indexes]) => {
        const results = await this.createOnShard(shard, nowMs, indexes.map((i) => specs[i]!));
        results.forEach((r, k) => (out[indexes[k]] = r));
      }),
    );
    return out;
  }

  /** One create_jobs on `shard` (here or at its leader); a failure of the whole call is every job's error. */
  private async createOnShard(shard: number, nowMs: number, jobs: JobSpec[]): Promise<CreateJobResult[]> {
    try {
      const results = await this.o.router.call(shard, { op: 'create_jobs', shard, nowMs, jobs }, () => this.createLocal(shard, nowMs, jobs));
      return results.map((r) => (r.ok || r.error instanceof PunctualError ? r : { ...r, error: fromWireError(r.error as unknown as WireError) }));
    } catch (err) {
      const error = err instanceof PunctualError ? err : new PunctualError('unavailable', 'shard unavailable');
      return jobs.map((j) => ({ ok: false, id: j.id, error }));
    }
  }

  /** On the shard's leader: one create_jobs command for the shard's part of the request. */
  private async createLocal(shard: number, nowMs: number, jobs: JobSpec[]): Promise<CreateJobResult[]> {
    if (!this.o.host.isLeader(shard)) throw notLeader(shard);
    const applied = await this.o.proposer.propose(shard, { type: 'create_jobs', nowMs, shard, jobs });
    const items = createItemsOf(applied.result, jobs.length);
    let created = 0;
    const out = items.map((item): CreateJobResult => {
      if (!item.ok) return { ok: false, id: item.id, error: item.error };
      if (item.created) created++;
      // A job created just now has no execution yet: skip the lookup (batches of 10,000).
      const job = item.created ? { ...item.job, state: this.o.engine.overlayState(item.job), lastExecution: null } : this.view(item.job);
      return { ok: true, job, created: item.created };
    });
    this.o.metrics.jobsSubmitted.inc(created);
    return out;
  }

  getJob(id: string): Promise<JobView> {
    const shard = this.shardFor(id).shard;
    return this.o.router.call(shard, { op: 'get_job', id }, () => this.getJobLocal(id));
  }

  private async getJobLocal(id: string): Promise<JobView> {
    await this.o.host.readBarrier(this.shardFor(id).shard);
    const job = this.shardFor(id).store.getJob(id);
    if (job === null) throw notFound('job', id);
    return this.view(job);
  }

  private view(job: JobRecord): JobView {
    const store = this.o.shards[job.shard]?.store ?? this.shardFor(job.id).store;
    return { ...job, state: this.o.engine.overlayState(job), lastExecution: store.lastExecution(job.id) };
  }

  private jobCommand(action: JobAction, id: string, patch: JobPatch | null, runKey: string | null = null): Promise<JobView> {
    const shard = this.shardFor(id).shard;
    return this.o.router.call(shard, { op: 'job', action, id, patch, runKey }, () => this.jobLocal(action, id, patch, runKey));
  }

  private async jobLocal(action: JobAction, id: string, patch: JobPatch | null, runKey: string | null): Promise<JobView> {
    const { shard } = this.shardFor(id);
    // A run arms a timer the loader cannot find again: refused while the wheel is at the loader's limit.
    if (action === 'run' && !this.o.engine.hasRoom()) throw queueFull('wheel_full', `the timer wheel of shard ${shard}'s leader is full`);
    const nowMs = this.nowMs();
    const type = commandOf[action];
    const command = (
      type === 'patch_job' ? { type, nowMs, id, patch: patch as JobPatch, afterFired: true } : type === 'run_job' && runKey !== null ? { type, nowMs, id, runKey } : { type, nowMs, id }
    ) as Command;
    const applied = jobOf(await this.proposeLocal(shard, command), id);
    return this.view(applied);
  }

  cancelJob(id: string): Promise<JobView> {
    return this.jobCommand('cancel', id, null);
  }

  /** Every node holds every shard's rows: the profile is read from this node's store, no leader asked. */
  dueProfile(seconds: number): DueProfile {
    const fromMs = this.nowMs();
    const perSecond = new Array<number>(seconds).fill(0);
    for (const sh of this.o.shards) sh.store.addDueBySecond(fromMs, perSecond);
    return { fromMs, perSecond, drainRatePerS: this.o.engine.drainRatePerS() };
  }

  /**
   * Counting an instant's jobs walks the due index over all of them, so a run of single submissions to one crowded
   * instant would count it once per submission (quadratic): a count is reused for limits.hotInstantRecountMs and
   * the jobs this node accepted since are added to it. At a steady rate every job has an instant of its own, which
   * would be counted in every shard for every job: so an instant is counted only when its bucket
   * (limits.hotInstantBucketMs around it, counted and reused the same way) holds more jobs than could be reported.
   * Fewer due in the bucket means fewer at the instant: the answer is the same, for far fewer counts.
   */
  hotInstant(dueAtMs: readonly number[]): HotInstantReport | null {
    const measured = this.o.engine.drainRatePerS();
    const rate = measured ?? limits.drainRatePerSAssumed;
    const nowMs = this.nowMs();
    // The most jobs an instant may hold without being reported: spread_ms = ceil(due * 1000 / rate) stays within it.
    const quietMax = Math.floor((rate * limits.hotInstantSpreadReportMs) / 1000);
    const perInstant = new Map<number, number>();
    for (const atMs of dueAtMs) perInstant.set(atMs, (perInstant.get(atMs) ?? 0) + 1);
    let worst: HotInstantReport | null = null;
    let looked = 0;
    for (const [atMs, added] of perInstant) {
      if (looked++ === limits.hotInstantLookupsMax) break;
      const due = this.dueAt(atMs, added, nowMs, quietMax);
      if (due === null) continue;
      const spreadMs = Math.ceil((due * 1000) / rate);
      if (spreadMs > limits.hotInstantSpreadReportMs && (worst === null || due > worst.due)) {
        worst = { atMs, due, spreadMs, drainRatePerS: Math.round(rate), measured: measured !== null };
      }
    }
    return worst;
  }

  /**
   * PENDING jobs due at `atMs`, `added` of them just accepted here (and already applied on this node); null when the
   * instant was not counted before and its bucket holds at most `quietMax` (it cannot be reported, and is not
   * counted). An instant counted before is recounted without its bucket: the bucket walks the same rows and more,
   * and a count at most quietMax is not reported either way.
   */
  private dueAt(atMs: number, added: number, nowMs: number, quietMax: number): number | null {
    const memo = this.dueAtCounts.get(atMs);
    if (memo !== undefined) this.bucketDue(atMs, added, nowMs, false);
    else if (this.bucketDue(atMs, added, nowMs, true) <= quietMax) return null;
    if (memo !== undefined && nowMs - memo.countedAtMs < limits.hotInstantRecountMs) {
      memo.due += added;
      return memo.due;
    }
    let due = 0;
    for (const sh of this.o.shards) due += sh.store.countDueAt(atMs);
    remember(this.dueAtCounts, atMs, due, nowMs);
    return due;
  }

  /**
   * PENDING jobs due in `atMs`'s bucket, counted and reused as dueAt counts an instant. Without `count`, only a
   * fresh count is kept up to date with `added` (-1: no fresh count, none made).
   */
  private bucketDue(atMs: number, added: number, nowMs: number, count: boolean): number {
    const fromMs = Math.floor(atMs / limits.hotInstantBucketMs) * limits.hotInstantBucketMs;
    const memo = this.bucketCounts.get(fromMs);
    if (memo !== undefined && nowMs - memo.countedAtMs < limits.hotInstantRecountMs) {
      memo.due += added;
      return memo.due;
    }
    if (!count) return -1;
    let due = 0;
    for (const sh of this.o.shards) due += sh.store.countDueBetween(fromMs, fromMs + limits.hotInstantBucketMs);
    remember(this.bucketCounts, fromMs, due, nowMs);
    return due;
  }

  pauseJob(id: string): Promise<JobView> {
    return this.jobCommand('pause', id, null);
  }

  resumeJob(id: string): Promise<JobView> {
    return this.jobCommand('resume', id, null);
  }

  /**
   * The run key is fixed here, on the node that took the request, before any forward: a retry of the call (the
   * router's, after a failure that leaves the outcome unknown) is then recognised by the state machine.
   */
  runJob(id: string, clientKey: string | null = null): Promise<JobView> {
    const runKey = clientKey === null ? `node:${randomUUID()}` : `client:${clientKey}`;
    return this.jobCommand('run', id, null, runKey);
  }

  patchJob(id: string, patch: JobPatch): Promise<JobView> {
    return this.jobCommand('patch', id, patch);
  }

  async listJobs(query: JobListQuery): Promise<{ jobs: JobView[]; nextCursor: string | null }> {
    const afterId = decodeJobCursor(query.cursor);
    const page = mergedJobPage(this.o.shards, query, afterId, (job) => this.o.engine.overlayState(job));
    return { jobs: page.jobs.map((j) => this.view(j)), nextCursor: page.nextAfterId === null ? null : encodeCursor(page.nextAfterId) };
  }

  listExecutions(id: string, page: { limit: number; cursor: string | null }): Promise<{ executions: ExecutionRecord[]; nextCursor: string | null }> {
    const shard = this.shardFor(id).shard;
    return this.o.router.call(shard, { op: 'list_executions', id, limit: page.limit, cursor: page.cursor }, () =>
      this.listExecutionsLocal(id, page),
    );
  }

  private async listExecutionsLocal(
    id: string,
    page: { limit: number; cursor: string | null },
  ): Promise<{ executions: ExecutionRecord[]; nextCursor: string | null }> {
    const before = decodeExecutionCursor(page.cursor);
    const store = this.shardFor(id).store;
    await this.o.host.readBarrier(this.shardFor(id).shard);
    if (store.getJob(id) === null) throw notFound('job', id);
    const rows = store.listExecutions(id, page.limit + 1, before);
    if (rows.length <= page.limit) return { executions: rows, nextCursor: null };
    const executions = rows.slice(0, page.limit);
    return { executions, nextCursor: encodeCursor(String(executions[executions.length - 1].scheduledAtMs)) };
  }

  /** With `exclude`: the calendars as this node's copy of shard 0 holds them (an unknown name is refused). */
  previewSchedule(schedule: Schedule, fromMs: number, count: number): number[] {
    const names = schedule.kind === 'once' ? [] : (schedule.exclude ?? []);
    const rules = names.map((name, i) => {
      const calendar = this.o.shards[0].store.getCalendar(name);
      if (calendar === null) throw invalid(`schedule.exclude[${i}]`, `calendar ${JSON.stringify(name)} not found`);
      return calendarRule(calendar);
    });
    return previewExcluding(schedule, fromMs, count, rules);
  }

  // --- dead letters (dead-letters.ts; docs/api.md "Dead letters") ------------------------------------------

  listDeadLetters(filter: DeadLetterFilter, page: { limit: number; cursor: string | null }): Promise<{ deadLetters: DeadLetter[]; nextCursor: string | null }> {
    return Promise.resolve(deadLetterPage(this.o.shards, filter, page.limit, page.cursor));
  }

  deadLetterGroups(): Promise<DeadLetterGroup[]> {
    return Promise.resolve(deadLetterGroups(this.o.shards));
  }

  replayDeadLetters(req: ReplayRequest): Promise<ReplayResult> {
    return replayDeadLetters(this.o.shards, req, this.nowMs(), (shard, command) => this.proposeVia(shard, command));
  }

  // --- cluster ---------------------------------------------------------------------------------------------

  cluster(): Promise<ClusterView> {
    return this.o.cluster.view(this.apiPort);
  }

  /**
   * Runs on the shard's leader (forwarded when this node is not it): the leader's configuration is the one that
   * decides whether `to` is a voter, so a node that just joined can be named right after `add-node` answered,
   * whichever node the request reaches.
   */
  async transferLeader(shard: number, to: string): Promise<void> {
    if (this.o.host.groups[shard] === undefined) {
      throw new PunctualError('not_found', `shard ${shard} not found (this cluster has ${this.o.host.groups.length})`);
    }
    await this.o.router.call(shard, { op: 'transfer_leader', shard, to }, () => this.o.cluster.transferLeader(shard, to));
  }

  readiness(): { ready: boolean; reason: string | null } {
    if (!this.ready) return { ready: false, reason: 'node is starting' };
    return this.o.cluster.readiness();
  }

  // --- backups (docs/api.md "Backup") ------------------------------------------------------------------

  /**
   * A consistent copy of this node's file. First a barrier per shard (a read barrier where this node leads, a
   * ReadIndex asked of the leader where it follows): everything acknowledged before the request is applied here,
   * so it is in the copy.
   */
  async backup(): Promise<BackupDownload> {
    const taker = this.o.backups;
    if (taker == null) throw new PunctualError('unavailable', 'this node cannot take backups');
    if (!this.ready) throw new PunctualError('unavailable', 'node is starting');
    await Promise.all(this.o.host.groups.map((g) => this.o.host.appliedBarrier(g.shard)));
    return taker.take();
  }

  /** GET /v1/overview: this node's own figures (its replicas' jobs, the callbacks it sent), never forwarded. */
  overview(): Promise<OverviewData> {
    return this.o.metrics.overview();
  }

  // --- the clock (docs/api.md "The clock") ---------------------------------------------------------------

  clockView(): ClockView {
    return { mode: this.o.clockDriver == null ? 'system' : 'manual', nowMs: this.nowMs() };
  }

  advanceClock(req: { byMs: number } | { toMs: number }): Promise<ClockAdvanceResult> {
    const driver = this.o.clockDriver;
    if (driver == null) {
      return Promise.reject(new PunctualError('conflict', 'this node runs on the system clock: only a node started with --clock manual can be advanced'));
    }
    if (!this.ready) return Promise.reject(new PunctualError('unavailable', 'node is starting'));
    return driver.advance(req);
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
        const rows = sh.store.listJobs({ state, task: query.task, limit: pageSize, afterId: cursor, search: query.search });
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

/** Keeps a count for reuse, dropping the oldest counted first past limits.hotInstantCountsMax. */
function remember(counts: Map<number, { due: number; countedAtMs: number }>, key: number, due: number, nowMs: number): void {
  counts.delete(key);
  if (counts.size >= limits.hotInstantCountsMax) counts.delete(counts.keys().next().value as number);
  counts.set(key, { due, countedAtMs: nowMs });
}
