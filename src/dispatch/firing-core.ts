/**
 * The firing side of callbacks: what runs on the firing thread (firing-thread.ts), or on the main loop where no
 * thread can be started (firing-port.ts decides). It owns a Dispatcher (its undici Agent, pools and warm
 * connections) and a small near-horizon wheel of staged deliveries, and sends each at its due millisecond:
 * a timer wakes it nodeLimits.firingSpinMs before, the last millisecond is spun on setImmediate, and nothing
 * leaves before `nowMs() >= dueAtMs`. What is due (staged, or sent now) goes to the network
 * nodeLimits.firingSendChunkMax per turn of the loop, so the first callbacks of a hot instant are written before
 * the rest are prepared; the starts of a chunk are reported after its requests were written. A staged
 * delivery's request (head, signature) is built on a later turn, nodeLimits.firingPrepareChunkMax per turn.
 *
 * It decides nothing the replicated state has not decided: the main side stages or sends what the engine
 * decided, withdraws what a cancel, a pause or a lost leadership took back, and tells it each shard's lease
 * deadline. A delivery whose shard's deadline has passed is held (never sent) until a later deadline arrives or
 * the shard is revoked. Everything crosses as plain data: ops in (orders packed, OrdersOp), batched events out.
 */
import type { Clock } from '../core/clock.js';
import type { Logger } from '../core/log.js';
import { nodeLimits } from '../core/limits.js';
import type { CallbackSpec, PayloadRef } from '../scheduler/types.js';
import { Dispatcher, type AttemptOutcome, type Delivery, type PreparedRequest } from './dispatcher.js';
import type { TargetPolicy, TargetPolicyData } from './target-policy.js';
import type { WarmUpReport } from './warm-up.js';

/**
 * One order as the main side holds it: a delivery to send now (dueAtMs 0) or at dueAtMs (node clock, epoch ms), with
 * the id of its spec in the thread (0 on the main loop, where the delivery's own spec object is used).
 */
export interface Order {
  id: number;
  specId: number;
  shard: number;
  dueAtMs: number;
  delivery: Delivery;
}

/**
 * Consecutive orders of one batch as they cross to the thread: their numbers and bodies in ONE transferred buffer and
 * their strings in one string, so a batch of thousands is not a structured clone of thousands of objects (packOrders).
 */
export interface OrdersOp {
  o: 'orders';
  n: number;
  /** n * orderFields float64s (see the layout below), then the bodies' bytes. */
  buf: ArrayBuffer;
  /** Each order's jobId, fencingToken and concurrencyKey, back to back (lengths in buf). */
  strs: string;
  /** The payload refs of the orders that have one (rare), by index from buf; null when none has. */
  refs: PayloadRef[] | null;
}

/** On the main loop only: the order with the main side's delivery, nothing to pack. */
export interface LocalSendOp {
  o: 'send';
  order: Order;
}

// The float64 fields of one packed order.
const F_ID = 0, F_SPEC = 1, F_SHARD = 2, F_DUE = 3, F_SCHEDULED = 4, F_ATTEMPT = 5, F_ENC = 6, F_STR = 7, F_JOB_LEN = 8,
  F_TOKEN_LEN = 9, F_CK_LEN = 10, F_BODY = 11, F_BODY_LEN = 12, F_REF = 13;
const orderFields = 14;
const encodings = [undefined, 'json', 'base64'] as const;
const emptyBody = new Uint8Array(0);

/** Packs orders (their specs already known to the thread by specId) into one OrdersOp. */
export function packOrders(orders: readonly Order[], from = 0, to = orders.length): OrdersOp {
  const n = to - from;
  const numBytes = n * orderFields * 8;
  let bodyBytes = 0;
  for (let i = from; i < to; i++) bodyBytes += orders[i]!.delivery.body.length;
  const buf = new ArrayBuffer(numBytes + bodyBytes);
  const nums = new Float64Array(buf, 0, n * orderFields);
  const bytes = bodyBytes > 0 ? new Uint8Array(buf) : null;
  let strs = '';
  let refs: PayloadRef[] | null = null;
  let bodyAt = numBytes;
  for (let i = from, b = 0; i < to; i++, b += orderFields) {
    const { id, specId, shard, dueAtMs, delivery: d } = orders[i]!;
    nums[b + F_ID] = id;
    nums[b + F_SPEC] = specId;
    nums[b + F_SHARD] = shard;
    nums[b + F_DUE] = dueAtMs;
    nums[b + F_SCHEDULED] = d.scheduledAtMs;
    nums[b + F_ATTEMPT] = d.attempt;
    nums[b + F_ENC] = d.bodyEncoding === undefined ? 0 : d.bodyEncoding === 'json' ? 1 : 2;
    nums[b + F_STR] = strs.length;
    nums[b + F_JOB_LEN] = d.jobId.length;
    nums[b + F_TOKEN_LEN] = d.fencingToken.length;
    nums[b + F_CK_LEN] = d.concurrencyKey.length;
    strs += d.jobId + d.fencingToken + d.concurrencyKey;
    nums[b + F_BODY] = bodyAt;
    nums[b + F_BODY_LEN] = d.body.length;
    if (d.body.length > 0) bytes!.set(d.body, bodyAt);
    bodyAt += d.body.length;
    if (d.payloadRef != null) {
      refs ??= [];
      nums[b + F_REF] = refs.length;
      refs.push(d.payloadRef);
    } else nums[b + F_REF] = -1;
  }
  return { o: 'orders', n, buf, strs, refs };
}

