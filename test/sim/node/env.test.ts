/** The whole-node simulator's environment on its own: agenda order, clocks, receivers, the workload. */
import { describe, expect, it } from 'vitest';
import { Prng } from '../../../src/core/prng.js';
import { checkJobSpec } from '../../../src/scheduler/check.js';
import { NodeClock } from './clock.js';
import { EventQueue } from './events.js';
import { SimReceivers } from './receivers.js';
import { Workload, jobSpecOf } from './workload.js';

describe('EventQueue', () => {
  it('pops by time, then in insertion order', () => {
    const q = new EventQueue<string>();
    q.push(5, 'c');
    q.push(1, 'a');
    q.push(5, 'd');
    q.push(1, 'b');
    q.push(9, 'e');
    const out: string[] = [];
    for (let e = q.popDue(5); e; e = q.popDue(5)) out.push(e.event);
    expect(out).toEqual(['a', 'b', 'c', 'd']);
    expect(q.peekMs()).toBe(9);
  });
});

describe('NodeClock', () => {
  it('monotonic time drifts and never jumps; the wall clock jumps both ways', () => {
    const c = new NodeClock(1000, 0.05, 3);
    expect(c.monoMs(2000)).toBeCloseTo(1050);
    expect(c.wallMs(2000)).toBe(2003);
    c.jump(-2500);
    expect(c.wallMs(2000)).toBe(-497);
    expect(c.monoMs(2000)).toBeCloseTo(1050);
    expect(c.trueTimeOfWall(0, 0)).toBe(2497);
    expect(c.trueTimeOfMono(1050, 0)).toBe(2000);
    c.resync(-4);
    expect(c.wallMs(2000)).toBe(1996);
  });
});

describe('SimReceivers', () => {
  const req = (r: number, attempt = 1) => ({ url: SimReceivers.url(r), dedupKey: 'j:1', attempt, fencingToken: '0.1', node: 'n1', sentMs: 100 });

  it('records every request that arrives, never a refused one', () => {
    const rec = new SimReceivers(new Prng(3), 5);
    rec.behaviours.splice(0, 5, 'ok', 'slow', 'failing', 'timeout', 'refusing');
    expect(rec.request(req(0)).kind).toBe('response');
    expect(rec.request(req(3)).kind).toBe('timeout');
    expect(rec.request(req(4)).kind).toBe('refused');
    const slow = rec.request(req(1));
    expect(slow.kind === 'response' && slow.atMs >= 300).toBe(true);
    const statuses = Array.from({ length: 40 }, () => rec.request(req(2))).map((a) => (a.kind === 'response' ? a.status : 0));
    expect(statuses.some((s) => s >= 500)).toBe(true);
    expect(statuses.some((s) => s === 200)).toBe(true);
    expect(rec.arrivals.filter((a) => a.receiver === 4)).toEqual([]);
    expect(rec.refused).toBe(1);
    expect(rec.arrivals[0]).toMatchObject({ receiver: 0, dedupKey: 'j:1', attempt: 1, fencingToken: '0.1', node: 'n1', sentMs: 100 });
    rec.healthy = true;
    expect(rec.request(req(3))).toMatchObject({ kind: 'response', status: 200 });
  });
});

describe('Workload', () => {
  it('a seed gives the same operations; every create is a valid job spec', () => {
    const a = new Workload(new Prng(9), 4);
    const b = new Workload(new Prng(9), 4);
    const opsA = Array.from({ length: 200 }, (_, i) => a.next(1_800_000_000_000 + i * 10));
    const opsB = Array.from({ length: 200 }, (_, i) => b.next(1_800_000_000_000 + i * 10));
    expect(opsB).toEqual(opsA);
    const kinds = new Set(opsA.map((o) => (o.kind === 'create' ? `create:${o.schedule.kind}` : o.kind)));
    for (const k of ['create:now', 'create:at', 'create:after', 'create:every', 'create:cron', 'cancel', 'pause', 'resume', 'run', 'patch']) {
      expect(kinds.has(k)).toBe(true);
    }
    for (const op of opsA) if (op.kind === 'create') expect(() => checkJobSpec(jobSpecOf(op, 1_800_000_000_000), 'jobs[0]')).not.toThrow();
  });
});
