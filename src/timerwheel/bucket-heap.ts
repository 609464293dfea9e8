/**
 * An indexed binary min-heap of bucket ids (Kafka's DelayQueue of buckets, made pure). It holds buckets, not
 * entries, so its size is bounded by levels x slots (+1 for the due bucket) whatever the number of timers.
 *
 * A bucket's key is a lower bound of the deadlines in it: `offer` only ever lowers it, and a cancel leaves it
 * alone (rescanning the bucket would cost O(bucket size)). A bucket is in the heap exactly while it is non-empty.
 */
import { assert } from '../core/assert.js';

export class BucketHeap {
  /** Heap order: bucket ids. */
  private readonly heap: number[] = [];
  /** Bucket id -> index in `heap`, or -1 when absent. */
  private readonly pos: number[] = [];
  /** Bucket id -> key (ms); meaningful only while the bucket is in the heap. */
  private readonly keyMs: number[] = [];

  get size(): number {
    return this.heap.length;
  }

  has(bucket: number): boolean {
    return (this.pos[bucket] ?? -1) >= 0;
  }

  /** The smallest key, or Infinity when empty. */
  topKeyMs(): number {
    return this.heap.length === 0 ? Infinity : this.keyMs[this.heap[0]];
  }

  /** Inserts `bucket` with `keyMs`, or lowers its key if it is already in and the new key is smaller. */
  offer(bucket: number, keyMs: number): void {
    while (this.pos.length <= bucket) this.pos.push(-1);
    while (this.keyMs.length <= bucket) this.keyMs.push(0);
    const i = this.pos[bucket];
    if (i < 0) {
      this.keyMs[bucket] = keyMs;
      this.heap.push(bucket);
      this.pos[bucket] = this.heap.length - 1;
      this.siftUp(this.heap.length - 1);
    } else if (keyMs < this.keyMs[bucket]) {
      this.keyMs[bucket] = keyMs;
      this.siftUp(i);
    }
  }

  pop(): number {
    assert(this.heap.length > 0, 'pop from an empty bucket heap');
    const top = this.heap[0];
    this.removeAt(0);
    return top;
  }

  remove(bucket: number): void {
    const i = this.pos[bucket] ?? -1;
    assert(i >= 0, 'remove of a bucket that is not in the heap');
    this.removeAt(i);
  }

  private removeAt(i: number): void {
    const removed = this.heap[i];
    const last = this.heap.pop() as number;
    this.pos[removed] = -1;
    if (i === this.heap.length) return;
    this.heap[i] = last;
    this.pos[last] = i;
    this.siftDown(i);
    this.siftUp(this.pos[last]);
  }

  /** Ties break on the bucket id so the order never depends on insertion history. */
  private less(a: number, b: number): boolean {
    const ka = this.keyMs[a];
    const kb = this.keyMs[b];
    return ka < kb || (ka === kb && a < b);
  }

  private siftUp(i: number): void {
    const bucket = this.heap[i];
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.less(bucket, this.heap[parent])) break;
      this.moveTo(this.heap[parent], i);
      i = parent;
    }
    this.moveTo(bucket, i);
  }

  private siftDown(i: number): void {
    const bucket = this.heap[i];
    const n = this.heap.length;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && this.less(this.heap[child + 1], this.heap[child])) child++;
      if (!this.less(this.heap[child], bucket)) break;
      this.moveTo(this.heap[child], i);
      i = child;
    }
    this.moveTo(bucket, i);
  }

  private moveTo(bucket: number, i: number): void {
    this.heap[i] = bucket;
    this.pos[bucket] = i;
  }
}
