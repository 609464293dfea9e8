/**
 * The dispatcher against real receivers on 127.0.0.1 (node:http and raw node:net servers, port 0).
 * Assertions are about behaviour and ordering, never about how long something took.
 */
import { createHmac } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer as createHttpsServer } from 'node:https';
import { connect, createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock, systemClock } from '../core/clock.js';
import { limits } from '../core/limits.js';
import { loopbackSans, makeCa, makeCert, openssl } from '../core/testing/certs.js';
import { silentLogger } from '../core/log.js';
import type { CallbackSpec } from '../scheduler/types.js';
import { callbackSpec } from './testing/spec.js';
import { Dispatcher, type AttemptOutcome, type Delivery, type DispatcherOptions } from './dispatcher.js';
import { verifySignature, verifySignatureV2, verifyStandardWebhook } from './signature.js';
import { TargetPolicy, parseCidr, type Cidr } from './target-policy.js';

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

async function httpReceiver(handler: Handler): Promise<{ url: string; server: Server }> {
  const server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const port = (server.address() as { port: number }).port;
  return { url: `http://127.0.0.1:${port}`, server };
}

async function netReceiver(onConnection: (socket: Socket) => void): Promise<string> {
  const sockets = new Set<Socket>();
  const server: NetServer = createNetServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    onConnection(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
}

function dispatcher(options: Partial<DispatcherOptions> = {}): Dispatcher {
  const d = new Dispatcher({ clock: systemClock(), logger: silentLogger, ...options });
  cleanups.push(() => d.close(0));
  return d;
}

const spec = callbackSpec;

let jobCounter = 0;
function delivery(s: CallbackSpec, overrides: Partial<Delivery> = {}): Delivery {
  jobCounter++;
  return {
    jobId: `job-${jobCounter}`,
    scheduledAtMs: 1_700_000_000_000 + jobCounter,
    attempt: 1,
    fencingToken: '0.1',
    spec: s,
    body: new TextEncoder().encode('{"n":1}'),
    concurrencyKey: 'task-a',
    ...overrides,
  };
}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
  });
}

describe('headers and signature', () => {
  it('sends every callback header exactly, the body as is, and a signature that verifies', async () => {
    const seen: Array<{ method: string; url: string; headers: IncomingMessage['headers']; raw: string[]; body: Buffer }> = [];
    const { url } = await httpReceiver(async (req, res) => {
      const body = await readBody(req);
      seen.push({ method: req.method!, url: req.url!, headers: req.headers, raw: req.rawHeaders, body });
      res.end('ok');
    });
    const clock = new ManualClock(1_700_000_123_456);
    const d = dispatcher({ clock });
    const secret = 'shh-its-a-secret';
    const s = spec(`${url}/hooks/run?x=1`, {
      headers: { 'x-custom': 'v1', 'x-punctual-attempt': '999', 'x-deduplication-key': 'forged' },
      signingSecret: secret,
    });
    const body = new TextEncoder().encode('{"hello":"wörld"}');
    const outcome = await d.send(
      delivery(s, { jobId: 'j-42', scheduledAtMs: 1_700_000_000_000, attempt: 3, fencingToken: '2.7', body }),
    );

    expect(outcome).toEqual({
      kind: 'succeeded',
      statusCode: 200,
      error: null,
      retryAfterMs: null,
      startedAtMs: 1_700_000_123_456,
      finishedAtMs: 1_700_000_123_456,
    });
    expect(seen).toHaveLength(1);
    const got = seen[0];
    expect(got.method).toBe('POST');
    expect(got.url).toBe('/hooks/run?x=1');
    expect(got.headers['x-deduplication-key']).toBe('j-42:1700000000000');
    expect(got.headers['x-punctual-job-id']).toBe('j-42');
    expect(got.headers['x-punctual-scheduled-at']).toBe('1700000000000');
    expect(got.headers['x-punctual-attempt']).toBe('3');
    expect(got.headers['x-punctual-fencing-token']).toBe('2.7');
    expect(got.headers['x-custom']).toBe('v1');
    expect(got.headers['content-type']).toBe('application/json');
    // A user header never overrides ours, and is not sent alongside it either.
    const names = got.raw.filter((_, i) => i % 2 === 0).map((n) => n.toLowerCase());
    expect(names.filter((n) => n === 'x-punctual-attempt')).toHaveLength(1);
    expect(names.filter((n) => n === 'x-deduplication-key')).toHaveLength(1);
    expect(Buffer.compare(got.body, Buffer.from(body))).toBe(0);

    const signature = got.headers['x-punctual-signature'] as string;
    expect(signature).toMatch(/^t=1700000123456,v1=[0-9a-f]{64},v2=[0-9a-f]{64}$/);
    expect(verifySignature(secret, signature, got.body, 5_000, 1_700_000_124_000)).toBe(true);
    const independent = createHmac('sha256', secret)
      .update(Buffer.concat([Buffer.from('1700000123456.'), got.body]))
      .digest('hex');
    expect(signature.split(',v2=')[0]).toBe(`t=1700000123456,v1=${independent}`);
    expect(verifySignature('other-secret', signature, got.body, 5_000, 1_700_000_124_000)).toBe(false);
  });

  it('keeps a user content-type, signs nothing without a secret, and sends an empty GET without a body', async () => {
    const seen: Array<{ method: string; headers: IncomingMessage['headers']; body: Buffer }> = [];
    const { url } = await httpReceiver(async (req, res) => {
      seen.push({ method: req.method!, headers: req.headers, body: await readBody(req) });
      res.end();
    });
    const d = dispatcher();
    const typed = spec(url, { headers: { 'content-type': 'text/plain' } });
    expect((await d.send(delivery(typed))).kind).toBe('succeeded');
    const get = spec(`${url}/ping`, { method: 'GET' });
    expect((await d.send(delivery(get, { body: new Uint8Array(0) }))).kind).toBe('succeeded');

    expect(seen[0].headers['content-type']).toBe('text/plain');
    expect(seen[0].headers['x-punctual-signature']).toBeUndefined();
    expect(seen[1].method).toBe('GET');
    expect(seen[1].headers['content-type']).toBeUndefined();
    expect(seen[1].headers['content-length']).toBeUndefined();
    expect(seen[1].body.length).toBe(0);
  });

  it('labels payload_base64 bytes application/octet-stream, and drops a user Host header', async () => {
    const seen: Array<{ headers: IncomingMessage['headers']; body: Buffer }> = [];
    const { url } = await httpReceiver(async (req, res) => {
      seen.push({ headers: req.headers, body: await readBody(req) });
      res.end();
    });
    const d = dispatcher();
    const bytes = new Uint8Array([0, 1, 2, 0xff, 0xfe, 0x0a]);
    const hosted = spec(url, { headers: { host: 'elsewhere.example' } });
    expect((await d.send(delivery(hosted, { body: bytes, bodyEncoding: 'base64' }))).kind).toBe('succeeded');
    expect((await d.send(delivery(spec(url), { bodyEncoding: 'json' }))).kind).toBe('succeeded');

    expect(seen[0].headers['content-type']).toBe('application/octet-stream');
    expect(Buffer.compare(seen[0].body, Buffer.from(bytes))).toBe(0);
    expect(seen[0].headers.host).toBe(new URL(url).host);
    expect(seen[1].headers['content-type']).toBe('application/json');
  });

  it('calls onStart with the startedAtMs of the outcome', async () => {
    const { url } = await httpReceiver((_req, res) => res.end());
    const starts: Array<[string, number]> = [];
    const clock = new ManualClock(5_000);
    const d = dispatcher({ clock, onStart: (dl, at) => starts.push([dl.jobId, at]) });
    const dl = delivery(spec(url));
    const pending = d.send(dl);
    clock.advance(10);
    const outcome = await pending;
    expect(starts).toEqual([[dl.jobId, 5_000]]);
    expect(outcome.startedAtMs).toBe(5_000);
    expect(outcome.finishedAtMs).toBe(5_010);
  });
});

