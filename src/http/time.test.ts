import { describe, expect, it } from 'vitest';
import { httpLimits } from '../core/limits.js';
import { renderTime, renderTimeOrNull } from './time.js';

describe('renderTime', () => {
  it('renders every instant as Date#toISOString does, whether it was rendered a moment ago or not', () => {
    const instants = [0, 1_764_576_000_000, 1_764_576_000_001, 253_402_300_799_999, -0];
    // More distinct instants than are kept, then each again in another order: every answer is the instant's own.
    const many = Array.from({ length: httpLimits.renderedTimesMax * 3 }, (_, i) => 1_764_576_000_000 + i * 1_000);
    for (const ms of [...instants, ...many, ...many.reverse(), ...instants, ...instants]) {
      expect(renderTime(ms)).toBe(new Date(ms).toISOString());
    }
    expect(renderTimeOrNull(null)).toBeNull();
    expect(() => renderTime(Number.NaN)).toThrow(RangeError);
  });
});
