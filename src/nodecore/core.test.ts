/**
 * NodeCore alone: numbers for time, MemoryStores, a log that applies at once (testing/harness.ts). No sockets,
 * no timers: every case is a sequence of inputs and the outputs they must produce.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { AssertionError } from '../core/assert.js';
import { PunctualError } from '../core/errors.js';
import { nodeLimits, queueLimits, stallLimits } from '../core/limits.js';
import type { Command, OutcomeItem } from '../scheduler/commands.js';
import { apply } from '../scheduler/machine.js';
import { Harness, T0, ok, once, retryable } from './testing/harness.js';
import type { DispatchOrder } from './types.js';

const savedQueueLimits = { ...queueLimits };
afterEach(() => {
  Object.assign(queueLimits as Record<string, number>, savedQueueLimits);
});

function create(h: Harness, ...jobs: ReturnType<typeof once>[]): void {
  h.must(0, { type: 'create_jobs', nowMs: h.nowMs, shard: 0, jobs });
}

/**
 * A one-off 'a' due at T0 + 100 whose order waits for a concurrency slot (not started) while a pause sent its
 * fired record ahead: the execution is RUNNING in the store.
 */
function orderAheadOfPause(h: Harness): DispatchOrder {
  h.setup();
  create(h, once('a', T0 + 100));
  h.advance(T0 + 100);
  const order = h.orders[0]!;
  h.client(0, { type: 'pause_job', nowMs: h.nowMs, id: 'a' });
  h.flushNow();
  expect(h.stores[0]!.getExecution('a', T0 + 100)).toMatchObject({ state: 'RUNNING', attempt: 1 });
  return order;
}

/** A one-off job 'a' due at T0 + 100 whose first attempt this node started and recorded: the order out. */
function attemptOut(h: Harness): DispatchOrder {
  create(h, once('a', T0 + 100));
  h.advance(T0 + 100);
  const order = h.orders[0]!;
  h.started(order, T0 + 100);
  h.advance(T0 + 100 + stallLimits.firedHoldMs);
  return order;
}

/** A one-off job due at T0 + 100, sent and answered; its folded record is the one proposal the log holds back. */
function heldRecord(h: Harness, id: string): Harness['held'][number] {
  h.setup();
  create(h, once(id, T0 + 100));
  h.advance(T0 + 100);
  h.started(h.orders[0]!, T0 + 101);
  h.finish(h.orders[0]!, ok(T0 + 105));
  h.holdLog = true;
  h.advance(T0 + 100 + stallLimits.engineItemsDelayMs + 5);
  return h.held.splice(0)[0]!;
}

/** Another node's fired record of an attempt, applied here as a follower would. */
function firedBy(h: Harness, nodeId: string, jobId: string, scheduledAtMs: number, attempt: number): void {
  const fired: Command = { type: 'fired', nowMs: h.nowMs, nodeId, items: [{ jobId, scheduledAtMs, attempt, startedAtMs: h.nowMs }] };
  h.core.applied(0, fired, apply(h.stores[0]!, fired).effects, h.nowMs);
}

function outcomes(h: Harness): OutcomeItem[] {
  return h.applied('outcomes').flatMap((c) => (c as Extract<Command, { type: 'outcomes' }>).items);
}

