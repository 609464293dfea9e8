/**
 * server.ts over real loopback sockets: HTTP/1.1 (undici) and h2c with prior knowledge (node:http2) on one port,
 * 413 without buffering, keep-alive, graceful close.
 */
import http2 from 'node:http2';
import net from 'node:net';
import { Readable } from 'node:stream';
import { Client } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { limits } from '../core/limits.js';
import { createLogger } from '../core/log.js';
import type { App } from './app.js';
import { startApiServer, type ApiServer } from './server.js';
import { makeHarness } from './testing/harness.js';

const opened: Array<{ close(): Promise<void> | void }> = [];
afterEach(async () => {
  for (const o of opened.splice(0).reverse()) await o.close();
});

async function start(app: App): Promise<ApiServer> {
  const server = await startApiServer(app, '127.0.0.1', 0);
  opened.push(server);
  return server;
}

function h1Client(port: number): Client {
  const client = new Client(`http://127.0.0.1:${port}`, { keepAliveTimeout: 10_000 });
  opened.push({ close: () => client.close() });
  return client;
}

function h2Session(port: number): http2.ClientHttp2Session {
  const session = http2.connect(`http://127.0.0.1:${port}`);
  session.on('error', () => {}); // a failing test reports through its request, not an unhandled error
  opened.push({ close: () => new Promise<void>((resolve) => (session.closed ? resolve() : session.close(() => resolve()))) });
  return session;
}

interface H2Answer {
  status: number;
  headers: http2.IncomingHttpHeaders;
  text: string;
  rstCode: number;
}

function h2Request(session: http2.ClientHttp2Session, method: string, path: string, body?: Buffer | string): Promise<H2Answer> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':method': method, ':path': path, 'content-type': 'application/json' });
    let headers: http2.IncomingHttpHeaders = {};
    let text = '';
    stream.on('response', (h) => (headers = h));
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => (text += chunk));
    stream.on('close', () => resolve({ status: Number(headers[':status']), headers, text, rstCode: stream.rstCode ?? 0 }));
    stream.on('error', (err) => (headers[':status'] === undefined ? reject(err) : undefined));
    stream.end(body);
  });
}

const jobBody = JSON.stringify({ id: 'job-1', callback: { url: 'http://127.0.0.1:9/hook' }, schedule: { delay_ms: 1000 } });

