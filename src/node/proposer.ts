/**
 * Proposals and group commit. Every state change of the node goes through here and into the shard's Raft group
 * (RaftHost): a command becomes one log entry, replicated, committed, then applied on every member in the
 * host's Ready loop (one transaction for every group per round, applied_index in the same transaction).
 *
 * Batching: proposals queue up and are flushed on setImmediate, so a burst of HTTP requests shares one round
 * (one transaction, one fsync with --fsync batch). A flush takes at most limits.commitBatchCommandsMax commands.
 * The firing engine's fired / skipped / outcome items are gathered per shard and become at most three commands
 * per shard per flush, in that order (an outcome always follows the fired item of its attempt, which was queued
 * first). Engine items of a shard this node does not lead (any more) are dropped: at-least-once.
 *
 * Folding: when a callback finishes before its attempt's fired item was proposed (a receiver that answers
 * within the engine-item delay, the common case), the fired item is taken out and folded into the outcome
 * (`startedAtMs` on the item): one record instead of two, applied exactly as the pair (src/scheduler/machine.ts).
 * A skipped item queued after a fired item ends its folding, so no item moves past a skip of the same shard.
 * The fired item of a one-off job's first attempt (`hold`) waits longer, up to stallLimits.firedHoldMs, for its
 * outcome: no skip or other item of a one-off job can follow it, and its only purpose is a durable RUNNING
 * execution, which a restart or a new leader does without (it fires the PENDING occurrence again, same key).
 *
 * The host hands each applied command's effects to the firing engine BEFORE the proposer's promise resolves, so a
 * created job is already armed when the API answers.
 *
 * Limits (src/core/limits.ts queueLimits): a client proposal is refused 429 `rate_limited` while
 * proposerCommandsMax proposals wait for a flush, or while the host's applier has applyQueueEntriesMax committed
 * entries to apply; the engine's items are never refused (they record callbacks already sent): the engine stops
 * firing instead while engineItemsCount() is at proposerEngineItemsMax.
 */
import { assert } from '../core/assert.js';
import { PunctualError } from '../core/errors.js';
import { limits, queueLimits, stallLimits } from '../core/limits.js';
import type { Clock } from '../core/clock.js';
import type { Logger } from '../core/log.js';
import { encodeCommand } from '../scheduler/codec.js';
import type { Command, Effect, FiredItem, OutcomeItem, SkippedItem } from '../scheduler/commands.js';
import type { FsyncMode } from '../store/db.js';
import type { Waiter } from './group.js';

export type { ShardStorage } from './group.js';

/** Where proposals go: the Raft host (the shard's group on this node, which must lead it). */
export interface ProposalSink {
  propose(shard: number, data: Uint8Array, waiter: Waiter): void;
  /** Committed entries not applied yet on this node. */
  applyBacklog(): number;
}

/** A write refused by a full queue: 429 with Retry-After; it never entered the log. */
export function queueFull(reason: 'proposer_queue_full' | 'apply_queue_full' | 'wheel_full', what: string): PunctualError {
  return new PunctualError('rate_limited', `${what}; retry in ${queueLimits.retryAfterS} s`, [], reason);
}

export interface Applied {
  result: unknown;
  effects: Effect[];
}

export interface ProposerOptions {
  nodeId: string;
  sink: ProposalSink;
  fsync: FsyncMode;
  clock: Clock;
  logger: Logger;
  /**
   * Called (with no effects) for an engine command that was not applied (not the leader, lost), so the engine
   * forgets what it was waiting for. Applied commands reach the engine through the host.
   */
  onDropped: (shard: number, command: Command, effects: Effect[]) => void;
}

interface Pending {
  shard: number;
  command: Command;
  resolve: (a: Applied) => void;
  reject: (e: unknown) => void;
}

interface EngineItems {
  /** Fired items in order; null where one was folded into its outcome. */
  fired: Array<FiredItem | null>;
  /** attemptKey -> index in `fired`, for the items an outcome may still fold in. */
  foldable: Map<string, number>;
  skipped: SkippedItem[];
  outcomes: OutcomeItem[];
  /** Held fired items (attemptKey -> item and when it is proposed without its outcome), in arrival order. */
  held: Map<string, { item: FiredItem; untilMs: number }>;
}

