/**
 * The callback sender: one HTTP attempt per send(). The node decides when retries happen and records them;
 * this module only waits for a concurrency slot, sends, and classifies what came back.
 *
 * Performance shape (10,000 callbacks/s on 2 cores): one undici Agent, which keeps a keep-alive Pool per
 * origin (so a hanging target only ties up its own connections); one object per attempt that is at once undici's
 * raw handler, its limiter queue node and its deadline list node (sendTo: no promise or closure per send); one
 * timer for all deadlines; per spec, the request head as a template and the signing keys decoded once; parsed
 * URLs cached; response bodies counted, never stored.
 */
import type { Socket } from 'node:net';
import { Agent, type buildConnector, type Dispatcher as UndiciDispatcher } from 'undici';
import type { Clock } from '../core/clock.js';
import type { Logger } from '../core/log.js';
import { limits } from '../core/limits.js';
import type { CallbackSpec, PayloadRef } from '../scheduler/types.js';
import { classifyError, classifyStatus, parseRetryAfterMs, type OutcomeKind } from './classify.js';
import { ConcurrencyLimiter, type LimiterEntry } from './limiter.js';
import { PayloadRefFetcher } from './payload-ref.js';
import { Signer } from './signature.js';
import { TargetPolicy } from './target-policy.js';

export interface Delivery {
  jobId: string;
  scheduledAtMs: number;
  /** 1, 2, ... */
  attempt: number;
  /** `${shard}.${term}` */
  fencingToken: string;
  /** method, url, headers, timeoutMs, retry, signingSecret, maxConcurrency */
  spec: CallbackSpec;
  /** The payload, sent as is. */
  body: Uint8Array;
  /**
   * How the payload was given (JobRecord.payloadEncoding): it picks the content-type sent when the spec has
   * none, `application/json` for a JSON payload, `application/octet-stream` for payload_base64 bytes.
   * Absent = 'json'.
   */
  bodyEncoding?: 'json' | 'base64';
  /** Task name, or `job:${jobId}` for an inline callback; limit = spec.maxConcurrency. */
  concurrencyKey: string;
  /** The body by reference (JobRecord.payloadRef), fetched when the attempt starts; `body` is then empty. */
  payloadRef?: PayloadRef | null;
}

export interface AttemptOutcome {
  kind: 'succeeded' | 'retryable' | 'permanent';
  statusCode: number | null;
  /**
   * Short text: 'timeout after 10000 ms', 'ECONNRESET', 'HTTP 503', 'HTTP 302 (redirect to ... not followed)'.
   * null on success.
   */
  error: string | null;
  /** Parsed Retry-After (seconds or HTTP date), clamped to limits.retryAfterMsMax. */
  retryAfterMs: number | null;
  /** Clock time when the request was handed to undici (after any concurrency wait). */
  startedAtMs: number;
  finishedAtMs: number;
}

/**
 * A delivery's request head built ahead of its start (src/dispatch/firing-core.ts stages deliveries): the headers,
 * signatures included, so that at the due millisecond only the bytes are written.
 */
export interface PreparedRequest {
  headers: string[];
  /** The time its signatures carry: the due time it was prepared for. */
  signedAtMs: number;
}

/** How sendTo() hands an outcome back; `tag` is the one given to that send. */
export type OutcomeCallback<T> = (outcome: AttemptOutcome, tag: T) => void;

export interface DispatcherOptions {
  clock: Clock;
  logger: Logger;
  inFlightMax?: number;
  onStart?: (d: Delivery, startedAtMs: number) => void;
  /**
   * Asked when an attempt gets its concurrency slot, right before it would be sent: false = not sent (the
   * attempt settles at once, no onStart; the caller knows why). The node refuses an order its core withdrew
   * (cancel, pause) or whose shard it no longer leads with a valid lease while the order waited in the queue.
   */
  admit?: (d: Delivery) => boolean;
  /** Which addresses callbacks may connect to (checked at connect time). Default: the built-in denies only. */
  targetPolicy?: TargetPolicy;
  /** `serve --payload-ref-max-bytes` (default payloadRefLimits.bytesMaxDefault). */
  payloadRefBytesMax?: number;
}

export class Dispatcher {
  private readonly engine: Engine;

  constructor(options: DispatcherOptions) {
    this.engine = new Engine(options);
  }

  /** Never rejects: every failure is an outcome. Waits for a slot of its concurrencyKey (and the global inFlightMax) first. */
  send(delivery: Delivery, prepared: PreparedRequest | null = null): Promise<AttemptOutcome> {
    return this.engine.send(delivery, prepared);
  }

