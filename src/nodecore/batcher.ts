/**
 * The group commit's decisions: which commands a flush proposes, in which order, and how the firing side's
 * records are batched and folded. Every state change of the node becomes one entry of its shard's log.
 *
 * Batching: client proposals wait for the next flush (the host runs it on the next turn of its loop, so a burst
 * of requests shares one round: one transaction, one fsync). A flush takes at most limits.commitBatchCommandsMax
 * commands. The firing side's fired / skipped / outcome items are gathered per shard and become at most three
 * commands per shard per flush, in that order (an outcome always follows the fired item of its attempt), and
 * they come before the flush's client proposals.
 *
 * Folding: when a callback finishes before its attempt's fired item was proposed, the fired item is taken out and
 * folded into the outcome (`startedAtMs` on the item): one record instead of two, applied exactly as the pair
 * (src/scheduler/machine.ts). A skipped item queued after a fired item ends its folding, so no item moves past a
 * skip of the same shard. The fired item of a one-off job's first attempt (`hold`) waits longer, up to
 * stallLimits.firedHoldMs, for its outcome.
 *
 * Limits (src/core/limits.ts queueLimits): a client proposal is refused 429 `rate_limited` while
 * proposerCommandsMax proposals wait, or while the applier has applyQueueEntriesMax committed entries to apply;
 * the firing side's items are never refused (they record callbacks already sent): firing stops instead while
 * engineItems is at proposerEngineItemsMax.
 */
import { assert } from '../core/assert.js';
import { PunctualError } from '../core/errors.js';
import { limits, queueLimits, stallLimits } from '../core/limits.js';
import type { Command, FiredItem, OutcomeItem, SkippedItem } from '../scheduler/commands.js';
import type { Applied, Proposal, ProposalResult, Reply } from './types.js';

/** A write refused by a full queue: 429 with Retry-After; it never entered the log. */
export function queueFull(reason: 'proposer_queue_full' | 'apply_queue_full' | 'wheel_full', what: string): PunctualError {
  return new PunctualError('rate_limited', `${what}; retry in ${queueLimits.retryAfterS} s`, [], reason);
}

export function shuttingDown(): PunctualError {
  return new PunctualError('unavailable', 'node is shutting down', [], 'shutting_down');
}

interface ClientOp {
  opId: number;
  shard: number;
  command: Command;
}

interface ShardItems {
  /** Fired items in order; null where one was folded into its outcome. */
  fired: Array<FiredItem | null>;
  /** attemptKey -> index in `fired`, for the items an outcome may still fold in. */
  foldable: Map<string, number>;
  skipped: SkippedItem[];
  outcomes: OutcomeItem[];
  /** Held fired items (attemptKey -> item and when it is proposed without its outcome), in arrival order. */
  held: Map<string, { item: FiredItem; untilMs: number }>;
}

/** A proposal handed out: whom its answer goes to. */
interface Staged {
  shard: number;
  command: Command;
  /** The client op it is (null: the firing side's records). */
  opId: number | null;
  /** Several create_jobs ops of one shard merged into this command: each gets its slice of the items. */
  parts: Array<{ opId: number; count: number }> | null;
}

function attemptKey(item: { jobId: string; scheduledAtMs: number; attempt: number }): string {
  return `${item.jobId}\n${item.scheduledAtMs}\n${item.attempt}`;
}

export class Batcher {
  private queue: ClientOp[] = [];
  private readonly items = new Map<number, ShardItems>();
  private readonly staged = new Map<number, Staged>();
  private ticketNext = 1;
  private closed = false;
  /** Items of the firing side waiting for a flush (fired, held, skipped, outcomes). */
  engineItems = 0;
  /** Fired items folded into their outcomes since start. */
  folded = 0;
  /** When the firing side's items wait since (the flush comes engineItemsDelayMs later); null when none wait. */
  private itemsSinceMs: number | null = null;
  /** Firing records refused in a way that proves they never applied, proposed again at atMs (core.proposalDone). */
  private retries: Array<{ shard: number; command: Command; atMs: number }> = [];