/** Where the thread is in a batch it takes a part at a time (FiringCore.handlePart). */
export interface BatchCursor {
  op: number;
  /** The next order inside an OrdersOp. */
  order: number;
}

/**
 * A shard as the main side sees it: the term this node fires it in (-1: none) and until when (the monotonic epoch
 * ms of monoEpochMs()) its lease may be trusted; -Infinity when it may not.
 */
export interface ShardLease {
  term: number;
  untilMs: number;
}

export type FiringOp =
  | OrdersOp
  | LocalSendOp
  /** Specs cross once and are referred to by id while deliveries use them (tasks share one spec object). */
  | { o: 'spec'; id: number; spec: CallbackSpec }
  | { o: 'unspec'; id: number }
  | { o: 'withdraw'; req: number; ids: number[] }
  /** untilMs: performance.timeOrigin + performance.now() domain (the same on every thread). */
  | { o: 'lease'; shard: number; term: number; untilMs: number }
  /** This node no longer fires `shard` in `term` or any earlier term: what waits with such a token is dropped. */
  | { o: 'revoke'; shard: number; term: number }
  | { o: 'policy'; policy: TargetPolicyData }
  | { o: 'close'; graceMs: number };

export interface FiringBatch {
  /** The node clock minus performance.timeOrigin + performance.now() on the main side (ms). */
  offsetMs: number;
  ops: FiringOp[];
}

/** The buffers a batch's OrdersOps hand over (postMessage's transfer list: moved, not copied). */
export function batchTransfer(batch: FiringBatch): ArrayBuffer[] {
  const out: ArrayBuffer[] = [];
  for (const op of batch.ops) if (op.o === 'orders') out.push(op.buf);
  return out;
}

/** Outcome kinds as numbers in FiringEvents.outcomes. */
export const outcomeKinds = ['succeeded', 'retryable', 'permanent'] as const;

export interface FiringEvents {
  /** [id, startedAtMs] pairs, in start order. */
  started: Float64Array | null;
  /** [id, kind index, statusCode or -1, retryAfterMs or -1, startedAtMs, finishedAtMs] per outcome. */
  outcomes: Float64Array | null;
  /** The error text of each outcome, in the same order. */
  errors: Array<string | null>;
  /** Answers to withdraw ops: per id 1 = withdrawn (never sent), 0 = already handed to the network or unknown. */
  withdrawn: Array<{ req: number; results: Uint8Array }>;
  /** Deliveries dropped unsent: a revoke, a newer term's lease, close. */
  dropped: number[];
  closed: boolean;
  /** The thread's first message: it is running and can send. */
  ready?: boolean;
  /** The answer to a warm-up message: what the warm-up of the send path did (null: it failed). */
  warmUp?: WarmUpReport | null;
}

