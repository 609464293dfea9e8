/**
 * SqliteShardStore: the scheduler's state for ONE shard, in the node's SQLite file (every row has its shard; jobs and
 * executions are keyed by the job's sequence, job-keys.ts).
 * Synchronous like SchedulerStore; the node wraps the apply of a whole batch in one transaction. Statements are
 * prepared once per store and reused.
 */
import type { Statement } from 'better-sqlite3';
import { jobStates } from '../scheduler/types.js';
import type {
  CalendarRecord,
  DeadLetter,
  DeadLetterFilter,
  DeadLetterGroup,
  ExecutionRecord,
  JobRecord,
  JobState,
  TaskRecord,
} from '../scheduler/types.js';
import { errorClassOf, type ErrorClass } from '../scheduler/failure.js';
import type { DueJob, JobPageQuery, SchedulerStore } from '../scheduler/store.js';
import { isStorageError, type Db } from './db.js';
import { CountBook, JobKeys, rareStates, rareStateWhere, type CountChanges } from './job-keys.js';
import { indexedPairs, MetadataIndex, searchParams, searchSql } from './metadata-index.js';
import { shardImageRestores } from './shard-snapshot.js';
import { isNoSearch } from '../scheduler/search.js';
import {
  decodeCalendar,
  decodeExecution,
  decodeJob,
  decodeTask,
  encodeCalendar,
  encodeExecution,
  encodeJob,
  encodeTask,
  type ExecutionRow,
  type JobRow,
} from './rows.js';

const jobCols = 'id, state, task, next_fire_at, data';
/** An execution row has no job id (its key is the job's sequence): the caller's id is selected as job_id. */
const execCols = '? AS job_id, scheduled_at, state, data';
/** Live = not finished: finished_at is set exactly in the final states (lifecycle-schema.ts, index jobs_live). */
const live = `finished_at IS NULL`;
const open = `state IN ('QUEUED', 'RUNNING')`;
const closed = `state NOT IN ('QUEUED', 'RUNNING')`;

/** The indexed columns of a job row, in putJob's `values` order: an update sets only those that changed. */
const jobUpdateCols = ['state', 'task', 'next_fire_at', 'finished_at', 'retain_ms', 'error_class'] as const;
type JobKeyRow = [seq: number, state: string, task: string | null, nextFireAt: number | null, finishedAt: number | null, retainMs: number | null, errorClass: string | null];

