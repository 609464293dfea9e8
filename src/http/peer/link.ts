/**
 * PeerLink: this node's side of the link to ONE peer. One HTTP/2 client session, reconnected with bounded
 * exponential backoff whatever happens to it (refused, reset, GOAWAY, timeouts); a bounded queue of Raft
 * messages that drains in batches (one request per batch, many groups per batch) with at most
 * `batchesInFlightMax` batch requests outstanding, so messages that arrive meanwhile coalesce into the next one.
 * State changes (up / down) are logged once each, never per retry.
 */
import * as http2 from 'node:http2';
import { performance } from 'node:perf_hooks';
import type { Logger } from '../../core/log.js';
import type { Message } from '../../raft/index.js';
import { nodeIdHeader, refusalHeader, refusalHints, secretHeader, shardsHeader, type Refusal } from './auth.js';
import { encodeMessages, estimateBytes } from './frame.js';
import type { PeerLimits } from './transport.js';

export interface PeerAddress {
  id: string;
  host: string;
  port: number;
}

export interface LinkStats {
  state: LinkState;
  reachable: boolean;
  /** Messages the peer acknowledged receiving. */
  sent: number;
  /** Messages dropped: queue full, frame too large, or their batch failed. */
  dropped: number;
  queued: number;
  queuedBytes: number;
  batches: number;
  /** Failed batches and requests, and failed connection attempts. */
  rpcErrors: number;
  connects: number;
}

export type LinkState = 'idle' | 'connecting' | 'up' | 'down' | 'closed';

export class PeerUnavailableError extends Error {
  override name = 'PeerUnavailableError';
}

export class PeerRequestError extends Error {
  override name = 'PeerRequestError';
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

interface Queued {
  readonly message: Message;
  readonly bytes: number;
}

export class PeerLink {
  state: LinkState = 'idle';
  private session: http2.ClientHttp2Session | null = null;
  private queue: Queued[] = [];
  private queueHead = 0;
  private queuedBytes = 0;
  private inFlight = 0;
  private flushScheduled = false;
  private backoffMs: number;
  private retryTimer: NodeJS.Timeout | null = null;
  private connectTimer: NodeJS.Timeout | null = null;
  private lastHeardMs = -Infinity;
  /** The peer answered 403 to the last request that got an answer (see answered). */
  private refused = false;
  private readonly streams = new Set<http2.ClientHttp2Stream>();
  private readonly counts = { sent: 0, dropped: 0, batches: 0, rpcErrors: 0, connects: 0 };
  private readonly headers: http2.OutgoingHttpHeaders;

  constructor(
    readonly peer: PeerAddress,
    nodeId: string,
    proof: string | null,
    private readonly limits: PeerLimits,
    private readonly logger: Logger,
    shards: number | null = null,
  ) {
    this.backoffMs = limits.reconnectBackoffMsMin;
    this.headers = { [nodeIdHeader]: nodeId };
    if (proof !== null) this.headers[secretHeader] = proof;
    if (shards !== null) this.headers[shardsHeader] = String(shards);
  }

  /** Queues a message; false (and counted as dropped) when the queue is full. */
  enqueue(message: Message): boolean {
    if (this.state === 'closed') return false;
    const bytes = estimateBytes(message);
    const count = this.queue.length - this.queueHead;
    if (count >= this.limits.queueMessagesMax || this.queuedBytes + bytes > this.limits.queueBytesMax) {
      this.counts.dropped++;
      return false;
    }
    this.queue.push({ message, bytes });
    this.queuedBytes += bytes;
    this.scheduleFlush();
    return true;
  }

  heard(): void {
    this.lastHeardMs = performance.now();
  }

