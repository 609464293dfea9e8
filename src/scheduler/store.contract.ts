/**
 * The SchedulerStore contract: one suite, run against every implementation (MemoryStore in
 * memory-store.test.ts, SqliteShardStore in src/store). Call runSchedulerStoreContract from a *.test.ts file.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { JobPageQuery, SchedulerStore } from './store.js';
import { noSearch, type JobSearch } from './search.js';
import type { ExecutionRecord, JobRecord, JobState, TaskRecord } from './types.js';

export function contractTask(name: string, overrides: Partial<TaskRecord> = {}): TaskRecord {
  return {
    name,
    url: `http://127.0.0.1:9/${name}`,
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-extra': 'é' },
    timeoutMs: 10_000,
    retry: { maxAttempts: 5, initialBackoffMs: 1000, maxBackoffMs: 60_000, multiplier: 2.5, jitter: true },
    signingSecret: null,
    maxConcurrency: 100,
    createdAtMs: 1_800_000_000_000,
    updatedAtMs: 1_800_000_000_000,
    ...overrides,
  };
}

export function contractJob(id: string, overrides: Partial<JobRecord> = {}): JobRecord {
  return {
    id,
    task: 'email',
    callback: null,
    payload: new Uint8Array([123, 34, 97, 34, 58, 49, 125, 0, 255]),
    payloadEncoding: 'json',
    schedule: { kind: 'cron', cron: '0 0 9 * * MON-FRI', timezone: 'Europe/Berlin', startAtMs: null },
    endAtMs: null,
    maxRuns: 0,
    misfire: 'fire_once',
    overlap: 'allow',
    metadata: { labels: { team: 'growth' }, n: 1.5, list: [1, 'two', null, false] },
    requestDigest: `digest-${id}`,
    idempotencyKey: null,
    state: 'PENDING',
    nextFireAtMs: 1_800_000_060_000,
    runs: 0,
    shard: 3,
    createdAtMs: 1_800_000_000_000,
    updatedAtMs: 1_800_000_000_001,
    ...overrides,
  };
}

export function contractExecution(jobId: string, scheduledAtMs: number, overrides: Partial<ExecutionRecord> = {}) {
  const e: ExecutionRecord = {
    jobId,
    scheduledAtMs,
    attempt: 1,
    state: 'RUNNING',
    startedAtMs: scheduledAtMs + 3,
    finishedAtMs: null,
    statusCode: null,
    error: null,
    latenessMs: 3,
    nodeId: 'n1',
    retryAtMs: null,
    ...overrides,
  };
  return e;
}

const ids = (jobs: ReadonlyArray<{ id: string }>): string[] => jobs.map((j) => j.id);
const keys = (es: ExecutionRecord[]): string[] => es.map((e) => `${e.jobId}@${e.scheduledAtMs}`);

export function runSchedulerStoreContract(
  name: string,
  makeStore: () => { store: SchedulerStore; cleanup?: () => void },
): void {
  describe(`SchedulerStore contract: ${name}`, () => {
    let cleanups: Array<() => void> = [];
    const open = (): SchedulerStore => {
      const made = makeStore();
      if (made.cleanup) cleanups.push(made.cleanup);
      return made.store;
    };
    afterEach(() => {
      for (const c of cleanups) c();
      cleanups = [];
    });

    it('tasks: put, get, replace, list by name, delete', () => {
      const s = open();
      expect(s.getTask('a')).toBeNull();
      const b = contractTask('b', { signingSecret: 's3cret', headers: {} });
      s.putTask(b);
      s.putTask(contractTask('a'));
      expect(s.getTask('b')).toEqual(b);
      s.putTask({ ...b, url: 'http://127.0.0.1:9/changed', updatedAtMs: 5 });
      expect(s.getTask('b')?.url).toBe('http://127.0.0.1:9/changed');
      expect(s.listTasks().map((t) => t.name)).toEqual(['a', 'b']);
      expect(s.deleteTask('a')).toBe(true);
      expect(s.deleteTask('a')).toBe(false);
      expect(s.getTask('a')).toBeNull();
      expect(s.listTasks().map((t) => t.name)).toEqual(['b']);
    });

    it('calendars: put, get every field, replace, list by name, delete', () => {
      const s = open();
      expect(s.getCalendar('hol')).toBeNull();
      const hol = {
        name: 'hol', timezone: 'Europe/Berlin', dates: ['2027-12-25', '2027-12-26'],
        ranges: [{ from: '2027-12-27', to: '2027-12-31' }], description: 'Christmas', createdAtMs: 1, updatedAtMs: 2,
      };
      s.putCalendar(hol);
      s.putCalendar({ ...hol, name: 'a', description: null, dates: [], ranges: [] });
      expect(s.getCalendar('hol')).toEqual(hol);
      s.putCalendar({ ...hol, dates: ['2028-01-01'], updatedAtMs: 3 });
      expect(s.getCalendar('hol')).toEqual({ ...hol, dates: ['2028-01-01'], updatedAtMs: 3 });
      expect(s.listCalendars().map((c) => c.name)).toEqual(['a', 'hol']);
      expect(s.getCalendar('a')?.description).toBeNull();
      expect(s.deleteCalendar('a')).toBe(true);
      expect(s.deleteCalendar('a')).toBe(false);
      expect(s.listCalendars().map((c) => c.name)).toEqual(['hol']);
    });

    it('jobs: round-trip every field exactly, payload as a Uint8Array', () => {
      const s = open();
      const cron = contractJob('j-cron');
      const once = contractJob('j-once', {
        task: null,
        callback: contractTask('inline'),
        payload: new Uint8Array([]),
        payloadEncoding: 'base64',
        schedule: { kind: 'once', atMs: 1_800_000_000_500 },
        endAtMs: 1_900_000_000_000,
        maxRuns: 7,
        misfire: 'skip',
        overlap: 'buffer_one',
        metadata: null,
        idempotencyKey: 'idem-1',
        state: 'RUNNING',
        nextFireAtMs: null,
        runs: 1,
      });
      const every = contractJob('j-every', { schedule: { kind: 'every', everyMs: 60_000, startAtMs: -1000 } });
      for (const j of [cron, once, every]) s.putJob(j);
      for (const j of [cron, once, every]) {
        const got = s.getJob(j.id)!;
        expect(got).toEqual(j);
        expect(got.payload).toBeInstanceOf(Uint8Array);
        expect(Array.from(got.payload)).toEqual(Array.from(j.payload));
      }
      expect(s.getJob('missing')).toBeNull();
    });

    it('jobs: putJob replaces, and returned records are copies', () => {
      const s = open();
      s.putJob(contractJob('j'));
      s.putJob(contractJob('j', { state: 'PAUSED', runs: 4, nextFireAtMs: 42 }));
      const got = s.getJob('j')!;
      expect(got.state).toBe('PAUSED');
      expect(got.runs).toBe(4);
      got.runs = 99;
      got.payload[0] = 0;
      expect(s.getJob('j')!.runs).toBe(4);
      expect(s.getJob('j')!.payload[0]).toBe(123);
      expect(s.listJobs({ state: null, task: null, limit: 10, afterId: null })).toHaveLength(1);
    });

    it('listJobs: ordered by id, filtered by stored state and task, paged by afterId', () => {
      const s = open();
      s.putJob(contractJob('c', { state: 'PAUSED' }));
      s.putJob(contractJob('a'));
      s.putJob(contractJob('b', { task: 'other' }));
      s.putJob(contractJob('d', { task: null, callback: contractTask('x') }));
      const all = { state: null, task: null, limit: 100, afterId: null };
      expect(ids(s.listJobs(all))).toEqual(['a', 'b', 'c', 'd']);
      expect(ids(s.listJobs({ ...all, limit: 2 }))).toEqual(['a', 'b']);
      expect(ids(s.listJobs({ ...all, afterId: 'b' }))).toEqual(['c', 'd']);
      expect(ids(s.listJobs({ ...all, state: 'PENDING' }))).toEqual(['a', 'b', 'd']);
      expect(ids(s.listJobs({ ...all, task: 'email' }))).toEqual(['a', 'c']);
      expect(ids(s.listJobs({ ...all, state: 'PENDING', task: 'email' }))).toEqual(['a']);
      expect(ids(s.listJobs({ ...all, state: 'CANCELLED' }))).toEqual([]);
    });

    it('listJobs with a search: metadata pairs (AND, scalars only), next fire range [after, before), with state, task, paging', () => {
      const s = open();
      s.putJob(contractJob('a', { metadata: { team: 'growth', tier: 1 }, nextFireAtMs: 100 }));
      s.putJob(contractJob('b', { metadata: { team: 'growth', tier: 2, vip: true }, nextFireAtMs: 200, task: 'other' }));
      s.putJob(contractJob('c', { metadata: { team: 'core' }, nextFireAtMs: 300, state: 'PAUSED' }));
      s.putJob(contractJob('d', { metadata: { team: { nested: 'growth' }, tier: null }, nextFireAtMs: null }));
      s.putJob(contractJob('e', { metadata: null, nextFireAtMs: 150 }));
      const q = (search: Partial<JobSearch>, extra: Partial<JobPageQuery> = {}) =>
        ids(s.listJobs({ state: null, task: null, limit: 100, afterId: null, ...extra, search: { ...noSearch, ...search } }));
      expect(q({ metadata: [['team', 'growth']] })).toEqual(['a', 'b']);
      expect(q({ metadata: [['team', 'growth'], ['tier', '2']] })).toEqual(['b']);
      expect(q({ metadata: [['vip', 'true']] })).toEqual(['b']);
      expect(q({ metadata: [['tier', 'null']] })).toEqual([]);
      expect(q({ metadata: [['team', 'growth']] }, { task: 'email' })).toEqual(['a']);
      expect(q({ metadata: [['team', 'growth']] }, { afterId: 'a' })).toEqual(['b']);
      expect(q({ metadata: [['team', 'growth']] }, { limit: 1 })).toEqual(['a']);
      expect(q({ nextFireAfterMs: 150 })).toEqual(['b', 'c', 'e']);
      expect(q({ nextFireBeforeMs: 200 })).toEqual(['a', 'e']);
      expect(q({ nextFireAfterMs: 150, nextFireBeforeMs: 300 })).toEqual(['b', 'e']);
      expect(q({ nextFireAfterMs: 0 }, { state: 'PAUSED' })).toEqual(['c']);
      expect(q({ metadata: [['team', 'core']], nextFireBeforeMs: 300 })).toEqual([]);
      // A job's pairs follow its metadata: changed, then cleared.
      s.putJob(contractJob('a', { metadata: { team: 'core' }, nextFireAtMs: 100 }));
      expect(q({ metadata: [['team', 'growth']] })).toEqual(['b']);
      expect(q({ metadata: [['team', 'core']] })).toEqual(['a', 'c']);
      s.putJob(contractJob('c', { metadata: null, nextFireAtMs: 300, state: 'PAUSED' }));
      expect(q({ metadata: [['team', 'core']] })).toEqual(['a']);
    });

    it('dueJobs: PENDING only, nextFireAtMs <= until, ordered by (next, id), paged strictly after', () => {
      const s = open();
      s.putJob(contractJob('b', { nextFireAtMs: 100 }));
      s.putJob(contractJob('a', { nextFireAtMs: 100 }));
      s.putJob(contractJob('c', { nextFireAtMs: 50 }));
      s.putJob(contractJob('d', { nextFireAtMs: 200 }));
      s.putJob(contractJob('e', { nextFireAtMs: 10, state: 'PAUSED' }));
      s.putJob(contractJob('f', { nextFireAtMs: null }));
      s.putJob(contractJob('g', { nextFireAtMs: 101 }));
      expect(ids(s.dueJobs(100, 10, null))).toEqual(['c', 'a', 'b']);
      expect(ids(s.dueJobs(100, 2, null))).toEqual(['c', 'a']);
      expect(ids(s.dueJobs(100, 10, { atMs: 100, id: 'a' }))).toEqual(['b']);
      expect(ids(s.dueJobs(1000, 10, { atMs: 50, id: 'c' }))).toEqual(['a', 'b', 'g', 'd']);
      expect(ids(s.dueJobs(49, 10, null))).toEqual([]);
      // Keys only, exactly: the loader needs no more, and reading the records would cost a decode per row.
      expect(s.dueJobs(100, 1, null)).toEqual([{ id: 'c', nextFireAtMs: 50 }]);
    });

    it('countJobsByState has every state; countLiveJobsOfTask ignores final states', () => {
      const s = open();
      const states: JobState[] = ['PENDING', 'PENDING', 'RUNNING', 'PAUSED', 'SUCCEEDED', 'FAILED', 'CANCELLED'];
      states.forEach((state, i) => s.putJob(contractJob(`j${i}`, { state })));
      s.putJob(contractJob('other', { task: 'other' }));
      expect(s.countJobsByState()).toEqual({
        PENDING: 3,
        QUEUED: 0,
        RUNNING: 1,
        SUCCEEDED: 1,
        FAILED: 1,
        PAUSED: 1,
        CANCELLED: 1,
      });
      expect(s.countLiveJobsOfTask('email')).toBe(4);
      expect(s.countLiveJobsOfTask('other')).toBe(1);
      expect(s.countLiveJobsOfTask('none')).toBe(0);
    });

    it('executions: round-trip, replace by (jobId, scheduledAtMs), last, list newest first', () => {
      const s = open();
      const e1 = contractExecution('j', 1000, { state: 'SUCCEEDED', finishedAtMs: 1010, statusCode: 200 });
      const e2 = contractExecution('j', 3000, {
        state: 'QUEUED',
        attempt: 2,
        statusCode: 503,
        error: 'unavailable',
        retryAtMs: 5000,
      });
      const e3 = contractExecution('j', 2000, { state: 'FAILED', error: 'x', finishedAtMs: 2100, statusCode: 404 });
      const other = contractExecution('k', 9000, { nodeId: null, startedAtMs: null, latenessMs: null });
      for (const e of [e1, e2, e3, other]) s.putExecution(e);
      expect(s.getExecution('j', 3000)).toEqual(e2);
      expect(s.getExecution('k', 9000)).toEqual(other);
      expect(s.getExecution('j', 4000)).toBeNull();
      expect(s.lastExecution('j')).toEqual(e2);
      expect(s.lastExecution('none')).toBeNull();
      expect(keys(s.listExecutions('j', 10, null))).toEqual(['j@3000', 'j@2000', 'j@1000']);
      expect(keys(s.listExecutions('j', 2, null))).toEqual(['j@3000', 'j@2000']);
      expect(keys(s.listExecutions('j', 10, 2000))).toEqual(['j@1000']);
      s.putExecution({ ...e2, state: 'SUCCEEDED', attempt: 3, retryAtMs: null, finishedAtMs: 5100 });
      expect(s.getExecution('j', 3000)?.state).toBe('SUCCEEDED');
      expect(s.listExecutions('j', 10, null)).toHaveLength(3);
    });

    it('open executions: per job, and for the shard paged by (jobId, scheduledAtMs)', () => {
      const s = open();
      s.putExecution(contractExecution('b', 20, { state: 'QUEUED', retryAtMs: 30 }));
      s.putExecution(contractExecution('b', 10));
      s.putExecution(contractExecution('b', 5, { state: 'SUCCEEDED' }));
      s.putExecution(contractExecution('a', 99));
      s.putExecution(contractExecution('c', 1, { state: 'CANCELLED' }));
      s.putExecution(contractExecution('c', 2, { state: 'FAILED' }));
      expect(keys(s.openExecutions('b'))).toEqual(['b@10', 'b@20']);
      expect(s.openExecutions('c')).toEqual([]);
      expect(keys(s.allOpenExecutions(10, null))).toEqual(['a@99', 'b@10', 'b@20']);
      expect(keys(s.allOpenExecutions(2, null))).toEqual(['a@99', 'b@10']);
      expect(keys(s.allOpenExecutions(10, { jobId: 'b', scheduledAtMs: 10 }))).toEqual(['b@20']);
      expect(keys(s.allOpenExecutions(10, { jobId: 'a', scheduledAtMs: 1000 }))).toEqual(['b@10', 'b@20']);
      s.putExecution(contractExecution('b', 10, { state: 'SUCCEEDED' }));
      expect(keys(s.allOpenExecutions(10, null))).toEqual(['a@99', 'b@20']);
    });

    it('executions keep their attempts, oldest first', () => {
      const s = open();
      const attempts = [
        { attempt: 1, startedAtMs: 13, finishedAtMs: 20, statusCode: 503, error: 'HTTP 503', nodeId: 'n1', fencingToken: '3.2' },
        { attempt: 2, startedAtMs: null, finishedAtMs: null, statusCode: null, error: null, nodeId: null, fencingToken: null },
      ];
      s.putExecution(contractExecution('a', 10, { attempt: 2, attempts }));
      expect(s.getExecution('a', 10)!.attempts).toEqual(attempts);
      s.putExecution(contractExecution('a', 11));
      expect(s.getExecution('a', 11)!.attempts).toBeUndefined();
    });

    it('retention: finished jobs expire by the retention their task had at their finish, then by the given one', () => {
      const s = open();
      s.putTask(contractTask('email'));
      s.putTask(contractTask('short', { retentionMs: 5_000 }));
      const done = (id: string, task: string, atMs: number, state: JobState = 'SUCCEEDED') =>
        s.putJob(contractJob(id, { task, state, nextFireAtMs: null, updatedAtMs: atMs }));
      done('x1', 'email', 1_000);
      done('x2', 'email', 2_000, 'FAILED');
      done('y1', 'short', 1_500, 'CANCELLED');
      s.putJob(contractJob('live', { updatedAtMs: 0 }));
      // The task's retention changing later does not move the expiry of a job already finished.
      s.putTask(contractTask('short', { retentionMs: 999_999 }));
      expect(s.expiredJobs(6_499, 10_000, 10)).toEqual([]);
      expect(s.expiredJobs(6_500, 10_000, 10)).toEqual(['y1']);
      expect(s.expiredJobs(12_000, 10_000, 10)).toEqual(['y1', 'x1', 'x2']);
      expect(s.expiredJobs(12_000, 10_000, 2)).toEqual(['y1', 'x1']);
      expect(s.expiredJobs(12_000, null, 10)).toEqual(['y1']);
      // A job that runs again (replay) is live: it leaves the list.
      s.putJob(contractJob('x1', { state: 'RUNNING', nextFireAtMs: null, updatedAtMs: 1_000 }));
      expect(s.expiredJobs(12_000, 10_000, 10)).toEqual(['y1', 'x2']);
    });

    it('retention: deleteJob takes executions oldest first within its bound, then the job', () => {
      const s = open();
      s.putJob(contractJob('a', { state: 'SUCCEEDED', nextFireAtMs: null }));
      for (const at of [1, 2, 3]) s.putExecution(contractExecution('a', at, { state: 'SUCCEEDED' }));
      s.putExecution(contractExecution('b', 1, { state: 'SUCCEEDED' }));
      expect(s.deleteJob('a', 2)).toEqual({ executions: 2, deleted: false });
      expect(keys(s.listExecutions('a', 10, null))).toEqual(['a@3']);
      expect(s.getJob('a')).not.toBeNull();
      expect(s.deleteJob('a', 2)).toEqual({ executions: 1, deleted: true });
      expect(s.getJob('a')).toBeNull();
      expect(s.expiredJobs(Number.MAX_SAFE_INTEGER, 0, 10)).toEqual([]);
      expect(keys(s.listExecutions('b', 10, null))).toEqual(['b@1']);
    });

    it('retention: trimExecutions keeps the newest, never an open one, within its bound', () => {
      const s = open();
      for (const at of [1, 2, 3, 4, 5]) s.putExecution(contractExecution('a', at, { state: at === 2 ? 'QUEUED' : 'SUCCEEDED' }));
      expect(s.trimExecutions('a', 5, 10)).toBe(0);
      expect(s.trimExecutions('a', 2, 1)).toBe(1);
      expect(keys(s.listExecutions('a', 10, null))).toEqual(['a@5', 'a@4', 'a@3', 'a@2']);
      expect(s.trimExecutions('a', 2, 10)).toBe(1);
      expect(keys(s.listExecutions('a', 10, null))).toEqual(['a@5', 'a@4', 'a@2']);
    });
  });
}
