/**
 * The main side of the firing thread. It is a Dispatcher to the engine (send and sendTo, inFlight, queued,
 * close, onStart) and adds what a thread ahead of time needs: stage(delivery, dueAtMs) (sent by the thread at its
 * due ms), withdraw(keys) (answered per key: withdrawn, or already sent), revokeShard(shard, term) and each
 * shard's firing term and lease deadline (pulled from `lease` and pushed with each batch and every
 * limits.firingLeaseRefreshMs while something waits in the thread).
 *
 * Calls of one macrotask go out as ONE message (flushed in a microtask), its orders packed in one transferred buffer;
 * orders staged well ahead may wait up to stageHoldMs for the next message. Events come back batched.
 * The thread is started from firing-thread.js beside this module (the built code), or inside the single
 * executable from the bundle of it embedded there; where neither exists (the TypeScript sources under vitest)
 * the same FiringCore runs on the main loop instead (`mode` says which). On the main loop the lease is asked at
 * the moment of each send (`lease`), not pushed.
 *
 * A crash of the thread loses no acknowledged work: deliveries not reported started are handed to a new thread
 * (a withdraw still waiting is answered here); those reported started settle `retryable` ("firing thread exited")
 * and the engine retries them with the same deduplication key (at-least-once). After
 * limits.firingThreadRestartsMax crashes the core runs on the main loop.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { Clock } from '../core/clock.js';
import type { Logger, LogLevel } from '../core/log.js';
import { limits } from '../core/limits.js';
import type { CallbackSpec } from '../scheduler/types.js';
import type { AttemptOutcome, Delivery } from './dispatcher.js';
import { FiringCore, batchTransfer, monoEpochMs, outcomeKinds, packOrders, type FiringBatch, type FiringEvents, type FiringOp, type Order, type ShardLease } from './firing-core.js';
import { crashMessage, warmUpMessage, type FiringThreadData } from './firing-thread.js';
import { TargetPolicy } from './target-policy.js';
import { warmUpSendPath, type WarmUpReport } from './warm-up.js';
import { embeddedAsset, runningAsSea } from '../platform/sea.js';

/** What the firing engine needs of a callback sender: the Dispatcher and the FiringPort both are one. */
export interface CallbackSender {
  send(delivery: Delivery): Promise<AttemptOutcome>;
  inFlight(): number;
  queued(): number;
  close(graceMs?: number): Promise<void>;
}

export type WithdrawResult = 'withdrawn' | 'sent';

/** How sendTo() and stageTo() hand back what became of a delivery: its outcome, or null when it was never sent. */
export type SettledCallback<T> = (outcome: AttemptOutcome | null, tag: T) => void;

/** The single executable's asset holding the bundled thread entry (scripts/build-binary.mjs embeds it). */
export const firingThreadAsset = 'firing-thread.cjs';

export interface FiringPortOptions {
  clock: Clock;
  logger: Logger;
  targetPolicy?: TargetPolicy;
  inFlightMax?: number;
  onStart?: (d: Delivery, startedAtMs: number) => void;
  /**
   * The term this node fires `shard` in (-1: none) and until when (performance.timeOrigin + performance.now(),
   * ms) its lease may be trusted (-Infinity: not now). A delivery leaves only in its token's term, before that
   * deadline. Absent: no lease is enforced (a bare sender).
   */
  lease?: (shard: number) => ShardLease;
  /** 'thread' (default when a thread entry exists) or 'in-process' (the core on the main loop). */
  mode?: 'thread' | 'in-process';
  /**
   * The thread module to start, or its source (started with eval). Default: firing-thread.js beside this file,
   * or the bundle embedded in the single executable.
   */
  threadEntry?: ThreadEntry;
  /** `serve --payload-ref-max-bytes`. */
  payloadRefBytesMax?: number;
  logLevel?: LogLevel;
  logFormat?: 'json' | 'pretty';
}

export type ThreadEntry = string | URL | { source: string };

