/**
 * The shell around NodeCore (src/nodecore): the IO of firing and group commit. It feeds the core its inputs
 * (the clock's time, client proposals, the dispatcher's starts and outcomes), then `pump()`s: takes the node's
 * `ready()` (src/nodecore/node.ts `Node`: the core's proposals are in their shards' logs by then) and carries it
 * out (orders to the dispatcher, replies to the waiting callers), wakes the Raft host when the logs have work,
 * and arms its two timers. What Raft decides (applied commands, leadership, the answers to the core's proposals)
 * reaches the core inside the Node; the Raft host only asks the shell to `pump()` afterwards. It decides nothing;
 * every rule is in the core.
 *
 * Callbacks leave through a FiringPort (src/dispatch/firing-port.ts): its FiringCore runs on the firing thread
 * (the default) or on this loop (`serve --firing-thread off`, a manual clock). The last word before a callback leaves is the
 * FiringCore's, when it gets its concurrency slot: an order the core withdrew is taken back (`withdraw`; the
 * replies decided with the withdrawal wait for the answer, so nothing starts after an acknowledged cancel), a
 * shard this node stopped firing in the order's term is revoked, and each shard's term and lease come from
 * `lease()`: asked at that moment on this loop; on the thread, the deadline at which Raft's lease ends unless a
 * heartbeat round renews it, pushed with every batch and refreshed while something waits there, so a stall of
 * this loop shorter than the lease does not hold a callback the thread has. Orders are handed over as they come: sent
 * at once when due, staged in the port until their due ms when the core ordered them ahead (up to
 * limits.firingStageLeadMs; the port prepares them meanwhile and a withdrawal takes them back); what the port
 * answers (a start, an outcome, or null: not sent) reaches the core at once, and one pump follows each batch of
 * answers (the port reports them in batches).
 *
 * Timers: ONE timer for the core's next deadline (never a 1 ms interval). Node timers may fire early or late by
 * about a millisecond, so for a callback's due time the shell wakes nodeLimits.firingSpinMs early and spins on
 * setImmediate; the core itself never orders anything before `nowMs >= dueAtMs`. A second timer runs the group
 * commit's flush (`flushAtMs`), on the next turn for client proposals.
 */
import type { Clock } from '../core/clock.js';
import { assert } from '../core/assert.js';
import type { Logger } from '../core/log.js';
import { limits, nodeLimits } from '../core/limits.js';
import { DrainRate } from '../dispatch/drain-rate.js';
import type { AttemptOutcome, Delivery } from '../dispatch/dispatcher.js';
import { monoEpochMs, type ShardLease } from '../dispatch/firing-core.js';
import { FiringPort, type FiringPortOptions } from '../dispatch/firing-port.js';
import type { NodeMetrics } from '../metrics/metrics.js';
import { emptyReady, occurrenceKey, type Applied, type Node, type NodeCoreApi, type NodeReady, type DispatchOrder, type Reply } from '../nodecore/index.js';
import type { Command } from '../scheduler/commands.js';
import type { JobRecord, JobState } from '../scheduler/types.js';

/** The Raft host's round loop, as the shell wakes it (the node's logs or events have work for it). */
export interface RoundLoop {
  schedule(): void;
}

export interface ShellOptions {
  /** The node's pure side (NodeCore and Replication composed). */
  node: Node;
  /** The Raft host that carries out the node's rounds. */
  rounds: RoundLoop;
  /** The scheduler's clock (a ManualClock with `serve --clock manual`): the clock the node's `nowMs` reads. */
  clock: Clock;
  logger: Logger;
  metrics: NodeMetrics;
  /** The firing port's options but its onStart and lease, which are the shell's. */
  firing: Omit<FiringPortOptions, 'onStart' | 'lease'>;
}

interface Caller {
  resolve(a: Applied): void;
  reject(e: unknown): void;
}