function statements(db: Db) {
  const p = (sql: string): Statement => db.prepare(sql);
  return {
    getTask: p('SELECT data FROM tasks WHERE shard = ? AND name = ?').pluck(),
    putTask: p('INSERT OR REPLACE INTO tasks (shard, name, data) VALUES (?, ?, ?)'),
    deleteTask: p('DELETE FROM tasks WHERE shard = ? AND name = ?'),
    listTasks: p('SELECT name, data FROM tasks WHERE shard = ? ORDER BY name'),
    countLiveOfTask: p(`SELECT count(*) AS n FROM jobs WHERE shard = ? AND task = ? AND ${live}`),
    getCalendar: p('SELECT data FROM calendars WHERE shard = ? AND name = ?').pluck(),
    putCalendar: p('INSERT OR REPLACE INTO calendars (shard, name, data) VALUES (?, ?, ?)'),
    deleteCalendar: p('DELETE FROM calendars WHERE shard = ? AND name = ?'),
    listCalendars: p('SELECT name, data FROM calendars WHERE shard = ? ORDER BY name'),
    getJob: p(`SELECT ${jobCols} FROM jobs WHERE shard = ? AND id = ?`),
    // Within a command (HeldJob): the row with its sequence and the indexed columns putJob compares against.
    getJobHeld: p(`SELECT ${jobCols}, job_seq, finished_at, retain_ms, error_class FROM jobs WHERE shard = ? AND id = ?`),
    // putJob reads the indexed columns first (unless the command holds the row: HeldJob) and then inserts, or
    // updates only the columns that changed: SQLite rewrites the entries of every index that names a column in the
    // SET list (or in its WHERE), changed or not. finished_at, retain_ms, error_class: lifecycle-schema.ts.
    jobKeyRow: p(
      'SELECT job_seq, state, task, next_fire_at, finished_at, retain_ms, error_class FROM jobs WHERE id = ? AND shard = ?',
    ).raw(),
    insertJob: p(
      `INSERT INTO jobs (shard, id, state, task, next_fire_at, data, finished_at, retain_ms, error_class)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    ),
    // The held insert: a job the command read as absent. DO NOTHING instead of an error if it is there after all.
    insertJobIfAbsent: p(
      `INSERT INTO jobs (shard, id, state, task, next_fire_at, data, finished_at, retain_ms, error_class)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
    ),
    listJobs: p(`SELECT ${jobCols} FROM jobs WHERE shard = ? AND id > ? ORDER BY id LIMIT ?`),
    listJobsByState: p(`SELECT ${jobCols} FROM jobs WHERE shard = ? AND state = ? AND id > ? ORDER BY id LIMIT ?`),
    listJobsByTask: p(`SELECT ${jobCols} FROM jobs WHERE shard = ? AND task = ? AND id > ? ORDER BY id LIMIT ?`),
    listJobsByStateTask: p(
      `SELECT ${jobCols} FROM jobs WHERE shard = ? AND state = ? AND task = ? AND id > ? ORDER BY id LIMIT ?`,
    ),
    // Due-profile (GET /v1/due-profile, the admission report): counted on the jobs_due index alone.
    dueBySecond: p(
      `SELECT CAST((next_fire_at - ?) / 1000 AS INTEGER) AS s, count(*) AS n FROM jobs WHERE shard = ? AND state = 'PENDING'
       AND next_fire_at >= ? AND next_fire_at < ? GROUP BY s`,
    ),
    dueAt: p(`SELECT count(*) FROM jobs WHERE shard = ? AND state = 'PENDING' AND next_fire_at = ?`).pluck(),
    dueBetween: p(`SELECT count(*) FROM jobs WHERE shard = ? AND state = 'PENDING' AND next_fire_at >= ? AND next_fire_at < ?`).pluck(),
    // Keys only: answered from the jobs_due index alone (it holds id and next_fire_at), no row read or decoded.
    dueJobs: p(
      `SELECT id, next_fire_at FROM jobs WHERE shard = ? AND state = 'PENDING' AND next_fire_at <= ?
       ORDER BY next_fire_at, id LIMIT ?`,
    ).raw(),
    dueJobsAfter: p(
      `SELECT id, next_fire_at FROM jobs WHERE shard = ? AND state = 'PENDING' AND next_fire_at <= ?
       AND (next_fire_at, id) > (?, ?) ORDER BY next_fire_at, id LIMIT ?`,
    ).raw(),
    // Kept by the store (CountBook, job-keys.ts): no index leads with (shard, state) any more.
    countRowsByState: p('SELECT state, count(*) AS n FROM jobs WHERE shard = ? GROUP BY state'),
    countByState: p('SELECT state, n FROM job_counts WHERE shard = ?'),
    countOfState: p('SELECT n FROM job_counts WHERE shard = ? AND state = ?').pluck(),
    getExec: p(`SELECT ${execCols} FROM executions WHERE job_seq = ? AND scheduled_at = ?`),
    putExec: p(
      `INSERT INTO executions (job_seq, scheduled_at, state, data) VALUES (?, ?, ?, ?)
       ON CONFLICT (job_seq, scheduled_at) DO UPDATE SET state = excluded.state, data = excluded.data`,
    ),
    lastExec: p(`SELECT ${execCols} FROM executions WHERE job_seq = ? ORDER BY scheduled_at DESC LIMIT 1`),
    listExecs: p(`SELECT ${execCols} FROM executions WHERE job_seq = ? ORDER BY scheduled_at DESC LIMIT ?`),
    listExecsBefore: p(
      `SELECT ${execCols} FROM executions WHERE job_seq = ? AND scheduled_at < ? ORDER BY scheduled_at DESC LIMIT ?`,
    ),
    openExecs: p(`SELECT ${execCols} FROM executions WHERE job_seq = ? AND ${open} ORDER BY scheduled_at`),
    // The open executions of every shard (executions_open: few, the ones in flight or waiting for a retry), their
    // jobs' ids joined, sorted by (job id, scheduled_at); job_keys holds the ids of jobs with no row.
    allOpen: p(allOpenSql(false)),
    allOpenAfter: p(allOpenSql(true)),
  };
}

function allOpenSql(after: boolean): string {
  const page = after ? ' AND (k.id, e.scheduled_at) > (?, ?)' : '';
  const from = (keys: string, seq: string): string =>
    `SELECT k.id AS job_id, e.scheduled_at, e.state, e.data FROM executions e JOIN ${keys} k ON k.${seq} = e.job_seq
     WHERE e.${open} AND k.shard = ?${page}`;
  return `${from('jobs', 'job_seq')} UNION ALL ${from('job_keys', 'seq')} ORDER BY 1, 2 LIMIT ?`;
}