  constructor(
    private readonly nodeId: string,
    private readonly mergeCreates: boolean,
  ) {}

  /** Refusal reasons are returned, not thrown: they are answers to the client. */
  admit(op: ClientOp, applyBacklog: number): PunctualError | null {
    if (this.closed) return shuttingDown();
    if (this.queue.length >= queueLimits.proposerCommandsMax) {
      return queueFull('proposer_queue_full', `${this.queue.length} writes wait to be proposed on this node`);
    }
    if (applyBacklog >= queueLimits.applyQueueEntriesMax) {
      return queueFull('apply_queue_full', `${applyBacklog} committed entries wait to be applied on this node`);
    }
    this.queue.push(op);
    return null;
  }

  close(): void {
    this.closed = true;
  }

  /** `hold`: a one-off job's first attempt, whose fired item may wait for its outcome (see the header). */
  addFired(shard: number, item: FiredItem, hold: boolean, nowMs: number): void {
    const it = this.itemsOf(shard);
    if (hold && !this.closed) {
      it.held.set(attemptKey(item), { item, untilMs: nowMs + stallLimits.firedHoldMs });
    } else {
      it.foldable.set(attemptKey(item), it.fired.length);
      it.fired.push(item);
      this.itemsSinceMs ??= nowMs;
    }
    this.engineItems++;
  }

  addSkipped(shard: number, item: SkippedItem, nowMs: number): void {
    const it = this.itemsOf(shard);
    it.skipped.push(item);
    // Skips apply before this flush's outcomes: a fired item queued before this skip must stay before it.
    it.foldable.clear();
    this.engineItems++;
    this.itemsSinceMs ??= nowMs;
  }

  addOutcome(shard: number, item: OutcomeItem, nowMs: number): void {
    const it = this.itemsOf(shard);
    const fired = takeUnproposed(it, attemptKey(item));
    const retried = fired === null ? this.takeRetried(shard, attemptKey(item)) : null;
    if (fired === null && retried === null) {
      it.outcomes.push(item);
      this.engineItems++;
    } else {
      this.folded++;
      // A fired item taken from a retry was counted out when first proposed: its outcome counts anew.
      if (retried !== null) this.engineItems++;
      it.outcomes.push({ ...item, startedAtMs: (fired ?? retried)!.startedAtMs });
    }
    this.itemsSinceMs ??= nowMs;
  }

  /**
   * The fired item of this attempt out of a refused record waiting to be proposed again, or null. Left there,
   * it could be proposed after its outcome (the outcome's flush may come first and be accepted once the refusal
   * ended), and the outcome would apply to no execution, leaving the one the fired item opens RUNNING forever.
   */
  private takeRetried(shard: number, key: string): FiredItem | null {
    for (let i = 0; i < this.retries.length; i++) {
      const r = this.retries[i]!;
      if (r.shard !== shard || r.command.type !== 'fired') continue;
      const at = r.command.items.findIndex((f) => attemptKey(f) === key);
      if (at < 0) continue;
      const item = r.command.items[at]!;
      const items = r.command.items.filter((_, k) => k !== at);
      if (items.length === 0) this.retries.splice(i, 1);
      else this.retries[i] = { ...r, command: { ...r.command, items } };
      return item;
    }
    return null;
  }

  /**
   * The shard's held fired items of `jobId` (a pause must find the job RUNNING), or all of them (null: the shard
   * drains before a leadership transfer), go into the next flush as they are.
   */
  releaseHeld(shard: number, jobId: string | null, nowMs: number): void {
    const it = this.items.get(shard);
    if (it === undefined) return;
    for (const [key, h] of it.held) {
      if (jobId !== null && h.item.jobId !== jobId) continue;
      it.held.delete(key);
      it.foldable.set(key, it.fired.length);
      it.fired.push(h.item);
      this.itemsSinceMs ??= nowMs;
    }
  }

  /** No firing record of the shard waits to be proposed (held, or to be retried) or for its proposal's answer. */
  recordsSettled(shard: number): boolean {
    if (this.items.has(shard) || this.retries.some((r) => r.shard === shard)) return false;
    for (const s of this.staged.values()) if (s.shard === shard && s.opId === null && s.parts === null) return false;
    return true;
  }

