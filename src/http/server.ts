/**
 * The thin runtime adapter: one TCP listener serving HTTP/1.1 (node:http) and HTTP/2 (node:http2) on the same
 * port. In cleartext each new connection is sniffed: if its first 24 bytes are the HTTP/2 client preface it goes
 * to the http2 server, anything else to the http server. With TLS the protocol is chosen by ALPN (h2, else
 * HTTP/1.1). A request the app will refuse whatever its body (401, 403, 404, 405: App.precheck) or one declaring
 * a body over the route's limit is answered before a byte of its body is read; other bodies are read up to the
 * route's limit (App.bodyLimitFor), beyond it the answer is 413 without buffering the rest. HTTP/2 streams have
 * the same whole-request deadline as HTTP/1.1 and an idle deadline while their body is incomplete.
 */
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import tls from 'node:tls';
import { Readable, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { PunctualError, toProblem } from '../core/errors.js';
import { httpLimits } from '../core/limits.js';
import { silentLogger, type Logger } from '../core/log.js';
import { problemResponse, type ApiResponse, type App } from './app.js';

const h2Preface = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

export interface ApiServer {
  /** The bound port (useful with port 0). */
  port: number;
  /** True when the API is served over TLS. */
  tls: boolean;
  /**
   * Swaps the certificate and key (SIGHUP) for new connections; throws (keeping the old ones) when they do not
   * load or do not match. Only with TLS.
   */
  setTlsCredentials(credentials: TlsCredentials): void;
  /** Stops accepting, closes idle keep-alive connections, lets in-flight requests finish (bounded), then resolves. */
  close(): Promise<void>;
}

export interface ApiServerOptions {
  logger?: Logger;
  /** How long close() waits for in-flight requests (default httpLimits.closeGraceMs). */
  closeGraceMs?: number;
  /** Serve HTTPS (HTTP/1.1 and h2 by ALPN) with this PEM certificate chain and key. */
  tls?: TlsCredentials | null;
  /** Headers and body of a request must arrive within this long (HTTP/1.1 and each HTTP/2 stream). */
  requestTimeoutMs?: number;
}

/** PEM texts. */
export interface TlsCredentials {
  cert: string | Buffer;
  key: string | Buffer;
}

/** What both node:http and the node:http2 compatibility API offer, and all this adapter uses. */
interface AnyRequest {
  method?: string | undefined;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  complete: boolean;
  on(event: string, listener: (...args: never[]) => void): unknown;
  removeListener(event: string, listener: (...args: never[]) => void): unknown;
  resume(): unknown;
}
interface AnyResponse {
  headersSent: boolean;
  writeHead(status: number, headers: Record<string, string>): unknown;
  end(body?: string | Uint8Array): unknown;
  once(event: 'finish', listener: () => void): unknown;
}

interface ServerState {
  app: App;
  logger: Logger;
  closing: boolean;
  requestTimeoutMs: number;
  /** Every open connection: still being sniffed, HTTP/1.1 with its requests in flight (0 = idle), or HTTP/2. */
  sockets: Map<net.Socket, { kind: 'sniff' | 'h1' | 'h2'; inFlight: number }>;
}

export async function startApiServer(app: App, host: string, port: number, options: ApiServerOptions = {}): Promise<ApiServer> {
  const requestTimeoutMs = options.requestTimeoutMs ?? httpLimits.requestTimeoutMs;
  const state: ServerState = { app, logger: options.logger ?? silentLogger, closing: false, requestTimeoutMs, sockets: new Map() };
  const h1 = http.createServer(
    {
      keepAliveTimeout: httpLimits.keepAliveTimeoutMs,
      headersTimeout: Math.min(httpLimits.headersTimeoutMs, requestTimeoutMs),
      requestTimeout: requestTimeoutMs,
    },
    (req, res) => onH1Request(state, req, res),
  );
  // `Expect: 100-continue`: a request that will be refused (no token, too large, no route) is answered at once
  // instead of inviting the client to upload (node:http would send 100 Continue by itself).
  h1.on('checkContinue', (req, res) => {
    toOriginForm(req);
    const refusal = refusalOf(state, req as AnyRequest);
    if (refusal !== null) {
      refusal.headers.connection = 'close'; // the client may still send the body; do not parse it as a request
      return send(state, res as AnyResponse, 'POST', refusal, false);
    }
    res.writeContinue();
    onH1Request(state, req, res);
  });
  h1.on('clientError', (err: NodeJS.ErrnoException, socket: net.Socket) => answerClientError(err, socket));
  // CONNECT (a proxy's method) has no route here; without a listener its connection was left open, unanswered.
  h1.on('connect', (_req: http.IncomingMessage, socket: net.Socket) => {
    if (socket.writable) answerBadRequest(socket, 'CONNECT is not supported', 'CONNECT is not supported: this server is no proxy');
    else socket.destroy();
  });
  // node:http enforces headersTimeout/requestTimeout from a checking interval it starts on 'listening'. This
  // server never listens itself (the TCP or TLS server hands it sockets), so start that interval by hand.
  h1.emit('listening');
  const h2 = http2.createServer(
    { settings: { maxConcurrentStreams: httpLimits.h2StreamsMax } },
    (req, res) => onH2Request(state, req, res),
  );
  h2.setTimeout(httpLimits.keepAliveTimeoutMs); // an idle session is closed (no 'timeout' listener: destroyed)
  // node:http2 answers a CONNECT stream itself with a bare 405 and leaves it open: answer as HTTP/1.1 does.
  h2.on('connect', (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => {
    const err = new PunctualError('invalid_argument', 'CONNECT is not supported', [{ field: 'request', message: 'CONNECT is not supported: this server is no proxy' }]);
    refuse(state, req as AnyRequest, res as AnyResponse, true, problemResponse(err));
  });
  const sessions = new Set<http2.ServerHttp2Session>();
  h2.on('session', (s) => {
    sessions.add(s);
    s.once('close', () => sessions.delete(s));
  });
  const secure = options.tls ?? null;
  const listener: net.Server =
    secure === null ? net.createServer((socket) => sniff(state, socket, h1, h2)) : tlsListener(state, secure, h1, h2);
  await new Promise<void>((resolve, reject) => {
    listener.once('error', reject);
    listener.listen(port, host, () => {
      listener.removeListener('error', reject);
      resolve();
    });
  });
  const address = listener.address() as net.AddressInfo;
  const closeGraceMs = options.closeGraceMs ?? httpLimits.closeGraceMs;
  return {
    port: address.port,
    tls: secure !== null,
    setTlsCredentials: (credentials) => {
      if (!(listener instanceof tls.Server)) throw new Error('this API server does not serve TLS');
      tls.createSecureContext({ cert: credentials.cert, key: credentials.key }); // throws on a bad pair: keep the old
      listener.setSecureContext({ cert: credentials.cert, key: credentials.key });
    },
    close: () => closeServers(state, listener, h1, sessions, closeGraceMs),
  };
}

/** HTTPS: the TLS handshake picks the protocol (ALPN h2, else HTTP/1.1); no sniffing. */
function tlsListener(state: ServerState, credentials: TlsCredentials, h1: http.Server, h2: http2.Http2Server): tls.Server {
  const server = tls.createServer({
    cert: credentials.cert,
    key: credentials.key,
    ALPNProtocols: ['h2', 'http/1.1'],
    handshakeTimeout: httpLimits.sniffTimeoutMs,
  });
  // The raw TCP socket is tracked from accept, so close() also ends connections still in their handshake.
  server.on('connection', (raw: net.Socket) => {
    if (state.closing) return void raw.destroy();
    raw.setNoDelay(true);
  });
  server.on('tlsClientError', (err) => state.logger.debug('tls handshake failed', { err }));
  server.on('secureConnection', (socket: tls.TLSSocket) => {
    if (state.closing) return void socket.destroy();
    const isH2 = socket.alpnProtocol === 'h2';
    state.sockets.set(socket, { kind: isH2 ? 'h2' : 'h1', inFlight: 0 });
    socket.once('close', () => state.sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    (isH2 ? h2 : h1).emit('connection', socket);
  });
  return server;
}

/**
 * A request node:http could not parse. Its own answer is a bare status line; a malformed request gets a
 * problem+json 400 like every other error of this API instead. Header overflow (431) and timeouts (408) keep
 * node's answers (no error code of ours has those statuses).
 */
function answerClientError(err: NodeJS.ErrnoException, socket: net.Socket): void {
  // As node's default handler: answer only when no response of this connection is half written.
  const current = (socket as net.Socket & { _httpMessage?: { headersSent: boolean } | null })._httpMessage;
  if (!socket.writable || (current != null && current.headersSent)) return void socket.destroy();
  const status = err.code === 'HPE_HEADER_OVERFLOW' ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
  if (status !== 400) {
    const reason = status === 431 ? 'Request Header Fields Too Large' : 'Request Timeout';
    return void socket.end(`HTTP/1.1 ${status} ${reason}\r\nConnection: close\r\n\r\n`);
  }
  answerBadRequest(socket, 'malformed HTTP request', 'not valid HTTP/1.1');
}

/** A problem+json 400 on `request`, written on the raw socket, which is then closed. */
function answerBadRequest(socket: net.Socket, detail: string, message: string): void {
  const body = JSON.stringify(toProblem(new PunctualError('invalid_argument', detail, [{ field: 'request', message }])));
  const head = `HTTP/1.1 400 Bad Request\r\nContent-Type: application/problem+json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n`;
  socket.end(head + body);
}

/** Reads the first bytes of a connection, then hands the socket (and those bytes) to the right server. */
function sniff(state: ServerState, socket: net.Socket, h1: http.Server, h2: http2.Http2Server): void {
  if (state.closing) return void socket.destroy();
  const entry = { kind: 'sniff' as 'sniff' | 'h1' | 'h2', inFlight: 0 };
  state.sockets.set(socket, entry);
  socket.once('close', () => state.sockets.delete(socket));
  socket.setNoDelay(true);
  socket.on('error', () => socket.destroy()); // before the handoff nobody else listens; after it, harmless
  let seen: Buffer = Buffer.alloc(0);
  const timer = setTimeout(() => socket.destroy(), httpLimits.sniffTimeoutMs);
  socket.once('close', () => clearTimeout(timer));
  const onData = (chunk: Buffer): void => {
    seen = seen.length === 0 ? chunk : Buffer.concat([seen, chunk]);
    const n = Math.min(seen.length, h2Preface.length);
    const isPreface = seen.subarray(0, n).equals(h2Preface.subarray(0, n));
    if (isPreface && seen.length < h2Preface.length) return; // a prefix of the preface: wait for more
    clearTimeout(timer);
    socket.removeListener('data', onData);
    entry.kind = isPreface ? 'h2' : 'h1';
    if (isPreface) {
      socket.pause();
      socket.unshift(seen); // node:http2 reads what is buffered on the socket before taking over its handle
      h2.emit('connection', socket);
    } else {
      // node:http consumes the socket's handle directly and would miss unshifted bytes: replay them instead.
      h1.emit('connection', socket);
      socket.emit('data', seen);
    }
  };
  socket.on('data', onData);
}

/**
 * An HTTP/2 request: its headers and body must arrive within requestTimeoutMs (as HTTP/1.1's requestTimeout), and
 * while its body is incomplete the stream may not stay silent for streamIdleTimeoutMs; either way it is reset
 * (RST_STREAM CANCEL). Once the body is in, the handler may take as long as it needs.
 */
function onH2Request(state: ServerState, req: http2.Http2ServerRequest, res: http2.Http2ServerResponse): void {
  const stream = req.stream;
  const cancel = (): void => {
    if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_CANCEL);
  };
  if (!req.complete && !stream.readableEnded) {
    const deadline = setTimeout(() => {
      state.logger.debug('http2 request body timed out', { path: req.url });
      cancel();
    }, state.requestTimeoutMs);
    stream.setTimeout(httpLimits.streamIdleTimeoutMs, cancel);
    const done = (): void => {
      clearTimeout(deadline);
      stream.setTimeout(0);
    };
    req.once('end', done);
    stream.once('close', done);
  }
  void serve(state, req as AnyRequest, res as AnyResponse, true);
}

/** RFC 9112 section 3.2.2: a server must accept an absolute-form target (`GET http://host/path`); its path routes. */
function toOriginForm(req: http.IncomingMessage): void {
  const scheme = /^https?:\/\/[^/?#]*/i.exec(req.url ?? '');
  if (scheme === null) return;
  const rest = req.url!.slice(scheme[0].length);
  req.url = rest.startsWith('/') ? rest : `/${rest}`;
}

function onH1Request(state: ServerState, req: http.IncomingMessage, res: http.ServerResponse): void {
  toOriginForm(req);
  const entry = state.sockets.get(req.socket);
  if (entry !== undefined) entry.inFlight++;
  res.once('close', () => {
    if (entry === undefined) return;
    entry.inFlight--;
    if (state.closing && entry.inFlight === 0) req.socket.destroySoon();
  });
  void serve(state, req as AnyRequest, res as AnyResponse, false);
}

/**
 * The answer to a request refused before its body is read: no token, a token of too small a scope, no such route
 * or method (App.precheck), or a declared body over the route's limit. Null: read the body and handle it.
 */
function refusalOf(state: ServerState, req: AnyRequest): ApiResponse | null {
  const method = req.method ?? 'GET';
  const refusal = state.app.precheck?.({ method, path: req.url, headers: flattenHeaders(req.headers) }) ?? null;
  if (refusal !== null) return refusal;
  const limit = state.app.bodyLimitFor(method, req.url);
  if (Number(req.headers['content-length'] ?? 0) > limit) {
    return problemResponse(new PunctualError('payload_too_large', `request body exceeds ${limit} bytes`));
  }
  return null;
}

/** True when an HTTP/1.1 request announces a body (a length above 0, or chunked). */
function hasBody(req: AnyRequest): boolean {
  const length = req.headers['content-length'];
  if (length !== undefined) return Number(length) > 0;
  return req.headers['transfer-encoding'] !== undefined;
}

/**
 * A refused request's answer, its body unread. HTTP/2: the stream is then reset with NO_ERROR (stop sending).
 * HTTP/1.1 with a body: the connection closes after the answer (its body cannot be skipped without reading it).
 */
function refuse(state: ServerState, req: AnyRequest, res: AnyResponse, isH2: boolean, response: ApiResponse): void {
  const method = req.method ?? 'GET';
  if (isH2) {
    send(state, res, method, response, true);
    // With NO_ERROR, node:http2 sends the RST_STREAM once the answer is written out (the stream's 'finish').
    const stream = (req as unknown as http2.Http2ServerRequest).stream;
    if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_NO_ERROR);
    return;
  }
  if (hasBody(req)) {
    // The body is never read into the app. Closing at once would reset the connection under a client still
    // uploading (it may lose the answer): half-close after the answer, let node:http discard what is in flight
    // for at most refusedLingerMs, then cut.
    response.headers.connection = 'close';
    const socket = (req as unknown as http.IncomingMessage).socket;
    socket.destroySoon = () => {
      socket.end();
      const timer = setTimeout(() => socket.destroy(), httpLimits.refusedLingerMs);
      socket.once('close', () => clearTimeout(timer));
    };
  }
  send(state, res, method, response, false);
}

async function serve(state: ServerState, req: AnyRequest, res: AnyResponse, isH2: boolean): Promise<void> {
  if (state.app.begin !== undefined) return serveBegun(state, req, res, isH2);
  const method = req.method ?? 'GET';
  const limit = state.app.bodyLimitFor(method, req.url);
  try {
    const refusal = state.app.precheck?.({ method, path: req.url, headers: flattenHeaders(req.headers) }) ?? null;
    if (refusal !== null) return refuse(state, req, res, isH2, refusal);
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > limit) return rejectTooLarge(state, req, res, isH2, limit, declared);
    const body = await readBody(req, limit);
    if (body === null) return rejectTooLarge(state, req, res, isH2, limit, 0);
    const response = await state.app.handle({ method, path: req.url, headers: flattenHeaders(req.headers), body });
    send(state, res, method, response, isH2);
  } catch (err) {
    // The client went away mid-body, or a bug: answer if we still can.
    state.logger.debug('request not served', { method, path: req.url, err });
    if (!res.headersSent) send(state, res, method, problemResponse(err), isH2);
  }
}

/** serve() through App.begin: the request routed and authenticated once, its headers flattened once. */
async function serveBegun(state: ServerState, req: AnyRequest, res: AnyResponse, isH2: boolean): Promise<void> {
  const method = req.method ?? 'GET';
  try {
    const begun = state.app.begin!({ method, path: req.url, headers: flattenHeaders(req.headers) });
    if (begun.refusal !== null) return refuse(state, req, res, isH2, begun.refusal);
    const limit = begun.bodyLimit;
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > limit) return rejectTooLarge(state, req, res, isH2, limit, declared);
    const body = await readBody(req, limit);
    if (body === null) return rejectTooLarge(state, req, res, isH2, limit, 0);
    send(state, res, method, await begun.finish(body), isH2);
  } catch (err) {
    state.logger.debug('request not served', { method, path: req.url, err });
    if (!res.headersSent) send(state, res, method, problemResponse(err), isH2);
  }
}

