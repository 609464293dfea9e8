/**
 * The replicated state machine: apply(store, command) -> { result, effects }. Deterministic: it reads no clock
 * and no randomness (the proposer wrote nowMs into the command), iterates only over store results that the
 * store orders, and never throws for an operating error (unknown job, bad transition): those are results.
 * It throws only on programmer errors (a command type it does not know). README.md states every rule.
 */
import { unreachable } from '../core/assert.js';
import type { ErrorCode } from '../core/errors.js';
import { schedulerLimits } from '../core/limits.js';
import type { Command, FiredItem, OutcomeItem, SkippedItem, TrimItem } from './commands.js';
import type { Effect } from './commands.js';
import { calendarRule, skipExcluded, type CalendarRule } from './calendar.js';
import { nextAfter, resolveSchedule, resumedNext } from './policy.js';
import { firstOccurrence } from './schedule.js';
import type { SchedulerStore } from './store.js';
import type { AttemptRecord, CalendarRecord, ExecutionRecord, JobPatch, JobRecord, JobSpec, JobState, Schedule, TaskRecord } from './types.js';

export interface Failure {
  ok: false;
  code: ErrorCode;
  message: string;
  /** The API field at fault (snake_case, as in docs/api.md), when one is. */
  field?: string;
}

export type CreateJobItemResult = { ok: true; job: JobRecord; created: boolean } | ({ id: string } & Failure);

/** run_job also says which occurrence it queued (its X-Deduplication-Key is `${id}:${runAtMs}`). */
export type JobCommandResult = { ok: true; job: JobRecord; runAtMs?: number } | Failure;

export type CommandResult =
  | { type: 'put_task'; task: TaskRecord; created: boolean }
  | { type: 'delete_task'; result: { ok: true } | Failure }
  | { type: 'put_calendar'; calendar: CalendarRecord; created: boolean }
  | { type: 'delete_calendar'; result: { ok: true } | Failure }
  | { type: 'create_jobs'; items: CreateJobItemResult[] }
  | { type: 'cancel_job' | 'pause_job' | 'resume_job' | 'run_job' | 'patch_job'; result: JobCommandResult }
  /** Items applied, and items ignored (unknown or cancelled job, stale or duplicate report). */
  | { type: 'fired' | 'outcomes' | 'skipped'; applied: number; ignored: number }
  | { type: 'retention'; jobsDeleted: number; executionsDeleted: number }
  /** The ids that were FAILED and now run again, in the command's order. */
  | { type: 'replay_jobs'; replayed: string[] }
  | { type: 'noop' };

export interface ApplyResult {
  result: CommandResult;
  effects: Effect[];
}

/**
 * `term`: the Raft term of the log entry that carries the command (every replica reads the same): attempts
 * recorded by fired / outcomes items carry the fencing token `{shard}.{term}` of the leader that sent them.
 * Absent (the simulator, unit tests): attempts carry none.
 */
export function apply(store: SchedulerStore, command: Command, term?: number): ApplyResult {
  const effects: Effect[] = [];
  rulesInApply.clear();
  entryTerm = term ?? null;
  store.commandStarted?.();
  let failure: { error: unknown } | undefined;
  try {
    return { result: dispatch(store, command, effects), effects };
  } catch (error) {
    failure = { error };
    throw error;
  } finally {
    store.commandEnded?.(failure);
    rulesInApply.clear();
    armsOfJob.clear();
    entryTerm = null;
  }
}

/** The term of the entry being applied (set around each apply, like rulesInApply). */
let entryTerm: number | null = null;

type ArmEffect = Extract<Effect, { type: 'arm' }>;

/**
 * The arm effects of the command being applied, by job (cleared around every apply). An arm carries what the
 * command left stored: the records written (or read, unchanged) where it is made, and every later write of its job
 * or its execution in the same command replaces them (putJob, putExecution), so each is the last write. A record
 * is never changed after its last write within a command. Only armed jobs are tracked: a command that arms nothing
 * keeps no record alive.
 */
const armsOfJob = new Map<string, ArmEffect[]>();

function pushArm(effects: Effect[], e: ArmEffect): void {
  effects.push(e);
  const arms = armsOfJob.get(e.jobId);
  if (arms === undefined) armsOfJob.set(e.jobId, [e]);
  else arms.push(e);
}

function putJob(store: SchedulerStore, job: JobRecord): void {
  store.putJob(job);
  if (armsOfJob.size === 0) return;
  const arms = armsOfJob.get(job.id);
  if (arms !== undefined) for (const e of arms) e.job = job;
}