describe('NodeCore firing', () => {
  it('orders an occurrence at its due time, never before, with everything needed to send it', () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 1_000));
    expect(h.core.ready().nextFireAtMs).toBe(T0 + 1_000);
    h.advance(T0 + 999);
    expect(h.orders).toHaveLength(0);
    h.advance(T0 + 1_000);
    expect(h.orders).toHaveLength(1);
    const [o] = h.orders;
    expect(o).toMatchObject({ key: `a\n${T0 + 1_000}`, shard: 0, jobId: 'a', scheduledAtMs: T0 + 1_000, attempt: 1, fencingToken: '0.1', dueAtMs: T0 + 1_000 });
    expect(o!.delivery).toMatchObject({ jobId: 'a', attempt: 1, fencingToken: '0.1', concurrencyKey: 'hook' });
    expect(o!.delivery.spec.url).toBe('http://127.0.0.1:9/hook');
    expect(h.core.overlayState(h.stores[0]!.getJob('a')!)).toBe('QUEUED');
    h.started(o!);
    expect(h.core.overlayState(h.stores[0]!.getJob('a')!)).toBe('RUNNING');
  });

  it('a time that steps back orders nothing until it is due again', () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100));
    h.advance(T0 + 50);
    h.advance(T0 + 20);
    expect(h.orders).toHaveLength(0);
    h.advance(T0 + 100);
    expect(h.orders).toHaveLength(1);
  });

  it('a cancel before the due time drops the occurrence', () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100));
    h.must(0, { type: 'cancel_job', nowMs: h.nowMs, id: 'a' });
    h.advance(T0 + 1_000);
    expect(h.orders).toHaveLength(0);
    expect(h.core.settled(h.nowMs)).toBe(true);
  });

  it('a cancel after the order but before its start withdraws it; taken back, nothing is recorded', () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100));
    h.advance(T0 + 100);
    const [o] = h.orders;
    h.must(0, { type: 'cancel_job', nowMs: h.nowMs, id: 'a' });
    expect(h.withdrawals).toEqual([{ key: o!.key, shard: 0, reason: 'disarmed' }]);
    h.core.dispatchWithdrawn(o!.key);
    h.advance(T0 + 1_000);
    expect(h.applied('fired')).toHaveLength(0);
    expect(outcomes(h)).toHaveLength(0);
    expect(h.core.ordersOut()).toBe(0);
    expect(h.stores[0]!.getJob('a')!.state).toBe('CANCELLED');
  });

  it('an order cancelled before the host took it never leaves: no dispatch, no withdrawal', () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100));
    h.nowMs = T0 + 100;
    h.core.tick(h.nowMs); // the order waits in the outbox
    const cancel: Command = { type: 'cancel_job', nowMs: h.nowMs, id: 'a' };
    h.core.applied(0, cancel, apply(h.stores[0]!, cancel).effects, h.nowMs);
    h.drain();
    expect(h.orders).toHaveLength(0);
    expect(h.withdrawals).toHaveLength(0);
    expect(h.core.ordersOut()).toBe(0);
    expect(h.core.settled(h.nowMs)).toBe(true);
  });

  it('leadership lost: nothing more is ordered, orders not started are withdrawn; a new term fences higher', () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100), once('b', T0 + 200));
    h.advance(T0 + 100);
    expect(h.orders).toHaveLength(1);
    h.core.leaderStop(0);
    h.drain();
    expect(h.withdrawals).toEqual([{ key: h.orders[0]!.key, shard: 0, reason: 'leadership_lost' }]);
    h.advance(T0 + 500);
    expect(h.orders).toHaveLength(1);
    // The old order's outcome still arrives (the dispatcher could not take it back) and is recorded.
    h.finish(h.orders[0]!, ok(h.nowMs));
    h.advance(h.nowMs + stallLimits.engineItemsDelayMs);
    expect(h.stores[0]!.getJob('a')!.state).toBe('SUCCEEDED');
    // A new term: open executions fire again and the rest is loaded, with the new fencing token.
    h.core.leaderStart(0, 2, h.nowMs);
    h.advance(h.nowMs);
    expect(h.orders.slice(1).map((o) => [o.jobId, o.fencingToken])).toEqual([['b', '0.2']]);
  });

  it("a later attempt recorded by another leader waits for this node's own attempt still out, then goes", () => {
    const h = new Harness();
    h.setup();
    const first = attemptOut(h);
    expect(h.stores[0]!.getExecution('a', T0 + 100)).toMatchObject({ state: 'RUNNING', attempt: 1 });
    // Leadership goes to n2, which fires attempt 2 (its record applies here as a follower), then comes back.
    h.core.leaderStop(0);
    h.drain();
    firedBy(h, 'n2', 'a', T0 + 100, 2);
    h.core.leaderStart(0, 3, h.nowMs);
    h.advance(h.nowMs + 10);
    // Attempt 3 is armed for n2's open attempt, but attempt 1 is still out here: one order per occurrence.
    expect(h.orders).toHaveLength(1);
    expect(h.core.overlayState(h.stores[0]!.getJob('a')!)).toBe('RUNNING');
    h.finish(first, retryable(h.nowMs));
    h.advance(h.nowMs + 1);
    expect(h.orders.slice(1).map((o) => [o.attempt, o.fencingToken])).toEqual([[3, '0.3']]);
    h.started(h.orders[1]!);
    h.finish(h.orders[1]!, ok(h.nowMs));
    h.advance(h.nowMs + stallLimits.engineItemsDelayMs);
    expect(h.stores[0]!.getExecution('a', T0 + 100)).toMatchObject({ state: 'SUCCEEDED', attempt: 3 });
  });

  it('leading again in a new term while its own attempt is out, the node does not send the occurrence twice', () => {
    const h = new Harness();
    h.setup();
    attemptOut(h);
    h.core.leaderStop(0);
    h.core.leaderStart(0, 2, h.nowMs);
    h.advance(h.nowMs + 10);
    h.finish(h.orders[0]!, ok(h.nowMs));
    h.advance(h.nowMs + stallLimits.engineItemsDelayMs);
    expect(h.orders).toHaveLength(1);
    expect(h.stores[0]!.getExecution('a', T0 + 100)).toMatchObject({ state: 'SUCCEEDED', attempt: 1 });
  });

  it("a new term's re-fire of an attempt another node recorded never goes before the occurrence's time on this node's clock", () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 1_000));
    h.core.leaderStop(0);
    h.drain();
    // n2, whose wall clock ran 400 ms ahead of this one, recorded attempt 1 at its T0 + 1,000, then lost the shard.
    h.advance(T0 + 600);
    firedBy(h, 'n2', 'a', T0 + 1_000, 1);
    h.core.leaderStart(0, 2, h.nowMs);
    h.advance(T0 + 999);
    // Simulator seed 22951: the RUNNING execution fired again at once, 154 ms before its time here.
    expect(h.orders).toHaveLength(0);
    h.advance(T0 + 1_000);
    expect(h.orders.map((o) => [o.jobId, o.attempt, o.fencingToken])).toEqual([['a', 2, '0.2']]);
  });

  it("a new term's re-fire armed while this node's wall clock ran ahead still goes at once after the clock steps back", () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100));
    h.core.leaderStop(0);
    h.drain();
    // n2 led the shard and started attempt 1 (its record applies here as a follower), then lost the shard.
    h.nowMs = T0 + 100;
    firedBy(h, 'n2', 'a', T0 + 100, 1);
    // This node leads term 2 while its wall clock reads 20 s ahead, and without a lease yet.
    h.lease = false;
    h.core.leaderStart(0, 2, T0 + 20_000);
    h.advance(T0 + 20_000);
    expect(h.orders).toHaveLength(0);
    // The clock steps back to the true time and the lease comes. Simulator seed 901519: attempt 2 was due at the
    // jumped-ahead instant, so it waited for the clock to read it again, the execution RUNNING all that time.
    h.lease = true;
    h.advance(T0 + 300);
    expect(h.orders.map((o) => [o.jobId, o.attempt, o.fencingToken])).toEqual([['a', 2, '0.2']]);
  });

  it('an overlap=buffer_one occurrence let go while firing is held back still goes at once after the clock steps back', () => {
    Object.assign(queueLimits as Record<string, number>, { dispatchQueuedMax: 1 });
    const h = new Harness();
    h.setup();
    create(h, once('p', T0 + 1_000, { schedule: { kind: 'every', everyMs: 1_000, startAtMs: T0 + 1_000 }, overlap: 'buffer_one' }), once('q', T0 + 2_050));
    h.advance(T0 + 1_000);
    const run = h.orders[0]!;
    h.started(run);
    h.advance(T0 + 2_000); // p's next occurrence waits for the run (buffered)
    h.advance(T0 + 2_050);
    const q = h.orders[1]!; // waits for its slot: firing is held back
    expect(h.orders.map((o) => [o.jobId, o.scheduledAtMs])).toEqual([['p', T0 + 1_000], ['q', T0 + 2_050]]);
    // The run finishes while this node's wall clock reads 20 s ahead: the buffered occurrence is let go, held back.
    h.finish(run, ok(T0 + 20_000));
    h.advance(T0 + 20_000 + stallLimits.engineItemsDelayMs);
    expect(h.orders).toHaveLength(2);
    // The clock steps back and q starts: the released occurrence goes, not once the clock reads 20 s ahead again.
    h.started(q, T0 + 2_100);
    h.advance(T0 + 2_100);
    expect(h.orders.slice(2).map((o) => [o.jobId, o.scheduledAtMs, o.attempt])).toEqual([['p', T0 + 2_000, 1]]);
  });

  it('an order of an earlier term still waiting for its slot does not keep the new term from arming the occurrence', () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100));
    h.advance(T0 + 100);
    const order = h.orders[0]!; // waiting for a concurrency slot: not started
    h.core.leaderStop(0);
    h.drain();
    expect(h.withdrawals.map((w) => w.key)).toEqual([order.key]);
    // Leading again before the slot frees: the new term's load finds the occurrence PENDING, the old order still out.
    h.core.leaderStart(0, 2, h.nowMs);
    h.advance(h.nowMs + 1);
    expect(h.orders).toHaveLength(1); // one order per occurrence: the new one waits behind the old
    // The slot frees; the shell does not send the withdrawn order (another term's) and hands it back.
    h.core.dispatchWithdrawn(order.key);
    h.advance(h.nowMs + 1);
    // Simulator seeds 2955, 3606, 4012, 4929: nothing armed it again before the loader's next full scan.
    expect(h.orders.slice(1).map((o) => [o.jobId, o.attempt, o.fencingToken])).toEqual([['a', 1, '0.2']]);
  });

  it('an overlap=buffer_one occurrence does not wait for an attempt out whose execution another leader closed', () => {
    const h = new Harness();
    h.setup();
    create(h, once('p', T0 + 1_000, { schedule: { kind: 'every', everyMs: 1_000, startAtMs: T0 + 1_000 }, overlap: 'buffer_one' }));
    h.advance(T0 + 1_000);
    const stale = h.orders[0]!;
    h.started(stale);
    h.advance(T0 + 1_000 + stallLimits.engineItemsDelayMs);
    expect(h.stores[0]!.getExecution('p', T0 + 1_000)).toMatchObject({ state: 'RUNNING', attempt: 1 });
    // n2 leads meanwhile: it fires attempt 2, which succeeds (applied here as a follower); this node leads again
    // while its attempt 1 is still out.
    h.core.leaderStop(0);
    h.drain();
    firedBy(h, 'n2', 'p', T0 + 1_000, 2);
    const done: Command = {
      type: 'outcomes', nowMs: h.nowMs, nodeId: 'n2',
      items: [{ jobId: 'p', scheduledAtMs: T0 + 1_000, attempt: 2, result: 'succeeded', statusCode: 200, error: null, finishedAtMs: h.nowMs, retryAtMs: null }],
    };
    h.core.applied(0, done, apply(h.stores[0]!, done).effects, h.nowMs);
    expect(h.stores[0]!.getExecution('p', T0 + 1_000)).toMatchObject({ state: 'SUCCEEDED', attempt: 2 });
    h.core.leaderStart(0, 3, h.nowMs);
    // The next occurrence is not buffered behind attempt 1: its outcome will be ignored (the execution is closed),
    // so no `finished` effect would ever let it go (simulator seed 2545, also 4358, 4563, 4828, 4860).
    h.advance(T0 + 2_000);
    expect(h.orders.slice(1).map((o) => [o.scheduledAtMs, o.attempt, o.fencingToken])).toEqual([[T0 + 2_000, 1, '0.3']]);
    h.finish(stale, ok(h.nowMs));
    h.advance(h.nowMs + stallLimits.engineItemsDelayMs);
    expect(h.stores[0]!.getExecution('p', T0 + 1_000)).toMatchObject({ state: 'SUCCEEDED', attempt: 2 });
  });

  it('a pause that applies before the fired record, then a resume while the attempt is out: the occurrence goes again after its outcome', () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100));
    // The pause is proposed just before the due time and commits only after the order left.
    h.advance(T0 + 99);
    h.holdLog = true;
    const pause = h.client(0, { type: 'pause_job', nowMs: h.nowMs, id: 'a' });
    h.flushNow();
    h.advance(T0 + 100);
    const first = h.orders[0]!;
    h.started(first, T0 + 100);
    h.advance(T0 + 100 + stallLimits.firedHoldMs);
    expect(h.held.map((p) => p.command.type)).toEqual(['pause_job', 'fired']);
    h.releaseLog();
    expect(h.replies.get(pause)).toMatchObject({ ok: true });
    // The fired record found a paused job without an execution: nothing is recorded of attempt 1.
    expect(h.stores[0]!.getJob('a')!.state).toBe('PAUSED');
    expect(h.stores[0]!.getExecution('a', T0 + 100)).toBeNull();
    // The resume arms attempt 1 again while this node's attempt 1 is still out: one order per occurrence.
    h.must(0, { type: 'resume_job', nowMs: h.nowMs, id: 'a' });
    h.advance(h.nowMs + 10);
    expect(h.orders).toHaveLength(1);
    // Its outcome applies to no execution; the waiting attempt is then decided against the store: it goes.
    h.finish(first, ok(h.nowMs));
    h.advance(h.nowMs + stallLimits.engineItemsDelayMs);
    expect(h.stores[0]!.getExecution('a', T0 + 100)).toBeNull();
    h.advance(h.nowMs + 1);
    expect(h.orders.slice(1).map((o) => [o.attempt, o.fencingToken])).toEqual([[1, '0.1']]);
    h.started(h.orders[1]!);
    h.finish(h.orders[1]!, ok(h.nowMs));
    h.advance(h.nowMs + stallLimits.engineItemsDelayMs);
    expect(h.stores[0]!.getExecution('a', T0 + 100)).toMatchObject({ state: 'SUCCEEDED', attempt: 1 });
    expect(h.stores[0]!.getJob('a')!.state).toBe('SUCCEEDED');
  });

  it("a new schedule does not drop a new term's re-fire of an attempt in flight: it goes once the lease is back", () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100, { schedule: { kind: 'every', everyMs: 1000, startAtMs: T0 + 100 } }));
    // n2 led the shard and started attempt 1 (its record applies here as a follower), then crashed with it out.
    h.core.leaderStop(0);
    h.drain();
    h.nowMs = T0 + 100;
    firedBy(h, 'n2', 'a', T0 + 100, 1);
    expect(h.stores[0]!.getExecution('a', T0 + 100)).toMatchObject({ state: 'RUNNING', attempt: 1 });
    // This node leads term 3 and arms attempt 2 of the open execution; it waits for the lease.
    h.lease = false;
    h.core.leaderStart(0, 3, h.nowMs);
    h.advance(h.nowMs + 10);
    expect(h.orders).toHaveLength(0);
    // A new schedule applies meanwhile: it disarms the job's next occurrences, not the attempt in flight.
    h.must(0, { type: 'patch_job', nowMs: h.nowMs, id: 'a', patch: { schedule: { kind: 'every', everyMs: 5000, startAtMs: T0 + 10_000 } } });
    h.lease = true;
    h.advance(h.nowMs + nodeLimits.leaseRetryMs);
    expect(h.orders.map((o) => [o.scheduledAtMs, o.attempt, o.fencingToken])).toEqual([[T0 + 100, 2, '0.3']]);
    h.started(h.orders[0]!);
    h.finish(h.orders[0]!, ok(h.nowMs));
    h.advance(h.nowMs + stallLimits.engineItemsDelayMs);
    expect(h.stores[0]!.getExecution('a', T0 + 100)).toMatchObject({ state: 'SUCCEEDED', attempt: 2 });
  });

  it("a new schedule does not take back a new term's re-fire of an attempt in flight while it waits to start", () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100, { schedule: { kind: 'every', everyMs: 1000, startAtMs: T0 + 100 } }));
    h.core.leaderStop(0);
    h.drain();
    h.nowMs = T0 + 100;
    firedBy(h, 'n2', 'a', T0 + 100, 1);
    h.core.leaderStart(0, 3, h.nowMs);
    h.advance(h.nowMs + 10);
    // Attempt 2 is ordered and waits for a concurrency slot (not started) when the patch applies.
    expect(h.orders.map((o) => [o.scheduledAtMs, o.attempt])).toEqual([[T0 + 100, 2]]);
    h.must(0, { type: 'patch_job', nowMs: h.nowMs, id: 'a', patch: { schedule: { kind: 'every', everyMs: 5000, startAtMs: T0 + 10_000 } } });
    expect(h.withdrawals).toEqual([]);
    h.started(h.orders[0]!);
    h.finish(h.orders[0]!, ok(h.nowMs));
    h.advance(h.nowMs + stallLimits.engineItemsDelayMs);
    expect(h.stores[0]!.getExecution('a', T0 + 100)).toMatchObject({ state: 'SUCCEEDED', attempt: 2 });
  });

  it('an order whose fired record went ahead of a pause can still be taken back once the shard is lost', () => {
    const h = new Harness();
    const order = orderAheadOfPause(h);
    // The shard is lost before the slot frees: the shell does not send it and hands it back.
    h.core.leaderStop(0);
    h.drain();
    h.core.dispatchWithdrawn(order.key);
    h.drain();
    expect(h.core.ordersOut()).toBe(0);
    // The next term fires the recorded attempt again, as after a crash.
    h.core.leaderStart(0, 2, h.nowMs);
    h.advance(h.nowMs + 1);
    expect(h.orders.slice(1).map((o) => [o.attempt, o.fencingToken])).toEqual([[2, '0.2']]);
  });

  it('a cancel takes back an order not started even when its fired record went ahead (the cancel closed it)', () => {
    const h = new Harness();
    const order = orderAheadOfPause(h);
    expect(h.withdrawals).toEqual([]); // the pause leaves the attempt in flight to finish
    h.must(0, { type: 'cancel_job', nowMs: h.nowMs, id: 'a' });
    expect(h.stores[0]!.getExecution('a', T0 + 100)).toMatchObject({ state: 'CANCELLED' });
    h.drain();
    // Acknowledged cancel: the order must not start (seed 4025 of the whole-node simulator started it).
    expect(h.withdrawals.map((w) => w.key)).toEqual([order.key]);
    h.core.dispatchWithdrawn(order.key);
    h.drain();
    expect(h.core.ordersOut()).toBe(0);
  });

  it('a fired record lost while its callback is out goes again with the outcome, after the node leads again', () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100));
    h.advance(T0 + 100);
    const order = h.orders[0]!;
    h.started(order, T0 + 100);
    h.holdLog = true;
    h.advance(T0 + 100 + stallLimits.firedHoldMs);
    expect(h.held.map((p) => p.command.type)).toEqual(['fired']);
    // Leadership lost before the record committed: the proposal fails, the callback is still out.
    const lost = h.held.splice(0)[0]!;
    h.core.leaderStop(0);
    h.core.proposalDone(lost.ticket, { ok: false, error: new PunctualError('unavailable', 'not leader', [], 'not_leader') });
    h.holdLog = false;
    h.drain();
    // Back as the leader of a later term: the occurrence is this node's order out, so it is not ordered again.
    h.core.leaderStart(0, 2, h.nowMs);
    h.advance(h.nowMs + 10);
    expect(h.orders).toHaveLength(1);
    h.finish(order, ok(h.nowMs));
    h.advance(h.nowMs + stallLimits.engineItemsDelayMs);
    expect(outcomes(h)).toMatchObject([{ jobId: 'a', attempt: 1, result: 'succeeded', startedAtMs: T0 + 100 }]);
    expect(h.stores[0]!.getExecution('a', T0 + 100)).toMatchObject({ state: 'SUCCEEDED', attempt: 1 });
    expect(h.stores[0]!.getJob('a')!.state).toBe('SUCCEEDED');
  });

  it('without a lease a due occurrence waits, keeping its due time, and goes once the lease is back', () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100));
    h.lease = false;
    h.advance(T0 + 100);
    expect(h.orders).toHaveLength(0);
    const rd = h.drain();
    expect(rd.nextFireAtMs).toBe(T0 + 105); // a poll, not a spin
    h.advance(T0 + 105);
    expect(h.orders).toHaveLength(0);
    h.lease = true;
    h.advance(T0 + 110);
    expect(h.orders.map((o) => [o.jobId, o.dueAtMs])).toEqual([['a', T0 + 100]]);
  });

  it('a wall clock stepped forward while the host sleeps: what came due in the step goes within wallClockRecheckMs', () => {
    // The host of the shell and the simulator: one timer on the monotonic clock for nextDeadlineMs, its wait
    // measured on the wall clock when armed. The wall clock (behind by 9 s) is stepped to true time at mono 200.
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 8_000));
    let offsetMs = 0;
    const wall = (mono: number): number => T0 + mono + offsetMs;
    let mono = 0;
    let wakeAt = h.drain().nextDeadlineMs! - wall(mono);
    for (let wakes = 0; h.orders.length === 0 && wakes < 100; wakes++) {
      if (mono < 200 && wakeAt >= 200) {
        mono = 200;
        offsetMs = 9_000; // the step: the timer already armed keeps its wait
      }
      mono = Math.max(mono, wakeAt);
      h.advance(wall(mono));
      const next = h.drain().nextDeadlineMs;
      if (next === null) break;
      wakeAt = mono + Math.max(0, next - wall(mono));
    }
    expect(h.orders.map((o) => o.jobId)).toEqual(['a']);
    expect(h.nowMs).toBeLessThanOrEqual(T0 + 9_200 + nodeLimits.wallClockRecheckMs);
  });

  it("a new schedule whose next occurrence already ran (a clock behind) skips it and the job goes on", () => {
    const h = new Harness();
    h.setup();
    const cron = (expr: string) => ({ kind: 'cron' as const, cron: expr, timezone: 'UTC', startAtMs: null });
    h.advance(T0 + 1);
    create(h, once('c', 0, { schedule: cron('*/5 * * * * *'), misfire: 'fire_once' }));
    h.advance(T0 + 5_000);
    const [first] = h.orders;
    expect(first).toMatchObject({ jobId: 'c', scheduledAtMs: T0 + 5_000 });
    h.started(first!);
    h.finish(first!, ok(T0 + 5_010));
    h.flushNow();
    expect(h.stores[0]!.getExecution('c', T0 + 5_000)?.state).toBe('SUCCEEDED');
    // A patch stamped by a node whose wall clock is behind: the new schedule's next occurrence is the one that ran.
    h.must(0, { type: 'patch_job', nowMs: T0 + 4_500, id: 'c', patch: { schedule: cron('* * * * * *') } });
    expect(h.stores[0]!.getJob('c')!.nextFireAtMs).toBe(T0 + 5_000);
    h.advance(T0 + 6_000);
    h.flushNow();
    h.advance(T0 + 6_000);
    expect(h.orders.map((o) => o.scheduledAtMs)).toEqual([T0 + 5_000, T0 + 6_000]);
    expect(h.applied('skipped')).toHaveLength(1);
  });

  it('a retryable failure arms the next attempt at finishedAt + backoff, same occurrence key', () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100));
    h.advance(T0 + 100);
    h.started(h.orders[0]!);
    h.finish(h.orders[0]!, retryable(T0 + 150));
    h.advance(T0 + 200);
    expect(outcomes(h)).toMatchObject([{ jobId: 'a', attempt: 1, result: 'retry', retryAtMs: T0 + 250 }]);
    h.advance(T0 + 249);
    expect(h.orders).toHaveLength(1);
    h.advance(T0 + 250);
    expect(h.orders.map((o) => [o.key, o.attempt, o.dueAtMs])).toEqual([
      [`a\n${T0 + 100}`, 1, T0 + 100],
      [`a\n${T0 + 100}`, 2, T0 + 250],
    ]);
  });
});

