/**
 * Punctual's timer: Kafka's hierarchical timing wheel, pure and synchronous. The host feeds it time through
 * `advanceTo(nowMs)` and arms one real timer at `nextDeadlineMs()`; nothing here reads a clock.
 *
 * Layout: level 0 has `wheelSize` buckets of `tickMs`; each level lazily creates a parent whose tick is its
 * whole span, so deadlines years ahead cost a few extra levels, not memory per millisecond. Deadlines at or
 * before the current time go to one "due" bucket. Every non-empty bucket sits in a min-heap of buckets keyed by a
 * lower bound of its deadlines (exact unless that bucket's earliest entry was cancelled or replaced).
 * `advanceTo` pops every bucket whose key is <= nowMs, fires the entries that are due and re-adds the others,
 * which then land in a finer level (a higher-level bucket is flushed when its earliest deadline comes).
 *
 * Firing is exact: a key fires in the first advanceTo(t) with t >= its deadline, never earlier or later, whatever
 * tickMs is; tickMs and wheelSize only trade bucket granularity against re-adds.
 */
import { assert } from '../core/assert.js';
import { queueLimits } from '../core/limits.js';
import { BucketHeap } from './bucket-heap.js';
import { EntryPool, NIL } from './entry-pool.js';
import { WheelLevel } from './level.js';

export interface TimerWheelOptions {
  /** Width of a level-0 bucket in ms (default 1). */
  tickMs?: number;
  /** Buckets per level (default 64). */
  wheelSize?: number;
  /** Timers held at most (default queueLimits.wheelEntriesMax): adding one more is a programmer error; check `full`. */
  entriesMax?: number;
}

/** Pool handles beyond entriesMax kept for bucket sentinels: 64 levels of wheelSize buckets cover any allowed span. */
const levelsMax = 64;

/** Deadlines and times must be finite and at most this far from 0 so that slot arithmetic stays exact. */
export const wheelTimeAbsMaxMs = Number.MAX_SAFE_INTEGER;

const dueBucket = 0;

export class TimerWheel<K> {
  private readonly pool: EntryPool<K>;
  readonly entriesMax: number;
  private readonly handles = new Map<K, number>();
  private readonly heap = new BucketHeap();
  /** Bucket id -> sentinel handle of its list. */
  private readonly sentinels: number[] = [];
  /** Bucket id -> number of entries linked in it. */
  private readonly counts: number[] = [];
  private readonly level0: WheelLevel;
  private nowMs: number;
  private seqNext = 0;

  constructor(startMs: number, options: TimerWheelOptions = {}) {
    assertTime(startMs, 'startMs');
    const tickMs = options.tickMs ?? 1;
    const wheelSize = options.wheelSize ?? 64;
    assert(Number.isFinite(tickMs), 'tickMs must be finite');
    assert(tickMs > 0, 'tickMs must be positive');
    assert(Number.isInteger(wheelSize), 'wheelSize must be an integer');
    assert(wheelSize >= 2, 'wheelSize must be at least 2');
    this.entriesMax = options.entriesMax ?? queueLimits.wheelEntriesMax;
    assert(Number.isInteger(this.entriesMax), 'entriesMax must be an integer');
    assert(this.entriesMax >= 1, 'entriesMax must be positive');
    this.pool = new EntryPool<K>(this.entriesMax + levelsMax * wheelSize + 1);
    this.nowMs = startMs;
    const createBuckets = (count: number): number => this.createBuckets(count);
    assert(createBuckets(1) === dueBucket, 'the due bucket must be bucket 0');
    this.level0 = new WheelLevel(tickMs, wheelSize, createBuckets(wheelSize), createBuckets);
  }

  /** Number of pending timers. */
  get size(): number {
    return this.handles.size;
  }

  /** At entriesMax timers: a new key cannot be added (replacing or cancelling one still can). */
  get full(): boolean {
    return this.handles.size >= this.entriesMax;
  }

  /** The largest time passed to advanceTo (or startMs). */
  get currentMs(): number {
    return this.nowMs;
  }

  /** Levels created so far (level 0 included); grows lazily with the farthest deadline ever added. */
  get levels(): number {
    return this.level0.depth();
  }

  /** Adds or replaces the timer of `key`. A deadline at or before the wheel's current time is due on the next advanceTo. O(1). */
  add(key: K, deadlineMs: number): void {
    assertTime(deadlineMs, 'deadlineMs');
    let h = this.handles.get(key);
    if (h === undefined) {
      assert(!this.full, 'timer wheel is full');
      h = this.pool.alloc();
      this.pool.keys[h] = key;
      this.handles.set(key, h);
    } else {
      this.detach(h);
    }
    this.pool.deadlineMs[h] = deadlineMs;
    this.pool.seq[h] = this.seqNext++;
    this.place(h);
  }

  /** Removes the timer of key; returns whether it existed. O(1). */
  cancel(key: K): boolean {
    const h = this.handles.get(key);
    if (h === undefined) return false;
    this.detach(h);
    this.handles.delete(key);
    this.pool.release(h);
    return true;
  }

