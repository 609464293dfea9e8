import { describe, expect, it } from 'vitest';
import { ManualClock, systemClock } from './clock.js';
import { PunctualError, invalid, notFound, provesNotApplied, toProblem } from './errors.js';
import { hash32, jobIdPattern, nodeIdPattern, shardOf } from './ids.js';
import { limits } from './limits.js';
import { createLogger } from './log.js';
import { Prng } from './prng.js';

describe('Prng', () => {
  it('replays the same stream from the same seed', () => {
    const a = new Prng(42);
    const b = new Prng(42);
    for (let i = 0; i < 1000; i++) expect(a.nextU32()).toBe(b.nextU32());
  });

  it('gives different streams for different seeds', () => {
    const a = new Prng(1);
    const b = new Prng(2);
    const same = Array.from({ length: 100 }, () => a.nextU32() === b.nextU32()).filter(Boolean).length;
    expect(same).toBeLessThan(3);
  });

  it('keeps int() inside its bound and covers it', () => {
    const r = new Prng(7);
    const seen = new Set<number>();
    for (let i = 0; i < 10_000; i++) {
      const v = r.int(10);
      expect(v).toBeGreaterThanOrEqual(0);
      expect(v).toBeLessThan(10);
      seen.add(v);
    }
    expect(seen.size).toBe(10);
    expect(() => r.int(0)).toThrow(RangeError);
  });

  it('forks independent but reproducible children', () => {
    const a = new Prng(9).fork();
    const b = new Prng(9).fork();
    expect(a.nextFloat()).toBe(b.nextFloat());
  });
});

describe('clock', () => {
  it('offsets the system clock', () => {
    const skewed = systemClock(60_000).nowMs();
    const real = Date.now();
    expect(skewed - real).toBeGreaterThanOrEqual(59_000);
  });

  it('moves a manual clock only by hand', () => {
    const c = new ManualClock(1000);
    c.advance(5);
    expect(c.nowMs()).toBe(1005);
    c.set(7);
    expect(c.nowMs()).toBe(7);
  });
});

describe('errors', () => {
  it('maps a validation error to problem+json with its field', () => {
    const p = toProblem(invalid('schedule.cron', 'bad field count'));
    expect(p).toMatchObject({ status: 400, code: 'invalid_argument', errors: [{ field: 'schedule.cron' }] });
    expect(p.type).toContain('invalid-argument');
  });

  it('hides unknown errors behind internal', () => {
    const p = toProblem(new Error('secret stack'));
    expect(p.status).toBe(500);
    expect(p.code).toBe('internal');
    expect(JSON.stringify(p)).not.toContain('secret stack');
  });

  it('gives each catalog code its status', () => {
    expect(notFound('job', 'x').status).toBe(404);
    expect(new PunctualError('conflict', 'c').status).toBe(409);
    expect(new PunctualError('payload_too_large', 'p').status).toBe(413);
  });

  it('carries the reason of a 503 or 429 into the problem, and says whether it proves the write never applied', () => {
    const timedOut = new PunctualError('unavailable', 'slow', [], 'proposal_timeout');
    expect(toProblem(timedOut)).toMatchObject({ status: 503, code: 'unavailable', reason: 'proposal_timeout' });
    expect(provesNotApplied(timedOut)).toBe(false);
    const full = new PunctualError('rate_limited', 'full', [], 'proposer_queue_full');
    expect(toProblem(full)).toMatchObject({ status: 429, code: 'rate_limited', reason: 'proposer_queue_full' });
    expect(provesNotApplied(full)).toBe(true);
    expect(provesNotApplied(new PunctualError('unavailable', 'lost', [], 'proposal_lost'))).toBe(true);
    expect(toProblem(new PunctualError('unavailable', 'no reason'))).not.toHaveProperty('reason');
    expect(provesNotApplied(new PunctualError('unavailable', 'no reason'))).toBe(false);
    expect(provesNotApplied(new Error('x'))).toBe(false);
  });
});

describe('ids', () => {
  it('hashes stably (the shard of a job must never change across versions)', () => {
    expect(hash32('')).toBe(0x811c9dc5);
    expect(hash32('job-1')).toBe(hash32('job-1'));
    expect(shardOf('job-1', 8)).toBe(hash32('job-1') % 8);
  });

  it('spreads ids over shards', () => {
    const counts = new Array(8).fill(0);
    for (let i = 0; i < 8000; i++) counts[shardOf(`job-${i}`, 8)]++;
    for (const c of counts) expect(c).toBeGreaterThan(700);
  });

  it('validates id patterns', () => {
    expect(nodeIdPattern.test('n1')).toBe(true);
    expect(nodeIdPattern.test('N1')).toBe(false);
    expect(jobIdPattern.test('a:b.c-d_e')).toBe(true);
    expect(jobIdPattern.test('a b')).toBe(false);
    expect(jobIdPattern.test('x'.repeat(129))).toBe(false);
  });
});

describe('limits and logs', () => {
  it('loads with consistent limits', () => {
    expect(limits.batchJobsMax).toBe(10_000);
  });

  it('writes one JSON line per record with msg and fields, honouring the level', () => {
    const lines: string[] = [];
    const log = createLogger({ level: 'info', write: (l) => lines.push(l) }).child({ node: 'n1' });
    log.debug('hidden');
    log.info('started', { port: 8080 });
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toMatchObject({ level: 'info', msg: 'started', node: 'n1', port: 8080 });
  });
});
