import { afterEach, describe, expect, it } from 'vitest';
import { Pool } from 'undici';
import { nowPreciseMs, receiverWarmUpRequests, startReceiver, type CallbackReceiver, type ReceiverMode } from './receiver.js';

let receiver: CallbackReceiver | null = null;
let pool: Pool | null = null;

afterEach(async () => {
  await pool?.close();
  await receiver?.close();
  pool = null;
  receiver = null;
});

/** Sends one callback like the dispatcher does (docs/api.md, "The callback") and returns status, body and headers. */
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

async function open(mode: ReceiverMode, prefix = 'run1-'): Promise<CallbackReceiver> {
  receiver = await startReceiver({ jobIdPrefix: prefix, inProcess: mode === 'in-process' });
  expect(receiver.mode).toBe(mode);
  pool = new Pool(`http://127.0.0.1:${receiver.port}`, { connections: 1 });
  return receiver;
}

describe.each<ReceiverMode>(['thread', 'in-process'])('callback receiver over real HTTP (%s)', (mode) => {
  it('warms itself up before it is used and forgets it: only the run\'s deliveries are counted', async () => {
    const r = await open(mode);
    const before = await r.stats();
    expect(before.warmUpAnswered).toBe(receiverWarmUpRequests);
    expect(before).toMatchObject({ deliveries: 0, uniqueKeys: 0, duplicates: 0, early: 0, malformed: 0, foreign: 0, firstArrivalMs: null });
    expect(before.lateness.length).toBe(0);
    expect(await r.deliveredJobCount()).toBe(0);
    await deliver('run1-a', Math.floor(nowPreciseMs()));
    const after = await r.stats();
    expect(after).toMatchObject({ deliveries: 1, uniqueKeys: 1, malformed: 0, foreign: 0 });
    expect(await r.missingIds(['run1-a', 'run1-warm-up-0'], 10)).toEqual(['run1-warm-up-0']);
  });

  it('skips the warm-up when asked (warmUpRequests 0)', async () => {
    receiver = await startReceiver({ jobIdPrefix: 'run1-', inProcess: mode === 'in-process', warmUpRequests: 0 });
    expect((await receiver.stats()).warmUpAnswered).toBe(0);
  });

  it('answers 200 with an empty body on a keep-alive connection and measures lateness', async () => {
    const r = await open(mode);
    const scheduledMs = Math.floor(nowPreciseMs()) - 5;
    const before = nowPreciseMs();
    const res = await deliver('run1-a', scheduledMs);
    const after = nowPreciseMs();
    expect(res.status).toBe(200);
    expect(res.body).toBe('');
    expect(res.headers.connection).not.toBe('close');
    const s = await r.stats();
    expect(s.deliveries).toBe(1);
    expect(s.early).toBe(0);
    expect(s.lateness.length).toBe(1);
    // The arrival is read on the receiver's thread: its clock (timeOrigin + now) agrees with this one.
    const lateness = s.lateness[0];
    expect(lateness).toBeGreaterThanOrEqual(before - scheduledMs - 1);
    expect(lateness).toBeLessThanOrEqual(after - scheduledMs + 1);
    expect(r.url).toBe(`http://127.0.0.1:${r.port}/cb`);
  });

  it('counts a delivery before its scheduled time as early', async () => {
    const r = await open(mode);
    await deliver('run1-late', Math.floor(nowPreciseMs()) - 1);
    await deliver('run1-early', Math.floor(nowPreciseMs()) + 60_000);
    const s = await r.stats();
    expect(s.deliveries).toBe(2);
    expect(s.early).toBe(1);
    expect(Math.min(...s.lateness)).toBeLessThan(-50_000);
  });

  it('counts repeated deduplication keys as duplicates, keeps one lateness sample per key', async () => {
    const r = await open(mode);
    const t = Math.floor(nowPreciseMs()) - 10;
    await deliver('run1-x', t);
    await deliver('run1-x', t, { 'x-punctual-attempt': '2' });
    await deliver('run1-x', t);
    await deliver('run1-x', t + 1); // another occurrence of the same job: a new key, not a duplicate
    await deliver('run1-y', t);
    const s = await r.stats();
    expect(s.deliveries).toBe(5);
    expect(s.uniqueKeys).toBe(3);
    expect(s.duplicates).toBe(2);
    expect(s.lateness.length).toBe(3);
    expect(await r.deliveredJobCount()).toBe(2);
    expect(await r.progress()).toEqual({ deliveredJobs: 2, lastArrivalMs: s.lastArrivalMs });
  });

  it('reports accepted jobs never delivered as missing', async () => {
    const r = await open(mode);
    const t = Math.floor(nowPreciseMs());
    await deliver('run1-1', t);
    await deliver('run1-3', t);
    expect(await r.countMissing(['run1-1', 'run1-2', 'run1-3', 'run1-4'])).toBe(2);
    expect(await r.countMissing([])).toBe(0);
    expect(await r.missingIds(['run1-1', 'run1-2', 'run1-3', 'run1-4'], 10)).toEqual(['run1-2', 'run1-4']);
    expect(await r.missingIds(['run1-1', 'run1-2', 'run1-3', 'run1-4'], 1)).toEqual(['run1-2']);
  });

  it('sets apart deliveries of other runs and deliveries without the headers', async () => {
    const r = await open(mode, 'run1-');
    await deliver('run0-old', Math.floor(nowPreciseMs()) - 1000);
    const res = await pool!.request({ method: 'POST', path: '/cb', body: 'x' });
    await res.body.text();
    expect(res.statusCode).toBe(200);
    const s = await r.stats();
    expect(s.foreign).toBe(1);
    expect(s.malformed).toBe(1);
    expect(s.deliveries).toBe(0);
    expect(s.firstArrivalMs).toBeNull();
  });

  it('waitForJobs resolves true once enough jobs arrived and false when the timeout passes', async () => {
    const r = await open(mode);
    expect(await r.waitForJobs(1, 60)).toBe(false);
    const waiting = r.waitForJobs(2, 5_000);
    await deliver('run1-p', Math.floor(nowPreciseMs()));
    await deliver('run1-q', Math.floor(nowPreciseMs()));
    expect(await waiting).toBe(true);
  });

  it('without X-Punctual-Job-Id, takes the job id from the deduplication key, colons in the id included', async () => {
    const r = await open(mode, 'run1-');
    const t = Math.floor(nowPreciseMs());
    for (const key of [`run1-a:b:c:${t}`, 'run1-plain', `run0-x:${t}`]) {
      const res = await pool!.request({
        method: 'POST',
        path: '/cb',
        headers: { 'x-deduplication-key': key, 'x-punctual-scheduled-at': String(t) },
      });
      await res.body.text();
    }
    expect(await r.missingIds(['run1-a:b:c', 'run1-a:b', 'run1-plain'], 10)).toEqual(['run1-a:b']);
    expect((await r.stats()).foreign).toBe(1);
  });

  it('keeps every lateness sample past its initial capacity', async () => {
    receiver = await startReceiver({ jobIdPrefix: 'run1-', expectedDeliveries: 1, inProcess: mode === 'in-process' });
    pool = new Pool(`http://127.0.0.1:${receiver.port}`, { connections: 4 });
    const t = Math.floor(nowPreciseMs()) - 3;
    await Promise.all(Array.from({ length: 40 }, (_, i) => deliver(`run1-${i}`, t)));
    const s = await receiver.stats();
    expect(s.lateness.length).toBe(40);
    expect(s.uniqueKeys).toBe(40);
    expect(Math.min(...s.lateness)).toBeGreaterThan(0);
    expect(await receiver.countMissing(Array.from({ length: 41 }, (_, i) => `run1-${i}`))).toBe(1);
  });

  it('refuses to start on a port already taken, and leaves nothing running', async () => {
    const first = await open(mode);
    await expect(startReceiver({ port: first.port, inProcess: mode === 'in-process' })).rejects.toThrow(/EADDRINUSE/);
  });
});