  queuedCount(): number {
    return this.queue.length;
  }

  heldCount(): number {
    let n = 0;
    for (const it of this.items.values()) n += it.held.size;
    return n;
  }

  /** Nothing waits to be proposed and every proposal handed out was answered. */
  idle(): boolean {
    return this.queue.length === 0 && this.items.size === 0 && this.staged.size === 0 && this.retries.length === 0;
  }

  /** A firing record to propose again at atMs (it was refused and provably never applied). */
  retry(shard: number, command: Command, atMs: number): void {
    this.retries.push({ shard, command, atMs });
  }

  /** The records waiting to be proposed again for a shard this node no longer leads: they are given up. */
  dropRetries(shard: number): Command[] {
    const dropped = this.retries.filter((r) => r.shard === shard).map((r) => r.command);
    this.retries = this.retries.filter((r) => r.shard !== shard);
    return dropped;
  }

  /** Something waits for a flush (held items included). */
  hasWork(): boolean {
    return this.queue.length > 0 || this.items.size > 0 || this.retries.length > 0;
  }

  /**
   * When the next flush should run: now for client proposals (they share the next turn), engineItemsDelayMs after
   * the first waiting item of the firing side (they delay no send, and at a steady firing rate this turns two
   * small transactions per callback into one per delay), else when the first hold ends. Null: nothing waits.
   */
  flushAtMs(nowMs: number): number | null {
    if (this.queue.length > 0) return nowMs;
    const retryAtMs = this.retries.length === 0 ? null : Math.min(...this.retries.map((r) => r.atMs));
    const itemsAtMs = this.itemsFlushAtMs();
    if (retryAtMs === null) return itemsAtMs;
    return itemsAtMs === null ? retryAtMs : Math.min(retryAtMs, itemsAtMs);
  }

  private itemsFlushAtMs(): number | null {
    if (this.itemsSinceMs !== null) return this.itemsSinceMs + stallLimits.engineItemsDelayMs;
    let heldUntilMs: number | null = null;
    for (const it of this.items.values()) {
      const first = it.held.values().next();
      if (!first.done && (heldUntilMs === null || first.value.untilMs < heldUntilMs)) heldUntilMs = first.value.untilMs;
    }
    return heldUntilMs;
  }

  /** One group commit: the firing side's items first, then up to the batch limit of client proposals. `all`: held items too. */
  flush(nowMs: number, all: boolean, out: Proposal[]): void {
    const start = out.length;
    if (this.retries.length > 0) {
      const due = this.retries.filter((r) => all || r.atMs <= nowMs);
      this.retries = this.retries.filter((r) => !(all || r.atMs <= nowMs));
      for (const r of due) this.stage({ shard: r.shard, command: r.command, opId: null, parts: null }, out);
    }
    for (const [shard, it] of this.items) this.flushItems(shard, it, nowMs, all, out);
    this.itemsSinceMs = null;
    const take = Math.max(0, limits.commitBatchCommandsMax - (out.length - start));
    const creates = new Map<number, Staged>();
    for (const op of this.queue.splice(0, take)) {
      if (this.mergeCreate(op, creates, out)) continue;
      this.stage({ shard: op.shard, command: op.command, opId: op.opId, parts: null }, out);
    }
  }

  /** The answer to a proposal: replies for its clients, or (for the firing side's records) whether it was lost. */
  answer(ticket: number, result: ProposalResult, replies: Reply[]): { shard: number; command: Command } | null {
    const s = this.staged.get(ticket);
    assert(s !== undefined, `proposal ticket ${ticket} is not outstanding`);
    this.staged.delete(ticket);
    if (s.opId === null && s.parts === null) return result.ok ? null : { shard: s.shard, command: s.command };
    if (!result.ok) {
      if (s.opId !== null) replies.push({ opId: s.opId, ok: false, error: result.error });
      for (const part of s.parts ?? []) replies.push({ opId: part.opId, ok: false, error: result.error });
      return null;
    }
    if (s.opId !== null) replies.push({ opId: s.opId, ok: true, applied: result.applied });
    if (s.parts !== null) for (const r of splitCreate(s.parts, result.applied)) replies.push(r);
    return null;
  }

