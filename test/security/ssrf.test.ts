/**
 * The SSRF guard against real `punctual serve` processes (a two-node cluster, so the peer listener is open):
 * callbacks to cloud metadata, unspecified addresses and the node's own API and peer ports are refused (400 at
 * submit for literal addresses, a permanent failure at connect time for names), a private/loopback receiver
 * still gets its callbacks, and a redirect's query string never reaches the execution record.
 * `npm run build` first: the nodes run dist/cmd/punctual.js.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = resolve(fileURLToPath(import.meta.url), '../../..');
const bin = join(root, 'dist/cmd/punctual.js');
const clusterSecret = 'ssrf-test-cluster-secret-0123456789';

interface Proc {
  child: ChildProcessWithoutNullStreams;
  stderr: string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function start(args: string[], env: Record<string, string> = {}): Proc {
  const child = spawn(process.execPath, [bin, ...args], { env: { PATH: process.env.PATH ?? '', ...env } });
  const proc: Proc = { child, stderr: '', exited: new Promise((ok) => child.on('exit', (code, signal) => ok({ code, signal }))) };
  child.stderr.on('data', (d: Buffer) => (proc.stderr += d.toString()));
  child.stdout.resume();
  return proc;
}

async function stop(p: Proc): Promise<void> {
  if (p.child.exitCode !== null || p.child.signalCode !== null) return;
  p.child.kill('SIGKILL');
  await p.exited;
}

async function freePort(): Promise<number> {
  const s = createNetServer();
  await new Promise<void>((ok) => s.listen(0, '127.0.0.1', ok));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((ok) => s.close(() => ok()));
  return port;
}

/** The first JSON log line whose msg is `msg` (rejects when the process exits first). */
async function logLine(p: Proc, msg: string): Promise<Record<string, unknown>> {
  for (;;) {
    const line = p.stderr
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .find((l) => l.msg === msg);
    if (line !== undefined) return line;
    const exited = await Promise.race([p.exited, new Promise<null>((ok) => setTimeout(() => ok(null), 20))]);
    if (exited !== null) throw new Error(`exited (${JSON.stringify(exited)}) before logging ${msg}: ${p.stderr}`);
  }
}

async function api(base: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(base + path, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text === '' ? null : (JSON.parse(text) as unknown) };
}

/** Polls until `probe` gives a value (bounded by the test timeout, never asserted on time). */
async function until<T>(probe: () => Promise<T | null>): Promise<T> {
  for (;;) {
    const v = await probe();
    if (v !== null) return v;
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** The job's newest execution once it is final (SUCCEEDED or FAILED). */
async function finalExecution(base: string, id: string): Promise<any> {
  return until(async () => {
    const r = await api(base, 'GET', `/v1/jobs/${id}/executions`);
    const e = r.json?.executions?.[0];
    return e !== undefined && (e.state === 'SUCCEEDED' || e.state === 'FAILED') ? e : null;
  });
}

interface Node {
  id: string;
  proc: Proc;
  api: string;
  apiPort: number;
  peerPort: number;
}

let dir: string;
const nodes: Node[] = [];
let leader: Node;
let receiver: Server;
let receiverUrl: string;
const received: Array<{ url: string; headers: IncomingMessage['headers'] }> = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-ssrf-'));
  receiver = createServer((req, res) => {
    received.push({ url: req.url!, headers: req.headers });
    if (req.url!.startsWith('/redirect')) {
      res.statusCode = 302;
      res.setHeader('location', 'http://internal.example:8443/sso/callback?token=TOPSECRET-TOKEN&x=1#frag');
    }
    req.resume();
    req.on('end', () => res.end());
  });
  await new Promise<void>((ok) => receiver.listen(0, '127.0.0.1', ok));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;

  const peerPorts = [await freePort(), await freePort()];
  const ids = ['n1', 'n2'];
  for (let i = 0; i < 2; i++) {
    const other = 1 - i;
    const proc = start(
      [
        'serve', '--node-id', ids[i]!, '--listen', '127.0.0.1:0', '--peer-listen', `127.0.0.1:${peerPorts[i]}`,
        '--peers', `${ids[other]}=127.0.0.1:${peerPorts[other]}`, '--data', join(dir, ids[i]!), '--shards', '1',
        '--fsync', 'off', '--callback-deny', '127.0.0.2/32',
      ],
      { PUNCTUAL_CLUSTER_SECRET: clusterSecret },
    );
    nodes.push({ id: ids[i]!, proc, api: '', apiPort: 0, peerPort: peerPorts[i]! });
  }
  for (const n of nodes) {
    const ready = await logLine(n.proc, 'ready');
    n.api = `http://${String(ready.listen)}`;
    n.apiPort = Number(new URL(n.api).port);
  }
  for (const n of nodes) await until(async () => ((await api(n.api, 'GET', '/readyz')).status === 200 ? true : null));
  const leaderId = await until(async () => (await api(nodes[0]!.api, 'GET', '/v1/cluster')).json.shards[0].leader as string | null);
  leader = nodes.find((n) => n.id === leaderId)!;
}, 60_000);

