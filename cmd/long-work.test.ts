/**
 * The CLI on long work, against a built `punctual serve` process: `job batch --file` streamed in batches with
 * progress, interrupted (a batch applied whose answer is lost, then a server that refuses) and resumed without
 * duplicates; and `punctual top` (frames from the real node, in a pseudo-terminal, and from a server that has
 * /v1/overview and /v1/due-profile). Needs `npm run build` (npm test does it).
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Punctual } from '../src/client/index.js';
import { punctualBin, startReceiver, startServe, type Receiver, type ServeProcess } from '../src/client/testing/serve.js';
import { runCli } from './cli-fixture.js';
import { run, type CliIo } from './punctual.js';

const far = '2031-01-01T00:00:00Z';
const tmp = mkdtempSync(join(tmpdir(), 'punctual-long-work-'));
let node: ServeProcess;
let api: Punctual;
let receiver: Receiver;

beforeAll(async () => {
  receiver = await startReceiver();
  node = await startServe();
  api = new Punctual({ baseUrl: node.base });
  await api.tasks.put('t1', { url: `${receiver.base}/hook` });
});

afterAll(async () => {
  await api?.close();
  expect(await node?.stop()).toBe(0);
  await receiver?.close();
  rmSync(tmp, { recursive: true, force: true });
});

function ndjson(name: string, lines: string[]): string {
  const path = join(tmp, name);
  writeFileSync(path, lines.join('\n') + '\n');
  return path;
}

async function jobIds(prefix: string): Promise<string[]> {
  const ids: string[] = [];
  for await (const job of api.jobs.list({ limit: 1000 })) if (job.id.startsWith(prefix)) ids.push(job.id);
  return ids;
}

describe('job batch --file (streamed)', () => {
  it('sends the lines in batches, reports bad lines and failed jobs by line, prints plain progress off a terminal', async () => {
    const lines = [
      ...Array.from({ length: 12 }, (_, i) => JSON.stringify({ id: `s-${String(i).padStart(2, '0')}`, task: 't1', schedule: { at: far } })),
      '',
      'not json',
      JSON.stringify({ task: 'no-such-task' }),
      JSON.stringify([1, 2]),
      JSON.stringify({ task: 't1', schedule: { at: far }, metadata: { from: 'import' } }),
    ];
    const file = ndjson('plain.ndjson', lines);
    const r = await runCli(['job', 'batch', '--file', file, '--batch-size', '5', '--server', node.base]);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('13 created, 0 existing, 3 failed\n');
    const progress = r.stderr.split('\n').filter((l) => l.startsWith('progress: '));
    expect(progress.length).toBeGreaterThanOrEqual(3); // 5 + 5 + the rest
    expect(progress.at(-1)).toMatch(/^progress: 100%, 16 jobs: 13 created, 0 existing, 3 failed/);
    expect(r.stderr).toContain('line 14: not sent invalid_argument: not JSON');
    expect(r.stderr).toMatch(/line 15: ik-[0-9a-f]{32}: 404 not_found: task "no-such-task" not found \(task\)/);
    expect(r.stderr).toContain('line 16: not sent invalid_argument: a line must hold one job object');
    expect(r.stderr.trimEnd().split('\n').at(-1)).toBe('punctual: 3 of 16 jobs failed');
    expect(await jobIds('s-')).toHaveLength(12);
    expect(existsSync(`${file}.punctual-batch`)).toBe(false); // done: no position to keep
  });

  it('--json prints one result per job line; --idempotency-key makes a rerun land on the same ids', async () => {
    const file = ndjson('keyed.ndjson', [JSON.stringify({ task: 't1', schedule: { at: far } }), JSON.stringify({ id: 'k-own', task: 't1', schedule: { at: far } })]);
    const first = await runCli(['job', 'batch', '--file', file, '--idempotency-key', 'imp-1', '--json', '--server', node.base]);
    expect(first.code).toBe(0);
    const results = first.stdout.trimEnd().split('\n').map((l) => JSON.parse(l) as { line: number; id: string; status: number });
    expect(results.map((x) => [x.line, x.status])).toEqual([[1, 201], [2, 201]]);
    const again = await runCli(['job', 'batch', '--file', file, '--idempotency-key', 'imp-1', '--json', '--server', node.base]);
    expect(again.stdout.trimEnd().split('\n').map((l) => (JSON.parse(l) as { id: string; status: number }).status)).toEqual([200, 200]);
    expect((JSON.parse(again.stdout.split('\n')[0]!) as { id: string }).id).toBe(results[0]!.id);
  });

  it('--json: a line that is not sent has an invalid_argument problem whose detail is the reason alone', async () => {
    const file = ndjson('bad-lines.ndjson', ['[1]', 'not json']);
    const r = await runCli(['job', 'batch', '--file', file, '--json', '--server', node.base]);
    expect(r.code).toBe(1);
    expect(r.stdout.trimEnd().split('\n').map((l) => JSON.parse(l) as unknown)).toEqual([
      { line: 1, id: null, status: null, error: { code: 'invalid_argument', detail: 'a line must hold one job object' } },
      { line: 2, id: null, status: null, error: { code: 'invalid_argument', detail: expect.stringMatching(/^not JSON: /) } },
    ]);
  });

  it('an interrupted import (a batch applied but its answer lost, then refusals) resumes without duplicates', async () => {
    const lines = Array.from({ length: 9 }, (_, i) => JSON.stringify(i % 2 === 0 ? { task: 't1', schedule: { at: far }, metadata: { n: i } } : { id: `r-${i}`, task: 't1', schedule: { at: far } }));
    const file = ndjson('resume.ndjson', lines);
    // a server in front of the node: batches 1 and 2 pass, batch 3 reaches the node but its answer is cut, then 401
    let batches = 0;
    const front: Server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', async () => {
        batches++;
        if (batches > 3) {
          res.writeHead(401, { 'content-type': 'application/problem+json' }).end(JSON.stringify({ status: 401, code: 'unauthorized', detail: 'token revoked' }));
          return;
        }
        const answer = await fetch(node.base + (req.url ?? ''), { method: req.method, headers: { 'content-type': 'application/json' }, body: Buffer.concat(chunks) });
        const text = await answer.text();
        if (batches === 3) return req.socket.destroy(); // applied on the node, the answer never arrives
        res.writeHead(answer.status, { 'content-type': 'application/json' }).end(text);
      });
    });
    await new Promise<void>((ok) => front.listen(0, '127.0.0.1', ok));
    const frontUrl = `http://127.0.0.1:${(front.address() as AddressInfo).port}`;
    try {
      const cut = await runCli(['job', 'batch', '--file', file, '--batch-size', '3', '--server', frontUrl]);
      expect(cut.code).toBe(1);
      expect(cut.stderr).toContain('error: unauthorized: token revoked\npunctual: stopped before line 7; run the same command with --resume to continue\n');
    } finally {
      await new Promise<void>((ok) => front.close(() => ok()));
    }
    const state = JSON.parse(readFileSync(`${file}.punctual-batch`, 'utf8')) as { jobs: number; created: number; lines: number };
    expect(state).toMatchObject({ jobs: 6, lines: 6, created: 6 });
    // without --resume the state is not overwritten: exit 2, nothing sent
    const refused = await runCli(['job', 'batch', '--file', file, '--server', node.base]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('add --resume to continue it');
    const resumed = await runCli(['job', 'batch', '--file', file, '--batch-size', '3', '--resume', '--server', node.base]);
    expect(resumed).toMatchObject({ code: 0, stdout: '6 created, 3 existing, 0 failed\n' });
    // 9 jobs in all: the re-sent batch found its jobs (the ones without ids too: same derived ids)
    const all = await api.jobs.list({ limit: 1000 }).toArray();
    expect(all.filter((j) => j.id.startsWith('r-'))).toHaveLength(4);
    expect(all.filter((j) => j.metadata !== null && typeof j.metadata.n === 'number')).toHaveLength(5);
    expect(existsSync(`${file}.punctual-batch`)).toBe(false);
    expect((await runCli(['job', 'batch', '--file', file, '--resume', '--server', node.base])).stderr).toContain('nothing to resume');
  });

  it('an import whose first batch is applied but never answered resumes as the hint says, without duplicates', async () => {
    const file = ndjson('first-cut.ndjson', Array.from({ length: 3 }, (_, i) => JSON.stringify({ task: 't1', schedule: { at: far }, metadata: { first: i } })));
    let requests = 0;
    const front: Server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', async () => {
        if (++requests > 1) {
          res.writeHead(401, { 'content-type': 'application/problem+json' }).end(JSON.stringify({ status: 401, code: 'unauthorized', detail: 'token revoked' }));
          return;
        }
        await fetch(node.base + (req.url ?? ''), { method: req.method, headers: { 'content-type': 'application/json' }, body: Buffer.concat(chunks) });
        req.socket.destroy(); // applied on the node, the answer never arrives
      });
    });
    await new Promise<void>((ok) => front.listen(0, '127.0.0.1', ok));
    try {
      const cut = await runCli(['job', 'batch', '--file', file, '--server', `http://127.0.0.1:${(front.address() as AddressInfo).port}`]);
      expect(cut.code).toBe(1);
      expect(cut.stderr).toContain('punctual: stopped before line 1; run the same command with --resume to continue\n');
    } finally {
      await new Promise<void>((ok) => front.close(() => ok()));
    }
    const resumed = await runCli(['job', 'batch', '--file', file, '--resume', '--server', node.base]);
    expect(resumed).toMatchObject({ code: 0, stdout: '0 created, 3 existing, 0 failed\n' });
    const all = await api.jobs.list({ limit: 1000 }).toArray();
    expect(all.filter((j) => j.metadata !== null && typeof j.metadata.first === 'number')).toHaveLength(3);
    expect(existsSync(`${file}.punctual-batch`)).toBe(false);
  });

  it('a usage error of the client flags leaves no state file behind (the corrected command starts afresh)', async () => {
    const file = ndjson('bad-server.ndjson', [JSON.stringify({ id: 'bs-1', task: 't1', schedule: { at: far } })]);
    expect((await runCli(['job', 'batch', '--file', file, '--server', 'localhost:1'])).code).toBe(2);
    expect(existsSync(`${file}.punctual-batch`)).toBe(false);
    expect(await runCli(['job', 'batch', '--file', file, '--server', node.base])).toMatchObject({ code: 0, stdout: '1 created, 0 existing, 0 failed\n' });
  });

  it('streams: with --file - the first batch is sent while the input is still open (the executable, stdin a pipe)', async () => {
    const child = spawn(process.execPath, [punctualBin, 'job', 'batch', '--file', '-', '--batch-size', '2', '--server', node.base], { env: { PATH: process.env.PATH ?? '' } });
    let stdout = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    const exited = new Promise<number | null>((ok) => child.once('exit', (code) => ok(code)));
    const line = (i: number) => JSON.stringify({ id: `pipe-${i}`, task: 't1', schedule: { at: far } }) + '\n';
    try {
      child.stdin.write(line(0) + line(1));
      for (let i = 0; i < 2000 && (await jobIds('pipe-')).length < 2; i++) await new Promise((ok) => setTimeout(ok, 10));
      expect(await jobIds('pipe-')).toEqual(['pipe-0', 'pipe-1']); // created before the input ended
      child.stdin.end(line(2));
      expect(await exited).toBe(0);
      expect(stdout).toBe('3 created, 0 existing, 0 failed\n');
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  });

  it('draws a bar in place on a terminal; a FILE argument with --file, or --resume without --file, is bad usage', async () => {
    const file = ndjson('tty.ndjson', Array.from({ length: 4 }, (_, i) => JSON.stringify({ id: `tty-${i}`, task: 't1', schedule: { at: far } })));
    let stderr = '';
    const codes: number[] = [];
    const io: CliIo = { stdout: { write: () => true }, stderr: Object.assign({ write: (s: string) => (stderr += s) }, { isTTY: true, columns: 100 }), env: {}, exit: (c) => void codes.push(c) };
    await run(['job', 'batch', '--file', file, '--batch-size', '2', '--server', node.base], io);
    expect(codes).toEqual([]);
    expect(stderr).toContain('\r\x1b[2K[##############################] 100% 4 jobs: 4 created');
    expect(stderr.endsWith('\n')).toBe(true);
    expect((await runCli(['job', 'batch', file, '--file', file, '--server', node.base])).code).toBe(2);
    expect((await runCli(['job', 'batch', file, '--resume', '--server', node.base])).stderr).toBe('punctual: --batch-size, --resume, --state-file: only with --file\n');
    expect((await runCli(['job', 'batch', '--server', node.base])).stderr).toBe("punctual: missing required argument 'file'\n");
  });
});

describe('punctual top', () => {
  it('--iterations 2 prints frames from the real node: jobs by state, callbacks/s, lateness, shard leaders', async () => {
    await api.jobs.create({ id: 'top-now', task: 't1' });
    await receiver.waitFor(1);
    for (let i = 0; i < 500 && (await api.jobs.get('top-now')).state !== 'SUCCEEDED'; i++) await new Promise((ok) => setTimeout(ok, 10));
    const r = await runCli(['top', '--iterations', '2', '--interval-ms', '200', '--server', node.base]);
    expect(r).toMatchObject({ code: 0, stderr: '' });
    const frames = r.stdout.split(/\n(?=punctual top )/);
    expect(frames).toHaveLength(2);
    expect(frames[1]).toMatch(/^JOBS {7}PENDING \d+ {2}QUEUED \d+ {2}RUNNING \d+ {2}SUCCEEDED [1-9]\d*/m);
    expect(frames[1]).toMatch(/^CALLBACKS {2}\d+\.\d\/s {2}succeeded \d+\.\d\/s/m); // a rate once two frames exist
    expect(frames[0]).toMatch(/^CALLBACKS {2}-\/s/m);
    expect(frames[1]).toMatch(/^LATENESS {3}p50 ≤[\d.]+ ms {2}p90 \S+ ms {2}p99 \S+ ms {2}max \S+ ms {2}n [1-9]/m);
    expect(frames[1]).toMatch(/^SHARD\s+LEADER\s+TERM\s+COMMIT\s+APPLIED\s+LAG\s+MEMBERS\n0\s+n1\s+\d+\s+\d+\s+\d+\s+0\s+n1$/m);
    expect(frames[1]).toMatch(/^n1\s+127\.0\.0\.1:\d+\s+yes\s+2$/m);
    const json = await runCli(['top', '--iterations', '2', '--interval-ms', '100', '--json', '--server', node.base]);
    const objs = json.stdout.trimEnd().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(objs).toHaveLength(2);
    expect(objs[0]!.callbacks_per_second).toBeNull();
    expect(objs[1]!.callbacks_per_second).toMatchObject({ succeeded: expect.any(Number) });
    expect((objs[1]!.jobs as Record<string, number>).SUCCEEDED).toBeGreaterThanOrEqual(1);
    // the figures of the frame, named like the rest of the object; the node's due profile counts per second
    expect(Object.keys(objs[1]!.fire_lateness_ms as object)).toEqual(['count', 'p50', 'p90', 'p99', 'max']);
    expect(objs[1]!.due).toEqual({ counts: expect.any(Array), interval_ms: 1000 });
    expect(frames[1]).toMatch(/^DUE {8}\S+ {2}max \d+, \d+ in all \(1000 ms each\)$/m);
  });

  it('in a pseudo-terminal it redraws in place (the built executable under script(1))', () => {
    const command = `${process.execPath} ${punctualBin} top --iterations 2 --interval-ms 100 --server ${node.base}`;
    const r = spawnSync('script', ['-qec', command, '/dev/null'], { encoding: 'utf8', timeout: 20_000, env: { PATH: process.env.PATH ?? '', TERM: 'xterm' } });
    expect(r.status).toBe(0);
    expect(r.stdout.split('\x1b[H\x1b[2J')).toHaveLength(3); // two frames, each drawn from the top of a cleared screen
    expect(r.stdout).toContain('SHARD');
  });

  it('a bad token ends it at once (exit 1); /v1/overview and /v1/due-profile are used where a node has them', async () => {
    const secured = await startServe(['--auth-token', 'top-test-token-0123456789']);
    try {
      const r = await runCli(['top', '--once', '--server', secured.base, '--token', 'wrong-token-0123456789']);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/^error: unauthorized: /);
    } finally {
      expect(await secured.stop()).toBe(0);
    }
    const asked: string[] = [];
    const fake = createServer((req, res) => {
      asked.push(req.url ?? '');
      const json = (body: unknown) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
      if (req.url === '/v1/cluster') return json({ node_id: 'n7', nodes: [{ id: 'n7', peer_addr: '127.0.0.1:1', api_addr: '127.0.0.1:2', reachable: true }], shards: [{ id: 0, leader: 'n7', term: 3, commit_index: 10, applied_index: 8, members: ['n7'] }] });
      if (req.url === '/metrics') return res.writeHead(200, { 'content-type': 'text/plain' }).end('punctual_jobs{state="PENDING"} 1\n');
      if (req.url === '/v1/overview') {
        return json({ jobs: { PENDING: 41, FAILED: 2 }, callbacks: { interval_ms: 10_000, samples: [{ start: 'a', sent: 50, failed: 10 }, { start: 'b', sent: 1, failed: 0 }] }, fire_lateness_ms: { buckets: [{ le: 1, count: 90 }, { le: 5, count: 9 }, { le: null, count: 1 }], count: 100, sum: 120 } });
      }
      if (req.url === '/v1/due-profile') return json({ from: '2026-12-01T09:00:00.000Z', per_second: [0, 7, 700], drain_rate_per_s: null });
      res.writeHead(404).end();
    });
    await new Promise<void>((ok) => fake.listen(0, '127.0.0.1', ok));
    try {
      const r = await runCli(['top', '--once', '--server', `http://127.0.0.1:${(fake.address() as AddressInfo).port}`]);
      expect(r).toMatchObject({ code: 0, stderr: '' });
      expect(r.stdout).toMatch(/^JOBS {7}PENDING 41 .*FAILED 2/m);
      expect(r.stdout).toContain('last interval: 5.0/s sent, 1.0/s failed');
      expect(r.stdout).toMatch(/^LATENESS {3}p50 ≤1 ms {2}p90 ≤1 ms {2}p99 ≤5 ms {2}max >5 ms {2}n 100$/m);
      expect(r.stdout).toMatch(/^DUE {8}▁▁█ {2}max 700, 707 in all \(1000 ms each\)$/m);
      expect(r.stdout).toMatch(/^0\s+n7\s+3\s+10\s+8\s+2\s+n7$/m);
      expect(asked.sort()).toEqual(['/metrics', '/v1/cluster', '/v1/due-profile', '/v1/overview']);
    } finally {
      await new Promise<void>((ok) => fake.close(() => ok()));
    }
  });
});
