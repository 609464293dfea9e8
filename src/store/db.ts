/**
 * The node's one SQLite file (`<data>/punctual.db`, WAL mode) and its schema. Every table carries a `shard`
 * column so one file holds every shard group this node is a member of; in `jobs` and `executions` (job-keys.ts)
 * it is an indexed column, not their leading key, so one batch's writes of every shard share pages.
 *
 * Durability (`--fsync`):
 * - `always`: synchronous=FULL, and the node commits every proposal in its own transaction (one fsync each).
 * - `batch` (default): the node commits each group of proposals in one transaction with synchronous=NORMAL
 *   (no fsync inside SQLite, so a commit never blocks the event loop for a disk flush), then fsyncs the WAL
 *   file on the thread pool (WalSyncer, one fsync per group, covering every earlier commit) and only then
 *   acknowledges. Same guarantee as synchronous=FULL: an acknowledged job survives kill -9 and power loss.
 *   WAL checkpoints (which fsync too) run on a worker thread (Checkpointer), never inside a commit; it also keeps
 *   the WAL file under nodeLimits.walBytesSoftMax (TRUNCATE checkpoints), which PASSIVE ones alone do not.
 * - `off`: synchronous=OFF: SQLite never fsyncs. An acknowledged job survives kill -9 (the OS still holds the
 *   writes) but not a power loss or kernel crash.
 * In `always` and `off` SQLite checkpoints in the commit that passes 1,000 WAL pages (wal_autocheckpoint), with
 * no other writer running, so the WAL rewinds after it.
 */
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { nodeLimits } from '../core/limits.js';
import { sqliteOpenOptions } from '../platform/sqlite.js';
import { privateFile, secureDataDir } from './files.js';
import { ensureMetadataIndex } from './metadata-index.js';
import { migrateLifecycle } from './lifecycle-schema.js';
import { LogTable, logTableSchema } from './log-table.js';
import { ensureLogSchema, ensureRaftSchema } from './raft-storage.js';
import { ensureJobTables, migrateToSchema3 } from './job-keys.js';

export type FsyncMode = 'always' | 'batch' | 'off';
export type Db = Database.Database;

/** Bumped when the schema changes incompatibly; a file with another version is refused (an older one migrated). */
/** 2: the Raft log moved to raft_entries / raft_hard_state / raft_snapshot (raft-storage.ts). */
/** 3: jobs and executions keyed by the job's sequence (job_seq), the shard last in indexes (job-keys.ts). */
export const schemaVersion = 3;

/** Tables whose layout schema 3 kept. */
const schema = `
CREATE TABLE IF NOT EXISTS node_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tasks (
  shard INTEGER NOT NULL, name TEXT NOT NULL, data BLOB NOT NULL,
  PRIMARY KEY (shard, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS calendars (
  shard INTEGER NOT NULL, name TEXT NOT NULL, data BLOB NOT NULL,
  PRIMARY KEY (shard, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log (
  shard INTEGER NOT NULL, idx INTEGER NOT NULL, term INTEGER NOT NULL, data BLOB NOT NULL, crc INTEGER NOT NULL,
  PRIMARY KEY (shard, idx)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS raft_quarantine (
  shard INTEGER NOT NULL, idx INTEGER NOT NULL, term INTEGER NOT NULL, error TEXT NOT NULL, digest TEXT NOT NULL,
  bytes INTEGER NOT NULL, data BLOB NOT NULL,
  PRIMARY KEY (shard, idx)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS shard_meta (
  shard INTEGER PRIMARY KEY,
  term INTEGER NOT NULL DEFAULT 0, vote TEXT, commit_index INTEGER NOT NULL DEFAULT 0,
  applied_index INTEGER NOT NULL DEFAULT 0,
  snapshot_index INTEGER NOT NULL DEFAULT 0, snapshot_term INTEGER NOT NULL DEFAULT 0);
`;

export function synchronousPragma(mode: FsyncMode): 'FULL' | 'NORMAL' | 'OFF' {
  if (mode === 'always') return 'FULL';
  return mode === 'batch' ? 'NORMAL' : 'OFF';
}

export function dbFilePath(dataDir: string): string {
  return join(dataDir, 'punctual.db');
}

/** The Raft log of every group this node holds (raft-storage.ts): its own file, committed and fsynced every round. */
export function logFilePath(dataDir: string): string {
  return join(dataDir, 'raft-log.db');
}

