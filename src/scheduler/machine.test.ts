import { describe, expect, it } from 'vitest';
import { limits, schedulerLimits } from '../core/limits.js';
import { Prng } from '../core/prng.js';
import { decodeCommand, encodeCommand } from './codec.js';
import type { Command, Effect } from './commands.js';
import { apply, type ApplyResult, type CommandResult, type JobCommandResult } from './machine.js';
import { MemoryStore } from './memory-store.js';
import { firstOccurrence } from './schedule.js';
import type { SchedulerStore } from './store.js';
import type { JobRecord, JobSpec, Schedule, TaskRecord } from './types.js';

const T0 = Date.parse('2027-01-04T00:00:00.000Z');
const MIN = 60_000;
const threshold = limits.misfireThresholdMs;

const task = (name = 'email'): TaskRecord => ({
  name,
  url: 'http://127.0.0.1:9/hook',
  method: 'POST',
  headers: {},
  timeoutMs: 1000,
  retry: { maxAttempts: 3, initialBackoffMs: 10, maxBackoffMs: 100, multiplier: 2, jitter: false },
  signingSecret: null,
  maxConcurrency: 10,
  createdAtMs: 0,
  updatedAtMs: 0,
});

const spec = (id: string, over: Partial<JobSpec> = {}): JobSpec => ({
  id,
  task: 'email',
  callback: null,
  payload: new Uint8Array([1, 2, 3]),
  payloadEncoding: 'json',
  schedule: { kind: 'once', atMs: T0 + MIN },
  endAtMs: null,
  maxRuns: 0,
  misfire: 'fire_once',
  overlap: 'allow',
  metadata: null,
  requestDigest: `d-${id}`,
  idempotencyKey: null,
  ...over,
});

const everyMin = (startAtMs = T0 + MIN): Schedule => ({ kind: 'every', everyMs: MIN, startAtMs });

/** A store with the `email` task, and helpers that apply commands and read results. */
function setup() {
  const store = new MemoryStore();
  const run = (c: Command): ApplyResult => {
    const out = apply(store, c);
    return { result: out.result, effects: out.effects.map((e) => carriedChecked(store, e)) };
  };
  run({ type: 'put_task', nowMs: T0 - 1000, task: task() });
  const create = (s: JobSpec, nowMs = T0) => {
    const r = run({ type: 'create_jobs', nowMs, shard: 2, jobs: [s] });
    if (r.result.type !== 'create_jobs') throw new Error('wrong result');
    return { item: r.result.items[0]!, effects: r.effects };
  };
  const jobCmd = (c: Command): { r: JobCommandResult; effects: Effect[] } => {
    const out = run(c);
    if (!('result' in out.result) || out.result.type === 'delete_task' || out.result.type === 'delete_calendar') throw new Error('not a job command');
    return { r: out.result.result, effects: out.effects };
  };
  const fired = (jobId: string, scheduledAtMs: number, nowMs = scheduledAtMs + 2, attempt = 1) =>
    run({ type: 'fired', nowMs, nodeId: 'n1', items: [{ jobId, scheduledAtMs, attempt, startedAtMs: nowMs }] });
  const outcome = (
    jobId: string,
    scheduledAtMs: number,
    result: 'succeeded' | 'failed' | 'retry',
    nowMs: number,
    attempt = 1,
    retryAtMs: number | null = null,
  ) =>
    run({
      type: 'outcomes',
      nowMs,
      items: [
        {
          jobId,
          scheduledAtMs,
          attempt,
          result,
          statusCode: result === 'succeeded' ? 200 : 503,
          error: result === 'succeeded' ? null : 'HTTP 503',
          finishedAtMs: nowMs,
          retryAtMs,
        },
      ],
    });
  const skipped = (jobId: string, scheduledAtMs: number, nowMs: number, reason: 'misfire' | 'overlap' = 'overlap') =>
    run({ type: 'skipped', nowMs, items: [{ jobId, scheduledAtMs, reason }] });
  const job = (id: string): JobRecord => store.getJob(id)!;
  return { store, run, create, jobCmd, fired, outcome, skipped, job };
}

/**
 * The records an arm effect carries are what the store holds once the command applied (the leader fires on them
 * instead of reading them back); checked on every command of this file, then left out of the effect compared.
 */
function carriedChecked(store: MemoryStore, e: Effect): Effect {
  if (e.type !== 'arm') return e;
  const { job, execution, ...rest } = e;
  if (job !== undefined) expect(job).toEqual(store.getJob(e.jobId));
  if (execution !== undefined) expect(execution).toEqual(store.getExecution(e.jobId, e.scheduledAtMs));
  return rest;
}

/** The effect without the records it carries. */
function bare(e: Effect): Effect {
  if (e.type !== 'arm') return e;
  const { job: _job, execution: _execution, ...rest } = e;
  return rest;
}

const arm = (jobId: string, at: number, attempt = 1, dueAtMs = at): Effect => ({
  type: 'arm',
  jobId,
  scheduledAtMs: at,
  attempt,
  dueAtMs,
});

describe('tasks', () => {
  it('put_task creates, then replaces keeping createdAtMs', () => {
    const { run } = setup();
    const first = run({ type: 'put_task', nowMs: T0, task: task('t') }).result;
    expect(first).toMatchObject({ type: 'put_task', created: true, task: { createdAtMs: T0, updatedAtMs: T0 } });
    const second = run({ type: 'put_task', nowMs: T0 + 5, task: { ...task('t'), url: 'http://127.0.0.1:9/x' } });
    expect(second.result).toMatchObject({
      created: false,
      task: { createdAtMs: T0, updatedAtMs: T0 + 5, url: 'http://127.0.0.1:9/x' },
    });
  });

  it('delete_task: not_found, conflict while live jobs use it, ok once they are final', () => {
    const { run, create, jobCmd, store } = setup();
    expect(run({ type: 'delete_task', nowMs: T0, name: 'nope' }).result).toMatchObject({
      result: { ok: false, code: 'not_found' },
    });
    create(spec('a'));
    const refused = run({ type: 'delete_task', nowMs: T0, name: 'email' }).result as Extract<
      CommandResult,
      { type: 'delete_task' }
    >;
    expect(refused.result).toMatchObject({ ok: false, code: 'conflict' });
    expect(refused.result.ok === false && refused.result.message).toMatch(/1 live job/);
    jobCmd({ type: 'cancel_job', nowMs: T0, id: 'a' });
    expect(run({ type: 'delete_task', nowMs: T0, name: 'email' }).result).toEqual({
      type: 'delete_task',
      result: { ok: true },
    });
    expect(store.getTask('email')).toBeNull();
  });
});