function attemptKey(item: { jobId: string; scheduledAtMs: number; attempt: number }): string {
  return `${item.jobId}\n${item.scheduledAtMs}\n${item.attempt}`;
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
  /** When itemsTimer fires (clock ms): a held-only wait is cut short when other items arrive. */
  private itemsTimerAtMs = 0;
  private closed = false;
  /** Staged commands handed to the host and not answered yet. */
  private outstanding = 0;
  private idleWaiters: Array<() => void> = [];
  /** Fired items folded into their outcomes since start (a figure for tests and benchmarks). */
  foldedTotal = 0;
  /** Engine items (fired, held, skipped, outcomes) waiting for a flush: the engine holds firing back at the limit. */
  private engineItems = 0;

  constructor(private readonly o: ProposerOptions) {}

  propose(shard: number, command: Command): Promise<Applied> {
    if (this.closed) return Promise.reject(new PunctualError('unavailable', 'node is shutting down', [], 'shutting_down'));
    if (this.queue.length >= queueLimits.proposerCommandsMax) {
      return Promise.reject(queueFull('proposer_queue_full', `${this.queue.length} writes wait to be proposed on this node`));
    }
    const backlog = this.o.sink.applyBacklog();
    if (backlog >= queueLimits.applyQueueEntriesMax) {
      return Promise.reject(queueFull('apply_queue_full', `${backlog} committed entries wait to be applied on this node`));
    }
    return new Promise<Applied>((resolve, reject) => {
      this.queue.push({ shard, command, resolve, reject });
      this.schedule();
    });
  }

  /** `hold`: a one-off job's first attempt, whose fired item may wait for its outcome (see the header). */
  addFired(shard: number, item: FiredItem, hold = false): void {
    const it = this.itemsOf(shard);
    if (hold && !this.closed) {
      it.held.set(attemptKey(item), { item, untilMs: this.o.clock.nowMs() + stallLimits.firedHoldMs });
    } else {
      it.foldable.set(attemptKey(item), it.fired.length);
      it.fired.push(item);
    }
    this.engineItems++;
    this.schedule();
  }

  addSkipped(shard: number, item: SkippedItem): void {
    const it = this.itemsOf(shard);
    it.skipped.push(item);
    // Skips apply before this flush's outcomes: a fired item queued before this skip must stay before it.
    it.foldable.clear();
    this.engineItems++;
    this.schedule();
  }

  addOutcome(shard: number, item: OutcomeItem): void {
    const it = this.itemsOf(shard);
    const key = attemptKey(item);
    const fired = takeUnproposed(it, key);
    if (fired === null) {
      it.outcomes.push(item);
      this.engineItems++;
    } else {
      this.foldedTotal++;
      it.outcomes.push({ ...item, startedAtMs: fired.startedAtMs });
    }
    this.schedule();
  }

  /** Commands and items waiting for the next flush. */
  pendingCount(): number {
    return this.queue.length + this.items.size;
  }

  /** Client proposals waiting for the next flush (limit queueLimits.proposerCommandsMax). */
  queuedCount(): number {
    return this.queue.length;
  }

  /** Engine items waiting for a flush (the engine fires nothing new at queueLimits.proposerEngineItemsMax). */
  engineItemsCount(): number {
    return this.engineItems;
  }

  /** Nothing waits to be proposed and everything proposed was answered (the manual clock steps on only then). */
  idle(): boolean {
    return this.queue.length === 0 && this.items.size === 0 && this.outstanding === 0;
  }

  /** Fired items held for their outcomes (a figure for tests). */
  heldCount(): number {
    let n = 0;
    for (const it of this.items.values()) n += it.held.size;
    return n;
  }

  /** Refuses new proposals, flushes everything pending and waits (at most waitMs) until it is applied. */
  async close(waitMs: number): Promise<void> {
    this.closed = true;
    this.flushAll();
    if (this.scheduled !== null) clearImmediate(this.scheduled);
    if (this.itemsTimer !== null) clearTimeout(this.itemsTimer);
    this.scheduled = null;
    this.itemsTimer = null;
    if (this.outstanding === 0) return;
    let timer: NodeJS.Timeout | null = null;
    await Promise.race([
      new Promise<void>((resolve) => this.idleWaiters.push(resolve)),
      new Promise<void>((resolve) => (timer = setTimeout(resolve, waitMs))),
    ]);
    if (timer !== null) clearTimeout(timer);
  }

  /** Flush whatever is pending now (close, tests). */
  flushAll(): void {
    while (this.queue.length > 0 || this.items.size > 0) this.flush(true);
  }

  private itemsOf(shard: number): EngineItems {
    let it = this.items.get(shard);
    if (it === undefined) {
      it = { fired: [], foldable: new Map(), skipped: [], outcomes: [], held: new Map() };
      this.items.set(shard, it);
    }
    return it;
  }

  /**
   * Proposals are flushed on the next setImmediate (a burst of requests shares it). The engine's own items
   * wait up to stallLimits.engineItemsDelayMs for company: they delay no send, and at a steady firing rate this
   * turns two small transactions per callback into one per 10 ms.
   */
  private schedule(): void {
    if (this.scheduled !== null) return;
    if (this.queue.length === 0) {
      // Armed within the shortest wait already: nothing to shorten (the common case, no scan of the shards).
      if (this.itemsTimer !== null && this.itemsTimerAtMs <= this.o.clock.nowMs() + stallLimits.engineItemsDelayMs) return;
      const delayMs = this.itemsDelayMs();
      const atMs = this.o.clock.nowMs() + delayMs;
      if (this.itemsTimer !== null && this.itemsTimerAtMs <= atMs) return;
      // None armed, or one armed for held items only while now something else waits: wait the shorter time.
      if (this.itemsTimer !== null) clearTimeout(this.itemsTimer);
      this.itemsTimerAtMs = atMs;
      this.itemsTimer = setTimeout(() => this.runFlush(), delayMs);
      return;
    }
    this.scheduled = setImmediate(() => this.runFlush());
  }

  /** engineItemsDelayMs while items other than held fired items wait, else until the first hold ends. */
  private itemsDelayMs(): number {
    let heldUntilMs = Infinity;
    for (const it of this.items.values()) {
      if (it.fired.length > 0 || it.skipped.length > 0 || it.outcomes.length > 0) return stallLimits.engineItemsDelayMs;
      const first = it.held.values().next();
      if (!first.done) heldUntilMs = Math.min(heldUntilMs, first.value.untilMs);
    }
    const untilMs = heldUntilMs - this.o.clock.nowMs();
    return Math.max(stallLimits.engineItemsDelayMs, Math.min(untilMs, stallLimits.firedHoldMs));
  }

  private runFlush(): void {
    if (this.scheduled !== null) clearImmediate(this.scheduled);
    if (this.itemsTimer !== null) clearTimeout(this.itemsTimer);
    this.scheduled = null;
    this.itemsTimer = null;
    this.flush();
    if (this.queue.length > 0 || this.items.size > 0) this.schedule();
  }

  /** One group commit: engine items first, then up to the batch limit of proposals. `all`: held items too. */
  private flush(all = false): void {
    const nowMs = this.o.clock.nowMs();
    const staged: Staged[] = [];
    for (const [shard, it] of this.items) {
      const push = (command: Command): void => {
        staged.push({ pending: null, parts: null, shard, command, applied: null, error: null });
      };
      // Entries of bounded size, so one entry's apply stays within an apply slice (stallLimits); the order of
      // the chunks is the order of the items, and every fired chunk precedes the outcomes of the flush.
      const fired = it.fired.filter((f): f is FiredItem => f !== null);
      // Held items expire in arrival order (one hold for all): the expired ones are at the front.
      for (const [key, h] of it.held) {
        if (!all && h.untilMs > nowMs) break;
        it.held.delete(key);
        fired.push(h.item);
      }
      for (const items of chunks(fired)) push({ type: 'fired', nowMs, nodeId: this.o.nodeId, items });
      for (const items of chunks(it.skipped)) push({ type: 'skipped', nowMs, items });
      for (const items of chunks(it.outcomes)) push({ type: 'outcomes', nowMs, nodeId: this.o.nodeId, items });
      this.engineItems -= fired.length + it.skipped.length + it.outcomes.length;
      assert(this.engineItems >= 0, 'engine item count below zero');
      if (it.held.size === 0) {
        this.items.delete(shard);
      } else {
        it.fired = [];
        it.foldable.clear();
        it.skipped = [];
        it.outcomes = [];
      }
    }
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
    if (into !== undefined && into.command.type === 'create_jobs' && into.command.jobs.length + c.jobs.length <= stallLimits.mergedCreateJobsMax) {
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

  /** Each staged command becomes one log entry of its shard (the host batches every group into one round). */
  private commit(staged: Staged[]): void {
    for (const s of staged) {
      this.outstanding++;
      let done = false;
      const finish = (): void => {
        if (done) return;
        done = true;
        if (--this.outstanding === 0) for (const w of this.idleWaiters.splice(0)) w();
      };
      this.o.sink.propose(s.shard, encodeCommand(s.command), {
        resolve: (a) => {
          finish();
          this.settle(s, a);
        },
        reject: (err) => {
          finish();
          this.dropped(s, err instanceof PunctualError ? err : new PunctualError('unavailable', 'proposal failed'));
        },
      });
    }
  }

  private settle(s: Staged, a: Applied): void {
    if (s.pending !== null) s.pending.resolve(a);
    if (s.parts !== null) for (const { p, a: part } of splitCreate(s.parts, a)) p.resolve(part);
  }

  private dropped(s: Staged, err: PunctualError): void {
    if (s.pending === null && s.parts === null) this.o.logger.debug('engine items not recorded', { shard: s.shard, type: s.command.type, err: err.message });
    if (s.pending !== null || s.parts !== null) {
      s.pending?.reject(err);
      for (const part of s.parts ?? []) part.pending.reject(err);
      return;
    }
    try {
      this.o.onDropped(s.shard, s.command, []);
    } catch (e) {
      this.o.logger.error('effect handling failed', { shard: s.shard, type: s.command.type, err: e });
    }
  }
}

/** The attempt's fired item if it was not proposed yet (held, or foldable in this flush), taken out. */
function takeUnproposed(it: EngineItems, key: string): FiredItem | null {
  const held = it.held.get(key);
  if (held !== undefined) {
    it.held.delete(key);
    return held.item;
  }
  const at = it.foldable.get(key);
  if (at === undefined) return null;
  it.foldable.delete(key);
  const fired = it.fired[at]!;
  it.fired[at] = null;
  return fired;
}

function chunks<T>(items: T[]): T[][] {
  const max = stallLimits.engineItemsPerCommandMax;
  if (items.length <= max) return items.length === 0 ? [] : [items];
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += max) out.push(items.slice(i, i + max));
  return out;
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