function putExecution(store: SchedulerStore, x: ExecutionRecord): void {
  store.putExecution(x);
  if (armsOfJob.size === 0) return;
  const arms = armsOfJob.get(x.jobId);
  if (arms !== undefined) for (const e of arms) if (e.scheduledAtMs === x.scheduledAtMs) e.execution = x;
}

function dispatch(store: SchedulerStore, c: Command, effects: Effect[]): CommandResult {
  switch (c.type) {
    case 'put_task':
      return putTask(store, c.task, c.nowMs);
    case 'delete_task':
      return { type: c.type, result: deleteTask(store, c.name) };
    case 'put_calendar':
      return putCalendar(store, c.calendar, c.nowMs);
    case 'delete_calendar':
      return { type: c.type, result: deleteCalendar(store, c.name) };
    case 'create_jobs': {
      const tasks = new TaskExistence(store);
      return { type: c.type, items: c.jobs.map((spec) => createJob(store, tasks, spec, c.shard, c.nowMs, effects)) };
    }
    case 'cancel_job':
      return { type: c.type, result: withJob(store, c.id, (job) => cancelJob(store, job, c.nowMs, effects)) };
    case 'pause_job':
      return { type: c.type, result: withJob(store, c.id, (job) => pauseJob(store, job, c.nowMs, effects)) };
    case 'resume_job':
      return { type: c.type, result: withJob(store, c.id, (job) => resumeJob(store, job, c.nowMs, effects)) };
    case 'run_job':
      return { type: c.type, result: withJob(store, c.id, (job) => runJob(store, job, c.nowMs, c.runKey ?? null, effects)) };
    case 'patch_job':
      return { type: c.type, result: withJob(store, c.id, (job) => patchJob(store, job, c.patch, c.nowMs, c.afterFired === true, effects)) };
    case 'fired':
      return count(c.type, c.items, (item) => applyFired(store, item, c.nodeId, c.nowMs, effects));
    case 'outcomes':
      return count(c.type, c.items, (item) => applyOutcome(store, item, c.nodeId ?? '', c.nowMs, effects));
    case 'skipped':
      return count(c.type, c.items, (item) => applySkipped(store, item, c.nowMs, effects));
    case 'retention':
      return applyRetention(store, c.nowMs, c.retentionMs, c.jobsMax, c.trim);
    case 'replay_jobs':
      return { type: c.type, replayed: c.ids.filter((id) => replayJob(store, id, c.nowMs, effects)) };
    case 'noop':
      return { type: 'noop' };
    default:
      return unreachable(c, 'apply: unknown command');
  }
}

// ---------------------------------------------------------------- helpers

function fail(code: ErrorCode, message: string, field?: string): Failure {
  return field === undefined ? { ok: false, code, message } : { ok: false, code, message, field };
}

function isFinal(state: JobState): boolean {
  return state === 'SUCCEEDED' || state === 'FAILED' || state === 'CANCELLED';
}

function withJob(store: SchedulerStore, id: string, f: (job: JobRecord) => JobCommandResult): JobCommandResult {
  const job = store.getJob(id);
  return job === null ? fail('not_found', `job ${JSON.stringify(id)} not found`) : f(job);
}

function count<T>(
  type: 'fired' | 'outcomes' | 'skipped',
  items: T[],
  f: (item: T) => boolean,
): CommandResult {
  let applied = 0;
  for (const item of items) if (f(item)) applied++;
  return { type, applied, ignored: items.length - applied };
}

/** end_at (recurring schedules only, inclusive) and max_runs (counted on regular runs) end a schedule. */
function bound(job: JobRecord, next: number | null): number | null {
  if (next === null) return null;
  if (job.schedule.kind !== 'once' && job.endAtMs !== null && next > job.endAtMs) return null;
  if (job.maxRuns > 0 && job.runs >= job.maxRuns) return null;
  return next;
}

/**
 * Whether a task exists, asked of the store once per name within one create_jobs command (a batch of jobs
 * usually names one task: one lookup instead of one per job). Tasks cannot change inside a command.
 */
class TaskExistence {
  private readonly known = new Map<string, boolean>();

  constructor(private readonly store: SchedulerStore) {}

  has(name: string): boolean {
    let exists = this.known.get(name);
    if (exists === undefined) {
      exists = this.store.getTask(name) !== null;
      this.known.set(name, exists);
    }
    return exists;
  }
}