export interface FiringCoreOptions {
  /** The node's clock as this thread sees it. */
  clock: Clock;
  logger: Logger;
  policy: TargetPolicy;
  inFlightMax?: number;
  /** Shard lease deadlines are obeyed (false: the main side gave no lease source; everything may be sent). */
  leases: boolean;
  /**
   * On the main loop only: the shard's lease asked at the moment of each send, instead of the deadline last
   * pushed (the check is then exactly the node's own, with no grace).
   */
  leaseNow?: (shard: number) => ShardLease;
  /** `serve --payload-ref-max-bytes` for the thread's Dispatcher. */
  payloadRefBytesMax?: number;
  /**
   * On the firing thread only: blocks until the clock reads `dueAtMs` (at most nodeLimits.firingSpinMs and a
   * fraction), in place of spinning on setImmediate for a due time's last millisecond. A spin keeps a core busy
   * for as long as something is due every millisecond (a steady rate), taken from the main loop and the receivers
   * on the same machine; a sleep is as precise and costs none. The main loop spins: work that arrives during a
   * sleep would wait for it and then delay the send's own write (bench/NOTES.md "The firing thread by default").
   */
  sleepUntil?: (dueAtMs: number) => void;
  /**
   * On the firing thread only: starts and outcomes wait up to this long (ms) for others to travel with (answers to
   * withdrawals and drops go at once, and take them along): every message wakes the main loop, and at a steady rate
   * a message per start and per outcome cost the thread more than the send. 0 or absent: reported on the next turn
   * (on the main loop, where an event is a call; the starts of a chunk after its writes).
   */
  eventsDelayMs?: number;
  emit(events: FiringEvents, transfer: ArrayBuffer[]): void;
}

/** A URL warmed for n connections is not warmed again for n or fewer within this long (FiringCore.warm). */
const warmRepeatMs = 100;
/** Events' number arrays at least this long are transferred to the main side, shorter ones copied (flush). */
const transferMinNumbers = 256;

// Read once: the getter is a visible item of the firing thread's profile when asked per call.
const timeOrigin = performance.timeOrigin;

/** performance.timeOrigin + performance.now(): a monotonic epoch-ms clock comparable across threads. */
export function monoEpochMs(): number {
  return timeOrigin + performance.now();
}

const sleeper = new Int32Array(new SharedArrayBuffer(4));

/**
 * Blocks this thread until monoEpochMs() reaches `monoMs`, for at most nodeLimits.firingSpinMs and a fraction: the
 * kernel's timer wakes it (Atomics.wait on a word nothing notifies), well within a millisecond.
 */
export function sleepUntil(monoMs: number): void {
  const leftMs = monoMs - monoEpochMs();
  if (leftMs > 0) Atomics.wait(sleeper, 0, 0, Math.min(leftMs, nodeLimits.firingSpinMs + 1));
}

/** The node clock on the firing thread: the monotonic clock plus the offset the main side measured. */
export class OffsetClock implements Clock {
  offsetMs = 0;
  nowMs(): number {
    return Math.floor(monoEpochMs() + this.offsetMs);
  }
}

/**
 * staged: in the near-horizon wheel; held: due, its shard's lease not trusted now; queued: handed to the
 * Dispatcher, waiting for a concurrency slot; sent: started; gone: withdrawn or dropped (never sent).
 */
type StagedState = 'staged' | 'held' | 'queued' | 'sent' | 'gone';

/**
 * A delivery with what the core keeps of it, in one object: the Dispatcher's hooks (admit, onStart) get it back as
 * the delivery they were handed and find it without a lookup table.
 */
class Staged implements Delivery {
  prepared: PreparedRequest | null = null;
  state: StagedState = 'staged';
  /** The term of its fencing token. */
  readonly term: number;

  constructor(
    readonly id: number,
    readonly shard: number,
    readonly dueAtMs: number,
    readonly jobId: string,
    readonly scheduledAtMs: number,
    readonly attempt: number,
    readonly fencingToken: string,
    readonly spec: CallbackSpec,
    readonly body: Uint8Array,
    readonly bodyEncoding: 'json' | 'base64' | undefined,
    readonly concurrencyKey: string,
    readonly payloadRef: PayloadRef | null,
  ) {
    this.term = Number(fencingToken.slice(fencingToken.indexOf('.') + 1));
  }

  get delivery(): Delivery {
    return this;
  }
}

