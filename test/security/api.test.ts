/**
 * The client API's trust boundary, attacked as a stranger on the network would, against real `punctual serve`
 * processes (the built dist/): unauthenticated uploads refused unread (the node's memory does not grow), a slow
 * HTTP/2 upload reset, the pathological cron preview refused, scoped tokens (and their SIGHUP reload), HTTPS with
 * HTTP/1.1 and h2 by ALPN, the CLI with --cacert, and a certificate swapped by SIGHUP.
 */
import { spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import http2 from 'node:http2';
import { join } from 'node:path';
import tls from 'node:tls';
import { Agent, request } from 'undici';
import { beforeAll, describe, expect, it } from 'vitest';
import { makeTestCa, type TestCa } from '../../src/http/testing/certs.js';
import { useProcessBed } from '../../src/node/testing/bed.js';
import { freePorts } from '../../src/node/testing/cluster.js';
import { root, spawnServe, type Child } from '../../src/node/testing/processes.js';
import { waitFor } from '../../src/node/testing/receiver.js';

const bed = useProcessBed('punctual-sec-api-');
const admin = 'admin-token-0123456789abcdef';
const reader = 'reader-token-0123456789abcd';
const writer = 'writer-token-0123456789abcd';

async function serve(name: string, extra: string[]): Promise<{ child: Child; port: number }> {
  const [port, peer] = await freePorts(2);
  const flags = ['--listen', `127.0.0.1:${port}`, '--peer-listen', `127.0.0.1:${peer}`, '--data', join(bed.dir, name), '--shards', '1', ...extra];
  const child = bed.track(await spawnServe(flags, port!));
  return { child, port: port! };
}

function tokensFile(name: string, lines: string[]): string {
  const path = join(bed.dir, name);
  writeFileSync(path, lines.join('\n') + '\n');
  return path;
}

/** Resident memory of a process, in bytes (Linux /proc). */
function rssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (m === null) throw new Error('no VmRSS');
  return Number(m[1]) * 1024;
}

async function call(base: string, method: string, path: string, body?: unknown, token?: string, dispatcher?: Agent) {
  const headers: Record<string, string> = {};
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (token !== undefined) headers.authorization = `Bearer ${token}`;
  const res = await request(base + path, { method: method as 'GET', headers, body: body === undefined ? undefined : JSON.stringify(body), ...(dispatcher ? { dispatcher } : {}) });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, json: text === '' ? null : JSON.parse(text) };
}

/** Streams `bytes` of body to a batch route without a token; resolves with the status the node answered. */
function upload(port: number, bytes: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/v1/jobs:batch', headers: { 'content-length': String(bytes) } });
    const chunk = Buffer.alloc(1024 * 1024, 0x20);
    let sent = 0;
    let done = false;
    req.on('response', (res) => {
      done = true;
      res.resume();
      resolve(res.statusCode ?? 0);
      req.destroy();
    });
    req.on('error', (err) => (done ? undefined : reject(err)));
    const pump = (): void => {
      while (!done && sent < bytes) {
        sent += chunk.length;
        if (!req.write(chunk)) return void req.once('drain', pump);
      }
      if (!done) req.end();
    };
    pump();
  });
}