describe('classification', () => {
  it('maps statuses: 2xx succeeded, 408/429/5xx retryable, 3xx and other 4xx permanent', async () => {
    let redirectFollowed = 0;
    const { url } = await httpReceiver((req, res) => {
      if (req.url === '/elsewhere') {
        redirectFollowed++;
        res.end();
        return;
      }
      const status = Number(req.url!.slice('/status/'.length));
      if (status >= 300 && status < 400) res.setHeader('location', '/elsewhere');
      res.statusCode = status;
      res.end(status === 204 || status === 304 ? undefined : `status ${status}`);
    });
    const d = dispatcher();
    const expected: Array<[number, AttemptOutcome['kind']]> = [
      [200, 'succeeded'], [201, 'succeeded'], [204, 'succeeded'], [299, 'succeeded'],
      [301, 'permanent'], [302, 'permanent'], [304, 'permanent'], [307, 'permanent'],
      [400, 'permanent'], [401, 'permanent'], [404, 'permanent'], [409, 'permanent'], [422, 'permanent'],
      [408, 'retryable'], [429, 'retryable'], [500, 'retryable'], [502, 'retryable'], [503, 'retryable'],
      [599, 'retryable'],
    ];
    for (const [status, kind] of expected) {
      const outcome = await d.send(delivery(spec(`${url}/status/${status}`)));
      expect({ status, kind: outcome.kind }).toEqual({ status, kind });
      expect(outcome.statusCode).toBe(status);
      const redirect = status >= 300 && status < 400;
      const error = redirect ? `HTTP ${status} (redirect to /elsewhere not followed)` : `HTTP ${status}`;
      expect(outcome.error).toBe(kind === 'succeeded' ? null : error);
    }
    expect(redirectFollowed).toBe(0);
  });

  it('parses Retry-After in seconds and as an HTTP date, clamps it, and ignores it on success', async () => {
    const { url } = await httpReceiver((req, res) => {
      const [, status, value] = decodeURIComponent(req.url!).split('|');
      res.statusCode = Number(status);
      res.setHeader('retry-after', value);
      res.end();
    });
    const clock = new ManualClock(1_700_000_000_000);
    const d = dispatcher({ clock });
    const send = (status: number, value: string) =>
      d.send(delivery(spec(`${url}/${encodeURIComponent(`|${status}|${value}`)}`)));

    expect((await send(503, '7')).retryAfterMs).toBe(7_000);
    const date = new Date(1_700_000_120_000).toUTCString();
    expect(await send(429, date)).toMatchObject({ kind: 'retryable', statusCode: 429, retryAfterMs: 120_000 });
    expect((await send(503, '99999999')).retryAfterMs).toBe(limits.retryAfterMsMax);
    expect((await send(503, new Date(1_600_000_000_000).toUTCString())).retryAfterMs).toBe(0);
    expect((await send(503, 'soon-ish')).retryAfterMs).toBeNull();
    expect((await send(200, '7')).retryAfterMs).toBeNull();
    // Absurd values: more digits than fit in a day still mean "the longest wait", and text that merely contains
    // a year is not an HTTP date (it must not hold the retry back for an hour).
    expect((await send(503, '99999999999999')).retryAfterMs).toBe(limits.retryAfterMsMax);
    expect((await send(503, 'x 2027')).retryAfterMs).toBeNull();
    expect((await send(429, 'Tuesday, 14-Nov-23 22:15:20 GMT')).retryAfterMs).toBe(120_000);
  });

  it('times out a receiver that never answers, and drops its connection', async () => {
    let closedByClient = 0;
    const { url } = await httpReceiver((req) => {
      req.socket.on('close', () => closedByClient++);
    });
    const d = dispatcher();
    const outcome = await d.send(delivery(spec(url, { timeoutMs: 200 })));
    expect(outcome).toMatchObject({ kind: 'retryable', statusCode: null, error: 'timeout after 200 ms' });
    await waitFor(() => closedByClient === 1);
    expect(d.inFlight()).toBe(0);
  });

  it('an answer that arrived while the event loop was blocked past the timeout counts, not the timeout', async () => {
    // The receiver answers, then blocks this process longer than the attempt's timeout: when the loop runs
    // again, the expired timer and the answer in the socket are both ready. A duplicate delivery would follow
    // from trusting the timer (the exact 128 duplicates of a stalled hot instant).
    const { url } = await httpReceiver((req, res) => {
      req.resume();
      res.end('ok');
      const untilMs = performance.now() + 400;
      while (performance.now() < untilMs) {
        // busy: the event loop is stalled, as under a long synchronous batch
      }
    });
    const d = dispatcher();
    const outcome = await d.send(delivery(spec(url, { timeoutMs: 150 })));
    expect(outcome).toMatchObject({ kind: 'succeeded', statusCode: 200, error: null });
  });

  it('a body that never ends: the status decides at the timeout, and the connection is dropped', async () => {
    let closed = 0;
    const { url } = await httpReceiver((req, res) => {
      const status = Number(req.url!.slice(1));
      res.writeHead(status, { 'content-length': '100', 'retry-after': '3' });
      res.write('partial');
      res.on('close', () => closed++);
    });
    const d = dispatcher();
    // The receiver said 2xx: delivering again would duplicate a callback it accepted.
    const ok = await d.send(delivery(spec(`${url}/200`, { timeoutMs: 200 })));
    expect(ok).toMatchObject({ kind: 'succeeded', statusCode: 200, error: null });
    const busy = await d.send(delivery(spec(`${url}/503`, { timeoutMs: 200 })));
    expect(busy).toMatchObject({ kind: 'retryable', statusCode: 503, error: 'HTTP 503', retryAfterMs: 3_000 });
    const gone = await d.send(delivery(spec(`${url}/404`, { timeoutMs: 200 })));
    expect(gone).toMatchObject({ kind: 'permanent', statusCode: 404, error: 'HTTP 404' });
    await waitFor(() => closed === 3);
    expect(d.inFlight()).toBe(0);
  });

  it('a body cut by a reset or a close after the status: the status decides', async () => {
    const cut = (how: 'reset' | 'close', status: number) =>
      netReceiver((socket) =>
        socket.once('data', () => {
          socket.write(`HTTP/1.1 ${status} X\r\nContent-Length: 100\r\n\r\nabc`);
          setTimeout(() => (how === 'reset' ? socket.resetAndDestroy() : socket.end()), 20);
        }),
      );
    const d = dispatcher();
    const reset200 = await d.send(delivery(spec(await cut('reset', 200))));
    expect(reset200).toMatchObject({ kind: 'succeeded', statusCode: 200, error: null });
    const closed201 = await d.send(delivery(spec(await cut('close', 201))));
    expect(closed201).toMatchObject({ kind: 'succeeded', statusCode: 201, error: null });
    const reset500 = await d.send(delivery(spec(await cut('reset', 500))));
    expect(reset500).toMatchObject({ kind: 'retryable', statusCode: 500, error: 'HTTP 500' });
    // No status yet: the reset itself is the outcome.
    const early = await netReceiver((socket) =>
      socket.once('data', () => {
        socket.write('HTTP/1.1 200 OK\r\n');
        setTimeout(() => socket.resetAndDestroy(), 20);
      }),
    );
    expect(await d.send(delivery(spec(early)))).toMatchObject({ kind: 'retryable', statusCode: null });
  });

  it('treats a destroyed socket, a TCP reset and a refused connection as retryable', async () => {
    const { url: destroying } = await httpReceiver((req) => req.socket.destroy());
    const resetting = await netReceiver((socket) => socket.once('data', () => socket.resetAndDestroy()));
    const closedPort = await netReceiver(() => {});
    await cleanups.pop()!(); // close it now: its port refuses connections
    await new Promise((r) => setTimeout(r, 10));
    const d = dispatcher();

    const destroyed = await d.send(delivery(spec(destroying)));
    expect(destroyed).toMatchObject({ kind: 'retryable', statusCode: null });
    expect(destroyed.error).toMatch(/other side closed|ECONNRESET|UND_ERR_SOCKET/);
    expect(await d.send(delivery(spec(resetting)))).toMatchObject({ kind: 'retryable', error: 'ECONNRESET' });
    expect(await d.send(delivery(spec(closedPort)))).toMatchObject({ kind: 'retryable', error: 'ECONNREFUSED' });
  });

  it('treats a garbage response as retryable', async () => {
    const url = await netReceiver((socket) =>
      socket.once('data', () => socket.end('THIS IS NOT HTTP AT ALL\r\n\u0000\u0001\r\n\r\n')),
    );
    const d = dispatcher();
    const outcome = await d.send(delivery(spec(url)));
    expect(outcome).toMatchObject({ kind: 'retryable', statusCode: null });
    expect(outcome.error).toMatch(/^(HTTPParserError|HPE_\w+): /);
  });

  it('an https receiver whose certificate does not verify: retryable, the certificate error named, nothing sent', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'punctual-rx-tls-'));
    cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
    // A self-signed certificate, and one signed by a CA this process does not trust (docs/api.md: NODE_EXTRA_CA_CERTS).
    openssl(dir, ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', 'self.key',
      '-out', 'self.crt', '-days', '2', '-subj', '/CN=self', '-addext', 'subjectAltName=IP:127.0.0.1']); // prettier-ignore
    makeCa(dir);
    const signed = makeCert(dir, 'leaf', loopbackSans);
    let requests = 0;
    const receiver = async (certFile: string, keyFile: string): Promise<string> => {
      const server = createHttpsServer({ cert: readFileSync(certFile), key: readFileSync(keyFile) }, (_req, res) => {
        requests++;
        res.end();
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      cleanups.push(async () => {
        server.closeAllConnections();
        await new Promise<void>((resolve) => server.close(() => resolve()));
      });
      return `https://127.0.0.1:${(server.address() as { port: number }).port}/cb`;
    };
    const d = dispatcher();
    const self = await d.send(delivery(spec(await receiver(join(dir, 'self.crt'), join(dir, 'self.key')))));
    expect(self).toMatchObject({ kind: 'retryable', statusCode: null, error: 'DEPTH_ZERO_SELF_SIGNED_CERT: self-signed certificate' });
    const unknownCa = await d.send(delivery(spec(await receiver(signed.certFile, signed.keyFile))));
    expect(unknownCa).toMatchObject({ kind: 'retryable', statusCode: null });
    expect(unknownCa.error).toMatch(/^UNABLE_TO_VERIFY_LEAF_SIGNATURE: /);
    expect(requests).toBe(0);
  });

  it('fails invalid and non-HTTP URLs permanently without sending', async () => {
    const d = dispatcher();
    expect(await d.send(delivery(spec('not a url')))).toMatchObject({ kind: 'permanent', error: 'invalid url' });
    expect(await d.send(delivery(spec('ftp://127.0.0.1/x')))).toMatchObject({
      kind: 'permanent',
      error: 'unsupported url scheme ftp:',
    });
  });

  it('fails a header undici cannot send permanently, and keeps going', async () => {
    const { url } = await httpReceiver((_req, res) => res.end());
    const d = dispatcher();
    const bad = spec(url, { headers: { 'x-bad': 'line\r\nbreak' } });
    const outcome = await d.send(delivery(bad));
    expect(outcome.kind).toBe('permanent');
    expect(outcome.error).toMatch(/UND_ERR_INVALID_ARG/);
    expect((await d.send(delivery(spec(url)))).kind).toBe('succeeded');
  });
});

