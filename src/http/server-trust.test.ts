/**
 * server.ts at its trust boundary, over real loopback sockets: refusals (401, 403, 404) answered before a byte of
 * the body is read on HTTP/1.1 and HTTP/2, HTTP/2 streams reset when their body is too slow, and HTTPS with
 * HTTP/1.1 and h2 chosen by ALPN, its certificate swapped without a restart.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import { Agent, request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startApiServer, type ApiServer, type ApiServerOptions } from './server.js';
import { makeTestCa, type TestCa } from './testing/certs.js';
import { makeHarness } from './testing/harness.js';
import { TokenSet } from './tokens.js';

const adminToken = 'admin-token-0123456789';
const readToken = 'read-token-0123456789';

const opened: Array<{ close(): Promise<void> | void }> = [];
afterEach(async () => {
  for (const o of opened.splice(0).reverse()) await o.close();
});

function harness() {
  const tokens = new TokenSet(adminToken, [{ name: 'dashboard', scope: 'read', token: readToken }]);
  return makeHarness({ authToken: adminToken, tokens });
}

async function start(options: ApiServerOptions = {}): Promise<{ server: ApiServer; h: ReturnType<typeof harness> }> {
  const h = harness();
  const server = await startApiServer(h.app, '127.0.0.1', 0, options);
  opened.push(server);
  return { server, h };
}

/** Sends the head and a first piece of a large declared body, never the rest; resolves with what came back. */
function headThenStall(port: number, head: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    opened.push({ close: () => void socket.destroy() });
    let answer = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => {
      answer += chunk;
      if (answer.includes('\r\n\r\n') && /"code"/.test(answer)) resolve(answer);
    });
    socket.on('error', () => resolve(answer));
    socket.on('close', () => resolve(answer));
    socket.write(head + '{"callback":' + ' '.repeat(1024));
  });
}

describe('refusals are answered before the body is read', () => {
  const declared = 50 * 1024 * 1024; // under the batch limit: only the refusal can answer before the body arrives

  it('HTTP/1.1: no token 401, a read token writing 403, no route 404; nothing reached the node', async () => {
    const { server, h } = await start();
    const noToken = await headThenStall(server.port, `POST /v1/jobs:batch HTTP/1.1\r\nHost: x\r\nContent-Length: ${declared}\r\n\r\n`);
    expect(noToken.split('\r\n')[0]).toBe('HTTP/1.1 401 Unauthorized');
    expect(noToken.toLowerCase()).toContain('connection: close');
    const weak = await headThenStall(
      server.port,
      `POST /v1/jobs:batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${readToken}\r\nContent-Length: ${declared}\r\n\r\n`,
    );
    expect(weak.split('\r\n')[0]).toBe('HTTP/1.1 403 Forbidden');
    expect(JSON.parse(weak.slice(weak.indexOf('\r\n\r\n') + 4))).toMatchObject({ status: 403, code: 'forbidden' });
    expect(weak).toContain('needs write');
    const lost = await headThenStall(
      server.port,
      `POST /v1/nowhere HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminToken}\r\nTransfer-Encoding: chunked\r\n\r\n`,
    );
    expect(lost.split('\r\n')[0]).toBe('HTTP/1.1 404 Not Found');
    expect(h.api.created).toEqual([]);
  });

  it('HTTP/1.1 Expect: 100-continue without a token: 401 instead of 100', async () => {
    const { server } = await start();
    const answer = await headThenStall(server.port, `POST /v1/jobs HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 500\r\n\r\n`);
    expect(answer.split('\r\n')[0]).toBe('HTTP/1.1 401 Unauthorized');
  });

  it('HTTP/2: a stream without a token gets 401 while its body is still open, then is closed; the session serves on', async () => {
    const { server, h } = await start();
    const session = http2.connect(`http://127.0.0.1:${server.port}`);
    session.on('error', () => {});
    opened.push({ close: () => void session.destroy() });
    const stream = session.request({ ':method': 'POST', ':path': '/v1/jobs:batch', 'content-length': String(declared) });
    stream.on('error', () => {});
    stream.write(Buffer.alloc(1024, 0x20)); // and never the rest
    stream.resume();
    const status = await new Promise<number>((resolve) => stream.on('response', (hd) => resolve(Number(hd[':status']))));
    expect(status).toBe(401);
    await new Promise<void>((resolve) => stream.on('close', () => resolve()));
    expect(stream.rstCode).toBe(http2.constants.NGHTTP2_NO_ERROR);
    const health = session.request({ ':path': '/healthz' });
    const ok = await new Promise<number>((resolve) => health.on('response', (hd) => resolve(Number(hd[':status']))));
    health.resume();
    expect(ok).toBe(200);
    expect(h.api.created).toEqual([]);
  });
});

