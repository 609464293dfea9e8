/**
 * `punctual serve --clock manual` end to end: the built executable as a real process, a real HTTP receiver, and a
 * month of schedules run by one POST /v1/clock:advance (docs/api.md "The clock"). What is asserted is what the
 * receiver saw: every expected scheduled time in order (a daily Berlin cron across the switch to summer time, a
 * 6-hourly every_ms), and a one-off whose receiver fails twice, retried on the virtual clock (its backoff is
 * virtual time: the send times are read from the signature's `t=`).
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from './cli-fixture.js';

const entry = resolve(fileURLToPath(new URL('.', import.meta.url)), '../dist/cmd/punctual.js');
const tmp = mkdtempSync(join(tmpdir(), 'punctual-manual-clock-'));

interface Hit {
  path: string;
  scheduledAtMs: number;
  attempt: number;
  dedupKey: string;
  /** The sending node's clock at the send (the signature's t=), when the job signs. */
  sentAtMs: number | null;
}

const hits: Hit[] = [];
/** /flaky answers 503 to this many requests, then 200. */
let flakyFailures = 2;
let receiver: Server;
let receiverUrl = '';

interface Proc {
  child: ChildProcessWithoutNullStreams;
  stderr: string;
  exited: Promise<number | null>;
}

const procs: Proc[] = [];

function serve(args: string[]): Proc {
  const child = spawn(process.execPath, [entry, 'serve', ...args], { env: { PATH: process.env.PATH ?? '' } });
  const p: Proc = { child, stderr: '', exited: new Promise((ok) => child.once('exit', (code) => ok(code))) };
  child.stderr.on('data', (d: Buffer) => (p.stderr += d.toString()));
  procs.push(p);
  return p;
}

function logLines(p: Proc): Array<Record<string, unknown>> {
  return p.stderr
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

async function waitLog(p: Proc, msg: string): Promise<Record<string, unknown>> {
  for (;;) {
    const line = logLines(p).find((l) => l.msg === msg);
    if (line !== undefined) return line;
    const code = await Promise.race([p.exited, new Promise<'running'>((ok) => setTimeout(() => ok('running'), 20))]);
    if (code !== 'running') throw new Error(`exited ${code} before logging ${msg}: ${p.stderr}`);
  }
}

async function api(base: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(base + path, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text === '' ? null : JSON.parse(text) };
}

beforeAll(async () => {
  receiver = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const sig = /(?:^|,)t=(\d+)/.exec(String(req.headers['x-punctual-signature'] ?? ''));
      hits.push({
        path: req.url ?? '',
        scheduledAtMs: Number(req.headers['x-punctual-scheduled-at']),
        attempt: Number(req.headers['x-punctual-attempt']),
        dedupKey: String(req.headers['x-deduplication-key']),
        sentAtMs: sig === null ? null : Number(sig[1]),
      });
      const fail = req.url === '/flaky' && flakyFailures > 0;
      if (fail) flakyFailures--;
      res.writeHead(fail ? 503 : 200).end();
    });
  });
  await new Promise<void>((ok) => receiver.listen(0, '127.0.0.1', ok));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
});

afterAll(async () => {
  for (const p of procs) p.child.kill('SIGKILL');
  await Promise.all(procs.map((p) => p.exited));
  await new Promise<void>((ok) => receiver.close(() => ok()));
  rmSync(tmp, { recursive: true, force: true });
});

const hourMs = 3_600_000;
const dayMs = 24 * hourMs;
const startMs = Date.UTC(2027, 2, 15); // 2027-03-15T00:00Z; Berlin moves to summer time on 2027-03-28
const endMs = startMs + 31 * dayMs;