export class FiringCore {
  private readonly dispatcher: Dispatcher;
  private readonly specs = new Map<number, CallbackSpec>();
  /** Not started yet: staged, held for a lease, or queued in the Dispatcher. */
  private readonly waiting = new Map<number, Staged>();
  /** Due ms -> deliveries staged for it; `dueHeap` is a min-heap of the keys. */
  private readonly buckets = new Map<number, Staged[]>();
  /** Due ms -> per URL, how many were staged for it (withdrawals not counted off: it only sizes the warm-up). */
  private readonly bucketUrls = new Map<number, Map<string, number>>();
  private readonly dueHeap: number[] = [];
  private readonly held = new Map<number, Staged[]>();
  /** Due and not sent yet (a hot instant goes out in chunks); dueHead is the next one. */
  private dueNow: Staged[] = [];
  private dueHead = 0;
  private readonly leases = new Map<number, ShardLease>();
  /** Per shard, the last term this node was told it no longer fires. */
  private readonly revokedTerms = new Map<number, number>();
  /** Ids the Dispatcher's admit just refused: the outcome it settles them with is not one to report. */
  private readonly refused = new Set<number>();
  /** Withdrawn or dropped while queued in the Dispatcher (already answered for; their slot has not come yet). */
  private readonly goneQueued = new Set<number>();
  private heldRetry: NodeJS.Timeout | null = null;
  private timer: NodeJS.Timeout | null = null;
  private timerAtMs = 0;
  private spin: NodeJS.Immediate | null = null;
  private flushing: NodeJS.Immediate | null = null;
  /** Starts and outcomes waiting for others to travel with (eventsDelayMs). */
  private eventsTimer: NodeJS.Timeout | null = null;
  private warming: NodeJS.Immediate | null = null;
  /** Staged deliveries whose request is not built yet, in the order handed over (built a chunk per turn). */
  private unprepared: Staged[] = [];
  private unpreparedHead = 0;
  private preparing: NodeJS.Immediate | null = null;
  /** URL -> the most deliveries staged for one due ms among those staged since the last warm(). */
  private warmWant = new Map<string, number>();
  /** URL -> what was last asked of Dispatcher.warm for it and when (monoEpochMs), oldest first; see warm(). */
  private readonly warmedAt = new Map<string, { n: number; atMs: number }>();
  private started: number[] = [];
  private outcomes: number[] = [];
  private errors: Array<string | null> = [];
  private withdrawn: FiringEvents['withdrawn'] = [];
  private dropped: number[] = [];
  /** Started and not settled yet (reported started by the Dispatcher, no outcome yet). */
  private running = 0;
  /** A chunk is being handed to the Dispatcher: its starts are reported once the whole chunk is (see sendDue). */
  private sending = false;
  private closing = false;
  private readonly policy: TargetPolicy;
  /** Listeners of the policy data already applied (policy ops carry the whole list). */
  private listenersKnown: number;

  constructor(private readonly o: FiringCoreOptions) {
    this.policy = o.policy;
    this.listenersKnown = o.policy.toData().listeners.length;
    this.dispatcher = this.newDispatcher();
  }

  private newDispatcher(): Dispatcher {
    return new Dispatcher({
      clock: this.o.clock,
      logger: this.o.logger,
      inFlightMax: this.o.inFlightMax,
      targetPolicy: this.policy,
      payloadRefBytesMax: this.o.payloadRefBytesMax,
      admit: (d) => this.admit(d),
      onStart: (d, startedAtMs) => {
        const id = (d as Staged).id;
        const s = this.waiting.get(id);
        if (s !== undefined) {
          s.state = 'sent';
          this.waiting.delete(id);
        }
        this.running++;
        this.started.push(id, startedAtMs);
        if (!this.sending) this.scheduleEventsFlush();
      },
    });
  }

  handle(batch: FiringBatch): void {
    this.handlePart(batch, { op: 0, order: 0 }, Number.POSITIVE_INFINITY);
  }

  /**
   * Applies the batch from `at` on, at most `budget` ops and orders (an OrdersOp counts its orders), and moves `at`
   * past them; true once the batch is done. The thread takes a large batch this way over several turns.
   */
  handlePart(batch: FiringBatch, at: BatchCursor, budget: number): boolean {
    if (this.o.clock instanceof OffsetClock) this.o.clock.offsetMs = batch.offsetMs;
    const ops = batch.ops;
    let left = budget;
    while (at.op < ops.length && left > 0) {
      const op = ops[at.op]!;
      if (op.o === 'orders') {
        const end = Math.min(op.n, at.order + left);
        this.acceptOrders(op, at.order, end);
        left -= end - at.order;
        if (end < op.n) {
          at.order = end;
          break;
        }
        at.order = 0;
      } else {
        this.apply(op);
        left--;
      }
      at.op++;
    }
    this.sendDue();
    this.arm();
    return at.op >= ops.length;
  }

