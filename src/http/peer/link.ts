/**
 * PeerLink: this node's side of the link to ONE peer. One HTTP/2 client session (TLS with this node's
 * certificate, or cleartext with the cluster-secret handshake first: auth.ts), reconnected with bounded
 * exponential backoff whatever happens to it (refused, reset, GOAWAY, timeouts); a bounded queue of Raft
 * messages that drains in batches (one request per batch, many groups per batch) with at most
 * `batchesInFlightMax` batch requests outstanding, so messages that arrive meanwhile coalesce into the next one.
 * State changes (up / down) are logged once each, never per retry.
 */
import * as http2 from 'node:http2';
import { performance } from 'node:perf_hooks';
import type { PeerCertificate } from 'node:tls';
import type { Logger } from '../../core/log.js';
import type { Message } from '../../raft/index.js';
import {
  authPath, certNodeIds, certNodeUriPrefix, clientProof, helloPath, isNonce, newNonce, nodeIdHeader, nonceHeader, peerProtocol,
  proofEquals, proofHeader, protocolHeader, targetNodeHeader, refusalHeader, refusalHints, serverProof, shardsHeader, type Refusal,
} from './auth.js';
import { encodeMessages, estimateBytes } from './frame.js';
import type { PeerTlsMaterial } from './tls.js';
import type { PeerLimits } from './transport.js';