describe('deadlines: one timer for every attempt out', () => {
  it('each attempt times out after its own timeoutMs, whatever was sent before or after it', async () => {
    // A long-timeout attempt first, then short ones (an earlier deadline than the one the timer waits for),
    // then one answered: each settles on its own terms.
    const held: ServerResponse[] = [];
    const { url } = await httpReceiver((req, res) => {
      req.resume();
      if (req.url === '/ok') res.end('ok');
      else if (req.url === '/held') held.push(res);
    });
    const d = dispatcher();
    const long = d.send(delivery(spec(`${url}/held`, { timeoutMs: 30_000 })));
    const short = [150, 300, 150].map((timeoutMs) => d.send(delivery(spec(`${url}/hang`, { timeoutMs }))));
    const answered = d.send(delivery(spec(`${url}/ok`, { timeoutMs: 20_000 })));
    expect(await answered).toMatchObject({ kind: 'succeeded', statusCode: 200 });
    const shortOutcomes = await Promise.all(short);
    expect(shortOutcomes.map((o) => o.error)).toEqual(['timeout after 150 ms', 'timeout after 300 ms', 'timeout after 150 ms']);
    // The long one is still out after every short deadline passed; answered now, it succeeds.
    await waitFor(() => held.length === 1);
    expect(d.inFlight()).toBe(1);
    held[0]!.end('late but in time');
    expect(await long).toMatchObject({ kind: 'succeeded', statusCode: 200, error: null });
    expect(d.inFlight()).toBe(0);
  });

  it('after everything settled, the next attempts still time out on their own deadlines, later or earlier', async () => {
    // The timer stays set (not holding the process) once nothing is out: an attempt whose deadline is later than
    // it must not be settled by it, one whose deadline is earlier must not wait for it.
    const { url } = await httpReceiver((req, res) => {
      req.resume();
      if (req.url === '/ok') res.end('ok');
    });
    const d = dispatcher();
    expect(await d.send(delivery(spec(`${url}/ok`, { timeoutMs: 200 })))).toMatchObject({ kind: 'succeeded' });
    expect(d.inFlight()).toBe(0);
    const later = d.send(delivery(spec(`${url}/hang`, { timeoutMs: 600 })));
    const earlier = d.send(delivery(spec(`${url}/hang`, { timeoutMs: 100 })));
    expect((await earlier).error).toBe('timeout after 100 ms');
    const o = await later;
    expect(o.error).toBe('timeout after 600 ms');
    expect(o.finishedAtMs - o.startedAtMs).toBeGreaterThanOrEqual(600);
  });
});

