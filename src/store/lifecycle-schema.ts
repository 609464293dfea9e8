/**
 * The columns and indexes of data retention and dead letters (docs/api.md "Retention", "Dead letters"), added to
 * the `jobs` table of any file, new or older, in their own step after the base schema (db.ts). They are derived
 * from replicated state by SqliteShardStore.putJob, so every replica holds the same values:
 * - `finished_at`: a finished job's (SUCCEEDED, FAILED, CANCELLED) updatedAtMs; NULL while live.
 * - `retain_ms`: the job's task's `retentionMs` when it finished (NULL: the node's `--retention`).
 * - `error_class`: a FAILED job's error class (src/scheduler/failure.ts), from its last execution.
 * Partial indexes keep them off the firing path: a live job has none of these values, so writing it touches none.
 */
import { errorClassOf } from '../scheduler/failure.js';
import type { Db } from './db.js';
import { decodeExecution, decodeJob, unpack, type ExecutionRow, type JobRow } from './rows.js';

const columns = ['finished_at INTEGER', 'retain_ms INTEGER', 'error_class TEXT'];
/** The job states that set finished_at (shard-store.ts: `final`). */
export const finishedStates = `'SUCCEEDED', 'FAILED', 'CANCELLED'`;

/**
 * Schema 3 (job-keys.ts): the shard last, so a batch's entries sort by time across shards. `jobs_live`: the live
 * jobs of each task (countLiveJobsOfTask); on finished_at, not state, so a change between live states touches none.
 */
const indexes = `
CREATE INDEX IF NOT EXISTS jobs_expiry ON jobs (finished_at, id, shard) WHERE finished_at IS NOT NULL AND retain_ms IS NULL;
CREATE INDEX IF NOT EXISTS jobs_expiry_own ON jobs (finished_at + retain_ms, id, shard) WHERE retain_ms IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_dead ON jobs (finished_at, id, shard) WHERE state = 'FAILED';
CREATE INDEX IF NOT EXISTS jobs_dead_class ON jobs (task, error_class, finished_at, id, shard) WHERE state = 'FAILED';
CREATE INDEX IF NOT EXISTS jobs_live ON jobs (task, shard) WHERE finished_at IS NULL;
`;

/** Adds the columns (filling them for the finished jobs already stored) and the indexes; idempotent. */
export function migrateLifecycle(db: Db): void {
  const have = new Set((db.prepare('PRAGMA table_info(jobs)').all() as Array<{ name: string }>).map((c) => c.name));
  const missing = columns.filter((c) => !have.has(c.split(' ')[0]!));
  if (missing.length > 0) {
    db.transaction(() => {
      for (const c of missing) db.exec(`ALTER TABLE jobs ADD COLUMN ${c}`);
      fillLifecycleColumns(db, null);
    })();
  }
  db.exec(indexes);
}

/**
 * Fills the columns of finished jobs that have none (a file or a shard image from before them); `shard` null:
 * every shard. Runs inside the caller's transaction.
 */
export function fillLifecycleColumns(db: Db, shard: number | null): void {
  const rows = db
    .prepare(
      `SELECT job_seq, shard, id, state, task, next_fire_at, data FROM jobs
       WHERE (? IS NULL OR shard = ?) AND state IN (${finishedStates}) AND finished_at IS NULL`,
    )
    .all(shard, shard) as Array<JobRow & { shard: number; job_seq: number }>;
  const task = db.prepare('SELECT data FROM tasks WHERE shard = ? AND name = ?').pluck();
  const last = db.prepare(
    'SELECT ? AS job_id, scheduled_at, state, data FROM executions WHERE job_seq = ? ORDER BY scheduled_at DESC LIMIT 1',
  );
  const set = db.prepare('UPDATE jobs SET finished_at = ?, retain_ms = ?, error_class = ? WHERE job_seq = ?');
  for (const row of rows) {
    const job = decodeJob(row);
    const taskData = job.task === null ? undefined : (task.get(row.shard, job.task) as Uint8Array | undefined);
    const retainMs = taskData === undefined ? null : (unpack<{ retentionMs?: number | null }>(taskData).retentionMs ?? null);
    let errorClass: string | null = null;
    if (job.state === 'FAILED') {
      const e = last.get(job.id, row.job_seq) as ExecutionRow | undefined;
      const exec = e === undefined ? null : decodeExecution(e);
      errorClass = errorClassOf(exec?.statusCode ?? null, exec?.error ?? null);
    }
    set.run(job.updatedAtMs, retainMs, errorClass, row.job_seq);
  }
}
