/**
 * Draining a shard before a planned leadership transfer (NodeCore.drainShard / undrainShard / shardDrained): the
 * next leader must find every callback this node sent recorded, so it sends none again.
 */
import { describe, expect, it } from 'vitest';
import { stallLimits } from '../core/limits.js';
import { Harness, T0, ok, once } from './testing/harness.js';

function create(h: Harness, shard: number, ...jobs: ReturnType<typeof once>[]): void {
  h.must(shard, { type: 'create_jobs', nowMs: h.nowMs, shard, jobs });
}

describe('NodeCore: draining a shard before a leadership transfer', () => {
  it('orders nothing new for the draining shard only; the attempts that waited go once it is undrained', () => {
    const h = new Harness(2);
    h.setup();
    create(h, 0, once('a', T0 + 100));
    create(h, 1, once('b', T0 + 100));
    h.core.drainShard(0, T0 + 50);
    h.drain();
    expect(h.core.shardDrained(0)).toBe(true); // nothing of it out or waiting to be recorded
    expect(h.core.shardDrained(1)).toBe(false); // not draining
    h.advance(T0 + 100);
    h.advance(T0 + 400);
    expect(h.orders.map((o) => o.jobId)).toEqual(['b']);
    expect(h.core.overlayState(h.stores[0]!.getJob('a')!)).toBe('QUEUED');
    h.core.undrainShard(0);
    expect(h.core.shardDrained(0)).toBe(false);
    h.advance(T0 + 401);
    expect(h.orders.map((o) => [o.jobId, o.attempt])).toEqual([
      ['b', 1],
      ['a', 1],
    ]);
    expect(h.orders[1]!.dueAtMs).toBe(T0 + 100);
  });

  it('withdraws the orders not started yet; drained once the host took them back; they go after the undrain', () => {
    const h = new Harness();
    h.setup();
    create(h, 0, once('a', T0 + 100));
    h.advance(T0 + 100);
    const order = h.orders[0]!;
    h.core.drainShard(0, T0 + 101);
    h.drain();
    expect(h.withdrawals).toEqual([{ key: order.key, shard: 0, reason: 'draining' }]);
    expect(h.core.shardDrained(0)).toBe(false); // the order is still out until the host answers
    h.core.dispatchWithdrawn(order.key);
    h.drain();
    expect(h.core.shardDrained(0)).toBe(true);
    expect(h.applied('fired')).toEqual([]); // never sent, nothing recorded
    h.advance(T0 + 300);
    expect(h.orders).toHaveLength(1);
    h.core.undrainShard(0);
    h.advance(T0 + 301);
    expect(h.orders).toHaveLength(2);
    expect(h.orders[1]).toMatchObject({ key: order.key, attempt: 1 });
    h.started(h.orders[1]!, T0 + 301);
    h.finish(h.orders[1]!, ok(T0 + 302));
    h.advance(T0 + 400);
    expect(h.stores[0]!.getExecution('a', T0 + 100)).toMatchObject({ state: 'SUCCEEDED', attempt: 1 });
  });

  it('an order the host had not taken yet is dropped from the outbox and waits like the others', () => {
    const h = new Harness();
    h.setup();
    create(h, 0, once('a', T0 + 100));
    h.core.tick(T0 + 100); // ordered, but ready() not taken yet
    h.core.drainShard(0, T0 + 100);
    const rd = h.drain();
    expect(h.orders).toEqual([]);
    expect(h.withdrawals).toEqual([]);
    expect(rd.nextFireAtMs).toBeNull();
    expect(h.core.shardDrained(0)).toBe(true);
    h.core.undrainShard(0);
    h.advance(T0 + 200);
    expect(h.orders.map((o) => o.jobId)).toEqual(['a']);
  });

  it('proposes the held fired records at once, and is drained only once the outcomes applied', () => {
    const h = new Harness();
    h.setup();
    create(h, 0, once('a', T0 + 100), once('b', T0 + 100));
    h.advance(T0 + 100);
    const [a, b] = h.orders;
    h.started(a!, T0 + 100);
    h.started(b!, T0 + 100);
    expect(h.core.heldCount()).toBe(2); // a one-off's fired record waits for its outcome
    h.core.drainShard(0, T0 + 101);
    h.drain();
    expect(h.core.heldCount()).toBe(0);
    h.advance(T0 + 101 + stallLimits.engineItemsDelayMs);
    expect(h.applied('fired').flatMap((c) => (c.type === 'fired' ? c.items.map((i) => i.jobId) : []))).toEqual(['a', 'b']);
    expect(h.core.shardDrained(0)).toBe(false); // callbacks still out
    h.finish(a!, ok(T0 + 120));
    h.finish(b!, ok(T0 + 121));
    expect(h.core.shardDrained(0)).toBe(false); // outcomes not proposed yet
    h.holdLog = true;
    h.advance(T0 + 121 + stallLimits.engineItemsDelayMs);
    expect(h.held.map((p) => p.command.type)).toEqual(['outcomes']);
    expect(h.core.shardDrained(0)).toBe(false); // proposed, not applied
    h.releaseLog();
    expect(h.core.shardDrained(0)).toBe(true);
    expect(h.stores[0]!.getExecution('a', T0 + 100)).toMatchObject({ state: 'SUCCEEDED' });
    expect(h.stores[0]!.getExecution('b', T0 + 100)).toMatchObject({ state: 'SUCCEEDED' });
  });

  it('a second drain of a draining shard changes nothing; undrain of a shard not draining does nothing', () => {
    const h = new Harness();
    h.setup();
    create(h, 0, once('a', T0 + 100));
    h.core.undrainShard(0);
    h.core.drainShard(0, T0 + 10);
    h.core.drainShard(0, T0 + 20);
    h.advance(T0 + 150);
    h.core.undrainShard(0);
    h.advance(T0 + 151);
    expect(h.orders.map((o) => o.jobId)).toEqual(['a']);
  });

  it('leaderStop ends the drain: the waiting attempts are the next leader\'s; a new term fires as usual', () => {
    const h = new Harness();
    h.setup();
    create(h, 0, once('a', T0 + 100), once('b', T0 + 500));
    h.core.drainShard(0, T0 + 50);
    h.advance(T0 + 100);
    h.core.leaderStop(0);
    h.drain();
    expect(h.core.shardDrained(0)).toBe(false);
    h.core.undrainShard(0); // the host's late undrain finds nothing to do
    h.advance(T0 + 200);
    expect(h.orders).toEqual([]);
    h.core.leaderStart(0, 2, T0 + 200);
    h.advance(T0 + 200);
    h.advance(T0 + 500);
    expect(h.orders.map((o) => [o.jobId, o.fencingToken])).toEqual([
      ['a', '0.2'],
      ['b', '0.2'],
    ]);
  });
});