describe('sendTo (no promise per send)', () => {
  it('hands every outcome to one callback with its tag, never inside the call, and survives a callback that throws', async () => {
    const { url } = await httpReceiver((req, res) => {
      req.resume();
      res.statusCode = req.url === '/503' ? 503 : 200;
      res.end();
    });
    const d = dispatcher();
    const got = new Map<number, AttemptOutcome>();
    let inCall = false;
    let calledInside = 0;
    const done = (outcome: AttemptOutcome, tag: number): void => {
      if (inCall) calledInside++;
      got.set(tag, outcome);
      if (tag === 3) throw new Error('a caller bug');
    };
    const sends: Array<[string, number]> = [
      [`${url}/ok`, 1],
      [`${url}/503`, 2],
      [`${url}/ok`, 3],
      ['ftp://127.0.0.1/x', 4], // settled without sending: still not inside the call
    ];
    for (const [target, tag] of sends) {
      inCall = true;
      d.sendTo(delivery(spec(target)), null, done, tag);
      inCall = false;
    }
    await waitFor(() => got.size === 4);
    expect(calledInside).toBe(0);
    expect(got.get(1)).toMatchObject({ kind: 'succeeded', statusCode: 200 });
    expect(got.get(2)).toMatchObject({ kind: 'retryable', statusCode: 503, error: 'HTTP 503' });
    expect(got.get(3)).toMatchObject({ kind: 'succeeded', statusCode: 200 });
    expect(got.get(4)).toMatchObject({ kind: 'permanent', error: 'unsupported url scheme ftp:' });
    // The throwing callback freed its slots: a key limited to one still sends.
    expect(d.inFlight()).toBe(0);
    const one = spec(`${url}/ok`, { maxConcurrency: 1 });
    await new Promise<void>((resolve) => d.sendTo(delivery(one), null, (o) => { expect(o.kind).toBe('succeeded'); resolve(); }, 0));
    await d.close(0);
    inCall = true;
    d.sendTo(delivery(spec(`${url}/ok`)), null, done, 5);
    inCall = false;
    await waitFor(() => got.has(5));
    expect(calledInside).toBe(0);
    expect(got.get(5)).toMatchObject({ kind: 'retryable', error: 'dispatcher closed' });
  });
});