/** The node's two files: the state (punctual.db: the scheduler's rows, written in batches) and the Raft log. */
export interface NodeDbs {
  state: Db;
  log: Db;
}

/**
 * Opens both files of a data directory. A directory made before the log had its own file (or a restored backup,
 * which is one file) holds its Raft tables in punctual.db: they are moved into raft-log.db first (copied and made
 * durable, then deleted from the state file; a crash in between finds the copy and only deletes).
 */
export function openNodeDbs(dataDir: string, fsync: FsyncMode): NodeDbs {
  const state = openNodeDb(dataDir, fsync);
  let log: Db;
  try {
    log = openLogFile(privateFile(logFilePath(dataDir)), fsync);
  } catch (err) {
    state.close();
    throw err;
  }
  try {
    moveRaftTables(state, log);
  } catch (err) {
    log.close();
    state.close();
    throw err;
  }
  return { state, log };
}

/**
 * The log file: raft_log (every group's log, log-table.ts), raft_hard_state and raft_snapshot, with the same
 * pragmas as the state file and pages of nodeLimits.logPageBytes. A file of the per-group layout (raft_entries)
 * is converted first (convertLogLayout).
 */
export function openLogFile(path: string, fsync: FsyncMode): Db {
  const db = new Database(path, sqliteOpenOptions());
  try {
    // Only takes effect before the first table of a new file (an older file gets it from the VACUUM below).
    db.pragma(`page_size = ${nodeLimits.logPageBytes}`);
    convertLogLayout(db);
    walPragmas(db, fsync, 16_384);
    ensureLogSchema(db);
  } catch (err) {
    db.close();
    throw err;
  }
  return db;
}

const raftTables = ['raft_entries', 'raft_hard_state', 'raft_snapshot'] as const;

function hasTable(db: Db, name: string, schemaName = 'main'): boolean {
  return db.prepare(`SELECT 1 FROM ${schemaName}.sqlite_master WHERE type = 'table' AND name = ?`).get(name) !== undefined;
}

function hasRaftRows(db: Db, schemaName = 'main'): boolean {
  const tables = [...raftTables, 'raft_log'].filter((t) => hasTable(db, t, schemaName));
  return tables.some((t) => db.prepare(`SELECT 1 FROM ${schemaName}.${t} LIMIT 1`).get() !== undefined);
}

/**
 * Converts a log file of the per-group layout (raft_entries keyed by (group_id, idx)) to raft_log: the rows are
 * moved in (group, idx) order in one transaction and raft_entries dropped, then VACUUM rewrites the file with
 * the page size set before (a WAL-mode file keeps its page size through a VACUUM, so the journal goes to DELETE
 * for it; the caller switches WAL back on). Nothing to do for a new file or one already converted.
 */
export function convertLogLayout(db: Db): void {
  if (!hasTable(db, 'raft_entries')) return;
  db.exec(logTableSchema);
  db.transaction(() => {
    db.exec(`INSERT INTO raft_log (group_id, idx, term, type, crc, data)
             SELECT group_id, idx, term, type, crc, data FROM raft_entries ORDER BY group_id, idx`);
    db.exec('DROP TABLE raft_entries');
  })();
  db.pragma('journal_mode = DELETE');
  db.pragma(`page_size = ${nodeLimits.logPageBytes}`);
  db.exec('VACUUM');
}

/** Moves Raft tables found in the state file into the log file (see openNodeDbs). */
export function moveRaftTables(state: Db, log: Db): void {
  if (!hasRaftRows(state)) return;
  if (!hasRaftRows(log)) {
    log.prepare('ATTACH DATABASE ? AS st').run(state.name);
    try {
      log.transaction(() => {
        for (const t of ['raft_hard_state', 'raft_snapshot']) log.exec(`INSERT INTO main.${t} SELECT * FROM st.${t}`);
        // A backup carries the log per group (raft_entries): into raft_log, in (group, idx) order.
        log.exec(`INSERT INTO main.raft_log (group_id, idx, term, type, crc, data)
                  SELECT group_id, idx, term, type, crc, data FROM st.raft_entries ORDER BY group_id, idx`);
        if (hasTable(log, 'raft_log', 'st')) {
          log.exec(`INSERT INTO main.raft_log (group_id, idx, term, type, crc, data)
                    SELECT group_id, idx, term, type, crc, data FROM st.raft_log ORDER BY seq`);
        }
      })();
    } finally {
      log.exec('DETACH DATABASE st');
    }
    LogTable.of(log).rebuild(true);
    // Durable before the state file forgets them: a checkpoint fsyncs the WAL and the file.
    log.pragma('wal_checkpoint(TRUNCATE)');
  }
  state.transaction(() => {
    for (const t of raftTables) state.exec(`DELETE FROM ${t}`);
    if (hasTable(state, 'raft_log')) state.exec('DELETE FROM raft_log');
  })();
}