/** A delivery handed over and not settled; it is also its own order in the queue of ops (`o: 'entry'`). */
interface Entry extends Order {
  readonly o: 'entry';
  /** The spec's id in the current thread (0 on the main loop). */
  specId: number;
  /** 0 = send now. */
  dueAtMs: number;
  key: string;
  /** When it was handed over (node clock): a send-now could have started then. */
  submittedAtMs: number;
  started: boolean;
  /** When it started (node clock), once the thread said so. */
  startedAtMs?: number;
  /** Called once: the outcome, or null when it was not sent (withdrawn, revoked, its term over, closed). */
  done: SettledCallback<unknown>;
  tag: unknown;
}

/** The default thread module, or null when there is none to start (the TypeScript sources). */
function defaultThreadEntry(): ThreadEntry | null {
  if (runningAsSea()) return { source: embeddedAsset(firingThreadAsset).toString('utf8') };
  try {
    const url = new URL('./firing-thread.js', import.meta.url);
    return existsSync(fileURLToPath(url)) ? url : null;
  } catch {
    return null;
  }
}

/** Orders staged ahead wait on this side for others to cross with them (limits.firingStageHoldMs and its margin). */
const stageHoldMs = limits.firingStageHoldMs;
const stageHoldMarginMs = limits.firingStageHoldMarginMs;

function notSent(error: string, nowMs: number): AttemptOutcome {
  return { kind: 'retryable', statusCode: null, error, retryAfterMs: null, startedAtMs: nowMs, finishedAtMs: nowMs };
}

export class FiringPort implements CallbackSender {
  readonly mode: 'thread' | 'in-process';
  private readonly policy: TargetPolicy;
  private readonly entries = new Map<number, Entry>();
  /** Occurrence key (`${jobId}\n${scheduledAtMs}`) -> its entry, until it starts or settles. */
  private readonly unstartedByKey = new Map<string, Entry>();
  private staged = 0;
  private nextId = 1;
  /** What goes to the core with the next flush, in order: ops, and entries (orders, packed there). */
  private ops: Array<FiringOp | Entry> = [];
  private flushQueued = false;
  /** A flush of staged orders only, held so that a steady stream of them wakes the thread once per hold. */
  private holdTimer: NodeJS.Timeout | null = null;
  private worker: Worker | null = null;
  private core: FiringCore | null = null;
  private restarts = 0;
  /** Spec object -> id known to the current thread, with the number of entries using it. */
  private specIds = new WeakMap<CallbackSpec, number>();
  private specRefs = new Map<number, { spec: CallbackSpec; refs: number }>();
  private nextSpecId = 1;
  private withdrawals = new Map<number, { ids: number[]; resolve: (r: WithdrawResult[]) => void }>();
  private nextReq = 1;
  private leaseShards = new Set<number>();
  private leaseTimer: NodeJS.Timeout | null = null;
  private running = 0;
  private waitingNow = 0;
  private closing: Promise<void> | null = null;
  private closedResolve: (() => void) | null = null;
  /** The best (largest) node clock minus monotonic clock seen: Date.now() is whole ms, so each sample is a floor. */
  private offsetMs = Number.NEGATIVE_INFINITY;
  private readyResolve: (() => void) | null = null;
  private readonly readyPromise = new Promise<void>((resolve) => (this.readyResolve = resolve));
  /** Callers of warmUp() waiting for the thread's answer. */
  private warmUpWaiting: Array<(r: WarmUpReport | null) => void> = [];

  constructor(private readonly o: FiringPortOptions) {
    this.policy = o.targetPolicy ?? new TargetPolicy();
    const entry = o.threadEntry ?? defaultThreadEntry();
    this.mode = o.mode !== 'in-process' && entry !== null ? 'thread' : 'in-process';
    if (this.mode === 'thread' && entry !== null) this.startThread(entry);
    else this.startInProcess();
    this.policy.onChange(() => {
      if (this.worker !== null) this.push({ o: 'policy', policy: this.policy.toData() });
    });
  }

  // --- the Dispatcher interface ----------------------------------------------------------------------------

  /** Never rejects; a delivery that was not sent (withdrawn, revoked, closed) settles retryable. */
  send(delivery: Delivery): Promise<AttemptOutcome> {
    return new Promise((resolve) => this.submit(delivery, 0, (o: AttemptOutcome | null) => resolve(o ?? notSent('not sent: withdrawn, shard lease lost or node closing', this.o.clock.nowMs())), null));
  }