describe('response bodies', () => {
  it('does not buffer a huge body: it settles on the status and drops the connection', async () => {
    let bytesWritten = 0;
    let receiverSawClose = false;
    const { url } = await httpReceiver((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      const chunk = Buffer.alloc(16 * 1024, 0x61);
      // An endless body: only a client that stops reading can ever settle.
      const pump = (): void => {
        let more = true;
        while (!res.destroyed && more) {
          more = res.write(chunk);
          bytesWritten += chunk.length;
        }
        if (!res.destroyed) res.once('drain', pump);
      };
      res.on('close', () => (receiverSawClose = true));
      pump();
    });
    const d = dispatcher();
    const outcome = await d.send(delivery(spec(url)));
    expect(outcome).toMatchObject({ kind: 'succeeded', statusCode: 200, error: null });
    await waitFor(() => receiverSawClose);
    expect(bytesWritten).toBeGreaterThan(limits.responseBodyBytesMax);
  });

  it('reads a small body to its end and reuses keep-alive connections', async () => {
    const ports: number[] = [];
    const { url } = await httpReceiver((req, res) => {
      ports.push(req.socket.remotePort!);
      res.end('x'.repeat(limits.responseBodyBytesMax));
    });
    const d = dispatcher();
    for (let i = 0; i < 6; i++) expect((await d.send(delivery(spec(url)))).kind).toBe('succeeded');
    // undici's pool may alternate between two idle sockets, but sequential sends never need a new one each.
    expect(new Set(ports).size).toBeLessThanOrEqual(2);
  });
});

describe('isolation and concurrency', () => {
  it('a slow target does not delay a fast one', async () => {
    const releaseSlow: Array<() => void> = [];
    const { url: slow } = await httpReceiver((_req, res) => releaseSlow.push(() => res.end('slow')));
    const { url: fast } = await httpReceiver((_req, res) => res.end('fast'));
    const d = dispatcher();
    const order: string[] = [];
    const slowSpec = spec(slow, { maxConcurrency: 1 });
    const slowOnes = [1, 2].map((i) =>
      d.send(delivery(slowSpec, { concurrencyKey: 'slow' })).then((o) => (order.push(`slow${i}`), o)),
    );
    await waitFor(() => releaseSlow.length === 1); // the first slow request is held by its receiver
    const fastOutcome = await d.send(delivery(spec(fast), { concurrencyKey: 'fast' }));
    order.push('fast');
    expect(fastOutcome.kind).toBe('succeeded');
    expect(d.queued()).toBe(1); // the second slow one waits for its own key only
    releaseSlow.shift()!();
    await waitFor(() => releaseSlow.length === 1);
    releaseSlow.shift()!();
    for (const o of await Promise.all(slowOnes)) expect(o.kind).toBe('succeeded');
    expect(order).toEqual(['fast', 'slow1', 'slow2']);
  });

  it('a hanging target does not stall another target on the same key budget', async () => {
    const { url: hanging } = await httpReceiver(() => {});
    const { url: fast } = await httpReceiver((_req, res) => res.end());
    const d = dispatcher();
    const hung = d.send(delivery(spec(hanging, { timeoutMs: 300 }), { concurrencyKey: 'hang' }));
    const ok = await d.send(delivery(spec(fast), { concurrencyKey: 'other' }));
    expect(ok.kind).toBe('succeeded');
    expect(d.inFlight()).toBe(1);
    expect((await hung).error).toBe('timeout after 300 ms');
  });

  it('enforces maxConcurrency per key and starts a key in FIFO order', async () => {
    let current = 0;
    let maxSeen = 0;
    const arrivals: string[] = [];
    const { url } = await httpReceiver((req, res) => {
      current++;
      maxSeen = Math.max(maxSeen, current);
      arrivals.push(req.headers['x-punctual-job-id'] as string);
      setTimeout(() => {
        current--;
        res.end();
      }, 20);
    });
    const d = dispatcher();
    const s = spec(url, { maxConcurrency: 3 });
    const deliveries = Array.from({ length: 12 }, () => delivery(s, { concurrencyKey: 'limited' }));
    const pending = deliveries.map((dl) => d.send(dl));
    expect(d.inFlight()).toBe(3);
    expect(d.queued()).toBe(9);
    for (const o of await Promise.all(pending)) expect(o.kind).toBe('succeeded');
    expect(maxSeen).toBe(3);
    expect(d.inFlight()).toBe(0);
    expect(d.queued()).toBe(0);

    arrivals.length = 0;
    const one = spec(url, { maxConcurrency: 1 });
    const serial = Array.from({ length: 6 }, () => delivery(one, { concurrencyKey: 'serial' }));
    await Promise.all(serial.map((dl) => d.send(dl)));
    expect(arrivals).toEqual(serial.map((dl) => dl.jobId));
  });

  it('enforces the global inFlightMax across keys', async () => {
    let current = 0;
    let maxSeen = 0;
    const { url } = await httpReceiver((_req, res) => {
      current++;
      maxSeen = Math.max(maxSeen, current);
      setTimeout(() => {
        current--;
        res.end();
      }, 20);
    });
    const d = dispatcher({ inFlightMax: 2 });
    const pending = Array.from({ length: 8 }, (_, i) => d.send(delivery(spec(url), { concurrencyKey: `k${i}` })));
    for (const o of await Promise.all(pending)) expect(o.kind).toBe('succeeded');
    expect(maxSeen).toBe(2);
  });

  it('never sends late an attempt that timed out while queued in a saturated pool', async () => {
    let received = 0;
    const { url } = await httpReceiver(() => received++);
    const d = dispatcher();
    const connections = limits.dispatchConnectionsPerOriginMax;
    const holding = spec(url, { timeoutMs: 600, maxConcurrency: 1000 });
    const waiting = spec(url, { timeoutMs: 150, maxConcurrency: 1000 });
    const held = Array.from({ length: connections }, () => d.send(delivery(holding, { concurrencyKey: 'sat' })));
    // Every connection of the origin is busy: these two wait inside undici's pool and time out there.
    const queued = await Promise.all([1, 2].map(() => d.send(delivery(waiting, { concurrencyKey: 'sat' }))));
    for (const o of queued) expect(o.error).toBe('timeout after 150 ms');
    await waitFor(() => received === connections);
    // The held ones time out and free their sockets; the two stale requests then get one and must be dropped.
    for (const o of await Promise.all(held)) expect(o.error).toBe('timeout after 600 ms');
    await new Promise((r) => setTimeout(r, 200));
    expect(received).toBe(connections);
  });

  it('warm connections count against the origin\'s bound, undici\'s connections still on their way included', async () => {
    let accepted = 0;
    let requests = 0;
    const url = await netReceiver((socket) => {
      accepted++;
      socket.on('data', () => requests++); // never answers: every request holds its connection
    });
    const d = dispatcher();
    const max = limits.dispatchConnectionsPerOriginMax;
    const hanging = spec(`${url}/h`, { timeoutMs: 60_000, maxConcurrency: 1000 });
    for (let i = 0; i < max; i++) void d.send(delivery(hanging, { concurrencyKey: 'bound' }));
    // Staging asks for as many warm connections as requests due at once, while the pool's own are connecting.
    d.warm(`${url}/h`, max);
    await waitFor(() => requests === max);
    // A connection of ours after all that: the receiver accepts in order, so whatever the node opened is counted.
    const barrier = connect(Number(new URL(url).port), '127.0.0.1');
    cleanups.push(async () => void barrier.destroy());
    await waitFor(() => accepted > max);
    expect(accepted - 1).toBe(max);
  });

  it('frees the slot of a timed-out attempt for the next one of its key', async () => {
    let hits = 0;
    const { url } = await httpReceiver((req, res) => {
      hits++;
      if (req.url === '/ok') res.end();
    });
    const d = dispatcher();
    const first = d.send(delivery(spec(`${url}/hang`, { timeoutMs: 200, maxConcurrency: 1 })));
    const second = d.send(delivery(spec(`${url}/ok`, { maxConcurrency: 1 })));
    expect(d.queued()).toBe(1);
    expect((await first).error).toBe('timeout after 200 ms');
    expect((await second).kind).toBe('succeeded');
    expect(hits).toBe(2);
  });
});

