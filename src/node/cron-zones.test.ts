/**
 * Cron jobs across changes of a zone's offset, fired by a real node (startNode on the manual clock: SQLite, Raft,
 * engine, HTTP) into a real receiver: what the callbacks carry is what docs/api.md, "Cron and time zones", says.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../core/log.js';
import { startNode, type NodeHandle } from './node.js';
import { nodeConfig } from './testing/fixtures.js';
import { startReceiver, type Receiver } from './testing/receiver.js';

let dir: string;
let node: NodeHandle | null = null;
let receiver: Receiver;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-cron-zones-'));
  receiver = await startReceiver();
});

afterEach(async () => {
  await node?.close();
  node = null;
  await receiver.close();
  rmSync(dir, { recursive: true, force: true });
});

async function start(clockStartMs: number): Promise<string> {
  node = await startNode(nodeConfig(dir, { clock: 'manual', clockStartMs, fsync: 'off', shards: 2 }), { logger: silentLogger });
  return `http://127.0.0.1:${node.apiPort}`;
}

async function api(base: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(base + path, { method, headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, json: text === '' ? null : JSON.parse(text) };
}

const scheduledAt = (jobId: string): string[] =>
  receiver.of(jobId).map((r) => new Date(Number(r.headers['x-punctual-scheduled-at'])).toISOString());

describe('cron jobs across offset changes, on a node', () => {
  // Lord Howe is +11:00 until 02:00 local on 2027-04-04 (2027-04-03T15:00Z), then +10:30: 12:00 local is 01:00Z,
  // then 01:30Z. The search used to fail at that change, and the job ended after its run of the 3rd.
  it('a daily job in Australia/Lord_Howe goes on past the 30-minute fall-back', async () => {
    const base = await start(Date.parse('2027-04-01T00:00:00Z'));
    const created = await api(base, 'POST', '/v1/jobs', {
      id: 'noon',
      schedule: { cron: '0 12 * * *', timezone: 'Australia/Lord_Howe' },
      callback: { url: receiver.url('/noon') },
    });
    expect(created.status).toBe(201);
    const advanced = await api(base, 'POST', '/v1/clock:advance', { to: '2027-04-07T00:00:00Z' });
    expect(advanced.json.complete).toBe(true);
    expect(scheduledAt('noon')).toEqual([
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