describe('startApiServer', () => {
  it('serves HTTP/1.1 and reuses one keep-alive connection', async () => {
    const { app } = makeHarness();
    const server = await start(app);
    const client = h1Client(server.port);
    let connects = 0;
    client.on('connect', () => connects++);
    const created = await client.request({ method: 'POST', path: '/v1/jobs', body: jobBody, headers: { 'content-type': 'application/json' } });
    expect(created.statusCode).toBe(201);
    expect(created.headers['content-type']).toBe('application/json');
    expect(((await created.body.json()) as { id: string }).id).toBe('job-1');
    for (let i = 0; i < 3; i++) {
      const got = await client.request({ method: 'GET', path: '/v1/jobs/job-1' });
      expect(got.statusCode).toBe(200);
      expect(((await got.body.json()) as { state: string }).state).toBe('PENDING');
    }
    expect(connects).toBe(1);
  });

  it('serves h2c with prior knowledge on the same port, many streams on one session', async () => {
    const { app } = makeHarness();
    const server = await start(app);
    const session = h2Session(server.port);
    const created = await h2Request(session, 'POST', '/v1/jobs', jobBody);
    expect(created.status).toBe(201);
    expect(JSON.parse(created.text).id).toBe('job-1');
    const answers = await Promise.all([1, 2, 3].map(() => h2Request(session, 'GET', '/v1/jobs/job-1')));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    // and HTTP/1.1 still works next to it
    const client = h1Client(server.port);
    const health = await client.request({ method: 'GET', path: '/healthz' });
    expect(health.statusCode).toBe(200);
    expect(await health.body.json()).toEqual({ status: 'ok', node_id: 'n1' });
  });

  it('HTTP/1.1: 413 on a declared oversized body, and the connection stays usable', async () => {
    const { app } = makeHarness();
    const server = await start(app);
    const client = h1Client(server.port);
    const big = Buffer.alloc(limits.requestBodyBytesMax + 1, 0x20);
    const res = await client.request({ method: 'POST', path: '/v1/jobs', body: big });
    expect(res.statusCode).toBe(413);
    expect(res.headers['content-type']).toBe('application/problem+json');
    expect(((await res.body.json()) as { code: string }).code).toBe('payload_too_large');
    const after = await client.request({ method: 'GET', path: '/healthz' });
    expect(after.statusCode).toBe(200);
    await after.body.dump();
  });

  it('HTTP/1.1 Expect: 100-continue: an oversized declared body gets 413 instead of 100, a fitting one 100 then 201', async () => {
    const { app } = makeHarness();
    const server = await start(app);
    const exchange = (head: string, body: string | null): Promise<string> =>
      new Promise((resolve, reject) => {
        const socket = net.connect(server.port, '127.0.0.1');
        opened.push({ close: () => void socket.destroy() });
        let text = '';
        socket.setEncoding('latin1');
        socket.on('data', (chunk: string) => {
          text += chunk;
          if (body !== null && text.startsWith('HTTP/1.1 100')) {
            socket.write(body);
            body = null;
          }
        });
        socket.on('end', () => resolve(text));
        socket.on('error', reject);
        socket.write(head);
      });
    const tooBig = limits.requestBodyBytesMax + 1;
    const refused = await exchange(`POST /v1/jobs HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: ${tooBig}\r\n\r\n`, 'x');
    expect(refused.split('\r\n')[0]).toBe('HTTP/1.1 413 Payload Too Large');
    expect(refused).toContain('"code":"payload_too_large"');
    const head = `POST /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\nExpect: 100-continue\r\nContent-Length: ${Buffer.byteLength(jobBody)}\r\n\r\n`;
    const accepted = await exchange(head, jobBody);
    expect(accepted.startsWith('HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\n')).toBe(true);
  });

  it('HTTP/1.1: a request node:http cannot parse gets a problem+json 400 (not a bare status line)', async () => {
    const { app } = makeHarness();
    const server = await start(app);
    // Resolves on close with what arrived: the server may reset a connection whose request it did not read to
    // the end (the 431 case), after its answer.
    const raw = (request: string): Promise<string> =>
      new Promise((resolve) => {
        const socket = net.connect(server.port, '127.0.0.1');
        opened.push({ close: () => void socket.destroy() });
        let text = '';
        socket.setEncoding('latin1');
        socket.on('data', (chunk: string) => (text += chunk));
        socket.on('close', () => resolve(text));
        socket.on('error', () => {});
        socket.write(request);
      });
    for (const request of ['POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n', 'GARBAGE\r\n\r\n']) {
      const answer = await raw(request);
      const [head, body] = answer.split('\r\n\r\n');
      expect(head!.split('\r\n')[0]).toBe('HTTP/1.1 400 Bad Request');
      expect(head).toContain('Content-Type: application/problem+json');
      expect(JSON.parse(body!)).toMatchObject({ status: 400, code: 'invalid_argument', errors: [{ field: 'request' }] });
    }
    const overflow = await raw(`GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
    expect(overflow.split('\r\n')[0]).toBe('HTTP/1.1 431 Request Header Fields Too Large');
  });

  it('HTTP/1.1: CONNECT gets a problem+json 400 on request and the connection is closed (it was left open)', async () => {
    const { app } = makeHarness();
    const server = await start(app);
    for (const target of ['127.0.0.1:80', '/v1/jobs']) {
      const answer = await rawExchange(server.port, [`CONNECT ${target} HTTP/1.1\r\nHost: x\r\n\r\n`]);
      const [head, body] = answer.split('\r\n\r\n');
      expect(head!.split('\r\n')[0], target).toBe('HTTP/1.1 400 Bad Request');
      expect(head).toContain('Connection: close');
      expect(JSON.parse(body!)).toMatchObject({ status: 400, code: 'invalid_argument', errors: [{ field: 'request' }] });
    }
    // the server still serves
    expect((await fetch(`http://127.0.0.1:${server.port}/healthz`)).status).toBe(200);
  });

  it('HTTP/1.1: an absolute-form target (RFC 9112 3.2.2) is served by its path', async () => {
    const { app } = makeHarness();
    const server = await start(app);
    const get = await rawExchange(server.port, [`GET http://127.0.0.1:${server.port}/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`]);
    expect(get.split('\r\n')[0]).toBe('HTTP/1.1 200 OK');
    const body = '{"url":"http://127.0.0.1:9/"}';
    const put = await rawExchange(server.port, [
      `PUT HTTP://example.com/v1/tasks/abs HTTP/1.1\r\nHost: example.com\r\nContent-Length: ${body.length}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n`,
      body,
    ]);
    expect(put).toContain('HTTP/1.1 201 Created');
  });

  it('HTTP/1.1: 413 on a streamed (chunked) body that grows past the limit', async () => {
    const { app } = makeHarness();
    const server = await start(app);
    const client = h1Client(server.port);
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    async function* chunks(): AsyncGenerator<Buffer> {
      for (let sent = 0; sent <= limits.requestBodyBytesMax; sent += chunk.length) yield chunk;
    }
    const res = await client.request({ method: 'POST', path: '/v1/jobs', body: Readable.from(chunks()) });
    expect(res.statusCode).toBe(413);
    expect(((await res.body.json()) as { code: string }).code).toBe('payload_too_large');
  });

  it('the batch route has its own, larger body limit', async () => {
    const { app } = makeHarness();
    const server = await start(app);
    const client = h1Client(server.port);
    const jobs = Array.from({ length: 40 }, (_, i) => ({ id: `b-${i}`, callback: { url: 'http://127.0.0.1:9/' }, payload: 'x'.repeat(30_000) }));
    const body = JSON.stringify({ jobs });
    expect(body.length).toBeGreaterThan(limits.requestBodyBytesMax);
    const res = await client.request({ method: 'POST', path: '/v1/jobs:batch', body });
    expect(res.statusCode).toBe(200);
    const results = ((await res.body.json()) as { results: Array<{ status: number }> }).results;
    expect(results.every((r) => r.status === 201)).toBe(true);
  });

  it('h2c: 413 on an oversized body, then the session still serves', async () => {
    const { app } = makeHarness();
    const server = await start(app);
    const session = h2Session(server.port);
    const res = await h2Request(session, 'POST', '/v1/jobs', Buffer.alloc(limits.requestBodyBytesMax + 1, 0x20));
    expect(res.status).toBe(413);
    expect(JSON.parse(res.text).code).toBe('payload_too_large');
    expect((await h2Request(session, 'GET', '/healthz')).status).toBe(200);
  });

  it('h2c: CONNECT gets the same problem+json 400 and its stream is closed; the session still serves', async () => {
    const { app } = makeHarness();
    const server = await start(app);
    const session = h2Session(server.port);
    const answer = await new Promise<{ status: number; type: string; text: string; rstCode: number }>((resolve, reject) => {
      const stream = session.request({ ':method': 'CONNECT', ':authority': '127.0.0.1:80' });
      let status = 0;
      let type = '';
      let text = '';
      stream.on('response', (h) => ((status = Number(h[':status'])), (type = String(h['content-type']))));
      stream.setEncoding('utf8');
      stream.on('data', (c: string) => (text += c));
      stream.on('close', () => resolve({ status, type, text, rstCode: stream.rstCode ?? -1 }));
      stream.on('error', reject);
    });
    expect([answer.status, answer.type, answer.rstCode]).toEqual([400, 'application/problem+json', http2.constants.NGHTTP2_NO_ERROR]);
    expect(JSON.parse(answer.text)).toMatchObject({ code: 'invalid_argument', errors: [{ field: 'request' }] });
    expect((await h2Request(session, 'GET', '/healthz')).status).toBe(200);
  });

  it('HEAD answers like GET without a body', async () => {
    const { app } = makeHarness();
    const server = await start(app);
    const client = h1Client(server.port);
    const res = await client.request({ method: 'HEAD', path: '/healthz' });
    expect(res.statusCode).toBe(200);
    expect(await res.body.text()).toBe('');
  });

  it('sniffs a request that arrives in small pieces (a prefix of the preface first)', async () => {
    const { app } = makeHarness();
    const server = await start(app);
    const answer = await rawExchange(server.port, ['P', 'UT /v1/tasks/t1 HTTP/1.1\r\nHost: x\r\nContent-Length: 29\r\n', 'Connection: close\r\n\r\n{"url":"http://127.0.0.1:9/"}']);
    expect(answer).toMatch(/^HTTP\/1\.1 201 /);
  });

  it('a client that goes away mid-body does not disturb the server', async () => {
    const { app, api } = makeHarness();
    const server = await start(app);
    const socket = net.connect(server.port, '127.0.0.1');
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.write('POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"callback"');
    await new Promise((resolve) => setTimeout(resolve, 20));
    socket.destroy();
    const client = h1Client(server.port);
    const res = await client.request({ method: 'GET', path: '/healthz' });
    expect(res.statusCode).toBe(200);
    await res.body.dump();
    expect(api.created).toEqual([]);
  });

  it('close() lets an in-flight request finish, then refuses new connections', async () => {
    const { app } = makeHarness();
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => (entered = resolve));
    const slow: App = {
      bodyLimitFor: app.bodyLimitFor,
      handle: async (req) => {
        if (req.path === '/slow') {
          entered();
          await gate;
          return app.handle({ ...req, path: '/healthz' });
        }
        return app.handle(req);
      },
    };
    const logs: string[] = [];
    const logger = createLogger({ level: 'debug', write: (line) => logs.push(line) });
    const server = await startApiServer(slow, '127.0.0.1', 0, { logger });
    const idle = h1Client(server.port);
    expect((await idle.request({ method: 'GET', path: '/healthz' })).statusCode).toBe(200);
    const busy = h1Client(server.port);
    const pending = busy.request({ method: 'GET', path: '/slow' });
    await inside;
    const closed = server.close();
    release();
    const res = await pending;
    expect(res.statusCode).toBe(200);
    expect(res.headers.connection).toBe('close');
    await res.body.dump();
    await closed;
    expect(logs.filter((l) => l.includes('grace period over'))).toEqual([]); // the idle connection did not hold close() up
    await expect(connectOnce(server.port)).rejects.toThrow(/ECONNREFUSED/);
  });

  it('close() is bounded: a request that never finishes is cut after the grace period', async () => {
    const { app } = makeHarness();
    let entered = 0;
    const stuck: App = { bodyLimitFor: app.bodyLimitFor, handle: () => (entered++, new Promise<never>(() => {})) };
    const logs: string[] = [];
    const logger = createLogger({ level: 'debug', write: (line) => logs.push(line) });
    const server = await startApiServer(stuck, '127.0.0.1', 0, { logger, closeGraceMs: 50 });
    const session = h2Session(server.port);
    const client = h1Client(server.port);
    const h1Pending = client.request({ method: 'GET', path: '/v1/jobs' }).then(() => 'answered', () => 'cut');
    const h2Pending = h2Request(session, 'GET', '/v1/jobs').then((a) => (a.status > 0 ? 'answered' : 'cut'), () => 'cut');
    while (entered < 2) await new Promise((resolve) => setTimeout(resolve, 5)); // both requests are in flight
    await server.close();
    expect(await h1Pending).toBe('cut');
    expect(await h2Pending).toBe('cut');
    expect(logs.some((l) => l.includes('grace period over'))).toBe(true);
  });
});

function connectOnce(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => {
      socket.destroy();
      resolve();
    });
    socket.on('error', reject);
  });
}

/** Writes the pieces one by one (a turn of the event loop apart) and returns everything the server answered. */
function rawExchange(port: number, pieces: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let answer = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (answer += chunk));
    socket.on('end', () => resolve(answer));
    socket.on('error', reject);
    socket.once('connect', async () => {
      for (const piece of pieces) {
        socket.write(piece);
        await new Promise((r) => setTimeout(r, 10));
      }
    });
  });
}