/**
 * The stored state of a live job from its facts: PENDING while it has a next occurrence, RUNNING while an
 * execution is open, else finished by the last outcome. PAUSED, CANCELLED and final states are left alone.
 * `knownOpen`: the caller just wrote an open execution of this job, so the store need not be asked.
 */
function settle(
  store: SchedulerStore,
  job: JobRecord,
  lastOutcome?: 'SUCCEEDED' | 'FAILED',
  knownOpen = false,
): void {
  if (job.state === 'PAUSED' || isFinal(job.state)) return;
  if (job.nextFireAtMs !== null) {
    job.state = 'PENDING';
  } else if (knownOpen || store.openExecutions(job.id).length > 0) {
    job.state = 'RUNNING';
  } else {
    const last = lastOutcome ?? store.lastExecution(job.id)?.state;
    job.state = last === 'FAILED' ? 'FAILED' : 'SUCCEEDED';
  }
}

/**
 * `written`: the job is already written as it stands ('job'), and also created by this command ('created': none of
 * its occurrences has an execution); null: it is written after (putJob attaches it then).
 */
function armNext(job: JobRecord, effects: Effect[], written: 'job' | 'created' | null): void {
  const at = job.nextFireAtMs;
  if (at === null) return;
  const e: ArmEffect = { type: 'arm', jobId: job.id, scheduledAtMs: at, attempt: 1, dueAtMs: at };
  if (written !== null) e.job = job;
  if (written === 'created') e.execution = null;
  pushArm(effects, e);
}

/** A QUEUED execution's next attempt is attempt + 1 (attempt counts the attempts started so far). */
function armQueued(store: SchedulerStore, job: JobRecord, nowMs: number, effects: Effect[], jobWritten: boolean): void {
  for (const e of store.openExecutions(job.id)) {
    if (e.state !== 'QUEUED') continue;
    const dueAtMs = Math.max(e.retryAtMs ?? nowMs, e.scheduledAtMs);
    // The execution as read: unchanged by this command (a later write of it would replace it).
    const arm: ArmEffect = { type: 'arm', jobId: job.id, scheduledAtMs: e.scheduledAtMs, attempt: e.attempt + 1, dueAtMs, execution: e };
    if (jobWritten) arm.job = job;
    pushArm(effects, arm);
  }
}

/**
 * The regular occurrence after the one at firedAtMs (started at startedAtMs, null = skipped): policy.ts nextAfter,
 * then past the dates its calendars exclude now.
 */
function advance(store: SchedulerStore, job: JobRecord, firedAtMs: number, startedAtMs: number | null, nowMs: number): number | null {
  return bound(job, skipExcluded(job.schedule, nextAfter(job, firedAtMs, startedAtMs, nowMs), calendarRules(store, job.schedule)));
}

// ---------------------------------------------------------------- calendars

/**
 * The calendars a schedule excludes, as the shard holds them now. A name whose calendar was deleted since the job
 * named it excludes nothing.
 */
function calendarRules(store: SchedulerStore, schedule: Schedule): CalendarRule[] {
  if (schedule.kind === 'once' || schedule.exclude === undefined) return [];
  const rules: CalendarRule[] = [];
  for (const name of schedule.exclude) {
    let rule = rulesInApply.get(name);
    if (rule === undefined) {
      const calendar = store.getCalendar(name);
      rule = calendar === null ? null : calendarRule(calendar);
      rulesInApply.set(name, rule);
    }
    if (rule !== null) rules.push(rule);
  }
  return rules;
}

/**
 * The calendars read by the command being applied, each read and parsed once per command rather than once per job
 * (a fired command of a thousand jobs naming one holiday calendar). Cleared around every apply; calendars do not
 * change within a command that computes occurrences, so it answers what the store would.
 */
const rulesInApply = new Map<string, CalendarRule | null>();

/** A new schedule may name only calendars that exist (`field` is where the API has the schedule). */
function unknownCalendar(store: SchedulerStore, schedule: Schedule, field: string): Failure | null {
  if (schedule.kind === 'once' || schedule.exclude === undefined) return null;
  const i = schedule.exclude.findIndex((name) => store.getCalendar(name) === null);
  if (i < 0) return null;
  return fail('invalid_argument', `calendar ${JSON.stringify(schedule.exclude[i])} not found`, `${field}.exclude[${i}]`);
}

function putCalendar(store: SchedulerStore, calendar: CalendarRecord, nowMs: number): CommandResult {
  const existing = store.getCalendar(calendar.name);
  const record: CalendarRecord = { ...calendar, createdAtMs: existing?.createdAtMs ?? nowMs, updatedAtMs: nowMs };
  store.putCalendar(record);
  return { type: 'put_calendar', calendar: record, created: existing === null };
}

