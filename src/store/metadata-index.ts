/**
 * The metadata index of GET /v1/jobs?metadata.KEY=VALUE: table `job_metadata`, one row per indexed (key, value)
 * pair of a job (src/scheduler/search.ts decides which pairs), kept by SqliteShardStore.putJob, i.e. by the state
 * machine's apply on every replica. A trigger drops a job's rows with the job (any deletion path), and a shard
 * image restored from a snapshot rebuilds its shard's rows, so the index always follows the jobs table. A file
 * made before the index existed is indexed once when opened (node_meta `metadata_index`).
 */
import type { Statement } from 'better-sqlite3';
import { indexedMetadata, type JobSearch } from '../scheduler/search.js';
import type { JobRecord } from '../scheduler/types.js';
import type { Db } from './db.js';
import { unpack } from './rows.js';

const schema = `
CREATE TABLE IF NOT EXISTS job_metadata (
  shard INTEGER NOT NULL, job_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
  PRIMARY KEY (shard, job_id, key)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS job_metadata_kv ON job_metadata (shard, key, value, job_id);
CREATE TRIGGER IF NOT EXISTS job_metadata_gc AFTER DELETE ON jobs BEGIN
  DELETE FROM job_metadata WHERE shard = old.shard AND job_id = old.id;
END;
`;

/** node_meta key set once every job of the file is in the index. */
const builtKey = 'metadata_index';

/** Creates the index (idempotent) and fills it from the jobs table the first time. Call after the main schema. */
export function ensureMetadataIndex(db: Db): void {
  db.exec(schema);
  const built = db.prepare('SELECT value FROM node_meta WHERE key = ?').pluck().get(builtKey);
  if (built !== undefined) return;
  db.transaction(() => {
    const shards = db.prepare('SELECT DISTINCT shard FROM jobs').pluck().all() as number[];
    for (const shard of shards) rebuildMetadataIndex(db, shard);
    db.prepare('INSERT OR REPLACE INTO node_meta (key, value) VALUES (?, ?)').run(builtKey, '1');
  })();
}

/** Re-derives a shard's index rows from its jobs (after a snapshot image replaced them). In the caller's transaction. */
export function rebuildMetadataIndex(db: Db, shard: number): void {
  db.prepare('DELETE FROM job_metadata WHERE shard = ?').run(shard);
  const insert = db.prepare('INSERT INTO job_metadata (shard, job_id, key, value) VALUES (?, ?, ?, ?)');
  const page = db.prepare('SELECT id, data FROM jobs WHERE shard = ? AND id > ? ORDER BY id LIMIT ?');
  let after = '';
  for (;;) {
    const rows = page.all(shard, after, rebuildPageRows) as Array<{ id: string; data: Uint8Array }>;
    for (const row of rows) {
      const { metadata } = unpack<{ metadata?: Record<string, unknown> | null }>(row.data);
      for (const [key, value] of indexedMetadata(metadata ?? null)) insert.run(shard, row.id, key, value);
    }
    if (rows.length < rebuildPageRows) return;
    after = rows[rows.length - 1].id;
  }
}

/** Jobs read per query while rebuilding (an insert cannot run while a read statement is still stepping). */
const rebuildPageRows = 1_000;

/** The index rows of one shard store. */
export class MetadataIndex {
  private readonly read: Statement;
  private readonly drop: Statement;
  private readonly insert: Statement;

  constructor(db: Db) {
    this.read = db.prepare('SELECT key, value FROM job_metadata WHERE shard = ? AND job_id = ? ORDER BY key').raw(true);
    this.drop = db.prepare('DELETE FROM job_metadata WHERE shard = ? AND job_id = ?');
    this.insert = db.prepare('INSERT INTO job_metadata (shard, job_id, key, value) VALUES (?, ?, ?, ?)');
  }

  /**
   * Makes the job's rows match its metadata. Most puts (fired, outcomes) leave metadata alone: one indexed read
   * finds the rows equal and nothing is written.
   */
  sync(shard: number, job: Pick<JobRecord, 'id' | 'metadata'>, want = indexedPairs(job.metadata)): void {
    const have = this.read.all(shard, job.id) as Array<[string, string]>;
    if (samePairs(want, have)) return;
    this.drop.run(shard, job.id);
    this.add(shard, job.id, want);
  }

  /** The rows of a job that has none: one just inserted (job_metadata_gc dropped any rows with the job's last row). */
  add(shard: number, jobId: string, pairs: Array<[string, string]>): void {
    for (const [key, value] of pairs) this.insert.run(shard, jobId, key, value);
  }
}

/** The job's indexed pairs sorted by key, as the index reads them back. */
export function indexedPairs(metadata: Record<string, unknown> | null): Array<[string, string]> {
  return indexedMetadata(metadata).sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
}

function samePairs(a: Array<[string, string]>, b: Array<[string, string]>): boolean {
  if (a.length !== b.length) return false;
  return a.every(([k, v], i) => b[i][0] === k && b[i][1] === v);
}

/**
 * The SQL of one page of GET /v1/jobs with a search (parameters in searchParams' order). With metadata filters the
 * first pair drives the scan through job_metadata_kv (ordered by job id, so no sort); the others are probed by
 * primary key. Without any, the jobs table is scanned by id with the range as a filter.
 */
export function searchSql(cols: string, search: JobSearch, state: boolean, task: boolean): string {
  const where: string[] = [];
  const [first, ...rest] = search.metadata;
  let from: string;
  let order: string;
  if (first !== undefined) {
    from = 'job_metadata m CROSS JOIN jobs j';
    where.push('m.shard = ?', 'm.key = ?', 'm.value = ?', 'm.job_id > ?', 'j.shard = m.shard', 'j.id = m.job_id');
    order = 'm.job_id';
  } else {
    from = 'jobs j';
    where.push('j.shard = ?', 'j.id > ?');
    order = 'j.id';
  }
  for (let i = 0; i < rest.length; i++) {
    where.push(`EXISTS (SELECT 1 FROM job_metadata x WHERE x.shard = j.shard AND x.job_id = j.id AND x.key = ? AND x.value = ?)`);
  }
  if (state) where.push('j.state = ?');
  if (task) where.push('j.task = ?');
  if (search.nextFireAfterMs !== null) where.push('j.next_fire_at >= ?');
  if (search.nextFireBeforeMs !== null) where.push('j.next_fire_at < ?');
  const select = cols.split(', ').map((c) => `j.${c}`).join(', ');
  return `SELECT ${select} FROM ${from} WHERE ${where.join(' AND ')} ORDER BY ${order} LIMIT ?`;
}

/** The parameters of searchSql's statement, in order. */
export function searchParams(
  shard: number,
  afterId: string,
  search: JobSearch,
  state: string | null,
  task: string | null,
  limit: number,
): unknown[] {
  const [first, ...rest] = search.metadata;
  const out: unknown[] = first !== undefined ? [shard, first[0], first[1], afterId] : [shard, afterId];
  for (const [k, v] of rest) out.push(k, v);
  if (state !== null) out.push(state);
  if (task !== null) out.push(task);
  if (search.nextFireAfterMs !== null) out.push(search.nextFireAfterMs);
  if (search.nextFireBeforeMs !== null) out.push(search.nextFireBeforeMs);
  out.push(limit);
  return out;
}
