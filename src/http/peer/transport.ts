/**
 * PeerTransport: the Raft transport of one node. Outgoing: one PeerLink (HTTP/2 client session, bounded queue,
 * batches) per peer. Incoming: one PeerServer on --peer-listen. Raft tolerates loss, reordering and
 * duplication, so send() never blocks and never fails: a full queue or a dead link drops and counts.
 */
import * as http2 from 'node:http2';
import { assert } from '../../core/assert.js';
import { peerLimits } from '../../core/limits.js';
import type { Logger } from '../../core/log.js';
import type { GroupId, Message, SnapshotMessage } from '../../raft/index.js';
import { PeerAuth, RateLimitedLog, refusalHeader, refusalHints, type PeerMode, type Refusal } from './auth.js';
import { encodeSnapshotHeader } from './frame.js';
import type { LinkSecurity, LinkStats, PeerAddress } from './link.js';
import { PeerLink, PeerRequestError, PeerUnavailableError } from './link.js';
import { kindHeader, PeerServer } from './server.js';
import { loadPeerTls, type PeerTlsFiles, type PeerTlsMaterial } from './tls.js';

export type PeerLimits = { -readonly [K in keyof typeof peerLimits]: number };

export interface PeerTransportOptions {
  nodeId: string;
  listenHost: string;
  /** 0 picks a free port (tests); start() returns the port bound. */
  listenPort: number;
  /** The other members (an entry for this node's own id is ignored). */
  peers: PeerAddress[];
  /** Used for the session handshake when there is no peer TLS; null and no TLS = `insecure` mode (auth.ts). */
  clusterSecret: string | null;
  /** Mutual TLS (auth.ts `tls` mode); the files are read at construction and again by reloadTls(). */
  tls?: PeerTlsFiles | null;
  /** This node's --shards: sent on every request, and a peer stating another count is refused (403). */
  shards?: number;
  logger: Logger;
  /** Raft messages arrived from a peer (already decoded, group on each). Must not throw. */
  onMessages(from: string, messages: Message[]): void;
  /** A snapshot arrived whole: `message.snapshot.data` is `data`. Install it, then resolve (reject = failed). */
  onSnapshot(from: string, message: Message, data: Uint8Array): Promise<void>;
  /** Generic request/response between nodes (forwarded proposals and reads). Reject = the caller sees a 500. */
  onRequest(from: string, kind: string, body: Uint8Array): Promise<Uint8Array>;
  /** The outcome of a snapshot message given to send() (feed it to RawNode.reportSnapshot). */
  onSnapshotStatus?(peerId: string, group: GroupId, ok: boolean): void;
  /** Overrides of peerLimits (src/core/limits.ts), for tests. */
  limits?: Partial<PeerLimits>;
}

export interface PeerTransportStats {
  /** Messages acknowledged by their peer. */
  sent: number;
  /** Messages dropped on the way out (full queue, failed batch, unknown peer, close). */
  dropped: number;
  /** Messages received and handed to onMessages. */
  received: number;
  /** Failed outgoing requests of any kind (batches, snapshots, request()). */
  rpcErrors: number;
  /** Incoming requests and TLS handshakes refused (unauthenticated, wrong secret, stranger, other version). */
  refused: number;
  /** Incoming frames dropped (undecodable, oversized, misaddressed). */
  badFrames: number;
  snapshotsSent: number;
  snapshotsReceived: number;
  peers: Record<string, LinkStats>;
}

export { PeerRequestError, PeerUnavailableError };
export type { LinkStats, PeerAddress };

export class PeerTimeoutError extends Error {
  override name = 'PeerTimeoutError';
}

export class PeerTransport {
  private readonly limits: PeerLimits;
  private readonly links = new Map<string, PeerLink>();
  /** The ids allowed to talk to this node (the links' ids; PeerAuth reads this set live). */
  private readonly members = new Set<string>();
  readonly mode: PeerMode;
  private tlsMaterial: PeerTlsMaterial | null = null;
  private readonly server: PeerServer;
  private unknownDrops = 0;
  private snapshotsSent = 0;
  private closed = false;

