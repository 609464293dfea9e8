/**
 * The receiving side: one node:http2 server on --peer-listen (TLS with client certificates in `tls` mode,
 * cleartext otherwise). Every session authenticates first (auth.ts: the client certificate, or the handshake
 * streams /peer/hello and /peer/auth); every other stream of an unauthenticated session is refused and the
 * session closed. Bodies are read under a byte bound; a bad frame is answered 400/413, counted, logged
 * (rate-limited) and dropped, never thrown. Routes: POST /raft/messages (204), POST /raft/snapshot (200 once
 * installed), POST /raft/request (200 + body, 500 + message when the handler fails).
 */
import * as http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { nodeIdPattern } from '../../core/ids.js';
import type { Logger } from '../../core/log.js';
import type { Message } from '../../raft/index.js';
import type { PeerAuth, PeerMode, RateLimitedLog, Refusal } from './auth.js';
import {
  authPath, certNodeIds, clientProof, helloPath, isNonce, newNonce, nodeIdHeader, nonceHeader, peerProtocol, proofEquals,
  proofHeader, protocolHeader, refusalHeader, secretHeader, serverProof, shardsHeader, targetNodeHeader,
} from './auth.js';
import { decodeMessages, decodeSnapshotHeader, FrameError } from './frame.js';
import type { PeerTlsMaterial } from './tls.js';
import type { PeerLimits } from './transport.js';

export const kindHeader = 'x-punctual-kind';

export interface PeerServerDeps {
  nodeId: string;
  mode: PeerMode;
  /** The cluster secret (`secret` mode). */
  secret: string | null;
  /** The current TLS material (`tls` mode); read again for each new connection after a reload. */
  tls: PeerTlsMaterial | null;
  auth: PeerAuth;
  limits: PeerLimits;
  logger: Logger;
  refusals: RateLimitedLog;
  heard(from: string): void;
  onMessages(from: string, messages: Message[]): void;
  onSnapshot(from: string, message: Message, data: Uint8Array): Promise<void>;
  onRequest(from: string, kind: string, body: Uint8Array): Promise<Uint8Array>;
}

export interface ServerCounts {
  received: number;
  refused: number;
  badFrames: number;
  snapshotsReceived: number;
}

type Body = { ok: true; bytes: Uint8Array } | { ok: false; status: number; why: string };

/** What a session proved: in `tls` mode the ids its certificate names, in `secret` mode the id it authenticated as. */
interface SessionAuth {
  names: ReadonlySet<string>;
  authedAs: string | null;
  hello: { serverNonce: string; clientNonce: string; clientId: string; meant: string | null } | null;
  timer: NodeJS.Timeout | null;
}

export class PeerServer {
  readonly counts: ServerCounts = { received: 0, refused: 0, badFrames: 0, snapshotsReceived: 0 };
  private readonly server: http2.Http2Server | http2.Http2SecureServer;
  private readonly sessions = new Map<http2.ServerHttp2Session, SessionAuth>();