describe('create_jobs', () => {
  it('creates PENDING with its first occurrence, the command shard, and arms it', () => {
    const { create } = setup();
    const { item, effects } = create(spec('a', { schedule: everyMin() }), T0);
    expect(item).toMatchObject({
      ok: true,
      created: true,
      job: { state: 'PENDING', nextFireAtMs: T0 + MIN, runs: 0, shard: 2, createdAtMs: T0, updatedAtMs: T0 },
    });
    expect(effects).toEqual([arm('a', T0 + MIN)]);
  });

  it('a once job in the past fires immediately (nextFireAtMs = atMs)', () => {
    const { create } = setup();
    const { item, effects } = create(spec('a', { schedule: { kind: 'once', atMs: T0 - 10 * MIN } }), T0);
    expect(item).toMatchObject({ ok: true, job: { nextFireAtMs: T0 - 10 * MIN } });
    expect(effects).toEqual([arm('a', T0 - 10 * MIN)]);
  });

  it('an id repeat: same digest -> the existing job, created false; other digest -> conflict', () => {
    const { create, run } = setup();
    create(spec('a'));
    const again = create(spec('a'), T0 + 5);
    expect(again.item).toMatchObject({ ok: true, created: false, job: { createdAtMs: T0 } });
    expect(again.effects).toEqual([]);
    const other = create(spec('a', { requestDigest: 'other' }));
    expect(other.item).toMatchObject({ ok: false, id: 'a', code: 'conflict' });
    // items of one command succeed or fail on their own, in order
    const batch = run({
      type: 'create_jobs',
      nowMs: T0,
      shard: 2,
      jobs: [spec('b'), spec('c', { task: 'missing' }), spec('b'), spec('d')],
    }).result;
    if (batch.type !== 'create_jobs') throw new Error('wrong result');
    expect(batch.items.map((i) => (i.ok ? `${i.job.id}:${i.created}` : `${i.id}:${i.code}:${i.field}`))).toEqual([
      'b:true',
      'c:not_found:task',
      'b:false',
      'd:true',
    ]);
  });

  it('refuses a schedule with no occurrence, and one that ends before its first', () => {
    const { create, store } = setup();
    const never = create(spec('a', { schedule: { kind: 'cron', cron: '0 0 30 2 *', timezone: 'UTC', startAtMs: null } }));
    expect(never.item).toMatchObject({ ok: false, code: 'invalid_argument', field: 'schedule' });
    const ended = create(spec('b', { schedule: everyMin(T0 + MIN), endAtMs: T0 + 30_000 }));
    expect(ended.item).toMatchObject({ ok: false, code: 'invalid_argument', field: 'end_at' });
    expect(store.getJob('a')).toBeNull();
    expect(store.getJob('b')).toBeNull();
  });

  it('asks the store for a task once per name per command, and again in the next command', () => {
    const store = new MemoryStore();
    let taskReads = 0;
    const getTask = store.getTask.bind(store);
    store.getTask = (name: string) => {
      taskReads++;
      return getTask(name);
    };
    apply(store, { type: 'put_task', nowMs: T0 - 1000, task: task() });
    const jobs = [...Array.from({ length: 50 }, (_, i) => spec(`j${i}`)), spec('m1', { task: 'later' }), spec('m2', { task: 'later' })];
    taskReads = 0;
    const first = apply(store, { type: 'create_jobs', nowMs: T0, shard: 2, jobs }).result;
    if (first.type !== 'create_jobs') throw new Error('wrong result');
    expect(taskReads).toBe(2);
    expect(first.items.filter((i) => i.ok)).toHaveLength(50);
    expect(first.items.slice(50)).toMatchObject([{ ok: false, code: 'not_found' }, { ok: false, code: 'not_found' }]);
    // Not remembered across commands: the task created in between is seen.
    apply(store, { type: 'put_task', nowMs: T0, task: task('later') });
    const second = apply(store, { type: 'create_jobs', nowMs: T0, shard: 2, jobs: [spec('m1', { task: 'later' })] }).result;
    expect(second).toMatchObject({ type: 'create_jobs', items: [{ ok: true, created: true }] });
  });

  it('an inline callback needs no task', () => {
    const { create } = setup();
    expect(create(spec('a', { task: null, callback: task('inline') })).item).toMatchObject({ ok: true });
    expect(create(spec('b', { task: null, callback: null })).item).toMatchObject({ ok: false, field: 'callback' });
  });
});

describe('a once job: fire, retry, outcome', () => {
  it('fired -> RUNNING, runs 1, no next; retry -> QUEUED and re-armed; success -> SUCCEEDED + finished', () => {
    const { create, fired, outcome, job, store } = setup();
    const at = T0 + MIN;
    create(spec('a'));
    const f = fired('a', at, at + 7);
    expect(f.result).toEqual({ type: 'fired', applied: 1, ignored: 0 });
    expect(f.effects).toEqual([]);
    expect(job('a')).toMatchObject({ state: 'RUNNING', runs: 1, nextFireAtMs: null, updatedAtMs: at + 7 });
    expect(store.getExecution('a', at)).toMatchObject({ state: 'RUNNING', attempt: 1, latenessMs: 7, nodeId: 'n1' });

    const r = outcome('a', at, 'retry', at + 100, 1, at + 1100);
    expect(r.effects).toEqual([arm('a', at, 2, at + 1100)]);
    expect(store.getExecution('a', at)).toMatchObject({ state: 'QUEUED', attempt: 1, retryAtMs: at + 1100, statusCode: 503, error: 'HTTP 503' });
    expect(job('a').state).toBe('RUNNING');

    fired('a', at, at + 1105, 2);
    // The running attempt has no answer yet: attempt 1's status and error are not shown as its own.
    // started_at stays the first attempt's (docs/api.md); the retry's start is in its attempt record.
    expect(store.getExecution('a', at)).toMatchObject({ state: 'RUNNING', attempt: 2, latenessMs: 7, startedAtMs: at + 7, statusCode: null, error: null });
    expect(job('a').runs).toBe(1);
    const done = outcome('a', at, 'succeeded', at + 1200, 2);
    expect(done.effects).toEqual([{ type: 'finished', jobId: 'a', scheduledAtMs: at }]);
    expect(job('a')).toMatchObject({ state: 'SUCCEEDED', nextFireAtMs: null });
    expect(store.getExecution('a', at)).toMatchObject({ state: 'SUCCEEDED', statusCode: 200, finishedAtMs: at + 1200, retryAtMs: null });
  });

  it('a failed outcome makes the job FAILED; duplicate and stale reports are ignored', () => {
    const { create, fired, outcome, job, store } = setup();
    const at = T0 + MIN;
    create(spec('a'));
    fired('a', at);
    expect(fired('a', at).result).toMatchObject({ applied: 1 }); // a re-fire of the open execution (new leader)
    expect(job('a').runs).toBe(1);
    expect(outcome('a', at, 'failed', at + 50).result).toMatchObject({ applied: 1 });
    expect(job('a').state).toBe('FAILED');
    expect(outcome('a', at, 'succeeded', at + 60).result).toMatchObject({ applied: 0, ignored: 1 });
    expect(fired('a', at).result).toMatchObject({ applied: 0, ignored: 1 });
    expect(store.getExecution('a', at)!.state).toBe('FAILED');
    expect(outcome('nope', at, 'failed', at).result).toMatchObject({ applied: 0, ignored: 1 });
  });
});

