/**
 * A tiny in-memory SchedulerApi: a fixture for the HTTP layer's tests, not the product (the real node is
 * src/node). It keeps tasks, jobs and seeded executions in maps and answers the way the node does for the cases
 * the HTTP tests exercise: created/replaced, same digest -> created:false, other digest -> conflict, unknown task
 * -> not_found on `task`, cancel/pause/resume state changes.
 */
import { ManualClock } from '../../core/clock.js';
import { PunctualError, notFound } from '../../core/errors.js';
import { shardOf } from '../../core/ids.js';
import type { CalendarBody, ClusterView, CreateJobResult, SchedulerApi } from '../scheduler-api.js';
import { resolveSchedule } from '../../scheduler/policy.js';
import { firstOccurrence, previewOccurrences } from '../../scheduler/schedule.js';
import type {
  CalendarRecord,
  CallbackSpec,
  ExecutionRecord,
  JobListQuery,
  JobPatch,
  JobSpec,
  JobView,
  Schedule,
  TaskRecord,
} from '../../scheduler/types.js';

export class MemoryApi implements SchedulerApi {
  readonly nodeId = 'n1';
  readonly clock = new ManualClock(Date.UTC(2026, 11, 1, 9, 0, 0));
  readonly tasks = new Map<string, TaskRecord>();
  readonly calendars = new Map<string, CalendarRecord>();
  readonly jobs = new Map<string, JobView>();
  readonly executions = new Map<string, ExecutionRecord[]>();
  ready: { ready: boolean; reason: string | null } = { ready: true, reason: null };
  /** Every createJobs call's specs, so tests can inspect what the HTTP layer produced. */
  readonly created: JobSpec[][] = [];

  nowMs(): number {
    return this.clock.nowMs();
  }

  async putTask(name: string, spec: CallbackSpec): Promise<{ task: TaskRecord; created: boolean }> {
    const old = this.tasks.get(name);
    const now = this.nowMs();
    const task: TaskRecord = { ...spec, name, createdAtMs: old?.createdAtMs ?? now, updatedAtMs: now };
    this.tasks.set(name, task);
    return { task, created: old === undefined };
  }

  async getTask(name: string): Promise<TaskRecord> {
    const task = this.tasks.get(name);
    if (task === undefined) throw notFound('task', name);
    return task;
  }

  async listTasks(): Promise<TaskRecord[]> {
    return [...this.tasks.values()];
  }

  async deleteTask(name: string): Promise<void> {
    if (!this.tasks.delete(name)) throw notFound('task', name);
  }

  async putCalendar(name: string, body: CalendarBody): Promise<{ calendar: CalendarRecord; created: boolean }> {
    const old = this.calendars.get(name);
    const now = this.nowMs();
    const calendar: CalendarRecord = { ...body, name, createdAtMs: old?.createdAtMs ?? now, updatedAtMs: now };
    this.calendars.set(name, calendar);
    return { calendar, created: old === undefined };
  }

  async getCalendar(name: string): Promise<CalendarRecord> {
    const calendar = this.calendars.get(name);
    if (calendar === undefined) throw notFound('calendar', name);
    return calendar;
  }

  async listCalendars(): Promise<CalendarRecord[]> {
    return [...this.calendars.values()].sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  async deleteCalendar(name: string): Promise<void> {
    if (!this.calendars.delete(name)) throw notFound('calendar', name);
  }

  async createJobs(specs: JobSpec[]): Promise<CreateJobResult[]> {
    this.created.push(specs);
    return specs.map((spec) => this.createOne(spec));
  }

  private createOne(spec: JobSpec): CreateJobResult {
    const existing = this.jobs.get(spec.id);
    if (existing !== undefined) {
      if (existing.requestDigest === spec.requestDigest) return { ok: true, job: existing, created: false };
      return { ok: false, id: spec.id, error: new PunctualError('conflict', `job ${spec.id} exists with another body`) };
    }
    if (spec.task !== null && !this.tasks.has(spec.task)) {
      return { ok: false, id: spec.id, error: new PunctualError('not_found', 'no such task', [{ field: 'task', message: 'not found' }]) };
    }
    const now = this.nowMs();
    const schedule = resolveSchedule(spec.schedule, now, spec.id);
    const nextFireAtMs = firstOccurrence(schedule, now);
    const job: JobView = {
      ...spec,
      schedule,
      state: 'PENDING',
      nextFireAtMs,
      runs: 0,
      shard: shardOf(spec.id, 8),
      createdAtMs: now,
      updatedAtMs: now,
      lastExecution: null,
    };
    this.jobs.set(spec.id, job);
    return { ok: true, job, created: true };
  }

  async getJob(id: string): Promise<JobView> {
    const job = this.jobs.get(id);
    if (job === undefined) throw notFound('job', id);
    return job;
  }

  /** Cursor = the index of the next job in insertion order. */
  async listJobs(q: JobListQuery): Promise<{ jobs: JobView[]; nextCursor: string | null }> {
    const all = [...this.jobs.values()].filter((j) => (q.state === null || j.state === q.state) && (q.task === null || j.task === q.task));
    const start = q.cursor === null ? 0 : Number(q.cursor);
    const jobs = all.slice(start, start + q.limit);
    return { jobs, nextCursor: start + q.limit < all.length ? String(start + q.limit) : null };
  }

  async cancelJob(id: string): Promise<JobView> {
    return this.update(id, { state: 'CANCELLED', nextFireAtMs: null });
  }

  async pauseJob(id: string): Promise<JobView> {
    return this.update(id, { state: 'PAUSED' });
  }

  async resumeJob(id: string): Promise<JobView> {
    return this.update(id, { state: 'PENDING' });
  }

  async runJob(id: string): Promise<JobView> {
    return this.update(id, { runs: (await this.getJob(id)).runs + 1 });
  }

  async patchJob(id: string, patch: JobPatch): Promise<JobView> {
    const { schedule, ...rest } = patch;
    const changes: Partial<JobView> = { ...rest };
    if (schedule !== undefined) {
      changes.schedule = resolveSchedule(schedule, this.nowMs(), id);
      changes.nextFireAtMs = firstOccurrence(changes.schedule, this.nowMs());
    }
    return this.update(id, changes);
  }

  async listExecutions(id: string, page: { limit: number; cursor: string | null }) {
    await this.getJob(id);
    const all = this.executions.get(id) ?? [];
    const start = page.cursor === null ? 0 : Number(page.cursor);
    const next = start + page.limit < all.length ? String(start + page.limit) : null;
    return { executions: all.slice(start, start + page.limit), nextCursor: next };
  }

  previewSchedule(schedule: Schedule, fromMs: number, count: number): number[] {
    return previewOccurrences(schedule, fromMs, count);
  }

  async cluster(): Promise<ClusterView> {
    return {
      nodeId: this.nodeId,
      nodes: [{ id: 'n1', peerAddr: '127.0.0.1:9001', apiAddr: '127.0.0.1:8001', reachable: true }],
      shards: [{ id: 0, leader: 'n1', term: 3, commitIndex: 42, appliedIndex: 41, members: ['n1'] }],
    };
  }

  readiness(): { ready: boolean; reason: string | null } {
    return this.ready;
  }

  private async update(id: string, changes: Partial<JobView>): Promise<JobView> {
    const job: JobView = { ...(await this.getJob(id)), ...changes, updatedAtMs: this.nowMs() };
    this.jobs.set(id, job);
    return job;
  }
}