  constructor(private readonly d: PeerServerDeps) {
    const common = { settings: { initialWindowSize: d.limits.windowBytes, enablePush: false }, maxSessionMemory: 256 };
    if (d.mode === 'tls') {
      const t = d.tls!;
      this.server = http2.createSecureServer({
        ...common, cert: t.cert, key: t.key, ca: t.ca, requestCert: true, rejectUnauthorized: true,
        ALPNProtocols: ['h2'], allowHTTP1: false, handshakeTimeout: d.limits.handshakeTimeoutMs,
      });
      // A client that fails the TLS handshake (no certificate, another CA) never gets a session: log it.
      this.server.on('tlsClientError', (err, socket) => {
        this.counts.refused++;
        this.d.refusals.warn(`tls:${socket.remoteAddress}`, 'peer TLS handshake refused', { remote: socket.remoteAddress ?? 'unknown', error: err.message });
      });
    } else {
      this.server = http2.createServer(common);
    }
    this.server.on('session', (s: http2.ServerHttp2Session) => this.onSession(s));
    this.server.on('sessionError', () => {});
    this.server.on('stream', (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => this.onStream(stream, headers));
  }

  private onSession(s: http2.ServerHttp2Session): void {
    const names = this.d.mode === 'tls' ? certNodeIds((s.socket as TLSSocket).getPeerCertificate?.()) : new Set<string>();
    const state: SessionAuth = { names, authedAs: null, hello: null, timer: null };
    if (this.d.mode === 'secret') {
      state.timer = setTimeout(() => {
        if (state.authedAs === null) s.destroy();
      }, this.d.limits.handshakeTimeoutMs);
    }
    this.sessions.set(s, state);
    s.on('error', () => {}); // a broken peer session is the peer's problem; its streams see it too
    s.once('connect', () => s.setLocalWindowSize(this.d.limits.windowBytes));
    s.on('close', () => {
      if (state.timer !== null) clearTimeout(state.timer);
      this.sessions.delete(s);
    });
  }

  /** A new certificate, key or CA for the connections accepted from now on (SIGHUP). */
  setTls(t: PeerTlsMaterial): void {
    (this.server as http2.Http2SecureServer).setSecureContext({ cert: t.cert, key: t.key, ca: t.ca });
  }

  listen(host: string, port: number): Promise<number> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => {
        this.server.off('error', reject);
        this.server.on('error', (err) => this.d.logger.error('peer server error', { err }));
        resolve((this.server.address() as AddressInfo).port);
      });
    });
  }

  async close(graceMs: number): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const [s, state] of this.sessions) {
      if (state.timer !== null) clearTimeout(state.timer);
      s.close();
    }
    const timer = setTimeout(() => {
      for (const s of this.sessions.keys()) s.destroy();
    }, graceMs);
    await closed;
    clearTimeout(timer);
  }

  /**
   * Answers 403 with a reason and logs it (rate-limited). `claimed` is the id the request says it comes from: it
   * goes to this node's log, never into the answer. Before authentication the session is closed as well.
   */
  private refuse(stream: http2.ServerHttp2Stream, refusal: Refusal, claimed: unknown, extra: Record<string, unknown> = {}, closeSession = false): void {
    const remote = stream.session?.socket?.remoteAddress ?? 'unknown';
    this.counts.refused++;
    const nodeId = typeof claimed === 'string' ? claimed.slice(0, 64) : null;
    this.d.refusals.warn(`${refusal}:${remote}`, 'peer request refused', { reason: refusal, remote, nodeId, ...extra });
    reply(stream, 403, undefined, { [refusalHeader]: refusal });
    if (closeSession) stream.session?.close();
  }

  private onStream(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
    stream.on('error', () => {});
    const session = stream.session;
    const state = session === undefined ? undefined : this.sessions.get(session as http2.ServerHttp2Session);
    if (state === undefined) return reply(stream, 503);
    const path = headers[':path'];
    const claimed = headers[nodeIdHeader];
    let from: string;
    if (this.d.mode === 'secret') {
      if (path === helloPath) return this.hello(stream, headers, state);
      if (path === authPath) return this.authenticate(stream, headers, state);
      if (state.authedAs === null) {
        // A node of peer protocol 1 sends its fixed proof on every request: say which version it should run.
        const old = headers[secretHeader] !== undefined;
        return this.refuse(stream, old ? 'protocol_version' : 'unauthenticated', claimed, old ? { protocol: 1 } : {}, true);
      }
      if (claimed !== undefined && claimed !== state.authedAs) return this.refuse(stream, 'unauthenticated', claimed, {}, true);
      from = state.authedAs;
    } else {
      if (path === helloPath || path === authPath) return this.refuse(stream, 'peer_mode', claimed, {}, true);
      if (typeof claimed !== 'string' || !nodeIdPattern.test(claimed)) return this.refuse(stream, 'unauthenticated', claimed, {}, true);
      // tls: the id must be one the client certificate names (its chain was checked during the TLS handshake).
      if (this.d.mode === 'tls' && !state.names.has(claimed)) {
        return this.refuse(stream, 'unauthenticated', claimed, { certNames: [...state.names] }, true);
      }
      from = claimed;
    }
    const refusal = this.d.auth.check(from, headers[shardsHeader]);
    if (refusal !== null) {
      const shards = refusal === 'shards_mismatch' ? { shards: String(headers[shardsHeader]) } : {};
      return this.refuse(stream, refusal, from, shards);
    }
    const remote = session!.socket?.remoteAddress ?? 'unknown';
    this.d.heard(from);
    if (headers[':method'] !== 'POST') reply(stream, 405);
    else if (path === '/raft/messages') this.guard(this.messages(stream, from, remote), stream);
    else if (path === '/raft/request') this.guard(this.request(stream, from, String(headers[kindHeader] ?? ''), remote), stream);
    else if (path === '/raft/snapshot') this.snapshot(stream, from, remote);
    else reply(stream, 404);
  }

  /** Handshake step 1 (`secret` mode): the client's id and nonce in, this session's server nonce out. */
  private hello(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, state: SessionAuth): void {
    const claimed = headers[nodeIdHeader];
    if (headers[protocolHeader] !== peerProtocol) {
      return this.refuse(stream, 'protocol_version', claimed, { protocol: String(headers[protocolHeader] ?? 'none').slice(0, 16) }, true);
    }
    const clientNonce = headers[nonceHeader];
    if (state.hello !== null || typeof claimed !== 'string' || !nodeIdPattern.test(claimed) || !isNonce(clientNonce)) {
      return this.refuse(stream, 'unauthenticated', claimed, {}, true);
    }
    const meant = headers[targetNodeHeader];
    state.hello = { serverNonce: newNonce(), clientNonce, clientId: claimed, meant: typeof meant === 'string' && nodeIdPattern.test(meant) ? meant : null };
    reply(stream, 200, undefined, { [nonceHeader]: state.hello.serverNonce });
  }

  /** Handshake step 2: the client's proof over this session's values; this node's proof back. */
  private authenticate(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, state: SessionAuth): void {
    const h = state.hello;
    if (h === null || state.authedAs !== null) return this.refuse(stream, 'unauthenticated', headers[nodeIdHeader], {}, true);
    const input = { serverNonce: h.serverNonce, clientNonce: h.clientNonce, clientId: h.clientId, serverId: this.d.nodeId, target: String(headers[':authority'] ?? '') };
    if (!proofEquals(headers[proofHeader], clientProof(this.d.secret!, input))) {
      // A proof made for the node the client meant proves the secret: only then may it learn it reached another
      // node (before that, a refusal says nothing about which ids exist).
      const misdialled = h.meant !== null && h.meant !== this.d.nodeId && proofEquals(headers[proofHeader], clientProof(this.d.secret!, { ...input, serverId: h.meant }));
      return this.refuse(stream, misdialled ? 'wrong_node' : 'wrong_secret', h.clientId, misdialled ? { meant: h.meant } : {}, true);
    }
    state.authedAs = h.clientId;
    if (state.timer !== null) clearTimeout(state.timer);
    state.timer = null;
    // Authenticated: from here on, refusals may say what is wrong (a removed member, another --shards).
    const refusal = this.d.auth.check(h.clientId, headers[shardsHeader]);
    if (refusal !== null) {
      const shards = refusal === 'shards_mismatch' ? { shards: String(headers[shardsHeader]) } : {};
      return this.refuse(stream, refusal, h.clientId, shards);
    }
    this.d.heard(h.clientId);
    reply(stream, 200, undefined, { [proofHeader]: serverProof(this.d.secret!, input) });
  }

  /** A handler bug must never become an unhandled rejection: log it and answer 500. */
  private guard(work: Promise<void>, stream: http2.ServerHttp2Stream): void {
    work.catch((err: unknown) => {
      this.d.logger.error('peer stream handler failed', { err });
      reply(stream, 500);
    });
  }

  private badFrame(stream: http2.ServerHttp2Stream, status: number, why: string, from: string, remote: string): void {
    this.counts.badFrames++;
    this.d.refusals.warn(`frame:${remote}`, 'peer frame dropped', { reason: why, from, remote });
    reply(stream, status);
  }

  private async messages(stream: http2.ServerHttp2Stream, from: string, remote: string): Promise<void> {
    const body = await readBody(stream, this.d.limits.frameBytesMax);
    if (!body.ok) return this.badFrame(stream, body.status, body.why, from, remote);
    let messages: Message[];
    try {
      messages = decodeMessages(body.bytes);
    } catch (err) {
      return this.badFrame(stream, 400, (err as Error).message, from, remote);
    }
    // A peer speaks only for itself and only to us: anything else is a routing bug or a forgery.
    const mine = messages.filter((m) => m.from === from && m.to === this.d.nodeId);
    if (mine.length < messages.length) this.badFrame(stream, 204, 'messages not from the sender or not for this node', from, remote);
    else reply(stream, 204);
    this.counts.received += mine.length;
    if (mine.length > 0) this.deliver(from, mine);
  }

  private deliver(from: string, messages: Message[]): void {
    try {
      this.d.onMessages(from, messages);
    } catch (err) {
      this.d.logger.error('onMessages threw (it must not)', { from, err });
    }
  }

  private async request(stream: http2.ServerHttp2Stream, from: string, kind: string, remote: string): Promise<void> {
    const body = await readBody(stream, this.d.limits.frameBytesMax);
    if (!body.ok) return this.badFrame(stream, body.status, body.why, from, remote);
    let answer: Uint8Array;
    try {
      answer = await this.d.onRequest(from, kind, body.bytes);
    } catch (err) {
      reply(stream, 500, new TextEncoder().encode((err as Error)?.message ?? String(err)));
      return;
    }
    if (answer.length > this.d.limits.frameBytesMax) {
      this.d.logger.warn('peer response over the frame limit', { from, kind, bytes: answer.length });
      reply(stream, 500, new TextEncoder().encode('response over the frame limit'));
      return;
    }
    reply(stream, 200, answer);
  }

  private snapshot(stream: http2.ServerHttp2Stream, from: string, remote: string): void {
    stream.setTimeout(this.d.limits.snapshotTimeoutMs, () => stream.close(http2.constants.NGHTTP2_CANCEL));
    const reader = new SnapshotReader(this.d.limits);
    stream.on('data', (chunk: Buffer) => {
      const err = reader.push(chunk);
      if (err !== null) {
        stream.removeAllListeners('data');
        stream.removeAllListeners('end');
        this.badFrame(stream, err.startsWith('over') ? 413 : 400, err, from, remote);
      }
    });
    stream.on('end', () => this.guard(this.installSnapshot(stream, reader, from, remote), stream));
  }

  private async installSnapshot(stream: http2.ServerHttp2Stream, reader: SnapshotReader, from: string, remote: string): Promise<void> {
    const done = reader.finish();
    if (typeof done === 'string') return this.badFrame(stream, 400, done, from, remote);
    const m = done.message;
    if (m.from !== from || m.to !== this.d.nodeId) return this.badFrame(stream, 400, 'snapshot not from the sender or not for this node', from, remote);
    try {
      await this.d.onSnapshot(from, m, m.snapshot.data);
      this.counts.snapshotsReceived++;
      reply(stream, 200);
    } catch (err) {
      this.d.logger.warn('snapshot install failed', { from, group: m.group, err });
      reply(stream, 500);
    }
  }
}

