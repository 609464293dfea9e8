/**
 * The state file's write batch (etcd's backend): the scheduler's rows and each shard's applied index are written
 * into one open transaction on the state connection, committed at most every `intervalMs` or after `entriesMax`
 * applied entries, whichever comes first. Durability comes from the Raft log (its own file, fsynced every round):
 * the node applies only entries the log already holds durably, and after a crash it replays the log from the
 * applied index the state file holds. So a commit here writes each page a batch touched once, instead of once per
 * Raft round.
 *
 * Reads on the same connection see the batch's own writes, so the API and the firing core read applied state as
 * before. Code that runs `db.transaction(fn)` while the batch is open gets a savepoint inside it (better-sqlite3),
 * which is what the applier's per-entry savepoints need.
 *
 * The durable applied index (what a power loss cannot take back) moves only after a commit and its WAL fsync
 * (`sync`, on the thread pool; none with --fsync off or always): log compaction never passes it.
 */
import type { Db } from './db.js';
import { isDiskFullError } from './db.js';
import { CountBook } from './job-keys.js';
import { AppliedIndexes } from './shard-snapshot.js';

export interface StateBatchOptions {
  /** Longest time a batch stays open. */
  intervalMs: number;
  /** Applied entries after which the batch commits at its next turn. */
  entriesMax: number;
  /** After a commit failed on a full disk, the next try comes this much later. */
  retryMs: number;
  /** fsyncs the state file's WAL (--fsync batch); null when the commit itself is durable enough. */
  sync: (() => Promise<void>) | null;
  /** What the state holds as applied per shard right now (read at each commit: it is what the commit makes durable). */
  applied(): readonly number[];
  /** A commit failed other than on a full disk: the file cannot be trusted (the node exits; a restart replays the log). */
  onFatal(err: unknown): void;
  /**
   * A commit failed on a full disk; it is retried every interval until one succeeds. `lost`: SQLite rolled the
   * batch back, so the caller must write its applied state again (from the log) before the retry.
   */
  onFull(err: unknown, lost: boolean): void;
  /** A commit succeeded after onFull. */
  onSpace(): void;
  /** Each commit: how long COMMIT took and how many entries it covered (metrics). */
  onCommit?(ms: number, entries: number): void;
}

export class StateBatch {
  private open = false;
  private entries = 0;
  private timer: NodeJS.Timeout | null = null;
  private soon: NodeJS.Immediate | null = null;
  /** Commit every write at once (a backup copies the file between the event loop's turns). */
  private holds = 0;
  private full = false;
  private closed = false;
  private durable: number[];
  private syncing: Promise<void> = Promise.resolve();
  /** While above zero no commit happens (a follower's snapshot install waits for its log's fsync); `pending` then. */
  private blocks = 0;
  private pending = false;
  commits = 0;
  /** The job counts' changes of the commands applied into the batch: written just before its COMMIT. */
  private readonly counts: CountBook;
  /** Each shard's applied index of the batch's rows: written once, just before its COMMIT. */
  private readonly indexes: AppliedIndexes;

  constructor(
    private readonly db: Db,
    private readonly o: StateBatchOptions,
  ) {
    this.durable = [...o.applied()];
    this.counts = CountBook.of(db);
    this.indexes = AppliedIndexes.of(db);
  }

  /** The applied index of `shard` that survives a power loss (log compaction stops there). */
  durableApplied(shard: number): number {
    return this.durable[shard] ?? 0;
  }

  /** Opens the batch's transaction when none is open; call before writing applied state. */
  begin(): void {
    if (this.closed || this.db.inTransaction) return;
    this.db.exec('BEGIN');
    this.open = true;
    this.counts.deferring = true;
    // Indexes still waiting belong to a transaction that rolled back: its rows are gone.
    this.indexes.discard();
    this.indexes.deferring = true;
    if (this.holds > 0) return;
    this.timer ??= setTimeout(() => {
      this.timer = null;
      this.commit();
    }, this.o.intervalMs);
  }