describe('NodeCore group commit', () => {
  it('folds a fired record into its outcome when the callback finishes before the flush', () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100, { schedule: { kind: 'every', everyMs: 1_000, startAtMs: T0 + 100 } }));
    h.advance(T0 + 100);
    h.started(h.orders[0]!, T0 + 101);
    h.finish(h.orders[0]!, ok(T0 + 105));
    h.advance(T0 + 100 + stallLimits.engineItemsDelayMs + 5);
    expect(h.applied('fired')).toHaveLength(0);
    expect(outcomes(h)).toMatchObject([{ jobId: 'a', attempt: 1, result: 'succeeded', startedAtMs: T0 + 101 }]);
    expect(h.core.counters.folded).toBe(1);
  });

  it('a record refused in a way that proves it never applied is proposed again while the shard is led in that term', () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100));
    h.advance(T0 + 100);
    h.started(h.orders[0]!, T0 + 101);
    h.finish(h.orders[0]!, ok(T0 + 105));
    h.holdLog = true;
    h.advance(T0 + 100 + stallLimits.engineItemsDelayMs + 5);
    expect(h.held.map((p) => p.command.type)).toEqual(['outcomes']);
    // Raft refuses it (a leadership transfer in progress): it provably never applied.
    const refused = h.held.splice(0)[0]!;
    h.core.proposalDone(refused.ticket, { ok: false, error: new PunctualError('unavailable', 'transfer in progress', [], 'proposal_refused') });
    h.drain();
    h.advance(h.nowMs + nodeLimits.recordRetryMs);
    expect(h.held.map((p) => p.command)).toEqual([refused.command]);
    h.releaseLog();
    expect(h.stores[0]!.getJob('a')!.state).toBe('SUCCEEDED');
  });

  it('a fired record refused, its outcome in before the retry: the outcome carries it, never applying first', () => {
    const h = new Harness();
    h.setup();
    h.advance(T0 + 1);
    create(h, once('c', 0, { schedule: { kind: 'cron', cron: '* * * * * *', timezone: 'UTC', startAtMs: null } }));
    h.advance(T0 + 1_000);
    const [o] = h.orders;
    h.started(o!, T0 + 1_000);
    h.holdLog = true;
    h.advance(T0 + 1_000 + stallLimits.engineItemsDelayMs + 5);
    expect(h.held.map((p) => p.command.type)).toEqual(['fired']);
    // Raft refuses it (a leadership transfer in progress); the callback ends before its retry is due.
    const refused = h.held.splice(0)[0]!;
    h.core.proposalDone(refused.ticket, { ok: false, error: new PunctualError('unavailable', 'transfer in progress', [], 'proposal_refused') });
    h.drain();
    h.finish(o!, ok(h.nowMs + 1));
    h.advance(h.nowMs + stallLimits.engineItemsDelayMs + 2);
    h.advance(h.nowMs + nodeLimits.recordRetryMs + 2);
    // The log takes what was proposed, in that order (the refusal has ended).
    h.releaseLog();
    h.advance(h.nowMs + nodeLimits.recordRetryMs + 2);
    expect(h.stores[0]!.getExecution('c', T0 + 1_000)?.state).toBe('SUCCEEDED');
    expect(outcomes(h).map((i) => [i.scheduledAtMs, i.startedAtMs])).toEqual([[T0 + 1_000, T0 + 1_000]]);
  });

  it('a refused record is given up when the shard is no longer led (the next leader fires the occurrence again)', () => {
    const h = new Harness();
    const refused = heldRecord(h, 'a');
    h.core.proposalDone(refused.ticket, { ok: false, error: new PunctualError('unavailable', 'transfer in progress', [], 'proposal_refused') });
    h.core.leaderStop(0);
    h.drain();
    h.advance(h.nowMs + 10 * nodeLimits.recordRetryMs);
    expect(h.held).toEqual([]);
    // A timeout proves nothing (it may still apply): never proposed again either.
    const t = new Harness();
    const timedOut = heldRecord(t, 'b');
    t.core.proposalDone(timedOut.ticket, { ok: false, error: new PunctualError('unavailable', 'timed out', [], 'proposal_timeout') });
    t.drain();
    t.advance(t.nowMs + 10 * nodeLimits.recordRetryMs);
    expect(t.held).toEqual([]);
  });

  it('a slow callback gets its fired record alone once the items delay is over', () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100, { schedule: { kind: 'every', everyMs: 1_000, startAtMs: T0 + 100 } }));
    h.advance(T0 + 100);
    h.started(h.orders[0]!, T0 + 100);
    h.advance(T0 + 100 + stallLimits.engineItemsDelayMs);
    expect(h.applied('fired')).toHaveLength(1);
    expect(h.stores[0]!.getExecution('a', T0 + 100)!.state).toBe('RUNNING');
    h.finish(h.orders[0]!, ok(T0 + 300));
    h.advance(T0 + 300 + stallLimits.engineItemsDelayMs);
    expect(outcomes(h)).toHaveLength(1);
    expect(outcomes(h)[0]!.startedAtMs).toBeUndefined();
    expect(h.core.counters.folded).toBe(0);
  });

  it("a one-off's first fired record is held up to firedHoldMs for its outcome", () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100));
    h.advance(T0 + 100);
    h.started(h.orders[0]!, T0 + 100);
    h.advance(T0 + 100 + stallLimits.firedHoldMs - 1);
    expect(h.applied('fired')).toHaveLength(0);
    expect(h.core.heldCount()).toBe(1);
    h.finish(h.orders[0]!, ok(h.nowMs));
    h.advance(h.nowMs + stallLimits.engineItemsDelayMs);
    expect(h.applied('fired')).toHaveLength(0);
    expect(outcomes(h)).toMatchObject([{ result: 'succeeded', startedAtMs: T0 + 100 }]);
    expect(h.stores[0]!.getJob('a')!.state).toBe('SUCCEEDED');
  });

  it('merges concurrent creates of one shard into one command, each caller getting its own items', () => {
    const h = new Harness();
    h.setup();
    const before = h.applied('create_jobs').length;
    const a = h.client(0, { type: 'create_jobs', nowMs: h.nowMs, shard: 0, jobs: [once('a', T0 + 1_000)] });
    const b = h.client(0, { type: 'create_jobs', nowMs: h.nowMs, shard: 0, jobs: [once('b', T0 + 1_000), once('c', T0 + 1_000)] });
    h.flushNow();
    expect(h.applied('create_jobs').length - before).toBe(1);
    const ids = (op: number) => {
      const r = h.replies.get(op)!;
      if (!r.ok) throw r.error;
      return (r.applied.result as { items: Array<{ job: { id: string } }> }).items.map((i) => i.job.id);
    };
    expect(ids(a)).toEqual(['a']);
    expect(ids(b)).toEqual(['b', 'c']);
  });

  it("a pause of a one-off whose callback is out is refused by the state machine: the fired record goes first", () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100));
    h.advance(T0 + 100);
    h.started(h.orders[0]!);
    expect(h.stores[0]!.getJob('a')!.state).toBe('PENDING'); // the fired record is held
    const op = h.client(0, { type: 'pause_job', nowMs: h.nowMs, id: 'a' });
    h.flushNow();
    const types = h.log.map((l) => l.command.type);
    expect(types.slice(-2)).toEqual(['fired', 'pause_job']);
    const r = h.replies.get(op)!;
    expect(r.ok).toBe(true);
    const result = (r as { applied: { result: { result: { ok: boolean; message?: string } } } }).applied.result.result;
    expect(result.ok).toBe(false);
    expect(result.message).toMatch(/RUNNING/);
  });

  it('refuses client operations once closing, and proposes everything held on flushAll', () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100));
    h.advance(T0 + 100);
    h.started(h.orders[0]!);
    h.core.closeProposals();
    const op = h.client(0, { type: 'cancel_job', nowMs: h.nowMs, id: 'a' });
    expect(h.replies.get(op)).toMatchObject({ ok: false, error: { code: 'unavailable', reason: 'shutting_down' } });
    h.core.flushAll(h.nowMs);
    h.drain();
    expect(h.applied('fired')).toHaveLength(1);
    expect(h.core.idle()).toBe(true);
  });
});

