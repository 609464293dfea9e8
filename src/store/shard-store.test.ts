import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ExecutionRecord, JobRecord, TaskRecord } from '../scheduler/types.js';
import { openNodeDb, type Db } from './db.js';
import { SqliteShardStore } from './shard-store.js';
import { pack } from './rows.js';
import { encodeShardImage, restoreShardImage } from './shard-snapshot.js';
import { decodeCommand, encodeCommand } from '../scheduler/codec.js';
import type { Command } from '../scheduler/commands.js';
import { apply } from '../scheduler/machine.js';
import { MemoryStore } from '../scheduler/memory-store.js';
import type { SchedulerStore } from '../scheduler/store.js';
import type { JobSpec } from '../scheduler/types.js';

const task = (name: string): TaskRecord => ({
  name,
  url: 'http://127.0.0.1:9/hook',
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  timeoutMs: 1000,
  retry: { maxAttempts: 3, initialBackoffMs: 10, maxBackoffMs: 100, multiplier: 1.5, jitter: false },
  signingSecret: null,
  maxConcurrency: 10,
  createdAtMs: 1,
  updatedAtMs: 2,
});

const job = (id: string, over: Partial<JobRecord> = {}): JobRecord => ({
  id,
  task: 'email',
  callback: null,
  payload: new Uint8Array([123, 125]),
  payloadEncoding: 'json',
  schedule: { kind: 'every', everyMs: 1000, startAtMs: 1_700_000_000_000 },
  endAtMs: null,
  maxRuns: 0,
  misfire: 'fire_once',
  overlap: 'allow',
  metadata: { a: 1 },
  requestDigest: 'd',
  idempotencyKey: null,
  state: 'PENDING',
  nextFireAtMs: 1_700_000_000_000,
  runs: 0,
  shard: 1,
  createdAtMs: 5,
  updatedAtMs: 6,
  ...over,
});

const exec = (jobId: string, scheduledAtMs: number, state: ExecutionRecord['state']): ExecutionRecord => ({
  jobId,
  scheduledAtMs,
  attempt: 1,
  state,
  startedAtMs: scheduledAtMs + 1,
  finishedAtMs: null,
  statusCode: null,
  error: null,
  latenessMs: 1,
  nodeId: 'n1',
  retryAtMs: null,
});

