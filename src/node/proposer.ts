/**
 * Proposals and group commit. Every state change of the node goes through here: a command is appended to its
 * shard's log and applied to the shard's tables in the SAME SQLite transaction that advances applied_index
 * (single node: the node leads every shard with term 1; the Raft issue splits append from apply).
 *
 * Batching: proposals queue up and are flushed on setImmediate, so a burst of HTTP requests shares one
 * transaction (one fsync with --fsync batch). A flush takes at most limits.commitBatchCommandsMax commands;
 * with --fsync always every command gets its own transaction. The firing engine's fired / skipped / outcome
 * items are gathered per shard and become at most three commands per shard per flush, in that order (an outcome
 * always follows the fired item of its attempt, which was queued first).
 *
 * After the commit, each command's effects are handed to onApplied (the firing engine) BEFORE the proposer's
 * promise resolves, so a created job is already armed when the API answers.
 */
import { assert } from '../core/assert.js';
import { PunctualError } from '../core/errors.js';
import { limits, nodeLimits } from '../core/limits.js';
import type { Clock } from '../core/clock.js';
import type { Logger } from '../core/log.js';
import { encodeCommand } from '../scheduler/codec.js';
import { apply } from '../scheduler/machine.js';
import type { Command, Effect, FiredItem, OutcomeItem, SkippedItem } from '../scheduler/commands.js';
import type { NodeMetrics } from '../metrics/metrics.js';
import { isFatalStorageError, type Db, type FsyncMode } from '../store/db.js';
import type { SqliteLogStorage } from '../store/log-storage.js';
import type { SqliteShardStore } from '../store/shard-store.js';
import type { WalSyncer } from '../store/wal-sync.js';

/** The single node leads every shard in this term (the fencing token is `${shard}.${leaderTerm}`). */
export const leaderTerm = 1;

export interface ShardStorage {
  shard: number;
  store: SqliteShardStore;
  log: SqliteLogStorage;
  lastIndex: number;
  appliedIndex: number;
  appliedSinceCompact: number;
}

export interface Applied {
  result: unknown;
  effects: Effect[];
}

export interface ProposerOptions {
  nodeId: string;
  db: Db;
  shards: ShardStorage[];
  fsync: FsyncMode;
  clock: Clock;
  logger: Logger;
  metrics: NodeMetrics;
  /**
   * Called once per applied command, in log order, after the transaction committed; also (with no effects) for
   * an engine command that could not be applied, so the engine forgets what it was waiting for.
   */
  onApplied: (shard: number, command: Command, effects: Effect[]) => void;
  /** A storage error after which the file cannot be trusted (exit 1 in production). */
  onFatal: (err: unknown) => void;
  /** --fsync batch: the WAL is fsynced off the event loop after each group commit, before acknowledging. */
  walSync: WalSyncer | null;
}

interface Pending {
  shard: number;
  command: Command;
  resolve: (a: Applied) => void;
  reject: (e: unknown) => void;
}

interface EngineItems {
  fired: FiredItem[];
  skipped: SkippedItem[];
  outcomes: OutcomeItem[];
}

interface Staged {
  pending: Pending | null;
  /** Several create_jobs proposals of one shard merged into this command: each gets its slice of the items. */
  parts: Array<{ pending: Pending; count: number }> | null;
  shard: number;
  command: Command;
  applied: Applied | null;
  error: unknown;
}

export class Proposer {
  private queue: Pending[] = [];
  private items = new Map<number, EngineItems>();
  private scheduled: NodeJS.Immediate | null = null;
  private itemsTimer: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(private readonly o: ProposerOptions) {}

  propose(shard: number, command: Command): Promise<Applied> {
    if (this.closed) return Promise.reject(new PunctualError('unavailable', 'node is shutting down'));
    return new Promise<Applied>((resolve, reject) => {
      this.queue.push({ shard, command, resolve, reject });
      this.schedule();
    });
  }

  addFired(shard: number, item: FiredItem): void {
    this.itemsOf(shard).fired.push(item);
    this.schedule();
  }

  addSkipped(shard: number, item: SkippedItem): void {
    this.itemsOf(shard).skipped.push(item);
    this.schedule();
  }

  addOutcome(shard: number, item: OutcomeItem): void {
    this.itemsOf(shard).outcomes.push(item);
    this.schedule();
  }

  /** Commands and items waiting for the next flush. */
  pendingCount(): number {
    return this.queue.length + this.items.size;
  }

