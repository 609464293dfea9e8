/**
 * spread_ms end to end: a real node (startNode: HTTP API on 127.0.0.1, SQLite in a temp dir) and a real receiver.
 * A spread job fires at its documented offset after each nominal time, with that time as X-Punctual-Scheduled-At
 * and in its deduplication key, and POST /v1/schedules:preview with the job's id shows the same times.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../core/log.js';
import { spreadOffsetOf } from '../scheduler/schedule.js';
import { startNode, type NodeHandle } from './node.js';
import { nodeConfig } from './testing/fixtures.js';
import { startReceiver, waitFor, type Receiver } from './testing/receiver.js';

let dir: string;
let rx: Receiver;
let node: NodeHandle | null = null;

async function call(path: string, method: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`http://127.0.0.1:${node!.apiPort}${path}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as unknown };
}

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-spread-'));
  rx = await startReceiver();
  node = await startNode(nodeConfig(dir), { logger: silentLogger });
});

afterEach(async () => {
  await node?.close();
  node = null;
  await rx.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('schedule.dst on a real node', () => {
  it('is stored through the log and shown by GET; next_fire_at follows the policy', async () => {
    expect((await call('/v1/tasks/hook', 'PUT', { url: rx.url('/hook') })).status).toBe(201);
    const schedule = { cron: '30 1 7 11 *', timezone: 'America/New_York', start_at: '2027-11-01T00:00:00Z', dst: { repeat: 'last' } };
    const created = await call('/v1/jobs', 'POST', { id: 'fall-back', task: 'hook', schedule });
    expect(created.status).toBe(201);
    const got = await call('/v1/jobs/fall-back', 'GET');
    expect(got.json.schedule).toEqual({ ...schedule, start_at: '2027-11-01T00:00:00.000Z', dst: { gap: 'shift_forward', repeat: 'last' } });
    expect(got.json.next_fire_at).toBe('2027-11-07T06:30:00.000Z'); // 01:30 EST, the second 01:30
  });
});

describe('spread_ms on a real node', () => {
  it('fires each occurrence at the offset of its id after the nominal time; the preview with that id shows the same times', async () => {
    expect((await call('/v1/tasks/hook', 'PUT', { url: rx.url('/hook') })).status).toBe(201);
    const startAtMs = Math.ceil(Date.now() / 1000) * 1000 + 1000;
    const schedule = { every_ms: 1000, start_at: startAtMs, spread_ms: 1000 };
    const ids = ['spread-a', 'spread-b'];
    const offsets = ids.map((id) => spreadOffsetOf(id, 1000));
    expect(offsets[0]).not.toBe(offsets[1]); // two jobs on one schedule, two instants

    const previews: number[][] = [];
    for (const id of ids) {
      const preview = await call('/v1/schedules:preview', 'POST', { schedule, id, from: startAtMs, count: 2 });
      expect(preview.status).toBe(200);
      previews.push((preview.json.occurrences as string[]).map((t) => Date.parse(t)));
    }
    for (const [i, id] of ids.entries()) {
      expect(previews[i]).toEqual([startAtMs + offsets[i]!, startAtMs + 1000 + offsets[i]!]);
      const created = await call('/v1/jobs', 'POST', { id, task: 'hook', schedule });
      expect(created.status).toBe(201);
      expect(created.json.schedule).toMatchObject({ spread_ms: 1000, spread_offset_ms: offsets[i] });
      expect(Date.parse(created.json.next_fire_at)).toBe(previews[i]![0]);
    }

    await waitFor('two runs of each job', () => ids.every((id) => rx.of(id).length >= 2));
    for (const [i, id] of ids.entries()) {
      const runs = rx.of(id).slice(0, 2);
      const scheduled = runs.map((r) => Number(r.headers['x-punctual-scheduled-at']));
      expect(scheduled).toEqual(previews[i]);
      expect(runs.map((r) => r.headers['x-deduplication-key'])).toEqual(scheduled.map((t) => `${id}:${t}`));
      // Not before its spread time: the offset is when it runs, not a label.
      for (const [k, r] of runs.entries()) expect(r.atMs).toBeGreaterThanOrEqual(scheduled[k]!);
    }
  });
});