  /**
   * send() without a promise: `done(outcome, tag)` is called once with the outcome (never synchronously inside
   * sendTo). For a caller that sends many: one `done` function for all its sends and a tag per send, so a send
   * allocates no promise and no closure.
   */
  sendTo<T>(delivery: Delivery, prepared: PreparedRequest | null, done: OutcomeCallback<T>, tag: T): void {
    this.engine.sendTo(delivery, prepared, done as OutcomeCallback<unknown>, tag);
  }

  /**
   * The request head of `delivery` as send() would build it, signed with `signAtMs` as the signature timestamp
   * (a staged delivery signs with its due time); null when the URL cannot be used (send() then says why).
   */
  prepare(delivery: Delivery, signAtMs: number): PreparedRequest | null {
    return this.engine.prepare(delivery, signAtMs);
  }

  /**
   * Opens connections to the origin of `url` ahead of use, so that `count` requests due at once find one each
   * (what the origin's pool holds free counts). Idle warm connections close after limits.dispatchWarmIdleMs.
   */
  warm(url: string, count: number): void {
    this.engine.warm(url, count);
  }

  inFlight(): number {
    return this.engine.limiter.running();
  }

  queued(): number {
    return this.engine.limiter.queued();
  }

  /** Stop: let in-flight requests finish up to graceMs, then abort them; close pools. */
  close(graceMs: number = limits.dispatchCloseGraceMsDefault): Promise<void> {
    return this.engine.close(graceMs);
  }
}

// ---------------------------------------------------------------------------------------------------------

/** Our headers, lower-cased: a user header of the same name is dropped, never sent alongside ours. */
const reservedHeaderNames = new Set([
  'x-deduplication-key',
  'x-punctual-job-id',
  'x-punctual-scheduled-at',
  'x-punctual-attempt',
  'x-punctual-fencing-token',
  'x-punctual-signature',
  'webhook-id',
  'webhook-timestamp',
  'webhook-signature',
  // The URL names the target: a user Host header must not send the request to another virtual host.
  'host',
  // undici computes or rejects these (or they are hop-by-hop): sending a user's copy would fail every attempt.
  'content-length',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'upgrade',
  'expect',
  'te',
  'trailer',
  'proxy-connection',
]);

interface Target {
  origin: string;
  path: string;
  /** origin + path: the URL as requested (no fragment), which the v2 signature binds. */
  url: string;
  /** `protocol//hostname:port` as undici names the origin when it asks for a connection (OriginSockets' key). */
  socketsKey: string;
  /** What a warm connection is opened with (the parts undici's connect options carry). */
  hostname: string;
  host: string;
  protocol: string;
  port: string;
}

/** What every attempt of one CallbackSpec object shares (specs are treated as immutable). */
interface SpecPlan {
  /** Flat [name, value, ...] of the spec's headers minus the reserved ones. */
  user: string[];
  hasContentType: boolean;
  /** The spec's secrets with their keys decoded once; null = unsigned. */
  signer: Signer | null;
  /**
   * The request head as a flat [name, value, ...] list with empty slots for each attempt's values, copied once
   * per attempt: without a content-type (the spec has one, or the body is empty), with `application/json`, with
   * `application/octet-stream` (payload_base64 bytes).
   */
  heads: readonly [string[], string[], string[]];
}

/**
 * The sockets of one origin: `open` counts every one this dispatcher started (undici's and warm ones, from the
 * connect until the socket closes), `connecting` the warm ones on their way, `ready` the warm ones not handed to
 * undici yet, and `waiters` undici's connects waiting for a warm one on its way.
 */
interface OriginSockets {
  open: number;
  connecting: number;
  ready: Set<Socket>;
  waiters: Array<{ opts: buildConnector.Options; callback: buildConnector.Callback }>;
}

type AttemptState = 'queued' | 'running' | 'done';

class TimeoutError extends Error {
  override name = 'TimeoutError';
}

/** One attempt: the undici handler, the limiter queue node and the in-flight list node in one object. */
class Attempt implements UndiciDispatcher.DispatchHandler, LimiterEntry {
  readonly concurrencyKey: string;
  readonly concurrencyLimit: number;
  queueNext: LimiterEntry | null = null;
  /** In-flight list links (close() aborts what is left after its grace). */
  prev: Attempt | null = null;
  next: Attempt | null = null;
  state: AttemptState = 'queued';
  /** Who gets the outcome (send()'s resolve, or sendTo()'s callback with its tag); null once settled. */
  done: OutcomeCallback<unknown> | null;
  readonly tag: unknown;
  /** undici's abort of the request, once it reached a connection. */
  abort: ((err: Error) => void) | null = null;
  /** Deadline list links (Deadlines): set while the attempt's request is out. */
  deadlineList: DeadlineList | null = null;
  deadlinePrev: Attempt | null = null;
  deadlineNext: Attempt | null = null;
  /** performance.now() at which the attempt times out. */
  deadlineAt = 0;
  startedAtMs = 0;
  statusCode: number | null = null;
  retryAfterMs: number | null = null;
  /** Location of a 3xx answer, for the error text (redirects are not followed). */
  location: string | null = null;
  bodyBytes = 0;
  /** What is sent: the delivery's body, or the body its payload_ref fetched (with that body's content type). */
  body: Uint8Array;
  refContentType: string | null = null;

