import { createHash } from 'node:crypto';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ExecutionRecord, JobRecord, JobState, TaskRecord } from '../scheduler/types.js';
import { dbFilePath, getNodeMeta, openNodeDb, schemaVersion, type Db } from './db.js';
import { migrateToSchema3 } from './job-keys.js';
import { SqliteShardStore } from './shard-store.js';
import { encodeShardImage, restoreShardImage } from './shard-snapshot.js';
import { StateBatch } from './state-batch.js';
import { answers } from './testdata/schema2-fixture.mjs';

const fixture = (name: string): string => fileURLToPath(new URL(`./testdata/${name}`, import.meta.url));
/** What the schema-2 code answered about schema2.db, by shard, and the SHA-256 of its shard images. */
const expected = JSON.parse(readFileSync(fixture('schema2-answers.json'), 'utf8')) as Record<string, Record<string, unknown>>;
const sha256 = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('hex');

const task = (name: string): TaskRecord => ({
  name,
  url: 'http://127.0.0.1:9/hook',
  method: 'POST',
  headers: {},
  timeoutMs: 1000,
  retry: { maxAttempts: 3, initialBackoffMs: 10, maxBackoffMs: 100, multiplier: 2, jitter: false },
  signingSecret: null,
  maxConcurrency: 10,
  createdAtMs: 1,
  updatedAtMs: 2,
});

const job = (id: string, shard: number, state: JobState, over: Partial<JobRecord> = {}): JobRecord => ({
  id,
  task: 'email',
  callback: null,
  payload: new Uint8Array([1]),
  payloadEncoding: 'base64',
  schedule: { kind: 'once', atMs: 1_700_000_000_000 },
  endAtMs: null,
  maxRuns: 0,
  misfire: 'fire_once',
  overlap: 'allow',
  metadata: null,
  requestDigest: 'd',
  idempotencyKey: null,
  state,
  nextFireAtMs: state === 'PENDING' || state === 'PAUSED' ? 1_700_000_000_000 : null,
  runs: 0,
  shard,
  createdAtMs: 5,
  updatedAtMs: 6,
  ...over,
});

const exec = (jobId: string, scheduledAtMs: number, state: ExecutionRecord['state']): ExecutionRecord => ({
  jobId,
  scheduledAtMs,
  attempt: 1,
  state,
  startedAtMs: null,
  finishedAtMs: null,
  statusCode: state === 'FAILED' ? 503 : null,
  error: state === 'FAILED' ? 'HTTP 503' : null,
  latenessMs: null,
  nodeId: null,
  retryAtMs: null,
});

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-keys-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** The committed schema-2 file, copied as the state file of a data directory (the test never writes the original). */
function schema2DataDir(): string {
  copyFileSync(fixture('schema2.db'), dbFilePath(dir));
  return dir;
}

function expectSameAnswers(db: Db): void {
  for (const shard of [0, 1]) {
    expect(answers(new SqliteShardStore(db, shard))).toEqual(expected[shard]);
    // The image a node of the old code would send: byte for byte, so both versions exchange snapshots.
    expect(sha256(encodeShardImage(db, shard))).toBe(expected.imageSha256![shard]);
  }
}

const columnsOf = (db: Db, table: string): string[] =>
  (db.prepare(`PRAGMA table_info(${table})`).all() as Array<{ name: string }>).map((c) => c.name);