describe('resource bounds', () => {
  it('8 unauthenticated uploads of 60 MiB are answered 401 unread: the node does not grow by hundreds of MiB', async () => {
    const { child, port } = await serve('uploads', ['--auth-token', admin]);
    const before = rssBytes(child.proc.pid!);
    const statuses = await Promise.all(Array.from({ length: 8 }, () => upload(port, 60 * 1024 * 1024)));
    expect(statuses).toEqual(Array(8).fill(401));
    const after = rssBytes(child.proc.pid!);
    expect(after - before).toBeLessThan(100 * 1024 * 1024);
    expect((await call(`http://127.0.0.1:${port}`, 'GET', '/healthz')).status).toBe(200);
  }, 60_000);

  it('an HTTP/2 upload at 1 byte per second is reset at the request deadline; the node serves on', async () => {
    // --http-request-timeout-ms is the hidden test knob (default 5 minutes, as HTTP/1.1's requestTimeout)
    const { port } = await serve('slow-h2', ['--auth-token', admin, '--http-request-timeout-ms', '2000']);
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on('error', () => {});
    try {
      const streams = Array.from({ length: 20 }, () => {
        const s = session.request({ ':method': 'POST', ':path': '/v1/jobs', authorization: `Bearer ${admin}` });
        s.on('error', () => {});
        s.resume();
        s.write('{');
        return s;
      });
      const trickle = setInterval(() => streams.forEach((s) => s.destroyed || s.write(' ')), 1_000);
      try {
        await Promise.all(streams.map((s) => new Promise<void>((resolve) => s.on('close', () => resolve()))));
      } finally {
        clearInterval(trickle);
      }
      expect(streams.map((s) => s.rstCode)).toEqual(Array(20).fill(http2.constants.NGHTTP2_CANCEL));
    } finally {
      session.destroy();
    }
    expect((await call(`http://127.0.0.1:${port}`, 'GET', '/healthz')).status).toBe(200);
  }, 30_000);

  it('the pathological preview (0 0 0 ? 2 1#5, count 1000) is a 400 on schedule.cron; the node answers after', async () => {
    const { port } = await serve('preview', ['--auth-token', admin]);
    const base = `http://127.0.0.1:${port}`;
    const body = { schedule: { cron: '0 0 0 ? 2 1#5', timezone: 'Europe/Berlin' }, from: '2026-12-01T00:00:00Z', count: 1000 };
    const answers = await Promise.all([1, 2, 3].map(() => call(base, 'POST', '/v1/schedules:preview', body, admin)));
    for (const a of answers) {
      expect(a.status).toBe(400);
      expect(a.json).toMatchObject({ code: 'invalid_argument', errors: [{ field: 'schedule.cron' }] });
    }
    expect((await call(base, 'GET', '/healthz')).status).toBe(200);
    const fine = await call(base, 'POST', '/v1/schedules:preview', { ...body, schedule: { cron: '0 0 12 * * SUN' } }, admin);
    expect(fine.status).toBe(200);
    expect(fine.json.occurrences).toHaveLength(1000);
  }, 30_000);
});

describe('tokens and scopes', () => {
  it('read cannot write, write cannot move leadership or write a task, admin can; the file is re-read on SIGHUP', async () => {
    const file = tokensFile('tokens', ['# scopes', `dash read ${reader}`, `ci write ${writer}`]);
    const { child, port } = await serve('scopes', ['--auth-token', admin, '--auth-tokens-file', file, '--log-level', 'info']);
    const base = `http://127.0.0.1:${port}`;
    const task = { url: bed.rx.url('/scoped') };
    const job = { id: 'scoped-1', task: 't1', schedule: { delay_ms: 60_000 } };
    expect((await call(base, 'PUT', '/v1/tasks/t1', task, writer)).status).toBe(403);
    expect((await call(base, 'PUT', '/v1/tasks/t1', task, admin)).status).toBe(201);
    const readerWrite = await call(base, 'POST', '/v1/jobs', job, reader);
    expect(readerWrite.status).toBe(403);
    expect(readerWrite.json).toMatchObject({ code: 'forbidden' });
    expect((await call(base, 'GET', '/v1/jobs', undefined, reader)).status).toBe(200);
    expect((await call(base, 'POST', '/v1/jobs', job, writer)).status).toBe(201);
    const transfer = await call(base, 'POST', '/v1/cluster/shards/0/transfer-leader', { to: 'n2' }, writer);
    expect(transfer.status).toBe(403);
    expect(transfer.json.detail).toContain('needs admin');
    expect((await call(base, 'POST', '/v1/cluster/shards/0/transfer-leader', { to: 'n2' }, admin)).status).not.toBe(403);
    // the access log names the token of each write
    await waitFor('access lines', () => /"msg":"access".*"token":"ci"/.test(child.stderr()));
    expect(child.stderr()).not.toContain(writer);

    // rotation: the new file replaces the old set at SIGHUP; a bad file keeps the previous set
    const rotated = 'reader-token-rotated-0123456';
    writeFileSync(file, `dash read ${rotated}\n`);
    child.proc.kill('SIGHUP');
    await waitFor('new token accepted', async () => (await call(base, 'GET', '/v1/jobs', undefined, rotated)).status === 200);
    expect((await call(base, 'GET', '/v1/jobs', undefined, reader)).status).toBe(401);
    writeFileSync(file, 'dash superuser short\n');
    child.proc.kill('SIGHUP');
    await waitFor('bad file logged', () => child.stderr().includes('auth tokens not reloaded'));
    expect(child.stderr()).toContain('line 1');
    expect((await call(base, 'GET', '/v1/jobs', undefined, rotated)).status).toBe(200);
  }, 30_000);
});

