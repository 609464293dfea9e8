/**
 * The data directory holds signing secrets and receivers' authorization headers (tasks), so it is private to
 * the node's user whatever the umask: the directory 0700, every file in it 0600 (the SQLite database, its -wal
 * and -shm, the serve lock). SQLite creates -wal and -shm with the mode of the database file, so the database file
 * is created 0600 before SQLite opens it. Files and the directory left by an older version are fixed at start.
 */
import { chmodSync, closeSync, lstatSync, mkdirSync, openSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

export const dataDirMode = 0o700;
export const dataFileMode = 0o600;

/** Creates `dataDir` if needed and makes it and every file directly in it private (0700 / 0600). */
export function secureDataDir(dataDir: string): void {
  mkdirSync(dataDir, { recursive: true, mode: dataDirMode });
  try {
    chmodSync(dataDir, dataDirMode);
  } catch (err) {
    // A directory this user does not own (a volume mounted with a group, as Kubernetes' fsGroup does) keeps its
    // mode: the files in it, which the node creates and owns, are still 0600.
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') throw err;
  }
  for (const name of readdirSync(dataDir)) {
    const path = join(dataDir, name);
    const stat = lstatSync(path);
    if (stat.isFile() && (stat.mode & 0o777) !== dataFileMode) chmodSync(path, dataFileMode);
    else if (stat.isDirectory() && (stat.mode & 0o777) !== dataDirMode) chmodSync(path, dataDirMode);
  }
}

/** Creates `path` empty with mode 0600 if it does not exist (then SQLite opens it), and sets 0600 if it does. */
export function privateFile(path: string): string {
  closeSync(openSync(path, 'a', dataFileMode));
  chmodSync(path, dataFileMode);
  return path;
}
