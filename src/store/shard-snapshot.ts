/**
 * A shard's state-machine image for Raft snapshots: every row of the shard in the scheduler's tables (tasks,
 * calendars, jobs, executions), read in one synchronous pass (better-sqlite3), so the copy is consistent at the applied
 * index the caller holds; and the shard's applied index (shard_meta.applied_index), written by the node in the
 * same transaction of the state batch as the state-machine rows it covers.
 *
 * The image names its columns, so a table that gains a column (another helper's schema work) still restores:
 * columns missing on either side are left to their defaults.
 *
 * The image is the same in schema 2 and 3 (nodes of both versions exchange them): schema 3's job sequence
 * (job_seq, job-keys.ts) is local to a file and never in it; executions carry their job's id (`job_id`) as before,
 * and rows are in schema 2's key order (jobs by id, executions by job id and scheduled_at). A restore gives the jobs
 * new sequences.
 */
import type { Statement } from 'better-sqlite3';
import { assert } from '../core/assert.js';
import { isStorageError, type Db } from './db.js';
import { rebuildMetadataIndex } from './metadata-index.js';
import { CountBook, JobKeys, recountJobs } from './job-keys.js';
import { pack, unpack } from './rows.js';
import { fillLifecycleColumns } from './lifecycle-schema.js';

/** The scheduler's tables that carry a shard's state (each has a `shard` column). */
const stateTables = ['tasks', 'calendars', 'jobs', 'executions'] as const;

interface TableImage {
  columns: string[];
  rows: unknown[][];
}

interface ShardImage {
  v: 1;
  tables: Record<string, TableImage>;
}

/** The columns of a table as an image names them: no shard (the image is of one), no file-local job_seq. */
function columnsOf(db: Db, table: string): string[] {
  const info = db.prepare(`PRAGMA table_info(${table})`).all() as Array<{ name: string }>;
  const cols = info.map((c) => c.name).filter((c) => c !== 'shard' && c !== 'job_seq');
  return table === 'executions' ? ['job_id', ...cols] : cols;
}

/** The SELECT of a table's rows of one shard, in the image's column order and schema 2's key order. */
function imageSelect(table: string, columns: string[]): string {
  if (table === 'executions') {
    const cols = columns.map((c) => (c === 'job_id' ? 'k.id' : `e.${c}`)).join(', ');
    const from = (keys: string, seq: string): string => `SELECT ${cols} FROM ${keys} k JOIN executions e ON e.job_seq = k.${seq} WHERE k.shard = ?`;
    return `${from('jobs', 'job_seq')} UNION ALL ${from('job_keys', 'seq')} ORDER BY 1, 2`;
  }
  const order = table === 'jobs' ? ' ORDER BY id' : '';
  return `SELECT ${columns.join(', ')} FROM ${table} WHERE shard = ?${order}`;
}

/** A consistent copy of the shard's rows, msgpack-encoded (never empty: the empty image is a few bytes). */
export function encodeShardImage(db: Db, shard: number): Uint8Array {
  const tables: Record<string, TableImage> = {};
  const read = db.transaction(() => {
    for (const t of stateTables) {
      const columns = columnsOf(db, t);
      const rows = db.prepare(imageSelect(t, columns)).raw(true).all(...(t === 'executions' ? [shard, shard] : [shard])) as unknown[][];
      tables[t] = { columns, rows };
    }
  });
  read();
  const image: ShardImage = { v: 1, tables };
  return pack(image);
}

const restores = new WeakMap<Db, number>();

/** How many images were restored into `db` so far: a cache of its rows is stale once this changes. */
export function shardImageRestores(db: Db): number {
  return restores.get(db) ?? 0;
}

/**
 * Replaces the shard's rows by an image (call inside the caller's transaction). Empty data means an empty
 * state machine (the bootstrap snapshot of a node that joins later).
 */
export function restoreShardImage(db: Db, shard: number, data: Uint8Array): void {
  // Counted first: caches of decoded rows (SqliteShardStore's tasks) are emptied, even if this transaction rolls back.
  restores.set(db, shardImageRestores(db) + 1);
  // The shard's job counts are counted again from the restored rows (below): changes waiting for them are void.
  CountBook.of(db).dropShard(shard);
  try {
    restoreRows(db, shard, data);
  } catch (err) {
    if (isStorageError(err)) CountBook.of(db).storageFailed();
    throw err;
  }
}

