/**
 * A shard's state-machine image for Raft snapshots: every row of the shard in the scheduler's tables (tasks,
 * calendars, jobs, executions), read in one synchronous pass (better-sqlite3), so the copy is consistent at the applied
 * index the caller holds; and the shard's applied index (shard_meta.applied_index), written by the node in the
 * same transaction of the state batch as the state-machine rows it covers.
 *
 * The image names its columns, so a table that gains a column (another helper's schema work) still restores:
 * columns missing on either side are left to their defaults.
 */
import type { Statement } from 'better-sqlite3';
import { assert } from '../core/assert.js';
import type { Db } from './db.js';
import { rebuildMetadataIndex } from './metadata-index.js';
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

function columnsOf(db: Db, table: string): string[] {
  const info = db.prepare(`PRAGMA table_info(${table})`).all() as Array<{ name: string }>;
  return info.map((c) => c.name).filter((c) => c !== 'shard');
}

/** A consistent copy of the shard's rows, msgpack-encoded (never empty: the empty image is a few bytes). */
export function encodeShardImage(db: Db, shard: number): Uint8Array {
  const tables: Record<string, TableImage> = {};
  const read = db.transaction(() => {
    for (const t of stateTables) {
      const columns = columnsOf(db, t);
      const rows = db
        .prepare(`SELECT ${columns.join(', ')} FROM ${t} WHERE shard = ?`)
        .raw(true)
        .all(shard) as unknown[][];
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
  for (const t of stateTables) db.prepare(`DELETE FROM ${t} WHERE shard = ?`).run(shard);
  if (data.length === 0) return;
  const image = unpack<ShardImage>(data);
  assert(image.v === 1, `shard snapshot version ${String(image.v)} is not supported`);
  for (const t of stateTables) {
    const img = image.tables[t];
    if (img === undefined) continue;
    const have = new Set(columnsOf(db, t));
    const keep = img.columns.map((c, i) => [c, i] as const).filter(([c]) => have.has(c));
    const insert = db.prepare(
      `INSERT INTO ${t} (shard, ${keep.map(([c]) => c).join(', ')}) VALUES (?, ${keep.map(() => '?').join(', ')})`,
    );
    for (const row of img.rows) insert.run(shard, ...keep.map(([, i]) => row[i]));
  }
  rebuildMetadataIndex(db, shard);
  // An image from a node without the retention columns: derive them here, as that node's putJob would have.
  if (image.tables.jobs !== undefined && !image.tables.jobs.columns.includes('finished_at')) fillLifecycleColumns(db, shard);
}

/** shard_meta.applied_index of each shard: the last log index whose command is in the state-machine rows. */
export class AppliedIndexes {
  private readonly get: Statement;
  private readonly set: Statement;

  constructor(db: Db) {
    this.get = db.prepare('SELECT applied_index AS a FROM shard_meta WHERE shard = ?');
    this.set = db.prepare(
      `INSERT INTO shard_meta (shard, applied_index) VALUES (?, ?)
       ON CONFLICT (shard) DO UPDATE SET applied_index = excluded.applied_index`,
    );
  }

  of(shard: number): number {
    const row = this.get.get(shard) as { a: number } | undefined;
    return row?.a ?? 0;
  }

  /** Call inside the transaction that wrote the rows of the commands up to `index`. */
  write(shard: number, index: number): void {
    this.set.run(shard, index);
  }
}