  private stage(s: Staged, out: Proposal[]): void {
    const ticket = this.ticketNext++;
    this.staged.set(ticket, s);
    out.push({ ticket, shard: s.shard, command: s.command });
  }

  private flushItems(shard: number, it: ShardItems, nowMs: number, all: boolean, out: Proposal[]): void {
    // Entries of bounded size, so one entry's apply stays within an apply slice (stallLimits); the order of
    // the chunks is the order of the items, and every fired chunk precedes the outcomes of the flush.
    const fired = it.fired.filter((f): f is FiredItem => f !== null);
    // Held items expire in arrival order (one hold for all): the expired ones are at the front.
    for (const [key, h] of it.held) {
      if (!all && h.untilMs > nowMs) break;
      it.held.delete(key);
      fired.push(h.item);
    }
    const records = (command: Command): void => this.stage({ shard, command, opId: null, parts: null }, out);
    for (const items of chunks(fired)) records({ type: 'fired', nowMs, nodeId: this.nodeId, items });
    for (const items of chunks(it.skipped)) records({ type: 'skipped', nowMs, items });
    for (const items of chunks(it.outcomes)) records({ type: 'outcomes', nowMs, nodeId: this.nodeId, items });
    this.engineItems -= fired.length + it.skipped.length + it.outcomes.length;
    assert(this.engineItems >= 0, 'engine item count below zero');
    if (it.held.size === 0) {
      this.items.delete(shard);
      return;
    }
    it.fired = [];
    it.foldable.clear();
    it.skipped = [];
    it.outcomes = [];
  }

  /**
   * Concurrent create_jobs ops of one shard (a burst of POST /v1/jobs) become one command: one log entry and one
   * apply instead of one each. They were concurrent, so no order between them and the other commands of the
   * flush is promised. Not with --fsync always (one transaction per proposal).
   */
  private mergeCreate(op: ClientOp, creates: Map<number, Staged>, out: Proposal[]): boolean {
    const c = op.command;
    if (c.type !== 'create_jobs' || !this.mergeCreates) return false;
    const into = creates.get(op.shard);
    if (into !== undefined && into.command.type === 'create_jobs' && into.command.jobs.length + c.jobs.length <= stallLimits.mergedCreateJobsMax) {
      into.command.jobs.push(...c.jobs);
      into.command.nowMs = Math.max(into.command.nowMs, c.nowMs);
      into.parts!.push({ opId: op.opId, count: c.jobs.length });
      return true;
    }
    // Staged where its first op stands; the ops merged later change the same command object before it leaves.
    const s: Staged = { shard: op.shard, command: { ...c, jobs: [...c.jobs] }, opId: null, parts: [{ opId: op.opId, count: c.jobs.length }] };
    creates.set(op.shard, s);
    this.stage(s, out);
    return true;
  }

  private itemsOf(shard: number): ShardItems {
    let it = this.items.get(shard);
    if (it === undefined) {
      it = { fired: [], foldable: new Map(), skipped: [], outcomes: [], held: new Map() };
      this.items.set(shard, it);
    }
    return it;
  }
}

/** The attempt's fired item if it was not proposed yet (held, or foldable in this flush), taken out. */
function takeUnproposed(it: ShardItems, key: string): FiredItem | null {
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

/** Each merged op gets its own slice of a merged create_jobs result, in its own input order. */
function splitCreate(parts: Array<{ opId: number; count: number }>, applied: Applied): Reply[] {
  const result = applied.result as { type: string; items: unknown[] };
  assert(result.type === 'create_jobs', 'merged command is not create_jobs');
  let offset = 0;
  return parts.map(({ opId, count }) => {
    const items = result.items.slice(offset, offset + count);
    offset += count;
    return { opId, ok: true as const, applied: { result: { ...result, items }, effects: [] } };
  });
}