function restoreRows(db: Db, shard: number, data: Uint8Array): void {
  db.prepare('DELETE FROM executions WHERE job_seq IN (SELECT job_seq FROM jobs WHERE shard = ?)').run(shard);
  db.prepare('DELETE FROM executions WHERE job_seq IN (SELECT seq FROM job_keys WHERE shard = ?)').run(shard);
  db.prepare('DELETE FROM job_keys WHERE shard = ?').run(shard);
  for (const t of stateTables) if (t !== 'executions') db.prepare(`DELETE FROM ${t} WHERE shard = ?`).run(shard);
  if (data.length === 0) {
    recountJobs(db, shard);
    return;
  }
  const image = unpack<ShardImage>(data);
  assert(image.v === 1, `shard snapshot version ${String(image.v)} is not supported`);
  for (const t of stateTables) {
    const img = image.tables[t];
    if (img === undefined) continue;
    const have = new Set(columnsOf(db, t));
    const keep = img.columns.map((c, i) => [c, i] as const).filter(([c]) => have.has(c));
    if (t === 'executions') {
      // Keyed by the job's sequence: the jobs were inserted first (stateTables' order), so each has one.
      const keys = new JobKeys(db);
      const cols = keep.filter(([c]) => c !== 'job_id');
      const jobAt = img.columns.indexOf('job_id');
      const insert = db.prepare(
        `INSERT INTO executions (job_seq, ${cols.map(([c]) => c).join(', ')}) VALUES (?, ${cols.map(() => '?').join(', ')})`,
      );
      for (const row of img.rows) insert.run(keys.seqFor(shard, row[jobAt] as string), ...cols.map(([, i]) => row[i]));
      continue;
    }
    const insert = db.prepare(
      `INSERT INTO ${t} (shard, ${keep.map(([c]) => c).join(', ')}) VALUES (?, ${keep.map(() => '?').join(', ')})`,
    );
    for (const row of img.rows) insert.run(shard, ...keep.map(([, i]) => row[i]));
  }
  rebuildMetadataIndex(db, shard);
  // An image from a node without the retention columns: derive them here, as that node's putJob would have.
  if (image.tables.jobs !== undefined && !image.tables.jobs.columns.includes('finished_at')) fillLifecycleColumns(db, shard);
  // job_counts has no triggers (job-keys.ts): the shard's counts, of the rows just written.
  recountJobs(db, shard);
}

/**
 * shard_meta.applied_index of each shard: the last log index whose command is in the state-machine rows. While
 * the state batch's transaction is open (`deferring`, set by StateBatch) a write only records the index here and
 * StateBatch writes each shard's last one just before its COMMIT (`flush`): one upsert per shard and batch instead
 * of one per shard and Raft round. Only the committed value matters to a restart (replay starts from it); `of`
 * answers what the rows of the open transaction hold. Outside a batch (replay at open, tools) a write goes into
 * the caller's transaction with its rows, as before.
 */
export class AppliedIndexes {
  private getSt: Statement | null = null;
  private setSt: Statement | null = null;
  /** The state batch's transaction is open: writes wait in `pending` for its commit. */
  deferring = false;
  /** Per shard, the index the rows of the open batch hold and shard_meta does not yet. */
  private readonly pending = new Map<number, number>();

  constructor(private readonly db: Db) {}

  /** The instance of `db` that its StateBatch flushes (the node's writes must go through this one). */
  static of(db: Db): AppliedIndexes {
    let a = appliedIndexes.get(db);
    if (a === undefined) appliedIndexes.set(db, (a = new AppliedIndexes(db)));
    return a;
  }

  /** What the rows hold as applied: the open batch's index, else shard_meta's. */
  of(shard: number): number {
    // A transaction that rolled back whole (a full disk) took the waiting indexes' rows with it.
    if (this.pending.size > 0 && !this.db.inTransaction) this.pending.clear();
    const p = this.pending.get(shard);
    if (p !== undefined) return p;
    this.getSt ??= this.db.prepare('SELECT applied_index AS a FROM shard_meta WHERE shard = ?');
    const row = this.getSt.get(shard) as { a: number } | undefined;
    return row?.a ?? 0;
  }

  /**
   * Call inside the transaction that wrote the rows of the commands up to `index`, after them (inside the batch,
   * after the last of its savepoint's commands: a savepoint that rolls back must not have moved it).
   */
  write(shard: number, index: number): void {
    if (this.deferring && this.db.inTransaction) {
      this.pending.set(shard, index);
      return;
    }
    this.upsert(shard, index);
  }

  /** Writes every waiting index; called inside the batch, before COMMIT (kept when it fails: the batch retries). */
  flush(): void {
    for (const [shard, index] of this.pending) this.upsert(shard, index);
    this.pending.clear();
  }

  /** The batch's transaction rolled back (or a new one begins): its waiting indexes went with its rows. */
  discard(): void {
    this.pending.clear();
    this.deferring = false;
  }

  private upsert(shard: number, index: number): void {
    this.setSt ??= this.db.prepare(
      `INSERT INTO shard_meta (shard, applied_index) VALUES (?, ?)
       ON CONFLICT (shard) DO UPDATE SET applied_index = excluded.applied_index`,
    );
    try {
      this.setSt.run(shard, index);
    } catch (err) {
      // The node rolls the applied commands back with it: job counts summed for the batch cannot be trusted.
      if (isStorageError(err)) CountBook.of(this.db).storageFailed();
      throw err;
    }
  }
}

const appliedIndexes = new WeakMap<Db, AppliedIndexes>();