export class NodeShell {
  readonly core: NodeCoreApi;
  /** Where callbacks leave: the firing thread, or the FiringCore on this loop. */
  readonly dispatcher: FiringPort;
  private readonly drainRate = new DrainRate();
  /** The shards fired, with their terms, as last told to the port (a change is a revoke there). */
  private fired = new Map<number, number>();
  /** Withdrawals the port has not answered yet: the replies decided meanwhile wait for them (`heldReplies`). */
  private withdrawalsOpen = 0;
  private heldReplies: Reply[] = [];
  /** Orders handed to the port and not settled. */
  private ordersOut = 0;
  private drainWaiters: Array<() => void> = [];
  private readonly callers = new Map<number, Caller>();
  private opNext = 1;
  private timer: NodeJS.Timeout | null = null;
  private timerAtMs: number | null = null;
  private spin: NodeJS.Immediate | null = null;
  private flushTimer: NodeJS.Timeout | null = null;
  private flushImmediate: NodeJS.Immediate | null = null;
  private flushTimerAtMs: number | null = null;
  private pumping = false;
  /** A pump is queued for the end of the port's current batch of events (pumpSoon). */
  private pumpQueued = false;
  private idleWaiters: Array<() => void> = [];

  constructor(private readonly o: ShellOptions) {
    this.core = o.node.core;
    this.dispatcher = new FiringPort({ ...o.firing, onStart: (d, startedAtMs) => this.started(d, startedAtMs), lease: (shard) => this.lease(shard) });
  }

  // --- inputs -------------------------------------------------------------------------------------------

  /** A client write for `shard`'s log: answered once applied (its effects reached the core first). */
  propose(shard: number, command: Command): Promise<Applied> {
    const opId = this.opNext++;
    const refused = this.core.propose(opId, shard, command, this.o.clock.nowMs());
    if (refused !== null) return Promise.reject(refused);
    const p = new Promise<Applied>((resolve, reject) => this.callers.set(opId, { resolve, reject }));
    this.pump();
    return p;
  }

  /** A callback staged in the port on this loop is due now or within the spin window: long work should yield. */
  sendDue(): boolean {
    const at = this.dispatcher.nextStagedDueMs();
    return at !== null && at - nodeLimits.firingSpinMs <= this.o.clock.nowMs();
  }

  /** Callbacks per second while a backlog waits (the admission report's divisor); null until one was seen. */
  drainRatePerS(): number | null {
    return this.drainRate.perS();
  }

  /**
   * The term this node fires `shard` in and how long its lease may be trusted, for the FiringCore's last word
   * before a callback leaves (a newer leader fires an order of an older term, with a higher fencing token). On
   * this loop it is asked at that very moment; the thread gets it with each batch as the time Raft's lease ends
   * unless renewed (src/nodecore/replication.ts `leaseUntilMono`: the time the tick that ends it is due), and
   * a fresh one every limits.firingLeaseRefreshMs while something waits there. What ends the lease sooner is told
   * to the thread by the node: a transfer fences it (`fence`), a lost term revokes it. A stall the lease question
   * reveals gives the Raft host a catch-up to carry out.
   */
  private lease(shard: number): ShardLease {
    const term = this.core.firingShards().get(shard);
    if (term === undefined) return { term: -1, untilMs: Number.NEGATIVE_INFINITY };
    const leftMs = this.o.node.leaseLeftMs(shard);
    if (this.o.node.hostWork()) this.o.rounds.schedule();
    return { term, untilMs: leftMs > 0 ? monoEpochMs() + leftMs : Number.NEGATIVE_INFINITY };
  }

  private started(d: Delivery, startedAtMs: number): void {
    if (d.attempt === 1) this.o.metrics.fireLatenessMs.observe(startedAtMs - d.scheduledAtMs);
    // A retry's own due time is not on the delivery: only first attempts tell whether starts wait.
    this.drainRate.noteStart(d.attempt === 1 ? d.scheduledAtMs : null, startedAtMs);
    this.core.dispatchStarted(occurrenceKey(d.jobId, d.scheduledAtMs), startedAtMs);
    this.pumpSoon();
  }

