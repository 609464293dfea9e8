/**
 * Schema 3's job tables, keyed so that one state batch's writes share pages (issue 23, item 3; docs/design.md
 * "Storage"). Before it the shard led every key, so every shard was a region of every B-tree and one commit wrote a
 * leaf per shard per table and index; and the indexes that held `state` moved a job's entries at each of its state
 * changes. Now:
 * - `jobs` is a rowid table in creation order: the rowid is the job's sequence (`job_seq`, given at insert, local
 *   to this file: never replicated, never in an image), so a batch's new jobs append to the same pages; the UNIQUE
 *   index `jobs_id (id, shard)` finds a job by id.
 * - `executions` is keyed by (job_seq, scheduled_at): a job's executions sit together and new ones append.
 *   An execution whose job has no row (the SchedulerStore contract allows it; the node writes the job first) gets
 *   a negative sequence in `job_keys`, handed over to the job's row when it is written (`adoptOrphan`).
 * - The shard is the LAST column of the indexes (entries sort by time or id across shards, so a batch touches the
 *   tail or the due-time pages once, not once per shard); `jobs_due` holds PENDING jobs only; `jobs_task` has no
 *   state; only the rare states (`rareStates`) have an index by state; the live jobs of a task are a partial
 *   index on `finished_at IS NULL` (lifecycle-schema.ts), which a change between live states does not touch.
 * - `job_counts (shard, state, n)`: the per-state counts (GET /v1/jobs totals, gauges) without a scan now that no
 *   index leads with (shard, state). Kept by the writers of `jobs` (`CountBook`), not by triggers: a trigger ran
 *   one or two upserts per state change (~11 us of a one-off job's apply); the changes are summed in memory and
 *   written in one statement per state batch (or per command outside one).
 *   Files made with the triggers lose them at open (their counts were exact until then); an older build's
 *   open creates them again, and the counts stay exact either way.
 */
import type { Statement } from 'better-sqlite3';
import type { Db } from './db.js';
import { fillLifecycleColumns } from './lifecycle-schema.js';

/** The job tables of schema 3 (lifecycle-schema.ts adds the indexes of retention and dead letters). */
const jobTables = `
CREATE TABLE IF NOT EXISTS jobs (
  job_seq INTEGER PRIMARY KEY, shard INTEGER NOT NULL, id TEXT NOT NULL, state TEXT NOT NULL, task TEXT,
  next_fire_at INTEGER, data BLOB NOT NULL, finished_at INTEGER, retain_ms INTEGER, error_class TEXT);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_id ON jobs (id, shard);
CREATE TABLE IF NOT EXISTS executions (
  job_seq INTEGER NOT NULL, scheduled_at INTEGER NOT NULL, state TEXT NOT NULL, data BLOB NOT NULL,
  PRIMARY KEY (job_seq, scheduled_at)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS job_keys (seq INTEGER PRIMARY KEY, shard INTEGER NOT NULL, id TEXT NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS job_keys_id ON job_keys (id, shard);
CREATE TABLE IF NOT EXISTS job_counts (
  shard INTEGER NOT NULL, state TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (shard, state)) WITHOUT ROWID;
`;

/**
 * States a job reaches by an operator's command or a failure and stays in (never on the way of a run that
 * succeeds): indexed by (state, id), jobs_state_rare, so listing one (GET /v1/jobs?state=PAUSED) reads only its
 * jobs. The other states are common (a page of them fills at once walking jobs_id) or passed through by every run
 * (RUNNING: an index of it would cost every one-off job two entries).
 */
export const rareStates: readonly string[] = ['PAUSED', 'FAILED', 'CANCELLED'];
/** jobs_state_rare's WHERE, for queries to repeat word for word: SQLite does not see that `state = 'PAUSED'` implies it. */
export const rareStateWhere = `state IN (${rareStates.map((x) => `'${x}'`).join(', ')})`;