  /** Refuses new proposals, flushes everything pending and waits until it is durable. */
  async close(): Promise<void> {
    this.closed = true;
    this.flushAll();
    if (this.scheduled !== null) clearImmediate(this.scheduled);
    if (this.itemsTimer !== null) clearTimeout(this.itemsTimer);
    this.scheduled = null;
    this.itemsTimer = null;
    if (this.o.walSync !== null) {
      await this.o.walSync.sync();
      await this.o.walSync.close();
    }
  }

  /** Flush whatever is pending now (close, tests). */
  flushAll(): void {
    while (this.queue.length > 0 || this.items.size > 0) this.flush();
  }

  private itemsOf(shard: number): EngineItems {
    let it = this.items.get(shard);
    if (it === undefined) {
      it = { fired: [], skipped: [], outcomes: [] };
      this.items.set(shard, it);
    }
    return it;
  }

  /**
   * Proposals are flushed on the next setImmediate (a burst of requests shares it). The engine's own items
   * wait up to limits.commitBatchDelayMs for company: they delay no send, and at a steady firing rate this turns
   * two small transactions per callback into one per millisecond.
   */
  private schedule(): void {
    if (this.scheduled !== null) return;
    if (this.queue.length === 0) {
      if (this.itemsTimer === null) this.itemsTimer = setTimeout(() => this.runFlush(), limits.commitBatchDelayMs);
      return;
    }
    this.scheduled = setImmediate(() => this.runFlush());
  }

  private runFlush(): void {
    if (this.scheduled !== null) clearImmediate(this.scheduled);
    if (this.itemsTimer !== null) clearTimeout(this.itemsTimer);
    this.scheduled = null;
    this.itemsTimer = null;
    this.flush();
    if (this.queue.length > 0 || this.items.size > 0) this.schedule();
  }

  /** One group commit: engine items first, then up to the batch limit of proposals. */
  private flush(): void {
    const nowMs = this.o.clock.nowMs();
    const staged: Staged[] = [];
    for (const [shard, it] of this.items) {
      const push = (command: Command): void => {
        staged.push({ pending: null, parts: null, shard, command, applied: null, error: null });
      };
      if (it.fired.length > 0) push({ type: 'fired', nowMs, nodeId: this.o.nodeId, items: it.fired });
      if (it.skipped.length > 0) push({ type: 'skipped', nowMs, items: it.skipped });
      if (it.outcomes.length > 0) push({ type: 'outcomes', nowMs, items: it.outcomes });
    }
    this.items.clear();
    const take = Math.max(0, limits.commitBatchCommandsMax - staged.length);
    const creates = new Map<number, Staged>();
    for (const p of this.queue.splice(0, take)) {
      if (!this.mergeCreate(p, creates, staged)) {
        staged.push({ pending: p, parts: null, shard: p.shard, command: p.command, applied: null, error: null });
      }
    }
    if (staged.length === 0) return;
    this.commit(staged);
  }

  /**
   * Concurrent create_jobs proposals of one shard (a burst of POST /v1/jobs) become one command: one log entry
   * and one apply instead of one each. They were concurrent, so no order between them and the other commands
   * of the flush is promised. Not with --fsync always (one transaction per proposal).
   */
  private mergeCreate(p: Pending, creates: Map<number, Staged>, staged: Staged[]): boolean {
    const c = p.command;
    if (c.type !== 'create_jobs' || this.o.fsync === 'always') return false;
    const into = creates.get(p.shard);
    if (into !== undefined && into.command.type === 'create_jobs' && into.command.jobs.length + c.jobs.length <= limits.batchJobsMax) {
      into.command.jobs.push(...c.jobs);
      into.command.nowMs = Math.max(into.command.nowMs, c.nowMs);
      into.parts!.push({ pending: p, count: c.jobs.length });
      return true;
    }
    const s: Staged = {
      pending: null,
      parts: [{ pending: p, count: c.jobs.length }],
      shard: p.shard,
      command: { ...c, jobs: [...c.jobs] },
      applied: null,
      error: null,
    };
    creates.set(p.shard, s);
    staged.push(s);
    return true;
  }

  /** --fsync always: one transaction (one fsync) per command; otherwise one for the whole batch. */
  private commit(staged: Staged[]): void {
    const groups = this.o.fsync === 'always' ? staged.map((s) => [s]) : [staged];
    for (const group of groups) {
      const startNs = process.hrtime.bigint();
      try {
        this.transaction(group);
      } catch (err) {
        this.failed(group, err);
        continue;
      }
      this.o.metrics.commitDurationMs.observe(Number(process.hrtime.bigint() - startNs) / 1e6);
      this.o.metrics.commitBatchSize.observe(group.length);
      this.settle(group);
    }
  }