/** Allowed while jobs name the calendar: their next computed occurrences exclude nothing for it (docs/api.md). */
function deleteCalendar(store: SchedulerStore, name: string): { ok: true } | Failure {
  if (!store.deleteCalendar(name)) return fail('not_found', `calendar ${JSON.stringify(name)} not found`);
  return { ok: true };
}

// ---------------------------------------------------------------- tasks

function putTask(store: SchedulerStore, task: TaskRecord, nowMs: number): CommandResult {
  const existing = store.getTask(task.name);
  const record: TaskRecord = { ...task, createdAtMs: existing?.createdAtMs ?? nowMs, updatedAtMs: nowMs };
  store.putTask(record);
  return { type: 'put_task', task: record, created: existing === null };
}

function deleteTask(store: SchedulerStore, name: string): { ok: true } | Failure {
  if (store.getTask(name) === null) return fail('not_found', `task ${JSON.stringify(name)} not found`);
  const live = store.countLiveJobsOfTask(name);
  if (live > 0) return fail('conflict', `task ${JSON.stringify(name)} is used by ${live} live job(s)`);
  store.deleteTask(name);
  return { ok: true };
}

// ---------------------------------------------------------------- job commands

function createJob(
  store: SchedulerStore,
  tasks: TaskExistence,
  spec: JobSpec,
  shard: number,
  nowMs: number,
  effects: Effect[],
): CreateJobItemResult {
  const id = spec.id;
  const existing = store.getJob(id);
  if (existing !== null) {
    if (existing.requestDigest === spec.requestDigest) return { ok: true, job: existing, created: false };
    return { id, ...fail('conflict', `job ${JSON.stringify(id)} exists with a different request`) };
  }
  if (spec.task !== null && !tasks.has(spec.task)) {
    return { id, ...fail('not_found', `task ${JSON.stringify(spec.task)} not found`, 'task') };
  }
  if (spec.task === null && spec.callback === null) {
    return { id, ...fail('invalid_argument', 'a job needs a task or a callback', 'callback') };
  }
  // The first occurrence is computed from this command's one instant (an `every` without start starts at it).
  const job = newJob(spec, resolveSchedule(spec.schedule, nowMs, spec.id), shard, nowMs);
  const schedule = job.schedule;
  const unknown = unknownCalendar(store, schedule, 'schedule');
  if (unknown !== null) return { id, ...unknown };
  const first = firstOccurrence(schedule, nowMs);
  if (first === null) return { id, ...fail('invalid_argument', 'the schedule has no occurrence', 'schedule') };
  const allowed = skipExcluded(schedule, first, calendarRules(store, schedule));
  if (allowed === null) {
    return { id, ...fail('invalid_argument', 'the schedule has no occurrence outside its excluded dates', 'schedule.exclude') };
  }
  job.nextFireAtMs = bound(job, allowed);
  if (job.nextFireAtMs === null) {
    return { id, ...fail('invalid_argument', 'the schedule has no occurrence before end_at', 'end_at') };
  }
  putJob(store, job);
  armNext(job, effects, 'created');
  return { ok: true, job, created: true };
}

/**
 * The spec's fields in its order (the resolved schedule in its place), then the job's own: what `{ ...spec, schedule,
 * state: 'PENDING', ... }` makes, key for key. Copied key by key: a spread that adds keys the spec has not took V8's
 * slow path, about 10 µs a job (most of a create's JS time).
 */
function newJob(spec: JobSpec, schedule: Schedule, shard: number, nowMs: number): JobRecord {
  const job: Record<string, unknown> = {};
  for (const key of Object.keys(spec)) job[key] = spec[key as keyof JobSpec];
  job.schedule = schedule;
  job.state = 'PENDING';
  job.nextFireAtMs = null;
  job.runs = 0;
  job.shard = shard;
  job.createdAtMs = nowMs;
  job.updatedAtMs = nowMs;
  return job as unknown as JobRecord;
}

function cancelJob(store: SchedulerStore, job: JobRecord, nowMs: number, effects: Effect[]): JobCommandResult {
  if (job.state === 'CANCELLED') return { ok: true, job };
  if (isFinal(job.state)) return fail('conflict', `job ${JSON.stringify(job.id)} is already ${job.state}`);
  for (const e of store.openExecutions(job.id)) {
    putExecution(store, { ...e, state: 'CANCELLED', finishedAtMs: nowMs, retryAtMs: null });
  }
  job.state = 'CANCELLED';
  job.nextFireAtMs = null;
  job.updatedAtMs = nowMs;
  putJob(store, job);
  effects.push({ type: 'disarm', jobId: job.id });
  return { ok: true, job };
}