  /**
   * send() without a promise: `done(outcome, tag)` once, with null when the delivery was never sent (withdrawn,
   * its shard revoked or its term over, the port closed). One `done` for all of a caller's sends.
   */
  sendTo<T>(delivery: Delivery, done: SettledCallback<T>, tag: T): void {
    this.submit(delivery, 0, done as SettledCallback<unknown>, tag);
  }

  /** Callbacks handed to the network and not settled. */
  inFlight(): number {
    return this.running;
  }

  /**
   * Callbacks handed over and not started yet: sent now and waiting (a concurrency slot, their shard's lease), or
   * staged for a due time. The engine's back-pressure (queueLimits.dispatchQueuedMax) counts both.
   */
  queued(): number {
    return this.waitingNow + this.staged;
  }

  /** The delivery of this occurrence key is handed over and has not started (a withdraw of it needs the thread's answer). */
  unstarted(key: string): boolean {
    return this.unstartedByKey.has(key);
  }

  /** The earliest due ms staged in the core on this loop (null on the thread, whose loop nothing here delays). */
  nextStagedDueMs(): number | null {
    return this.core === null ? null : this.core.nextDueAtMs();
  }

  /** Resolves once the thread runs (at once for the core on the main loop); sends made before simply wait. */
  ready(): Promise<void> {
    return this.readyPromise;
  }

  /**
   * Warms the send path up where callbacks leave (the thread, or this loop): warm-up.ts, a throwaway sender and
   * server, nothing of this port's (no start, outcome or policy change). The node calls it once it is ready.
   * Resolves with what it did; null when it could not run (the thread died meanwhile, the port is closing).
   */
  warmUp(): Promise<WarmUpReport | null> {
    if (this.closing !== null) return Promise.resolve(null);
    const done = (r: WarmUpReport | null): WarmUpReport | null => {
      if (r !== null) this.o.logger.debug('send path warmed up', { mode: this.mode, ...r });
      return r;
    };
    if (this.worker === null) return warmUpSendPath().then(done);
    this.worker.postMessage(warmUpMessage);
    return new Promise<WarmUpReport | null>((resolve) => this.warmUpWaiting.push(resolve)).then(done);
  }

  /** Stop: staged deliveries resolve null; in-flight ones get graceMs, then settle as the Dispatcher's close does. */
  close(graceMs: number = limits.dispatchCloseGraceMsDefault): Promise<void> {
    this.closing ??= this.closeNow(graceMs);
    return this.closing;
  }

  // --- ahead of time ---------------------------------------------------------------------------------------

  /**
   * Sends `delivery` at dueAtMs (node clock) from the thread, its request built and signed now. Resolves with the
   * outcome, or null when it was not sent (withdrawn, its shard revoked, the port closed).
   */
  stage(delivery: Delivery, dueAtMs: number): Promise<AttemptOutcome | null> {
    return new Promise((resolve) => this.stageTo(delivery, dueAtMs, resolve, null));
  }

  /** stage() without a promise (see sendTo). */
  stageTo<T>(delivery: Delivery, dueAtMs: number, done: SettledCallback<T>, tag: T): void {
    this.submit(delivery, Math.max(1, dueAtMs), done as SettledCallback<unknown>, tag);
  }

  /** Deliveries staged and not started yet. */
  stagedCount(): number {
    return this.staged;
  }

  /**
   * Takes deliveries not started yet back (by occurrence key): staged, or sent now and waiting for a concurrency
   * slot or a lease. Per key: 'withdrawn' (it will never be sent; its done got null first) or 'sent' (already
   * handed to the network, or not here). A cancel's acknowledgement waits for this, so nothing fires after an
   * acknowledged cancel.
   */
  withdraw(keys: readonly string[]): Promise<WithdrawResult[]> {
    const ids: number[] = [];
    const at: number[] = [];
    const results: WithdrawResult[] = keys.map(() => 'sent');
    keys.forEach((key, i) => {
      const e = this.unstartedByKey.get(key);
      if (e === undefined) return;
      ids.push(e.id);
      at.push(i);
    });
    if (ids.length === 0) return Promise.resolve(results);
    const req = this.nextReq++;
    this.push({ o: 'withdraw', req, ids });
    return new Promise((resolve) => {
      this.withdrawals.set(req, {
        ids,
        resolve: (r) => {
          r.forEach((x, j) => (results[at[j]!] = x));
          resolve(results);
        },
      });
    });
  }

