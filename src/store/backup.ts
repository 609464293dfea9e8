/**
 * Online backups of the node's SQLite file, and the restore that turns such a copy into a data directory.
 *
 * Backup (`BackupTaker.take`, GET /v1/admin/backup): SQLite's online backup API through better-sqlite3's
 * `db.backup()`, on the node's own connection, `backupLimits.pagesPerStep` pages per step with the event loop
 * running between steps (firing and commits go on). Writes made through the same connection while it copies are
 * carried into the copy by SQLite itself, so the copy is the database as it stood when the last step ran: one
 * consistent state (every table, the Raft log and applied indexes together). The copy is written to a private
 * temporary file in the data directory, opened and unlinked, then streamed from the open descriptor. One
 * backup at a time (`backupLimits.concurrentMax`): another request meanwhile is refused.
 *
 * Restore (`restoreBackup`, `punctual restore`): checks the file (integrity_check, schema version, node identity)
 * and writes it as `<data>/punctual.db` of a data directory without one. As it was (a single node), or as a NEW
 * cluster: every shard's Raft state is rewritten so this node is its only voter, at a fresh term, with the
 * shard's rows as the snapshot at its applied index (compaction marker) and an empty log; the member book is
 * emptied. The other nodes then join with `serve --join` and `cluster add-node` and get the rows by snapshot.
 */
import Database from 'better-sqlite3';
import { randomUUID } from 'node:crypto';
import { copyFileSync, createReadStream, existsSync, fstatSync, openSync, readdirSync, renameSync, rmdirSync, rmSync, type ReadStream } from 'node:fs';
import { join } from 'node:path';
import { backupLimits } from '../core/limits.js';
import { PunctualError } from '../core/errors.js';
import type { Logger } from '../core/log.js';
import { sqliteOpenOptions } from '../platform/sqlite.js';
import { dbFilePath, logFilePath, readableSchemaVersions, type Db } from './db.js';
import { privateFile, secureDataDir } from './files.js';
import { pack, unpack } from './rows.js';

/** A finished copy, ready to stream: removed from disk once `stream` closes. */
export interface BackupDownload {
  bytes: number;
  stream: ReadStream;
  /** Suggested file name: `punctual-<node>-<UTC time>.db`. */
  fileName: string;
}

const tempPrefix = 'backup-';
const tempSuffix = '.tmp';

class BackupAborted extends Error {
  override name = 'BackupAborted';
}

export class BackupTaker {
  private running = 0;
  private copying: Promise<unknown> | null = null;
  private closed = false;

  /**
   * `log`: the node's Raft log file, copied into the backup after the state (one file, as restore reads it);
   * `hold`: while the copy runs, no log is compacted and the state's write batch commits every turn (the online
   * backup steps between the event loop's turns, and no transaction may stay open across them).
   */
  constructor(
    private readonly db: Db,
    private readonly dataDir: string,
    private readonly nodeId: string,
    private readonly logger: Logger,
    private readonly nowMs: () => number = Date.now,
    private readonly logFile: { log: Db; hold(): () => void } | null = null,
  ) {
    removeLeftovers(dataDir, logger);
  }

  /** Copies the database (stepwise, online) and answers a stream of the copy. 409 while another backup runs. */
  async take(): Promise<BackupDownload> {
    if (this.closed) throw new PunctualError('unavailable', 'the node is shutting down', [], 'shutting_down');
    if (this.running >= backupLimits.concurrentMax) throw new PunctualError('conflict', 'a backup of this node is already running; try again when it is done');
    this.running++;
    const path = join(this.dataDir, `${tempPrefix}${randomUUID()}${tempSuffix}`);
    let fd: number;
    const startedMs = this.nowMs();
    const release = this.logFile?.hold() ?? (() => undefined);
    try {
      const copy = this.copy(path, startedMs);
      this.copying = copy;
      await copy;
      if (this.logFile !== null) copyLog(this.logFile.log, path);
      // Opened, then unlinked at once: the open descriptor keeps the copy readable until the stream closes it, and
      // nothing is left on disk whatever happens to the stream (or the process) from here on.
      fd = openSync(path, 'r');
    } catch (err) {
      this.running--;
      if (err instanceof BackupAborted) throw new PunctualError('unavailable', err.message, [], 'shutting_down');
      throw err;
    } finally {
      release();
      this.copying = null;
      rmSync(path, { force: true });
    }
    const bytes = fstatSync(fd).size;
    this.logger.info('backup copied', { bytes, ms: this.nowMs() - startedMs });
    const stream = createReadStream(path, { fd, autoClose: true });
    stream.once('close', () => this.running--);
    return { bytes, stream, fileName: `punctual-${this.nodeId}-${new Date(startedMs).toISOString().replace(/[:.]/g, '-')}.db` };
  }