function pauseJob(store: SchedulerStore, job: JobRecord, nowMs: number, effects: Effect[]): JobCommandResult {
  if (job.state === 'PAUSED') return { ok: true, job };
  const pausable = job.state === 'PENDING' || (job.state === 'RUNNING' && job.schedule.kind !== 'once');
  if (!pausable) return fail('conflict', `cannot pause job ${JSON.stringify(job.id)} in state ${job.state}`);
  // nextFireAtMs is kept: resume measures what was missed from it.
  job.state = 'PAUSED';
  job.updatedAtMs = nowMs;
  putJob(store, job);
  effects.push({ type: 'disarm', jobId: job.id });
  return { ok: true, job };
}

function resumeJob(store: SchedulerStore, job: JobRecord, nowMs: number, effects: Effect[]): JobCommandResult {
  if (job.state === 'PENDING' || job.state === 'RUNNING') return { ok: true, job };
  if (job.state !== 'PAUSED') return fail('conflict', `cannot resume job ${JSON.stringify(job.id)}: ${job.state}`);
  job.nextFireAtMs = bound(job, skipExcluded(job.schedule, resumedNext(job, nowMs), calendarRules(store, job.schedule)));
  job.state = 'PENDING';
  settle(store, job);
  job.updatedAtMs = nowMs;
  putJob(store, job);
  armNext(job, effects, 'job');
  armQueued(store, job, nowMs, effects, true);
  return { ok: true, job };
}

function runJob(store: SchedulerStore, job: JobRecord, nowMs: number, runKey: string | null, effects: Effect[]): JobCommandResult {
  // A repeat of a run already made (a retry after an answer was lost): the same answer, no second run.
  const earlier = runKey === null ? undefined : job.runKeys?.find((r) => r.key === runKey);
  if (earlier !== undefined) return { ok: true, job, runAtMs: earlier.runAtMs };
  if (job.state === 'CANCELLED') return fail('conflict', `job ${JSON.stringify(job.id)} is CANCELLED`);
  const at = queueRun(store, job, nowMs, effects);
  if (runKey !== null) rememberRun(job, runKey, at);
  putJob(store, job);
  return { ok: true, job, runAtMs: at };
}

/**
 * One extra run of the job at nowMs (a fresh occurrence); the caller writes the job. A FAILED job runs again as a
 * replay: RUNNING (off the dead letters) until the run ends, when its outcome settles it SUCCEEDED or FAILED.
 */
function queueRun(store: SchedulerStore, job: JobRecord, nowMs: number, effects: Effect[]): number {
  // A fresh key: never an existing execution's, never the pending regular occurrence's.
  let at = nowMs;
  while (at === job.nextFireAtMs || store.getExecution(job.id, at) !== null) at++;
  // Recorded as QUEUED with no attempt yet, so a new leader re-arms it (attempt 0 + 1) if this one fails over.
  const queued: ExecutionRecord = {
    jobId: job.id,
    scheduledAtMs: at,
    attempt: 0,
    state: 'QUEUED',
    startedAtMs: null,
    finishedAtMs: null,
    statusCode: null,
    error: null,
    latenessMs: null,
    nodeId: null,
    retryAtMs: at,
  };
  putExecution(store, queued);
  if (job.state === 'FAILED') job.state = 'RUNNING';
  job.updatedAtMs = nowMs;
  // The job is written by the caller, after this (putJob attaches it to the arm then).
  pushArm(effects, { type: 'arm', jobId: job.id, scheduledAtMs: at, attempt: 1, dueAtMs: at, execution: queued });
  return at;
}

/** replay_jobs: a FAILED job runs again (queueRun); any other is left alone. */
function replayJob(store: SchedulerStore, id: string, nowMs: number, effects: Effect[]): boolean {
  const job = store.getJob(id);
  if (job === null || job.state !== 'FAILED') return false;
  queueRun(store, job, nowMs, effects);
  putJob(store, job);
  return true;
}

/** Keeps the latest schedulerLimits.runKeysPerJobMax run keys of the job (a repeat comes within seconds). */
function rememberRun(job: JobRecord, key: string, runAtMs: number): void {
  const keys = job.runKeys ?? [];
  keys.push({ key, runAtMs });
  if (keys.length > schedulerLimits.runKeysPerJobMax) keys.splice(0, keys.length - schedulerLimits.runKeysPerJobMax);
  job.runKeys = keys;
}

