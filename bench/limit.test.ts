import { describe, expect, it } from 'vitest';
import { counterSum } from './limit.js';

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