  /** Stops a copy in progress (at its next step) and waits for it; later requests are refused. */
  async close(): Promise<void> {
    this.closed = true;
    await this.copying?.catch(() => undefined);
  }

  private async copy(path: string, startedMs: number): Promise<void> {
    const check = (): void => {
      if (this.closed) throw new BackupAborted('backup abandoned: the node is shutting down');
      if (this.nowMs() - startedMs > backupLimits.durationMsMax) {
        throw new PunctualError('unavailable', `backup abandoned after ${backupLimits.durationMsMax} ms`);
      }
    };
    for (;;) {
      privateFile(path);
      const done = await this.db.backup(path, {
        progress: () => {
          check();
          return backupLimits.pagesPerStep;
        },
      });
      // A first step that found a write transaction open on the connection (SQLITE_BUSY) knows no page count yet,
      // and better-sqlite3 then ends the backup as if finished and removes the copy: start it again.
      if (done.totalPages > 0) return;
      check();
      await new Promise((resolve) => setImmediate(resolve));
    }
  }
}

/**
 * Writes the Raft tables of the log file into the copy of the state file. Compaction is held meanwhile, so the
 * log still holds every entry after the copy's applied indexes.
 */
function copyLog(log: Db, copyPath: string): void {
  const copy = new Database(copyPath, { ...sqliteOpenOptions(), fileMustExist: true });
  try {
    copy.prepare('ATTACH DATABASE ? AS lg').run(log.name);
    copy.transaction(() => {
      for (const t of ['raft_hard_state', 'raft_snapshot']) {
        copy.exec(`DELETE FROM main.${t}`);
        copy.exec(`INSERT INTO main.${t} SELECT * FROM lg.${t}`);
      }
      // The backup format keeps the log per group (raft_entries), whatever the log file's layout (raft_log).
      copy.exec('DELETE FROM main.raft_entries');
      copy.exec(`INSERT INTO main.raft_entries (group_id, idx, term, type, data, crc)
                 SELECT group_id, idx, term, type, data, crc FROM lg.raft_log ORDER BY group_id, idx`);
    })();
    copy.exec('DETACH DATABASE lg');
    // One file: nothing may stay in a WAL beside it.
    copy.pragma('wal_checkpoint(TRUNCATE)');
  } finally {
    copy.close();
  }
}

/** Copies left by a backup that never finished (the node was killed meanwhile). */
function removeLeftovers(dataDir: string, logger: Logger): void {
  if (!existsSync(dataDir)) return;
  for (const name of readdirSync(dataDir)) {
    if (!name.startsWith(tempPrefix) || !name.endsWith(tempSuffix)) continue;
    rmSync(join(dataDir, name), { force: true });
    logger.info('removed an unfinished backup copy', { file: name });
  }
}

// --- restore -------------------------------------------------------------------------------------------------

/** A backup file that cannot be restored as asked: the message says why (the CLI prints it). */
export class RestoreError extends Error {
  override name = 'RestoreError';
}

export interface BackupInfo {
  nodeId: string;
  shards: number;
  /** Voters and learners of each shard group, from the Raft snapshot row. */
  groups: Array<{ shard: number; voters: string[]; learners: string[]; appliedIndex: number }>;
  /** Other nodes in the member book (cluster_members). */
  members: string[];
  jobs: number;
}

export interface RestoreOptions {
  from: string;
  dataDir: string;
  /** The restored node's id: the backup's when null. Another id needs newCluster. */
  nodeId: string | null;
  /** Reset membership: this node alone, at a fresh term, in every shard. */
  newCluster: boolean;
}

export interface RestoreResult extends BackupInfo {
  /** The restored node's id (the backup's, or --node-id with --new-cluster). */
  restoredNodeId: string;
  path: string;
}