  /**
   * This node no longer fires `shard` in `term` (nor before): the thread drops what waits with such a fencing
   * token (done gets null) and sends nothing more of it.
   */
  revokeShard(shard: number, term: number): void {
    this.push({ o: 'revoke', shard, term });
  }

  /**
   * Resolves once the thread holds `lease` for `shard` and nothing it starts after can use an older deadline. A
   * leadership transfer waits for it before the target is told to campaign: the target may lead within a few ms,
   * long before the lease deadline the thread holds would end. On the main loop the lease is asked
   * at each send, so there is nothing to wait for.
   */
  fence(shard: number, lease: ShardLease): Promise<void> {
    if (this.core !== null || this.worker === null) return Promise.resolve();
    this.setLease(shard, lease);
    // An empty withdraw is answered after every op before it: the barrier.
    const req = this.nextReq++;
    this.push({ o: 'withdraw', req, ids: [] });
    return new Promise((resolve) => this.withdrawals.set(req, { ids: [], resolve: () => resolve() }));
  }

  /** Tells the thread the shard's term and lease deadline now (also done with every batch that carries a delivery of it). */
  setLease(shard: number, lease: ShardLease): void {
    this.push({ o: 'lease', shard, term: lease.term, untilMs: lease.untilMs });
  }

  /** Test only: the thread exits at once, as a crash would. */
  crashThreadForTest(): void {
    this.worker?.postMessage(crashMessage);
  }

  // --- internals ---------------------------------------------------------------------------------------------

  private submit(delivery: Delivery, dueAtMs: number, done: SettledCallback<unknown>, tag: unknown): void {
    if (this.closing !== null) {
      // As every other answer: on a later tick, never inside the call.
      queueMicrotask(() => done(null, tag));
      return;
    }
    const id = this.nextId++;
    const shard = Number.parseInt(delivery.fencingToken, 10) || 0;
    const key = `${delivery.jobId}\n${delivery.scheduledAtMs}`;
    const nowMs = this.o.clock.nowMs();
    const e: Entry = { o: 'entry', id, specId: 0, delivery, shard, dueAtMs, key, submittedAtMs: nowMs, started: false, done, tag };
    this.entries.set(id, e);
    if (dueAtMs === 0) this.waitingNow++;
    else this.staged++;
    this.unstartedByKey.set(key, e);
    this.leaseShards.add(shard);
    this.queue(e);
    // Only an order staged far enough ahead may wait for the hold: the thread still prepares and warms it in time.
    this.scheduleFlush(dueAtMs === 0 || dueAtMs - nowMs <= stageHoldMs + stageHoldMarginMs);
  }

  /** Queues the entry's order, its spec defined in the thread first if it does not know it. */
  private queue(e: Entry): void {
    e.specId = this.worker !== null ? this.specId(e.delivery.spec) : 0;
    this.ops.push(e);
  }

  /** The spec's id in the current thread, defined there first if needed; counted until its entry settles. */
  private specId(spec: CallbackSpec): number {
    let id = this.specIds.get(spec);
    const known = id === undefined ? undefined : this.specRefs.get(id);
    if (id === undefined || known === undefined || known.spec !== spec) {
      id = this.nextSpecId++;
      this.specIds.set(spec, id);
      this.specRefs.set(id, { spec, refs: 1 });
      this.ops.push({ o: 'spec', id, spec });
      return id;
    }
    known.refs++;
    return id;
  }

  private unref(spec: CallbackSpec): void {
    const id = this.specIds.get(spec);
    if (id === undefined) return;
    const known = this.specRefs.get(id);
    if (known === undefined || --known.refs > 0) return;
    this.specRefs.delete(id);
    this.specIds.delete(spec);
    this.ops.push({ o: 'unspec', id });
    this.scheduleFlush(false);
  }

  private push(op: FiringOp): void {
    this.ops.push(op);
    this.scheduleFlush(true);
  }