  private apply(op: FiringOp): void {
    switch (op.o) {
      case 'spec':
        this.specs.set(op.id, op.spec);
        return;
      case 'unspec':
        this.specs.delete(op.id);
        return;
      case 'send': {
        const { id, shard, dueAtMs, delivery: d } = op.order;
        return this.accept(
          new Staged(id, shard, dueAtMs, d.jobId, d.scheduledAtMs, d.attempt, d.fencingToken, d.spec, d.body, d.bodyEncoding, d.concurrencyKey, d.payloadRef ?? null),
        );
      }
      case 'orders':
        return this.acceptOrders(op, 0, op.n);
      case 'withdraw': {
        const results = new Uint8Array(op.ids.length);
        op.ids.forEach((id, i) => {
          const s = this.waiting.get(id);
          if (s === undefined) return;
          this.forget(s);
          results[i] = 1;
        });
        this.withdrawn.push({ req: op.req, results });
        this.scheduleFlush();
        return;
      }
      case 'lease': {
        const before = this.leases.get(op.shard);
        this.leases.set(op.shard, { term: op.term, untilMs: op.untilMs });
        // A deadline of the same term that is not trusted now would hold every held delivery again: every batch
        // carries each shard's lease, and re-holding thousands per batch was a visible item of a hot instant.
        if (this.o.leaseNow === undefined && before !== undefined && before.term === op.term && monoEpochMs() >= op.untilMs) return;
        this.releaseHeld(op.shard);
        return;
      }
      case 'revoke':
        this.revokedTerms.set(op.shard, Math.max(op.term, this.revokedTerms.get(op.shard) ?? -1));
        for (const s of this.waiting.values()) if (s.shard === op.shard && s.term <= op.term) this.drop(s);
        return;
      case 'policy':
        // Own listeners bound after start (the API port): added to the live policy the connector checks with.
        for (const [host, port, what] of op.policy.listeners.slice(this.listenersKnown)) this.policy.addListener(host, port, what);
        this.listenersKnown = Math.max(this.listenersKnown, op.policy.listeners.length);
        return;
      case 'close':
        void this.close(op.graceMs);
        return;
    }
  }

  /** Orders [from, to) of a packed OrdersOp, each as its Delivery (strings sliced from one, bodies views of one buffer). */
  private acceptOrders(op: OrdersOp, from: number, to: number): void {
    const nums = new Float64Array(op.buf, 0, op.n * orderFields);
    const strs = op.strs;
    for (let i = from; i < to; i++) {
      const b = i * orderFields;
      const at = nums[b + F_STR]!;
      const jobEnd = at + nums[b + F_JOB_LEN]!;
      const tokenEnd = jobEnd + nums[b + F_TOKEN_LEN]!;
      const bodyLen = nums[b + F_BODY_LEN]!;
      const ref = nums[b + F_REF]!;
      this.accept(
        new Staged(
          nums[b + F_ID]!,
          nums[b + F_SHARD]!,
          nums[b + F_DUE]!,
          strs.slice(at, jobEnd),
          nums[b + F_SCHEDULED]!,
          nums[b + F_ATTEMPT]!,
          strs.slice(jobEnd, tokenEnd),
          this.specs.get(nums[b + F_SPEC]!)!,
          bodyLen === 0 ? emptyBody : new Uint8Array(op.buf, nums[b + F_BODY]!, bodyLen),
          encodings[nums[b + F_ENC]!],
          strs.slice(tokenEnd, tokenEnd + nums[b + F_CK_LEN]!),
          ref < 0 ? null : op.refs![ref]!,
        ),
      );
    }
  }

  private accept(s: Staged): void {
    const spec = s.spec;
    const dueAtMs = s.dueAtMs;
    if (this.closing) return this.drop(s);
    this.waiting.set(s.id, s);
    // Due: sent with the next chunk (sendDue, at the end of this batch), in the order handed over.
    if (dueAtMs === 0 || dueAtMs <= this.o.clock.nowMs()) return void this.dueNow.push(s);
    // Staged: the head and signature built on later turns, a chunk at a time (signed with the due time:
    // docs/security.md), so a batch of thousands does not hold this loop past the due ms of its first ones; one
    // still unbuilt at its due ms is built as it is sent. The connection warmed.
    this.unprepared.push(s);
    this.preparing ??= setImmediate(this.prepareSomeBound);
    let bucket = this.buckets.get(dueAtMs);
    if (bucket === undefined) {
      bucket = [];
      this.buckets.set(dueAtMs, bucket);
      heapPush(this.dueHeap, dueAtMs);
    }
    bucket.push(s);
    let urls = this.bucketUrls.get(dueAtMs);
    if (urls === undefined) {
      urls = new Map();
      this.bucketUrls.set(dueAtMs, urls);
    }
    const n = (urls.get(spec.url) ?? 0) + 1;
    urls.set(spec.url, n);
    if (n > (this.warmWant.get(spec.url) ?? 0)) this.warmWant.set(spec.url, n);
    this.warming ??= setImmediate(() => this.warm());
  }

  private readonly prepareSomeBound = (): void => this.prepareSome();

