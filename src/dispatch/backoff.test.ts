import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { RetryPolicy } from '../scheduler/types.js';
import { retryDelayMs } from './backoff.js';

const policyArb = fc.record({
  maxAttempts: fc.integer({ min: 1, max: 100 }),
  initialBackoffMs: fc.integer({ min: 0, max: 100_000 }),
  maxBackoffMs: fc.integer({ min: 0, max: 24 * 60 * 60 * 1000 }),
  multiplier: fc.double({ min: 1, max: 10, noNaN: true }),
  jitter: fc.boolean(),
});
const attemptArb = fc.integer({ min: 1, max: 200 });
const randArb = fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true });

function base(policy: RetryPolicy, attempt: number): number {
  return retryDelayMs({ ...policy, jitter: false }, attempt, null, 0);
}

describe('retryDelayMs', () => {
  it('follows initial * multiplier^(attempt-1), capped by maxBackoffMs', () => {
    const p: RetryPolicy = { maxAttempts: 10, initialBackoffMs: 1000, maxBackoffMs: 60_000, multiplier: 2, jitter: false };
    expect([1, 2, 3, 4, 5, 6, 7, 8].map((a) => retryDelayMs(p, a, null, 0.5))).toEqual([
      1000, 2000, 4000, 8000, 16_000, 32_000, 60_000, 60_000,
    ]);
    expect(retryDelayMs({ ...p, multiplier: 1.5 }, 2, null, 0)).toBe(1500);
    expect(retryDelayMs(p, 10_000, null, 0)).toBe(60_000); // 2^9999 overflows to Infinity, then is capped
  });

  it('is monotone in the attempt without jitter', () => {
    fc.assert(
      fc.property(policyArb, attemptArb, (policy, attempt) => {
        expect(base(policy, attempt + 1)).toBeGreaterThanOrEqual(base(policy, attempt));
      }),
    );
  });

  it('never exceeds maxBackoffMs without a Retry-After', () => {
    fc.assert(
      fc.property(policyArb, attemptArb, randArb, (policy, attempt, rand) => {
        const d = retryDelayMs(policy, attempt, null, rand);
        expect(d).toBeLessThanOrEqual(policy.maxBackoffMs);
        expect(d).toBeGreaterThanOrEqual(0);
        expect(Number.isInteger(d)).toBe(true);
      }),
    );
  });

  it('keeps equal jitter within [d/2, d] of the unjittered delay d', () => {
    fc.assert(
      fc.property(policyArb, attemptArb, randArb, (policy, attempt, rand) => {
        const d = base(policy, attempt);
        const j = retryDelayMs({ ...policy, jitter: true }, attempt, null, rand);
        expect(j).toBeGreaterThanOrEqual(d / 2);
        expect(j).toBeLessThanOrEqual(d);
      }),
    );
    const p: RetryPolicy = { maxAttempts: 5, initialBackoffMs: 1000, maxBackoffMs: 60_000, multiplier: 2, jitter: true };
    expect(retryDelayMs(p, 1, null, 0)).toBe(500);
    expect(retryDelayMs(p, 1, null, 0.5)).toBe(750);
    expect(retryDelayMs(p, 1, null, 0.999999)).toBe(1000);
  });

  it('is at least the Retry-After, even above maxBackoffMs', () => {
    fc.assert(
      fc.property(policyArb, attemptArb, randArb, fc.integer({ min: 0, max: 3_600_000 }), (policy, attempt, rand, ra) => {
        const d = retryDelayMs(policy, attempt, ra, rand);
        expect(d).toBeGreaterThanOrEqual(ra);
        expect(d).toBe(Math.max(ra, retryDelayMs(policy, attempt, null, rand)));
      }),
    );
  });

  it('rejects programmer errors', () => {
    const p: RetryPolicy = { maxAttempts: 5, initialBackoffMs: 1, maxBackoffMs: 2, multiplier: 2, jitter: true };
    expect(() => retryDelayMs(p, 0, null, 0)).toThrow(/attempt/);
    expect(() => retryDelayMs(p, 1.5, null, 0)).toThrow(/attempt/);
    expect(() => retryDelayMs(p, 1, null, 1)).toThrow(/rand01/);
  });
});
