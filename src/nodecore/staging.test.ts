/**
 * Staging: with a stage lead the core orders an attempt up to that long before its due time (dueAtMs in the
 * future), so the host can prepare it and send it at its due ms. Until it starts it is withdrawable like any order
 * waiting for its slot; what the store records about it never says it ran before its time.
 */
import { describe, expect, it } from 'vitest';
import { Harness, T0, ok, once } from './testing/harness.js';
import type { JobSpec } from '../scheduler/types.js';

const lead = 100;

function staged(): Harness {
  const h = new Harness(1, 1, lead);
  h.setup();
  return h;
}

function create(h: Harness, ...jobs: JobSpec[]): void {
  h.must(0, { type: 'create_jobs', nowMs: h.nowMs, shard: 0, jobs });
}

describe('NodeCore staging', () => {
  it('orders a one-off the stage lead before its due time, never sooner, and records its start only when it starts', () => {
    const h = staged();
    create(h, once('a', T0 + 1_000));
    h.advance(T0 + 1_000 - lead - 1);
    expect(h.orders).toHaveLength(0);
    h.advance(T0 + 1_000 - lead);
    expect(h.orders).toHaveLength(1);
    expect(h.orders[0]).toMatchObject({ jobId: 'a', scheduledAtMs: T0 + 1_000, attempt: 1, dueAtMs: T0 + 1_000 });
    // Decided, not started: nothing recorded yet; the API shows it QUEUED.
    h.flushNow();
    expect(h.applied('fired')).toHaveLength(0);
    expect(h.stores[0]!.getExecution('a', T0 + 1_000)).toBeNull();
    expect(h.core.overlayState(h.stores[0]!.getJob('a')!)).toBe('QUEUED');
    h.advance(T0 + 1_000);
    h.started(h.orders[0]!, T0 + 1_000);
    h.finish(h.orders[0]!, ok(T0 + 1_003));
    h.advance(T0 + 1_000 + 10_000);
    expect(h.stores[0]!.getExecution('a', T0 + 1_000)).toMatchObject({ state: 'SUCCEEDED', attempt: 1, startedAtMs: T0 + 1_000 });
    expect(h.orders).toHaveLength(1);
  });

  it('without a stage lead the same job is ordered at its due time', () => {
    const h = new Harness(1, 1, 0);
    h.setup();
    create(h, once('a', T0 + 1_000));
    h.advance(T0 + 999);
    expect(h.orders).toHaveLength(0);
    h.advance(T0 + 1_000);
    expect(h.orders).toHaveLength(1);
  });

  it('a cancel takes a staged order back: withdrawn, nothing recorded as fired, nothing ordered again', () => {
    const h = staged();
    create(h, once('a', T0 + 1_000));
    h.advance(T0 + 950);
    const order = h.orders[0]!;
    h.must(0, { type: 'cancel_job', nowMs: h.nowMs, id: 'a' });
    expect(h.withdrawals).toEqual([{ key: order.key, shard: 0, reason: 'disarmed' }]);
    h.core.dispatchWithdrawn(order.key);
    h.drain();
    h.advance(T0 + 5_000);
    expect(h.orders).toHaveLength(1);
    expect(h.applied('fired')).toHaveLength(0);
    expect(h.stores[0]!.getExecution('a', T0 + 1_000)).toBeNull();
    expect(h.core.ordersOut()).toBe(0);
  });

  it('a pause of a staged one-off is not refused: its order is taken back, the pause applies, nothing is sent', () => {
    const h = staged();
    create(h, once('a', T0 + 1_000));
    h.advance(T0 + 950);
    const order = h.orders[0]!;
    const op = h.client(0, { type: 'pause_job', nowMs: h.nowMs, id: 'a' });
    expect(h.withdrawals.map((w) => w.key)).toEqual([order.key]);
    h.core.dispatchWithdrawn(order.key);
    h.drain();
    h.flushNow();
    expect(h.replies.get(op)).toMatchObject({ ok: true });
    expect(h.stores[0]!.getJob('a')!.state).toBe('PAUSED');
    h.advance(T0 + 5_000);
    expect(h.orders).toHaveLength(1);
    expect(h.applied('fired')).toHaveLength(0);
  });

  it('a staged order taken back for a pause that is then refused is decided again at its due time', () => {
    const h = staged();
    create(h, once('a', T0 + 1_000));
    h.advance(T0 + 950);
    const order = h.orders[0]!;
    h.holdLog = true;
    h.client(0, { type: 'pause_job', nowMs: h.nowMs, id: 'a' });
    h.flushNow();
    h.core.dispatchWithdrawn(order.key);
    h.drain();
    // The pause never applies (its proposal is lost): the attempt, back in the wheel, goes at its due time.
    h.held.splice(0);
    h.holdLog = false;
    h.advance(T0 + 999);
    expect(h.orders).toHaveLength(1);
    h.advance(T0 + 1_000);
    expect(h.orders).toHaveLength(2);
    expect(h.orders[1]).toMatchObject({ key: order.key, attempt: 1, dueAtMs: T0 + 1_000 });
  });

  it('losing the shard withdraws its staged orders (leadership_lost)', () => {
    const h = staged();
    create(h, once('a', T0 + 1_000));
    h.advance(T0 + 920);
    h.core.leaderStop(0);
    h.drain();
    expect(h.withdrawals).toEqual([{ key: h.orders[0]!.key, shard: 0, reason: 'leadership_lost' }]);
  });

  it('a recurring job whose overlap policy looks at the run before it is decided at its due time, not staged', () => {
    const h = staged();
    create(h, once('r', T0 + 1_000, { schedule: { kind: 'every', everyMs: 1_000, startAtMs: T0 + 1_000 }, overlap: 'skip' }));
    h.advance(T0 + 950);
    expect(h.orders).toHaveLength(0);
    // The look at the stage time put it back at its due time: that deadline needs precision now.
    expect(h.drain().nextFireAtMs).toBe(T0 + 1_000);
    h.advance(T0 + 1_000);
    expect(h.orders).toHaveLength(1);
    // overlap=allow may be staged: its decision does not depend on the run before it.
    create(h, once('s', T0 + 2_000, { schedule: { kind: 'every', everyMs: 1_000, startAtMs: T0 + 2_000 } }));
    h.advance(T0 + 1_900);
    expect(h.orders.map((o) => o.jobId)).toContain('s');
  });

  it('a stage time is no precise deadline: the host is not asked to spin for it', () => {
    const h = staged();
    create(h, once('a', T0 + 1_000));
    const rd = h.drain();
    expect(rd.nextFireAtMs).toBeNull();
    expect(rd.nextDeadlineMs).toBeLessThanOrEqual(T0 + 1_000 - lead);
    expect(h.core.fireDue(T0 + 1_000 - lead)).toBe(false);
  });
});