  private transaction(staged: Staged[]): void {
    const touched = new Set<ShardStorage>();
    const lastIndexes = new Map<ShardStorage, number>();
    const run = this.o.db.transaction(() => {
      for (const s of staged) {
        const sh = this.o.shards[s.shard];
        if (!lastIndexes.has(sh)) lastIndexes.set(sh, sh.lastIndex);
        this.applyOne(sh, s);
        touched.add(sh);
      }
      for (const sh of touched) this.finishShard(sh);
    });
    try {
      run();
    } catch (err) {
      // The transaction rolled back: so do the in-memory indexes.
      for (const [sh, idx] of lastIndexes) {
        sh.lastIndex = idx;
        sh.appliedIndex = idx;
      }
      throw err;
    }
  }

  /** Appends and applies one command inside a savepoint: a command whose apply throws is dropped alone. */
  private applyOne(sh: ShardStorage, s: Staged): void {
    const data = encodeCommand(s.command);
    try {
      this.o.db.transaction(() => {
        const index = sh.log.appendNext(leaderTerm, data, sh.lastIndex);
        s.applied = apply(sh.store, s.command);
        sh.lastIndex = index;
        sh.appliedIndex = index;
        sh.appliedSinceCompact++;
      })();
    } catch (err) {
      if (isFatalStorageError(err)) throw err;
      s.error = err;
      this.o.logger.error('apply failed; command dropped', { shard: sh.shard, type: s.command.type, err });
    }
  }

  private finishShard(sh: ShardStorage): void {
    sh.log.setAppliedIndex(sh.appliedIndex);
    sh.log.setCommitIndex(sh.appliedIndex);
    if (sh.appliedSinceCompact >= nodeLimits.logCompactEveryEntries) {
      const upTo = sh.appliedIndex - nodeLimits.logKeepEntries;
      if (upTo >= sh.log.firstIndex()) sh.log.compact(upTo);
      sh.appliedSinceCompact = 0;
    }
  }

  /**
   * Effects go to the engine at once (firing never waits for a disk flush); proposers are answered once the
   * commit is durable (at once unless --fsync batch, where the WAL fsync runs on the thread pool first).
   */
  private settle(group: Staged[]): void {
    const answered: Array<{ p: Pending; a: Applied }> = [];
    for (const s of group) {
      if (s.applied === null) {
        this.dropped(s, new PunctualError('internal', 'command could not be applied'));
        continue;
      }
      try {
        this.o.onApplied(s.shard, s.command, s.applied.effects);
      } catch (err) {
        this.o.logger.error('effect handling failed', { shard: s.shard, type: s.command.type, err });
      }
      if (s.pending !== null) answered.push({ p: s.pending, a: s.applied });
      if (s.parts !== null) answered.push(...splitCreate(s.parts, s.applied));
    }
    if (answered.length === 0) return;
    if (this.o.walSync === null) {
      for (const { p, a } of answered) p.resolve(a);
      return;
    }
    void this.o.walSync.sync().then(() => {
      for (const { p, a } of answered) p.resolve(a);
    });
  }

  private dropped(s: Staged, err: PunctualError): void {
    if (s.pending !== null || s.parts !== null) {
      s.pending?.reject(err);
      for (const part of s.parts ?? []) part.pending.reject(err);
      return;
    }
    try {
      this.o.onApplied(s.shard, s.command, []);
    } catch (e) {
      this.o.logger.error('effect handling failed', { shard: s.shard, type: s.command.type, err: e });
    }
  }

  private failed(staged: Staged[], err: unknown): void {
    if (isFatalStorageError(err)) {
      this.o.onFatal(err);
    }
    this.o.logger.error('group commit failed', { commands: staged.length, err });
    for (const s of staged) this.dropped(s, new PunctualError('unavailable', 'storage error'));
  }
}

/** Each merged proposer gets its own slice of a merged create_jobs result, in its own input order. */
function splitCreate(parts: Array<{ pending: Pending; count: number }>, applied: Applied): Array<{ p: Pending; a: Applied }> {
  const result = applied.result as { type: string; items: unknown[] };
  assert(result.type === 'create_jobs', 'merged command is not create_jobs');
  let offset = 0;
  return parts.map(({ pending, count }) => {
    const items = result.items.slice(offset, offset + count);
    offset += count;
    return { p: pending, a: { result: { ...result, items }, effects: [] } };
  });
}