  constructor(private readonly opts: PeerTransportOptions) {
    this.limits = { ...peerLimits, ...opts.limits };
    // A batch is cut at batchBytesMax of estimated size; the margin keeps its encoded frame under the frame limit.
    assert(this.limits.batchBytesMax * 2 <= this.limits.frameBytesMax, 'peer batchBytesMax must be at most half of frameBytesMax');
    const tls = opts.tls ?? null;
    this.mode = tls !== null ? 'tls' : opts.clusterSecret !== null ? 'secret' : 'insecure';
    // Throws on an unreadable or unusable file: a node does not start with peer TLS it cannot use.
    if (tls !== null) this.tlsMaterial = loadPeerTls(tls, opts.nodeId);
    for (const p of opts.peers) if (p.id !== opts.nodeId) this.link(p);
    this.server = new PeerServer({
      nodeId: opts.nodeId,
      mode: this.mode,
      secret: opts.clusterSecret,
      tls: this.tlsMaterial,
      auth: new PeerAuth(this.members, opts.shards ?? null),
      limits: this.limits,
      logger: opts.logger,
      refusals: new RateLimitedLog(opts.logger, this.limits.refusalLogIntervalMs),
      heard: (from) => this.links.get(from)?.heard(),
      onMessages: opts.onMessages,
      onSnapshot: opts.onSnapshot,
      onRequest: opts.onRequest,
    });
  }

  async start(): Promise<{ port: number }> {
    const port = await this.server.listen(this.opts.listenHost, this.opts.listenPort);
    this.opts.logger.info('peer transport listening', { host: this.opts.listenHost, port, peers: [...this.links.keys()] });
    this.logMode();
    return { port };
  }

  /** The start-up line that says how peers authenticate, and a warning for what is exposed. */
  private logMode(): void {
    const log = this.opts.logger;
    if (this.mode === 'tls') {
      log.info('peer links: mutual TLS', { mode: 'tls', cert_sha256: this.tlsMaterial!.fingerprint, cert_valid_to: this.tlsMaterial!.validTo });
    } else if (this.mode === 'secret') {
      log.warn('peer links without TLS: peers authenticate with the cluster secret on each connection, but traffic (tasks, payloads, signing secrets) travels in clear; use --peer-tls-* off a private network', { mode: 'secret' });
    } else {
      log.warn('peer links WITHOUT authentication or TLS (--insecure-peers): anyone who reaches --peer-listen can read and change every job and task', { mode: 'insecure' });
    }
  }

  /**
   * Re-reads the peer TLS files (SIGHUP): connections made from now on use them, open ones keep theirs. A file
   * that does not load is logged and the old material kept. False when nothing changed (no TLS, or a bad file).
   */
  reloadTls(): boolean {
    const files = this.opts.tls ?? null;
    if (files === null || this.closed) return false;
    let next: PeerTlsMaterial;
    try {
      next = loadPeerTls(files, this.opts.nodeId);
    } catch (err) {
      this.opts.logger.error('peer TLS reload failed: keeping the certificates in use', { error: (err as Error).message });
      return false;
    }
    this.tlsMaterial = next;
    this.server.setTls(next);
    this.opts.logger.info('peer TLS reloaded', { cert_sha256: next.fingerprint, cert_valid_to: next.validTo });
    return true;
  }

  private security(): LinkSecurity {
    if (this.mode === 'tls') return { mode: 'tls', material: () => this.tlsMaterial! };
    if (this.mode === 'secret') return { mode: 'secret', secret: this.opts.clusterSecret! };
    return { mode: 'insecure' };
  }

  private link(p: PeerAddress): void {
    this.links.set(p.id, new PeerLink({ id: p.id, host: p.host, port: p.port }, this.opts.nodeId, this.security(), this.limits, this.opts.logger, this.opts.shards ?? null));
    this.members.add(p.id);
  }

