/**
 * The retention and dead-letter columns on files and shard images made before them (lifecycle-schema.ts): real
 * SQLite files in a temp dir. An "old" file is made by opening a new one, writing rows, and dropping the columns
 * and their indexes again, which leaves exactly the tables of a file from before them.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { contractExecution, contractJob, contractTask } from '../scheduler/store.contract.js';
import type { DeadLetterFilter } from '../scheduler/types.js';
import { openNodeDb, type Db } from './db.js';
import { encodeShardImage, restoreShardImage } from './shard-snapshot.js';
import { SqliteShardStore } from './shard-store.js';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-lifecycle-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const noFilter: DeadLetterFilter = { task: null, errorClass: null, sinceMs: null, untilMs: null };

/** Rows of a failed job, a succeeded one of a task with its own retention, and a live one. */
function writeRows(store: SqliteShardStore): void {
  store.putTask(contractTask('email'));
  store.putTask(contractTask('short', { retentionMs: 5_000 }));
  store.putExecution(contractExecution('failed', 10, { state: 'FAILED', statusCode: null, error: 'timeout after 10000 ms', attempt: 3 }));
  store.putJob(contractJob('failed', { state: 'FAILED', nextFireAtMs: null, updatedAtMs: 1_000 }));
  store.putJob(contractJob('done', { task: 'short', state: 'SUCCEEDED', nextFireAtMs: null, updatedAtMs: 2_000 }));
  store.putJob(contractJob('live'));
}

function dropColumns(db: Db): void {
  for (const index of ['jobs_expiry', 'jobs_expiry_own', 'jobs_dead', 'jobs_dead_class', 'jobs_live']) db.exec(`DROP INDEX ${index}`);
  for (const column of ['finished_at', 'retain_ms', 'error_class']) db.exec(`ALTER TABLE jobs DROP COLUMN ${column}`);
}

function expectDerived(store: SqliteShardStore): void {
  expect(store.expiredJobs(7_000, 10_000, 10)).toEqual(['done']);
  expect(store.expiredJobs(11_000, 10_000, 10)).toEqual(['done', 'failed']);
  expect(store.deadLetters(noFilter, 10, null)).toEqual([
    { jobId: 'failed', task: 'email', errorClass: 'timeout', error: 'timeout after 10000 ms', statusCode: null, attempts: 3, scheduledAtMs: 10, failedAtMs: 1_000 },
  ]);
  expect(store.deadLetterGroups()).toEqual([{ task: 'email', errorClass: 'timeout', count: 1, lastFailedAtMs: 1_000 }]);
}

describe('lifecycle columns', () => {
  it('a file from before them gets them at open, filled from its rows', () => {
    const data = join(dir, 'old');
    let db = openNodeDb(data, 'off');
    writeRows(new SqliteShardStore(db, 0));
    dropColumns(db);
    db.close();
    db = openNodeDb(data, 'off');
    try {
      expectDerived(new SqliteShardStore(db, 0));
    } finally {
      db.close();
    }
  });

  it('a shard image from a node without them is filled when installed', () => {
    const from = openNodeDb(join(dir, 'from'), 'off');
    const to = openNodeDb(join(dir, 'to'), 'off');
    try {
      writeRows(new SqliteShardStore(from, 2));
      dropColumns(from);
      const image = encodeShardImage(from, 2);
      to.transaction(() => restoreShardImage(to, 2, image))();
      expectDerived(new SqliteShardStore(to, 2));
    } finally {
      from.close();
      to.close();
    }
  });

  it('the dead-letter list filters by task, class and failure time, pages newest first', () => {
    const db = openNodeDb(join(dir, 'dl'), 'off');
    try {
      const store = new SqliteShardStore(db, 0);
      store.putTask(contractTask('email'));
      const fail = (id: string, atMs: number, statusCode: number | null, error: string) => {
        store.putExecution(contractExecution(id, atMs - 100, { state: 'FAILED', statusCode, error }));
        store.putJob(contractJob(id, { state: 'FAILED', nextFireAtMs: null, updatedAtMs: atMs }));
      };
      fail('a', 1_000, 503, 'HTTP 503');
      fail('b', 2_000, 404, 'HTTP 404');
      fail('c', 3_000, null, 'ECONNREFUSED');
      fail('d', 3_000, 500, 'HTTP 500');
      const ids = (f: Partial<DeadLetterFilter>, limit = 10, after: { failedAtMs: number; jobId: string } | null = null) =>
        store.deadLetters({ ...noFilter, ...f }, limit, after).map((d) => d.jobId);
      expect(ids({})).toEqual(['d', 'c', 'b', 'a']);
      expect(ids({}, 2)).toEqual(['d', 'c']);
      expect(ids({}, 2, { failedAtMs: 3_000, jobId: 'c' })).toEqual(['b', 'a']);
      expect(ids({ errorClass: 'http_5xx' })).toEqual(['d', 'a']);
      expect(ids({ errorClass: 'connection' })).toEqual(['c']);
      expect(ids({ sinceMs: 2_000, untilMs: 3_000 })).toEqual(['b']);
      expect(ids({ task: 'email', errorClass: 'http_4xx' })).toEqual(['b']);
      expect(ids({ task: 'other' })).toEqual([]);
      expect(store.countDeadLetters({ ...noFilter, errorClass: 'http_5xx' })).toBe(2);
      // A job that runs again (a replay) leaves the list.
      store.putJob(contractJob('d', { state: 'RUNNING', nextFireAtMs: null, updatedAtMs: 4_000 }));
      expect(ids({})).toEqual(['c', 'b', 'a']);
    } finally {
      db.close();
    }
  });
});