  has(key: K): boolean {
    return this.handles.has(key);
  }

  deadlineOf(key: K): number | undefined {
    const h = this.handles.get(key);
    return h === undefined ? undefined : this.pool.deadlineMs[h];
  }

  /**
   * Moves time to nowMs (never backwards: a smaller value does not move time) and returns every key whose
   * deadline <= nowMs, in deterministic order: by deadline, then by insertion order (a replaced key counts as
   * newly inserted). With nowMs below currentMs, only keys added since with a deadline <= nowMs can be returned.
   * At most `max` keys are returned (the first ones of that order): the others stay, due, for the next call, so a
   * host whose backlog is full takes only what it has room for.
   * Cost: O(popped buckets x log(buckets) + re-added entries + d log d) for d due keys.
   */
  advanceTo(nowMs: number, max: number = Infinity): K[] {
    assert(max >= 0, 'advanceTo max must not be negative');
    assertTime(nowMs, 'nowMs');
    if (this.heap.topKeyMs() > nowMs) {
      // The common case for a host ticking every ms: nothing is due, so no bucket is touched.
      if (nowMs > this.nowMs) this.nowMs = nowMs;
      return [];
    }
    const popped = this.popBucketsUpTo(nowMs);
    if (nowMs > this.nowMs) this.nowMs = nowMs;
    if (popped.length === 0) return [];
    const deadlines = this.pool.deadlineMs;
    const due: number[] = [];
    for (const h of popped) {
      if (deadlines[h] <= nowMs) due.push(h);
      else this.place(h);
    }
    return this.fire(due, max);
  }

  /**
   * A time at or before the earliest pending deadline, or null when empty, so the host arms one timer.
   * Exact (equal to the earliest deadline) unless the earliest entry of its bucket was cancelled or replaced:
   * then it is that removed deadline, earlier than the true one. Waking then and calling advanceTo re-adds the
   * bucket's entries, after which the value is exact again. After advanceTo(t) it is always null or > t, unless
   * that call's `max` left due keys behind (then it is <= t).
   */
  nextDeadlineMs(): number | null {
    return this.heap.size === 0 ? null : this.heap.topKeyMs();
  }

  /** Links h into the bucket its deadline belongs to at the current time. */
  private place(h: number): void {
    const deadlineMs = this.pool.deadlineMs[h];
    let bucket = dueBucket;
    if (deadlineMs > this.nowMs) {
      let level = this.level0;
      bucket = level.bucketFor(deadlineMs, this.nowMs);
      while (bucket < 0) {
        level = level.overflow();
        bucket = level.bucketFor(deadlineMs, this.nowMs);
      }
    }
    this.pool.linkBefore(this.sentinels[bucket], h);
    this.pool.bucket[h] = bucket;
    this.counts[bucket]++;
    this.heap.offer(bucket, deadlineMs);
  }

  /** Unlinks h from its bucket; an emptied bucket leaves the heap so nextDeadlineMs never reports it. */
  private detach(h: number): void {
    const bucket = this.pool.bucket[h];
    assert(bucket !== NIL, 'detach of an entry that is in no bucket');
    this.pool.unlink(h);
    this.pool.bucket[h] = NIL;
    if (--this.counts[bucket] === 0) this.heap.remove(bucket);
  }

  /** Empties every bucket whose key is <= nowMs and returns its entries (unlinked, to be fired or re-added). */
  private popBucketsUpTo(nowMs: number): number[] {
    const popped: number[] = [];
    const next = this.pool.next;
    while (this.heap.size > 0 && this.heap.topKeyMs() <= nowMs) {
      const bucket = this.heap.pop();
      const sentinel = this.sentinels[bucket];
      for (let h = next[sentinel]; h !== sentinel; h = next[h]) popped.push(h);
      next[sentinel] = sentinel;
      this.pool.prev[sentinel] = sentinel;
      this.counts[bucket] = 0;
    }
    return popped;
  }

  /**
   * Sorts the due handles by (deadline, seq), frees the first `max` and returns their keys; the rest go back to
   * the due bucket with their seq, so the order of a later call is the same.
   */
  private fire(due: number[], max: number): K[] {
    const { deadlineMs, seq, keys } = this.pool;
    due.sort((a, b) => deadlineMs[a] - deadlineMs[b] || seq[a] - seq[b]);
    const n = Math.min(due.length, max);
    for (let i = n; i < due.length; i++) this.place(due[i]);
    const fired: K[] = new Array<K>(n);
    for (let i = 0; i < n; i++) {
      const h = due[i];
      const key = keys[h] as K;
      fired[i] = key;
      this.handles.delete(key);
      this.pool.release(h);
    }
    return fired;
  }

  private createBuckets(count: number): number {
    const first = this.sentinels.length;
    for (let i = 0; i < count; i++) {
      this.sentinels.push(this.pool.newSentinel());
      this.counts.push(0);
    }
    return first;
  }
}

function assertTime(ms: number, name: string): void {
  assert(Number.isFinite(ms), `${name} must be a finite number`);
  assert(Math.abs(ms) <= wheelTimeAbsMaxMs, `${name} is out of range`);
}