  /**
   * Adds a member while running (cluster add-node), or moves one to a new address: from now on its requests are
   * accepted and messages to it are sent. True when something changed. The old link of a moved peer is closed.
   */
  addPeer(p: PeerAddress): boolean {
    if (this.closed || p.id === this.opts.nodeId) return false;
    const old = this.links.get(p.id);
    if (old !== undefined && old.peer.host === p.host && old.peer.port === p.port) return false;
    if (old !== undefined) void old.close(this.limits.closeGraceMs);
    this.link(p);
    this.opts.logger.info(old === undefined ? 'peer added' : 'peer address changed', { peer: p.id, address: `${p.host}:${p.port}` });
    return true;
  }

  /** Removes a member (cluster remove-node): its link closes, its requests are refused, messages to it dropped. */
  async removePeer(id: string): Promise<boolean> {
    const link = this.links.get(id);
    if (link === undefined) return false;
    this.links.delete(id);
    this.members.delete(id);
    this.opts.logger.info('peer removed', { peer: id });
    await link.close(this.limits.closeGraceMs);
    return true;
  }

  /** The members this node talks to now, with their addresses. */
  peers(): PeerAddress[] {
    return [...this.links.values()].map((l) => ({ ...l.peer }));
  }

  /** Non-blocking. Snapshot messages are streamed (sendSnapshot); their outcome goes to onSnapshotStatus. */
  send(messages: readonly Message[]): void {
    for (const m of messages) {
      const link = this.links.get(m.to);
      if (link === undefined || this.closed) {
        this.unknownDrops++;
        continue;
      }
      if (m.type === 'snapshot') {
        void this.sendSnapshot(m, m.snapshot.data).then((ok) => this.snapshotStatus(m.to, m.group, ok));
        continue;
      }
      link.enqueue(m);
    }
  }

  private snapshotStatus(peerId: string, group: GroupId, ok: boolean): void {
    try {
      this.opts.onSnapshotStatus?.(peerId, group, ok);
    } catch (err) {
      this.opts.logger.error('onSnapshotStatus threw (it must not)', { peer: peerId, group, err });
    }
  }