/**
 * Decoded tasks by name, so a callback's fire reads neither the row nor msgpack, and the firing path gets the
 * SAME object for every callback of a task (the dispatcher's per-spec header cache relies on it). Two levels:
 * - `committed`: served without reading the row. An entry is always a committed value: it is filled only by a
 *   read outside any transaction, and every write of the row (putTask, deleteTask) drops it first, whether its
 *   transaction then commits or rolls back. A restored snapshot rewrites the rows underneath: shard-snapshot.ts
 *   counts restores per database and a new count empties it.
 * - `decoded`: the record last decoded from each row's bytes, reused while a read finds the same bytes (inside a
 *   transaction too: it is keyed by what the row holds, so it cannot serve a rolled-back write).
 * The records are frozen: callers share them.
 */
class TaskCache {
  private readonly committed = new Map<string, TaskRecord>();
  private readonly decoded = new Map<string, { data: Uint8Array; task: TaskRecord }>();
  private restores = 0;

  constructor(private readonly db: Db) {}

  get(name: string): TaskRecord | undefined {
    const restores = shardImageRestores(this.db);
    if (restores !== this.restores) {
      this.committed.clear();
      this.restores = restores;
    }
    return this.committed.get(name);
  }

  /** The record of the row's bytes just read; kept as committed unless a transaction is open (it may roll back). */
  fromRow(name: string, data: Uint8Array): TaskRecord {
    const hit = this.decoded.get(name);
    let task: TaskRecord;
    if (hit !== undefined && Buffer.compare(hit.data, data) === 0) task = hit.task;
    else {
      task = Object.freeze(decodeTask(name, data));
      if (this.decoded.size >= taskCacheEntriesMax) this.decoded.clear();
      this.decoded.set(name, { data, task });
    }
    if (!this.db.inTransaction) {
      if (this.committed.size >= taskCacheEntriesMax) this.committed.clear();
      this.committed.set(name, task);
    }
    return task;
  }

  drop(name: string): void {
    this.committed.delete(name);
  }
}

/** Tasks whose decoded record is kept per store (cleared when full). */
const taskCacheEntriesMax = 1_024;

/**
 * The row of the job the command being applied works on, as the command last read or wrote it: putJob compares
 * the job with it instead of reading the row again, and the job's executions are found by its sequence without
 * looking the id up (a fired or outcome item went from 8 or more statements to 4). Kept only between
 * commandStarted and commandEnded, where nothing else writes the shard and nothing is rolled back.
 */
interface HeldJob {
  id: string;
  /** null: the job has no row. */
  seq: number | null;
  /** The indexed columns as stored, in jobUpdateCols order (unused while seq is null). */
  keys: readonly unknown[];
  /** The job has no job_metadata rows: its stored metadata has no indexed pair. */
  unindexed: boolean;
}

/** getJobHeld's row: the job's columns, its sequence and the indexed columns putJob sets. */
interface HeldJobRow extends JobRow {
  job_seq: number;
  finished_at: number | null;
  retain_ms: number | null;
  error_class: string | null;
}

export class SqliteShardStore implements SchedulerStore {
  private readonly s: ReturnType<typeof statements>;
  private readonly l: ReturnType<typeof lifecycleStatements>;
  private readonly tasks: TaskCache;
  private readonly metadataIndex: MetadataIndex;
  private readonly keys: JobKeys;
  /** The command's (or the write's, outside one) changes to the per-state job counts, handed to `book` at its end. */
  private readonly counts: CountChanges = new Map();
  private readonly book: CountBook;
  /** `UPDATE jobs` statements by the mask of the derived columns they set (putJob). */
  private readonly jobUpdates = new Map<number, Statement>();
  /** Prepared search statements by their SQL (a handful of shapes: which filters are given). */
  private readonly searches = new Map<string, Statement>();
  /** Between commandStarted and commandEnded (SchedulerStore): `held` may be kept. */
  private inCommand = false;
  private held: HeldJob | null = null;
  /**
   * Tasks read within the command (an outcomes command of a thousand jobs of one task reads its row once, not per
   * finished job for retain_ms): dropped with `held`, and by putTask / deleteTask.
   */
  private readonly commandTasks = new Map<string, TaskRecord>();

