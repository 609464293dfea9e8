/**
 * WAL checkpoints on a worker thread, for `--fsync batch`. A checkpoint copies WAL pages into the database file
 * and fsyncs both: done by the main connection it would block the event loop (and the firing engine's timers)
 * for the duration of an fsync. So the main connection runs with wal_autocheckpoint=0 and this worker, with its
 * own connection (synchronous=FULL, so its checkpoints sync the WAL before and the database after copying),
 * runs a PASSIVE checkpoint every nodeLimits.walCheckpointIntervalMs; PASSIVE never waits for the writer.
 *
 * Why PASSIVE alone does not bound the WAL: SQLite rewinds the WAL to its beginning only when a write transaction
 * starts while every frame is already in the database file and no other reader uses the WAL. Under a steady load
 * the node commits during every checkpoint, so each one ends a few frames short and the file grows without end.
 * So the worker checkpoints again at once while one ends short (up to walCheckpointCatchUpMax times): the frames
 * left are few, the next one is short, and at a steady rate one usually ends with none left, so the WAL rewinds.
 * When the load leaves no such moment and the file passes walBytesSoftMax, a TRUNCATE checkpoint follows the
 * worker's PASSIVE one: it copies the frames written since, waits at most walTruncateBusyMs for readers, and
 * truncates the file to zero bytes. It runs on the main thread, between two of the node's transactions, on a
 * connection of its own: one that takes
 * the writer lock from another thread would make the node's transactions that read before they write fail with
 * SQLITE_BUSY at once (SQLite calls no busy handler for that upgrade), which is fatal to the node. So its stall
 * on the event loop is the TRUNCATE itself (the frames since the PASSIVE one, two fsyncs). A reader that keeps
 * frames pinned makes it fail (retried after walTruncateRetryMs); past walBytesHardMax the node logs a warning.
 */
