/**
 * Timer entries as a struct of arrays with integer handles (TigerBeetle habit: no object per timer).
 * One entry costs 8 (deadline) + 8 (seq) + 4 + 4 (links) + 4 (bucket) bytes in typed arrays plus one key slot,
 * instead of an object per timer with a boxed deadline, so a million timers stay cheap to hold and to collect.
 * Freed handles are reused through a free list threaded through `next`.
 *
 * Bucket lists are circular and doubly linked through `next`/`prev`, with a sentinel handle allocated from the
 * same pool, so unlinking an entry is O(1) and needs no branch for head or tail.
 */

import { assert } from '../core/assert.js';

/** The "no handle" value of a link or bucket field. */
export const NIL = -1;

const initialCapacity = 1024;

export class EntryPool<K> {
  /** `capacityMax`: the pool never grows past this many handles (timers and bucket sentinels). */
  constructor(readonly capacityMax: number = Number.MAX_SAFE_INTEGER) {
    assert(Number.isInteger(capacityMax), 'pool capacityMax must be an integer');
    assert(capacityMax >= 1, 'pool capacityMax must be positive');
  }

  deadlineMs = new Float64Array(initialCapacity);
  /** Insertion sequence number: ties between equal deadlines fire in this order. */
  seq = new Float64Array(initialCapacity);
  next = new Int32Array(initialCapacity);
  prev = new Int32Array(initialCapacity);
  /** Bucket id of the entry while it is linked in a bucket; NIL otherwise. */
  bucket = new Int32Array(initialCapacity);
  /** Key of each live entry; `undefined` once freed so the pool does not keep keys alive. */
  readonly keys: (K | undefined)[] = [];
  private freeHead = NIL;
  private used = 0;

  get capacity(): number {
    return this.deadlineMs.length;
  }

  alloc(): number {
    if (this.freeHead !== NIL) {
      const h = this.freeHead;
      this.freeHead = this.next[h];
      return h;
    }
    if (this.used === this.capacity) this.grow();
    this.keys.push(undefined);
    return this.used++;
  }

  release(h: number): void {
    this.keys[h] = undefined;
    this.bucket[h] = NIL;
    this.next[h] = this.freeHead;
    this.freeHead = h;
  }

  /** A new empty circular list: a sentinel that points at itself. */
  newSentinel(): number {
    const h = this.alloc();
    this.next[h] = h;
    this.prev[h] = h;
    this.bucket[h] = NIL;
    return h;
  }

  /** Appends h at the tail of the list of `sentinel`. */
  linkBefore(sentinel: number, h: number): void {
    const tail = this.prev[sentinel];
    this.next[tail] = h;
    this.prev[h] = tail;
    this.next[h] = sentinel;
    this.prev[sentinel] = h;
  }

  unlink(h: number): void {
    const before = this.prev[h];
    const after = this.next[h];
    this.next[before] = after;
    this.prev[after] = before;
  }

  /** Doubling keeps appends amortized O(1), up to capacityMax: the caller checks its own limit before alloc. */
  private grow(): void {
    assert(this.capacity < this.capacityMax, 'timer entry pool is at its capacity');
    const capacity = Math.min(this.capacity * 2, this.capacityMax);
    this.deadlineMs = copyGrown(this.deadlineMs, new Float64Array(capacity));
    this.seq = copyGrown(this.seq, new Float64Array(capacity));
    this.next = copyGrown(this.next, new Int32Array(capacity));
    this.prev = copyGrown(this.prev, new Int32Array(capacity));
    this.bucket = copyGrown(this.bucket, new Int32Array(capacity));
  }
}

function copyGrown<T extends Float64Array | Int32Array>(from: T, to: T): T {
  to.set(from);
  return to;
}