  constructor(
    readonly engine: Engine,
    readonly delivery: Delivery,
    readonly target: Target,
    /** Headers built when the delivery was staged; null = build them at start. */
    readonly prepared: PreparedRequest | null,
    done: OutcomeCallback<unknown>,
    tag: unknown,
  ) {
    this.done = done;
    this.tag = tag;
    this.concurrencyKey = delivery.concurrencyKey;
    this.body = delivery.body;
    this.concurrencyLimit = Math.max(1, Math.floor(delivery.spec.maxConcurrency) || 1);
  }

  // The handler is undici's raw one (onConnect .. onError) rather than the controller API: that API wraps every
  // request in two more objects and decodes every response's headers into an object, where an attempt reads at
  // most two headers, and only on a 3xx or a retryable status.

  onConnect(abort: (err?: Error) => void): void {
    // Already settled (timed out while queued inside undici, or closed): never send it late.
    if (this.state === 'done') return abort(new TimeoutError('attempt already settled'));
    this.abort = abort;
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[]): boolean {
    if (statusCode < 200) return true; // 1xx informational: the real status follows
    this.statusCode = statusCode;
    if (classifyStatus(statusCode) === 'retryable') {
      const retryAfter = rawHeader(rawHeaders, 'retry-after');
      this.retryAfterMs = parseRetryAfterMs(retryAfter ?? undefined, this.engine.clock.nowMs());
    }
    if (statusCode >= 300 && statusCode <= 399) this.location = rawHeader(rawHeaders, 'location');
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.state === 'done') return true;
    this.bodyBytes += chunk.length;
    if (this.bodyBytes <= limits.responseBodyBytesMax) return true;
    // Enough read: settle on the status and drop the connection instead of reading an unbounded body.
    this.engine.settleOnStatus(this);
    this.abort?.(new Error('response body limit reached'));
    return true;
  }

  onComplete(): void {
    this.engine.settleOnStatus(this);
  }

  onError(err: Error): void {
    if (this.state === 'done') return;
    // The receiver already answered with a status: that answer is the verdict, whatever happens to the body
    // (a 2xx whose body is cut must not be delivered again).
    if (this.statusCode !== null) return this.engine.settleOnStatus(this);
    const verdict = classifyError(err);
    this.engine.finish(this, verdict.kind, this.statusCode, verdict.error, null);
  }
}

/** The first value of header `lowerName` in undici's raw [name, value, ...] list, as latin1; null when absent. */
function rawHeader(rawHeaders: readonly Buffer[], lowerName: string): string | null {
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i];
    if (name.length === lowerName.length && name.toString('latin1').toLowerCase() === lowerName) {
      return rawHeaders[i + 1].toString('latin1');
    }
  }
  return null;
}

/** Attempts of one timeoutMs in start order, which is also deadline order (performance.now() is monotonic). */
interface DeadlineList {
  readonly timeoutMs: number;
  head: Attempt | null;
  tail: Attempt | null;
}

/**
 * Every running attempt's deadline under one timer instead of a timer per attempt: a list per distinct
 * timeoutMs (so each list stays sorted by appending), and one timer set for the earliest head. Settling
 * unlinks in O(1); an early timer (its head settled) finds nothing due and is set again.
 *
 * An expired deadline gives its verdict only after one more poll phase (setImmediate runs after it): libuv
 * runs expired timers BEFORE it reads the sockets, so after the event loop was blocked (a long synchronous
 * batch of fires or commits) an answer already sitting in the socket would otherwise lose to its deadline, and
 * the callback would be delivered again (one duplicate per pooled connection of a stalled hot instant).
 */
class Deadlines {
  private readonly lists = new Map<number, DeadlineList>();
  private timer: NodeJS.Timeout | null = null;
  /** performance.now() the timer is set for. */
  private timerAt = Infinity;
  /** Expired attempts waiting for the next check phase, linked through deadlineNext. */
  private expiredHead: Attempt | null = null;
  private readonly scanBound = (): void => this.scan();
  private readonly declareBound = (): void => this.declareExpired();

