import Database from 'better-sqlite3';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setImmediate as turn } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { nodeLimits } from '../core/limits.js';
import { createLogger, type Logger } from '../core/log.js';
import { Checkpointer, walFileBytes } from './checkpointer.js';
import { dbFilePath, openNodeDb, type Db, type FsyncMode } from './db.js';

const mib = 1024 * 1024;
let dir: string;
let path: string;
let db: Db;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-wal-'));
  path = dbFilePath(dir);
});

afterEach(() => {
  if (db?.open) db.close();
  rmSync(dir, { recursive: true, force: true });
});

function capturingLogger(): { logger: Logger; lines: Array<{ level: string; msg: string; walBytes?: number }> } {
  const lines: Array<{ level: string; msg: string; walBytes?: number }> = [];
  return { logger: createLogger({ level: 'debug', write: (line) => lines.push(JSON.parse(line)) }), lines };
}

/** The job row the stream writes as number i: its blob is derived from i, so every row can be checked on reading. */
function jobBlob(i: number): Buffer {
  const seed = createHash('sha256').update(`job ${i}`).digest();
  return Buffer.concat(Array.from({ length: 32 }, () => seed)); // 1 KiB
}

const jobId = (i: number): string => `wal-${String(i).padStart(8, '0')}`;

/**
 * Writes `commits` transactions of `rowsPerCommit` jobs each, one after the other with only an event-loop turn
 * between them, like the node's group commits under load: some commit always lands during a checkpoint. So that
 * the WAL's growth between two checkpoint rounds does not depend on how the threads are scheduled, the stream
 * writes at most `commitsPerRound` of them per completed round; past that it keeps committing, but only a
 * one-page update of node_meta per millisecond, until the checkpointer reports its next round.
 */
async function stream(
  cp: Checkpointer,
  o: { commits: number; rowsPerCommit: number; commitsPerRound: number },
): Promise<{ walBytesMax: number; rows: number }> {
  const put = db.prepare("INSERT INTO jobs (shard, id, state, task, next_fire_at, data) VALUES (0, ?, 'PENDING', 'wal', ?, ?)");
  const tick = db.prepare("INSERT INTO node_meta (key, value) VALUES ('wal-test-tick', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value");
  const last = db.prepare("SELECT id FROM jobs WHERE task = 'wal' ORDER BY id DESC LIMIT 1").pluck();
  // Each transaction reads before it writes, like the node's applies: one that another connection's writer lock
  // met then would fail at once with SQLITE_BUSY (no busy handler for that upgrade).
  const commit = db.transaction((from: number) => {
    expect(last.get()).toBe(from === 0 ? undefined : jobId(from - 1));
    for (let i = from; i < from + o.rowsPerCommit; i++) put.run(jobId(i), 1_000_000 + i, jobBlob(i));
  });
  let walBytesMax = 0;
  let rows = 0;
  let round = cp.stats().rounds;
  let sinceRound = 0;
  let ticks = 0;
  for (let c = 0; c < o.commits; ) {
    if (cp.stats().rounds !== round) {
      round = cp.stats().rounds;
      sinceRound = 0;
    }
    if (sinceRound < o.commitsPerRound) {
      commit(rows);
      rows += o.rowsPerCommit;
      sinceRound++;
      c++;
      await turn();
    } else {
      tick.run(String(ticks++));
      await new Promise((r) => setTimeout(r, 1));
    }
    walBytesMax = Math.max(walBytesMax, walFileBytes(path));
  }
  return { walBytesMax, rows };
}

/** Every row the stream wrote is there with its own blob, in a file SQLite finds intact (read after a reopen). */
function expectEveryRow(rows: number): void {
  db.close();
  db = openNodeDb(dir, 'batch');
  expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
  const read = db.prepare("SELECT id, data FROM jobs WHERE task = 'wal' ORDER BY id").all() as Array<{ id: string; data: Buffer }>;
  expect(read.length).toBe(rows);
  const wrong = read.filter((r, i) => r.id !== jobId(i) || !r.data.equals(jobBlob(i)));
  expect(wrong.map((r) => r.id)).toEqual([]);
}

async function until(done: () => boolean): Promise<void> {
  while (!done()) await new Promise((r) => setTimeout(r, 5));
}

