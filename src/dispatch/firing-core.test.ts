/**
 * FiringCore on its own (the firing thread's core, run here on the test's loop) against a real node:http receiver:
 * how its starts and outcomes travel to the main side. Nothing here asserts how long anything took.
 */
import { createServer } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { systemClock } from '../core/clock.js';
import { silentLogger } from '../core/log.js';
import { callbackSpec } from './testing/spec.js';
import { FiringCore, outcomeKinds, type FiringEvents } from './firing-core.js';
import { TargetPolicy } from './target-policy.js';

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function receiver(): Promise<string> {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.end());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return `http://127.0.0.1:${(server.address() as { port: number }).port}/cb`;
}

const spec = callbackSpec;

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 5));
}

describe('events to the main side', () => {
  it('the last outcome out, with nothing due within the events delay, goes at once with its start in one message', async () => {
    const url = await receiver();
    const events: FiringEvents[] = [];
    // A delay no test waits for: the outcome arrives only because nothing else could join it.
    const core = new FiringCore({ clock: systemClock(), logger: silentLogger, policy: new TargetPolicy(), leases: false, eventsDelayMs: 600_000, emit: (ev) => events.push(ev) });
    cleanups.push(async () => {
      core.handle({ offsetMs: 0, ops: [{ o: 'close', graceMs: 0 }] });
      await until(() => events.some((e) => e.closed));
    });
    const s = spec(url);
    const order = (id: number, dueAtMs: number) => ({
      id,
      specId: 0,
      shard: 0,
      dueAtMs,
      delivery: { jobId: `job-${id}`, scheduledAtMs: 1_700_000_000_000 + id, attempt: 1, fencingToken: '0.1', spec: s, body: new Uint8Array(0), concurrencyKey: 'k' },
    });
    // One sent now, one staged far beyond the delay: the first one's events do not wait for the second.
    core.handle({ offsetMs: 0, ops: [{ o: 'send', order: order(1, 0) }, { o: 'send', order: order(2, Date.now() + 3_600_000) }] });
    await until(() => events.length > 0);
    expect(events).toHaveLength(1);
    const [ev] = events;
    expect(Array.from(ev!.started!).filter((_, i) => i % 2 === 0)).toEqual([1]);
    expect(ev!.outcomes![0]).toBe(1);
    expect(outcomeKinds[ev!.outcomes![1]!]).toBe('succeeded');
    expect(ev!.errors).toEqual([null]);
  });
});
