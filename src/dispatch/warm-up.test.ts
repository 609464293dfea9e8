/**
 * The warm-up of the send path (FiringPort.warmUp), on a real firing thread (firing-thread.ts bundled by esbuild)
 * and on the main loop: it sends its requests to its own server and answers, and it is nobody's callback: no
 * start is reported, nothing waits or runs afterwards, and the port's target policy is not opened (a loopback
 * deny still refuses a real callback). Nothing here is timed: the report's counts are asserted.
 */
import { createServer } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { systemClock } from '../core/clock.js';
import { limits } from '../core/limits.js';
import { silentLogger } from '../core/log.js';
import type { CallbackSpec } from '../scheduler/types.js';
import type { Delivery } from './dispatcher.js';
import { FiringPort, type FiringPortOptions } from './firing-port.js';
import { TargetPolicy, parseCidr, type Cidr } from './target-policy.js';
import { useFiringThreadBundle } from './testing/thread-bundle.js';
import { warmUpSendPath } from './warm-up.js';

const threadEntry = useFiringThreadBundle();

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

const modes = ['thread', 'in-process'] as const;

function port(mode: (typeof modes)[number], options: Partial<FiringPortOptions> = {}): FiringPort {
  const p = new FiringPort({ clock: systemClock(), logger: silentLogger, mode, threadEntry: mode === 'thread' ? threadEntry() : undefined, ...options });
  cleanups.push(() => p.close(0));
  return p;
}

async function receiver(): Promise<{ url: string; arrivals: () => number }> {
  let arrivals = 0;
  const server = createServer((req, res) => {
    arrivals++;
    req.resume();
    res.writeHead(200, { 'content-length': '0' });
    res.end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}/cb`, arrivals: () => arrivals };
}

function delivery(url: string): Delivery {
  const spec: CallbackSpec = {
    url,
    method: 'POST',
    headers: {},
    timeoutMs: 5_000,
    retry: { maxAttempts: 1, initialBackoffMs: 100, maxBackoffMs: 1000, multiplier: 2, jitter: false },
    signingSecret: null,
    maxConcurrency: 10,
  };
  return { jobId: 'job-1', scheduledAtMs: 1_700_000_000_000, attempt: 1, fencingToken: '0.1', spec, body: new Uint8Array(0), concurrencyKey: 'task-a' };
}

function cidr(text: string): Cidr {
  return parseCidr(text) as Cidr;
}

describe('warmUpSendPath', () => {
  it('sends its requests to its own server, which answers them', async () => {
    const report = await warmUpSendPath();
    expect(report.sent).toBeGreaterThan(0);
    expect(report.succeeded).toBeGreaterThan(0);
    expect(report.succeeded).toBeLessThanOrEqual(report.sent);
    // Cut short only by its time bound: otherwise every request went out and was answered.
    if (!report.timedOut) {
      expect(report.sent).toBe(limits.firingWarmUpRequests);
      expect(report.succeeded).toBe(report.sent);
    }
  });
});

describe.each(modes)('FiringPort warm-up (%s)', (mode) => {
  it('warms up where callbacks leave, reports no start, and leaves the policy as it was (loopback denied)', async () => {
    const r = await receiver();
    const starts: string[] = [];
    const policy = new TargetPolicy({ deny: [cidr('127.0.0.0/8'), cidr('::1')] });
    const p = port(mode, { targetPolicy: policy, onStart: (d) => starts.push(d.jobId) });
    const report = await p.warmUp();
    expect(report).not.toBeNull();
    expect(report!.sent).toBeGreaterThan(0);
    expect(report!.succeeded).toBeGreaterThan(0);
    expect(starts).toEqual([]);
    expect(p.inFlight()).toBe(0);
    expect(p.queued()).toBe(0);
    // The node's own policy still refuses loopback: the warm-up's server opened no hole.
    const outcome = await p.send(delivery(r.url));
    expect(outcome.kind).toBe('permanent');
    expect(outcome.error).toMatch(/refused by policy \(--callback-deny 127\.0\.0\.0\/8\)/);
    expect(r.arrivals()).toBe(0);
    // The only start reported is the real callback's (refused when it connected).
    expect(starts).toEqual(['job-1']);
  });

  it('sends real callbacks as before after a warm-up, and a closing port runs none', async () => {
    const r = await receiver();
    const p = port(mode);
    expect(await p.warmUp()).not.toBeNull();
    const outcome = await p.send(delivery(r.url));
    expect(outcome.kind).toBe('succeeded');
    expect(r.arrivals()).toBe(1);
    const closed = p.close(0);
    expect(await p.warmUp()).toBeNull();
    await closed;
  });
});

describe('FiringPort warm-up on a thread that is closing', () => {
  it('a close asked while the thread warms up lets the warm-up end before the thread is terminated', async () => {
    // Terminated inside its throwaway server's HTTP parser, a thread aborts the whole process (a V8 fatal error).
    const p = port('thread');
    const warming = p.warmUp();
    await new Promise((resolve) => setTimeout(resolve, 5)); // the thread is sending to its server by now
    await p.close(0);
    const report = await warming;
    expect(report).not.toBeNull();
    expect(report!.sent).toBeGreaterThan(0);
  });
});