afterAll(async () => {
  for (const n of nodes) await stop(n.proc);
  receiver?.closeAllConnections();
  await new Promise<void>((ok) => (receiver ? receiver.close(() => ok()) : ok()));
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

describe('callback targets given as literal addresses: 400 invalid_argument at submit', () => {
  it('cloud metadata, unspecified and mapped addresses, the node\'s own API and peer ports, a --callback-deny range', async () => {
    const cases: Array<[string, RegExp]> = [
      ['http://169.254.169.254/latest/meta-data/', /^callback target 169\.254\.169\.254 refused by policy \(link-local 169\.254\.0\.0\/16\)$/],
      ['http://[::ffff:169.254.169.254]/latest/meta-data/', /^callback target 169\.254\.169\.254 refused by policy/],
      [`http://0.0.0.0:${new URL(receiverUrl).port}/`, /^callback target 0\.0\.0\.0 refused by policy \(unspecified 0\.0\.0\.0\/8\)$/],
      [`http://[::]:${new URL(receiverUrl).port}/`, /^callback target :: refused by policy \(unspecified ::\/128\)$/],
      [`http://[fe80::1]:${new URL(receiverUrl).port}/`, /^callback target fe80::1 refused by policy \(link-local fe80::\/10\)$/],
      [`http://127.0.0.1:${leader.apiPort}/v1/tasks`, /^callback target 127\.0\.0\.1:\d+ refused by policy \(this node's API listener\)$/],
      [`http://127.0.0.1:${leader.peerPort}/raft/request`, /^callback target 127\.0\.0\.1:\d+ refused by policy \(this node's peer listener\)$/],
      ['http://127.0.0.2:9/', /^callback target 127\.0\.0\.2 refused by policy \(--callback-deny 127\.0\.0\.2\/32\)$/],
    ];
    for (const [url, message] of cases) {
      const job = await api(leader.api, 'POST', '/v1/jobs', { callback: { url } });
      expect({ url, status: job.status, code: job.json.code }).toEqual({ url, status: 400, code: 'invalid_argument' });
      expect(job.json.errors).toEqual([{ field: 'callback.url', message: expect.stringMatching(message) }]);
      const task = await api(leader.api, 'PUT', '/v1/tasks/metadata', { url });
      expect(task.status).toBe(400);
      expect(task.json.errors).toEqual([{ field: 'url', message: expect.stringMatching(message) }]);
    }
    expect((await api(leader.api, 'GET', '/v1/jobs')).json.jobs).toEqual([]);
    expect((await api(leader.api, 'GET', '/v1/tasks/metadata')).status).toBe(404);
  });
});

describe('callback targets given as names: refused at connect time, a permanent failure', () => {
  it('a name resolving to the node\'s own API or peer port fails at its first attempt, and nothing is retried', async () => {
    const cases: Array<[string, string]> = [
      [`http://localhost:${leader.apiPort}/v1/tasks`, "this node's API listener"],
      [`http://localhost:${leader.peerPort}/raft/request`, "this node's peer listener"],
    ];
    for (const [url, what] of cases) {
      const created = await api(leader.api, 'POST', '/v1/jobs', { callback: { url, retry: { max_attempts: 5, initial_backoff_ms: 0 } } });
      expect(created.status).toBe(201);
      const e = await finalExecution(leader.api, created.json.id);
      expect(e).toMatchObject({ state: 'FAILED', attempt: 1, status_code: null });
      expect(e.error).toBe(`callback target 127.0.0.1:${url.split(':')[2]!.split('/')[0]} refused by policy (${what}) (resolved from localhost)`);
    }
  });
});

describe('what stays allowed, and what the execution shows', () => {
  it('a loopback receiver still gets its callback', async () => {
    const created = await api(leader.api, 'POST', '/v1/jobs', { callback: { url: `${receiverUrl}/ok` }, payload: { n: 1 } });
    expect(created.status).toBe(201);
    expect(await finalExecution(leader.api, created.json.id)).toMatchObject({ state: 'SUCCEEDED', status_code: 200, error: null });
    expect(received.some((r) => r.url === '/ok')).toBe(true);
  });

  it("a redirect's query string and fragment never appear in the execution", async () => {
    const created = await api(leader.api, 'POST', '/v1/jobs', { callback: { url: `${receiverUrl}/redirect` } });
    const e = await finalExecution(leader.api, created.json.id);
    expect(e).toMatchObject({ state: 'FAILED', status_code: 302, error: 'HTTP 302 (redirect to http://internal.example:8443/sso/callback not followed)' });
    const all = await api(leader.api, 'GET', `/v1/jobs/${created.json.id}/executions`);
    const job = await api(leader.api, 'GET', `/v1/jobs/${created.json.id}`);
    expect(JSON.stringify([all.json, job.json])).not.toContain('TOPSECRET');
  });
});

describe('flags', () => {
  it('an invalid CIDR in --callback-allow or PUNCTUAL_CALLBACK_DENY is a usage error, exit 2', async () => {
    const bad = start(['serve', '--callback-allow', '10.0.0.1/8', '--data', join(dir, 'bad')]);
    expect(await bad.exited).toEqual({ code: 2, signal: null });
    expect(bad.stderr).toBe('punctual: --callback-allow: "10.0.0.1/8": host bits set (did you mean 10.0.0.0/8?)\n');
    const env = start(['serve', '--data', join(dir, 'bad')], { PUNCTUAL_CALLBACK_DENY: '169.254.0.0/16,nope' });
    expect(await env.exited).toEqual({ code: 2, signal: null });
    expect(env.stderr).toBe('punctual: PUNCTUAL_CALLBACK_DENY: "nope" is not an IP address or CIDR range\n');
  });
});