  /** Builds the requests of the next nodeLimits.firingPrepareChunkMax staged deliveries still waiting for their ms. */
  private prepareSome(): void {
    this.preparing = null;
    for (let n = 0; this.unpreparedHead < this.unprepared.length && n < nodeLimits.firingPrepareChunkMax; ) {
      const s = this.unprepared[this.unpreparedHead++]!;
      if (s.state !== 'staged' || s.prepared !== null) continue;
      s.prepared = this.dispatcher.prepare(s.delivery, s.dueAtMs);
      n++;
    }
    if (this.unpreparedHead < this.unprepared.length) {
      this.preparing = setImmediate(this.prepareSomeBound);
      return;
    }
    this.unprepared = [];
    this.unpreparedHead = 0;
  }

  /**
   * Opens connections ahead: per URL, as many as the most deliveries staged for one due ms. A URL asked for no more
   * than it was within the last warmRepeatMs is not asked again: at a steady rate every batch stages a few for it,
   * and Dispatcher.warm reads undici's pool stats (a walk of every pool's clients), a visible item of the thread's
   * CPU per callback then, for connections that the callbacks keep alive anyway.
   */
  private warm(): void {
    this.warming = null;
    const want = this.warmWant;
    this.warmWant = new Map();
    const nowMs = monoEpochMs();
    // Oldest first: entries past the window go (the map holds only URLs warmed within it).
    for (const [url, w] of this.warmedAt) {
      if (nowMs - w.atMs < warmRepeatMs) break;
      this.warmedAt.delete(url);
    }
    for (const [url, n] of want) {
      const last = this.warmedAt.get(url);
      if (last !== undefined && n <= last.n) continue;
      this.warmedAt.delete(url);
      this.warmedAt.set(url, { n, atMs: nowMs });
      this.dispatcher.warm(url, n);
    }
  }

  /**
   * May `s` leave now? 'send' while this node fires its shard in its token's term with a lease trusted now;
   * 'drop' once that term is over here (revoked, or a newer term fires the shard: a newer leader sends it);
   * 'hold' while the lease is not trusted (a stall, or the newer term's lease has not arrived yet).
   */
  private verdict(s: Staged): 'send' | 'hold' | 'drop' {
    if (!this.o.leases) return 'send';
    if (s.term <= (this.revokedTerms.get(s.shard) ?? -1)) return 'drop';
    const lease = this.o.leaseNow !== undefined ? this.o.leaseNow(s.shard) : this.leases.get(s.shard);
    if (lease === undefined || lease.term < s.term) return 'hold';
    if (lease.term > s.term) return 'drop';
    return monoEpochMs() < lease.untilMs ? 'send' : 'hold';
  }

  /** Due (or sent now): to the Dispatcher's queue, unless its lease is not trusted now (held) or its term is over. */
  private fire(s: Staged): void {
    if (s.state === 'gone') return;
    const v = this.verdict(s);
    if (v === 'drop') return this.drop(s);
    if (v === 'hold') return this.hold(s);
    s.state = 'queued';
    this.dispatcher.sendTo(s.delivery, s.prepared, this.onOutcomeBound, s.id);
  }

  /**
   * The Dispatcher's last word when a queued delivery gets its concurrency slot: one withdrawn or dropped while
   * it waited is not sent, nor one whose lease is not trusted at this moment (held again), nor one of a term over.
   */
  private admit(d: Delivery): boolean {
    const id = (d as Staged).id;
    const s = this.waiting.get(id);
    if (s === undefined || s.state !== 'queued') {
      this.goneQueued.delete(id);
      this.refused.add(id);
      return false;
    }
    const v = this.verdict(s);
    if (v === 'send') return true;
    this.refused.add(s.id);
    if (v === 'drop') this.drop(s);
    else this.hold(s);
    return false;
  }

  private hold(s: Staged): void {
    s.state = 'held';
    let list = this.held.get(s.shard);
    if (list === undefined) {
      list = [];
      this.held.set(s.shard, list);
    }
    list.push(s);
    // On the main loop the lease is asked, not pushed: look again shortly, as the node did before the thread.
    if (this.o.leaseNow !== undefined) this.heldRetry ??= setTimeout(() => this.retryHeld(), nodeLimits.leaseRetryMs);
  }

  private retryHeld(): void {
    this.heldRetry = null;
    for (const shard of [...this.held.keys()]) this.releaseHeld(shard);
  }

  private releaseHeld(shard: number): void {
    const list = this.held.get(shard);
    if (list === undefined) return;
    this.held.delete(shard);
    for (const s of list) if (s.state === 'held') this.fire(s);
  }

