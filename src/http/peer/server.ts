/**
 * The receiving side: one node:http2 (cleartext) server on --peer-listen. Every stream is authenticated first
 * (auth.ts); bodies are read under a byte bound; a bad frame is answered 400/413, logged (rate-limited) and
 * dropped, never thrown. Routes: POST /raft/messages (204), POST /raft/snapshot (200 once installed),
 * POST /raft/request (200 + body, 500 + message when the handler fails).
 */
import * as http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import type { Logger } from '../../core/log.js';
import type { Message } from '../../raft/index.js';
import type { PeerAuth, RateLimitedLog } from './auth.js';
import { nodeIdHeader, refusalHeader, secretHeader, shardsHeader } from './auth.js';
import { decodeMessages, decodeSnapshotHeader, FrameError } from './frame.js';
import type { PeerLimits } from './transport.js';

export const kindHeader = 'x-punctual-kind';

export interface PeerServerDeps {
  nodeId: string;
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

export class PeerServer {
  readonly counts: ServerCounts = { received: 0, refused: 0, badFrames: 0, snapshotsReceived: 0 };
  private readonly server: http2.Http2Server;
  private readonly sessions = new Set<http2.ServerHttp2Session>();

  constructor(private readonly d: PeerServerDeps) {
    this.server = http2.createServer({
      settings: { initialWindowSize: d.limits.windowBytes, enablePush: false },
      maxSessionMemory: 256,
    });
    this.server.on('session', (s) => {
      this.sessions.add(s);
      s.on('error', () => {}); // a broken peer session is the peer's problem; its streams see it too
      s.once('connect', () => s.setLocalWindowSize(d.limits.windowBytes));
      s.on('close', () => this.sessions.delete(s));
    });
    this.server.on('sessionError', () => {});
    this.server.on('stream', (stream, headers) => this.onStream(stream, headers));
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
    for (const s of this.sessions) s.close();
    const timer = setTimeout(() => {
      for (const s of this.sessions) s.destroy();
    }, graceMs);
    await closed;
    clearTimeout(timer);
  }

  private onStream(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
    stream.on('error', () => {});
    const remote = stream.session?.socket?.remoteAddress ?? 'unknown';
    const from = headers[nodeIdHeader];
    const refusal = this.d.auth.check(from, headers[secretHeader], headers[shardsHeader]);
    if (refusal !== null) {
      this.counts.refused++;
      const shards = refusal === 'shards_mismatch' ? { shards: String(headers[shardsHeader]) } : {};
      this.d.refusals.warn(`${refusal}:${remote}`, 'peer request refused', { reason: refusal, remote, nodeId: from ?? null, ...shards });
      reply(stream, 403, undefined, { [refusalHeader]: refusal });
      return;
    }
    const sender = from as string;
    this.d.heard(sender);
    const path = headers[':path'];
    if (headers[':method'] !== 'POST') reply(stream, 405);
    else if (path === '/raft/messages') this.guard(this.messages(stream, sender, remote), stream);
    else if (path === '/raft/request') this.guard(this.request(stream, sender, String(headers[kindHeader] ?? '')), stream);
    else if (path === '/raft/snapshot') this.snapshot(stream, sender, remote);
    else reply(stream, 404);
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

  private async request(stream: http2.ServerHttp2Stream, from: string, kind: string): Promise<void> {
    const body = await readBody(stream, this.d.limits.frameBytesMax);
    if (!body.ok) return this.badFrame(stream, body.status, body.why, from, 'request');
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
      if (len > this.limits.frameBytesMax) return 'over the frame limit (snapshot header)';
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