function patchJob(
  store: SchedulerStore,
  job: JobRecord,
  patch: JobPatch,
  nowMs: number,
  afterFired: boolean,
  effects: Effect[],
): JobCommandResult {
  if (isFinal(job.state)) return fail('conflict', `cannot patch job ${JSON.stringify(job.id)}: ${job.state}`);
  let next: number | null = job.nextFireAtMs;
  const schedule = patch.schedule === undefined ? undefined : resolveSchedule(patch.schedule, nowMs, job.id);
  if (schedule !== undefined) {
    const unknown = unknownCalendar(store, schedule, 'schedule');
    if (unknown !== null) return unknown;
    const first = firstOccurrence(schedule, nowMs);
    if (first === null) return fail('invalid_argument', 'the schedule has no occurrence', 'schedule');
    const allowed = skipExcluded(schedule, first, calendarRules(store, schedule));
    if (allowed === null) return fail('invalid_argument', 'the schedule has no occurrence outside its excluded dates', 'schedule.exclude');
    next = bound({ ...job, schedule }, allowed);
    if (next === null) return fail('invalid_argument', 'the schedule has no occurrence before end_at or max_runs', 'schedule');
    // Occurrences that already ran are not scheduled again: when none is left, the job ends with their executions.
    if (afterFired) next = bound({ ...job, schedule }, pastFired(store, job.id, schedule, next));
    job.schedule = schedule;
  }
  if (patch.misfireThresholdMs !== undefined) job.misfireThresholdMs = patch.misfireThresholdMs;
  if (patch.payload !== undefined) job.payload = patch.payload;
  if (patch.payloadEncoding !== undefined) job.payloadEncoding = patch.payloadEncoding;
  // The body is given one way at a time: a reference empties the inline payload, an inline payload drops the reference.
  if (patch.payloadRef !== undefined) job.payloadRef = patch.payloadRef;
  if (patch.payloadRef != null) job.payload = new Uint8Array(0);
  else if (patch.payload !== undefined) job.payloadRef = null;
  if (patch.metadata !== undefined) job.metadata = patch.metadata;
  job.updatedAtMs = nowMs;
  if (patch.schedule !== undefined) {
    job.nextFireAtMs = next;
    settle(store, job); // a RUNNING job (its last occurrence in flight) has a new one: PENDING
    effects.push({ type: 'disarm', jobId: job.id });
    if (job.state !== 'PAUSED') {
      armNext(job, effects, null);
      armQueued(store, job, nowMs, effects, false); // disarm dropped pending retries too
    }
  }
  putJob(store, job);
  return { ok: true, job };
}

/**
 * The first of the schedule's occurrences from `at` on that has no execution yet, or null when those left all have
 * one (a once job patched to the time it already fired at). Executions exist only up to about the time the patch
 * was applied, so a few steps find it; past schedulerLimits.patchFiredSkipsMax the occurrence reached is kept.
 */
function pastFired(store: SchedulerStore, jobId: string, schedule: Schedule, at: number): number | null {
  let next: number | null = at;
  for (let i = 0; i < schedulerLimits.patchFiredSkipsMax && next !== null && store.getExecution(jobId, next) !== null; i++) {
    if (schedule.kind === 'once') return null;
    const after = firstOccurrence(schedule, next + 1);
    next = after === null ? null : skipExcluded(schedule, after, calendarRules(store, schedule));
  }
  return next;
}

// ---------------------------------------------------------------- reports from the leader

/** A fired item's changes, not written yet: the attempt's RUNNING execution and the job advanced past it. */
interface Started {
  job: JobRecord;
  execution: ExecutionRecord;
}