describe('the records an arm effect carries', () => {
  /** Applies without the setup's check, so what the effects carry is seen as apply returns it. */
  const raw = (store: MemoryStore, c: Command) => apply(store, c).effects.filter((e) => e.type === 'arm');

  it('a created job: its record, and no execution (none can exist)', () => {
    const { store } = setup();
    const [e] = raw(store, { type: 'create_jobs', nowMs: T0, shard: 2, jobs: [spec('a')] });
    expect(e).toMatchObject({ type: 'arm', jobId: 'a', scheduledAtMs: T0 + MIN, job: store.getJob('a') });
    expect(e!.type === 'arm' && e!.execution).toBeNull();
  });

  it('the next occurrence armed by a fired item: the job as written, its execution not known', () => {
    const { store, create } = setup();
    create(spec('a', { schedule: everyMin() }));
    const [e] = raw(store, { type: 'fired', nowMs: T0 + MIN + 2, nodeId: 'n1', items: [{ jobId: 'a', scheduledAtMs: T0 + MIN, attempt: 1, startedAtMs: T0 + MIN + 2 }] });
    expect(e).toMatchObject({ scheduledAtMs: T0 + 2 * MIN, job: { runs: 1, nextFireAtMs: T0 + 2 * MIN, updatedAtMs: T0 + MIN + 2 } });
    expect(e!.type === 'arm' && e!.job).toEqual(store.getJob('a'));
    expect(e!.type === 'arm' && 'execution' in e!).toBe(false);
  });

  it('a retry: its QUEUED execution and the job as read (a retry leaves it unchanged)', () => {
    const { store, create, fired } = setup();
    const at = T0 + MIN;
    create(spec('a'));
    fired('a', at);
    const item = { jobId: 'a', scheduledAtMs: at, attempt: 1, result: 'retry' as const, statusCode: 503, error: 'HTTP 503', finishedAtMs: at + 100, retryAtMs: at + 1100 };
    const [e] = raw(store, { type: 'outcomes', nowMs: at + 100, items: [item] });
    expect(e).toMatchObject({ attempt: 2, dueAtMs: at + 1100, execution: { state: 'QUEUED', attempt: 1, retryAtMs: at + 1100 } });
    expect(e!.type === 'arm' && e!.execution).toEqual(store.getExecution('a', at));
    expect(e!.type === 'arm' && e!.job).toEqual(store.getJob('a'));
  });

  it('two items of one job in a command: the job as the last one left it', () => {
    const { store, create } = setup();
    create(spec('a', { schedule: everyMin() }));
    const items = [T0 + MIN, T0 + 2 * MIN].map((t) => ({ jobId: 'a', scheduledAtMs: t, reason: 'overlap' as const }));
    const arms = raw(store, { type: 'skipped', nowMs: T0 + MIN + 5, items });
    expect(arms.map((e) => e.type === 'arm' && e.scheduledAtMs)).toEqual([T0 + 2 * MIN, T0 + 3 * MIN]);
    for (const e of arms) expect(e.type === 'arm' && e.job).toEqual(store.getJob('a'));
  });
});

describe('recurring jobs', () => {
  it('next derives from the occurrence that fired, not from nowMs; PENDING while it has a next', () => {
    const { create, fired, outcome, job } = setup();
    const t1 = T0 + MIN;
    create(spec('a', { schedule: everyMin() }));
    const f = fired('a', t1, t1 + 3000); // 3 s late: within the misfire threshold
    expect(f.effects).toEqual([arm('a', t1 + MIN)]);
    expect(job('a')).toMatchObject({ state: 'PENDING', runs: 1, nextFireAtMs: t1 + MIN });
    outcome('a', t1, 'failed', t1 + 4000);
    expect(job('a').state).toBe('PENDING');
  });

  it('max_runs: the last run leaves no next, RUNNING until its outcome, then by that outcome', () => {
    const { create, fired, outcome, job } = setup();
    const t1 = T0 + MIN;
    create(spec('a', { schedule: everyMin(), maxRuns: 2 }));
    fired('a', t1);
    const last = fired('a', t1 + MIN);
    expect(last.effects).toEqual([]);
    expect(job('a')).toMatchObject({ runs: 2, nextFireAtMs: null, state: 'RUNNING' });
    outcome('a', t1, 'succeeded', t1 + MIN + 10);
    expect(job('a').state).toBe('RUNNING'); // the last run is still open
    outcome('a', t1 + MIN, 'failed', t1 + MIN + 20);
    expect(job('a').state).toBe('FAILED');
  });

  it('end_at is inclusive', () => {
    const { create, fired, outcome, job } = setup();
    const t1 = T0 + MIN;
    create(spec('a', { schedule: everyMin(), endAtMs: t1 + MIN }));
    fired('a', t1);
    expect(job('a').nextFireAtMs).toBe(t1 + MIN);
    fired('a', t1 + MIN);
    expect(job('a').nextFireAtMs).toBeNull();
    outcome('a', t1, 'succeeded', t1 + MIN + 5);
    outcome('a', t1 + MIN, 'succeeded', t1 + MIN + 6);
    expect(job('a').state).toBe('SUCCEEDED');
  });

  it('cron in a zone advances to the next local match', () => {
    const { create, fired, job } = setup();
    const s: Schedule = { kind: 'cron', cron: '30 2 * * *', timezone: 'America/New_York', startAtMs: null };
    const now = Date.parse('2027-03-13T00:00:00Z');
    create(spec('a', { schedule: s }), now);
    expect(job('a').nextFireAtMs).toBe(Date.parse('2027-03-13T07:30:00Z'));
    fired('a', Date.parse('2027-03-13T07:30:00Z'));
    expect(job('a').nextFireAtMs).toBe(Date.parse('2027-03-14T07:30:00Z')); // 02:30 does not exist: 03:30 EDT
  });

  it('skipped advances without an execution and without counting a run; stale skips are ignored', () => {
    const { create, skipped, job, store } = setup();
    const t1 = T0 + MIN;
    create(spec('a', { schedule: everyMin() }));
    const s = skipped('a', t1, t1 + 1);
    expect(s.result).toEqual({ type: 'skipped', applied: 1, ignored: 0 });
    expect(s.effects).toEqual([arm('a', t1 + MIN)]);
    expect(job('a')).toMatchObject({ runs: 0, nextFireAtMs: t1 + MIN });
    expect(store.lastExecution('a')).toBeNull();
    expect(skipped('a', t1, t1 + 2).result).toMatchObject({ applied: 0, ignored: 1 });
  });
});

describe('misfire after a gap (fired / skipped late by more than the threshold)', () => {
  const gapMs = 10 * MIN + 30_000;
  const late = (misfire: JobSpec['misfire']) => {
    const h = setup();
    const t1 = T0 + MIN;
    h.create(spec('a', { schedule: everyMin(), misfire }));
    const f = h.fired('a', t1, t1 + gapMs);
    return { ...h, t1, f };
  };

  it('fire_once: the late run is the one catch-up; next is the first occurrence after it started', () => {
    const { job, t1 } = late('fire_once');
    expect(job('a').nextFireAtMs).toBe(firstOccurrence(everyMin(), t1 + gapMs + 1));
    expect(job('a').nextFireAtMs).toBe(t1 + 11 * MIN);
  });

  it('skip: jumps past every missed occurrence (also after a skipped report)', () => {
    const { job, t1 } = late('skip');
    expect(job('a').nextFireAtMs).toBe(t1 + 11 * MIN);
    const h = setup();
    h.create(spec('b', { schedule: everyMin(), misfire: 'skip' }));
    h.skipped('b', t1, t1 + gapMs, 'misfire');
    expect(h.job('b')).toMatchObject({ nextFireAtMs: t1 + 11 * MIN, runs: 0 });
  });

  it('fire_all: replays each missed occurrence in turn', () => {
    const { job, fired, t1 } = late('fire_all');
    expect(job('a').nextFireAtMs).toBe(t1 + MIN);
    const f2 = fired('a', t1 + MIN, t1 + gapMs + 10);
    expect(f2.effects).toEqual([arm('a', t1 + 2 * MIN)]);
    expect(job('a').runs).toBe(2);
  });

  it('fire_all: a backlog longer than misfireFireAllMax replays only the latest misfireFireAllMax', () => {
    const h = setup();
    const t1 = T0 + MIN;
    h.create(spec('a', { schedule: everyMin(), misfire: 'fire_all' }));
    const nowMs = t1 + (limits.misfireFireAllMax + 500) * MIN;
    h.fired('a', t1, nowMs);
    const next = h.job('a').nextFireAtMs!;
    const limitMs = nowMs - threshold;
    expect(next).toBeGreaterThan(t1 + MIN);
    expect(Math.floor((limitMs - next) / MIN) + 1).toBe(limits.misfireFireAllMax);
    // the replay then walks one by one (the cap is not re-applied mid-backlog)
    h.fired('a', next, nowMs + 5);
    expect(h.job('a').nextFireAtMs).toBe(next + MIN);
  });
});