  private drop(s: Staged): void {
    if (s.state === 'gone' || s.state === 'sent') return;
    this.forget(s);
    this.dropped.push(s.id);
    this.scheduleFlush();
  }

  /** Never to be sent. One queued in the Dispatcher stays there until its slot comes; admit refuses it then. */
  private forget(s: Staged): void {
    if (s.state === 'queued') this.goneQueued.add(s.id);
    s.state = 'gone';
    this.waiting.delete(s.id);
  }

  /** One function for every send (sendTo): no promise or closure per callback. */
  private readonly onOutcomeBound = (o: AttemptOutcome, id: number): void => this.onOutcome(id, o);

  private onOutcome(id: number, o: AttemptOutcome): void {
    if (this.refused.delete(id)) return;
    const s = this.waiting.get(id);
    if (s !== undefined) {
      // Settled without a start (a URL that cannot be used, a refused target, the Dispatcher closing).
      s.state = 'gone';
      this.waiting.delete(id);
    } else if (this.goneQueued.delete(id)) return; // withdrawn or dropped in the queue, then drained by close
    else this.running--;
    this.outcomes.push(id, outcomeKinds.indexOf(o.kind), o.statusCode ?? -1, o.retryAfterMs ?? -1, o.startedAtMs, o.finishedAtMs);
    this.errors.push(o.error);
    // The last one out with nothing due before the events' delay is over: no other start or outcome can join them
    // meanwhile, so they go now rather than on a timer that would wake the thread once more (below 1,000/s, a
    // wake-up per callback of its own).
    if (this.idleForEventsDelay()) return this.scheduleFlush();
    this.scheduleEventsFlush();
  }

  /** Nothing out or waiting for a slot, and nothing due within eventsDelayMs. */
  private idleForEventsDelay(): boolean {
    const delayMs = this.o.eventsDelayMs ?? 0;
    if (delayMs <= 0 || this.running > 0 || this.dueHead < this.dueNow.length || this.dispatcher.queued() > 0) return false;
    return this.dueHeap.length === 0 || this.dueHeap[0]! - this.o.clock.nowMs() > delayMs;
  }

  // --- the near-horizon wheel ------------------------------------------------------------------------------

  /** The earliest staged due ms (now, while due deliveries wait for their turn); null when nothing is staged. */
  nextDueAtMs(): number | null {
    if (this.dueHead < this.dueNow.length) return this.o.clock.nowMs();
    return this.dueHeap.length === 0 ? null : this.dueHeap[0]!;
  }