  /** Streams a snapshot in chunks on its own HTTP/2 stream; true once the peer installed it. Never rejects. */
  async sendSnapshot(message: Message, data: Uint8Array): Promise<boolean> {
    const link = this.links.get(message.to);
    if (link === undefined || message.type !== 'snapshot' || data.length > this.limits.snapshotBytesMax) return false;
    let req: http2.ClientHttp2Stream;
    try {
      req = link.open(await link.ready(), '/raft/snapshot');
    } catch {
      link.countRpcError();
      return false;
    }
    const ok = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => req.close(http2.constants.NGHTTP2_CANCEL), this.limits.snapshotTimeoutMs);
      let status = 0;
      req.on('response', (h) => {
        status = Number(h[':status']);
        link.answered(status, h[refusalHeader]);
      });
      req.on('close', () => {
        clearTimeout(timer);
        resolve(status === 200);
      });
      req.resume();
      void writeChunks(req, encodeSnapshotHeader(message as SnapshotMessage, data.length), data, this.limits.snapshotChunkBytes);
    });
    if (ok) this.snapshotsSent++;
    else link.countRpcError();
    return ok;
  }

  /** One request to `to`; resolves with its answer, rejects on refusal, handler error, timeout or a dead link. */
  request(to: string, kind: string, body: Uint8Array, timeoutMs: number): Promise<Uint8Array> {
    const link = this.links.get(to);
    if (link === undefined) return Promise.reject(new PeerUnavailableError(`unknown peer ${to}`));
    if (body.length > this.limits.frameBytesMax) return Promise.reject(new PeerRequestError('request over the frame limit', 413));
    const startedMs = Date.now();
    return link.ready().then(
      (session) => {
        const req = link.open(session, '/raft/request', { [kindHeader]: kind });
        // The wait for the session (connect and handshake) counts against the request's time.
        return this.awaitAnswer(link, req, body, Math.max(1, timeoutMs - (Date.now() - startedMs)));
      },
      (err: unknown) => {
        link.countRpcError();
        throw err;
      },
    );
  }

  private awaitAnswer(link: PeerLink, req: http2.ClientHttp2Stream, body: Uint8Array, timeoutMs: number): Promise<Uint8Array> {
    return new Promise((resolve, reject) => {
      let settled = false;
      let status = 0;
      let refusal = '';
      const chunks: Buffer[] = [];
      let size = 0;
      const fail = (err: Error): void => {
        if (settled) return;
        settled = true;
        link.countRpcError();
        reject(err);
        req.close(http2.constants.NGHTTP2_CANCEL);
      };
      const timer = setTimeout(() => fail(new PeerTimeoutError(`request to ${link.peer.id} timed out after ${timeoutMs} ms`)), timeoutMs);
      req.on('response', (h) => {
        status = Number(h[':status']);
        link.answered(status, h[refusalHeader]);
        if (status === 403) refusal = refusalText(h[refusalHeader]);
      });
      req.on('data', (c: Buffer) => {
        size += c.length;
        if (size > this.limits.frameBytesMax) fail(new PeerRequestError('response over the frame limit', 502));
        else chunks.push(c);
      });
      req.on('end', () => {
        clearTimeout(timer);
        const bytes = Buffer.concat(chunks, size);
        if (status !== 200) return fail(new PeerRequestError(`peer ${link.peer.id} answered ${status}: ${refusal || bytes.toString('utf8', 0, 200)}`, status));
        settled = true;
        resolve(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength));
      });
      req.on('close', () => {
        clearTimeout(timer);
        fail(new PeerUnavailableError(`request to ${link.peer.id} closed before its answer`));
      });
      req.end(body);
    });
  }

  /** Connected to the peer and heard from it within peerLimits.reachableMs. */
  reachable(peerId: string): boolean {
    return this.links.get(peerId)?.reachable() ?? false;
  }

  /** Why the peer refuses this node (`stranger`, `wrong_secret`, ...), or null while it accepts it. */
  refusedAs(peerId: string): Refusal | null {
    return this.links.get(peerId)?.refusedAs() ?? null;
  }

  stats(): PeerTransportStats {
    const peers: Record<string, LinkStats> = {};
    let sent = 0;
    let dropped = this.unknownDrops;
    let rpcErrors = 0;
    for (const [id, link] of this.links) {
      const s = link.stats();
      peers[id] = s;
      sent += s.sent;
      dropped += s.dropped;
      rpcErrors += s.rpcErrors;
    }
    const c = this.server.counts;
    return {
      sent, dropped, rpcErrors, peers,
      received: c.received, refused: c.refused, badFrames: c.badFrames,
      snapshotsSent: this.snapshotsSent, snapshotsReceived: c.snapshotsReceived,
    };
  }

  /** Stops listening, drops the queues, closes every session (streams get closeGraceMs, then are destroyed). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const grace = this.limits.closeGraceMs;
    await Promise.all([this.server.close(grace), ...[...this.links.values()].map((l) => l.close(grace))]);
  }
}

/** Writes header then data in chunks, waiting for 'drain' so a big snapshot never sits whole in the socket buffer. */
async function writeChunks(req: http2.ClientHttp2Stream, header: Uint8Array, data: Uint8Array, chunkBytes: number): Promise<void> {
  if (!req.write(header)) await drained(req);
  for (let off = 0; off < data.length; off += chunkBytes) {
    if (req.destroyed || req.closed) return;
    if (!req.write(data.subarray(off, Math.min(data.length, off + chunkBytes)))) await drained(req);
  }
  if (!req.destroyed && !req.closed) req.end();
}

function drained(req: http2.ClientHttp2Stream): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      req.off('drain', done);
      req.off('close', done);
      resolve();
    };
    req.on('drain', done);
    req.on('close', done);
  });
}

/** A 403's reason as a sentence (`x-punctual-refusal`), for errors a client or an operator reads. */
function refusalText(header: unknown): string {
  const reason = typeof header === 'string' && header in refusalHints ? (header as Refusal) : null;
  return reason === null ? 'refused' : `refused (${reason}): ${refusalHints[reason]}`;
}