describe('cancel', () => {
  it('any live state -> CANCELLED, open executions cancelled, disarm; idempotent; final -> conflict', () => {
    const { create, jobCmd, fired, outcome, job, store } = setup();
    const t1 = T0 + MIN;
    create(spec('a', { schedule: everyMin() }));
    fired('a', t1);
    const c = jobCmd({ type: 'cancel_job', nowMs: t1 + 10, id: 'a' });
    expect(c.r).toMatchObject({ ok: true, job: { state: 'CANCELLED', nextFireAtMs: null, updatedAtMs: t1 + 10 } });
    expect(c.effects).toEqual([{ type: 'disarm', jobId: 'a' }]);
    expect(store.getExecution('a', t1)).toMatchObject({ state: 'CANCELLED', finishedAtMs: t1 + 10 });
    expect(jobCmd({ type: 'cancel_job', nowMs: t1 + 20, id: 'a' })).toEqual({
      r: { ok: true, job: job('a') },
      effects: [],
    });
    expect(job('a').updatedAtMs).toBe(t1 + 10);

    create(spec('b'));
    fired('b', t1);
    outcome('b', t1, 'succeeded', t1 + 5);
    expect(jobCmd({ type: 'cancel_job', nowMs: t1, id: 'b' }).r).toMatchObject({ ok: false, code: 'conflict' });
    expect(jobCmd({ type: 'cancel_job', nowMs: t1, id: 'zzz' }).r).toMatchObject({ ok: false, code: 'not_found' });
  });

  it('once cancelled nothing fires: fired and skipped ignored, outcomes only finish the execution', () => {
    const { create, jobCmd, fired, outcome, skipped, job, store, run } = setup();
    const t1 = T0 + MIN;
    create(spec('a', { schedule: everyMin() }));
    fired('a', t1);
    jobCmd({ type: 'cancel_job', nowMs: t1 + 10, id: 'a' });
    expect(fired('a', t1 + MIN).result).toMatchObject({ applied: 0, ignored: 1 });
    expect(store.getExecution('a', t1 + MIN)).toBeNull();
    expect(skipped('a', t1 + MIN, t1 + MIN).result).toMatchObject({ applied: 0 });
    const retry = outcome('a', t1, 'retry', t1 + 20, 1, t1 + 1000);
    expect(retry.effects).toEqual([]);
    const ok = outcome('a', t1, 'succeeded', t1 + 30);
    expect(ok.effects).toEqual([]);
    expect(store.getExecution('a', t1)).toMatchObject({ state: 'SUCCEEDED', statusCode: 200 });
    expect(store.openExecutions('a')).toEqual([]);
    expect(job('a')).toMatchObject({ state: 'CANCELLED', nextFireAtMs: null, runs: 1 });
    expect(jobCmd({ type: 'run_job', nowMs: t1, id: 'a' }).r).toMatchObject({ ok: false, code: 'conflict' });
    expect(run({ type: 'resume_job', nowMs: t1, id: 'a' }).effects).toEqual([]);
  });
});

describe('pause and resume', () => {
  it('pause: PENDING -> PAUSED keeping nextFireAtMs, disarm; fired ignored while paused', () => {
    const { create, jobCmd, fired, job } = setup();
    create(spec('a', { schedule: everyMin() }));
    const p = jobCmd({ type: 'pause_job', nowMs: T0 + 1, id: 'a' });
    expect(p.r).toMatchObject({ ok: true, job: { state: 'PAUSED', nextFireAtMs: T0 + MIN } });
    expect(p.effects).toEqual([{ type: 'disarm', jobId: 'a' }]);
    expect(jobCmd({ type: 'pause_job', nowMs: T0 + 2, id: 'a' }).r).toMatchObject({ ok: true });
    expect(fired('a', T0 + MIN).result).toMatchObject({ applied: 0, ignored: 1 });
    expect(job('a')).toMatchObject({ runs: 0, nextFireAtMs: T0 + MIN });
  });

  it('pause refuses a once job in flight and final jobs; resume refuses final jobs', () => {
    const { create, jobCmd, fired, outcome } = setup();
    create(spec('a'));
    fired('a', T0 + MIN);
    expect(jobCmd({ type: 'pause_job', nowMs: T0, id: 'a' }).r).toMatchObject({ ok: false, code: 'conflict' });
    outcome('a', T0 + MIN, 'succeeded', T0 + MIN + 1);
    expect(jobCmd({ type: 'pause_job', nowMs: T0, id: 'a' }).r).toMatchObject({ ok: false, code: 'conflict' });
    expect(jobCmd({ type: 'resume_job', nowMs: T0, id: 'a' }).r).toMatchObject({ ok: false, code: 'conflict' });
  });

  it('a recurring job whose last run is in flight can pause; resume finishes it by its outcome', () => {
    const { create, jobCmd, fired, outcome, job } = setup();
    create(spec('a', { schedule: everyMin(), maxRuns: 1 }));
    fired('a', T0 + MIN);
    expect(job('a').state).toBe('RUNNING');
    jobCmd({ type: 'pause_job', nowMs: T0 + MIN + 5, id: 'a' });
    const done = outcome('a', T0 + MIN, 'succeeded', T0 + MIN + 10);
    expect(done.effects).toEqual([{ type: 'finished', jobId: 'a', scheduledAtMs: T0 + MIN }]);
    expect(job('a').state).toBe('PAUSED');
    const r = jobCmd({ type: 'resume_job', nowMs: T0 + 2 * MIN, id: 'a' });
    expect(r.r).toMatchObject({ ok: true, job: { state: 'SUCCEEDED', nextFireAtMs: null } });
    expect(r.effects).toEqual([]);
  });

  const pausedThroughGap = (misfire: JobSpec['misfire'], gapMins: number) => {
    const h = setup();
    h.create(spec('a', { schedule: everyMin(), misfire }));
    h.jobCmd({ type: 'pause_job', nowMs: T0 + 1, id: 'a' });
    const nowMs = T0 + gapMins * MIN + 30_000;
    return { ...h, nowMs, resumed: h.jobCmd({ type: 'resume_job', nowMs, id: 'a' }) };
  };

  it('resume with nothing missed keeps the next occurrence', () => {
    const { resumed } = pausedThroughGap('skip', 0);
    expect(resumed.r).toMatchObject({ ok: true, job: { state: 'PENDING', nextFireAtMs: T0 + MIN } });
    expect(resumed.effects).toEqual([arm('a', T0 + MIN)]);
  });

  it('resume, skip: the first occurrence not missed', () => {
    const { resumed } = pausedThroughGap('skip', 10);
    expect(resumed.r).toMatchObject({ ok: true, job: { nextFireAtMs: T0 + 11 * MIN } });
    expect(resumed.effects).toEqual([arm('a', T0 + 11 * MIN)]);
  });

  it('resume, fire_once: one run now for the earliest missed, then past the rest', () => {
    const { resumed, fired, job, nowMs } = pausedThroughGap('fire_once', 10);
    expect(resumed.effects).toEqual([arm('a', T0 + MIN)]);
    fired('a', T0 + MIN, nowMs + 3);
    expect(job('a')).toMatchObject({ runs: 1, nextFireAtMs: T0 + 11 * MIN });
  });

  it('resume, fire_all: replay from the earliest missed', () => {
    const { resumed, fired, job, nowMs } = pausedThroughGap('fire_all', 10);
    expect(resumed.effects).toEqual([arm('a', T0 + MIN)]);
    fired('a', T0 + MIN, nowMs + 3);
    expect(job('a').nextFireAtMs).toBe(T0 + 2 * MIN);
  });

  it('resume, fire_all, long pause: only the latest misfireFireAllMax', () => {
    const { resumed, nowMs } = pausedThroughGap('fire_all', limits.misfireFireAllMax + 100);
    if (!resumed.r.ok || resumed.r.job.nextFireAtMs === null) throw new Error('resume failed');
    const next = resumed.r.job.nextFireAtMs;
    expect(Math.floor((nowMs - threshold - next) / MIN) + 1).toBe(limits.misfireFireAllMax);
  });

  it('resume of a once job whose time passed fires now; pending retries are re-armed', () => {
    const { create, jobCmd, fired, outcome, store } = setup();
    create(spec('a'));
    jobCmd({ type: 'pause_job', nowMs: T0, id: 'a' });
    expect(jobCmd({ type: 'resume_job', nowMs: T0 + 5 * MIN, id: 'a' }).effects).toEqual([arm('a', T0 + MIN)]);

    create(spec('b', { schedule: everyMin() }));
    fired('b', T0 + MIN);
    jobCmd({ type: 'pause_job', nowMs: T0 + MIN + 5, id: 'b' });
    const r = outcome('b', T0 + MIN, 'retry', T0 + MIN + 10, 1, T0 + MIN + 2000);
    expect(r.effects).toEqual([]); // paused: not armed
    expect(store.getExecution('b', T0 + MIN)!.state).toBe('QUEUED');
    const resumed = jobCmd({ type: 'resume_job', nowMs: T0 + MIN + 20, id: 'b' });
    expect(resumed.effects).toEqual([arm('b', T0 + 2 * MIN), arm('b', T0 + MIN, 2, T0 + MIN + 2000)]);
  });
});