  /** One timer for the earliest due ms, then a setImmediate spin for its last millisecond. */
  private arm(): void {
    if (this.dueHeap.length === 0 || this.spin !== null) return;
    const next = this.dueHeap[0]!;
    const delayMs = next - this.o.clock.nowMs();
    if (delayMs <= nodeLimits.firingSpinMs) {
      if (this.timer !== null) clearTimeout(this.timer);
      this.timer = null;
      const sleep = this.o.sleepUntil;
      // After the poll phase: what arrived meanwhile (answers, withdrawals) is handled before the thread sleeps.
      this.spin = setImmediate(sleep === undefined ? () => this.wake() : () => (sleep(this.dueHeap[0] ?? next), this.wake()));
      return;
    }
    if (this.timer !== null && this.timerAtMs === next) return;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timerAtMs = next;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.arm();
    }, delayMs - nodeLimits.firingSpinMs);
  }

  /** The staged deliveries whose due ms came join what is due now, and the next chunk of it is sent. */
  private wake(): void {
    this.spin = null;
    const nowMs = this.o.clock.nowMs();
    while (this.dueHeap.length > 0 && this.dueHeap[0]! <= nowMs) {
      const due = heapPop(this.dueHeap);
      const bucket = this.buckets.get(due);
      this.buckets.delete(due);
      this.bucketUrls.delete(due);
      if (bucket !== undefined) for (const s of bucket) this.dueNow.push(s);
    }
    this.sendDue();
    this.arm();
  }

  /**
   * Hands at most nodeLimits.firingSendChunkMax due deliveries to the Dispatcher; the rest waits in `dueNow` for
   * the next turn (setImmediate), so the loop writes this chunk's requests (and opens its connections) first.
   * Its starts are reported after it: undici writes on a reused connection only after a setImmediate of its
   * own, and the events' flush queued before those would run the main side's work ahead of the writes.
   */
  private sendDue(): void {
    if (this.dueHead >= this.dueNow.length) return;
    this.sending = true;
    try {
      for (let n = 0; this.dueHead < this.dueNow.length && n < nodeLimits.firingSendChunkMax; n++) this.fire(this.dueNow[this.dueHead++]!);
    } finally {
      this.sending = false;
    }
    if (this.started.length > 0) this.scheduleEventsFlush();
    if (this.dueHead < this.dueNow.length) {
      this.spin ??= setImmediate(() => this.wake());
      return;
    }
    this.dueNow = [];
    this.dueHead = 0;
  }

  // --- events out ----------------------------------------------------------------------------------------

  private scheduleFlush(): void {
    this.flushing ??= setImmediate(this.flushBound);
  }

  /** Starts and outcomes: reported after eventsDelayMs unless something else is flushed first (it carries them). */
  private scheduleEventsFlush(): void {
    const delayMs = this.o.eventsDelayMs ?? 0;
    if (delayMs <= 0) return this.scheduleFlush();
    if (this.flushing !== null || this.eventsTimer !== null) return;
    this.eventsTimer = setTimeout(this.eventsTimerBound, delayMs);
  }

  private readonly flushBound = (): void => this.flush(false);
  // A timer that fired is not cleared: clearTimeout inside its own callback takes its list out of the timers'
  // queue in the middle of their run, a visible item per flush at a steady rate.
  private readonly eventsTimerBound = (): void => {
    this.eventsTimer = null;
    this.flush(false);
  };

  private flush(closed: boolean): void {
    if (this.flushing !== null) clearImmediate(this.flushing);
    this.flushing = null;
    if (this.eventsTimer !== null) clearTimeout(this.eventsTimer);
    this.eventsTimer = null;
    // The constructor copies an array directly; from() goes through its iterator.
    const started = this.started.length > 0 ? new Float64Array(this.started) : null;
    const outcomes = this.outcomes.length > 0 ? new Float64Array(this.outcomes) : null;
    const events: FiringEvents = { started, outcomes, errors: this.errors, withdrawn: this.withdrawn, dropped: this.dropped, closed };
    this.started = [];
    this.outcomes = [];
    this.errors = [];
    this.withdrawn = [];
    this.dropped = [];
    // Moved only when large: a transfer detaches the buffer and walks the transfer list, dearer than copying the
    // few numbers a steady rate's flush carries.
    const transfer: ArrayBuffer[] = [];
    if (started !== null && started.length >= transferMinNumbers) transfer.push(started.buffer);
    if (outcomes !== null && outcomes.length >= transferMinNumbers) transfer.push(outcomes.buffer);
    for (const w of events.withdrawn) transfer.push(w.results.buffer as ArrayBuffer);
    this.o.emit(events, transfer);
  }

  /** Drops what is staged or held (reported as dropped), lets the in-flight finish up to graceMs, then reports closed. */
  private async close(graceMs: number): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    if (this.timer !== null) clearTimeout(this.timer);
    if (this.spin !== null) clearImmediate(this.spin);
    if (this.heldRetry !== null) clearTimeout(this.heldRetry);
    if (this.preparing !== null) clearImmediate(this.preparing);
    this.unprepared = [];
    this.unpreparedHead = 0;
    for (const s of [...this.waiting.values()]) this.drop(s);
    this.held.clear();
    this.buckets.clear();
    this.bucketUrls.clear();
    this.dueHeap.length = 0;
    this.dueNow = [];
    this.dueHead = 0;
    await this.dispatcher.close(graceMs);
    if (this.flushing !== null) clearImmediate(this.flushing);
    this.flushing = null;
    if (this.eventsTimer !== null) clearTimeout(this.eventsTimer);
    this.eventsTimer = null;
    // The last outcomes (close settles every attempt) travel with the closed event.
    await new Promise<void>((resolve) => setImmediate(resolve));
    this.flush(true);
  }
}

function heapPush(heap: number[], value: number): void {
  let i = heap.length;
  heap.push(value);
  while (i > 0) {
    const parent = (i - 1) >> 1;
    if (heap[parent]! <= value) break;
    heap[i] = heap[parent]!;
    i = parent;
  }
  heap[i] = value;
}

function heapPop(heap: number[]): number {
  const top = heap[0]!;
  const last = heap.pop()!;
  if (heap.length === 0) return top;
  let i = 0;
  for (;;) {
    const l = 2 * i + 1;
    if (l >= heap.length) break;
    const r = l + 1;
    const c = r < heap.length && heap[r]! < heap[l]! ? r : l;
    if (heap[c]! >= last) break;
    heap[i] = heap[c]!;
    i = c;
  }
  heap[i] = last;
  return top;
}