  add(attempt: Attempt, timeoutMs: number): void {
    let list = this.lists.get(timeoutMs);
    if (list === undefined) {
      list = { timeoutMs, head: null, tail: null };
      this.lists.set(timeoutMs, list);
    }
    attempt.deadlineAt = performance.now() + timeoutMs;
    attempt.deadlineList = list;
    attempt.deadlinePrev = list.tail;
    attempt.deadlineNext = null;
    if (list.tail === null) list.head = attempt;
    else list.tail.deadlineNext = attempt;
    list.tail = attempt;
    if (attempt.deadlineAt < this.timerAt) this.arm(attempt.deadlineAt);
    else this.timer?.ref();
  }

  remove(attempt: Attempt): void {
    const list = attempt.deadlineList;
    if (list === null) return;
    if (attempt.deadlinePrev !== null) attempt.deadlinePrev.deadlineNext = attempt.deadlineNext;
    else list.head = attempt.deadlineNext;
    if (attempt.deadlineNext !== null) attempt.deadlineNext.deadlinePrev = attempt.deadlinePrev;
    else list.tail = attempt.deadlinePrev;
    attempt.deadlineList = null;
    attempt.deadlinePrev = null;
    attempt.deadlineNext = null;
    // A list per distinct timeoutMs: an empty one goes, or specs with ever new timeouts would grow the map.
    if (list.head === null) this.lists.delete(list.timeoutMs);
    // Nothing out: the timer no longer holds the process open, but it stays set. At a steady rate each callback
    // settles before the next starts, and clearing it here and setting it again in add() was a timer per callback.
    if (this.lists.size === 0) this.timer?.unref();
  }

  close(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.timerAt = Infinity;
  }

  private arm(atMs: number): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timerAt = atMs;
    // Whole ms, rounded up: node's timers count whole ms of loop time, a shorter wait would find nothing due.
    this.timer = setTimeout(this.scanBound, Math.max(1, Math.ceil(atMs - performance.now())));
  }

  private scan(): void {
    this.timer = null;
    this.timerAt = Infinity;
    const now = performance.now();
    let next = Infinity;
    for (const list of this.lists.values()) {
      while (list.head !== null && list.head.deadlineAt <= now) {
        const attempt = list.head;
        this.remove(attempt);
        if (this.expiredHead === null) setImmediate(this.declareBound);
        attempt.deadlineNext = this.expiredHead;
        this.expiredHead = attempt;
      }
      if (list.head !== null && list.head.deadlineAt < next) next = list.head.deadlineAt;
    }
    if (next !== Infinity) this.arm(next);
  }

  private declareExpired(): void {
    let attempt = this.expiredHead;
    this.expiredHead = null;
    while (attempt !== null) {
      const nextExpired = attempt.deadlineNext;
      attempt.deadlineNext = null;
      declareTimeout(attempt);
      attempt = nextExpired;
    }
  }
}

function declareTimeout(attempt: Attempt): void {
  if (attempt.state === 'done') return;
  const abort = attempt.abort;
  const timeoutMs = attempt.delivery.spec.timeoutMs;
  // A status already received is the verdict: only the body was late (it is not waited for any longer).
  if (attempt.statusCode !== null) attempt.engine.settleOnStatus(attempt);
  else attempt.engine.finish(attempt, 'retryable', null, `timeout after ${timeoutMs} ms`, null);
  if (abort !== null) abort(new TimeoutError(`timeout after ${timeoutMs} ms`));
}

class Engine {
  readonly clock: Clock;
  readonly limiter: ConcurrencyLimiter<Attempt>;
  private readonly logger: Logger;
  private readonly onStart: ((d: Delivery, startedAtMs: number) => void) | null;
  private readonly admit: ((d: Delivery) => boolean) | null;
  private readonly agent: Agent;
  private readonly payloadRefs: PayloadRefFetcher;
  private readonly targets = new Map<string, Target | string>();
  private readonly plans = new WeakMap<CallbackSpec, SpecPlan>();
  private readonly deadlines = new Deadlines();
  private activeHead: Attempt | null = null;
  private closing: Promise<void> | null = null;
  private idleResolve: (() => void) | null = null;
  /** The sockets of each origin, per `protocol//hostname:port` (OriginSockets); gone when it has none. */
  private readonly origins = new Map<string, OriginSockets>();
  /** How a warm connection not handed to undici yet is dropped (its listeners, removed when undici takes it). */
  private readonly spareDrops = new WeakMap<Socket, () => void>();
  private readonly baseConnect: buildConnector.connector;

