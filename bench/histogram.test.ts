import { describe, expect, it } from 'vitest';
import { percentile, SampleBuffer, summarize } from './histogram.js';

describe('percentile (nearest rank)', () => {
  const sorted = Float64Array.from([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);

  it('returns the smallest sample with at least q of the samples at or below it', () => {
    expect(percentile(sorted, 0.5)).toBe(5);
    expect(percentile(sorted, 0.9)).toBe(9);
    expect(percentile(sorted, 0.91)).toBe(10);
    expect(percentile(sorted, 0.99)).toBe(10);
    expect(percentile(sorted, 0)).toBe(1);
    expect(percentile(sorted, 1)).toBe(10);
  });

  it('is exact on a large set: p99 of 1..1000 is 990, p99.9 is 999', () => {
    const big = Float64Array.from({ length: 1000 }, (_, i) => i + 1);
    expect(percentile(big, 0.99)).toBe(990);
    expect(percentile(big, 0.999)).toBe(999);
    expect(percentile(big, 0.5)).toBe(500);
  });

  it('gives NaN for no samples and refuses q outside [0, 1]', () => {
    expect(percentile(new Float64Array(0), 0.5)).toBeNaN();
    expect(() => percentile(sorted, 1.5)).toThrow(RangeError);
    expect(() => percentile(sorted, Number.NaN)).toThrow(RangeError);
  });
});

describe('SampleBuffer and summarize', () => {
  it('grows past its capacity, keeps every sample, and sorts numerically (not as strings)', () => {
    const buf = new SampleBuffer(2);
    const values = [10, -0.5, 2.25, 100, 9, 3];
    for (const v of values) buf.push(v);
    expect(buf.size).toBe(6);
    expect(Array.from(buf.sorted())).toEqual([-0.5, 2.25, 3, 9, 10, 100]);
  });

  it('summarizes min, mean, percentiles and max from the raw samples', () => {
    const buf = new SampleBuffer();
    for (let i = 1000; i >= 1; i--) buf.push(i / 10); // 0.1 .. 100.0, pushed in reverse
    const s = summarize(buf);
    expect(s.count).toBe(1000);
    expect(s.minMs).toBeCloseTo(0.1, 10);
    expect(s.maxMs).toBeCloseTo(100, 10);
    expect(s.meanMs).toBeCloseTo(50.05, 10);
    expect(s.p50Ms).toBeCloseTo(50, 10);
    expect(s.p90Ms).toBeCloseTo(90, 10);
    expect(s.p99Ms).toBeCloseTo(99, 10);
    expect(s.p999Ms).toBeCloseTo(99.9, 10);
  });

  it('gives nulls (not NaN, which JSON cannot carry) for no samples', () => {
    const s = summarize(new SampleBuffer());
    expect(s).toEqual({ count: 0, minMs: null, meanMs: null, p50Ms: null, p90Ms: null, p99Ms: null, p999Ms: null, maxMs: null });
    expect(JSON.parse(JSON.stringify(s)).p99Ms).toBeNull();
  });

  it('one outlier in a thousand moves p999 and max but not p99', () => {
    const buf = new SampleBuffer();
    for (let i = 0; i < 999; i++) buf.push(1);
    buf.push(500);
    const s = summarize(buf);
    expect(s.p99Ms).toBe(1);
    expect(s.p999Ms).toBe(1);
    expect(s.maxMs).toBe(500);
    buf.push(400); // now 2 outliers in 1001: rank ceil(0.999 * 1001) = 1000 -> 400
    expect(summarize(buf).p999Ms).toBe(400);
  });
});
