/**
 * The manual clock on a real node (startNode: SQLite, Raft, engine, HTTP) with a real receiver: an advance
 * answers after everything due fired, the bound on one advance stops it at the last instant it completed, advances
 * run in turn, and the node keeps working across a ten-year step (Raft stays on real time: leases, reads, writes).
 * Cron jobs across changes of a zone's offset carry what docs/api.md, "Cron and time zones", says.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../core/log.js';
import { startNode, type NodeHandle } from './node.js';
import type { NodeOptions } from './host.js';
import { nodeConfig } from './testing/fixtures.js';
import { startReceiver, type Receiver } from './testing/receiver.js';

const startMs = Date.UTC(2027, 0, 4, 9, 0, 0);
let dir: string;
let node: NodeHandle | null = null;
let receiver: Receiver;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-manual-clock-'));
  receiver = await startReceiver();
});

afterEach(async () => {
  await node?.close();
  node = null;
  await receiver.close();
  rmSync(dir, { recursive: true, force: true });
});

async function start(options: NodeOptions = {}, clockStartMs = startMs): Promise<string> {
  node = await startNode(nodeConfig(dir, { clock: 'manual', clockStartMs, fsync: 'off', shards: 2 }), { logger: silentLogger, ...options });
  return `http://127.0.0.1:${node.apiPort}`;
}

async function api(base: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(base + path, { method, headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, json: text === '' ? null : JSON.parse(text) };
}

const scheduledAt = (jobId: string): number[] => receiver.of(jobId).map((r) => Number(r.headers['x-punctual-scheduled-at']));

describe('the manual clock on a node', () => {
  it('time stands still between advances; an advance to now fires nothing more', async () => {
    const base = await start();
    expect((await api(base, 'POST', '/v1/jobs', { id: 'later', schedule: { delay_ms: 1_000 }, callback: { url: receiver.url('/h') } })).status).toBe(201);
    await new Promise((ok) => setTimeout(ok, 1_100));
    expect(receiver.of('later')).toEqual([]);
    expect((await api(base, 'GET', '/v1/clock')).json).toEqual({ mode: 'manual', now: new Date(startMs).toISOString() });
    expect((await api(base, 'POST', '/v1/clock:advance', { to: startMs })).json).toEqual({ now: new Date(startMs).toISOString(), fired: 0, complete: true });
    expect((await api(base, 'POST', '/v1/clock:advance', { by_ms: 999 })).json.fired).toBe(0);
    expect((await api(base, 'POST', '/v1/clock:advance', { by_ms: 1 })).json.fired).toBe(1);
    expect(scheduledAt('later')).toEqual([startMs + 1_000]);
  });

  it('the attempts bound stops an advance at the last instant it completed; the next one goes on', async () => {
    const base = await start({ clockLimits: { advanceAttemptsMax: 3, advanceRealMsMax: 60_000 } });
    expect((await api(base, 'POST', '/v1/jobs', { id: 'tick', schedule: { every_ms: 1_000, start_at: startMs + 1_000 }, callback: { url: receiver.url('/t') } })).status).toBe(201);
    const first = await api(base, 'POST', '/v1/clock:advance', { by_ms: 10_000 });
    expect(first.json).toEqual({ now: new Date(startMs + 3_000).toISOString(), fired: 3, complete: false });
    expect(scheduledAt('tick')).toEqual([startMs + 1_000, startMs + 2_000, startMs + 3_000]);
    const second = await api(base, 'POST', '/v1/clock:advance', { to: startMs + 5_000 });
    expect(second.json).toEqual({ now: new Date(startMs + 5_000).toISOString(), fired: 2, complete: true });
    expect(scheduledAt('tick')).toEqual([1, 2, 3, 4, 5].map((s) => startMs + s * 1_000));
  });

  it('advances sent together run in turn, each from where the one before ended', async () => {
    const base = await start();
    expect((await api(base, 'POST', '/v1/jobs', { id: 'min', schedule: { cron: '* * * * *' }, callback: { url: receiver.url('/m') } })).status).toBe(201);
    const answers = await Promise.all([1, 2, 3].map(() => api(base, 'POST', '/v1/clock:advance', { by_ms: 60_000 })));
    expect(answers.map((a) => a.json.now).sort()).toEqual([1, 2, 3].map((m) => new Date(startMs + m * 60_000).toISOString()));
    // The clock starts on a minute: the first match is the creation instant itself.
    expect(scheduledAt('min')).toEqual([0, 1, 2, 3].map((m) => startMs + m * 60_000));
  });

  it('ten years ahead the node still takes writes, reads and fires (Raft keeps real time)', async () => {
    const base = await start();
    const tenYearsMs = 10 * 365 * 24 * 3_600_000;
    expect((await api(base, 'POST', '/v1/clock:advance', { by_ms: tenYearsMs })).json.complete).toBe(true);
    const created = await api(base, 'POST', '/v1/jobs', { id: 'late', schedule: { delay_ms: 500 }, callback: { url: receiver.url('/l') } });
    expect(created.json.next_fire_at).toBe(new Date(startMs + tenYearsMs + 500).toISOString());
    expect((await api(base, 'POST', '/v1/clock:advance', { by_ms: 500 })).json.fired).toBe(1);
    expect(scheduledAt('late')).toEqual([startMs + tenYearsMs + 500]);
    expect((await api(base, 'GET', '/v1/jobs/late')).json.state).toBe('SUCCEEDED');
    const past = await api(base, 'POST', '/v1/clock:advance', { to: startMs });
    expect(past.status).toBe(400);
    expect(past.json.errors[0].field).toBe('to');
  });
});

describe('cron jobs across offset changes, on a node', () => {
  // Lord Howe is +11:00 until 02:00 local on 2027-04-04 (2027-04-03T15:00Z), then +10:30: 12:00 local is 01:00Z,
  // then 01:30Z. The search used to fail at that change, and the job ended after its run of the 3rd.
  it('a daily job in Australia/Lord_Howe goes on past the 30-minute fall-back', async () => {
    const base = await start({}, Date.parse('2027-04-01T00:00:00Z'));
    const created = await api(base, 'POST', '/v1/jobs', {
      id: 'noon',
      schedule: { cron: '0 12 * * *', timezone: 'Australia/Lord_Howe' },
      callback: { url: receiver.url('/noon') },
    });
    expect(created.status).toBe(201);
    const advanced = await api(base, 'POST', '/v1/clock:advance', { to: '2027-04-07T00:00:00Z' });
    expect(advanced.json.complete).toBe(true);
    expect(scheduledAt('noon').map((t) => new Date(t).toISOString())).toEqual([
      '2027-04-01T01:00:00.000Z',
      '2027-04-02T01:00:00.000Z',
      '2027-04-03T01:00:00.000Z',
      '2027-04-04T01:30:00.000Z',
      '2027-04-05T01:30:00.000Z',
      '2027-04-06T01:30:00.000Z',
    ]);
    const job = (await api(base, 'GET', '/v1/jobs/noon')).json;
    expect(job.state).toBe('PENDING');
    expect(job.next_fire_at).toBe('2027-04-07T01:30:00.000Z');
  });
});