  /** What became of an order: its outcome, or null when the port never sent it (withdrawn, revoked, closed). */
  private onSettled(outcome: AttemptOutcome | null, order: DispatchOrder): void {
    if (outcome === null) this.core.dispatchWithdrawn(order.key);
    else {
      this.o.metrics.callbackFinished(outcome.kind);
      this.core.dispatchOutcome(order.key, outcome);
    }
    this.ordersOut--;
    this.pumpSoon();
  }

  /**
   * Starts and outcomes come from the port in batches (one event message, one flush of the core on this loop):
   * the core takes each at once, and one pump after the batch carries out what they decided, where a pump per
   * callback would build a ready() per callback.
   */
  private pumpSoon(): void {
    if (this.pumpQueued) return;
    this.pumpQueued = true;
    queueMicrotask(this.pumpQueuedBound);
  }

  private readonly pumpQueuedBound = (): void => {
    this.pumpQueued = false;
    this.pump();
    if (this.ordersOut === 0) for (const w of this.drainWaiters.splice(0)) w();
  };

  private readonly settledBound = (outcome: AttemptOutcome | null, order: DispatchOrder): void => this.onSettled(outcome, order);

  // --- outputs ------------------------------------------------------------------------------------------

  /**
   * Carries out what the core decided, until it has nothing more; then wakes the Raft host if the logs have work
   * and arms the timers. The Raft host calls it after the node's events reached the core.
   */
  pump(): void {
    if (this.pumping) return;
    this.pumping = true;
    let rd: NodeReady;
    try {
      // Carrying out one ready() may feed the core again (a dispatcher that starts an order at once, a
      // proposal refused at once): the last, empty ready() has the deadlines that count.
      for (rd = this.o.node.ready(); !emptyReady(rd); rd = this.o.node.ready()) this.carryOut(rd);
    } finally {
      this.pumping = false;
    }
    this.revokeLost();
    if (this.o.node.hostWork()) this.o.rounds.schedule();
    this.armTick(rd.nextDeadlineMs, rd.nextFireAtMs);
    this.armFlush(rd.flushAtMs);
    if (this.idleWaiters.length > 0 && this.core.idle()) for (const w of this.idleWaiters.splice(0)) w();
  }

  private carryOut(rd: NodeReady): void {
    for (const p of rd.inLog) this.o.metrics.proposals.inc({ shard: String(p.shard) });
    // An order still waiting in the port (for its slot, or its lease) is taken back there; one already started
    // reports its start and outcome as usual. Until the port answers, the replies wait: a cancel is acknowledged
    // only once its callback can no longer start.
    const back = rd.withdraw.length === 0 ? [] : rd.withdraw.filter((w) => this.dispatcher.unstarted(w.key)).map((w) => w.key);
    if (back.length > 0) {
      this.withdrawalsOpen++;
      void this.dispatcher.withdraw(back).then(() => this.withdrawalAnswered());
    }
    const nowMs = rd.dispatch.length === 0 ? 0 : this.o.clock.nowMs();
    for (const order of rd.dispatch) {
      this.ordersOut++;
      // Ordered ahead of its due time: the port holds it (request built, signed, connection warm) and sends it at
      // its due ms, asking the shard's lease then.
      if (order.dueAtMs > nowMs) this.dispatcher.stageTo(order.delivery, order.dueAtMs, this.settledBound, order);
      else this.dispatcher.sendTo(order.delivery, this.settledBound, order);
    }
    if (this.withdrawalsOpen > 0) for (const r of rd.replies) this.heldReplies.push(r);
    else this.reply(rd.replies);
  }

  private withdrawalAnswered(): void {
    if (--this.withdrawalsOpen > 0) return;
    const replies = this.heldReplies;
    this.heldReplies = [];
    this.reply(replies);
  }

  private reply(replies: readonly Reply[]): void {
    for (const r of replies) {
      const c = this.callers.get(r.opId)!;
      this.callers.delete(r.opId);
      if (r.ok) c.resolve(r.applied);
      else c.reject(r.error);
    }
  }

