import { describe, expect, it } from 'vitest';
import { counterSum, histogramSummary } from './limit.js';

describe('histogramSummary', () => {
  const text = (counts: number[]): string =>
    ['1', '5', '10', '+Inf'].map((le, i) => `punctual_fire_lateness_ms_bucket{le="${le}"} ${counts[i]}`).join('\n');

  it('gives percentiles as bucket bounds, and with an earlier text only what was observed since', () => {
    // 20 samples <= 1 ms, then 10 more between 5 and 10 ms.
    const before = text([20, 20, 20, 20]);
    const after = text([20, 20, 30, 30]);
    expect(histogramSummary(before, 'punctual_fire_lateness_ms')?.p99Ms).toBe(1);
    expect(histogramSummary(after, 'punctual_fire_lateness_ms')?.p50Ms).toBe(1);
    const since = histogramSummary(after, 'punctual_fire_lateness_ms', before);
    expect(since?.count).toBe(10);
    expect(since?.p50Ms).toBe(10);
    expect(histogramSummary(before, 'punctual_fire_lateness_ms', before)).toBeNull();
  });
});

describe('counterSum', () => {
  it('sums a counter over several nodes\' /metrics texts, with or without labels, and ignores similar names', () => {
    const node = (cpu: string): string =>
      [
        '# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.',
        '# TYPE process_cpu_seconds_total counter',
        `process_cpu_seconds_total ${cpu}`,
        'process_cpu_seconds_total_other 99',
        'process_cpu_user_seconds_total 7',
      ].join('\n');
    expect(counterSum([node('1.5'), node('2.25')].join('\n'), 'process_cpu_seconds_total')).toBe(3.75);
    expect(counterSum('punctual_callbacks_total{outcome="succeeded"} 4\npunctual_callbacks_total{outcome="retryable"} 1', 'punctual_callbacks_total')).toBe(5);
  });

  it('is null when no node reports the counter', () => {
    expect(counterSum('', 'process_cpu_seconds_total')).toBeNull();
    expect(counterSum('process_cpu_user_seconds_total 7', 'process_cpu_seconds_total')).toBeNull();
  });
});