  constructor(options: DispatcherOptions) {
    this.clock = options.clock;
    this.logger = options.logger.child({ component: 'dispatch' });
    this.onStart = options.onStart ?? null;
    this.admit = options.admit ?? null;
    this.limiter = new ConcurrencyLimiter<Attempt>(options.inFlightMax ?? limits.dispatchInFlightMax, (a) =>
      this.start(a),
    );
    const policy = options.targetPolicy ?? new TargetPolicy();
    this.baseConnect = policy.connector();
    // A pool that needs a connection takes a warm one first (opened through the same policy check), else waits
    // for a warm one on its way (as quick as a new one, and a new one could take the origin past its bound), else
    // connects.
    const connect: buildConnector.connector = (opts, callback) => {
      const key = `${opts.protocol}//${opts.hostname}:${opts.port}`;
      const origin = this.origins.get(key);
      const spare = origin === undefined ? null : this.takeSpare(origin);
      // Asynchronously, as a real connect completes: undici's pool is not reentrant here.
      if (spare !== null) return void process.nextTick(callback, null, spare);
      if (origin !== undefined && origin.connecting > origin.waiters.length) return void origin.waiters.push({ opts, callback });
      this.countedConnect(key, opts, callback);
    };
    this.agent = new Agent({ connections: limits.dispatchConnectionsPerOriginMax, pipelining: 1, connect });
    this.payloadRefs = new PayloadRefFetcher({ policy, bytesMax: options.payloadRefBytesMax });
  }

  send(delivery: Delivery, prepared: PreparedRequest | null): Promise<AttemptOutcome> {
    return new Promise<AttemptOutcome>((resolve) => this.sendTo(delivery, prepared, resolve, null));
  }

  sendTo(delivery: Delivery, prepared: PreparedRequest | null, done: OutcomeCallback<unknown>, tag: unknown): void {
    if (this.closing !== null) return this.settleLater(done, tag, this.immediate('retryable', 'dispatcher closed'));
    const target = this.target(delivery.spec.url);
    if (typeof target === 'string') return this.settleLater(done, tag, this.immediate('permanent', target));
    this.limiter.acquire(new Attempt(this, delivery, target, prepared, done, tag));
  }

  /** An outcome known before anything was sent, handed over on a later tick like every other. */
  private settleLater(done: OutcomeCallback<unknown>, tag: unknown, outcome: AttemptOutcome): void {
    process.nextTick(done, outcome, tag);
  }

  /** Called by the limiter when the attempt holds its key slot and a global slot. */
  private start(attempt: Attempt): void {
    const d = attempt.delivery;
    attempt.state = 'running';
    if (this.admit !== null && !this.admit(d)) {
      attempt.startedAtMs = this.clock.nowMs();
      this.linkActive(attempt);
      this.finish(attempt, 'retryable', null, 'not sent: withdrawn before it started', null);
      return;
    }
    this.linkActive(attempt);
    const startedAtMs = this.clock.nowMs();
    attempt.startedAtMs = startedAtMs;
    if (this.onStart !== null) {
      try {
        this.onStart(d, startedAtMs);
      } catch (err) {
        this.logger.error('onStart hook threw', { jobId: d.jobId, err });
      }
    }
    // payload_ref: the body is fetched first (its own timeout), then sent like any other.
    if (d.payloadRef != null) return this.fetchPayloadThenSend(attempt, d.payloadRef);
    this.sendNow(attempt);
  }

  /** The attempt's payload_ref fetched (payload-ref.ts); a failed fetch settles the attempt with its verdict. */
  private fetchPayloadThenSend(attempt: Attempt, ref: PayloadRef): void {
    void this.payloadRefs.fetch(ref).then((fetched) => {
      if (attempt.state === 'done') return; // settled meanwhile (the dispatcher closed)
      if (!fetched.ok) return this.finish(attempt, fetched.kind, null, fetched.error, null);
      attempt.body = fetched.body;
      attempt.refContentType = fetched.contentType;
      this.sendNow(attempt);
    });
  }

  private sendNow(attempt: Attempt): void {
    const d = attempt.delivery;
    const startedAtMs = attempt.startedAtMs;
    this.deadlines.add(attempt, d.spec.timeoutMs);
    // A staged request was signed over its inline body at its due time; a payload_ref body is fetched now, and a
    // request that leaves well after its due time (it waited for its max_concurrency slot, or the node was
    // behind) is signed again: the signature's time is when the attempt is sent (docs/api.md).
    const prepared = attempt.prepared;
    const fresh = prepared !== null && d.payloadRef == null && startedAtMs - prepared.signedAtMs <= limits.dispatchPreparedSignatureAgeMsMax;
    const options: UndiciDispatcher.DispatchOptions = {
      origin: attempt.target.origin,
      path: attempt.target.path,
      method: d.spec.method as UndiciDispatcher.HttpMethod,
      headers: fresh ? prepared.headers : this.headers(attempt, startedAtMs),
      body: attempt.body.length > 0 ? attempt.body : null,
      // Our timer covers connect + headers + body as one budget; undici's own timers would only race it.
      headersTimeout: 0,
      bodyTimeout: 0,
    };
    try {
      this.agent.dispatch(options, attempt);
    } catch (err) {
      attempt.onError(err as Error);
    }
  }