describe('SqliteShardStore (beyond the contract)', () => {
  let dir: string;
  let db: Db;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'punctual-store-'));
    db = openNodeDb(dir, 'batch');
  });
  afterEach(() => {
    if (db.open) db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('keeps both signing secrets through the store, a snapshot image and the replicated command codec', () => {
    const s = new SqliteShardStore(db, 1);
    const rotating: TaskRecord = { ...task('email'), signingSecret: 'current-secret-16b', signingSecretNext: 'next-secret-16byte' };
    s.putTask(rotating);
    const inline = job('a', { task: null, callback: { ...rotating, name: undefined } as unknown as JobRecord['callback'] });
    s.putJob(inline);
    expect(s.getTask('email')).toEqual(rotating);
    expect(s.getJob('a')!.callback).toMatchObject({ signingSecret: 'current-secret-16b', signingSecretNext: 'next-secret-16byte' });

    const other = openNodeDb(join(dir, 'copy'), 'off');
    try {
      other.transaction(() => restoreShardImage(other, 1, encodeShardImage(db, 1)))();
      const copy = new SqliteShardStore(other, 1);
      expect(copy.getTask('email')).toEqual(rotating);
      expect(copy.getJob('a')!.callback).toMatchObject({ signingSecretNext: 'next-secret-16byte' });
    } finally {
      other.close();
    }

    const put = decodeCommand(encodeCommand({ type: 'put_task', nowMs: 1, task: rotating }));
    expect(put).toEqual({ type: 'put_task', nowMs: 1, task: rotating });
    const { state: _s, nextFireAtMs: _n, runs: _r, shard: _sh, createdAtMs: _c, updatedAtMs: _u, ...spec } = inline;
    const created = decodeCommand(encodeCommand({ type: 'create_jobs', nowMs: 1, shard: 1, jobs: [spec] } as Command));
    expect(created.type === 'create_jobs' && created.jobs[0]!.callback).toMatchObject({ signingSecretNext: 'next-secret-16byte' });
  });

  it('a task row written before signing_secret_next existed reads back without it (no migration needed)', () => {
    const s = new SqliteShardStore(db, 1);
    // The blob of a task as every earlier version wrote it: no signingSecretNext key at all.
    const { name: _name, ...old } = { ...task('legacy'), signingSecret: 'old-short' };
    db.prepare('INSERT INTO tasks (shard, name, data) VALUES (?, ?, ?)').run(1, 'legacy', pack(old));
    const got = s.getTask('legacy')!;
    expect(got.signingSecret).toBe('old-short');
    expect(got.signingSecretNext ?? null).toBeNull();
  });

  it('round-trips records exactly, payload as a plain Uint8Array', () => {
    const s = new SqliteShardStore(db, 1);
    const j = job('a');
    s.putJob(j);
    s.putTask(task('email'));
    s.putExecution(exec('a', 10, 'RUNNING'));
    const got = s.getJob('a')!;
    expect(got).toEqual(j);
    expect(Object.getPrototypeOf(got.payload)).toBe(Uint8Array.prototype);
    expect(s.getTask('email')).toEqual(task('email'));
    expect(s.getExecution('a', 10)).toEqual(exec('a', 10, 'RUNNING'));
  });

  it('keeps shards apart in one file', () => {
    const a = new SqliteShardStore(db, 0);
    const b = new SqliteShardStore(db, 1);
    a.putJob(job('x', { shard: 0 }));
    expect(b.getJob('x')).toBeNull();
    expect(a.countJobsByState().PENDING).toBe(1);
    expect(b.countJobsByState().PENDING).toBe(0);
  });

  it('keeps every table across close and reopen', () => {
    const s = new SqliteShardStore(db, 1);
    s.putTask(task('email'));
    s.putJob(job('a'));
    s.putJob(job('b', { state: 'CANCELLED', nextFireAtMs: null }));
    s.putExecution(exec('a', 10, 'QUEUED'));
    s.putExecution(exec('a', 20, 'SUCCEEDED'));
    db.close();
    db = openNodeDb(dir, 'batch');
    const again = new SqliteShardStore(db, 1);
    expect(again.getTask('email')).toEqual(task('email'));
    expect(again.getJob('a')).toEqual(job('a'));
    expect(again.getJob('b')?.state).toBe('CANCELLED');
    expect(again.dueJobs(Number.MAX_SAFE_INTEGER, 10, null).map((j) => j.id)).toEqual(['a']);
    expect(again.allOpenExecutions(10, null).map((e) => e.scheduledAtMs)).toEqual([10]);
    expect(again.lastExecution('a')?.scheduledAtMs).toBe(20);
    expect(again.countLiveJobsOfTask('email')).toBe(1);
  });

  it('pages due jobs by (nextFireAtMs, id) through the loader index', () => {
    const s = new SqliteShardStore(db, 1);
    for (const [id, at] of [['c', 5], ['a', 5], ['b', 3], ['d', 9], ['e', 20]] as const) {
      s.putJob(job(id, { nextFireAtMs: at }));
    }
    s.putJob(job('p', { nextFireAtMs: 1, state: 'PAUSED' }));
    const first = s.dueJobs(10, 2, null);
    expect(first.map((j) => j.id)).toEqual(['b', 'a']);
    const second = s.dueJobs(10, 10, { atMs: 5, id: 'a' });
    expect(second.map((j) => j.id)).toEqual(['c', 'd']);
    const plan = db
      .prepare("EXPLAIN QUERY PLAN SELECT id, next_fire_at FROM jobs WHERE shard = 1 AND state = 'PENDING' AND next_fire_at <= 10 ORDER BY next_fire_at, id")
      .all() as Array<{ detail: string }>;
    // The loader's page is read from the index alone: no row of the table is visited.
    expect(plan.map((p) => p.detail).join(' ')).toMatch(/COVERING INDEX jobs_due/);
  });
  it('serves one frozen task object while its row is unchanged, and the new row after a write', () => {
    const s = new SqliteShardStore(db, 1);
    s.putTask(task('email'));
    const first = s.getTask('email')!;
    expect(s.getTask('email')).toBe(first);
    expect(Object.isFrozen(first)).toBe(true);
    s.putTask({ ...task('email'), url: 'http://127.0.0.1:9/changed' });
    const second = s.getTask('email')!;
    expect(second).not.toBe(first);
    expect(second.url).toBe('http://127.0.0.1:9/changed');
    expect(first.url).toBe('http://127.0.0.1:9/hook');
    s.deleteTask('email');
    expect(s.getTask('email')).toBeNull();
  });

  it('never serves a task write that was rolled back', () => {
    const s = new SqliteShardStore(db, 1);
    s.putTask(task('email'));
    expect(s.getTask('email')?.url).toBe('http://127.0.0.1:9/hook');
    expect(() =>
      s.transaction(() => {
        s.putTask({ ...task('email'), url: 'http://127.0.0.1:9/rolled-back' });
        expect(s.getTask('email')?.url).toBe('http://127.0.0.1:9/rolled-back');
        throw new Error('abort');
      }),
    ).toThrow('abort');
    expect(s.getTask('email')?.url).toBe('http://127.0.0.1:9/hook');
  });

  it('never serves a task write whose savepoint was rolled back inside a transaction that committed', () => {
    const s = new SqliteShardStore(db, 1);
    s.putTask(task('email'));
    expect(s.getTask('email')?.url).toBe('http://127.0.0.1:9/hook');
    s.transaction(() => {
      // A nested transaction is a savepoint: the way the applier quarantines a command that throws.
      expect(() =>
        s.transaction(() => {
          s.putTask({ ...task('email'), url: 'http://127.0.0.1:9/quarantined' });
          expect(s.getTask('email')?.url).toBe('http://127.0.0.1:9/quarantined');
          throw new Error('quarantine');
        }),
      ).toThrow('quarantine');
      expect(s.getTask('email')?.url).toBe('http://127.0.0.1:9/hook');
    });
    expect(s.getTask('email')?.url).toBe('http://127.0.0.1:9/hook');
  });

  it('serves the restored task after a snapshot image replaced the rows under a task it had served', () => {
    const source = new SqliteShardStore(db, 2);
    source.putTask({ ...task('email'), url: 'http://127.0.0.1:9/from-snapshot' });
    const image = encodeShardImage(db, 2);
    const s = new SqliteShardStore(db, 1);
    s.putTask(task('email'));
    const served = s.getTask('email')!;
    expect(s.getTask('email')).toBe(served);
    db.transaction(() => restoreShardImage(db, 1, image))();
    expect(s.getTask('email')?.url).toBe('http://127.0.0.1:9/from-snapshot');
    db.transaction(() => restoreShardImage(db, 1, new Uint8Array(0)))();
    expect(s.getTask('email')).toBeNull();
  });

  it('updates a job row in place: its index entries follow the new state and time', () => {
    const s = new SqliteShardStore(db, 1);
    s.putJob(job('a', { nextFireAtMs: 5 }));
    s.putJob(job('a', { nextFireAtMs: 50 }));
    expect(s.dueJobs(10, 10, null)).toEqual([]);
    expect(s.dueJobs(60, 10, null).map((j) => j.nextFireAtMs)).toEqual([50]);
    s.putJob(job('a', { state: 'SUCCEEDED', nextFireAtMs: null }));
    expect(s.dueJobs(60, 10, null)).toEqual([]);
    expect(s.countLiveJobsOfTask('email')).toBe(0);
    expect(s.countJobsByState().SUCCEEDED).toBe(1);
    s.putExecution(exec('a', 10, 'RUNNING'));
    s.putExecution(exec('a', 10, 'SUCCEEDED'));
    expect(s.openExecutions('a')).toEqual([]);
    expect(s.getExecution('a', 10)?.state).toBe('SUCCEEDED');
  });
});

