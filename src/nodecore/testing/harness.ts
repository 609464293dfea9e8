/**
 * A NodeCore driven without IO: time is a number, each shard's store a MemoryStore, and the log applies every
 * proposal at once (as a single node that leads every shard would, minus Raft). What the core orders is kept,
 * and the callbacks' starts and outcomes are fed back by the test.
 */
import type { AttemptOutcome } from '../../dispatch/dispatcher.js';
import { silentLogger } from '../../core/log.js';
import { Prng } from '../../core/prng.js';
import type { Command } from '../../scheduler/commands.js';
import { apply } from '../../scheduler/machine.js';
import { MemoryStore } from '../../scheduler/memory-store.js';
import type { JobSpec, TaskRecord } from '../../scheduler/types.js';
import { NodeCore } from '../core.js';
import type { Applied, CoreReady, DispatchOrder, Reply, Withdrawal } from '../types.js';

export const T0 = Date.parse('2027-01-04T00:00:00.000Z');

export const task = (name = 'hook', over: Partial<TaskRecord> = {}): TaskRecord => ({
  name,
  url: 'http://127.0.0.1:9/hook',
  method: 'POST',
  headers: {},
  timeoutMs: 1000,
  retry: { maxAttempts: 3, initialBackoffMs: 100, maxBackoffMs: 1000, multiplier: 2, jitter: false },
  signingSecret: null,
  maxConcurrency: 10,
  createdAtMs: 0,
  updatedAtMs: 0,
  ...over,
});

export const once = (id: string, atMs: number, over: Partial<JobSpec> = {}): JobSpec => ({
  id,
  task: 'hook',
  callback: null,
  payload: new Uint8Array([1, 2, 3]),
  payloadEncoding: 'json',
  schedule: { kind: 'once', atMs },
  endAtMs: null,
  maxRuns: 0,
  misfire: 'fire_once',
  overlap: 'allow',
  metadata: null,
  requestDigest: `d-${id}`,
  idempotencyKey: null,
  ...over,
});

export function ok(finishedAtMs: number, statusCode = 200): AttemptOutcome {
  return { kind: 'succeeded', statusCode, error: null, retryAfterMs: null, startedAtMs: finishedAtMs, finishedAtMs };
}

export function retryable(finishedAtMs: number): AttemptOutcome {
  return { kind: 'retryable', statusCode: 503, error: 'HTTP 503', retryAfterMs: null, startedAtMs: finishedAtMs, finishedAtMs };
}

export class Harness {
  readonly stores: MemoryStore[];
  readonly core: NodeCore;
  nowMs = T0;
  lease = true;
  /** Proposals are applied at once unless the log is held (then they wait in `held`). */
  holdLog = false;
  readonly held: Array<{ ticket: number; shard: number; command: Command }> = [];
  /** Commands applied, in order, with their shard. */
  readonly log: Array<{ shard: number; command: Command }> = [];
  readonly orders: DispatchOrder[] = [];
  readonly withdrawals: Withdrawal[] = [];
  readonly replies = new Map<number, Reply>();
  private opNext = 1;
  private flushAtMs: number | null = null;

  /** `stageLeadMs`: the core may order an attempt this long before its due time (NodeCoreDeps.stageLeadMs). */
  constructor(shards = 1, seed = 1, stageLeadMs = 0) {
    this.stores = Array.from({ length: shards }, () => new MemoryStore());
    const rand = new Prng(seed);
    this.core = new NodeCore({
      nodeId: 'n1',
      stores: this.stores,
      startMs: this.nowMs,
      rand01: () => rand.nextFloat(),
      mergeCreates: true,
      leaseValid: () => this.lease,
      applyBacklog: () => 0,
      stageLeadMs,
      logger: silentLogger,
    });
    for (let shard = 0; shard < shards; shard++) this.core.leaderStart(shard, 1, this.nowMs);
    this.drain();
  }

  /** A client operation; returns its opId (its reply lands in `replies`). */
  client(shard: number, command: Command): number {
    const opId = this.opNext++;
    const refused = this.core.propose(opId, shard, command, this.nowMs);
    if (refused !== null) this.replies.set(opId, { opId, ok: false, error: refused });
    this.drain();
    return opId;
  }

  /** A client operation that must succeed: its Applied. */
  must(shard: number, command: Command): Applied {
    const opId = this.client(shard, command);
    this.flushNow();
    const r = this.replies.get(opId);
    if (r === undefined || !r.ok) throw new Error(`op ${opId} failed: ${r === undefined ? 'no reply' : r.error.message}`);
    return r.applied;
  }

  setup(): void {
    for (let shard = 0; shard < this.stores.length; shard++) this.must(shard, { type: 'put_task', nowMs: this.nowMs, task: task() });
  }

  /** Moves time to `ms` and runs every timer due by then (flushes, ticks), as a host would. */
  advance(ms: number): void {
    this.nowMs = ms;
    for (let i = 0; i < 1000; i++) {
      this.core.tick(this.nowMs);
      const rd = this.drain();
      if (this.flushAtMs !== null && this.flushAtMs <= this.nowMs) {
        this.core.flush(this.nowMs);
        this.drain();
        continue;
      }
      if (rd.nextDeadlineMs === null || rd.nextDeadlineMs > this.nowMs) return;
    }
    throw new Error('the core never settled at this instant');
  }

  /** The flush timer expires now (whatever it was set to). */
  flushNow(): void {
    this.core.flush(this.nowMs);
    this.drain();
  }

  started(order: DispatchOrder, atMs = this.nowMs): void {
    this.core.dispatchStarted(order.key, atMs);
    this.drain();
  }

  finish(order: DispatchOrder, outcome: AttemptOutcome): void {
    this.core.dispatchOutcome(order.key, outcome);
    this.drain();
  }

  /** Applies the proposals the log held, in order. */
  releaseLog(): void {
    this.holdLog = false;
    for (const p of this.held.splice(0)) this.applyProposal(p.ticket, p.shard, p.command);
    this.drain();
  }

  /** Carries out ready() until it is empty; returns the last (empty) one with the deadlines. */
  drain(): CoreReady {
    for (;;) {
      const rd = this.core.ready();
      this.flushAtMs = rd.flushAtMs;
      if (rd.propose.length + rd.dispatch.length + rd.withdraw.length + rd.replies.length === 0) return rd;
      for (const p of rd.propose) {
        if (this.holdLog) this.held.push(p);
        else this.applyProposal(p.ticket, p.shard, p.command);
      }
      this.withdrawals.push(...rd.withdraw);
      this.orders.push(...rd.dispatch);
      for (const r of rd.replies) this.replies.set(r.opId, r);
    }
  }

  private applyProposal(ticket: number, shard: number, command: Command): void {
    const applied = apply(this.stores[shard]!, command);
    this.log.push({ shard, command });
    this.core.applied(shard, command, applied.effects, this.nowMs);
    this.core.proposalDone(ticket, { ok: true, applied });
  }

  /** The commands applied of one type. */
  applied(type: Command['type']): Command[] {
    return this.log.filter((l) => l.command.type === type).map((l) => l.command);
  }
}
