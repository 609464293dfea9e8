/**
 * WAL checkpoints on a worker thread, for `--fsync batch`. A checkpoint copies WAL pages into the database file
 * and fsyncs both: done by the main connection it would block the event loop (and the firing engine's timers)
 * for the duration of an fsync. So the main connection runs with wal_autocheckpoint=0 and this worker, with its
 * own connection (synchronous=FULL, so its checkpoints sync the WAL before and the database after copying),
 * runs a PASSIVE checkpoint every nodeLimits.walCheckpointIntervalMs; PASSIVE never waits for the writer.
 */
import { Worker } from 'node:worker_threads';
import type { Logger } from '../core/log.js';
import { sqliteModulePath } from '../platform/sqlite.js';

const workerSource = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.sqlitePath);
const db = new Database(workerData.dbPath);
db.pragma('synchronous = FULL');
db.pragma('busy_timeout = 1000');
const run = () => {
  try {
    db.pragma('wal_checkpoint(PASSIVE)');
  } catch (err) {
    parentPort.postMessage({ error: String(err && err.message), code: err && err.code });
  }
};
const timer = setInterval(run, workerData.intervalMs);
parentPort.on('message', (m) => {
  if (m !== 'close') return;
  clearInterval(timer);
  db.close();
  parentPort.close();
});
`;

export class Checkpointer {
  private readonly worker: Worker;
  private readonly exited: Promise<void>;

  constructor(dbPath: string, intervalMs: number, logger: Logger, onFatal: (err: unknown) => void) {
    const sqlitePath = sqliteModulePath(); // node_modules under Node; unpacked beside the addon in the single executable
    this.worker = new Worker(workerSource, { eval: true, workerData: { sqlitePath, dbPath, intervalMs } });
    this.worker.on('message', (m: { error: string; code?: string }) => {
      const code = m.code ?? '';
      // SQLITE_BUSY / LOCKED just mean "try again next time"; anything else about the file is fatal.
      if (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED')) return;
      // A full disk: the WAL keeps the pages (nothing is lost); the next checkpoint copies them once space returns.
      if (code === 'SQLITE_FULL') return logger.warn('checkpoint deferred: disk full', {});
      logger.error('checkpoint failed', { error: m.error, code });
      onFatal(Object.assign(new Error(m.error), { code }));
    });
    this.worker.on('error', (err) => {
      logger.error('checkpointer thread failed', { err });
      onFatal(err);
    });
    this.exited = new Promise((resolve) => this.worker.once('exit', () => resolve()));
  }

  /** Stops checkpointing and closes the worker's connection (before the main connection closes). */
  async close(): Promise<void> {
    this.worker.postMessage('close');
    await this.exited;
  }
}