  /**
   * Urgent: the calls of this macrotask go out in a microtask. Otherwise (orders staged well ahead, spec releases)
   * they may wait up to stageHoldMs for company: to the thread every message is a wake-up, which at a steady rate
   * cost as much as the send itself. Anything urgent takes what waits along, in order. On the main loop, a call.
   */
  private scheduleFlush(urgent: boolean): void {
    if (this.flushQueued) return;
    if (urgent || this.worker === null) {
      this.flushQueued = true;
      queueMicrotask(this.flushBound);
      return;
    }
    this.holdTimer ??= setTimeout(this.flushBound, stageHoldMs);
  }

  private readonly flushBound = (): void => this.flush();

  private measureOffset(): number {
    const sample = this.o.clock.nowMs() - monoEpochMs();
    // A stepped clock (or the first sample) resets; otherwise the largest floor sample is the closest.
    if (Math.abs(sample - this.offsetMs) > 5) this.offsetMs = sample;
    else if (sample > this.offsetMs) this.offsetMs = sample;
    return this.offsetMs;
  }

  private flush(): void {
    this.flushQueued = false;
    if (this.holdTimer !== null) clearTimeout(this.holdTimer);
    this.holdTimer = null;
    if (this.ops.length === 0) return;
    const ops: FiringOp[] = [];
    // Each shard's lease deadline goes before its deliveries.
    if (this.o.lease !== undefined && this.core === null) for (const shard of this.leaseShards) ops.push(this.leaseOp(shard));
    const queued = this.ops;
    this.ops = [];
    const toThread = this.worker !== null;
    // Consecutive orders cross as one packed op (one buffer moved, not an object cloned per order).
    for (let i = 0; i < queued.length; ) {
      const op = queued[i]!;
      if (op.o !== 'entry') {
        ops.push(op);
        i++;
        continue;
      }
      if (!toThread) {
        ops.push({ o: 'send', order: op });
        i++;
        continue;
      }
      let end = i + 1;
      while (end < queued.length && queued[end]!.o === 'entry') end++;
      ops.push(packOrders(queued as Order[], i, end));
      i = end;
    }
    this.post({ offsetMs: this.measureOffset(), ops });
    this.armLeaseRefresh();
  }

  private leaseOp(shard: number): FiringOp {
    const lease = this.o.lease!(shard);
    return { o: 'lease', shard, term: lease.term, untilMs: lease.untilMs };
  }

  /** While deliveries wait in the thread, their shards' deadlines are refreshed (a lease is renewed every heartbeat). */
  private armLeaseRefresh(): void {
    // On the main loop the core asks the lease itself at each send.
    if (this.o.lease === undefined || this.leaseTimer !== null || this.core !== null) return;
    this.leaseTimer = setInterval(() => {
      this.leaseShards.clear();
      for (const e of this.entries.values()) if (!e.started) this.leaseShards.add(e.shard);
      if (this.leaseShards.size === 0) {
        clearInterval(this.leaseTimer!);
        this.leaseTimer = null;
        return;
      }
      // Orders held for company go with the refresh (flush puts every shard's lease first).
      if (this.ops.length > 0) this.flush();
      else this.flushLeasesOnly();
    }, limits.firingLeaseRefreshMs);
    this.leaseTimer.unref();
  }

  private flushLeasesOnly(): void {
    const ops: FiringOp[] = [];
    for (const shard of this.leaseShards) ops.push(this.leaseOp(shard));
    this.post({ offsetMs: this.measureOffset(), ops });
  }

  private post(batch: FiringBatch): void {
    if (this.worker !== null) this.worker.postMessage(batch, batchTransfer(batch));
    else if (this.core !== null) this.core.handle(batch);
    // else: the thread is gone after close(); what is still said (a revoke while the node stops) has no one to hear it.
  }

