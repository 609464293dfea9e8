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