/** Reassembles `u32 header length | header | data` from stream chunks into one preallocated buffer. */
class SnapshotReader {
  private head: Buffer = Buffer.alloc(0);
  private header: ReturnType<typeof decodeSnapshotHeader> | null = null;
  private data: Uint8Array | null = null;
  private filled = 0;

  constructor(private readonly limits: PeerLimits) {}

  /** null, or why the stream is refused. */
  push(chunk: Buffer): string | null {
    if (this.header === null) {
      this.head = this.head.length === 0 ? chunk : Buffer.concat([this.head, chunk]);
      if (this.head.length < 4) return null;
      const len = this.head.readUInt32BE(0);
      // Checked before the header is buffered: a declared length is never an allocation.
      if (len > this.limits.snapshotHeaderBytesMax) return 'over the limit (snapshot header)';
      if (this.head.length < 4 + len) return null;
      try {
        this.header = decodeSnapshotHeader(this.head.subarray(4, 4 + len));
      } catch (err) {
        return err instanceof FrameError ? err.message : String(err);
      }
      if (this.header.dataBytes > this.limits.snapshotBytesMax) return `over the snapshot limit (${this.header.dataBytes} bytes)`;
      this.data = new Uint8Array(this.header.dataBytes);
      chunk = this.head.subarray(4 + len);
      this.head = Buffer.alloc(0);
    }
    if (this.filled + chunk.length > this.data!.length) return 'over the declared snapshot size';
    this.data!.set(chunk, this.filled);
    this.filled += chunk.length;
    return null;
  }