  private onEvents(ev: FiringEvents): void {
    if (ev.ready === true) this.readyResolve?.();
    if (ev.warmUp !== undefined) this.warmUpWaiting.shift()?.(ev.warmUp);
    const started = ev.started;
    if (started !== null) {
      for (let i = 0; i < started.length; i += 2) {
        const e = this.entries.get(started[i]!);
        if (e === undefined || e.started) continue;
        e.started = true;
        this.running++;
        // The thread's clock is never ahead of the node's but may be a part of a millisecond behind it: a start
        // is never put before the moment the node handed the delivery over.
        const startedAtMs = Math.max(started[i + 1]!, e.submittedAtMs);
        e.startedAtMs = startedAtMs;
        if (e.dueAtMs === 0) this.waitingNow--;
        else this.staged--;
        if (this.unstartedByKey.get(e.key) === e) this.unstartedByKey.delete(e.key);
        if (this.o.onStart !== undefined) {
          try {
            this.o.onStart(e.delivery, startedAtMs);
          } catch (err) {
            this.o.logger.error('onStart hook threw', { jobId: e.delivery.jobId, err });
          }
        }
      }
    }
    const outcomes = ev.outcomes;
    if (outcomes !== null) {
      for (let i = 0, j = 0; i < outcomes.length; i += 6, j++) {
        const e = this.entries.get(outcomes[i]!);
        if (e === undefined) continue;
        const status = outcomes[i + 2]!;
        const retryAfter = outcomes[i + 3]!;
        const startedAtMs = Math.max(outcomes[i + 4]!, e.startedAtMs ?? e.submittedAtMs);
        this.settle(e, {
          kind: outcomeKinds[outcomes[i + 1]!]!,
          statusCode: status < 0 ? null : status,
          error: ev.errors[j] ?? null,
          retryAfterMs: retryAfter < 0 ? null : retryAfter,
          startedAtMs,
          finishedAtMs: Math.max(outcomes[i + 5]!, startedAtMs),
        });
      }
    }
    for (const w of ev.withdrawn) {
      const pending = this.withdrawals.get(w.req);
      if (pending === undefined) continue;
      this.withdrawals.delete(w.req);
      pending.resolve(pending.ids.map((id, i) => (w.results[i] === 1 && this.dropEntry(id) ? 'withdrawn' : 'sent')));
    }
    for (const id of ev.dropped) this.dropEntry(id);
    if (ev.closed) this.closedResolve?.();
  }

  /** An entry that will never be sent: its done gets null. */
  private dropEntry(id: number): boolean {
    const e = this.entries.get(id);
    if (e === undefined || e.started) return false;
    this.settle(e, null);
    return true;
  }

  private settle(e: Entry, outcome: AttemptOutcome | null): void {
    this.entries.delete(e.id);
    if (e.started) this.running--;
    else if (e.dueAtMs === 0) this.waitingNow--;
    else this.staged--;
    if (!e.started && this.unstartedByKey.get(e.key) === e) this.unstartedByKey.delete(e.key);
    this.unref(e.delivery.spec);
    try {
      e.done(outcome, e.tag);
    } catch (err) {
      this.o.logger.error('outcome callback threw', { jobId: e.delivery.jobId, err });
    }
  }

  // --- the thread's life -------------------------------------------------------------------------------------

  private startThread(entry: ThreadEntry): void {
    const data: FiringThreadData = {
      policy: this.policy.toData(),
      inFlightMax: this.o.inFlightMax,
      leases: this.o.lease !== undefined,
      payloadRefBytesMax: this.o.payloadRefBytesMax,
      logLevel: this.o.logLevel ?? 'warn',
      logFormat: this.o.logFormat ?? 'json',
      offsetMs: this.measureOffset(),
    };
    const worker =
      typeof entry === 'object' && 'source' in entry
        ? new Worker(entry.source, { eval: true, workerData: data, stdout: false, stderr: false })
        : new Worker(entry, { workerData: data, stdout: false, stderr: false });
    worker.on('message', (ev: FiringEvents) => this.onEvents(ev));
    worker.on('error', (err) => this.o.logger.error('firing thread failed', { err }));
    worker.on('exit', (code) => this.onThreadExit(worker, code));
    // The node's servers keep the process alive; a port left open must not.
    worker.unref();
    this.worker = worker;
  }