  /**
   * The peer answered a request with `status`. A 403 means it refuses this node (wrong or missing
   * --cluster-secret, or this node is not a member in its book): the peer is alive but nothing gets through,
   * so it is not reachable (GET /v1/cluster, the rebalancer, transfers) until it accepts a request again.
   */
  answered(status: number, refusal?: unknown): void {
    this.heard();
    if (status === 403 && !this.refused) {
      this.refused = true;
      const reason = typeof refusal === 'string' && refusal in refusalHints ? (refusal as Refusal) : null;
      this.logger.warn('peer refuses this node (403)', {
        peer: this.peer.id,
        address: `${this.peer.host}:${this.peer.port}`,
        reason,
        hint: reason === null ? 'check --cluster-secret, --shards and membership on both nodes' : refusalHints[reason],
      });
    } else if (status >= 200 && status < 300 && this.refused) {
      this.refused = false;
      this.logger.info('peer accepts this node again', { peer: this.peer.id });
    }
  }

  reachable(): boolean {
    return this.state === 'up' && !this.refused && performance.now() - this.lastHeardMs < this.limits.reachableMs;
  }

  stats(): LinkStats {
    const queued = this.queue.length - this.queueHead;
    return { state: this.state, reachable: this.reachable(), queued, queuedBytes: this.queuedBytes, ...this.counts };
  }

  countRpcError(): void {
    this.counts.rpcErrors++;
  }

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    // setImmediate: every message sent in this turn of the event loop (all groups' Ready) shares a batch.
    setImmediate(() => {
      this.flushScheduled = false;
      this.flush();
    });
  }

  private flush(): void {
    while (this.queueHead < this.queue.length && this.inFlight < this.limits.batchesInFlightMax) {
      const session = this.connected();
      if (session === null) return; // the connect handler flushes
      this.sendBatch(session, this.takeBatch());
    }
  }

  private takeBatch(): Message[] {
    const batch: Message[] = [];
    let bytes = 0;
    while (this.queueHead < this.queue.length) {
      const q = this.queue[this.queueHead]!;
      if (batch.length > 0 && bytes + q.bytes > this.limits.batchBytesMax) break;
      batch.push(q.message);
      bytes += q.bytes;
      this.queueHead++;
    }
    this.queuedBytes -= bytes;
    if (this.queueHead === this.queue.length) {
      this.queue = [];
      this.queueHead = 0;
    }
    return batch;
  }

  private sendBatch(session: http2.ClientHttp2Session, batch: Message[]): void {
    const frame = encodeMessages(batch);
    if (frame.length > this.limits.frameBytesMax) {
      this.counts.dropped += batch.length;
      this.logger.warn('peer batch over the frame limit dropped', { peer: this.peer.id, bytes: frame.length, messages: batch.length });
      return;
    }
    this.inFlight++;
    this.counts.batches++;
    const req = this.open(session, '/raft/messages');
    const timer = setTimeout(() => this.stuck(session), this.limits.batchTimeoutMs);
    let ok = false;
    req.on('response', (h) => {
      this.answered(Number(h[':status']), h[refusalHeader]);
      ok = h[':status'] === 204;
      if (!ok) this.logger.debug('peer refused a batch', { peer: this.peer.id, status: h[':status'] });
    });
    req.on('close', () => {
      clearTimeout(timer);
      this.inFlight--;
      if (ok) this.counts.sent += batch.length;
      else {
        this.counts.dropped += batch.length;
        this.counts.rpcErrors++;
      }
      if (this.state !== 'closed') this.scheduleFlush();
    });
    req.resume();
    req.end(frame);
  }

  /** A request stream on the current session, with this node's credentials; errors are the caller's. */
  open(session: http2.ClientHttp2Session, path: string, extra: http2.OutgoingHttpHeaders = {}): http2.ClientHttp2Stream {
    const req = session.request({ ':method': 'POST', ':path': path, 'content-type': 'application/msgpack', ...this.headers, ...extra });
    this.streams.add(req);
    req.on('error', () => {}); // reported through 'close' and the rst code: a failed stream never throws
    req.on('close', () => this.streams.delete(req));
    return req;
  }

  /** The session if it is up; otherwise starts connecting (unless backing off) and returns null. */
  connected(): http2.ClientHttp2Session | null {
    if (this.state === 'up' && this.session !== null) return this.session;
    if (this.state === 'idle') this.connect();
    return null;
  }