  private linkActive(attempt: Attempt): void {
    attempt.next = this.activeHead;
    if (this.activeHead !== null) this.activeHead.prev = attempt;
    this.activeHead = attempt;
  }

  settleOnStatus(attempt: Attempt): void {
    if (attempt.state === 'done') return;
    const statusCode = attempt.statusCode;
    if (statusCode === null) {
      this.finish(attempt, 'retryable', null, 'response ended without a status', null);
      return;
    }
    const kind = classifyStatus(statusCode);
    const error = kind === 'succeeded' ? null : statusError(statusCode, attempt.location);
    this.finish(attempt, kind, statusCode, error, attempt.retryAfterMs);
  }

  /** Settles the attempt once (later callbacks from undici are ignored) and frees its slots. */
  finish(
    attempt: Attempt,
    kind: OutcomeKind,
    statusCode: number | null,
    error: string | null,
    retryAfterMs: number | null,
  ): void {
    if (attempt.state === 'done') return;
    const wasRunning = attempt.state === 'running';
    attempt.state = 'done';
    this.deadlines.remove(attempt);
    const finishedAtMs = this.clock.nowMs();
    const startedAtMs = wasRunning ? attempt.startedAtMs : finishedAtMs;
    const done = attempt.done!;
    attempt.done = null;
    try {
      done({ kind, statusCode, error, retryAfterMs, startedAtMs, finishedAtMs }, attempt.tag);
    } catch (err) {
      // A sendTo() caller's bug must not leave the slots of this attempt taken.
      this.logger.error('outcome callback threw', { jobId: attempt.delivery.jobId, err });
    }
    if (!wasRunning) return;
    this.unlinkActive(attempt);
    this.limiter.release(attempt);
    if (this.idleResolve !== null && this.activeHead === null) this.idleResolve();
  }

  close(graceMs: number): Promise<void> {
    if (this.closing === null) this.closing = this.closeNow(graceMs);
    return this.closing;
  }

  private async closeNow(graceMs: number): Promise<void> {
    const drained = this.limiter.drainQueued();
    for (const attempt of drained) this.finish(attempt, 'retryable', null, 'dispatcher closed', null);
    if (this.activeHead !== null) await this.waitIdle(graceMs);
    let aborted = 0;
    while (this.activeHead !== null) {
      const attempt = this.activeHead;
      const abort = attempt.abort;
      if (attempt.statusCode !== null) this.settleOnStatus(attempt);
      else this.finish(attempt, 'retryable', null, 'aborted: dispatcher closed', null);
      abort?.(new Error('dispatcher closed'));
      aborted++;
    }
    this.logger.info('dispatcher closed', { queuedDropped: drained.length, inFlightAborted: aborted });
    for (const origin of this.origins.values()) {
      for (const socket of origin.ready) socket.destroy();
      for (const waiter of origin.waiters.splice(0)) waiter.callback(new Error('dispatcher closed'), null);
    }
    this.deadlines.close();
    // Every attempt is settled by now. destroy(), not close(): close() would wait for requests still queued
    // inside undici whose attempts timed out there (a saturated pool), and for nothing we need.
    await this.agent.destroy();
    await this.payloadRefs.close();
  }

  prepare(d: Delivery, signAtMs: number): PreparedRequest | null {
    const target = this.target(d.spec.url);
    // A payload_ref body is fetched when the attempt starts: nothing to sign ahead.
    if (d.payloadRef != null) return null;
    return typeof target === 'string' ? null : { headers: this.headersFor(d, target, d.body, null, signAtMs), signedAtMs: signAtMs };
  }

  warm(url: string, count: number): void {
    if (this.closing !== null) return;
    const target = this.target(url);
    if (typeof target === 'string') return;
    const key = target.socketsKey;
    const stats = (this.agent.stats as Record<string, { free: number } | undefined>)[target.origin];
    const origin = this.origins.get(key);
    const spares = origin === undefined ? 0 : origin.ready.size + origin.connecting;
    // Every socket of the origin counts, undici's still connecting and warm ones included: the bound is the origin's.
    const room = limits.dispatchConnectionsPerOriginMax - (origin?.open ?? 0);
    const want = Math.min(count, limits.dispatchConnectionsPerOriginMax) - (stats?.free ?? 0) - spares;
    const n = Math.min(want, room);
    for (let i = 0; i < n; i++) this.openSpare(key, target);
  }