  finish(): { message: Message & { type: 'snapshot' } } | string {
    if (this.header === null || this.data === null) return 'snapshot stream ended before its header';
    if (this.filled !== this.data.length) return `snapshot stream short: ${this.filled} of ${this.data.length} bytes`;
    const m = this.header.message;
    return { message: { ...m, snapshot: { metadata: m.snapshot.metadata, data: this.data } } };
  }
}

async function readBody(stream: http2.ServerHttp2Stream, maxBytes: number): Promise<Body> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    stream.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBytes) {
        stream.removeAllListeners('data');
        resolve({ ok: false, status: 413, why: `frame over ${maxBytes} bytes` });
        return;
      }
      chunks.push(chunk);
    });
    stream.on('end', () => {
      if (size <= maxBytes) resolve({ ok: true, bytes: plain(Buffer.concat(chunks, size)) });
    });
    stream.on('close', () => resolve({ ok: false, status: 400, why: 'stream closed before its end' }));
  });
}

function plain(b: Buffer): Uint8Array {
  return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}

/** Answers a stream once, if it is still open; then stops reading what is left of the request. */
function reply(stream: http2.ServerHttp2Stream, status: number, body?: Uint8Array, extra: http2.OutgoingHttpHeaders = {}): void {
  if (stream.destroyed || stream.closed || stream.headersSent) return;
  try {
    if (body === undefined || body.length === 0) {
      stream.respond({ ':status': status, ...extra }, { endStream: true });
    } else {
      stream.respond({ ':status': status, 'content-type': 'application/octet-stream' });
      stream.end(body);
    }
    // A refused request may still be uploading: RST_STREAM(NO_ERROR) tells the peer to stop (RFC 9113 8.1).
    if (status >= 400) stream.close(http2.constants.NGHTTP2_NO_ERROR);
  } catch {
    // the peer went away meanwhile: nothing to answer
  }
}