  /** The session for a one-off request: a connecting session queues the stream until it is up. */
  sessionForRequest(): http2.ClientHttp2Session {
    if (this.state === 'idle') this.connect();
    if (this.session === null || this.state === 'closed') throw new PeerUnavailableError(`peer ${this.peer.id} is unreachable (${this.state})`);
    return this.session;
  }

  private connect(): void {
    const wasDown = this.state === 'down';
    this.state = 'connecting';
    const session = http2.connect(`http://${this.peer.host}:${this.peer.port}`, {
      settings: { initialWindowSize: this.limits.windowBytes, enablePush: false },
      maxSessionMemory: 256,
    });
    this.session = session;
    this.connectTimer = setTimeout(() => session.destroy(new Error('connect timeout')), this.limits.connectTimeoutMs);
    let lastError: Error | null = null;
    session.on('error', (err) => (lastError = err));
    session.on('connect', () => this.onConnect(session));
    // The kernel accepts a TCP connection for a frozen process; only its SETTINGS frame proves it is alive.
    session.on('remoteSettings', () => this.heard());
    session.on('goaway', () => this.drop(session, new Error('goaway')));
    session.on('close', () => {
      if (this.session === session) this.onDown(session, lastError, wasDown);
    });
  }

  private onConnect(session: http2.ClientHttp2Session): void {
    if (this.connectTimer) clearTimeout(this.connectTimer);
    this.connectTimer = null;
    if (this.session !== session || this.state === 'closed') return;
    session.setLocalWindowSize(this.limits.windowBytes);
    this.state = 'up';
    this.counts.connects++;
    this.backoffMs = this.limits.reconnectBackoffMsMin;
    this.logger.info('peer link up', { peer: this.peer.id, address: `${this.peer.host}:${this.peer.port}` });
    this.scheduleFlush();
  }

  /** Stops using a session that the peer is closing (GOAWAY) or that is stuck; a new one starts after backoff. */
  private drop(session: http2.ClientHttp2Session, why: Error): void {
    if (this.session !== session) return;
    this.onDown(session, why, false);
    session.close();
  }

  private stuck(session: http2.ClientHttp2Session): void {
    this.logger.warn('peer batch timed out: resetting the session', { peer: this.peer.id });
    this.drop(session, new Error('batch timeout'));
    session.destroy();
  }

  private onDown(session: http2.ClientHttp2Session, err: Error | null, wasDown: boolean): void {
    if (this.connectTimer) clearTimeout(this.connectTimer);
    this.connectTimer = null;
    if (this.session === session) this.session = null;
    if (this.state === 'closed') return;
    const wasUp = this.state === 'up';
    // A connection attempt that failed is a failed outgoing request too (else a dead peer shows 0 errors).
    if (!wasUp) this.counts.rpcErrors++;
    this.state = 'down';
    // Logged once per state change: up -> down, or the first failure of a link that never came up.
    if (wasUp || !wasDown) this.logger.warn('peer link down', { peer: this.peer.id, error: err?.message ?? 'closed' });
    const delayMs = wasUp ? this.limits.reconnectBackoffMsMin : this.backoffMs;
    if (!wasUp) this.backoffMs = Math.min(this.limits.reconnectBackoffMsMax, this.backoffMs * 2);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      if (this.state !== 'down') return;
      this.connect();
    }, delayMs);
  }

  /** Drops the queue and every stream, closes the session. */
  async close(graceMs: number): Promise<void> {
    if (this.state === 'closed') return;
    this.state = 'closed';
    if (this.retryTimer) clearTimeout(this.retryTimer);
    if (this.connectTimer) clearTimeout(this.connectTimer);
    this.counts.dropped += this.queue.length - this.queueHead;
    this.queue = [];
    this.queueHead = 0;
    this.queuedBytes = 0;
    const session = this.session;
    this.session = null;
    if (session === null || session.destroyed) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => session.destroy(), graceMs);
      session.once('close', () => {
        clearTimeout(timer);
        resolve();
      });
      for (const s of this.streams) s.close(http2.constants.NGHTTP2_CANCEL);
      session.close();
    });
  }
}