/** The body, or null as soon as more than `limit` bytes arrived (the rest is left to rejectTooLarge). */
function readBody(req: AnyRequest, limit: number): Promise<Uint8Array | null> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let total = 0;
    const cleanup = (): void => {
      req.removeListener('data', onData);
      req.removeListener('end', onEnd);
      req.removeListener('close', onClose);
      req.removeListener('error', onError);
    };
    const onData = (chunk: Buffer): void => {
      total += chunk.length;
      if (total <= limit) chunks.push(chunk);
      else {
        cleanup();
        resolve(null);
      }
    };
    const onEnd = (): void => {
      cleanup();
      resolve(Buffer.concat(chunks, total));
    };
    const onClose = (): void => {
      cleanup();
      if (req.complete) resolve(Buffer.concat(chunks, total));
      else reject(new Error('request aborted by the client'));
    };
    const onError = (err: Error): void => {
      cleanup();
      reject(err);
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('close', onClose);
    req.on('error', onError);
  });
}

/**
 * 413 at once. HTTP/1.1: the rest of the body is read and discarded (so the client can read the answer and the
 * connection stays usable) up to httpLimits.drainBytesMax, then the connection is cut. HTTP/2: after the answer
 * the stream is reset with NO_ERROR, which tells the client to stop sending (RFC 9113 section 8.1).
 */