  /**
   * `n` more entries were applied into the batch. While a hold is on (a backup), the batch commits at the end
   * of the current turn, so no transaction stays open while the event loop runs.
   */
  added(n: number): void {
    if (!this.open) return;
    this.entries += n;
    if (this.holds === 0 && this.entries < this.o.entriesMax) return;
    this.soon ??= setImmediate(() => {
      this.soon = null;
      this.commit();
    });
  }

  /** True while a transaction of the batch is open (tests; the disk-full path). */
  isOpen(): boolean {
    return this.open;
  }

  /**
   * Commits the open batch now (a snapshot install, a TRUNCATE checkpoint, close). Returns false when it could not
   * (a full disk: the batch stays open and is retried).
   */
  commit(): boolean {
    if (this.blocks > 0) {
      this.pending = true;
      return false;
    }
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (!this.open) return true;
    if (!this.db.inTransaction) {
      // A full disk inside a command's savepoint rolls back the whole transaction, not the savepoint alone: the
      // batch is gone (its rows and applied index with it) and is applied again, as after a lost COMMIT.
      this.open = false;
      this.entries = 0;
      this.counts.discard();
      this.indexes.discard();
      this.full = true;
      this.o.onFull(new Error('the state batch was rolled back by SQLite (a full disk inside a savepoint)'), true);
      // As after a failed COMMIT: one timer, the retry (onFull may have opened a new batch, which armed its own).
      if (this.timer !== null) clearTimeout(this.timer);
      this.timer = this.closed ? null : setTimeout(() => ((this.timer = null), this.commit()), this.o.retryMs);
      return false;
    }
    const applied = [...this.o.applied()];
    const start = performance.now();
    try {
      this.counts.flush();
      this.indexes.flush();
      this.db.exec('COMMIT');
    } catch (err) {
      this.open = this.db.inTransaction;
      // Rolled back: the counts' changes went with the rows (and come again with them).
      if (!this.open) {
        this.counts.discard();
        this.indexes.discard();
      }
      if (!isDiskFullError(err)) {
        this.o.onFatal(err);
        return false;
      }
      // SQLite may keep the transaction or roll it back; rolled back, the caller writes it again.
      if (!this.open) this.entries = 0;
      this.full = true;
      this.o.onFull(err, !this.open);
      // One timer at a time: onFull may have opened a new batch, which armed its interval.
      if (this.timer !== null) clearTimeout(this.timer);
      this.timer = this.closed ? null : setTimeout(() => ((this.timer = null), this.commit()), this.o.retryMs);
      return false;
    }
    this.o.onCommit?.(performance.now() - start, this.entries);
    this.open = false;
    this.counts.deferring = false;
    this.indexes.deferring = false;
    this.entries = 0;
    this.commits++;
    if (this.full) {
      this.full = false;
      this.o.onSpace();
    }
    const sync = this.o.sync;
    if (sync === null) this.durable = applied;
    else {
      // In order: a later commit's fsync covers the earlier ones too, but the durable index only moves forward.
      this.syncing = this.syncing.then(() =>
        sync().then(() => {
          this.durable = this.durable.map((d, i) => Math.max(d, applied[i] ?? 0));
        }),
      );
    }
    return true;
  }

  /**
   * No commit until the returned release is called (then one at once if any was asked for meanwhile): the rows
   * of a snapshot whose log write is not fsynced yet must not become durable before it.
   */
  block(): () => void {
    this.blocks++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.blocks--;
      if (this.blocks === 0 && this.pending) {
        this.pending = false;
        this.commit();
      }
    };
  }

  /** Until the returned release is called, every batch commits at the end of the turn that wrote it. */
  hold(): () => void {
    this.holds++;
    this.commit();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.holds--;
    };
  }

  /** Commits what is open and waits for its fsync; nothing opens afterwards. */
  async close(): Promise<void> {
    if (this.soon !== null) clearImmediate(this.soon);
    this.soon = null;
    this.commit();
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    await this.syncing;
  }

  /** Waits for the fsyncs of every commit so far. */
  synced(): Promise<void> {
    return this.syncing;
  }
}