  private origin(key: string): OriginSockets {
    let origin = this.origins.get(key);
    if (origin === undefined) {
      origin = { open: 0, connecting: 0, ready: new Set(), waiters: [] };
      this.origins.set(key, origin);
    }
    return origin;
  }

  /** An origin with nothing left in it is dropped (no callback still refers to it once `open` is 0). */
  private forget(key: string, origin: OriginSockets): void {
    if (origin.open === 0 && origin.connecting === 0 && origin.ready.size === 0 && origin.waiters.length === 0 && this.origins.get(key) === origin) {
      this.origins.delete(key);
    }
  }

  /** A connection through the policy, counted in its origin's `open` from the connect until the socket closes. */
  private countedConnect(key: string, opts: buildConnector.Options, callback: buildConnector.Callback): void {
    const origin = this.origin(key);
    origin.open++;
    this.baseConnect(opts, (err, socket) => {
      if (err !== null || socket === null) {
        origin.open--;
        this.forget(key, origin);
        return callback(err, null);
      }
      socket.once('close', () => {
        origin.open--;
        this.forget(key, origin);
      });
      callback(null, socket);
    });
  }

  private openSpare(key: string, t: Target): void {
    const opts = { hostname: t.hostname, host: t.host, protocol: t.protocol, port: t.port, servername: null, localAddress: null } as unknown as buildConnector.Options;
    const origin = this.origin(key);
    origin.connecting++;
    this.countedConnect(key, opts, (err, socket) => {
      origin.connecting--;
      const waiter = origin.waiters.shift();
      if (err !== null || socket === null) {
        // The real send reports what is wrong with the target; a connect that waited for this one makes its own.
        if (waiter !== undefined) this.countedConnect(key, waiter.opts, waiter.callback);
        else this.forget(key, origin);
        return;
      }
      const s = socket as Socket;
      if (waiter !== undefined) return waiter.callback(null, s);
      if (this.closing !== null) return void s.destroy();
      origin.ready.add(s);
      // An idle warm connection that the target closes, or that nobody takes in time, is dropped.
      const drop = (): void => {
        origin.ready.delete(s);
        s.destroy();
      };
      this.spareDrops.set(s, drop);
      // No 'data' listener: it would switch the socket to flowing mode and undici would miss the first answer.
      s.once('close', drop);
      s.once('error', drop);
      s.once('end', drop);
      s.setTimeout(limits.dispatchWarmIdleMs, drop);
    });
  }

  private takeSpare(origin: OriginSockets): Socket | null {
    for (const s of origin.ready) {
      origin.ready.delete(s);
      const drop = this.spareDrops.get(s);
      // Only the warm connection's own listeners: the one that counts the origin's sockets stays.
      if (drop !== undefined) s.off('close', drop).off('error', drop).off('end', drop).setTimeout(0, drop);
      if (!s.destroyed) return s;
    }
    return null;
  }

  private waitIdle(graceMs: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, graceMs);
      const self = this;
      function done(): void {
        clearTimeout(timer);
        self.idleResolve = null;
        resolve();
      }
      this.idleResolve = done;
    });
  }

  private unlinkActive(attempt: Attempt): void {
    if (attempt.prev !== null) attempt.prev.next = attempt.next;
    else this.activeHead = attempt.next;
    if (attempt.next !== null) attempt.next.prev = attempt.prev;
    attempt.prev = null;
    attempt.next = null;
  }

  private immediate(kind: OutcomeKind, error: string): AttemptOutcome {
    const nowMs = this.clock.nowMs();
    return { kind, statusCode: null, error, retryAfterMs: null, startedAtMs: nowMs, finishedAtMs: nowMs };
  }

  /** The URL's origin and path, parsed once per distinct URL; a string is why the URL cannot be used. */
  private target(url: string): Target | string {
    const cached = this.targets.get(url);
    if (cached !== undefined) return cached;
    const parsed = parseTarget(url);
    if (this.targets.size >= limits.dispatchUrlCacheMax) this.targets.clear();
    this.targets.set(url, parsed);
    return parsed;
  }

  private headers(attempt: Attempt, nowMs: number): string[] {
    return this.headersFor(attempt.delivery, attempt.target, attempt.body, attempt.refContentType, nowMs);
  }

  /** Our headers and the user's for one attempt: `body` is what is sent (a fetched payload_ref's, else the delivery's). */
  private headersFor(d: Delivery, target: Target, body: Uint8Array, refContentType: string | null, nowMs: number): string[] {
    const spec = d.spec;
    let prepared = this.plans.get(spec);
    if (prepared === undefined) {
      prepared = planSpec(spec);
      this.plans.set(spec, prepared);
    }
    const dedupKey = `${d.jobId}:${d.scheduledAtMs}`;
    let headers: string[];
    let at: number;
    if (refContentType === null) {
      const variant = prepared.hasContentType || d.body.length === 0 ? 0 : d.bodyEncoding === 'base64' ? 2 : 1;
      headers = prepared.heads[variant].slice();
      at = prepared.user.length;
    } else {
      // A fetched payload_ref body goes with its own content type, in place of the spec's.
      headers = withoutContentType(prepared.heads[0]);
      at = headers.length - prepared.heads[0].length + prepared.user.length;
      headers.push('content-type', refContentType);
    }
    // The values into the slots of the spec's head (planSpec): names and order are fixed there.
    headers[at + 1] = dedupKey;
    headers[at + 3] = d.jobId;
    headers[at + 5] = String(d.scheduledAtMs);
    headers[at + 7] = String(d.attempt);
    headers[at + 9] = d.fencingToken;
    if (prepared.signer !== null) {
      const signed = prepared.signer.sign({ method: spec.method, url: target.url, dedupKey, unixMs: nowMs, body });
      headers[at + 11] = dedupKey;
      headers[at + 13] = signed.webhookTimestamp;
      headers[at + 15] = signed.webhookSignature;
      headers[at + 17] = signed.punctualSignature;
    }
    return headers;
  }
}