describe('SqliteShardStore under apply (the job row held within a command)', () => {
  let dir: string;
  let db: Db;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'punctual-held-'));
    db = openNodeDb(dir, 'batch');
  });
  afterEach(() => {
    if (db.open) db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const t0 = 1_800_000_000_000;
  const spec = (id: string, over: Partial<JobSpec> = {}): JobSpec => ({
    id,
    task: 'email',
    callback: null,
    payload: new Uint8Array([123, 125]),
    payloadEncoding: 'json',
    schedule: { kind: 'once', atMs: t0 },
    endAtMs: null,
    maxRuns: 0,
    misfire: 'fire_once',
    overlap: 'allow',
    metadata: null,
    requestDigest: `digest-${id}`,
    idempotencyKey: null,
    ...over,
  });
  const fired = (jobId: string, at: number, attempt = 1): Command => ({
    type: 'fired',
    nowMs: at + 1,
    nodeId: 'n1',
    items: [{ jobId, scheduledAtMs: at, attempt, startedAtMs: at + 1 }],
  });
  const outcome = (jobId: string, at: number, result: 'succeeded' | 'failed' | 'retry', attempt = 1): Command => ({
    type: 'outcomes',
    nowMs: at + 5,
    items: [{ jobId, scheduledAtMs: at, attempt, result, statusCode: result === 'succeeded' ? 200 : 503, error: null, finishedAtMs: at + 5, retryAtMs: result === 'retry' ? at + 50 : null }],
  });

  /** Every command of a job's life: metadata indexed, changed and dropped, retries, pause, a run, a cancel, retention. */
  const script: Command[] = [
    { type: 'put_task', nowMs: 1, task: { ...task('email'), retentionMs: 10 } as TaskRecord },
    {
      type: 'create_jobs',
      nowMs: t0 - 1000,
      shard: 1,
      jobs: [
        spec('a'),
        spec('b', { metadata: { team: 'x', n: 1 } }),
        spec('c', { schedule: { kind: 'every', everyMs: 100, startAtMs: t0 }, metadata: { team: 'y' } }),
        spec('a'),
        spec('d', { task: 'missing' }),
      ],
    },
    fired('a', t0),
    fired('b', t0),
    fired('c', t0),
    outcome('a', t0, 'succeeded'),
    outcome('b', t0, 'retry'),
    fired('b', t0, 2),
    outcome('b', t0, 'failed', 2),
    outcome('c', t0, 'succeeded'),
    { type: 'patch_job', nowMs: t0 + 20, id: 'c', patch: { metadata: { team: 'z' } } },
    { type: 'pause_job', nowMs: t0 + 30, id: 'c' },
    { type: 'resume_job', nowMs: t0 + 40, id: 'c' },
    { type: 'run_job', nowMs: t0 + 45, id: 'a', runKey: 'k1' },
    { type: 'patch_job', nowMs: t0 + 50, id: 'c', patch: { metadata: null } },
    { type: 'cancel_job', nowMs: t0 + 60, id: 'c' },
    { type: 'replay_jobs', nowMs: t0 + 70, ids: ['b'] },
    { type: 'retention', nowMs: t0 + 10_000, retentionMs: 1, jobsMax: 10, trim: [] },
  ];

  function everything(s: SchedulerStore): unknown {
    const jobs = s.listJobs({ state: null, task: null, limit: 100, afterId: null });
    const search = (k: string, v: string): string[] =>
      s.listJobs({ state: null, task: null, limit: 100, afterId: null, search: { metadata: [[k, v]], nextFireAfterMs: null, nextFireBeforeMs: null } }).map((j) => j.id);
    return {
      jobs,
      executions: ['a', 'b', 'c', 'd'].map((id) => s.listExecutions(id, 100, null)),
      open: s.allOpenExecutions(100, null),
      counts: s.countJobsByState(),
      due: s.dueJobs(t0 + 100_000, 100, null),
      live: s.countLiveJobsOfTask('email'),
      search: [search('team', 'x'), search('team', 'y'), search('team', 'z'), search('n', '1')],
      deadLetters: s instanceof SqliteShardStore ? s.deadLetters({ task: null, errorClass: null, sinceMs: null, untilMs: null }, 10, null) : null,
    };
  }

  it('leaves the same state, results and effects as the in-memory store, command after command', () => {
    const sqlite = new SqliteShardStore(db, 1);
    const memory = new MemoryStore();
    for (const c of script) {
      const got = db.transaction(() => apply(sqlite, c))();
      expect(got).toEqual(apply(memory, c));
      const { deadLetters: _d, ...state } = everything(sqlite) as Record<string, unknown>;
      const { deadLetters: _m, ...want } = everything(memory) as Record<string, unknown>;
      expect(state).toEqual(want);
    }
    // Written through the held rows as they would be without them (lifecycle columns: dead letters, retention).
    const fresh = new SqliteShardStore(db, 1);
    expect(everything(fresh)).toEqual(everything(sqlite));
  });

  it('keeps nothing of a command whose transaction rolled back: a later job gets the rolled-back sequence, with its own executions', () => {
    const s = new SqliteShardStore(db, 1);
    db.transaction(() => apply(s, script[0]!))();
    expect(() =>
      db.transaction(() => {
        apply(s, { type: 'create_jobs', nowMs: t0 - 1000, shard: 1, jobs: [spec('gone')] });
        apply(s, fired('gone', t0));
        throw new Error('disk full');
      })(),
    ).toThrow('disk full');
    db.transaction(() => apply(s, { type: 'create_jobs', nowMs: t0 - 1000, shard: 1, jobs: [spec('next')] }))();
    const firedGone = db.transaction(() => apply(s, fired('gone', t0)))();
    expect(firedGone.result).toEqual({ type: 'fired', applied: 0, ignored: 1 });
    db.transaction(() => apply(s, fired('next', t0)))();
    expect(s.getJob('gone')).toBeNull();
    expect(s.listExecutions('gone', 10, null)).toEqual([]);
    expect(s.listExecutions('next', 10, null).map((e) => [e.jobId, e.state])).toEqual([['next', 'RUNNING']]);
    expect(s.countJobsByState().RUNNING).toBe(1);
  });

  it('finishes a job with the retention its task has in that command, after a put_task changed it', () => {
    const s = new SqliteShardStore(db, 1);
    const put = (retentionMs: number): Command => ({ type: 'put_task', nowMs: 1, task: { ...task('email'), retentionMs } as TaskRecord });
    db.transaction(() => apply(s, put(10)))();
    db.transaction(() => apply(s, { type: 'create_jobs', nowMs: t0 - 1000, shard: 1, jobs: [spec('x'), spec('y')] }))();
    db.transaction(() => apply(s, { type: 'fired', nowMs: t0 + 1, nodeId: 'n1', items: ['x', 'y'].map((jobId) => ({ jobId, scheduledAtMs: t0, attempt: 1, startedAtMs: t0 + 1 })) }))();
    db.transaction(() => apply(s, outcome('x', t0, 'succeeded')))();
    db.transaction(() => apply(s, put(100_000)))();
    db.transaction(() => apply(s, outcome('y', t0, 'succeeded')))();
    expect(s.expiredJobs(t0 + 1000, null, 10)).toEqual(['x']);
    expect(s.expiredJobs(t0 + 200_000, null, 10)).toEqual(['x', 'y']);
  });

  it('compares a command\'s write with the row as stored, even when another store of the file wrote it since the last command', () => {
    const a = new SqliteShardStore(db, 1);
    const b = new SqliteShardStore(db, 1);
    db.transaction(() => apply(a, script[0]!))();
    db.transaction(() => apply(a, { type: 'create_jobs', nowMs: t0 - 1000, shard: 1, jobs: [spec('j', { metadata: { team: 'x' } })] }))();
    db.transaction(() => apply(b, fired('j', t0)))();
    db.transaction(() => apply(b, { type: 'patch_job', nowMs: t0 + 2, id: 'j', patch: { metadata: null } }))();
    db.transaction(() => apply(a, outcome('j', t0, 'succeeded')))();
    expect(a.countJobsByState()).toMatchObject({ PENDING: 0, RUNNING: 0, SUCCEEDED: 1 });
    expect(a.dueJobs(t0 + 100_000, 10, null)).toEqual([]);
    expect(a.countLiveJobsOfTask('email')).toBe(0);
    const byTeam = a.listJobs({ state: null, task: null, limit: 10, afterId: null, search: { metadata: [['team', 'x']], nextFireAfterMs: null, nextFireBeforeMs: null } });
    expect(byTeam).toEqual([]);
  });
});