describe('run_job', () => {
  it('queues an extra occurrence at nowMs without touching the schedule, runs or state', () => {
    const { create, jobCmd, fired, outcome, job, store } = setup();
    create(spec('a', { schedule: everyMin() }));
    const now = T0 + 5;
    const r = jobCmd({ type: 'run_job', nowMs: now, id: 'a' });
    expect(r.r).toMatchObject({ ok: true, runAtMs: now, job: { nextFireAtMs: T0 + MIN, runs: 0 } });
    expect(r.effects).toEqual([arm('a', now)]);
    expect(store.getExecution('a', now)).toMatchObject({ state: 'QUEUED', attempt: 0, retryAtMs: now });
    fired('a', now, now + 1);
    outcome('a', now, 'failed', now + 2);
    expect(job('a')).toMatchObject({ state: 'PENDING', runs: 0, nextFireAtMs: T0 + MIN });
    // the same instant again: a fresh key
    expect(jobCmd({ type: 'run_job', nowMs: now, id: 'a' }).r).toMatchObject({ runAtMs: now + 1 });
    // never the pending regular occurrence's key
    expect(jobCmd({ type: 'run_job', nowMs: T0 + MIN, id: 'a' }).r).toMatchObject({ runAtMs: T0 + MIN + 1 });
  });

  it('runs on a paused or finished job; the extra run fires and finishes without changing its state', () => {
    const { create, jobCmd, fired, outcome, job, store } = setup();
    create(spec('a'));
    fired('a', T0 + MIN);
    outcome('a', T0 + MIN, 'succeeded', T0 + MIN + 1);
    const r = jobCmd({ type: 'run_job', nowMs: T0 + 2 * MIN, id: 'a' });
    expect(r.r).toMatchObject({ ok: true });
    expect(fired('a', T0 + 2 * MIN).result).toMatchObject({ applied: 1 });
    outcome('a', T0 + 2 * MIN, 'failed', T0 + 2 * MIN + 9);
    expect(job('a').state).toBe('SUCCEEDED');

    create(spec('p', { schedule: everyMin() }));
    jobCmd({ type: 'pause_job', nowMs: T0, id: 'p' });
    jobCmd({ type: 'run_job', nowMs: T0 + 7, id: 'p' });
    expect(fired('p', T0 + 7).result).toMatchObject({ applied: 1 });
    expect(store.getExecution('p', T0 + 7)!.state).toBe('RUNNING');
    expect(job('p')).toMatchObject({ state: 'PAUSED', runs: 0 });
  });

  it('a repeated run with the same run key answers the first run and queues nothing more', () => {
    const { create, jobCmd, fired, outcome, store } = setup();
    create(spec('a', { schedule: everyMin() }));
    const first = jobCmd({ type: 'run_job', nowMs: T0 + 5, id: 'a', runKey: 'k1' });
    expect(first.r).toMatchObject({ ok: true, runAtMs: T0 + 5 });
    // The repeat arrives later (a retry after a timed-out proposal that had committed): same run, no effect.
    const again = jobCmd({ type: 'run_job', nowMs: T0 + 900, id: 'a', runKey: 'k1' });
    expect(again.r).toMatchObject({ ok: true, runAtMs: T0 + 5 });
    expect(again.effects).toEqual([]);
    expect(store.getExecution('a', T0 + 900)).toBeNull();
    // ... also after the run finished: the key still names it.
    fired('a', T0 + 5, T0 + 6);
    outcome('a', T0 + 5, 'succeeded', T0 + 7);
    expect(jobCmd({ type: 'run_job', nowMs: T0 + 950, id: 'a', runKey: 'k1' }).r).toMatchObject({ runAtMs: T0 + 5 });
    // Another key, or none, is another run.
    expect(jobCmd({ type: 'run_job', nowMs: T0 + 1000, id: 'a', runKey: 'k2' }).r).toMatchObject({ runAtMs: T0 + 1000 });
    expect(jobCmd({ type: 'run_job', nowMs: T0 + 1000, id: 'a' }).r).toMatchObject({ runAtMs: T0 + 1001 });
    expect(store.listExecutions('a', 10, null).map((e) => e.scheduledAtMs)).toEqual([T0 + 1001, T0 + 1000, T0 + 5]);
  });

  it('remembers the latest runKeysPerJobMax keys per job, and only for that job', () => {
    const { create, jobCmd, job } = setup();
    create(spec('a', { schedule: everyMin() }));
    create(spec('b', { schedule: everyMin() }));
    const max = schedulerLimits.runKeysPerJobMax;
    for (let i = 0; i <= max; i++) jobCmd({ type: 'run_job', nowMs: T0 + 10 * i, id: 'a', runKey: `k${i}` });
    expect(job('a').runKeys).toHaveLength(max);
    expect(job('a').runKeys![0]).toEqual({ key: 'k1', runAtMs: T0 + 10 });
    // k0 was forgotten: a new run. The newest keys still answer their run.
    expect(jobCmd({ type: 'run_job', nowMs: T0 + 5_000, id: 'a', runKey: 'k0' }).r).toMatchObject({ runAtMs: T0 + 5_000 });
    expect(jobCmd({ type: 'run_job', nowMs: T0 + 6_000, id: 'a', runKey: `k${max}` }).r).toMatchObject({ runAtMs: T0 + 10 * max });
    // The same key on another job is that job's first run.
    expect(jobCmd({ type: 'run_job', nowMs: T0 + 7_000, id: 'b', runKey: `k${max}` }).r).toMatchObject({ runAtMs: T0 + 7_000 });
  });

  it('a repeated keyed run on a job cancelled since answers the run made, a new key is refused', () => {
    const { create, jobCmd } = setup();
    create(spec('a', { schedule: everyMin() }));
    jobCmd({ type: 'run_job', nowMs: T0 + 5, id: 'a', runKey: 'k1' });
    jobCmd({ type: 'cancel_job', nowMs: T0 + 6, id: 'a' });
    expect(jobCmd({ type: 'run_job', nowMs: T0 + 7, id: 'a', runKey: 'k1' }).r).toMatchObject({ ok: true, runAtMs: T0 + 5 });
    expect(jobCmd({ type: 'run_job', nowMs: T0 + 7, id: 'a', runKey: 'k2' }).r).toMatchObject({ ok: false, code: 'conflict' });
  });
});