describe('schema 3: the migration of a schema-2 file', () => {
  it('keeps every answer the schema-2 code gave (jobs, states, tasks, due, counts, executions, dead letters, retention) and the shard images', () => {
    expect(statSync(fixture('schema2.db')).size + statSync(fixture('schema2-answers.json')).size).toBeLessThan(200_000);
    const db = openNodeDb(schema2DataDir(), 'off');
    try {
      expect(getNodeMeta(db, 'schema_version')).toBe(String(schemaVersion));
      expect(columnsOf(db, 'jobs')[0]).toBe('job_seq');
      expect(columnsOf(db, 'executions').slice(0, 2)).toEqual(['job_seq', 'scheduled_at']);
      expect(db.prepare('PRAGMA integrity_check').pluck().all()).toEqual(['ok']);
      expectSameAnswers(db);
      // The fixture holds executions of jobs with no row (the contract allows them): kept under job_keys.
      expect(db.prepare('SELECT count(*) FROM job_keys').pluck().get()).toBe(6);
    } finally {
      db.close();
    }
    // Once: the next open finds schema 3 and leaves the file as it is.
    const again = openNodeDb(dir, 'off');
    expectSameAnswers(again);
    again.close();
  });

  it('a migration that dies before its commit leaves the schema-2 file, which the next open migrates', () => {
    const path = dbFilePath(schema2DataDir());
    const raw = new Database(path);
    // The version is the migration's last write: failing there, every copy, drop and rename before it is undone.
    raw.exec(`CREATE TEMP TRIGGER die BEFORE UPDATE ON main.node_meta BEGIN SELECT RAISE(ABORT, 'died before the commit'); END`);
    expect(() => migrateToSchema3(raw)).toThrow(/died before the commit/);
    raw.close();
    const check = new Database(path, { readonly: true });
    expect(check.prepare("SELECT value FROM node_meta WHERE key = 'schema_version'").pluck().get()).toBe('2');
    expect(columnsOf(check, 'jobs')).not.toContain('job_seq');
    expect(check.prepare("SELECT name FROM sqlite_schema WHERE name LIKE '%v3%' OR name LIKE 'job_keys%' OR name LIKE 'job_counts%'").all()).toEqual([]);
    check.close();
    const db = openNodeDb(dir, 'off');
    expect(getNodeMeta(db, 'schema_version')).toBe('3');
    expectSameAnswers(db);
    db.close();
  });
});