  constructor(
    private readonly db: Db,
    readonly shard: number,
  ) {
    this.s = statements(db);
    this.tasks = new TaskCache(db);
    this.metadataIndex = new MetadataIndex(db);
    this.l = lifecycleStatements(db);
    this.keys = new JobKeys(db);
    this.book = CountBook.of(db);
  }

  getTask(name: string): TaskRecord | null {
    const cached = this.tasks.get(name) ?? (this.inCommand ? this.commandTasks.get(name) : undefined);
    if (cached !== undefined) return cached;
    const data = this.s.getTask.get(this.shard, name) as Uint8Array | undefined;
    if (data === undefined) return null;
    const task = this.tasks.fromRow(name, data);
    if (this.inCommand) this.commandTasks.set(name, task);
    return task;
  }

  putTask(task: TaskRecord): void {
    this.commandTasks.delete(task.name);
    this.tasks.drop(task.name);
    this.s.putTask.run(this.shard, task.name, encodeTask(task));
  }

  deleteTask(name: string): boolean {
    this.commandTasks.delete(name);
    this.tasks.drop(name);
    return this.s.deleteTask.run(this.shard, name).changes > 0;
  }

  listTasks(): TaskRecord[] {
    const rows = this.s.listTasks.all(this.shard) as Array<{ name: string; data: Uint8Array }>;
    return rows.map((r) => decodeTask(r.name, r.data));
  }

  countLiveJobsOfTask(name: string): number {
    return (this.s.countLiveOfTask.get(this.shard, name) as { n: number }).n;
  }

  getCalendar(name: string): CalendarRecord | null {
    const data = this.s.getCalendar.get(this.shard, name) as Uint8Array | undefined;
    return data === undefined ? null : decodeCalendar(name, data);
  }

  putCalendar(calendar: CalendarRecord): void {
    this.s.putCalendar.run(this.shard, calendar.name, encodeCalendar(calendar));
  }

  deleteCalendar(name: string): boolean {
    return this.s.deleteCalendar.run(this.shard, name).changes > 0;
  }

  listCalendars(): CalendarRecord[] {
    const rows = this.s.listCalendars.all(this.shard) as Array<{ name: string; data: Uint8Array }>;
    return rows.map((r) => decodeCalendar(r.name, r.data));
  }

  commandStarted(): void {
    this.inCommand = true;
    this.held = null;
    this.commandTasks.clear();
  }

  commandEnded(failure?: { error: unknown }): void {
    this.inCommand = false;
    this.held = null;
    this.commandTasks.clear();
    if (failure === undefined) this.book.take(this.shard, this.counts);
    else if (isStorageError(failure.error)) {
      // The node rolls back past this command (and maybe earlier ones whose changes wait in the book).
      this.counts.clear();
      this.book.storageFailed();
    } else {
      // Written now, inside the command's savepoint: rolled back with its rows (the node), or kept with them.
      this.book.writeNow(this.shard, this.counts);
    }
  }

  private countChange(state: unknown, d: number): void {
    this.counts.set(state as string, (this.counts.get(state as string) ?? 0) + d);
  }

  getJob(id: string): JobRecord | null {
    if (!this.inCommand) {
      const row = this.s.getJob.get(this.shard, id) as JobRow | undefined;
      return row === undefined ? null : decodeJob(row);
    }
    const row = this.s.getJobHeld.get(this.shard, id) as HeldJobRow | undefined;
    if (row === undefined) {
      this.held = { id, seq: null, keys: [], unindexed: true };
      return null;
    }
    const job = decodeJob(row);
    const keys = [row.state, row.task, row.next_fire_at, row.finished_at, row.retain_ms, row.error_class];
    // Metadata with pairs is compared with its rows (sync); only none at all is known to have none.
    this.held = { id, seq: row.job_seq, keys, unindexed: job.metadata == null };
    return job;
  }