function rejectTooLarge(state: ServerState, req: AnyRequest, res: AnyResponse, isH2: boolean, limit: number, declared: number): void {
  const err = new PunctualError('payload_too_large', `request body exceeds ${limit} bytes`);
  const response = problemResponse(err);
  if (isH2) {
    res.once('finish', () => {
      const stream = (req as unknown as http2.Http2ServerRequest).stream;
      if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_NO_ERROR);
    });
    send(state, res, 'POST', response, true);
    return;
  }
  const socket = (req as unknown as http.IncomingMessage).socket;
  if (declared > httpLimits.drainBytesMax) response.headers.connection = 'close';
  let drained = 0;
  req.on('data', (chunk: Buffer) => {
    drained += chunk.length;
    if (drained > httpLimits.drainBytesMax) socket.destroy();
  });
  req.resume();
  send(state, res, 'POST', response, false);
}

function flattenHeaders(headers: Record<string, string | string[] | undefined>): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  // for..in, not Object.entries: no pair arrays per header on every request (node's header objects own their keys).
  for (const name in headers) {
    if (name.charCodeAt(0) === 58) continue; // ':', HTTP/2 pseudo-headers
    const value = headers[name];
    out[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  return out;
}

function send(state: ServerState, res: AnyResponse, method: string, response: ApiResponse, isH2: boolean): void {
  if (response.body instanceof Readable) return sendStream(state, res, method, response, response.body, isH2);
  // A text body stays a string: node:http then writes the head and the body in one write, not a writev of two.
  const body = response.body;
  const bytes = typeof body === 'string' ? Buffer.byteLength(body, 'utf8') : body.byteLength;
  const headers: Record<string, string> = { ...response.headers }; // some answers are built once and shared
  const bodyless = response.status === 204 || response.status === 304;
  if (!bodyless) headers['content-length'] = String(bytes);
  if (state.closing && !isH2) headers.connection = 'close';
  if (!isH2 && closesAfterLargeTlsAnswer(res, bytes)) headers.connection = 'close';
  res.writeHead(response.status, headers);
  res.end(method === 'HEAD' || bodyless ? undefined : body);
}

/**
 * A streamed answer (a backup): piped with back-pressure. A client that goes away, or a stream that fails, ends
 * both sides (the stream's close is what frees what it holds); a HEAD gets the headers only.
 */
function sendStream(state: ServerState, res: AnyResponse, method: string, response: ApiResponse, body: Readable, isH2: boolean): void {
  const headers: Record<string, string> = { ...response.headers };
  if (state.closing && !isH2) headers.connection = 'close';
  res.writeHead(response.status, headers);
  if (method === 'HEAD') {
    body.destroy();
    res.end();
    return;
  }
  const out = res as unknown as Writable;
  pipeline(body, out).catch((err: unknown) => state.logger.debug('streamed answer cut', { err }));
}

/**
 * Over HTTPS/1.1, node:http pauses a keep-alive connection when the next request arrives while an answer larger
 * than the socket's write buffer is still counted as unsent, and the TLS socket can still hand decrypted bytes to
 * the paused parser (HPE_PAUSED), which ends in a reset connection. Such answers (batch results) close their
 * connection instead: the client opens a new one, nothing is reset. h2 and cleartext HTTP/1.1 are not affected.
 */
function closesAfterLargeTlsAnswer(res: AnyResponse, bodyBytes: number): boolean {
  const socket = (res as { socket?: unknown }).socket;
  return socket instanceof tls.TLSSocket && bodyBytes >= socket.writableHighWaterMark;
}

async function closeServers(
  state: ServerState,
  tcp: net.Server,
  h1: http.Server,
  sessions: Set<http2.ServerHttp2Session>,
  graceMs: number,
): Promise<void> {
  if (state.closing) return;
  state.closing = true;
  const drained = new Promise<void>((resolve) => tcp.close(() => resolve())); // resolves when every socket closed
  h1.close(); // stops node:http's timeout interval and closes its idle keep-alive connections
  for (const [socket, entry] of state.sockets) if (entry.kind !== 'h2' && entry.inFlight === 0) socket.destroy();
  for (const session of sessions) session.close(); // GOAWAY: open streams finish, no new ones
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), graceMs)));
  if ((await Promise.race([drained, deadline])) === 'timeout') {
    state.logger.warn('api server close: grace period over, destroying connections', { graceMs });
    for (const socket of state.sockets.keys()) socket.destroy();
    for (const session of sessions) session.destroy();
    await drained;
  }
  clearTimeout(timer);
}