/** What a fired item changes, or null when it is stale, a duplicate, or its job is cancelled or paused. */
function startAttempt(store: SchedulerStore, item: FiredItem, nodeId: string, nowMs: number, effects: Effect[]): Started | null {
  const job = store.getJob(item.jobId);
  if (job === null || job.state === 'CANCELLED') return null;
  const existing = store.getExecution(item.jobId, item.scheduledAtMs);
  const open = existing !== null && (existing.state === 'QUEUED' || existing.state === 'RUNNING');
  if (existing !== null && (!open || item.attempt < existing.attempt)) return null; // stale or duplicate
  // A paused job fires nothing regular; only an open execution (run_job, a retry) may still start.
  if (job.state === 'PAUSED' && !open) return null;
  const execution: ExecutionRecord = {
    jobId: item.jobId,
    scheduledAtMs: item.scheduledAtMs,
    attempt: item.attempt,
    state: 'RUNNING',
    // The execution started with its first attempt (a retry's start is in its attempt record).
    startedAtMs: existing?.startedAtMs ?? item.startedAtMs,
    finishedAtMs: null,
    // The attempt just started has no answer yet: the previous attempt's status and error (shown while the
    // execution was QUEUED for its retry) would read as this attempt's.
    statusCode: null,
    error: null,
    latenessMs: existing?.latenessMs ?? item.startedAtMs - item.scheduledAtMs,
    nodeId,
    retryAtMs: null,
    attempts: withAttempt(existing?.attempts, {
      attempt: item.attempt,
      startedAtMs: item.startedAtMs,
      finishedAtMs: null,
      statusCode: null,
      error: null,
      nodeId,
      fencingToken: fencingToken(job),
    }),
  };
  if (job.state !== 'PAUSED' && item.scheduledAtMs === job.nextFireAtMs) {
    job.runs += 1;
    job.nextFireAtMs = advance(store, job, item.scheduledAtMs, item.startedAtMs, nowMs);
    armNext(job, effects, null);
  }
  return { job, execution };
}

function applyFired(store: SchedulerStore, item: FiredItem, nodeId: string, nowMs: number, effects: Effect[]) {
  const started = startAttempt(store, item, nodeId, nowMs, effects);
  if (started === null) return false;
  const { job, execution } = started;
  putExecution(store, execution);
  // The RUNNING execution just written is open: no need to ask the store (one query less per callback).
  settle(store, job, undefined, true);
  job.updatedAtMs = nowMs;
  putJob(store, job);
  return true;
}

function applyOutcome(store: SchedulerStore, item: OutcomeItem, nodeId: string, nowMs: number, effects: Effect[]) {
  if (item.startedAtMs !== undefined) {
    // A folded fired item: exactly its apply, then the outcome's, with one read and one write of each row.
    const fired = { jobId: item.jobId, scheduledAtMs: item.scheduledAtMs, attempt: item.attempt, startedAtMs: item.startedAtMs };
    const started = startAttempt(store, fired, nodeId, nowMs, effects);
    if (started !== null) return finishAttempt(store, started.job, started.execution, item, nodeId, nowMs, effects, true);
    // The fired item would have changed nothing: the outcome applies to what is stored, as it would after it.
  }
  const job = store.getJob(item.jobId);
  const e = store.getExecution(item.jobId, item.scheduledAtMs);
  if (job === null || e === null || item.attempt < e.attempt) return false;
  if (job.state === 'CANCELLED') return finishCancelled(store, job, e, item, nodeId);
  return finishAttempt(store, job, e, item, nodeId, nowMs, effects, false);
}

/**
 * Ends (or requeues) the attempt of execution `e`. `jobChanged`: the job was changed by a fired item folded
 * into this outcome and must be written in any case (as that fired item's own apply would have).
 */
function finishAttempt(
  store: SchedulerStore,
  job: JobRecord,
  e: ExecutionRecord,
  item: OutcomeItem,
  nodeId: string,
  nowMs: number,
  effects: Effect[],
  jobChanged: boolean,
): boolean {
  const open = e.state === 'QUEUED' || e.state === 'RUNNING';
  if (!open) return false; // a duplicate report of a finished execution
  const attempts = endedAttempt(job, e, item, nodeId);
  const done = { ...e, attempt: item.attempt, statusCode: item.statusCode, error: item.error, attempts };
  if (item.result === 'retry') {
    // A missing retryAtMs is the leader's bug, but a committed entry must apply: retry at once.
    const retryAtMs = Math.max(item.retryAtMs ?? item.finishedAtMs, item.scheduledAtMs);
    const queued: ExecutionRecord = { ...done, state: 'QUEUED', retryAtMs, finishedAtMs: null };
    putExecution(store, queued);
    if (job.state !== 'PAUSED') {
      const attempt = item.attempt + 1;
      // The job as read (unchanged unless a folded fired item changed it: then it is written below, as it is here).
      pushArm(effects, { type: 'arm', jobId: job.id, scheduledAtMs: e.scheduledAtMs, attempt, dueAtMs: retryAtMs, job, execution: queued });
    }
    if (jobChanged) {
      settle(store, job, undefined, true); // the QUEUED execution just written is open
      job.updatedAtMs = nowMs;
      putJob(store, job);
    }
    return true;
  }
  const state = item.result === 'succeeded' ? 'SUCCEEDED' : 'FAILED';
  putExecution(store, { ...done, state, finishedAtMs: item.finishedAtMs, retryAtMs: null });
  settle(store, job, state);
  job.updatedAtMs = nowMs;
  putJob(store, job);
  effects.push({ type: 'finished', jobId: job.id, scheduledAtMs: e.scheduledAtMs });
  return true;
}

