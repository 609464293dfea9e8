/**
 * Group fsync off the event loop, for `--fsync batch`. SQLite commits with synchronous=NORMAL (the WAL frames
 * are written, not synced: a commit costs microseconds and never blocks the firing engine's timers), then this
 * fsyncs the WAL file on the libuv thread pool. Waiters registered before an fsync started are released when it
 * completes; later ones wait for the next one, so one fsync covers every commit that preceded it (the WAL is
 * append-only: syncing it makes every earlier frame durable too). This is exactly what synchronous=FULL does
 * in WAL mode, minus blocking the thread.
 *
 * An fsync error is fatal (the page cache state is unknown after a failed fsync): onFatal is called.
 */
import { close, closeSync, existsSync, fsync, fsyncSync, openSync, constants } from 'node:fs';
import { dirname } from 'node:path';

export class WalSyncer {
  private readonly fd: number;
  private running = false;
  private next: Array<() => void> = [];
  private closed = false;
  private idle: (() => void) | null = null;

  constructor(
    dbPath: string,
    private readonly onFatal: (err: unknown) => void,
  ) {
    const wal = `${dbPath}-wal`;
    if (!existsSync(wal)) throw new Error(`${wal} does not exist: open the database in WAL mode and write first`);
    this.fd = openSync(wal, constants.O_RDONLY);
    // The WAL file's directory entry must be durable too.
    const dirFd = openSync(dirname(dbPath), constants.O_RDONLY);
    try {
      fsyncSync(dirFd);
    } finally {
      closeSync(dirFd);
    }
  }

  /** Resolves once every commit made before this call is on stable storage. */
  sync(): Promise<void> {
    return new Promise<void>((resolve) => {
      this.next.push(resolve);
      if (!this.running) this.start();
    });
  }

  private start(): void {
    const batch = this.next;
    this.next = [];
    this.running = true;
    fsync(this.fd, (err) => {
      this.running = false;
      if (err) {
        // Fatal even when it is ENOSPC (unlike SQLITE_FULL at write time, which rolls back): after a failed fsync
        // the kernel may have dropped the unwritten pages, and a later fsync would report success without them.
        // The node exits; restarted, it re-reads what is durable (and refuses writes while the disk is full).
        const full = err.code === 'ENOSPC' || err.code === 'EDQUOT';
        this.onFatal(full ? Object.assign(new Error(`WAL fsync failed, disk full (${err.code}): exiting, a restart recovers what is durable`), { code: err.code }) : err);
        return;
      }
      for (const resolve of batch) resolve();
      if (this.next.length > 0) this.start();
      else if (this.idle !== null) this.idle();
    });
  }

  /** Waits for a running fsync, then closes the file descriptor. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.running) await new Promise<void>((resolve) => (this.idle = resolve));
    await new Promise<void>((resolve) => close(this.fd, () => resolve()));
  }
}