describe('NodeCore back-pressure', () => {
  it('orders at most dispatchQueuedMax not started; the rest wait due, none dropped', () => {
    Object.assign(queueLimits as Record<string, number>, { dispatchQueuedMax: 3 });
    const h = new Harness();
    h.setup();
    create(h, ...Array.from({ length: 10 }, (_, i) => once(`j${i}`, T0 + 100)));
    h.advance(T0 + 100);
    expect(h.orders).toHaveLength(3);
    expect(h.core.queueDepths()).toMatchObject({ dispatchQueued: 3, dueBacklog: 7 });
    expect(h.drain().nextFireAtMs).toBe(T0 + 100 + queueLimits.holdBackRetryMs);
    for (const o of h.orders.slice(0)) h.started(o);
    h.advance(T0 + 105);
    expect(h.orders).toHaveLength(6);
    for (let round = 0; round < 5 && h.orders.length < 10; round++) {
      for (const o of h.orders) if (h.core.overlayState(h.stores[0]!.getJob(o.jobId)!) === 'QUEUED') h.started(o);
      h.advance(h.nowMs + 5);
    }
    expect(new Set(h.orders.map((o) => o.jobId)).size).toBe(10);
    expect(h.orders).toHaveLength(10);
  });

  it('refuses client writes 429 past proposerCommandsMax; the ones admitted all apply', () => {
    Object.assign(queueLimits as Record<string, number>, { proposerCommandsMax: 2 });
    const h = new Harness();
    h.setup();
    const ops = [1, 2, 3].map((i) => h.client(0, { type: 'create_jobs', nowMs: h.nowMs, shard: 0, jobs: [once(`j${i}`, T0 + 1_000)] }));
    expect(h.replies.get(ops[2]!)).toMatchObject({ ok: false, error: { code: 'rate_limited', reason: 'proposer_queue_full' } });
    h.flushNow();
    expect(h.replies.get(ops[0]!)?.ok).toBe(true);
    expect(h.replies.get(ops[1]!)?.ok).toBe(true);
  });
});

