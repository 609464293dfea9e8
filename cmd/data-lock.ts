/**
 * One `punctual serve` per data directory. Two processes on the same SQLite files are two Raft nodes with one
 * identity and one log: the second one's appends collide with the first one's and the first dies on a storage
 * error. The lock is an exclusive SQLite transaction on `<data>/serve.lock`, held for
 * the life of the process: the OS drops it when the process dies, so a crash never leaves a stale lock behind
 * (a pid file would, and a restarted container's pid 1 would look alive).
 */
import Database from 'better-sqlite3';
import { join } from 'node:path';
import { sqliteOpenOptions } from '../src/platform/sqlite.js';
import { privateFile, secureDataDir } from '../src/store/files.js';

export const lockFileName = 'serve.lock';

export interface DataLock {
  release(): void;
}

/** Thrown when another process holds the lock: a runtime failure (exit 1) with a one-line reason. */
export class DataDirInUseError extends Error {
  override name = 'DataDirInUseError';
  readonly code = 'EBUSY';
}

/** Takes the lock of `dataDir` (creating the directory), or throws DataDirInUseError at once (no waiting). */
export function lockDataDir(dataDir: string): DataLock {
  // The lock is taken first: the directory and every file in it are made private here (0700 / 0600).
  secureDataDir(dataDir);
  const db = new Database(privateFile(join(dataDir, lockFileName)), { ...sqliteOpenOptions(), timeout: 0 });
  try {
    db.pragma('locking_mode = EXCLUSIVE');
    db.exec('BEGIN EXCLUSIVE');
  } catch (err) {
    db.close();
    if (err instanceof Error && 'code' in err && String(err.code).startsWith('SQLITE_BUSY')) {
      throw new DataDirInUseError(`data directory ${dataDir} is in use by another punctual serve`);
    }
    throw err;
  }
  let held = true;
  return {
    release: () => {
      if (!held) return;
      held = false;
      db.exec('ROLLBACK');
      db.close();
    },
  };
}