describe('close', () => {
  it('fails queued sends, aborts in-flight ones after the grace, and refuses new ones', async () => {
    let closedByClient = 0;
    const { url } = await httpReceiver((req) => req.socket.on('close', () => closedByClient++));
    const d = new Dispatcher({ clock: systemClock(), logger: silentLogger });
    const s = spec(url, { maxConcurrency: 1 });
    const inFlight = d.send(delivery(s));
    const queued = d.send(delivery(s));
    await waitFor(() => d.inFlight() === 1 && d.queued() === 1);
    await d.close(50);
    expect(await queued).toMatchObject({ kind: 'retryable', error: 'dispatcher closed' });
    expect(await inFlight).toMatchObject({ kind: 'retryable', error: 'aborted: dispatcher closed' });
    expect(await d.send(delivery(s))).toMatchObject({ kind: 'retryable', error: 'dispatcher closed' });
    expect(d.inFlight()).toBe(0);
    await waitFor(() => closedByClient === 1);
  });

  it('lets in-flight requests finish within the grace', async () => {
    const { url } = await httpReceiver((_req, res) => setTimeout(() => res.end(), 30));
    const d = new Dispatcher({ clock: systemClock(), logger: silentLogger });
    const pending = d.send(delivery(spec(url)));
    await waitFor(() => d.inFlight() === 1);
    await d.close(10_000);
    expect((await pending).kind).toBe('succeeded');
  });
});