describe('TLS for the client API', () => {
  let ca: TestCa;
  let tlsDir: string;
  beforeAll(() => {
    tlsDir = join(bed.dir, 'tls');
    mkdirSync(tlsDir);
    ca = makeTestCa(tlsDir);
  });

  function servedSerial(port: number): Promise<string> {
    return new Promise((resolve, reject) => {
      const socket = tls.connect({ host: '127.0.0.1', port, ca: ca.caPem }, () => {
        resolve(socket.getPeerCertificate().serialNumber);
        socket.destroy();
      });
      socket.on('error', reject);
    });
  }

  function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
    return new Promise((resolve) => {
      const p = spawn(process.execPath, [join(root, 'dist', 'cmd', 'punctual.js'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      p.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
      p.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
      p.on('exit', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    });
  }

  it('HTTPS: HTTP/1.1 and h2 by ALPN, the CLI with --cacert, a new certificate taken at SIGHUP', async () => {
    const first = ca.issue('api-1');
    const certFile = join(tlsDir, 'live.pem');
    const keyFile = join(tlsDir, 'live.key');
    copyFileSync(first.certFile, certFile);
    copyFileSync(first.keyFile, keyFile);
    const { child, port } = await serve('tls', ['--auth-token', admin, '--tls-cert-file', certFile, '--tls-key-file', keyFile]);
    expect(child.stderr()).toMatch(/"msg":"client api".*"tls":true/);
    const base = `https://127.0.0.1:${port}`;
    const agent = new Agent({ connect: { ca: ca.caPem } });
    try {
      expect((await call(base, 'GET', '/v1/jobs', undefined, admin, agent)).status).toBe(200);
    } finally {
      await agent.close();
    }
    const session = http2.connect(base, { ca: ca.caPem });
    session.on('error', () => {});
    try {
      const stream = session.request({ ':path': '/healthz' });
      const status = await new Promise<number>((resolve) => stream.on('response', (h) => resolve(Number(h[':status']))));
      stream.resume();
      expect(status).toBe(200);
      expect((session.socket as tls.TLSSocket).alpnProtocol).toBe('h2');
    } finally {
      session.destroy();
    }
    const plain = await cli(['job', 'list', '--server', base, '--token', admin]);
    expect(plain.code).toBe(1);
    expect(plain.stderr).toMatch(/cannot reach server.*certificate/i);
    const trusted = await cli(['job', 'list', '--server', base, '--token', admin, '--cacert', ca.caFile]);
    expect(trusted).toMatchObject({ code: 0, stderr: '' });
    expect(trusted.stdout).toMatch(/^ID\s+TASK/);

    expect(await servedSerial(port)).toBe(first.serial);
    const second = ca.issue('api-2');
    writeFileSync(keyFile, 'not a key'); // a half-written pair at SIGHUP: logged, the old certificate kept
    child.proc.kill('SIGHUP');
    await waitFor('bad pair logged', () => child.stderr().includes('tls certificate not reloaded'));
    expect(await servedSerial(port)).toBe(first.serial);
    copyFileSync(second.certFile, certFile);
    copyFileSync(second.keyFile, keyFile);
    child.proc.kill('SIGHUP');
    await waitFor('new certificate served', async () => (await servedSerial(port)) === second.serial);
    expect((await cli(['job', 'list', '--server', base, '--token', admin, '--cacert', ca.caFile])).code).toBe(0);
  }, 60_000);
});