  putJob(job: JobRecord): void {
    const finished = job.state === 'SUCCEEDED' || job.state === 'FAILED' || job.state === 'CANCELLED';
    // Derived from replicated state only (the task as it is now, the last execution), so equal on every replica.
    const retainMs = finished && job.task !== null ? (this.getTask(job.task)?.retentionMs ?? null) : null;
    let errorClass: ErrorClass | null = null;
    if (job.state === 'FAILED') {
      const last = this.lastExecution(job.id);
      errorClass = errorClassOf(last?.statusCode ?? null, last?.error ?? null);
    }
    const finishedAt = finished ? job.updatedAtMs : null;
    const values = [job.state, job.task, job.nextFireAtMs, finishedAt, retainMs, errorClass];
    const held = this.held !== null && this.held.id === job.id ? this.held : null;
    const want = indexedPairs(job.metadata);
    let seq: number | null = null;
    if (held !== null && held.seq !== null) {
      seq = held.seq;
      this.updateJob(job, values, held.keys, seq);
      if (want.length > 0 || !held.unindexed) this.metadataIndex.sync(this.shard, job, want);
    } else if (held !== null) {
      // Read as absent by this command: no row to compare with, and no index rows (they go with the row).
      seq = this.insertJob(job, values, this.s.insertJobIfAbsent);
      if (seq !== null) this.metadataIndex.add(this.shard, job.id, want);
    }
    if (seq === null) {
      const old = this.s.jobKeyRow.get(job.id, this.shard) as JobKeyRow | undefined;
      if (old === undefined) seq = this.insertJob(job, values, this.s.insertJob)!;
      else this.updateJob(job, values, old.slice(1), (seq = old[0]));
      this.metadataIndex.sync(this.shard, job, want);
    }
    if (this.inCommand) this.held = { id: job.id, seq, keys: values, unindexed: want.length === 0 };
    else this.book.take(this.shard, this.counts);
  }

  /** Inserts the job's row; its sequence, or null when `insert` (insertJobIfAbsent) found the row there. */
  private insertJob(job: JobRecord, values: unknown[], insert: Statement): number | null {
    const [state, task, next, finishedAt, retainMs, errorClass] = values;
    const r = insert.run(this.shard, job.id, state, task, next, encodeJob(job), finishedAt, retainMs, errorClass);
    if (r.changes === 0) return null;
    const seq = Number(r.lastInsertRowid);
    this.countChange(state, 1);
    const orphan = this.keys.orphanSeq(this.shard, job.id);
    if (orphan !== undefined) this.keys.adoptOrphan(orphan, seq);
    return seq;
  }

  /** Updates the row's data and the indexed columns whose value differs from `old` (same order as values). */
  private updateJob(job: JobRecord, values: unknown[], old: readonly unknown[], seq: number): void {
    let mask = 0;
    const changed: unknown[] = [];
    for (let i = 0; i < values.length; i++) {
      if (old[i] !== values[i]) {
        mask |= 1 << i;
        changed.push(values[i]);
      }
    }
    this.jobUpdate(mask).run(encodeJob(job), ...changed, seq);
    if ((mask & 1) !== 0) {
      this.countChange(old[0], -1);
      this.countChange(values[0], 1);
    }
  }

  /** The job's sequence: the held one for the job the command works on, else looked up. */
  private seqOf(jobId: string): number | undefined {
    const held = this.held;
    if (held !== null && held.id === jobId && held.seq !== null) return held.seq;
    return this.keys.seqOf(this.shard, jobId);
  }

  /** `UPDATE jobs SET data, <the columns of mask>` by job_seq, prepared once per mask. */
  private jobUpdate(mask: number): Statement {
    let st = this.jobUpdates.get(mask);
    if (st === undefined) {
      const set = ['data = ?', ...jobUpdateCols.filter((_c, i) => (mask & (1 << i)) !== 0).map((c) => `${c} = ?`)];
      st = this.db.prepare(`UPDATE jobs SET ${set.join(', ')} WHERE job_seq = ?`);
      this.jobUpdates.set(mask, st);
    }
    return st;
  }

  listJobs(query: JobPageQuery): JobRecord[] {
    const after = query.afterId ?? '';
    if (query.search !== undefined && !isNoSearch(query.search)) return this.searchJobs(query, after);
    let rows: unknown[];
    // Only the rare states have an index by (state, id) (jobs_state_rare: a state change between common states
    // moves no entry); the others walk jobs_id and fill a page at once. A state the shard has no job in is
    // answered from job_counts without reading any.
    if (query.state !== null && this.countOf(query.state) === 0) return [];
    if (query.state !== null && rareStates.includes(query.state)) {
      // The index's WHERE repeated: SQLite takes a partial index only for a query whose WHERE holds its terms.
      // INDEXED BY: with a task too, reading the state's few jobs beats reading the task's many (jobs_task).
      const byTask = query.task === null ? '' : ' AND task = ?';
      const sql = `SELECT ${jobCols} FROM jobs INDEXED BY jobs_state_rare WHERE ${rareStateWhere} AND state = ? AND shard = ?${byTask}
        AND id > ? ORDER BY id LIMIT ?`;
      rows = this.cached(sql).all(query.state, this.shard, ...(query.task === null ? [] : [query.task]), after, query.limit);
    } else if (query.state !== null && query.task !== null) {
      rows = this.s.listJobsByStateTask.all(this.shard, query.state, query.task, after, query.limit);
    } else if (query.state !== null) {
      rows = this.s.listJobsByState.all(this.shard, query.state, after, query.limit);
    } else if (query.task !== null) {
      rows = this.s.listJobsByTask.all(this.shard, query.task, after, query.limit);
    } else {
      rows = this.s.listJobs.all(this.shard, after, query.limit);
    }
    return (rows as JobRow[]).map(decodeJob);
  }