describe('patch_job', () => {
  it('replaces schedule, payload and metadata atomically; a new schedule disarms and re-arms', () => {
    const { create, jobCmd, job } = setup();
    create(spec('a', { schedule: everyMin() }));
    const p = jobCmd({
      type: 'patch_job',
      nowMs: T0 + 10,
      id: 'a',
      patch: {
        schedule: { kind: 'every', everyMs: 5 * MIN, startAtMs: T0 },
        payload: new Uint8Array([9]),
        payloadEncoding: 'base64',
        metadata: { k: 'v' },
      },
    });
    expect(p.effects).toEqual([{ type: 'disarm', jobId: 'a' }, arm('a', T0 + 5 * MIN)]);
    expect(job('a')).toMatchObject({
      nextFireAtMs: T0 + 5 * MIN,
      payload: new Uint8Array([9]),
      payloadEncoding: 'base64',
      metadata: { k: 'v' },
      updatedAtMs: T0 + 10,
    });
    const meta = jobCmd({ type: 'patch_job', nowMs: T0 + 20, id: 'a', patch: { metadata: null } });
    expect(meta.effects).toEqual([]);
    expect(job('a')).toMatchObject({ metadata: null, nextFireAtMs: T0 + 5 * MIN });
  });

  it('a once job in flight gets a new occurrence: PENDING again; final jobs refuse', () => {
    const { create, jobCmd, fired, outcome, job } = setup();
    create(spec('a'));
    fired('a', T0 + MIN);
    jobCmd({ type: 'patch_job', nowMs: T0 + MIN + 5, id: 'a', patch: { schedule: { kind: 'once', atMs: T0 + 9 * MIN } } });
    expect(job('a')).toMatchObject({ state: 'PENDING', nextFireAtMs: T0 + 9 * MIN });
    outcome('a', T0 + MIN, 'failed', T0 + MIN + 9); // the old run ends: the job still has its new occurrence
    expect(job('a').state).toBe('PENDING');
    fired('a', T0 + 9 * MIN);
    outcome('a', T0 + 9 * MIN, 'succeeded', T0 + 9 * MIN + 5);
    expect(job('a').state).toBe('SUCCEEDED');
    expect(jobCmd({ type: 'patch_job', nowMs: T0, id: 'a', patch: { metadata: null } }).r).toMatchObject({
      ok: false,
      code: 'conflict',
    });
    const bad = jobCmd({
      type: 'patch_job',
      nowMs: T0,
      id: 'zzz',
      patch: { metadata: null },
    });
    expect(bad.r).toMatchObject({ ok: false, code: 'not_found' });
  });

  it('a patch stamped before an occurrence fired, applied after it, does not schedule that occurrence again', () => {
    const { create, jobCmd, fired, job } = setup();
    const t1 = T0 + MIN;
    create(spec('a', { schedule: everyMin() }));
    create(spec('old', { schedule: everyMin() }));
    fired('a', t1);
    fired('old', t1);
    // Stamped 8 ms before t1 on the proposer's clock, committed after t1's fired record.
    const patch = { schedule: { kind: 'every' as const, everyMs: 30_000, startAtMs: T0 } };
    const p = jobCmd({ type: 'patch_job', nowMs: t1 - 8, id: 'a', patch, afterFired: true });
    expect(p.effects).toEqual([{ type: 'disarm', jobId: 'a' }, arm('a', t1 + 30_000)]);
    expect(job('a')).toMatchObject({ state: 'PENDING', nextFireAtMs: t1 + 30_000 });
    // An entry written before `afterFired` existed applies as it always did: t1 again.
    jobCmd({ type: 'patch_job', nowMs: t1 - 8, id: 'old', patch });
    expect(job('old').nextFireAtMs).toBe(t1);
  });

  it('a once job patched to the time it already fired at ends with that execution instead of firing it again', () => {
    const { create, jobCmd, fired, outcome, job } = setup();
    const t1 = T0 + MIN;
    create(spec('a', { schedule: everyMin() }));
    fired('a', t1);
    const p = jobCmd({ type: 'patch_job', nowMs: t1 - 3, id: 'a', patch: { schedule: { kind: 'once', atMs: t1 } }, afterFired: true });
    expect(p.r).toMatchObject({ ok: true });
    expect(p.effects).toEqual([{ type: 'disarm', jobId: 'a' }]);
    expect(job('a')).toMatchObject({ state: 'RUNNING', nextFireAtMs: null });
    outcome('a', t1, 'succeeded', t1 + 40);
    expect(job('a').state).toBe('SUCCEEDED');
  });

  it('a schedule with no occurrence is refused and nothing changes', () => {
    const { create, jobCmd, job } = setup();
    create(spec('a', { schedule: everyMin() }));
    const before = job('a');
    const r = jobCmd({
      type: 'patch_job',
      nowMs: T0 + 1,
      id: 'a',
      patch: { schedule: { kind: 'cron', cron: '0 0 30 2 *', timezone: 'UTC', startAtMs: null }, metadata: { x: 1 } },
    });
    expect(r.r).toMatchObject({ ok: false, code: 'invalid_argument', field: 'schedule' });
    expect(job('a')).toEqual(before);
  });
});

describe('overlap support', () => {
  it('buffer_one: while a run is open, nextFireAtMs stays on the buffered occurrence until it fires', () => {
    const { create, fired, outcome, job } = setup();
    const t1 = T0 + MIN;
    create(spec('a', { schedule: everyMin(), overlap: 'buffer_one' }));
    fired('a', t1);
    expect(job('a').nextFireAtMs).toBe(t1 + MIN);
    // t1 + MIN comes due while t1 still runs: the leader proposes nothing, the state machine keeps it
    const done = outcome('a', t1, 'succeeded', t1 + MIN + 2000);
    expect(done.effects).toEqual([{ type: 'finished', jobId: 'a', scheduledAtMs: t1 }]);
    expect(job('a')).toMatchObject({ state: 'PENDING', nextFireAtMs: t1 + MIN });
    const late = fired('a', t1 + MIN, t1 + MIN + 2001);
    expect(late.effects).toEqual([arm('a', t1 + 2 * MIN)]);
    expect(job('a').runs).toBe(2);
  });

  it('skip: the leader reports the occurrence skipped and the job moves on', () => {
    const { create, fired, skipped, job } = setup();
    const t1 = T0 + MIN;
    create(spec('a', { schedule: everyMin(), overlap: 'skip' }));
    fired('a', t1);
    expect(skipped('a', t1 + MIN, t1 + MIN).effects).toEqual([arm('a', t1 + 2 * MIN)]);
    expect(job('a')).toMatchObject({ runs: 1, nextFireAtMs: t1 + 2 * MIN });
  });
});