describe('schema 3: query plans', () => {
  let db: Db;
  let trace: string[];
  beforeEach(() => {
    openNodeDb(dir, 'off').close();
    trace = [];
    // The expanded SQL of every statement the store runs (values inlined), to explain exactly what ran.
    db = new Database(dbFilePath(dir), { verbose: (sql) => trace.push(String(sql)) });
    for (const shard of [0, 1, 2]) {
      const s = new SqliteShardStore(db, shard);
      s.putTask(task('email'));
      db.transaction(() => {
        for (let i = 0; i < 300; i++) {
          const id = `j${shard}-${i}`;
          const state = (['PENDING', 'SUCCEEDED', 'FAILED', 'PAUSED'] as const)[i % 4]!;
          s.putJob(job(id, shard, state, { nextFireAtMs: state === 'PENDING' ? 1_700_000_000_000 + i * 1000 : null, updatedAtMs: 1_000 + i }));
          s.putExecution(exec(id, 1_000 + i, i % 10 === 0 ? 'RUNNING' : state === 'FAILED' ? 'FAILED' : 'SUCCEEDED'));
        }
      })();
    }
    db.exec('ANALYZE');
  });
  afterEach(() => db.close());

  /** Every plan step of the statements `run` executed (transaction control and trigger markers left out). */
  function plansOf(run: (s: SqliteShardStore) => void): string[] {
    const s = new SqliteShardStore(db, 1);
    trace.length = 0;
    run(s);
    return trace
      .filter((sql) => !/^\s*(--|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE)/i.test(sql))
      .flatMap((sql) => (db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all() as Array<{ detail: string }>).map((r) => r.detail));
  }

  /** Partial indexes (a few rows each: the pending, the finished, the failed, the open executions) may be scanned. */
  function fullScans(plans: string[]): string[] {
    const partial = new Set(db.prepare("SELECT name FROM sqlite_schema WHERE type = 'index' AND sql LIKE '% WHERE %'").pluck().all() as string[]);
    return plans.filter((p) => {
      const m = /^SCAN (\w+)(?: USING (?:COVERING )?INDEX (\w+))?/.exec(p);
      return m !== null && ['jobs', 'executions'].includes(m[1]!) && (m[2] === undefined || !partial.has(m[2]));
    });
  }

  const hot: Array<[string, (s: SqliteShardStore) => void, RegExp]> = [
    ['find a job by id', (s) => s.getJob('j1-7'), /SEARCH jobs USING INDEX jobs_id \(id=\? AND shard=\?\)/],
    ['the loader: due jobs', (s) => s.dueJobs(1_700_000_100_000, 50, null), /SEARCH jobs USING COVERING INDEX jobs_due/],
    ['the loader: the next page', (s) => s.dueJobs(1_700_000_100_000, 50, { atMs: 1_700_000_004_000, id: 'j1-4' }), /SEARCH jobs USING COVERING INDEX jobs_due/],
    ['due by second', (s) => s.addDueBySecond(1_700_000_000_000, new Array(60).fill(0)), /SEARCH jobs USING COVERING INDEX jobs_due/],
    ['jobs of a task', (s) => s.listJobs({ state: null, task: 'email', afterId: 'j1-1', limit: 20 }), /SEARCH jobs USING INDEX jobs_task \(task=\? AND id>\?\)/],
    ['jobs in a rare state', (s) => s.listJobs({ state: 'PAUSED', task: null, afterId: 'j1-1', limit: 20 }), /SEARCH jobs USING INDEX jobs_state_rare \(state=\? AND id>\?\)/],
    ['jobs of a task in a rare state', (s) => s.listJobs({ state: 'FAILED', task: 'email', afterId: null, limit: 20 }), /SEARCH jobs USING INDEX jobs_state_rare \(state=\? AND id>\?\)/],
    ['jobs in a common state', (s) => s.listJobs({ state: 'SUCCEEDED', task: null, afterId: null, limit: 20 }), /SEARCH jobs USING INDEX jobs_id \(id>\?\)/],
    ['live jobs of a task', (s) => s.countLiveJobsOfTask('email'), /SEARCH jobs USING (COVERING )?INDEX jobs_live \(task=\? AND shard=\?\)/],
    ['open executions of a job', (s) => s.openExecutions('j1-10'), /SEARCH executions USING INDEX executions_open \(job_seq=\?\)/],
    ['every open execution', (s) => s.allOpenExecutions(20, null), /executions_open/],
    ['a job\'s executions', (s) => s.listExecutions('j1-10', 10, null), /SEARCH executions USING PRIMARY KEY \(job_seq=\?\)/],
    ['counts by state', (s) => s.countJobsByState(), /SEARCH job_counts USING PRIMARY KEY \(shard=\?\)/],
    ['expired jobs', (s) => s.expiredJobs(10_000, 3_000, 100), /SEARCH jobs USING INDEX jobs_expiry \(/],
    ['dead letters', (s) => s.deadLetters({ task: null, errorClass: null, sinceMs: null, untilMs: null }, 20, null), /jobs_dead\b/],
    ['dead letters of a task', (s) => s.deadLetters({ task: 'email', errorClass: null, sinceMs: null, untilMs: null }, 20, null), /SEARCH jobs USING (COVERING )?INDEX jobs_dead_class \(task=\?/],
    ['dead-letter count', (s) => s.countDeadLetters({ task: null, errorClass: null, sinceMs: 1_100, untilMs: null }), /jobs_dead/],
    ['a job written (insert and update)', (s) => s.putJob(job('j1-8', 1, 'SUCCEEDED', { updatedAtMs: 9_000 })), /SEARCH jobs USING INTEGER PRIMARY KEY \(rowid=\?\)/],
    ['an execution written', (s) => s.putExecution(exec('j1-9', 5_000, 'RUNNING')), /SEARCH jobs USING (COVERING )?INDEX jobs_id/],
    ['a job deleted with its executions', (s) => s.deleteJob('j1-13', 100), /SEARCH executions USING PRIMARY KEY \(job_seq=\?\)/],
  ];
  for (const [name, run, uses] of hot) {
    it(`${name}: searches an index, no full scan of jobs or executions`, () => {
      const plans = plansOf(run);
      expect(plans.join('\n')).toMatch(uses);
      expect(fullScans(plans)).toEqual([]);
    });
  }

  it('a state change of a job rewrites no index entry of the columns it keeps (the update names only the changed ones)', () => {
    const s = new SqliteShardStore(db, 1);
    trace.length = 0;
    s.putJob(job('j1-0', 1, 'RUNNING', { nextFireAtMs: null }));
    const update = trace.find((sql) => sql.startsWith('UPDATE jobs'))!;
    expect(update).toMatch(/SET data = .*, state = .*, next_fire_at = NULL WHERE job_seq = /);
    expect(update).not.toMatch(/task =|finished_at =|retain_ms =|error_class =/);
  });
});

type Op =
  | { kind: 'put'; shard: number; n: number; state: JobState }
  | { kind: 'delete'; shard: number; n: number }
  | { kind: 'drop'; shard: number }
  | { kind: 'restore'; shard: number }
  /** Writes within one command (commandStarted .. commandEnded), in a savepoint that commits or rolls back. */
  | { kind: 'command'; shard: number; writes: Array<{ n: number; state: JobState | null }>; rollBack: boolean }
  /** The state batch opens (when closed) or commits (when open): inside it the counts' changes wait for the commit. */
  | { kind: 'batch' }
  /**
   * A slice of the node's applier on a full disk: commands in a savepoint, the last one failing with SQLITE_FULL,
   * the savepoint rolled back, then the same commands applied again (raft-host's rewindApply).
   */
  | { kind: 'fullSlice'; shard: number; writes: Array<{ n: number; state: JobState | null }> };

const states: JobState[] = ['PENDING', 'RUNNING', 'PAUSED', 'SUCCEEDED', 'FAILED', 'CANCELLED'];
const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant('put' as const), shard: fc.integer({ min: 0, max: 2 }), n: fc.integer({ min: 0, max: 7 }), state: fc.constantFrom(...states) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('delete' as const), shard: fc.integer({ min: 0, max: 2 }), n: fc.integer({ min: 0, max: 7 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('drop' as const), shard: fc.integer({ min: 0, max: 2 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('restore' as const), shard: fc.integer({ min: 0, max: 2 }) }) },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('command' as const),
      shard: fc.integer({ min: 0, max: 2 }),
      // state null: a delete.
      writes: fc.array(fc.record({ n: fc.integer({ min: 0, max: 7 }), state: fc.option(fc.constantFrom(...states)) }), { maxLength: 6 }),
      rollBack: fc.boolean(),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('batch' as const) }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('fullSlice' as const),
      shard: fc.integer({ min: 0, max: 2 }),
      writes: fc.array(fc.record({ n: fc.integer({ min: 0, max: 7 }), state: fc.option(fc.constantFrom(...states)) }), { maxLength: 6 }),
    }),
  },
);