describe('the WAL is bounded (--fsync batch: the checkpointer thread)', () => {
  it('stays under its limit while a sustained stream of commits goes on, and every row stays readable', async () => {
    db = openNodeDb(dir, 'batch');
    const { logger, lines } = capturingLogger();
    const fatal: unknown[] = [];
    const softMaxBytes = 1 * mib;
    const cp = new Checkpointer(path, 5, logger, (e) => fatal.push(e), { softMaxBytes, hardMaxBytes: 8 * mib });
    // About 8 pages (32 KiB) per commit (20 rows of 1 KiB appended in creation order, schema 3, and their index
    // entries), 10 commits per round: a round adds at most ~0.3 MiB to the WAL; the stream writes ~60 MiB of WAL
    // frames in all, which PASSIVE checkpoints alone let the file keep.
    const { walBytesMax, rows } = await stream(cp, { commits: 2_000, rowsPerCommit: 20, commitsPerRound: 10 });
    const stats = cp.stats();
    await cp.close();
    expect(fatal).toEqual([]);
    expect(walBytesMax).toBeLessThan(softMaxBytes + 3 * mib);
    expect(stats.truncates).toBeGreaterThan(0);
    expect(lines.filter((l) => l.level === 'warn')).toEqual([]);
    expectEveryRow(rows);
  });

  it('warns once past its hard limit while a reader pins the WAL, goes on writing, and comes back down after', async () => {
    db = openNodeDb(dir, 'batch');
    const { logger, lines } = capturingLogger();
    const fatal: unknown[] = [];
    const softMaxBytes = 512 * 1024;
    const hardMaxBytes = 2 * mib;
    const cp = new Checkpointer(path, 5, logger, (e) => fatal.push(e), { softMaxBytes, hardMaxBytes, truncateRetryMs: 20 });
    const reader = new Database(path, { readonly: true });
    try {
      // An open read transaction: its snapshot keeps every frame written after it from being checkpointed.
      reader.exec('BEGIN');
      reader.prepare('SELECT count(*) FROM jobs').get();
      const first = await stream(cp, { commits: 200, rowsPerCommit: 5, commitsPerRound: 20 });
      expect(first.walBytesMax).toBeGreaterThan(hardMaxBytes);
      await until(() => lines.some((l) => l.level === 'warn'));
      const warns = lines.filter((l) => l.level === 'warn');
      expect(warns.length).toBe(1);
      expect(warns[0]!.msg).toMatch(/WAL over its hard limit/);
      expect(warns[0]!.walBytes).toBeGreaterThan(hardMaxBytes);
      expect(cp.stats().truncatesBusy).toBeGreaterThan(0);
      reader.exec('COMMIT');
      await until(() => cp.stats().walBytes <= softMaxBytes);
      await until(() => lines.some((l) => l.msg === 'WAL back under its limit'));
    } finally {
      reader.close();
    }
    await cp.close();
    expect(fatal).toEqual([]);
    expect(walFileBytes(path)).toBeLessThanOrEqual(softMaxBytes);
    expectEveryRow(1_000);
  });
});

describe('the WAL file is truncated back after it rewinds (journal_size_limit, every --fsync mode)', () => {
  it.each(['always', 'off', 'batch'] as FsyncMode[])('--fsync %s', async (mode) => {
    db = openNodeDb(dir, mode);
    const limit = nodeLimits.walJournalSizeLimitBytes;
    // One transaction larger than the limit (a snapshot installed, a large batch) grows the file past it.
    const put = db.prepare("INSERT INTO jobs (shard, id, state, task, next_fire_at, data) VALUES (0, ?, 'PENDING', 'wal', ?, ?)");
    // Schema 3 appends rows of 1 KiB in creation order (about 4 to a page): twice the limit's KiB is ~1.5 times it.
    const rows = Math.ceil((2 * limit) / 1024);
    db.transaction(() => {
      for (let i = 0; i < rows; i++) put.run(jobId(i), 1_000_000 + i, jobBlob(i));
    })();
    expect(walFileBytes(path)).toBeGreaterThan(limit);
    // always / off: SQLite checkpointed in that commit (wal_autocheckpoint). batch: the checkpointer thread does;
    // its soft limit is set above this file so only the rewind can shrink it.
    if (mode === 'batch') {
      const cp = new Checkpointer(path, 5, createLogger({ level: 'error', write: () => {} }), () => {}, { softMaxBytes: 4 * limit });
      await until(() => cp.stats().rounds >= 2);
      await cp.close();
    }
    db.prepare("INSERT INTO node_meta (key, value) VALUES ('after', '1')").run();
    expect(walFileBytes(path)).toBeLessThanOrEqual(limit);
    expect(statSync(path).size).toBeGreaterThan(limit); // the rows went into the database file
    expectEveryRow(rows);
  });
});