describe('HTTP/2 request deadlines', () => {
  it('a stream whose body is still incomplete at the request deadline is reset (CANCEL); the session serves on', async () => {
    const { server, h } = await start({ requestTimeoutMs: 300 });
    const session = http2.connect(`http://127.0.0.1:${server.port}`);
    session.on('error', () => {});
    opened.push({ close: () => void session.destroy() });
    const slow = session.request({ ':method': 'POST', ':path': '/v1/jobs', authorization: `Bearer ${adminToken}` });
    slow.on('error', () => {});
    slow.write('{');
    const trickle = setInterval(() => slow.write(' '), 50); // never idle, never done
    opened.push({ close: () => clearInterval(trickle) });
    await new Promise<void>((resolve) => slow.on('close', () => resolve()));
    clearInterval(trickle);
    expect(slow.rstCode).toBe(http2.constants.NGHTTP2_CANCEL);
    const health = session.request({ ':path': '/healthz' });
    const ok = await new Promise<number>((resolve) => health.on('response', (hd) => resolve(Number(hd[':status']))));
    health.resume();
    expect(ok).toBe(200);
    expect(h.api.created).toEqual([]);
  });
});

describe('HTTPS', () => {
  let dir: string;
  let ca: TestCa;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'punctual-tls-'));
    ca = makeTestCa(dir);
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /** The serial of the certificate a new TLS connection is shown. */
  function servedSerial(port: number): Promise<string> {
    return new Promise((resolve, reject) => {
      const socket = tls.connect({ host: '127.0.0.1', port, ca: ca.caPem, ALPNProtocols: ['http/1.1'] }, () => {
        const serial = socket.getPeerCertificate().serialNumber;
        socket.destroy();
        resolve(serial);
      });
      socket.on('error', reject);
    });
  }

  it('HTTP/1.1 and h2 by ALPN on one port, verified against the CA; cleartext is refused', async () => {
    const first = ca.issue('server-1');
    const { server } = await start({ tls: { cert: first.cert, key: first.key } });
    expect(server.tls).toBe(true);
    const agent = new Agent({ connect: { ca: ca.caPem } });
    opened.push({ close: () => agent.close() });
    const h1 = await request(`https://127.0.0.1:${server.port}/v1/jobs`, { dispatcher: agent, headers: { authorization: `Bearer ${readToken}` } });
    expect(h1.statusCode).toBe(200);
    expect(await h1.body.json()).toEqual({ jobs: [], next_cursor: null });

    const session = http2.connect(`https://127.0.0.1:${server.port}`, { ca: ca.caPem });
    session.on('error', () => {});
    opened.push({ close: () => void session.destroy() });
    await new Promise<void>((resolve) => session.once('connect', () => resolve()));
    expect((session.socket as tls.TLSSocket).alpnProtocol).toBe('h2');
    const stream = session.request({ ':path': '/healthz' });
    const status = await new Promise<number>((resolve) => stream.on('response', (hd) => resolve(Number(hd[':status']))));
    stream.resume();
    expect(status).toBe(200);

    const untrusted = request(`https://127.0.0.1:${server.port}/healthz`, { dispatcher: new Agent() });
    await expect(untrusted).rejects.toThrow(/certificate/i);
  });

  it('an HTTPS/1.1 answer larger than the socket buffer closes its connection (a paused keep-alive parser reset the next request); small ones keep it', async () => {
    const cert = ca.issue('server-large');
    const { server } = await start({ tls: { cert: cert.cert, key: cert.key } });
    const agent = new Agent({ connect: { ca: ca.caPem } });
    opened.push({ close: () => agent.close() });
    const base = `https://127.0.0.1:${server.port}`;
    const small = await request(`${base}/healthz`, { dispatcher: agent });
    await small.body.dump();
    expect(small.headers.connection).not.toBe('close');
    const jobs = Array.from({ length: 1500 }, (_, i) => ({ id: `large-${i}`, callback: { url: 'http://127.0.0.1:9/x' } }));
    const large = await request(`${base}/v1/jobs:batch`, {
      method: 'POST',
      dispatcher: agent,
      headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ jobs }),
    });
    const text = await large.body.text();
    expect(large.statusCode).toBe(200);
    expect(Buffer.byteLength(text)).toBeGreaterThan(16 * 1024);
    expect(large.headers.connection).toBe('close');
  });

  it('setTlsCredentials: new connections see the new certificate; a bad pair is refused and the old one kept', async () => {
    const first = ca.issue('server-a');
    const second = ca.issue('server-b');
    const { server } = await start({ tls: { cert: first.cert, key: first.key } });
    expect(await servedSerial(server.port)).toBe(first.serial);
    expect(() => server.setTlsCredentials({ cert: second.cert, key: first.key })).toThrow();
    expect(() => server.setTlsCredentials({ cert: 'not a pem', key: 'nope' })).toThrow();
    expect(await servedSerial(server.port)).toBe(first.serial);
    server.setTlsCredentials({ cert: second.cert, key: second.key });
    expect(await servedSerial(server.port)).toBe(second.serial);
  });

  it('without TLS, setTlsCredentials throws and the cleartext port serves as before', async () => {
    const { server } = await start();
    expect(server.tls).toBe(false);
    expect(() => server.setTlsCredentials({ cert: '', key: '' })).toThrow(/does not serve TLS/);
  });
});
