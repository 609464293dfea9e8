/**
 * SchedulerStore in memory: the simulator's and the unit tests' store. Records are deep-copied in and out, like
 * a real database, so a caller that mutates what it read never changes the store behind apply's back.
 * Queries scan and sort: fine for tests and simulations, not meant for millions of jobs.
 */
import { matchesSearch } from './search.js';
import type { DueJob, JobPageQuery, SchedulerStore } from './store.js';
import { jobStates, type CalendarRecord, type ExecutionRecord, type JobRecord, type JobState, type TaskRecord } from './types.js';

const finalJobStates: ReadonlySet<JobState> = new Set<JobState>(['SUCCEEDED', 'FAILED', 'CANCELLED']);

function isOpen(e: ExecutionRecord): boolean {
  return e.state === 'QUEUED' || e.state === 'RUNNING';
}

function byId(a: { id: string }, b: { id: string }): number {
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

export class MemoryStore implements SchedulerStore {
  private readonly tasks = new Map<string, TaskRecord>();
  private readonly calendars = new Map<string, CalendarRecord>();
  private readonly jobs = new Map<string, JobRecord>();
  /** jobId -> scheduledAtMs -> execution. */
  private readonly executions = new Map<string, Map<number, ExecutionRecord>>();
  /** Finished jobs: when they finished and the retention their task fixed then (null: the node's). */
  private readonly finished = new Map<string, { atMs: number; retainMs: number | null }>();

  /** How a record is copied in and out (a simulator may give a cheaper copy of plain records). */
  protected copy<T>(value: T): T {
    return structuredClone(value);
  }

  getTask(name: string): TaskRecord | null {
    const t = this.tasks.get(name);
    return t === undefined ? null : this.copy(t);
  }

  putTask(task: TaskRecord): void {
    this.tasks.set(task.name, this.copy(task));
  }

  deleteTask(name: string): boolean {
    return this.tasks.delete(name);
  }

  listTasks(): TaskRecord[] {
    return [...this.tasks.values()]
      .sort((a, b) => compareStrings(a.name, b.name))
      .map((t) => this.copy(t));
  }

  countLiveJobsOfTask(name: string): number {
    let n = 0;
    for (const j of this.jobs.values()) if (j.task === name && !finalJobStates.has(j.state)) n++;
    return n;
  }

  getCalendar(name: string): CalendarRecord | null {
    const c = this.calendars.get(name);
    return c === undefined ? null : this.copy(c);
  }

  putCalendar(calendar: CalendarRecord): void {
    this.calendars.set(calendar.name, this.copy(calendar));
  }

  deleteCalendar(name: string): boolean {
    return this.calendars.delete(name);
  }

  listCalendars(): CalendarRecord[] {
    return [...this.calendars.values()]
      .sort((a, b) => compareStrings(a.name, b.name))
      .map((c) => this.copy(c));
  }

  getJob(id: string): JobRecord | null {
    const j = this.jobs.get(id);
    return j === undefined ? null : this.copy(j);
  }

  putJob(job: JobRecord): void {
    this.jobs.set(job.id, this.copy(job));
    if (!finalJobStates.has(job.state)) {
      this.finished.delete(job.id);
      return;
    }
    const retainMs = job.task === null ? null : (this.tasks.get(job.task)?.retentionMs ?? null);
    this.finished.set(job.id, { atMs: job.updatedAtMs, retainMs });
  }

  listJobs(query: JobPageQuery): JobRecord[] {
    const out: JobRecord[] = [];
    for (const j of this.jobs.values()) {
      if (query.state !== null && j.state !== query.state) continue;
      if (query.task !== null && j.task !== query.task) continue;
      if (query.afterId !== null && !(j.id > query.afterId)) continue;
      if (query.search !== undefined && !matchesSearch(j, query.search)) continue;
      out.push(j);
    }
    return out
      .sort(byId)
      .slice(0, Math.max(0, query.limit))
      .map((j) => this.copy(j));
  }

  dueJobs(untilMs: number, limit: number, after: { atMs: number; id: string } | null): DueJob[] {
    const out: JobRecord[] = [];
    for (const j of this.jobs.values()) {
      const at = j.nextFireAtMs;
      if (j.state !== 'PENDING' || at === null || at > untilMs) continue;
      if (after !== null && (at < after.atMs || (at === after.atMs && !(j.id > after.id)))) continue;
      out.push(j);
    }
    out.sort((a, b) => a.nextFireAtMs! - b.nextFireAtMs! || byId(a, b));
    return out.slice(0, Math.max(0, limit)).map((j) => ({ id: j.id, nextFireAtMs: j.nextFireAtMs! }));
  }

  countJobsByState(): Record<JobState, number> {
    const counts = Object.fromEntries(jobStates.map((s) => [s, 0])) as Record<JobState, number>;
    for (const j of this.jobs.values()) counts[j.state]++;
    return counts;
  }

  getExecution(jobId: string, scheduledAtMs: number): ExecutionRecord | null {
    const e = this.executions.get(jobId)?.get(scheduledAtMs);
    return e === undefined ? null : this.copy(e);
  }

  putExecution(execution: ExecutionRecord): void {
    let perJob = this.executions.get(execution.jobId);
    if (perJob === undefined) {
      perJob = new Map();
      this.executions.set(execution.jobId, perJob);
    }
    perJob.set(execution.scheduledAtMs, this.copy(execution));
  }

  lastExecution(jobId: string): ExecutionRecord | null {
    let last: ExecutionRecord | null = null;
    for (const e of this.executions.get(jobId)?.values() ?? []) {
      if (last === null || e.scheduledAtMs > last.scheduledAtMs) last = e;
    }
    return last === null ? null : this.copy(last);
  }

  listExecutions(jobId: string, limit: number, beforeScheduledAtMs: number | null): ExecutionRecord[] {
    const all = [...(this.executions.get(jobId)?.values() ?? [])];
    return all
      .filter((e) => beforeScheduledAtMs === null || e.scheduledAtMs < beforeScheduledAtMs)
      .sort((a, b) => b.scheduledAtMs - a.scheduledAtMs)
      .slice(0, Math.max(0, limit))
      .map((e) => this.copy(e));
  }

  openExecutions(jobId: string): ExecutionRecord[] {
    const all = [...(this.executions.get(jobId)?.values() ?? [])];
    return all
      .filter(isOpen)
      .sort((a, b) => a.scheduledAtMs - b.scheduledAtMs)
      .map((e) => this.copy(e));
  }

  allOpenExecutions(limit: number, after: { jobId: string; scheduledAtMs: number } | null): ExecutionRecord[] {
    const out: ExecutionRecord[] = [];
    for (const [jobId, perJob] of this.executions) {
      if (after !== null && jobId < after.jobId) continue;
      for (const e of perJob.values()) {
        if (!isOpen(e)) continue;
        if (after !== null && jobId === after.jobId && e.scheduledAtMs <= after.scheduledAtMs) continue;
        out.push(e);
      }
    }
    out.sort((a, b) => compareStrings(a.jobId, b.jobId) || a.scheduledAtMs - b.scheduledAtMs);
    return out.slice(0, Math.max(0, limit)).map((e) => this.copy(e));
  }

  expiredJobs(nowMs: number, retentionMs: number | null, limit: number): string[] {
    const own: Array<{ id: string; atMs: number }> = [];
    const rest: Array<{ id: string; atMs: number }> = [];
    for (const [id, f] of this.finished) {
      if (f.retainMs !== null) {
        if (f.atMs + f.retainMs <= nowMs) own.push({ id, atMs: f.atMs + f.retainMs });
      } else if (retentionMs !== null && f.atMs + retentionMs <= nowMs) {
        rest.push({ id, atMs: f.atMs });
      }
    }
    const order = (a: { id: string; atMs: number }, b: { id: string; atMs: number }): number => a.atMs - b.atMs || byId(a, b);
    return [...own.sort(order), ...rest.sort(order)].slice(0, Math.max(0, limit)).map((x) => x.id);
  }

  deleteJob(id: string, executionsMax: number): { executions: number; deleted: boolean } {
    const perJob = this.executions.get(id);
    const keys = [...(perJob?.keys() ?? [])].sort((a, b) => a - b).slice(0, Math.max(0, executionsMax));
    for (const k of keys) perJob!.delete(k);
    if (perJob !== undefined && perJob.size > 0) return { executions: keys.length, deleted: false };
    this.executions.delete(id);
    this.finished.delete(id);
    return { executions: keys.length, deleted: this.jobs.delete(id) };
  }

  trimExecutions(jobId: string, keep: number, max: number): number {
    const perJob = this.executions.get(jobId);
    if (perJob === undefined) return 0;
    const newestFirst = [...perJob.values()].sort((a, b) => b.scheduledAtMs - a.scheduledAtMs);
    const old = newestFirst.slice(keep).filter((e) => !isOpen(e)).reverse().slice(0, Math.max(0, max));
    for (const e of old) perJob.delete(e.scheduledAtMs);
    return old.length;
  }
}