const jobIndexes = `
CREATE INDEX IF NOT EXISTS jobs_due ON jobs (next_fire_at, id, shard) WHERE state = 'PENDING';
CREATE INDEX IF NOT EXISTS jobs_state_rare ON jobs (state, id, shard) WHERE ${rareStateWhere};
CREATE INDEX IF NOT EXISTS jobs_task ON jobs (task, id, shard);
CREATE INDEX IF NOT EXISTS executions_open ON executions (job_seq, scheduled_at) WHERE state IN ('QUEUED', 'RUNNING');
DROP TRIGGER IF EXISTS job_counts_insert;
DROP TRIGGER IF EXISTS job_counts_delete;
DROP TRIGGER IF EXISTS job_counts_update;
`;

/** Creates schema 3's job tables and indexes, drops the count triggers of earlier builds (idempotent). */
export function ensureJobTables(db: Db): void {
  db.exec(jobTables);
  db.exec(jobIndexes);
}

/**
 * Rewrites a schema-2 file's `jobs` and `executions` as schema 3 in ONE transaction (a crash leaves the file at
 * schema 2, migrated again at the next open): new tables, rows copied (jobs in (shard, id) order get their
 * sequence; executions of a job with no row get a negative one in job_keys), old tables dropped, indexes and
 * counts made, node_meta schema_version = 3. Other tables are unchanged.
 */
export function migrateToSchema3(db: Db): void {
  const oldCols = new Set((db.prepare('PRAGMA table_info(jobs)').all() as Array<{ name: string }>).map((c) => c.name));
  const lifecycle = oldCols.has('finished_at') && oldCols.has('retain_ms') && oldCols.has('error_class');
  const lc = lifecycle ? 'finished_at, retain_ms, error_class' : 'NULL, NULL, NULL';
  db.transaction(() => {
    // Dropped with the old table anyway; the metadata index (metadata-index.ts) creates it again on the new one.
    db.exec('DROP TRIGGER IF EXISTS job_metadata_gc');
    db.exec(`
      CREATE TABLE jobs_v3 (
        job_seq INTEGER PRIMARY KEY, shard INTEGER NOT NULL, id TEXT NOT NULL, state TEXT NOT NULL, task TEXT,
        next_fire_at INTEGER, data BLOB NOT NULL, finished_at INTEGER, retain_ms INTEGER, error_class TEXT);
      INSERT INTO jobs_v3 (shard, id, state, task, next_fire_at, data, finished_at, retain_ms, error_class)
        SELECT shard, id, state, task, next_fire_at, data, ${lc} FROM jobs ORDER BY shard, id;
      CREATE UNIQUE INDEX jobs_v3_id ON jobs_v3 (id, shard);
      CREATE TABLE IF NOT EXISTS job_keys (seq INTEGER PRIMARY KEY, shard INTEGER NOT NULL, id TEXT NOT NULL);
      INSERT INTO job_keys (seq, shard, id)
        SELECT -row_number() OVER (ORDER BY shard, job_id), shard, job_id FROM
        (SELECT DISTINCT e.shard, e.job_id FROM executions e
         WHERE NOT EXISTS (SELECT 1 FROM jobs_v3 j WHERE j.id = e.job_id AND j.shard = e.shard));
      CREATE TABLE executions_v3 (
        job_seq INTEGER NOT NULL, scheduled_at INTEGER NOT NULL, state TEXT NOT NULL, data BLOB NOT NULL,
        PRIMARY KEY (job_seq, scheduled_at)) WITHOUT ROWID;
      INSERT INTO executions_v3 (job_seq, scheduled_at, state, data)
        SELECT coalesce(
          (SELECT j.job_seq FROM jobs_v3 j WHERE j.id = e.job_id AND j.shard = e.shard),
          (SELECT k.seq FROM job_keys k WHERE k.id = e.job_id AND k.shard = e.shard)), e.scheduled_at, e.state, e.data
        FROM executions e ORDER BY 1, 2;
      DROP TABLE jobs;
      DROP TABLE executions;
      ALTER TABLE jobs_v3 RENAME TO jobs;
      ALTER TABLE executions_v3 RENAME TO executions;
    `);
    // SQLite cannot rename an index: the one made for the copy is replaced by jobs_id.
    db.exec('DROP INDEX jobs_v3_id');
    ensureJobTables(db);
    recountJobs(db, null);
    if (!lifecycle) fillLifecycleColumns(db, null);
    db.prepare("UPDATE node_meta SET value = '3' WHERE key = 'schema_version'").run();
  })();
}