async function waitFor(condition: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('signing v2 and Standard Webhooks, with two secrets', () => {
  it('signs every family with both secrets; each verifies on its own, and a third secret fails', async () => {
    const seen: Array<{ headers: IncomingMessage['headers']; body: Buffer }> = [];
    const { url } = await httpReceiver(async (req, res) => {
      seen.push({ headers: req.headers, body: await readBody(req) });
      res.end();
    });
    const clock = new ManualClock(1_700_000_123_456);
    const current = 'current-secret-0123456789';
    const next = 'whsec_' + Buffer.from('next-key-bytes-0123456789abcdef').toString('base64');
    const s = spec(`${url}/hook?a=1#frag`, { method: 'PUT', signingSecret: current, signingSecretNext: next });
    const body = new TextEncoder().encode('{"x":1}');
    const outcome = await dispatcher({ clock }).send(delivery(s, { jobId: 'j-7', scheduledAtMs: 1_700_000_000_000, body }));
    expect(outcome.kind).toBe('succeeded');
    const { headers, body: got } = seen[0];
    expect(headers['webhook-id']).toBe('j-7:1700000000000');
    expect(headers['webhook-id']).toBe(headers['x-deduplication-key']);
    expect(headers['webhook-timestamp']).toBe('1700000123');
    const entries = (headers['webhook-signature'] as string).split(' ');
    expect(entries).toHaveLength(2);
    // Independently: HMAC-SHA256(key, id.timestamp.body) in base64, key = UTF-8 bytes or the whsec_ bytes.
    const std = (key: Buffer): string =>
      'v1,' + createHmac('sha256', key).update(Buffer.concat([Buffer.from('j-7:1700000000000.1700000123.'), got])).digest('base64');
    expect(entries).toEqual([std(Buffer.from(current)), std(Buffer.from('next-key-bytes-0123456789abcdef'))]);
    const std3 = { id: headers['webhook-id'] as string, timestamp: headers['webhook-timestamp'] as string, signature: headers['webhook-signature'] as string };
    const nowMs = 1_700_000_124_000;
    expect(verifyStandardWebhook(current, std3, got, 300, nowMs)).toBe(true);
    expect(verifyStandardWebhook(next, std3, got, 300, nowMs)).toBe(true);
    expect(verifyStandardWebhook('a-third-secret-0123456789', std3, got, 300, nowMs)).toBe(false);

    const punctual = headers['x-punctual-signature'] as string;
    expect(punctual).toMatch(/^t=1700000123456,v1=[0-9a-f]{64},v1=[0-9a-f]{64},v2=[0-9a-f]{64},v2=[0-9a-f]{64}$/);
    // v2 binds the method, the URL as requested (no fragment), the deduplication key, t and the body.
    const canonical = Buffer.concat([Buffer.from(`PUT\n${url}/hook?a=1\nj-7:1700000000000\n1700000123456\n`), got]);
    const v2 = (key: Buffer): string => createHmac('sha256', key).update(canonical).digest('hex');
    expect(punctual).toContain(`v2=${v2(Buffer.from(current))},v2=${v2(Buffer.from('next-key-bytes-0123456789abcdef'))}`);
    const request = { method: 'PUT', url: `${url}/hook?a=1`, dedupKey: 'j-7:1700000000000', body: got };
    for (const secret of [current, next]) {
      expect(verifySignatureV2(secret, punctual, request, 5_000, nowMs)).toBe(true);
      expect(verifySignature(secret, punctual, got, 5_000, nowMs)).toBe(true);
    }
    expect(verifySignatureV2(current, punctual, { ...request, method: 'POST' }, 5_000, nowMs)).toBe(false);
    expect(verifySignatureV2(current, punctual, { ...request, url: `${url}/other?a=1` }, 5_000, nowMs)).toBe(false);
    expect(verifySignatureV2(current, punctual, { ...request, dedupKey: 'j-7:1' }, 5_000, nowMs)).toBe(false);
    expect(verifySignatureV2('a-third-secret-0123456789', punctual, request, 5_000, nowMs)).toBe(false);
  });

  it('a payload_ref body replaces the user content-type and is what every family signs; the other headers stay as they are', async () => {
    const blob = Buffer.from('a,b\n1,2\n');
    const { url: blobUrl } = await httpReceiver((_req, res) => res.end(blob));
    const seen: Array<{ headers: string[]; body: Buffer }> = [];
    const { url } = await httpReceiver(async (req, res) => {
      seen.push({ headers: req.rawHeaders, body: await readBody(req) });
      res.end();
    });
    const s = spec(`${url}/hook`, { headers: { 'X-Tenant': 't1', 'Content-Type': 'application/json' }, signingSecret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' });
    const d = dispatcher();
    const dl = delivery(s, { body: new Uint8Array(0), payloadRef: { url: `${blobUrl}/blob`, sha256: null, contentType: 'text/csv' } });
    expect(await d.send(dl)).toMatchObject({ kind: 'succeeded' });
    const { headers, body } = seen[0]!;
    expect(body.equals(blob)).toBe(true);
    const dedupKey = `${dl.jobId}:${dl.scheduledAtMs}`;
    const names = headers.filter((_, i) => i % 2 === 0);
    expect(names.filter((n) => !['host', 'content-length', 'connection'].includes(n.toLowerCase()))).toEqual([
      'X-Tenant', 'X-Deduplication-Key', 'X-Punctual-Job-Id', 'X-Punctual-Scheduled-At', 'X-Punctual-Attempt',
      'X-Punctual-Fencing-Token', 'webhook-id', 'webhook-timestamp', 'webhook-signature', 'X-Punctual-Signature', 'content-type',
    ]);
    const value = (name: string): string => headers[headers.indexOf(name) + 1]!;
    expect([value('X-Tenant'), value('X-Deduplication-Key'), value('webhook-id'), value('content-type')]).toEqual(['t1', dedupKey, dedupKey, 'text/csv']);
    expect([value('X-Punctual-Job-Id'), value('X-Punctual-Scheduled-At'), value('X-Punctual-Attempt'), value('X-Punctual-Fencing-Token')]).toEqual([
      dl.jobId, String(dl.scheduledAtMs), '1', '0.1',
    ]);
    const secret = s.signingSecret!;
    const now = Number(value('webhook-timestamp')) * 1000;
    expect(verifySignature(secret, value('X-Punctual-Signature'), blob, 60_000, now)).toBe(true);
    expect(verifySignatureV2(secret, value('X-Punctual-Signature'), { method: 'POST', url: `${url}/hook`, dedupKey, body: blob }, 60_000, now)).toBe(true);
    const std = { id: dedupKey, timestamp: value('webhook-timestamp'), signature: value('webhook-signature') };
    expect(verifyStandardWebhook(secret, std, blob, 60, now)).toBe(true);
  });

  it('a prepared request that leaves long after its due time (behind max_concurrency) is signed at its send time', async () => {
    const secret = 'prepared-secret-of-16-bytes';
    const seen: Array<{ path: string; headers: IncomingMessage['headers'] }> = [];
    let release: (() => void) | null = null;
    const { url } = await httpReceiver((req, res) => {
      seen.push({ path: req.url!, headers: req.headers });
      req.resume();
      if (req.url === '/first') release = () => res.end();
      else res.end();
    });
    const clock = new ManualClock(1_700_000_000_000);
    const d = dispatcher({ clock });
    const one = (path: string) => spec(`${url}${path}`, { signingSecret: secret, maxConcurrency: 1 });
    const first = d.send(delivery(one('/first'), { concurrencyKey: 'one-at-a-time' }));
    await waitFor(() => release !== null);
    // Staged and prepared for now, but its key's only slot is taken: it waits ten minutes in the queue.
    const queued = delivery(one('/queued'), { concurrencyKey: 'one-at-a-time' });
    const prepared = d.prepare(queued, clock.nowMs());
    const second = d.send(queued, prepared);
    clock.advance(600_000);
    release!();
    await first;
    expect((await second).kind).toBe('succeeded');
    const h = seen.find((r) => r.path === '/queued')!.headers;
    expect(h['webhook-timestamp']).toBe(String(Math.floor((1_700_000_000_000 + 600_000) / 1000)));
    expect(String(h['x-punctual-signature']).startsWith(`t=${1_700_000_000_000 + 600_000},`)).toBe(true);
    // A prepared request sent at its time keeps the signature made ahead (nothing is signed at the due ms).
    const onTime = delivery(one('/on-time'), { concurrencyKey: 'one-at-a-time' });
    const ahead = d.prepare(onTime, clock.nowMs() + 50);
    clock.advance(50);
    await d.send(onTime, ahead);
    expect(String(seen.find((r) => r.path === '/on-time')!.headers['x-punctual-signature']).startsWith(`t=${clock.nowMs()},`)).toBe(true);
  });

  it('a user header named like a Standard Webhooks header is never sent', async () => {
    const seen: Array<IncomingMessage['headers']> = [];
    const { url } = await httpReceiver((req, res) => {
      seen.push(req.headers);
      res.end();
    });
    const s = spec(url, { headers: { 'webhook-id': 'forged', 'webhook-signature': 'v1,forged' } });
    expect((await dispatcher().send(delivery(s))).kind).toBe('succeeded');
    expect(seen[0]['webhook-id']).toBeUndefined();
    expect(seen[0]['webhook-signature']).toBeUndefined();
  });
});

describe('target policy (SSRF guard) at connect time', () => {
  const cidr = (text: string): Cidr => parseCidr(text) as Cidr;

  it('refuses a name that resolves to a denied address, permanently, without sending anything', async () => {
    let requests = 0;
    const { url } = await httpReceiver((_req, res) => {
      requests++;
      res.end();
    });
    const port = new URL(url).port;
    // localhost resolves through the system resolver: the URL names no address, only the lookup sees 127.0.0.1.
    const d = dispatcher({ targetPolicy: new TargetPolicy({ deny: [cidr('127.0.0.0/8'), cidr('::1')] }) });
    const outcome = await d.send(delivery(spec(`http://localhost:${port}/x`)));
    expect(outcome.kind).toBe('permanent');
    expect(outcome.statusCode).toBeNull();
    expect(outcome.error).toMatch(/^callback target (127\.0\.0\.1|::1) refused by policy \(--callback-deny (127\.0\.0\.0\/8|::1)\) \(resolved from localhost\)$/);
    expect(requests).toBe(0);
    // The same receiver by name without the deny: resolved by the same checking lookup, and delivered.
    expect((await dispatcher().send(delivery(spec(`http://localhost:${port}/x`)))).kind).toBe('succeeded');
    expect(requests).toBe(1);
  });

  it('refuses a literal address at connect time: link-local, unspecified, mapped, and own listeners by name', async () => {
    let requests = 0;
    const { url } = await httpReceiver((_req, res) => {
      requests++;
      res.end();
    });
    const port = Number(new URL(url).port);
    const policy = new TargetPolicy();
    policy.addListener('127.0.0.1', port, 'API listener');
    const d = dispatcher({ targetPolicy: policy });
    const cases: Array<[string, RegExp]> = [
      ['http://169.254.169.254/latest/meta-data/', /^callback target 169\.254\.169\.254 refused by policy \(link-local 169\.254\.0\.0\/16\)$/],
      ['http://0.0.0.0:1/', /^callback target 0\.0\.0\.0 refused by policy \(unspecified 0\.0\.0\.0\/8\)$/],
      ['http://[::]:1/', /^callback target :: refused by policy \(unspecified ::\/128\)$/],
      ['http://[::ffff:169.254.169.254]/', /^callback target 169\.254\.169\.254 refused by policy \(link-local/],
      ['http://[fe80::1]:1/', /^callback target fe80::1 refused by policy \(link-local fe80::\/10\)$/],
      [`http://127.0.0.1:${port}/v1/tasks`, /^callback target 127\.0\.0\.1:\d+ refused by policy \(this node's API listener\)$/],
      [`http://localhost:${port}/v1/tasks`, /refused by policy \(this node's API listener\) \(resolved from localhost\)$/],
    ];
    for (const [target, error] of cases) {
      const outcome = await d.send(delivery(spec(target)));
      expect({ target, error: outcome.error }).toEqual({ target, error: expect.stringMatching(error) });
      expect(outcome.kind).toBe('permanent');
    }
    expect(requests).toBe(0);
  });

  it('an explicit allow lifts a built-in deny, but never opens the node\'s own listener', async () => {
    const { url } = await httpReceiver((_req, res) => res.end());
    const port = Number(new URL(url).port);
    const policy = new TargetPolicy({ allow: [cidr('0.0.0.0/0')] });
    expect(policy.refusal('169.254.169.254', 80)).toBeNull();
    policy.addListener('0.0.0.0', port, 'peer listener');
    const outcome = await dispatcher({ targetPolicy: policy }).send(delivery(spec(url)));
    expect(outcome).toMatchObject({ kind: 'permanent', error: `callback target 127.0.0.1:${port} refused by policy (this node's peer listener)` });
  });
});

describe('redirects', () => {
  it('never shows a Location query string, fragment or credentials in the error', async () => {
    const { url } = await httpReceiver((req, res) => {
      res.statusCode = 302;
      res.setHeader('location', req.url === '/abs' ? 'https://user:pw@internal.example:8443/cb?token=SECRET#frag' : '/next?token=SECRET#x');
      res.end();
    });
    const d = dispatcher();
    const abs = await d.send(delivery(spec(`${url}/abs`)));
    expect(abs).toMatchObject({ kind: 'permanent', statusCode: 302, error: 'HTTP 302 (redirect to https://internal.example:8443/cb not followed)' });
    const rel = await d.send(delivery(spec(`${url}/rel`)));
    expect(rel.error).toBe('HTTP 302 (redirect to /next not followed)');
  });
});