  private startInProcess(): void {
    this.readyResolve?.();
    this.core = new FiringCore({
      clock: this.o.clock,
      logger: this.o.logger,
      policy: this.policy,
      inFlightMax: this.o.inFlightMax,
      leases: this.o.lease !== undefined,
      leaseNow: this.o.lease,
      payloadRefBytesMax: this.o.payloadRefBytesMax,
      emit: (ev) => this.onEvents(ev),
    });
  }

  /** Resolves once the thread answered every warm-up asked of it (or died), or after waitMs. */
  private warmUpsAnswered(waitMs: number): Promise<void> {
    return new Promise<void>((resolve) => {
      let left = this.warmUpWaiting.length;
      const timer = setTimeout(resolve, waitMs);
      const one = (): void => {
        if (--left > 0) return;
        clearTimeout(timer);
        resolve();
      };
      this.warmUpWaiting = this.warmUpWaiting.map((r) => (report: WarmUpReport | null) => {
        r(report);
        one();
      });
    });
  }

  /**
   * The thread died. What it reported started settles retryable (it may have been sent: the engine's retry keeps
   * at-least-once); the rest is handed to a new thread (or to the core on the main loop after too many crashes).
   */
  private onThreadExit(worker: Worker, code: number): void {
    if (this.worker !== worker) return;
    this.worker = null;
    this.readyResolve?.(); // a thread that died before it ran: the restart below answers for it
    for (const resolve of this.warmUpWaiting.splice(0)) resolve(null);
    if (this.closing !== null) {
      this.closedResolve?.();
      return;
    }
    this.restarts++;
    this.o.logger.error('firing thread exited; restarting it', { code, restarts: this.restarts });
    const nowMs = this.o.clock.nowMs();
    // Withdrawals the dead thread did not answer: whatever did not start is withdrawn here.
    for (const [req, w] of this.withdrawals) {
      this.withdrawals.delete(req);
      w.resolve(w.ids.map((id) => (this.dropEntry(id) ? 'withdrawn' : 'sent')));
    }
    for (const e of [...this.entries.values()]) if (e.started) this.settle(e, notSent('firing thread exited', nowMs));
    // A new thread knows no spec: every waiting entry is sent again with its spec defined anew.
    this.specIds = new WeakMap();
    this.specRefs = new Map();
    this.ops = [];
    const entry = this.o.threadEntry ?? defaultThreadEntry();
    if (entry !== null && this.restarts <= limits.firingThreadRestartsMax) this.startThread(entry);
    else {
      this.o.logger.error('firing thread keeps failing; sending from the main loop');
      this.startInProcess();
    }
    this.policyResend();
    for (const e of [...this.entries.values()].sort((a, b) => a.id - b.id)) {
      this.leaseShards.add(e.shard);
      this.queue(e);
    }
    this.scheduleFlush(true);
  }

  private policyResend(): void {
    if (this.worker !== null) this.ops.push({ o: 'policy', policy: this.policy.toData() });
  }

  private async closeNow(graceMs: number): Promise<void> {
    // The close op is urgent: what was held goes with it (and is dropped there, as everything staged).
    if (this.leaseTimer !== null) clearInterval(this.leaseTimer);
    this.leaseTimer = null;
    const closed = new Promise<void>((resolve) => (this.closedResolve = resolve));
    this.push({ o: 'close', graceMs });
    await closed;
    // Whatever the thread did not settle (it died while closing) settles here.
    const nowMs = this.o.clock.nowMs();
    for (const e of [...this.entries.values()]) {
      if (e.started) this.settle(e, notSent('aborted: dispatcher closed', nowMs));
      else this.dropEntry(e.id);
    }
    for (const [req, w] of this.withdrawals) {
      this.withdrawals.delete(req);
      w.resolve(w.ids.map(() => 'withdrawn'));
    }
    // A warm-up still running in the thread has a node:http server parsing: a thread terminated inside that parser
    // aborts the whole process (a V8 fatal error), so it is let finish first; it ends within its own bound.
    if (this.worker !== null && this.warmUpWaiting.length > 0) await this.warmUpsAnswered(2 * limits.firingWarmUpTimeoutMs);
    const worker = this.worker;
    this.worker = null;
    for (const resolve of this.warmUpWaiting.splice(0)) resolve(null);
    if (worker !== null) await worker.terminate();
  }
}