import Database from 'better-sqlite3';
import { statSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { nodeLimits } from '../core/limits.js';
import type { Logger } from '../core/log.js';
import { sqliteModulePath, sqliteOpenOptions } from '../platform/sqlite.js';

const workerSource = `
const { parentPort, workerData } = require('node:worker_threads');
const { statSync } = require('node:fs');
const Database = require(workerData.sqlitePath);
const db = new Database(workerData.dbPath);
db.pragma('synchronous = FULL');
db.pragma('busy_timeout = 1000');
const walPath = workerData.dbPath + '-wal';
// Past the soft limit the main thread runs a TRUNCATE checkpoint, which needs the checkpoint lock this thread's
// PASSIVE ones take: they pause until it answers.
let paused = false;
const run = () => {
  if (paused) return;
  try {
    let r = db.pragma('wal_checkpoint(PASSIVE)')[0];
    // Frames committed during it are left: again at once (few frames, short), until one ends with every frame in the
    // database file and none new, so the node's next write transaction rewinds the WAL to its start.
    for (let i = 0; i < workerData.catchUpMax && r.log > 0; i++) {
      const again = db.pragma('wal_checkpoint(PASSIVE)')[0];
      const done = again.log === again.checkpointed && again.log <= r.log; // settled, or rewound by a write since
      r = again;
      if (done) break;
    }
    let bytes = 0;
    try {
      bytes = statSync(walPath).size;
    } catch {}
    paused = bytes > workerData.softMaxBytes;
    parentPort.postMessage({ bytes, log: r.log, checkpointed: r.checkpointed });
  } catch (err) {
    parentPort.postMessage({ error: String(err && err.message), code: err && err.code });
  }
};
const timer = setInterval(run, workerData.intervalMs);
parentPort.on('message', (m) => {
  if (m === 'resume') paused = false;
  if (m !== 'close') return;
  clearInterval(timer);
  db.close();
  parentPort.close();
});
`;

export interface CheckpointerOptions {
  intervalMs: number;
  /** Past this many bytes of WAL file, a TRUNCATE checkpoint follows the PASSIVE one. */
  softMaxBytes: number;
  /** Past this many bytes the node warns (once per crossing): checkpoints cannot bring the WAL down. */
  hardMaxBytes: number;
  truncateBusyMs: number;
  truncateRetryMs: number;
  /**
   * Runs right before a TRUNCATE checkpoint: the state file's write batch commits here, since the checkpoint needs
   * the writer lock that an open batch holds.
   */
  beforeTruncate?: () => void;
}

/** What one PASSIVE checkpoint of the worker reported: the WAL file's size after it, and its frames. */
interface RoundReport {
  bytes: number;
  log: number;
  checkpointed: number;
}

interface ErrorReport {
  error: string;
  code?: string;
}

export interface CheckpointerStats {
  /** Checkpoint rounds completed since start. */
  rounds: number;
  /** The WAL file's size after the last round, in bytes. */
  walBytes: number;
  truncates: number;
  /** TRUNCATE checkpoints that gave up: a reader kept part of the WAL pinned. */
  truncatesBusy: number;
  /** Longest TRUNCATE checkpoint: the event loop was blocked this long, in ms. */
  truncateMsMax: number;
}

/** The size of `<dbPath>-wal` in bytes (0 when it does not exist): what punctual_wal_bytes reports. */
export function walFileBytes(dbPath: string): number {
  try {
    return statSync(`${dbPath}-wal`).size;
  } catch {
    return 0;
  }
}

export class Checkpointer {
  private readonly worker: Worker;
  private readonly exited: Promise<void>;
  private readonly o: CheckpointerOptions;
  /** The main thread's connection for TRUNCATE checkpoints (synchronous=FULL: they sync like the worker's). */
  private readonly truncator: Database.Database;
  private readonly counts: CheckpointerStats = { rounds: 0, walBytes: 0, truncates: 0, truncatesBusy: 0, truncateMsMax: 0 };
  private truncateNotBeforeMs = 0;
  private overHardMax = false;
  private closed = false;

  constructor(
    private readonly dbPath: string,
    intervalMs: number,
    private readonly logger: Logger,
    private readonly onFatal: (err: unknown) => void,
    options: Partial<Omit<CheckpointerOptions, 'intervalMs'>> = {},
  ) {
    this.o = {
      intervalMs,
      softMaxBytes: options.softMaxBytes ?? nodeLimits.walBytesSoftMax,
      hardMaxBytes: options.hardMaxBytes ?? nodeLimits.walBytesHardMax,
      truncateBusyMs: options.truncateBusyMs ?? nodeLimits.walTruncateBusyMs,
      truncateRetryMs: options.truncateRetryMs ?? nodeLimits.walTruncateRetryMs,
      beforeTruncate: options.beforeTruncate,
    };
    this.truncator = new Database(dbPath, sqliteOpenOptions());
    this.truncator.pragma('synchronous = FULL');
    // It waits for readers holding the writer lock: the node cannot commit meanwhile.
    this.truncator.pragma(`busy_timeout = ${this.o.truncateBusyMs}`);
    const sqlitePath = sqliteModulePath(); // node_modules under Node; unpacked beside the addon in the single executable
    this.worker = new Worker(workerSource, { eval: true, workerData: { sqlitePath, dbPath, intervalMs, softMaxBytes: this.o.softMaxBytes, catchUpMax: nodeLimits.walCheckpointCatchUpMax } });
    this.worker.on('message', (m: RoundReport | ErrorReport) => {
      if ('error' in m) return this.failed(m);
      this.round(m);
    });
    this.worker.on('error', (err) => {
      logger.error('checkpointer thread failed', { err });
      onFatal(err);
    });
    this.exited = new Promise((resolve) => this.worker.once('exit', () => resolve()));
  }

  stats(): CheckpointerStats {
    return { ...this.counts };
  }

  private round(m: RoundReport): void {
    if (this.closed) return;
    const c = this.counts;
    c.rounds++;
    c.walBytes = m.bytes;
    // A message is handled between two of the node's transactions (better-sqlite3's are synchronous), never in one.
    if (m.bytes > this.o.softMaxBytes) {
      if (Date.now() >= this.truncateNotBeforeMs) c.walBytes = this.truncate(m);
      this.worker.postMessage('resume');
    }
    if (!this.overHardMax && c.walBytes > this.o.hardMaxBytes) {
      this.overHardMax = true;
      // Writes go on (refusing them would not shrink it): the disk must hold it until the reader lets go.
      this.logger.warn('WAL over its hard limit: checkpoints cannot bring it down (a reader holds an old snapshot?)', {
        walBytes: c.walBytes,
        hardMaxBytes: this.o.hardMaxBytes,
        framesLeft: m.log - m.checkpointed,
      });
    } else if (this.overHardMax && c.walBytes <= this.o.softMaxBytes) {
      this.overHardMax = false;
      this.logger.info('WAL back under its limit', { walBytes: c.walBytes, softMaxBytes: this.o.softMaxBytes });
    }
  }

  /** One TRUNCATE checkpoint; answers the WAL file's size after it. */
  private truncate(m: RoundReport): number {
    const c = this.counts;
    const startedMs = performance.now();
    let busy: boolean;
    try {
      this.o.beforeTruncate?.();
      busy = (this.truncator.pragma('wal_checkpoint(TRUNCATE)') as Array<{ busy: number }>)[0]!.busy === 1;
    } catch (err) {
      this.failed({ error: (err as Error).message, code: (err as { code?: string }).code });
      return walFileBytes(this.dbPath);
    }
    const ms = performance.now() - startedMs;
    c.truncates++;
    c.truncateMsMax = Math.max(c.truncateMsMax, ms);
    const bytes = walFileBytes(this.dbPath);
    this.logger.debug('wal truncate checkpoint', { busy, ms, walBytes: bytes });
    if (!busy) return bytes;
    c.truncatesBusy++;
    // Busy with every frame copied by the PASSIVE one: a short read, or the writer lock was taken; the next round
    // tries again. Frames left: a reader pins them, and each try would block the node for
    // truncateBusyMs in vain, so wait a while.
    if (m.log > m.checkpointed) this.truncateNotBeforeMs = Date.now() + this.o.truncateRetryMs;
    return bytes;
  }

  private failed(m: ErrorReport): void {
    const code = m.code ?? '';
    // SQLITE_BUSY / LOCKED just mean "try again next time"; anything else about the file is fatal.
    if (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED')) return;
    // A full disk: the WAL keeps the pages (nothing is lost); the next checkpoint copies them once space returns.
    if (code === 'SQLITE_FULL') return this.logger.warn('checkpoint deferred: disk full', {});
    this.logger.error('checkpoint failed', { error: m.error, code });
    this.onFatal(Object.assign(new Error(m.error), { code }));
  }

  /** Stops checkpointing and closes both connections (before the main connection closes). */
  async close(): Promise<void> {
    this.closed = true;
    this.worker.postMessage('close');
    await this.exited;
    this.truncator.close();
  }
}