const locationTextMax = 200;

/**
 * `HTTP 503`; a 3xx names where it pointed, since it is not followed (the URL is probably out of date), but
 * without its query string, fragment or credentials: whoever reads executions must not learn tokens that an
 * internal service put in a Location.
 */
function statusError(statusCode: number, location: string | null): string {
  if (statusCode < 300 || statusCode > 399) return `HTTP ${statusCode}`;
  if (location === null || location.length === 0) return `HTTP ${statusCode} (redirect not followed)`;
  const bare = redirectShown(location);
  const shown = bare.length <= locationTextMax ? bare : bare.slice(0, locationTextMax - 3) + '...';
  return `HTTP ${statusCode} (redirect to ${shown} not followed)`;
}

/** A Location as scheme://host/path (an absolute one) or its path (a relative one): no query, fragment or userinfo. */
function redirectShown(location: string): string {
  if (URL.canParse(location)) {
    const u = new URL(location);
    return u.host === '' ? `${u.protocol}${u.pathname}` : `${u.protocol}//${u.host}${u.pathname}`;
  }
  const cut = location.search(/[?#]/);
  return cut < 0 ? location : location.slice(0, cut);
}

/** The flat [name, value, ...] list without its content-type entries. */
function withoutContentType(user: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < user.length; i += 2) if (user[i].toLowerCase() !== 'content-type') out.push(user[i], user[i + 1]);
  return out;
}

/** Specs are treated as immutable: the filtered headers and the signing keys are kept per spec object. */
function planSpec(spec: CallbackSpec): SpecPlan {
  const specHeaders = spec.headers;
  const user: string[] = [];
  let hasContentType = false;
  for (const name of Object.keys(specHeaders)) {
    const lower = name.toLowerCase();
    if (reservedHeaderNames.has(lower)) continue;
    if (lower === 'content-type') hasContentType = true;
    user.push(name, specHeaders[name]);
  }
  let signer: Signer | null = null;
  if (spec.signingSecret !== null && spec.signingSecret.length > 0) {
    signer = new Signer(spec.signingSecretNext ? [spec.signingSecret, spec.signingSecretNext] : [spec.signingSecret]);
  }
  // Our names after the user's, values filled per attempt (headersFor), the default content-type last.
  const ours = ['X-Deduplication-Key', '', 'X-Punctual-Job-Id', '', 'X-Punctual-Scheduled-At', '', 'X-Punctual-Attempt', '', 'X-Punctual-Fencing-Token', ''];
  if (signer !== null) ours.push('webhook-id', '', 'webhook-timestamp', '', 'webhook-signature', '', 'X-Punctual-Signature', '');
  const head = [...user, ...ours];
  const heads: SpecPlan['heads'] = [head, [...head, 'content-type', 'application/json'], [...head, 'content-type', 'application/octet-stream']];
  return { user, hasContentType, signer, heads };
}

function parseTarget(url: string): Target | string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return 'invalid url';
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    return `unsupported url scheme ${parsed.protocol}`;
  }
  const path = parsed.pathname + parsed.search;
  const port = parsed.port !== '' ? parsed.port : parsed.protocol === 'https:' ? '443' : '80';
  // undici names an IPv6 host without its brackets when it asks for a connection.
  const socketsKey = `${parsed.protocol}//${parsed.hostname.replace(/^\[(.*)\]$/, '$1')}:${port}`;
  return { origin: parsed.origin, path, url: parsed.origin + path, socketsKey, hostname: parsed.hostname, host: parsed.host, protocol: parsed.protocol, port };
}