// ---------------------------------------------------------------- determinism

/** A random next command, steered by the current state so that most reports hit real occurrences. */
function randomCommand(rand: Prng, store: MemoryStore, now: number, generation: number): Command {
  const pick = <T>(xs: readonly T[]): T => xs[rand.int(xs.length)]!;
  const id = `g${generation}-${rand.int(4)}`; // a fresh pool now and then: jobs end, and ended jobs ignore reports
  const schedules: Schedule[] = [
    { kind: 'once', atMs: now + rand.int(3) * MIN },
    everyMin(T0),
    { kind: 'cron', cron: '*/2 * * * *', timezone: 'Europe/Berlin', startAtMs: null },
  ];
  const job = store.getJob(id);
  const open = store.openExecutions(id);
  const keys = [job?.nextFireAtMs ?? now, ...open.map((e) => e.scheduledAtMs), Math.floor(now / MIN) * MIN];
  const at = pick(keys);
  const attempt = (store.getExecution(id, at)?.attempt ?? 0) + rand.int(2);
  const k = rand.int(12);
  if (k === 0 || job === null) {
    const misfire = pick(['skip', 'fire_once', 'fire_all'] as const);
    const overlap = pick(['allow', 'skip', 'buffer_one'] as const);
    const s = spec(id, { schedule: pick(schedules), misfire, overlap, maxRuns: rand.int(4) });
    return { type: 'create_jobs', nowMs: now, shard: 1, jobs: [s] };
  }
  if (k === 1) return { type: pick(['cancel_job', 'pause_job', 'resume_job', 'run_job'] as const), nowMs: now, id };
  if (k === 2) return { type: 'patch_job', nowMs: now, id, patch: { schedule: pick(schedules), metadata: { k } } };
  if (k <= 6) {
    return { type: 'fired', nowMs: now, nodeId: 'n1', items: [{ jobId: id, scheduledAtMs: at, attempt, startedAtMs: now }] };
  }
  if (k <= 10) {
    const result = pick(['succeeded', 'failed', 'retry'] as const);
    const retryAtMs = result === 'retry' ? now + 1000 : null;
    const item = { jobId: id, scheduledAtMs: at, attempt, result, statusCode: 500, error: 'x', finishedAtMs: now, retryAtMs };
    return { type: 'outcomes', nowMs: now, items: [item] };
  }
  return { type: 'skipped', nowMs: now, items: [{ jobId: id, scheduledAtMs: at, reason: 'overlap' }] };
}

function dump(store: MemoryStore) {
  const jobs = store.listJobs({ state: null, task: null, limit: 1000, afterId: null });
  return {
    tasks: store.listTasks(),
    jobs,
    executions: jobs.map((j) => store.listExecutions(j.id, 1000, null)),
    counts: store.countJobsByState(),
  };
}

function checkInvariants(store: SchedulerStore, seed: number): void {
  for (const j of store.listJobs({ state: null, task: null, limit: 1000, afterId: null })) {
    const where = `seed ${seed} job ${j.id} ${j.state}`;
    if (j.state === 'CANCELLED') {
      expect(j.nextFireAtMs, where).toBeNull();
      expect(store.openExecutions(j.id), where).toEqual([]);
    }
    if (j.state === 'PENDING') expect(j.nextFireAtMs, where).not.toBeNull();
    if (j.state === 'RUNNING') expect(store.openExecutions(j.id).length, where).toBeGreaterThan(0);
    if (j.maxRuns > 0) expect(j.runs, where).toBeLessThanOrEqual(j.maxRuns);
  }
}

describe('determinism and invariants', () => {
  it('the same commands (one copy through the codec) give the same results, effects and state', () => {
    for (const seed of [1, 2, 3, 42, 2027]) {
      const rand = new Prng(seed);
      const s1 = new MemoryStore();
      const s2 = new MemoryStore();
      let applied = 0;
      let now = T0;
      const put: Command = { type: 'put_task', nowMs: T0, task: task() };
      apply(s1, put);
      apply(s2, put);
      for (let i = 0; i < 600; i++) {
        now += rand.int(40_000);
        const c = randomCommand(rand, s1, now, Math.floor(i / 60));
        const r1 = apply(s1, c);
        const r2 = apply(s2, decodeCommand(encodeCommand(c)));
        expect(r2).toEqual(r1);
        if ('applied' in r1.result) applied += r1.result.applied;
        checkInvariants(s1, seed);
      }
      expect(applied, `seed ${seed}: reports that hit a real occurrence`).toBeGreaterThan(200);
      expect(dump(s2)).toEqual(dump(s1));
      expect(dump(s1).jobs.length).toBeGreaterThan(0);
    }
  });

  it('an outcome with its fired item folded in applies exactly as that fired item followed by the outcome', () => {
    for (const seed of [7, 8, 9, 1234]) {
      const rand = new Prng(seed);
      const sequential = new MemoryStore();
      const folded = new MemoryStore();
      const put: Command = { type: 'put_task', nowMs: T0, task: task() };
      apply(sequential, put);
      apply(folded, put);
      let now = T0;
      let pairs = 0;
      for (let i = 0; i < 800; i++) {
        now += rand.int(40_000);
        const c = randomCommand(rand, sequential, now, Math.floor(i / 60));
        if (c.type === 'fired' && rand.int(2) === 0) {
          // The same attempt's fired item and outcome: two commands on one side, one folded item on the other.
          const f = c.items[0]!;
          const result = (['succeeded', 'failed', 'retry'] as const)[rand.int(3)]!;
          const item = { jobId: f.jobId, scheduledAtMs: f.scheduledAtMs, attempt: f.attempt, result, statusCode: 200, error: null,
            finishedAtMs: now + 3, retryAtMs: result === 'retry' ? now + 1000 : null };
          const a1 = apply(sequential, c);
          const a2 = apply(sequential, { type: 'outcomes', nowMs: now, items: [item] });
          const b = apply(folded, decodeCommand(encodeCommand({ type: 'outcomes', nowMs: now, nodeId: 'n1', items: [{ ...item, startedAtMs: f.startedAtMs }] })));
          // The same effects; the records they carry are what each command left (the folded one's: the outcome's).
          expect(b.effects.map(bare), `seed ${seed} step ${i}`).toEqual([...a1.effects, ...a2.effects].map(bare));
          if ('applied' in a1.result && a1.result.applied > 0) pairs++;
        } else {
          const a = apply(sequential, c);
          const b = apply(folded, c);
          expect(b, `seed ${seed} step ${i}`).toEqual(a);
        }
        if (i % 8 === 0 || i === 799) expect(dump(folded), `seed ${seed} step ${i}`).toEqual(dump(sequential));
      }
      checkInvariants(folded, seed);
      expect(pairs, `seed ${seed}: folded pairs whose fired item started an attempt`).toBeGreaterThan(30);
    }
  });

  it('noop changes nothing', () => {
    const { store, create } = setup();
    create(spec('a'));
    const before = dump(store);
    expect(apply(store, { type: 'noop' })).toEqual({ result: { type: 'noop' }, effects: [] });
    expect(dump(store)).toEqual(before);
  });
});