  /**
   * Before a leadership transfer's target is told to campaign: the firing thread holds each shard's lease as it
   * is now (void once the transfer started), so no callback of this term leaves after the target may lead.
   */
  fence(shards: Iterable<number>): Promise<void> {
    const waits: Array<Promise<void>> = [];
    for (const shard of shards) waits.push(this.dispatcher.fence(shard, this.lease(shard)));
    return Promise.all(waits).then(() => undefined);
  }

  /** A leadership transfer of `shard` is planned (src/node/cluster-ops.ts): the core drains it first. */
  drainShard(shard: number): void {
    this.core.drainShard(shard, this.o.clock.nowMs());
    this.pump();
  }

  /** The transfer did not happen: the shard fires again. */
  undrainShard(shard: number): void {
    this.core.undrainShard(shard);
    this.pump();
  }

  shardDrained(shard: number): boolean {
    return this.core.shardDrained(shard);
  }

  /** A shard this node stopped firing in a term (lost, or fired again in a newer one): the port drops its orders. */
  private revokeLost(): void {
    const now = this.core.firingShards();
    let changed = now.size !== this.fired.size;
    for (const [shard, term] of this.fired) {
      if (now.get(shard) === term) continue;
      this.dispatcher.revokeShard(shard, term);
      changed = true;
    }
    if (changed) this.fired = new Map(now);
  }

  // --- timers -------------------------------------------------------------------------------------------

  private clearTick(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    if (this.spin !== null) clearImmediate(this.spin);
    this.timer = null;
    this.timerAtMs = null;
    this.spin = null;
  }

  /** One timer for the core's next deadline; the last firingSpinMs before a callback's due time are spun. */
  private armTick(atMs: number | null, fireAtMs: number | null): void {
    if (atMs === null) return this.clearTick();
    if (this.spin !== null) return;
    const delayMs = atMs - this.o.clock.nowMs();
    const spinMs = atMs === fireAtMs ? nodeLimits.firingSpinMs : 0;
    if (delayMs <= spinMs) {
      if (this.timer !== null) clearTimeout(this.timer);
      this.timer = null;
      this.timerAtMs = null;
      this.spin = setImmediate(() => this.onTick());
      return;
    }
    // A timer already due at or before the deadline is kept: waking early only ticks the core, which asks again.
    // Re-armed on every pump, it followed each input (the wall clock recheck moves with the core's time).
    if (this.timer !== null && this.timerAtMs !== null && this.timerAtMs <= atMs) return;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timerAtMs = atMs;
    this.timer = setTimeout(() => this.onTick(), delayMs - spinMs);
  }

  private onTick(): void {
    this.timer = null;
    this.timerAtMs = null;
    this.spin = null;
    this.core.tick(this.o.clock.nowMs());
    this.pump();
  }

  /** The flush timer: kept when it already runs at or before the time asked (a burst shares one flush). */
  private armFlush(atMs: number | null): void {
    if (atMs === null) return;
    if (this.flushImmediate !== null) return;
    const delayMs = atMs - this.o.clock.nowMs();
    if (delayMs <= 0) {
      if (this.flushTimer !== null) clearTimeout(this.flushTimer);
      this.flushTimer = null;
      this.flushTimerAtMs = null;
      this.flushImmediate = setImmediate(() => this.onFlush());
      return;
    }
    if (this.flushTimer !== null && this.flushTimerAtMs !== null && this.flushTimerAtMs <= atMs) return;
    if (this.flushTimer !== null) clearTimeout(this.flushTimer);
    this.flushTimerAtMs = atMs;
    this.flushTimer = setTimeout(() => this.onFlush(), delayMs);
  }

  private onFlush(): void {
    if (this.flushTimer !== null) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    this.flushTimerAtMs = null;
    this.flushImmediate = null;
    this.core.flush(this.o.clock.nowMs());
    this.pump();
  }

  // --- life ---------------------------------------------------------------------------------------------

