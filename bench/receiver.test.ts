import { afterEach, describe, expect, it } from 'vitest';
import { Pool } from 'undici';
import { jobIdOfKey, nowPreciseMs, startReceiver, type CallbackReceiver } from './receiver.js';

let receiver: CallbackReceiver | null = null;
let pool: Pool | null = null;

afterEach(async () => {
  await pool?.close();
  await receiver?.close();
  pool = null;
  receiver = null;
});

/** Sends one callback like the dispatcher does (API.md section 3) and returns status, body and headers. */
async function deliver(jobId: string, scheduledMs: number, extra: Record<string, string> = {}) {
  const res = await pool!.request({
    method: 'POST',
    path: '/cb',
    headers: {
      'x-deduplication-key': `${jobId}:${scheduledMs}`,
      'x-punctual-job-id': jobId,
      'x-punctual-scheduled-at': String(scheduledMs),
      'x-punctual-attempt': '1',
      ...extra,
    },
    body: '{"hello":"world"}',
  });
  const body = await res.body.text();
  return { status: res.statusCode, body, headers: res.headers };
}

async function open(prefix = 'run1-'): Promise<CallbackReceiver> {
  receiver = await startReceiver({ jobIdPrefix: prefix });
  pool = new Pool(`http://127.0.0.1:${receiver.port}`, { connections: 1 });
  return receiver;
}

describe('callback receiver over real HTTP', () => {
  it('answers 200 with an empty body on a keep-alive connection and measures lateness', async () => {
    const r = await open();
    const scheduledMs = Math.floor(nowPreciseMs()) - 5;
    const before = nowPreciseMs();
    const res = await deliver('run1-a', scheduledMs);
    const after = nowPreciseMs();
    expect(res.status).toBe(200);
    expect(res.body).toBe('');
    expect(res.headers.connection).not.toBe('close');
    const s = r.stats();
    expect(s.deliveries).toBe(1);
    expect(s.early).toBe(0);
    expect(s.lateness.size).toBe(1);
    const lateness = s.lateness.sorted()[0];
    expect(lateness).toBeGreaterThanOrEqual(before - scheduledMs - 1);
    expect(lateness).toBeLessThanOrEqual(after - scheduledMs + 1);
    expect(r.url).toBe(`http://127.0.0.1:${r.port}/cb`);
  });

  it('counts a delivery before its scheduled time as early', async () => {
    const r = await open();
    await deliver('run1-late', Math.floor(nowPreciseMs()) - 1);
    await deliver('run1-early', Math.floor(nowPreciseMs()) + 60_000);
    const s = r.stats();
    expect(s.deliveries).toBe(2);
    expect(s.early).toBe(1);
    expect(Math.min(...s.lateness.sorted())).toBeLessThan(-50_000);
  });

  it('counts repeated deduplication keys as duplicates, keeps one lateness sample per key', async () => {
    const r = await open();
    const t = Math.floor(nowPreciseMs()) - 10;
    await deliver('run1-x', t);
    await deliver('run1-x', t, { 'x-punctual-attempt': '2' });
    await deliver('run1-x', t);
    await deliver('run1-x', t + 1); // another occurrence of the same job: a new key, not a duplicate
    await deliver('run1-y', t);
    const s = r.stats();
    expect(s.deliveries).toBe(5);
    expect(s.uniqueKeys).toBe(3);
    expect(s.duplicates).toBe(2);
    expect(s.lateness.size).toBe(3);
    expect(r.deliveredJobCount()).toBe(2);
  });

  it('reports accepted jobs never delivered as missing', async () => {
    const r = await open();
    const t = Math.floor(nowPreciseMs());
    await deliver('run1-1', t);
    await deliver('run1-3', t);
    expect(r.countMissing(['run1-1', 'run1-2', 'run1-3', 'run1-4'])).toBe(2);
    expect(r.countMissing([])).toBe(0);
    expect(r.missingIds(['run1-1', 'run1-2', 'run1-3', 'run1-4'], 10)).toEqual(['run1-2', 'run1-4']);
    expect(r.missingIds(['run1-1', 'run1-2', 'run1-3', 'run1-4'], 1)).toEqual(['run1-2']);
  });

  it('sets apart deliveries of other runs and deliveries without the headers', async () => {
    const r = await open('run1-');
    await deliver('run0-old', Math.floor(nowPreciseMs()) - 1000);
    const res = await pool!.request({ method: 'POST', path: '/cb', body: 'x' });
    await res.body.text();
    expect(res.statusCode).toBe(200);
    const s = r.stats();
    expect(s.foreign).toBe(1);
    expect(s.malformed).toBe(1);
    expect(s.deliveries).toBe(0);
    expect(s.firstArrivalMs).toBeNull();
  });

  it('waitForJobs resolves true once enough jobs arrived and false when the timeout passes', async () => {
    const r = await open();
    expect(await r.waitForJobs(1, 60)).toBe(false);
    const waiting = r.waitForJobs(2, 5_000);
    await deliver('run1-p', Math.floor(nowPreciseMs()));
    await deliver('run1-q', Math.floor(nowPreciseMs()));
    expect(await waiting).toBe(true);
  });

  it('finds the job id in a deduplication key even when the id contains colons', () => {
    expect(jobIdOfKey('a:b:c:1733043600000')).toBe('a:b:c');
    expect(jobIdOfKey('plain')).toBe('plain');
  });
});
