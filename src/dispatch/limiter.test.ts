import { describe, expect, it } from 'vitest';
import { AssertionError } from '../core/assert.js';
import { queueLimits } from '../core/limits.js';
import { ConcurrencyLimiter, type LimiterEntry } from './limiter.js';

interface Entry extends LimiterEntry {
  id: string;
}
function entry(id: string, key: string, limit: number): Entry {
  return { id, concurrencyKey: key, concurrencyLimit: limit, queueNext: null };
}

function harness(globalMax: number) {
  const started: Entry[] = [];
  const limiter = new ConcurrencyLimiter<Entry>(globalMax, (e) => started.push(e));
  return { limiter, started, ids: () => started.map((e) => e.id) };
}

describe('ConcurrencyLimiter', () => {
  it('runs at most `limit` entries of a key, in FIFO order', () => {
    const { limiter, started, ids } = harness(100);
    const es = Array.from({ length: 5 }, (_, i) => entry(`a${i}`, 'a', 2));
    es.forEach((e) => limiter.acquire(e));
    expect(ids()).toEqual(['a0', 'a1']);
    expect(limiter.running()).toBe(2);
    expect(limiter.queued()).toBe(3);
    limiter.release(started[1]);
    expect(ids()).toEqual(['a0', 'a1', 'a2']);
    limiter.release(started[0]);
    limiter.release(started[2]);
    expect(ids()).toEqual(['a0', 'a1', 'a2', 'a3', 'a4']);
    limiter.release(started[3]);
    limiter.release(started[4]);
    expect(limiter.running()).toBe(0);
    expect(limiter.queued()).toBe(0);
    expect(limiter.keyCount()).toBe(0); // no state left behind for finished keys (job:{id} keys are unique)
  });

  it('never lets a saturated key block another key', () => {
    const { limiter, ids } = harness(100);
    for (let i = 0; i < 1000; i++) limiter.acquire(entry(`slow${i}`, 'slow', 1));
    limiter.acquire(entry('fast', 'fast', 1));
    expect(ids()).toEqual(['slow0', 'fast']);
  });

  it('caps entries running across keys and starts the waiting ones in arrival order', () => {
    const { limiter, started, ids } = harness(2);
    ['x', 'y', 'z', 'w'].forEach((k) => limiter.acquire(entry(k, k, 10)));
    expect(ids()).toEqual(['x', 'y']);
    expect(limiter.queued()).toBe(2);
    limiter.release(started[0]);
    expect(ids()).toEqual(['x', 'y', 'z']);
    limiter.release(started[1]);
    limiter.release(started[2]);
    expect(ids()).toEqual(['x', 'y', 'z', 'w']);
  });

  it('applies a raised limit to entries already waiting', () => {
    const { limiter, ids } = harness(100);
    limiter.acquire(entry('a0', 'a', 1));
    limiter.acquire(entry('a1', 'a', 1));
    limiter.acquire(entry('a2', 'a', 1));
    expect(ids()).toEqual(['a0']);
    limiter.acquire(entry('a3', 'a', 4));
    expect(ids()).toEqual(['a0', 'a1', 'a2', 'a3']);
  });

  it('keeps the stack flat when every start releases synchronously', () => {
    const order: string[] = [];
    const n = 200_000;
    const limiter: ConcurrencyLimiter<Entry> = new ConcurrencyLimiter<Entry>(
      1,
      (e) => {
        order.push(e.id);
        if (e.id !== 'hold') limiter.release(e); // an immediate failure, inside start
      },
      n,
    );
    const hold = entry('hold', 'k', 1);
    limiter.acquire(hold);
    for (let i = 0; i < n; i++) limiter.acquire(entry(String(i), 'k', 1));
    expect(limiter.queued()).toBe(n);
    limiter.release(hold); // one release cascades through every waiter
    expect(order.length).toBe(n + 1);
    expect(order[n]).toBe(String(n - 1));
    expect(limiter.running()).toBe(0);
    expect(limiter.keyCount()).toBe(0);
  });

  it('drains waiting entries and keeps counting the running ones', () => {
    const { limiter, started } = harness(1);
    limiter.acquire(entry('a0', 'a', 1));
    limiter.acquire(entry('a1', 'a', 1)); // waits for key a
    limiter.acquire(entry('b0', 'b', 1)); // holds key b, waits for the global slot
    const drained = limiter.drainQueued().map((e) => e.id).sort();
    expect(drained).toEqual(['a1', 'b0']);
    expect(limiter.queued()).toBe(0);
    expect(limiter.running()).toBe(1);
    limiter.release(started[0]);
    expect(limiter.running()).toBe(0);
    expect(limiter.keyCount()).toBe(0);
    expect(started.map((e) => e.id)).toEqual(['a0']);
  });

  it('holds at most queuedMax waiting entries: full() tells the caller to hold back, nothing queued is lost', () => {
    const started: Entry[] = [];
    const limiter = new ConcurrencyLimiter<Entry>(1, (e) => started.push(e), 3);
    limiter.acquire(entry('run', 'k', 1));
    for (let i = 0; i < 3; i++) limiter.acquire(entry(`w${i}`, 'k', 1));
    expect(limiter.queued()).toBe(3);
    expect(limiter.full()).toBe(true);
    // The caller ignoring full() is a programmer error, not a silent drop.
    expect(() => limiter.acquire(entry('extra', 'k', 1))).toThrow(AssertionError);
    expect(limiter.queued()).toBe(3);
    limiter.release(started[0]);
    expect(limiter.full()).toBe(false);
    limiter.acquire(entry('w3', 'k', 1)); // room again: held-back work goes in behind the others
    for (let i = 1; i <= 4; i++) limiter.release(started[i]);
    expect(started.map((e) => e.id)).toEqual(['run', 'w0', 'w1', 'w2', 'w3']);
    expect(limiter.queued()).toBe(0);
  });

  it('takes its default queue limit from queueLimits.dispatchQueuedMax', () => {
    const limiter = new ConcurrencyLimiter<Entry>(1, () => {});
    expect(limiter.queuedMax).toBe(queueLimits.dispatchQueuedMax);
  });
});