/** A cancelled job's in-flight callback still ends: record a final result, never a retry. */
function finishCancelled(store: SchedulerStore, job: JobRecord, e: ExecutionRecord, item: OutcomeItem, nodeId: string): boolean {
  if (e.state === 'SUCCEEDED' || e.state === 'FAILED') return false;
  const attempts = endedAttempt(job, e, item, nodeId);
  if (item.result === 'retry') {
    if (e.state === 'CANCELLED') return false;
    putExecution(store, { ...e, state: 'CANCELLED', finishedAtMs: item.finishedAtMs, retryAtMs: null, attempts });
    return true;
  }
  const state = item.result === 'succeeded' ? 'SUCCEEDED' : 'FAILED';
  putExecution(store, {
    ...e,
    state,
    attempt: item.attempt,
    statusCode: item.statusCode,
    error: item.error,
    finishedAtMs: item.finishedAtMs,
    retryAtMs: null,
    attempts,
  });
  return true;
}

function applySkipped(store: SchedulerStore, item: SkippedItem, nowMs: number, effects: Effect[]) {
  const job = store.getJob(item.jobId);
  if (job === null || job.state === 'CANCELLED' || job.state === 'PAUSED') return false;
  if (item.scheduledAtMs !== job.nextFireAtMs) return false; // stale: not the pending regular occurrence
  job.nextFireAtMs = advance(store, job, item.scheduledAtMs, null, nowMs);
  armNext(job, effects, null);
  settle(store, job);
  job.updatedAtMs = nowMs;
  putJob(store, job);
  return true;
}

// ---------------------------------------------------------------- attempts

function fencingToken(job: JobRecord): string | null {
  return entryTerm === null ? null : `${job.shard}.${entryTerm}`;
}

/** The attempts with `a` in place of the record of the same attempt number (else appended), the latest kept. */
function withAttempt(attempts: AttemptRecord[] | undefined, a: AttemptRecord): AttemptRecord[] {
  const out = (attempts ?? []).filter((x) => x.attempt !== a.attempt);
  out.push(a);
  out.sort((x, y) => x.attempt - y.attempt);
  const max = schedulerLimits.attemptsPerExecutionMax;
  return out.length > max ? out.slice(out.length - max) : out;
}

/** The attempts once the outcome `item` ended its attempt (a record without its start when none was written). */
function endedAttempt(job: JobRecord, e: ExecutionRecord, item: OutcomeItem, nodeId: string): AttemptRecord[] {
  const started = e.attempts?.find((x) => x.attempt === item.attempt);
  return withAttempt(e.attempts, {
    attempt: item.attempt,
    startedAtMs: started?.startedAtMs ?? item.startedAtMs ?? null,
    finishedAtMs: item.finishedAtMs,
    statusCode: item.statusCode,
    error: item.error,
    nodeId: nodeId === '' ? (started?.nodeId ?? null) : nodeId,
    fencingToken: started?.fencingToken ?? fencingToken(job),
  });
}

// ---------------------------------------------------------------- retention

/**
 * Deletes what the store says expired at the leader's nowMs, bounded: at most jobsMax jobs and
 * schedulerLimits.retentionExecutionsMax executions per command (a job whose executions do not all fit is
 * finished by the next command). A finished job with a run still open (an extra run) is kept until it ends.
 */
function applyRetention(store: SchedulerStore, nowMs: number, retentionMs: number | null, jobsMax: number, trim: TrimItem[]): CommandResult {
  let budget = schedulerLimits.retentionExecutionsMax;
  let jobsDeleted = 0;
  for (const id of store.expiredJobs(nowMs, retentionMs, jobsMax)) {
    if (budget <= 0) break;
    if (store.openExecutions(id).length > 0) continue;
    const d = store.deleteJob(id, budget);
    budget -= d.executions;
    if (d.deleted) jobsDeleted++;
  }
  for (const t of trim) {
    if (budget <= 0) break;
    budget -= store.trimExecutions(t.jobId, t.keep, budget);
  }
  return { type: 'retention', jobsDeleted, executionsDeleted: schedulerLimits.retentionExecutionsMax - budget };
}