/** job_counts of the shard (null: of every shard) counted again from `jobs` (a migration, a restored image). */
export function recountJobs(db: Db, shard: number | null): void {
  const where = shard === null ? '' : ' WHERE shard = ?';
  const args = shard === null ? [] : [shard];
  db.prepare(`DELETE FROM job_counts${where}`).run(...args);
  db.prepare(`INSERT INTO job_counts (shard, state, n) SELECT shard, state, count(*) FROM jobs${where} GROUP BY shard, state`).run(...args);
}

/** A shard's changes to its per-state job counts (state -> change). */
export type CountChanges = Map<string, number>;

/**
 * The per-state job counts not yet written into job_counts, of every shard of one file. A command's changes are
 * written at its end (SqliteShardStore.commandEnded), inside its savepoint, unless the state batch's
 * transaction is open (`deferring`, set by StateBatch): then they wait here and StateBatch writes them all just
 * before its COMMIT, one statement for the whole batch instead of one or two upserts per job (the triggers of
 * earlier builds). What rolls back without a thrown command is a storage error's (a disk-full slice, a lost
 * batch): a lost batch drops them all (`discard`, its rows went too); a storage error seen inside the batch marks
 * the book `dirty`, and the next flush counts the rows again (count(*)) instead of trusting the sums.
 */
export class CountBook {
  private readonly byShard = new Map<number, CountChanges>();
  /** The state batch's transaction is open: a command's changes wait for its commit. */
  deferring = false;
  /** The sums may count writes a rolled-back savepoint undid: reads and the next flush count the rows. */
  dirty = false;
  /** The upsert of k (shard, state, change) rows, by k. */
  private readonly upserts: Statement[] = [];

  constructor(private readonly db: Db) {}

  static of(db: Db): CountBook {
    let book = books.get(db);
    if (book === undefined) books.set(db, (book = new CountBook(db)));
    return book;
  }

  /** Adds a finished command's changes: kept until the batch commits, or written now when no batch is open. */
  take(shard: number, changes: CountChanges): void {
    if (changes.size === 0) return;
    if (!this.deferring) return this.writeNow(shard, changes);
    let mine = this.byShard.get(shard);
    if (mine === undefined) this.byShard.set(shard, (mine = new Map()));
    for (const [state, d] of changes) mine.set(state, (mine.get(state) ?? 0) + d);
    changes.clear();
  }

  /** Writes a command's changes at once (a command that threw: inside its savepoint). */
  writeNow(shard: number, changes: CountChanges): void {
    try {
      this.write([[shard, changes]]);
    } finally {
      changes.clear();
    }
  }

  /** The change not yet written for the shard's state. */
  pending(shard: number, state: string): number {
    return this.byShard.get(shard)?.get(state) ?? 0;
  }

  /** Writes every waiting change (or counts the rows again when dirty); called inside the batch, before COMMIT. */
  flush(): void {
    const shards = [...this.byShard];
    this.byShard.clear();
    try {
      if (this.dirty) recountJobs(this.db, null);
      else this.write(shards);
      this.dirty = false;
    } catch (err) {
      // Written in part or not at all, and the transaction may go on: only a recount is sure.
      this.dirty = true;
      throw err;
    }
  }

