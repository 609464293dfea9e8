/**
 * Exact lateness percentiles: every sample is kept in a Float64Array and sorted once at the end. A bench run
 * holds at most a few million samples (8 bytes each), so exactness is cheaper than a bucketed histogram's
 * error analysis.
 */

/** A growable buffer of float samples (doubling, so appends are amortized O(1)). */
export class SampleBuffer {
  private values: Float64Array;
  private length = 0;

  constructor(initialCapacity = 1024) {
    this.values = new Float64Array(Math.max(1, initialCapacity));
  }

  get size(): number {
    return this.length;
  }

  push(value: number): void {
    if (this.length === this.values.length) {
      const grown = new Float64Array(this.values.length * 2);
      grown.set(this.values);
      this.values = grown;
    }
    this.values[this.length++] = value;
  }

  /** A sorted copy of the samples (ascending); the buffer itself is left as recorded. */
  sorted(): Float64Array {
    return this.values.slice(0, this.length).sort();
  }
}

/**
 * The nearest-rank percentile of ascending samples: the smallest sample such that at least q of all samples are
 * <= it. q in [0, 1]; q = 0 gives the minimum, q = 1 the maximum. NaN for no samples.
 */
export function percentile(sorted: Float64Array, q: number): number {
  if (!(q >= 0 && q <= 1)) throw new RangeError(`percentile q must be within [0, 1], got ${q}`);
  const n = sorted.length;
  if (n === 0) return Number.NaN;
  const rank = Math.max(1, Math.ceil(q * n));
  return sorted[Math.min(n, rank) - 1];
}

export interface LatenessSummary {
  count: number;
  minMs: number | null;
  meanMs: number | null;
  p50Ms: number | null;
  p90Ms: number | null;
  p99Ms: number | null;
  p999Ms: number | null;
  maxMs: number | null;
}

/** Summarizes samples (milliseconds); every figure is null when there are none (JSON has no NaN). */
export function summarize(samples: SampleBuffer | Float64Array): LatenessSummary {
  const sorted = samples instanceof SampleBuffer ? samples.sorted() : samples.slice().sort();
  const n = sorted.length;
  if (n === 0) {
    return { count: 0, minMs: null, meanMs: null, p50Ms: null, p90Ms: null, p99Ms: null, p999Ms: null, maxMs: null };
  }
  let sum = 0;
  for (let i = 0; i < n; i++) sum += sorted[i];
  return {
    count: n,
    minMs: sorted[0],
    meanMs: sum / n,
    p50Ms: percentile(sorted, 0.5),
    p90Ms: percentile(sorted, 0.9),
    p99Ms: percentile(sorted, 0.99),
    p999Ms: percentile(sorted, 0.999),
    maxMs: sorted[n - 1],
  };
}