describe('NodeCore boundary', () => {
  it('is deterministic: the same inputs give the same outputs', () => {
    const run = (): unknown => {
      const h = new Harness(2, 7);
      h.setup();
      for (let i = 0; i < 20; i++) h.must(i % 2, { type: 'create_jobs', nowMs: h.nowMs, shard: i % 2, jobs: [once(`j${i}`, T0 + 10 * i)] });
      h.advance(T0 + 100);
      for (const o of h.orders) h.finish(o, o.jobId.endsWith('3') ? retryable(h.nowMs) : ok(h.nowMs));
      h.advance(T0 + 2_000);
      return { orders: h.orders, log: h.log.map((l) => [l.shard, l.command.type]) };
    };
    expect(run()).toEqual(run());
  });

  it('gives a ready() with no input since the last one empty, with that one\'s deadlines; the next input counts again', () => {
    const h = new Harness();
    h.setup();
    h.client(0, { type: 'create_jobs', nowMs: h.nowMs, shard: 0, jobs: [once('a', T0 + 100)] });
    // The create waits for its flush: asked again without an input, the core says the same.
    const waiting = h.core.ready();
    expect(waiting).toMatchObject({ propose: [], withdraw: [], dispatch: [], replies: [], flushAtMs: T0 });
    expect(h.core.ready()).toEqual(waiting);
    h.flushNow();
    const armed = h.core.ready();
    expect(armed).toMatchObject({ propose: [], dispatch: [], nextDeadlineMs: T0 + 100, nextFireAtMs: T0 + 100, flushAtMs: null });
    expect(h.core.ready()).toEqual(armed);
    h.advance(T0 + 100);
    expect(h.orders.map((o) => o.jobId)).toEqual(['a']);
    expect(h.core.ready().nextFireAtMs).not.toBe(T0 + 100);
  });

  it('refuses inputs a host must not send: an outcome for no order, an unknown shard, a time that is not a number', () => {
    const h = new Harness();
    expect(() => h.core.dispatchOutcome(`x\n${T0}`, ok(T0))).toThrow(AssertionError);
    expect(() => h.core.leaderStart(5, 1, T0)).toThrow(AssertionError);
    expect(() => h.core.tick(Number.NaN)).toThrow(AssertionError);
  });
});