/** Opens (creating if needed) `<dataDir>/punctual.db` with WAL and the schema; the directory and files private. */
export function openNodeDb(dataDir: string, fsync: FsyncMode): Db {
  secureDataDir(dataDir);
  return openDbFile(privateFile(dbFilePath(dataDir)), fsync);
}

/** Both files: WAL, the durability of --fsync, and a page cache of `cacheKiB`. */
function walPragmas(db: Db, fsync: FsyncMode, cacheKiB: number): void {
  db.pragma('journal_mode = WAL');
  db.pragma(`synchronous = ${synchronousPragma(fsync)}`);
  // --fsync batch: checkpoints (which fsync) run on the Checkpointer's thread, never in a commit.
  if (fsync === 'batch') db.pragma('wal_autocheckpoint = 0');
  // Without it the WAL file keeps its largest size forever; the truncation happens in the commit that rewinds it.
  db.pragma(`journal_size_limit = ${nodeLimits.walJournalSizeLimitBytes}`);
  db.pragma(`cache_size = -${cacheKiB}`);
}

export function openDbFile(path: string, fsync: FsyncMode): Db {
  const db = new Database(path, sqliteOpenOptions()); // {} under Node; the embedded addon in the single executable
  try {
    walPragmas(db, fsync, 65_536);
    db.pragma('temp_store = MEMORY');
    db.exec(schema);
    // Empty in a running node's state file (the log has its own): a backup carries them, and a restore moves them.
    ensureRaftSchema(db);
    checkSchemaVersion(db);
    ensureJobTables(db);
    ensureMetadataIndex(db);
    migrateLifecycle(db);
  } catch (err) {
    db.close();
    throw err;
  }
  return db;
}

/** Versions `openDbFile` reads: the current one, and 2, which it migrates (job-keys.ts: migrateToSchema3). */
export const readableSchemaVersions: readonly number[] = [2, schemaVersion];

function checkSchemaVersion(db: Db): void {
  const found = getNodeMeta(db, 'schema_version');
  if (found === null) {
    setNodeMeta(db, 'schema_version', String(schemaVersion));
    return;
  }
  if (Number(found) === 2) {
    migrateToSchema3(db);
    return;
  }
  if (Number(found) !== schemaVersion) {
    throw new Error(`database schema version ${found} is not supported (expected ${schemaVersion})`);
  }
}

export function getNodeMeta(db: Db, key: string): string | null {
  const row = db.prepare('SELECT value FROM node_meta WHERE key = ?').get(key) as { value: string } | undefined;
  return row === undefined ? null : row.value;
}

export function setNodeMeta(db: Db, key: string, value: string): void {
  db.prepare('INSERT INTO node_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value').run(
    key,
    value,
  );
}

/**
 * True for any error of the storage itself (the file, the disk), as opposed to an error of the data written: a
 * transaction that meets one is not the command's fault. A full disk is one (isDiskFullError) but not fatal.
 */
export function isStorageError(err: unknown): boolean {
  return isFatalStorageError(err) || isDiskFullError(err);
}

/**
 * SQLITE_FULL, or ENOSPC / EDQUOT from a write or an fsync: the disk (or quota) is full. Nothing written in the
 * failed transaction is kept; the node refuses writes (507) and retries until space returns.
 */
export function isDiskFullError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  // SHMSIZE: SQLite could not grow the WAL index file (-shm) next to the database, which it does by writing a
  // byte per page: on a full disk that write fails, and the commit that needed it is rolled back like any other.
  return code === 'SQLITE_FULL' || code === 'SQLITE_IOERR_SHMSIZE' || code === 'ENOSPC' || code === 'EDQUOT';
}

/** True for errors after which the database file can no longer be trusted: the process must exit. */
export function isFatalStorageError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || isDiskFullError(err)) return false;
  return (
    code.startsWith('SQLITE_IOERR') ||
    code.startsWith('SQLITE_CORRUPT') ||
    code === 'SQLITE_NOTADB' ||
    code.startsWith('SQLITE_CANTOPEN') ||
    code.startsWith('SQLITE_READONLY')
  );
}