describe('serve --clock manual', () => {
  it('refuses --peers: exit 2', async () => {
    const p = serve(['--clock', 'manual', '--peers', 'n2=127.0.0.1:9', '--cluster-secret', 'manual-clock-secret-0123']);
    expect(await p.exited).toBe(2);
    expect(p.stderr).toContain('--clock manual runs a single node only');
  });

  it('runs a month of schedules in one advance: every occurrence in order, retries on the virtual clock', async () => {
    const p = serve([
      '--clock', 'manual', '--clock-start', new Date(startMs).toISOString(), '--listen', '127.0.0.1:0',
      '--peer-listen', '127.0.0.1:0', '--data', join(tmp, 'n1'), '--shards', '2', '--fsync', 'off',
      // A month passes in one advance: with the default 7 days of retention the finished job read below could
      // already be deleted (the retention driver runs on the node's clock), depending on when it ran.
      '--retention', 'off',
    ]); // prettier-ignore
    const ready = await waitLog(p, 'ready');
    const warn = logLines(p).find((l) => l.level === 'warn' && String(l.msg).startsWith('manual clock'));
    expect(warn?.msg).toBe('manual clock: time moves only with POST /v1/clock:advance; not for production');
    const base = `http://${String(ready.listen)}`;

    expect((await api(base, 'GET', '/v1/clock')).json).toEqual({ mode: 'manual', now: '2027-03-15T00:00:00.000Z' });
    const job = (id: string, path: string, schedule: unknown, more: Record<string, unknown> = {}): Promise<{ status: number; json: any }> =>
      api(base, 'POST', '/v1/jobs', { id, schedule, callback: { url: receiverUrl + path, ...more } });
    expect((await job('daily', '/cron', { cron: '0 0 9 * * *', timezone: 'Europe/Berlin' })).status).toBe(201);
    expect((await job('six-hourly', '/every', { every_ms: 6 * hourMs })).status).toBe(201);
    const retry = { max_attempts: 5, initial_backoff_ms: 5_000, max_backoff_ms: 60_000, multiplier: 2, jitter: false };
    const flaky = await job('flaky', '/flaky', { at: new Date(startMs + hourMs).toISOString() }, { retry, signing_secret: 'manual-clock-signing-0123' });
    expect(flaky.status).toBe(201);
    // every_ms runs first at creation, which is the clock's now; then nothing fires while the clock stands still.
    while (hits.length === 0) await new Promise((ok) => setTimeout(ok, 5));
    await new Promise((ok) => setTimeout(ok, 50));
    expect(hits.map((h) => [h.path, h.scheduledAtMs])).toEqual([['/every', startMs]]);

    // Two advances: by_ms into the first day, then to the end of the month.
    const first = await api(base, 'POST', '/v1/clock:advance', { by_ms: 2 * hourMs });
    expect(first.status).toBe(200);
    expect(first.json).toEqual({ now: '2027-03-15T02:00:00.000Z', fired: 3, complete: true });
    const second = await api(base, 'POST', '/v1/clock:advance', { to: new Date(endMs).toISOString() });
    expect(second.status).toBe(200);
    expect(second.json.now).toBe('2027-04-15T00:00:00.000Z');
    expect(second.json.complete).toBe(true);

    // 09:00 in Berlin: 08:00Z in winter time, 07:00Z from 2027-03-28 on.
    const expectedDaily: number[] = [];
    for (let d = 0; d < 31; d++) expectedDaily.push(startMs + d * dayMs + (d < 13 ? 8 : 7) * hourMs);
    const expectedEvery: number[] = [];
    for (let t = startMs; t <= endMs; t += 6 * hourMs) expectedEvery.push(t);
    const on = (path: string): Hit[] => hits.filter((h) => h.path === path);
    expect(on('/cron').map((h) => h.scheduledAtMs)).toEqual(expectedDaily);
    expect(on('/every').map((h) => h.scheduledAtMs)).toEqual(expectedEvery);
    for (const h of [...on('/cron'), ...on('/every')]) {
      expect(h.attempt).toBe(1);
      expect(h.dedupKey).toBe(`${h.path === '/cron' ? 'daily' : 'six-hourly'}:${h.scheduledAtMs}`);
    }
    // The one-off: three attempts of one occurrence, 5 s then 10 s apart on the virtual clock.
    const flakyAt = startMs + hourMs;
    expect(on('/flaky').map((h) => [h.scheduledAtMs, h.attempt, h.dedupKey, h.sentAtMs])).toEqual([
      [flakyAt, 1, `flaky:${flakyAt}`, flakyAt],
      [flakyAt, 2, `flaky:${flakyAt}`, flakyAt + 5_000],
      [flakyAt, 3, `flaky:${flakyAt}`, flakyAt + 15_000],
    ]);
    // Callbacks arrived in the order of their send times on the virtual clock.
    const sendTimes = hits.map((h) => h.sentAtMs ?? h.scheduledAtMs);
    expect(sendTimes).toEqual([...sendTimes].sort((a, b) => a - b));
    expect(1 + first.json.fired + second.json.fired).toBe(hits.length);

    const executions = (await api(base, 'GET', '/v1/jobs/flaky/executions')).json.executions;
    expect(executions).toMatchObject([
      { scheduled_at: '2027-03-15T01:00:00.000Z', attempt: 3, state: 'SUCCEEDED', started_at: '2027-03-15T01:00:00.000Z', status_code: 200 },
    ]);
    // started_at is the first attempt's; each attempt has its own start on the virtual clock.
    expect(executions[0].attempts.map((a: { attempt: number; started_at: string }) => [a.attempt, a.started_at])).toEqual([
      [1, '2027-03-15T01:00:00.000Z'],
      [2, '2027-03-15T01:00:05.000Z'],
      [3, '2027-03-15T01:00:15.000Z'],
    ]);
    const daily = (await api(base, 'GET', '/v1/jobs/daily')).json;
    expect(daily.next_fire_at).toBe('2027-04-15T07:00:00.000Z');
    expect((await api(base, 'GET', '/v1/clock')).json).toEqual({ mode: 'manual', now: '2027-04-15T00:00:00.000Z' });

    // Bad advances: nothing moves.
    const back = await api(base, 'POST', '/v1/clock:advance', { to: '2027-04-01T00:00:00Z' });
    expect(back.status).toBe(400);
    expect(back.json.errors).toEqual([{ field: 'to', message: expect.stringContaining('must not be before') }]);
    expect((await api(base, 'POST', '/v1/clock:advance', { by_ms: 0 })).json.errors[0].field).toBe('by_ms');
    expect((await api(base, 'GET', '/v1/clock')).json.now).toBe('2027-04-15T00:00:00.000Z');

    // The same through the CLI: the daily job's next occurrence, one more hour of the six-hourly one.
    const advanced = await runCli(['clock', 'advance', '--to', '2027-04-15T07:00:00Z', '--server', base, '--json']);
    expect(advanced.stderr).toBe('');
    expect(JSON.parse(advanced.stdout)).toEqual({ now: '2027-04-15T07:00:00.000Z', fired: 2, complete: true });
    expect(hits.slice(-2).map((h) => [h.path, new Date(h.scheduledAtMs).toISOString()])).toEqual([
      ['/every', '2027-04-15T06:00:00.000Z'],
      ['/cron', '2027-04-15T07:00:00.000Z'],
    ]);
    const got = await runCli(['clock', 'get', '--server', base, '--json']);
    expect(JSON.parse(got.stdout)).toEqual({ mode: 'manual', now: '2027-04-15T07:00:00.000Z' });
    expect((await runCli(['clock', 'advance', '--server', base])).code).toBe(2);
    expect((await runCli(['clock', 'advance', '--by-ms', '0', '--server', base])).code).toBe(2);
  });

  it('a node on the system clock shows it and refuses an advance with 409', async () => {
    const p = serve(['--listen', '127.0.0.1:0', '--peer-listen', '127.0.0.1:0', '--data', join(tmp, 'sys'), '--shards', '1']);
    const base = `http://${String((await waitLog(p, 'ready')).listen)}`;
    const before = Date.now();
    const c = (await api(base, 'GET', '/v1/clock')).json;
    expect(c.mode).toBe('system');
    expect(Date.parse(c.now)).toBeGreaterThanOrEqual(before - 1000);
    const r = await api(base, 'POST', '/v1/clock:advance', { by_ms: 1000 });
    expect(r.status).toBe(409);
    expect(r.json.code).toBe('conflict');
    expect(r.json.detail).toContain('--clock manual');
    expect(logLines(p).some((l) => String(l.msg).startsWith('manual clock'))).toBe(false);
  });
});