describe('NodeCore fire: the records held from the arming command', () => {
  /** Counts the store's reads of jobs and executions from here on. */
  function countReads(h: Harness): { jobs: number; executions: number } {
    const n = { jobs: 0, executions: 0 };
    const s = h.stores[0]!;
    const getJob = s.getJob.bind(s);
    const getExecution = s.getExecution.bind(s);
    s.getJob = (id) => (n.jobs++, getJob(id));
    s.getExecution = (id, at) => (n.executions++, getExecution(id, at));
    return n;
  }

  it('a created job fires on the record its create wrote: no read of the job or its execution', () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100));
    const reads = countReads(h);
    h.advance(T0 + 100);
    expect(h.orders).toHaveLength(1);
    expect(h.orders[0]!.delivery.body).toEqual(new Uint8Array([1, 2, 3]));
    expect(reads).toEqual({ jobs: 0, executions: 0 });
  });

  it('holds no record past its bounds: a payload over armedRecordPayloadBytesMax, a wheel at armedRecordsHeldMax', () => {
    const big = new Harness();
    big.setup();
    const payload = new Uint8Array(queueLimits.armedRecordPayloadBytesMax + 1).fill(32);
    create(big, once('a', T0 + 100, { payload }));
    const bigReads = countReads(big);
    big.advance(T0 + 100);
    expect(big.orders[0]!.delivery.body).toEqual(payload);
    expect(bigReads).toEqual({ jobs: 1, executions: 1 });

    const full = new Harness();
    full.setup();
    (queueLimits as { armedRecordsHeldMax: number }).armedRecordsHeldMax = 1;
    create(full, once('a', T0 + 100), once('b', T0 + 100));
    const fullReads = countReads(full);
    full.advance(T0 + 100);
    expect(full.orders.map((o) => o.jobId).sort()).toEqual(['a', 'b']);
    expect(fullReads).toEqual({ jobs: 1, executions: 1 }); // the first arm held its records, the second found one timer
  });

  it('a payload patched between arm and fire: the new payload is sent', () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100));
    h.must(0, { type: 'patch_job', nowMs: h.nowMs, id: 'a', patch: { payload: new Uint8Array([9, 9]) } });
    h.advance(T0 + 100);
    expect(h.orders).toHaveLength(1);
    expect(h.orders[0]!.delivery.body).toEqual(new Uint8Array([9, 9]));
  });

  it('a misfire threshold patched between arm and fire: the late occurrence is decided on the new one', () => {
    const h = new Harness();
    h.setup();
    const every = { kind: 'every' as const, everyMs: 60_000, startAtMs: T0 + 100 };
    create(h, once('a', T0 + 100, { schedule: every, misfire: 'skip', misfireThresholdMs: 1_000 }));
    h.must(0, { type: 'patch_job', nowMs: h.nowMs, id: 'a', patch: { misfireThresholdMs: 30_000 } });
    h.advance(T0 + 100 + 5_000); // 5 s late: missed under the old threshold, not under the new one
    expect(h.orders.map((o) => o.scheduledAtMs)).toEqual([T0 + 100]);
    expect(h.applied('skipped')).toHaveLength(0);
  });

  it('a job rescheduled between arm and fire fires at its new time with the new record, not at the old one', () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100, { schedule: { kind: 'every', everyMs: 1_000, startAtMs: T0 + 100 } }));
    h.must(0, { type: 'patch_job', nowMs: h.nowMs, id: 'a', patch: { schedule: { kind: 'every', everyMs: 5_000, startAtMs: T0 + 2_000 }, payload: new Uint8Array([7]) } });
    h.advance(T0 + 1_999);
    expect(h.orders).toHaveLength(0);
    h.advance(T0 + 2_000);
    expect(h.orders.map((o) => [o.scheduledAtMs, [...o.delivery.body]])).toEqual([[T0 + 2_000, [7]]]);
  });

  it('a job paused, or cancelled, between arm and fire is not fired', () => {
    for (const type of ['pause_job', 'cancel_job'] as const) {
      const h = new Harness();
      h.setup();
      create(h, once('a', T0 + 100, { schedule: { kind: 'every', everyMs: 1_000, startAtMs: T0 + 100 } }));
      h.must(0, { type, nowMs: h.nowMs, id: 'a' });
      h.advance(T0 + 3_000);
      expect(h.orders, type).toHaveLength(0);
    }
  });

  it('a retry fires on the execution its outcome wrote; a payload patched before it is the one sent', () => {
    const h = new Harness();
    h.setup();
    create(h, once('a', T0 + 100));
    h.advance(T0 + 100);
    h.started(h.orders[0]!, T0 + 100);
    h.finish(h.orders[0]!, retryable(T0 + 110));
    h.advance(T0 + 110 + stallLimits.engineItemsDelayMs + 5);
    const retry = h.stores[0]!.getExecution('a', T0 + 100)!;
    expect(retry).toMatchObject({ state: 'QUEUED', attempt: 1 });
    h.must(0, { type: 'patch_job', nowMs: h.nowMs, id: 'a', patch: { payload: new Uint8Array([5]) } });
    h.advance(retry.retryAtMs!);
    expect(h.orders.map((o) => [o.attempt, [...o.delivery.body]])).toEqual([[1, [1, 2, 3]], [2, [5]]]);
  });
});