describe('schema 3: job_counts (kept by the store)', () => {
  it('equals count(*) by shard and state after any sequence of inserts, state changes, deletes, shard drops, restores and commands (rolled back or not)', () => {
    const db = openNodeDb(dir, 'off');
    const stores = [0, 1, 2].map((shard) => new SqliteShardStore(db, shard));
    const fail = (err: unknown): never => {
      throw err;
    };
    const batch = new StateBatch(db, { intervalMs: 3_600_000, entriesMax: 1e9, retryMs: 1000, sync: null, applied: () => [], onFatal: fail, onFull: fail, onSpace: () => {} });
    const images = new Map<number, Uint8Array>();
    const counted = (): unknown[] => db.prepare('SELECT shard, state, count(*) AS n FROM jobs GROUP BY shard, state ORDER BY shard, state').all();
    const kept = (): unknown[] => db.prepare('SELECT shard, state, n FROM job_counts WHERE n != 0 ORDER BY shard, state').all();
    try {
      fc.assert(
        fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
          for (const shard of [0, 1, 2]) restoreShardImage(db, shard, new Uint8Array());
          const byRows = (shard: number, state: JobState): unknown => db.prepare('SELECT count(*) FROM jobs WHERE shard = ? AND state = ?').pluck().get(shard, state);
          // A command as apply brackets it: a throw reaches commandEnded as its failure.
          const command = (s: SqliteShardStore, writes: Array<{ n: number; state: JobState | null }>, then?: () => void): void => {
            s.commandStarted();
            let failure: { error: unknown } | undefined;
            try {
              for (const w of writes) {
                if (w.state === null) s.getJob(`j${w.n}`) !== null && s.deleteJob(`j${w.n}`, 100);
                else {
                  s.getJob(`j${w.n}`);
                  s.putJob(job(`j${w.n}`, s.shard, w.state));
                }
                // Within the command (its changes not written yet) the counts answer for the rows as they are.
                const byState = s.countJobsByState();
                for (const state of states) expect(byState[state]).toBe(byRows(s.shard, state));
              }
              then?.();
            } catch (error) {
              failure = { error };
              throw error;
            } finally {
              s.commandEnded(failure);
            }
          };
          for (const o of ops) {
            if (o.kind === 'batch') {
              if (batch.isOpen()) batch.commit();
              else batch.begin();
            } else if (o.kind === 'fullSlice') {
              const s = stores[o.shard]!;
              // Inside the state batch, as the node applies (SQLite may roll the whole batch back on SQLITE_FULL).
              batch.begin();
              expect(() =>
                db.transaction(() => {
                  db.transaction(() => command(s, o.writes))();
                  db.pragma(`max_page_count = ${db.pragma('page_count', { simple: true }) as number}`);
                  db.transaction(() => command(s, [], () => s.putJob(job('big', o.shard, 'PENDING', { payload: new Uint8Array(256 * 1024) }))))();
                })(),
              ).toThrow(/full/);
              db.pragma('max_page_count = 1073741823');
              // The node's next slice (a new batch transaction when that one was rolled back).
              batch.begin();
              db.transaction(() => db.transaction(() => command(s, o.writes))())();
            } else if (o.kind === 'command') {
              const s = stores[o.shard]!;
              // rollBack: the command throws; the node's savepoint of its entry rolls its writes back.
              try {
                db.transaction(() => command(s, o.writes, o.rollBack ? () => { throw new Error('rolled back'); } : undefined))();
              } catch (err) {
                if (!o.rollBack) throw err;
              }
            } else if (o.kind === 'put') stores[o.shard]!.putJob(job(`j${o.n}`, o.shard, o.state));
            else if (o.kind === 'delete') stores[o.shard]!.deleteJob(`j${o.n}`, 100);
            else if (o.kind === 'drop') {
              images.set(o.shard, encodeShardImage(db, o.shard));
              restoreShardImage(db, o.shard, new Uint8Array());
            } else restoreShardImage(db, o.shard, images.get(o.shard) ?? new Uint8Array());
            // Inside the batch the changes wait for its commit.
            if (!batch.isOpen()) expect(kept()).toEqual(counted());
            for (const s of stores) {
              const byState = s.countJobsByState();
              for (const state of states) expect(byState[state]).toBe(byRows(s.shard, state));
            }
          }
          batch.commit();
          expect(kept()).toEqual(counted());
          expect(db.prepare('SELECT count(*) FROM job_counts WHERE n < 0').pluck().get()).toBe(0);
          for (const s of stores) {
            const byState = s.countJobsByState();
            for (const state of states) {
              expect(byState[state]).toBe(db.prepare('SELECT count(*) FROM jobs WHERE shard = ? AND state = ?').pluck().get(s.shard, state));
            }
          }
        }),
        { numRuns: 200 },
      );
    } finally {
      db.close();
    }
  });

  it('a file made with the count triggers of earlier builds loses them at open, its counts kept', () => {
    const db = openNodeDb(dir, 'off');
    const s = new SqliteShardStore(db, 0);
    s.putJob(job('a', 0, 'PENDING'));
    db.exec(`CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs BEGIN
      INSERT INTO job_counts (shard, state, n) VALUES (new.shard, new.state, 1) ON CONFLICT (shard, state) DO UPDATE SET n = n + 1; END`);
    db.close();
    const again = openNodeDb(dir, 'off');
    try {
      expect(again.prepare("SELECT name FROM sqlite_schema WHERE type = 'trigger' AND name LIKE 'job_counts%'").all()).toEqual([]);
      const s2 = new SqliteShardStore(again, 0);
      s2.putJob(job('b', 0, 'PENDING'));
      expect(s2.countJobsByState().PENDING).toBe(2);
    } finally {
      again.close();
    }
  });
});