/** Reads what a backup holds, after checking it is a sound Punctual database of a schema version this code reads. */
export function inspectBackup(db: Db): BackupInfo {
  const check = db.prepare('PRAGMA integrity_check').pluck().all() as string[];
  if (check.length !== 1 || check[0] !== 'ok') throw new RestoreError(`the file fails SQLite's integrity check: ${check.slice(0, 3).join('; ')}`);
  const tables = new Set(db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").pluck().all() as string[]);
  for (const t of ['node_meta', 'jobs', 'shard_meta', 'raft_hard_state', 'raft_snapshot', 'raft_entries']) {
    if (!tables.has(t)) throw new RestoreError(`not a Punctual node database: table ${t} is missing`);
  }
  const meta = (key: string): string | null => (db.prepare('SELECT value FROM node_meta WHERE key = ?').pluck().get(key) as string | undefined) ?? null;
  const version = meta('schema_version');
  // Schema 2 is migrated to 3 when the node opens the restored file (db.ts: openDbFile).
  if (!readableSchemaVersions.includes(Number(version))) {
    throw new RestoreError(`schema version ${String(version)} is not one this version reads (${readableSchemaVersions.join(', ')})`);
  }
  const nodeId = meta('node_id');
  const shards = Number(meta('shards'));
  if (nodeId === null || !Number.isInteger(shards) || shards < 1) throw new RestoreError('the file has no node identity (node_id, shards): was the node ever started?');
  const groups = [];
  for (let shard = 0; shard < shards; shard++) {
    const snap = db.prepare('SELECT conf_state FROM raft_snapshot WHERE group_id = ?').pluck().get(shard) as Uint8Array | undefined;
    if (snap === undefined) throw new RestoreError(`shard ${shard} has no Raft state in this file (the node was not a member of it)`);
    const conf = unpack<{ voters: string[]; learners: string[] }>(snap);
    const applied = (db.prepare('SELECT applied_index FROM shard_meta WHERE shard = ?').pluck().get(shard) as number | undefined) ?? 0;
    groups.push({ shard, voters: [...conf.voters], learners: [...conf.learners], appliedIndex: applied });
  }
  const members = tables.has('cluster_members')
    ? (db.prepare('SELECT id FROM cluster_members WHERE removed = 0 AND id != ? ORDER BY id').pluck().all(nodeId) as string[])
    : [];
  const jobs = db.prepare('SELECT count(*) FROM jobs').pluck().get() as number;
  return { nodeId, shards, groups, members, jobs };
}

/** True when the backup came from a member of a cluster (other voters, learners or members): a new cluster then. */
export function isClusterBackup(info: BackupInfo): boolean {
  if (info.members.length > 0) return true;
  return info.groups.some((g) => g.learners.length > 0 || g.voters.some((v) => v !== info.nodeId));
}

/**
 * Rewrites every shard's Raft state for a one-voter cluster of `nodeId`: a fresh term (above every term the file
 * has seen), the log emptied, the snapshot at the shard's applied index as a compaction marker (the rows are
 * the state; a node that joins later is sent a real snapshot of them), commit = applied; and an empty member
 * book. Entries past the applied index are dropped: the backup endpoint waits until the node has applied what
 * was acknowledged before it started.
 */
export function resetToSingleVoter(db: Db, info: BackupInfo, nodeId: string): void {
  const hasLog = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'raft_log'").get() !== undefined;
  db.transaction(() => {
    for (const g of info.groups) {
      const termOf = (sql: string): number => (db.prepare(sql).pluck().get(g.shard) as number | null) ?? 0;
      const seen = Math.max(
        termOf('SELECT term FROM raft_hard_state WHERE group_id = ?'),
        termOf('SELECT term FROM raft_snapshot WHERE group_id = ?'),
        termOf('SELECT max(term) FROM raft_entries WHERE group_id = ?'),
        hasLog ? termOf('SELECT max(term) FROM raft_log WHERE group_id = ?') : 0,
      );
      // Index 1 is the bootstrap snapshot (an empty state); a restored state sits above it.
      const index = Math.max(g.appliedIndex, 2);
      const conf = pack({ voters: [nodeId], learners: [] });
      db.prepare('DELETE FROM raft_entries WHERE group_id = ?').run(g.shard);
      // A file whose storage wrote in place (one file, no log file of its own) holds its log as raft_log.
      if (hasLog) db.prepare('DELETE FROM raft_log WHERE group_id = ?').run(g.shard);
      db.prepare('INSERT OR REPLACE INTO raft_snapshot (group_id, idx, term, conf_state, data) VALUES (?, ?, ?, ?, ?)').run(g.shard, index, seen, conf, new Uint8Array(0));
      db.prepare('INSERT OR REPLACE INTO raft_hard_state (group_id, term, vote, commit_index, offset_index, offset_term) VALUES (?, ?, ?, ?, ?, ?)').run(
        g.shard,
        seen + 1,
        '',
        index,
        index,
        seen,
      );
      db.prepare('INSERT INTO shard_meta (shard, applied_index) VALUES (?, ?) ON CONFLICT (shard) DO UPDATE SET applied_index = excluded.applied_index').run(g.shard, index);
    }
    db.exec('CREATE TABLE IF NOT EXISTS cluster_members (id TEXT PRIMARY KEY, host TEXT NOT NULL, port INTEGER NOT NULL, removed INTEGER NOT NULL, version INTEGER NOT NULL)');
    db.prepare('DELETE FROM cluster_members').run();
    db.prepare("INSERT OR REPLACE INTO node_meta (key, value) VALUES ('node_id', ?)").run(nodeId);
  })();
}

/**
 * Restores `from` into `dataDir` (which must hold no database yet): checked, rewritten for a new cluster when
 * asked, then moved into place as `punctual.db` (written beside it first, so a failed restore leaves nothing).
 */
export function restoreBackup(o: RestoreOptions): RestoreResult {
  if (!existsSync(o.from)) throw new RestoreError(`${o.from}: no such file`);
  const target = dbFilePath(o.dataDir);
  if (existsSync(target) || existsSync(logFilePath(o.dataDir))) throw new RestoreError(`${o.dataDir} already holds a database: restore into a new, empty data directory`);
  const made = !existsSync(o.dataDir);
  secureDataDir(o.dataDir);
  const temp = join(o.dataDir, `restore-${randomUUID()}${tempSuffix}`);
  copyFileSync(o.from, privateFile(temp));
  try {
    const result = rewrite(temp, o);
    renameSync(temp, target);
    return { ...result, path: target };
  } catch (err) {
    for (const suffix of ['', '-wal', '-shm']) rmSync(temp + suffix, { force: true });
    // A refused restore leaves no data directory it made: the operator's next try starts as the first did.
    if (made) rmdirQuiet(o.dataDir);
    throw err;
  }
}

/** Removes a directory if it is empty (anything else in it is not ours to delete). */
function rmdirQuiet(path: string): void {
  try {
    rmdirSync(path);
  } catch {
    // not empty, or already gone
  }
}

function rewrite(path: string, o: RestoreOptions): Omit<RestoreResult, 'path'> {
  let db: Db;
  try {
    db = new Database(path, { ...sqliteOpenOptions(), fileMustExist: true });
  } catch (err) {
    throw new RestoreError(`cannot open the file as SQLite: ${(err as Error).message}`);
  }
  try {
    let info: BackupInfo;
    try {
      info = inspectBackup(db);
    } catch (err) {
      if (err instanceof RestoreError) throw err;
      throw new RestoreError(`not a readable Punctual backup: ${(err as Error).message}`);
    }
    const nodeId = o.nodeId ?? info.nodeId;
    if (!o.newCluster && nodeId !== info.nodeId) {
      throw new RestoreError(`the backup is of node ${info.nodeId}: restore it as that node, or give --new-cluster to start a new cluster as ${nodeId}`);
    }
    if (!o.newCluster && isClusterBackup(info)) {
      const others = [...new Set([...info.members, ...info.groups.flatMap((g) => [...g.voters, ...g.learners])])].filter((n) => n !== info.nodeId);
      throw new RestoreError(
        `the backup is of a cluster member (also ${others.join(', ')}): an old copy must not rejoin its cluster; give --new-cluster to start a new cluster from it`,
      );
    }
    if (o.newCluster) resetToSingleVoter(db, info, nodeId);
    // The copy keeps no WAL beside it: everything is in the one file that is moved into place.
    db.pragma('wal_checkpoint(TRUNCATE)');
    return { ...info, restoredNodeId: nodeId };
  } finally {
    db.close();
  }
}
