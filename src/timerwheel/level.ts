/**
 * One level of the hierarchical wheel (Kafka's TimingWheel): `wheelSize` buckets of `tickMs` each. Its overflow
 * (parent) level is created lazily, the first time a deadline falls beyond this level's span, and its tick is
 * this level's whole span (tickMs x wheelSize).
 *
 * A level holds a deadline when its slot index, floor(deadline / tickMs), is less than wheelSize slots past the
 * slot of the current time; the window of live slots therefore never wraps onto a bucket still in use.
 */
export class WheelLevel {
  private overflowLevel: WheelLevel | null = null;

  /**
   * @param firstBucket id of this level's slot 0; slot s is bucket firstBucket + s.
   * @param createBuckets allocates `wheelSize` consecutive bucket ids and returns the first one.
   */
  constructor(
    readonly tickMs: number,
    readonly wheelSize: number,
    readonly firstBucket: number,
    private readonly createBuckets: (count: number) => number,
  ) {}

  get spanMs(): number {
    return this.tickMs * this.wheelSize;
  }

  /** The bucket that holds `deadlineMs` at time `currentMs`, or -1 when it lies beyond this level's window. */
  bucketFor(deadlineMs: number, currentMs: number): number {
    const slot = Math.floor(deadlineMs / this.tickMs);
    if (slot - Math.floor(currentMs / this.tickMs) >= this.wheelSize) return -1;
    const wrapped = slot % this.wheelSize;
    return this.firstBucket + (wrapped < 0 ? wrapped + this.wheelSize : wrapped);
  }

  overflow(): WheelLevel {
    if (this.overflowLevel === null) {
      const first = this.createBuckets(this.wheelSize);
      this.overflowLevel = new WheelLevel(this.spanMs, this.wheelSize, first, this.createBuckets);
    }
    return this.overflowLevel;
  }

  /** Levels created so far, this one included (for tests and the README's figures). */
  depth(): number {
    return this.overflowLevel === null ? 1 : 1 + this.overflowLevel.depth();
  }
}