  private searchJobs(query: JobPageQuery, after: string): JobRecord[] {
    const search = query.search!;
    const sql = searchSql(jobCols, search, query.state !== null, query.task !== null);
    let statement = this.searches.get(sql);
    if (statement === undefined) {
      statement = this.db.prepare(sql);
      this.searches.set(sql, statement);
    }
    const rows = statement.all(...searchParams(this.shard, after, search, query.state, query.task, query.limit));
    return (rows as JobRow[]).map(decodeJob);
  }

  dueJobs(untilMs: number, limit: number, after: { atMs: number; id: string } | null): DueJob[] {
    const rows =
      after === null
        ? this.s.dueJobs.all(this.shard, untilMs, limit)
        : this.s.dueJobsAfter.all(this.shard, untilMs, after.atMs, after.id, limit);
    const out = new Array<DueJob>(rows.length);
    for (let i = 0; i < rows.length; i++) {
      const [id, nextFireAtMs] = rows[i] as [string, number];
      out[i] = { id, nextFireAtMs };
    }
    return out;
  }

  /** PENDING jobs whose next occurrence falls in each second [fromMs + i s, fromMs + (i + 1) s), added into `counts`. */
  addDueBySecond(fromMs: number, counts: number[]): void {
    const untilMs = fromMs + counts.length * 1000;
    for (const row of this.s.dueBySecond.all(fromMs, this.shard, fromMs, untilMs) as Array<{ s: number; n: number }>) {
      counts[row.s] = (counts[row.s] ?? 0) + row.n;
    }
  }

  /** PENDING jobs whose next occurrence is exactly atMs. */
  countDueAt(atMs: number): number {
    return this.s.dueAt.get(this.shard, atMs) as number;
  }

  /** PENDING jobs whose next occurrence is in [fromMs, untilMs). */
  countDueBetween(fromMs: number, untilMs: number): number {
    return this.s.dueBetween.get(this.shard, fromMs, untilMs) as number;
  }

  countJobsByState(): Record<JobState, number> {
    const counts = Object.fromEntries(jobStates.map((s) => [s, 0])) as Record<JobState, number>;
    // Dirty (a storage error rolled back changes the book had summed): the rows themselves, until the recount.
    const dirty = this.book.dirty;
    for (const row of (dirty ? this.s.countRowsByState : this.s.countByState).all(this.shard) as Array<{ state: JobState; n: number }>) {
      counts[row.state] = row.n;
    }
    if (!dirty) for (const state of jobStates) counts[state] += this.pendingCount(state);
    return counts;
  }

  /** Jobs of the shard in `state`, the changes not yet written included. */
  private countOf(state: string): number {
    if (this.book.dirty) return this.countJobsByState()[state as JobState] ?? 0;
    return ((this.s.countOfState.get(this.shard, state) as number | undefined) ?? 0) + this.pendingCount(state);
  }

  private pendingCount(state: string): number {
    return this.book.pending(this.shard, state) + (this.counts.get(state) ?? 0);
  }

  getExecution(jobId: string, scheduledAtMs: number): ExecutionRecord | null {
    const seq = this.seqOf(jobId);
    if (seq === undefined) return null;
    const row = this.s.getExec.get(jobId, seq, scheduledAtMs) as ExecutionRow | undefined;
    return row === undefined ? null : decodeExecution(row);
  }

  putExecution(e: ExecutionRecord): void {
    const held = this.held;
    const seq = held !== null && held.id === e.jobId && held.seq !== null ? held.seq : this.keys.seqFor(this.shard, e.jobId);
    this.s.putExec.run(seq, e.scheduledAtMs, e.state, encodeExecution(e));
  }

  lastExecution(jobId: string): ExecutionRecord | null {
    const seq = this.seqOf(jobId);
    if (seq === undefined) return null;
    const row = this.s.lastExec.get(jobId, seq) as ExecutionRow | undefined;
    return row === undefined ? null : decodeExecution(row);
  }