/** How this node proves itself to its peers (auth.ts): its TLS material, the cluster secret, or nothing. */
export type LinkSecurity =
  | { mode: 'tls'; material: () => PeerTlsMaterial }
  | { mode: 'secret'; secret: string }
  | { mode: 'insecure' };

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
  private refusal: Refusal | null = null;
  private readonly streams = new Set<http2.ClientHttp2Stream>();
  private readonly counts = { sent: 0, dropped: 0, batches: 0, rpcErrors: 0, connects: 0 };
  private readonly headers: http2.OutgoingHttpHeaders;
  /** The host:port dialled, as `:authority` (the secret handshake's proofs cover it). */
  private readonly authority: string;
  /** The link was down when this connection attempt started: its failure is not a new state change to log. */
  private wasDownAtConnect = false;
  /** Callers of ready() waiting for a connecting session to authenticate. */
  private waiters: Array<{ resolve: (s: http2.ClientHttp2Session) => void; reject: (e: Error) => void }> = [];

  constructor(
    readonly peer: PeerAddress,
    private readonly nodeId: string,
    private readonly security: LinkSecurity,
    private readonly limits: PeerLimits,
    private readonly logger: Logger,
    shards: number | null = null,
  ) {
    this.backoffMs = limits.reconnectBackoffMsMin;
    this.authority = peer.host.includes(':') ? `[${peer.host}]:${peer.port}` : `${peer.host}:${peer.port}`;
    this.headers = { [nodeIdHeader]: nodeId, ':authority': this.authority };
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
    if (status === 403) this.refusedBy(refusal);
    else if (status >= 200 && status < 300 && this.refused) {
      this.refused = false;
      this.logger.info('peer accepts this node again', { peer: this.peer.id });
    }
  }

  /** The peer refuses this node: logged once per change (a refusal reason the peer did not name is shown as null). */
  private refusedBy(refusal: unknown): void {
    const reason = typeof refusal === 'string' && Object.hasOwn(refusalHints, refusal) ? (refusal as Refusal) : null;
    this.refusal = reason;
    if (this.refused) return;
    this.refused = true;
    this.logger.warn('peer refuses this node (403)', {
      peer: this.peer.id,
      address: this.authority,
      reason,
      hint: reason === null ? 'check --cluster-secret, peer TLS, --shards, versions and membership on both nodes' : refusalHints[reason],
    });
  }

  /** Why the peer refuses this node (its latest refusal reason); null while it accepts it or named no reason. */
  refusedAs(): Refusal | null {
    return this.refused ? this.refusal : null;
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

  /**
   * The session for a one-off request, once it is up (connected and authenticated); rejects with
   * PeerUnavailableError when the link is down (backing off), closed, or its connection attempt fails.
   */
  ready(): Promise<http2.ClientHttp2Session> {
    if (this.state === 'up' && this.session !== null) return Promise.resolve(this.session);
    if (this.state === 'idle') this.connect();
    if (this.state !== 'connecting') return Promise.reject(new PeerUnavailableError(`peer ${this.peer.id} is unreachable (${this.state})`));
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  private settleWaiters(session: http2.ClientHttp2Session | null): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) {
      if (session !== null) w.resolve(session);
      else w.reject(new PeerUnavailableError(`peer ${this.peer.id} is unreachable (${this.state})`));
    }
  }

  private connect(): void {
    const wasDown = this.state === 'down';
    this.wasDownAtConnect = wasDown;
    this.state = 'connecting';
    const options: http2.SecureClientSessionOptions = {
      settings: { initialWindowSize: this.limits.windowBytes, enablePush: false },
      maxSessionMemory: 256,
    };
    if (this.security.mode === 'tls') {
      const t = this.security.material();
      const want = this.peer.id;
      Object.assign(options, {
        cert: t.cert, key: t.key, ca: t.ca, ALPNProtocols: ['h2'],
        // Not an IP (peer addresses usually are, and SNI takes names only); the server ignores it.
        servername: `${want}.peer.punctual`,
        // The chain is checked against the CA first; then the certificate must name the node meant, not the host.
        checkServerIdentity: (_host: string, cert: PeerCertificate): Error | undefined =>
          certNodeIds(cert).has(want) ? undefined : new Error(`the certificate at ${this.authority} does not name node ${want} (SAN URI:${certNodeUriPrefix}${want})`),
      });
    }
    const session = http2.connect(`${this.security.mode === 'tls' ? 'https' : 'http'}://${this.authority}`, options);
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
    if (this.session !== session || this.state === 'closed') return;
    session.setLocalWindowSize(this.limits.windowBytes);
    if (this.security.mode === 'secret') this.handshake(session, this.security.secret);
    else this.onUp(session);
  }

  /**
   * The cluster-secret handshake (auth.ts) on a fresh session: hello (nonces), then auth (proofs both ways).
   * Bounded by the connect timeout, which is still running. Any failure drops the session (backoff).
   */
  private handshake(session: http2.ClientHttp2Session, secret: string): void {
    const clientNonce = newNonce();
    let failed = false;
    const fail = (why: string, refusal: unknown, status: number): void => {
      if (failed) return;
      failed = true;
      // A refusal reason this version does not know comes from another version (protocol 1 says missing_secret).
      if (status === 403 && typeof refusal === 'string' && Object.hasOwn(refusalHints, refusal)) this.answered(403, refusal);
      else if (status !== 0) {
        this.heard();
        // An older node answers a hello it does not know with 404 or a 403 of its own: it speaks protocol 1.
        this.refusedBy('protocol_version');
      }
      if (this.session === session) this.onDown(session, new Error(`peer handshake failed: ${why}`), this.wasDownAtConnect);
      session.destroy();
    };
    const hello = this.open(session, helloPath, { [protocolHeader]: peerProtocol, [nonceHeader]: clientNonce, [targetNodeHeader]: this.peer.id });
    let helloDone = false;
    hello.on('response', (h) => {
      helloDone = true;
      const status = Number(h[':status']);
      const serverNonce = h[nonceHeader];
      if (status !== 200) return fail(`hello answered ${status}`, h[refusalHeader], status);
      if (!isNonce(serverNonce)) return fail('hello answered without a nonce', null, 400);
      const input = { serverNonce, clientNonce, clientId: this.nodeId, serverId: this.peer.id, target: this.authority };
      const auth = this.open(session, authPath, { [proofHeader]: clientProof(secret, input) });
      let authDone = false;
      auth.on('response', (a) => {
        authDone = true;
        const st = Number(a[':status']);
        if (st !== 200) return fail(`auth answered ${st}`, a[refusalHeader], st);
        if (!proofEquals(a[proofHeader], serverProof(secret, input))) {
          this.logger.warn('peer did not prove the cluster secret: not talking to it', { peer: this.peer.id, address: this.authority });
          return fail('the peer\'s proof is wrong', null, 0);
        }
        this.answered(200);
        this.onUp(session);
      });
      auth.on('close', () => {
        if (!authDone) fail('auth stream closed', null, 0);
      });
      auth.resume();
      auth.end();
    });
    hello.on('close', () => {
      if (!helloDone) fail('hello stream closed', null, 0);
    });
    hello.resume();
    hello.end();
  }

  private onUp(session: http2.ClientHttp2Session): void {
    if (this.session !== session || this.state !== 'connecting') return;
    if (this.connectTimer) clearTimeout(this.connectTimer);
    this.connectTimer = null;
    this.state = 'up';
    this.settleWaiters(session);
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
    this.state = 'down';
    this.settleWaiters(null);
    // A connection attempt that failed is a failed outgoing request too (else a dead peer shows 0 errors).
    if (!wasUp) this.counts.rpcErrors++;
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
    this.settleWaiters(null);
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