describe('attempts, replay and retention (issue 12)', () => {
  const attemptOf = (attempt: number, startedAtMs: number | null, finishedAtMs: number | null, statusCode: number | null, error: string | null) => ({
    attempt,
    startedAtMs,
    finishedAtMs,
    statusCode,
    error,
    nodeId: 'n1',
    fencingToken: '2.7',
  });

  it('every attempt is recorded with its node and fencing token (the entry term), oldest first', () => {
    const store = new MemoryStore();
    apply(store, { type: 'put_task', nowMs: T0 - 1000, task: task() });
    apply(store, { type: 'create_jobs', nowMs: T0, shard: 2, jobs: [spec('a')] });
    const at = T0 + MIN;
    const fired = (attempt: number, startedAtMs: number) =>
      apply(store, { type: 'fired', nowMs: startedAtMs, nodeId: 'n1', items: [{ jobId: 'a', scheduledAtMs: at, attempt, startedAtMs }] }, 7);
    const outcome = (attempt: number, result: 'retry' | 'succeeded', finishedAtMs: number, startedAtMs?: number) =>
      apply(
        store,
        {
          type: 'outcomes',
          nowMs: finishedAtMs,
          nodeId: 'n1',
          items: [
            {
              jobId: 'a',
              scheduledAtMs: at,
              attempt,
              result,
              statusCode: result === 'retry' ? 503 : 200,
              error: result === 'retry' ? 'HTTP 503' : null,
              finishedAtMs,
              retryAtMs: result === 'retry' ? finishedAtMs + 1000 : null,
              ...(startedAtMs === undefined ? {} : { startedAtMs }),
            },
          ],
        },
        7,
      );
    fired(1, at + 3);
    outcome(1, 'retry', at + 50);
    // Attempt 2 folded (fired item inside its outcome), attempt 3 as a pair.
    outcome(2, 'retry', at + 1100, at + 1060);
    fired(3, at + 2200);
    outcome(3, 'succeeded', at + 2230);
    const e = store.getExecution('a', at)!;
    expect(e).toMatchObject({ state: 'SUCCEEDED', attempt: 3, startedAtMs: at + 3, finishedAtMs: at + 2230, statusCode: 200 });
    expect(e.attempts).toEqual([
      attemptOf(1, at + 3, at + 50, 503, 'HTTP 503'),
      attemptOf(2, at + 1060, at + 1100, 503, 'HTTP 503'),
      attemptOf(3, at + 2200, at + 2230, 200, null),
    ]);
  });

  it('a failed job replays: RUNNING with a new execution, then SUCCEEDED; both executions stay', () => {
    const { create, fired, outcome, job, store, run } = setup();
    const at = T0 + MIN;
    create(spec('a'));
    fired('a', at, at + 2);
    outcome('a', at, 'failed', at + 10);
    expect(job('a').state).toBe('FAILED');
    const r = run({ type: 'replay_jobs', nowMs: at + 5000, ids: ['a', 'missing'] });
    expect(r.result).toEqual({ type: 'replay_jobs', replayed: ['a'] });
    expect(r.effects).toEqual([arm('a', at + 5000)]);
    expect(job('a').state).toBe('RUNNING');
    // A job that is not FAILED (now RUNNING) is not replayed twice.
    expect(run({ type: 'replay_jobs', nowMs: at + 5001, ids: ['a'] }).result).toEqual({ type: 'replay_jobs', replayed: [] });
    fired('a', at + 5000, at + 5003);
    outcome('a', at + 5000, 'succeeded', at + 5020);
    expect(job('a').state).toBe('SUCCEEDED');
    expect(store.listExecutions('a', 10, null).map((e) => [e.scheduledAtMs, e.state])).toEqual([
      [at + 5000, 'SUCCEEDED'],
      [at, 'FAILED'],
    ]);
  });

  it('a replay that fails again leaves the job FAILED', () => {
    const { create, fired, outcome, job, run } = setup();
    const at = T0 + MIN;
    create(spec('a'));
    fired('a', at, at + 2);
    outcome('a', at, 'failed', at + 10);
    run({ type: 'replay_jobs', nowMs: at + 100, ids: ['a'] });
    fired('a', at + 100, at + 101);
    outcome('a', at + 100, 'failed', at + 120);
    expect(job('a')).toMatchObject({ state: 'FAILED', updatedAtMs: at + 120 });
  });

  it('retention deletes finished jobs past the period at the command time, keeps live and recent ones', () => {
    const { create, fired, outcome, job, store, run } = setup();
    const at = T0 + MIN;
    create(spec('done'));
    create(spec('live', { schedule: { kind: 'once', atMs: T0 + 10 * MIN } }));
    fired('done', at, at + 2);
    outcome('done', at, 'succeeded', at + 10);
    const retention = (nowMs: number, retentionMs: number | null) => run({ type: 'retention', nowMs, retentionMs, jobsMax: 10, trim: [] }).result;
    expect(retention(at + 10 + 999, 1000)).toEqual({ type: 'retention', jobsDeleted: 0, executionsDeleted: 0 });
    expect(retention(at + 10 + 5000, null)).toEqual({ type: 'retention', jobsDeleted: 0, executionsDeleted: 0 });
    expect(retention(at + 10 + 1000, 1000)).toEqual({ type: 'retention', jobsDeleted: 1, executionsDeleted: 1 });
    expect(store.getJob('done')).toBeNull();
    expect(store.listExecutions('done', 10, null)).toEqual([]);
    expect(job('live').state).toBe('PENDING');
  });

  it("a task's retentionMs (as it was when the job finished) overrides the command's", () => {
    const { create, fired, outcome, store, run } = setup();
    run({ type: 'put_task', nowMs: T0, task: { ...task('short'), retentionMs: 2000 } });
    const at = T0 + MIN;
    create(spec('a', { task: 'short' }));
    create(spec('b'));
    for (const id of ['a', 'b']) {
      fired(id, at, at + 2);
      outcome(id, at, 'succeeded', at + 10);
    }
    run({ type: 'put_task', nowMs: at + 20, task: { ...task('short'), retentionMs: 999_000 } });
    const r = run({ type: 'retention', nowMs: at + 10 + 2000, retentionMs: 60_000, jobsMax: 10, trim: [] });
    expect(r.result).toMatchObject({ jobsDeleted: 1 });
    expect(store.getJob('a')).toBeNull();
    expect(store.getJob('b')).not.toBeNull();
  });

  it('trim keeps the newest executions of a job, never an open one', () => {
    const { create, fired, outcome, store, run } = setup();
    create(spec('r', { schedule: everyMin() }));
    const times = [1, 2, 3, 4].map((k) => T0 + k * MIN);
    for (const at of times) {
      fired('r', at, at + 2);
      if (at !== times[0]) outcome('r', at, 'succeeded', at + 10);
    }
    // The first execution is still RUNNING (open): kept whatever its age.
    const r = run({ type: 'retention', nowMs: T0 + 10 * MIN, retentionMs: null, jobsMax: 0, trim: [{ jobId: 'r', keep: 1 }] });
    expect(r.result).toEqual({ type: 'retention', jobsDeleted: 0, executionsDeleted: 2 });
    expect(store.listExecutions('r', 10, null).map((e) => e.scheduledAtMs)).toEqual([times[3], times[0]]);
  });
});