  listExecutions(jobId: string, limit: number, beforeScheduledAtMs: number | null): ExecutionRecord[] {
    const seq = this.keys.seqOf(this.shard, jobId);
    if (seq === undefined) return [];
    const rows =
      beforeScheduledAtMs === null
        ? this.s.listExecs.all(jobId, seq, limit)
        : this.s.listExecsBefore.all(jobId, seq, beforeScheduledAtMs, limit);
    return (rows as ExecutionRow[]).map(decodeExecution);
  }

  openExecutions(jobId: string): ExecutionRecord[] {
    const seq = this.seqOf(jobId);
    if (seq === undefined) return [];
    return (this.s.openExecs.all(jobId, seq) as ExecutionRow[]).map(decodeExecution);
  }

  allOpenExecutions(limit: number, after: { jobId: string; scheduledAtMs: number } | null): ExecutionRecord[] {
    const rows =
      after === null
        ? this.s.allOpen.all(this.shard, this.shard, limit)
        : this.s.allOpenAfter.all(this.shard, after.jobId, after.scheduledAtMs, this.shard, after.jobId, after.scheduledAtMs, limit);
    return (rows as ExecutionRow[]).map(decodeExecution);
  }

  /** Runs fn in one transaction (nested calls become savepoints). */
  transaction<T>(fn: () => T): T {
    return this.db.transaction(fn)();
  }

  // --- retention (lifecycle-schema.ts) -------------------------------------------------------------------

  expiredJobs(nowMs: number, retentionMs: number | null, limit: number): string[] {
    const own = this.l.expiredOwn.all(this.shard, nowMs, limit) as string[];
    if (retentionMs === null || own.length >= limit) return own;
    return own.concat(this.l.expired.all(this.shard, nowMs - retentionMs, limit - own.length) as string[]);
  }

  deleteJob(id: string, executionsMax: number): { executions: number; deleted: boolean } {
    this.held = null;
    const seq = this.keys.seqOf(this.shard, id);
    if (seq === undefined) return { executions: 0, deleted: false };
    const executions = this.l.deleteOldestExecs.run(seq, seq, executionsMax).changes;
    if (this.l.anyExec.get(seq) !== undefined) return { executions, deleted: false };
    if (seq < 0) {
      // Executions of a job with no row: their key goes with the last of them.
      this.keys.dropOrphan(seq);
      return { executions, deleted: false };
    }
    const state = this.l.deleteJob.get(seq) as string | undefined;
    if (state === undefined) return { executions, deleted: false };
    this.countChange(state, -1);
    if (!this.inCommand) this.book.take(this.shard, this.counts);
    return { executions, deleted: true };
  }

  trimExecutions(jobId: string, keep: number, max: number): number {
    const seq = this.keys.seqOf(this.shard, jobId);
    if (seq === undefined) return 0;
    const boundary = this.l.execAtOffset.get(seq, keep) as number | undefined;
    if (boundary === undefined) return 0;
    return this.l.trimExecs.run(seq, seq, boundary, max).changes;
  }

  /**
   * The retention driver's sweep: of the (at most scanMax) jobs after afterId in id order, those with more than
   * `keep` executions. `nextAfterId` null: the sweep reached the last job.
   */
  jobsOverExecutions(afterId: string | null, scanMax: number, keep: number): { ids: string[]; nextAfterId: string | null } {
    const rows = this.l.jobIdsAfter.all(this.shard, afterId ?? '', scanMax) as Array<[string, number]>;
    const over = rows.filter(([, seq]) => this.l.execAtOffset.get(seq, keep) !== undefined).map(([id]) => id);
    return { ids: over, nextAfterId: rows.length < scanMax ? null : rows[rows.length - 1]![0] };
  }

  // --- dead letters (FAILED jobs) --------------------------------------------------------------------------

  /** Newest failure first, (failed_at, id) descending; strictly after `after` when given. */
  deadLetters(filter: DeadLetterFilter, limit: number, after: { failedAtMs: number; jobId: string } | null): DeadLetter[] {
    const { where, args } = deadLetterWhere(filter);
    const page = after === null ? '' : ' AND (finished_at, id) < (?, ?)';
    const sql = `SELECT id, task, error_class, finished_at FROM jobs WHERE shard = ? AND state = 'FAILED'${where}${page}
      ORDER BY finished_at DESC, id DESC LIMIT ?`;
    const pageArgs = after === null ? [] : [after.failedAtMs, after.jobId];
    const rows = this.cached(sql).all(this.shard, ...args, ...pageArgs, limit) as DeadLetterRow[];
    return rows.map((r) => this.deadLetterOf(r));
  }