  /** Loads what is due within the horizon now (the core keeps loading on its own time after). */
  async start(): Promise<void> {
    if (this.core.firingShards().size > 0) await this.runLoader();
  }

  /** A complete loader run, a page per turn of the event loop. */
  async runLoader(): Promise<void> {
    this.core.load(this.o.clock.nowMs());
    this.pump();
    while (this.core.loading() && !this.core.isStopped) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      this.core.tick(this.o.clock.nowMs());
      this.pump();
    }
  }

  /** Fires what is due at the clock's now at once (the manual clock just moved). */
  kick(): void {
    if (this.core.isStopped) return;
    this.clearTick();
    this.onTick();
  }

  /** Stops firing and loading; callbacks out continue (see drain). */
  stop(): void {
    this.core.stop();
    this.clearTick();
  }

  /** Resolves once every order handed to the port is settled in the core. */
  async drain(): Promise<void> {
    if (this.ordersOut === 0) return;
    await new Promise<void>((resolve) => this.drainWaiters.push(resolve));
  }

  /** Refuses new proposals, proposes everything waiting and waits (at most waitMs) until it is answered. */
  async close(waitMs: number): Promise<void> {
    this.core.closeProposals();
    this.flushAll();
    if (this.flushTimer !== null) clearTimeout(this.flushTimer);
    if (this.flushImmediate !== null) clearImmediate(this.flushImmediate);
    this.flushTimer = null;
    this.flushImmediate = null;
    this.flushTimerAtMs = null;
    if (this.core.idle()) return;
    let timer: NodeJS.Timeout | null = null;
    await Promise.race([
      new Promise<void>((resolve) => this.idleWaiters.push(resolve)),
      new Promise<void>((resolve) => (timer = setTimeout(resolve, waitMs))),
    ]);
    if (timer !== null) clearTimeout(timer);
    // Callbacks are drained before the close: no record comes after it, so no flush is needed any more.
    if (this.flushTimer !== null) clearTimeout(this.flushTimer);
    if (this.flushImmediate !== null) clearImmediate(this.flushImmediate);
    this.flushTimer = null;
    this.flushImmediate = null;
  }

  /** Proposes whatever waits now, held fired records too (close, the manual clock). */
  flushAll(): void {
    this.core.flushAll(this.o.clock.nowMs());
    this.pump();
  }

  // --- views --------------------------------------------------------------------------------------------

  overlayState(job: JobRecord): JobState {
    return this.core.overlayState(job);
  }

  hasRoom(): boolean {
    return this.core.hasRoom();
  }

  get wheelSize(): number {
    return this.core.queueDepths().wheel;
  }

  queueDepths(): { dueBacklog: number; wheel: number; parked: number; dispatchQueued: number } {
    const d = this.core.queueDepths();
    return { dueBacklog: d.dueBacklog, wheel: d.wheel, parked: d.parked, dispatchQueued: d.dispatchQueued };
  }

  /** Client writes waiting for the next group commit. */
  queuedCount(): number {
    return this.core.queueDepths().proposer;
  }

  engineItemsCount(): number {
    return this.core.queueDepths().engineItems;
  }

  inFlightCount(): number {
    return this.core.ordersOut();
  }

  nextDeadlineAfterNow(untilMs: number): number | null {
    return this.core.nextDeadlineAfter(this.o.clock.nowMs(), untilMs);
  }

  settled(): boolean {
    assert(!this.pumping, 'settled() asked while pumping');
    return this.core.settled(this.o.clock.nowMs());
  }

  idle(): boolean {
    return this.core.idle();
  }

  get isStopped(): boolean {
    return this.core.isStopped;
  }

  /** Callback attempts ordered since start (the manual clock's advance counts them). */
  get sentTotal(): number {
    return this.core.counters.dispatched;
  }

  /** Fired records folded into their outcomes since start. */
  get foldedTotal(): number {
    return this.core.counters.folded;
  }

  heldCount(): number {
    return this.core.heldCount();
  }

  firingShards(): ReadonlyMap<number, number> {
    return this.core.firingShards();
  }
}