  /**
   * A storage error was thrown inside the state batch: the node rolls a savepoint back and applies its entries
   * again, so the sums may count writes that are gone. (Outside the batch nothing waits here: the changes were
   * written with their rows, and go with them.)
   */
  storageFailed(): void {
    if (this.deferring) this.dirty = true;
  }

  /** The batch's transaction rolled back: its changes went with its rows. */
  discard(): void {
    this.byShard.clear();
    this.dirty = false;
    this.deferring = false;
  }

  /** A shard's rows were replaced (restoreShardImage counts them): its waiting changes are void. */
  dropShard(shard: number): void {
    this.byShard.delete(shard);
  }

  private write(shards: Array<[number, CountChanges]>): void {
    const args: unknown[] = [];
    for (const [shard, changes] of shards) for (const [state, d] of changes) if (d !== 0) args.push(shard, state, d);
    const k = args.length / 3;
    if (k === 0) return;
    let st = this.upserts[k];
    if (st === undefined) {
      const rows = Array.from({ length: k }, () => '(?, ?, ?)').join(', ');
      st = this.db.prepare(
        `INSERT INTO job_counts (shard, state, n) VALUES ${rows} ON CONFLICT (shard, state) DO UPDATE SET n = n + excluded.n`,
      );
      // A batch's rows: a handful of shards times states; kept for the common sizes only.
      if (k <= countUpsertsCachedMax) this.upserts[k] = st;
    }
    st.run(...args);
  }
}

/** Upsert statements kept per book (by row count). */
const countUpsertsCachedMax = 64;
const books = new WeakMap<Db, CountBook>();

/**
 * The id <-> job_seq mapping of one file. A sequence is found by the job's row (jobs_id), else by job_keys (the
 * executions of a job with no row); `seqFor` makes one there when neither has it.
 */
export class JobKeys {
  private readonly ofJob: Statement;
  private readonly ofOrphan: Statement;
  private readonly lowest: Statement;
  private readonly addOrphan: Statement;
  private readonly dropKey: Statement;
  private readonly moveExecs: Statement;

  constructor(db: Db) {
    this.ofJob = db.prepare('SELECT job_seq FROM jobs WHERE id = ? AND shard = ?').pluck();
    this.ofOrphan = db.prepare('SELECT seq FROM job_keys WHERE id = ? AND shard = ?').pluck();
    this.lowest = db.prepare('SELECT min(seq) FROM job_keys').pluck();
    this.addOrphan = db.prepare('INSERT INTO job_keys (seq, shard, id) VALUES (?, ?, ?)');
    this.dropKey = db.prepare('DELETE FROM job_keys WHERE seq = ?');
    this.moveExecs = db.prepare('UPDATE executions SET job_seq = ? WHERE job_seq = ?');
  }

  /** The job's sequence, or undefined when neither it nor an execution of it is stored. */
  seqOf(shard: number, id: string): number | undefined {
    return (this.ofJob.get(id, shard) as number | undefined) ?? this.orphanSeq(shard, id);
  }

  /** The job's sequence, made (negative, in job_keys) for an execution of a job with no row. */
  seqFor(shard: number, id: string): number {
    const seq = this.seqOf(shard, id);
    if (seq !== undefined) return seq;
    const made = Math.min(0, (this.lowest.get() as number | null) ?? 0) - 1;
    this.addOrphan.run(made, shard, id);
    return made;
  }

  orphanSeq(shard: number, id: string): number | undefined {
    return this.ofOrphan.get(id, shard) as number | undefined;
  }

  /** A job row was just inserted as `seq`: executions stored before it (under job_keys) move to it. */
  adoptOrphan(orphan: number, seq: number): void {
    this.moveExecs.run(seq, orphan);
    this.dropKey.run(orphan);
  }

  /** Forgets an orphan sequence (its last execution was deleted). */
  dropOrphan(seq: number): void {
    this.dropKey.run(seq);
  }
}