  countDeadLetters(filter: DeadLetterFilter): number {
    const { where, args } = deadLetterWhere(filter);
    const sql = `SELECT count(*) FROM jobs WHERE shard = ? AND state = 'FAILED'${where}`;
    return this.cached(sql).pluck().get(this.shard, ...args) as number;
  }

  deadLetterGroups(): DeadLetterGroup[] {
    const rows = this.l.groups.all(this.shard) as Array<{ task: string | null; error_class: string | null; n: number; last: number }>;
    return rows.map((r) => ({ task: r.task, errorClass: (r.error_class ?? 'other') as ErrorClass, count: r.n, lastFailedAtMs: r.last }));
  }

  private deadLetterOf(r: DeadLetterRow): DeadLetter {
    const e = this.lastExecution(r.id);
    return {
      jobId: r.id,
      task: r.task,
      errorClass: (r.error_class ?? 'other') as ErrorClass,
      error: e?.error ?? null,
      statusCode: e?.statusCode ?? null,
      attempts: e?.attempt ?? 0,
      scheduledAtMs: e?.scheduledAtMs ?? null,
      failedAtMs: r.finished_at,
    };
  }

  private readonly statementCache = new Map<string, Statement>();

  /** The dead-letter queries have a handful of shapes (which filters are set): each prepared once. */
  private cached(sql: string): Statement {
    let st = this.statementCache.get(sql);
    if (st === undefined) {
      st = this.db.prepare(sql);
      this.statementCache.set(sql, st);
    }
    return st;
  }
}

interface DeadLetterRow {
  id: string;
  task: string | null;
  error_class: string | null;
  finished_at: number;
}

function deadLetterWhere(f: DeadLetterFilter): { where: string; args: unknown[] } {
  let where = '';
  const args: unknown[] = [];
  const add = (clause: string, value: unknown): void => {
    where += ` AND ${clause}`;
    args.push(value);
  };
  if (f.task !== null) add('task = ?', f.task);
  if (f.errorClass !== null) add('error_class = ?', f.errorClass);
  if (f.sinceMs !== null) add('finished_at >= ?', f.sinceMs);
  if (f.untilMs !== null) add('finished_at < ?', f.untilMs);
  return { where, args };
}

/** Statements of retention and dead letters (the columns and indexes of lifecycle-schema.ts). */
function lifecycleStatements(db: Db) {
  const p = (sql: string): Statement => db.prepare(sql);
  return {
    expiredOwn: p(
      `SELECT id FROM jobs WHERE shard = ? AND retain_ms IS NOT NULL AND finished_at + retain_ms <= ?
       ORDER BY finished_at + retain_ms, id LIMIT ?`,
    ).pluck(),
    expired: p(
      `SELECT id FROM jobs WHERE shard = ? AND finished_at IS NOT NULL AND retain_ms IS NULL AND finished_at <= ?
       ORDER BY finished_at, id LIMIT ?`,
    ).pluck(),
    deleteOldestExecs: p(
      `DELETE FROM executions WHERE job_seq = ? AND scheduled_at IN
       (SELECT scheduled_at FROM executions WHERE job_seq = ? ORDER BY scheduled_at LIMIT ?)`,
    ),
    anyExec: p('SELECT 1 FROM executions WHERE job_seq = ? LIMIT 1'),
    deleteJob: p('DELETE FROM jobs WHERE job_seq = ? RETURNING state').pluck(),
    /** The newest execution past the kept ones (OFFSET keep): it and every older one may go. */
    execAtOffset: p('SELECT scheduled_at FROM executions WHERE job_seq = ? ORDER BY scheduled_at DESC LIMIT 1 OFFSET ?').pluck(),
    trimExecs: p(
      `DELETE FROM executions WHERE job_seq = ? AND scheduled_at IN
       (SELECT scheduled_at FROM executions WHERE job_seq = ? AND scheduled_at <= ? AND ${closed}
        ORDER BY scheduled_at LIMIT ?)`,
    ),
    jobIdsAfter: p('SELECT id, job_seq FROM jobs WHERE shard = ? AND id > ? ORDER BY id LIMIT ?').raw(),
    groups: p(
      `SELECT task, error_class, count(*) AS n, max(finished_at) AS last FROM jobs WHERE shard = ? AND state = 'FAILED'
       GROUP BY task, error_class ORDER BY task, error_class`,
    ),
  };
}
