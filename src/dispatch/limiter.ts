/**
 * The dispatcher's admission control: a FIFO counter + queue per concurrency key (a task name, or `job:{id}`),
 * then one global cap on requests in flight. O(1) per operation, no allocation per entry: the queues are
 * intrusive singly linked lists through `entry.queueNext`.
 *
 * An entry first waits for a slot of its key, then (holding it) for a global slot. A key at its limit only
 * queues its own entries, so a slow or hanging target never blocks another key (no head-of-line blocking).
 *
 * At most `queuedMax` entries wait (queueLimits.dispatchQueuedMax). The limiter never drops one: its caller (the
 * firing engine) checks full() and holds the occurrence back (armed, due) until an entry starts; acquiring into
 * a full queue is a programmer error.
 */
import { assert } from '../core/assert.js';
import { queueLimits } from '../core/limits.js';

export interface LimiterEntry {
  readonly concurrencyKey: string;
  /** The key's limit as this entry knows it; the newest entry of a key sets the key's limit. */
  readonly concurrencyLimit: number;
  /** Link of whichever queue holds the entry; owned by the limiter. */
  queueNext: LimiterEntry | null;
}

interface KeyState {
  limit: number;
  /** Entries holding a slot of this key: waiting for a global slot, or running. */
  active: number;
  head: LimiterEntry | null;
  tail: LimiterEntry | null;
}

export class ConcurrencyLimiter<T extends LimiterEntry> {
  private readonly keys = new Map<string, KeyState>();
  /** Entries holding their key slot, waiting for a global slot. */
  private readyHead: T | null = null;
  private readyTail: T | null = null;
  private runningCount = 0;
  private queuedCount = 0;
  private pumping = false;

  /** `start` is called once per entry, when it holds both slots; it may call release() synchronously. */
  constructor(
    private readonly globalMax: number,
    private readonly start: (entry: T) => void,
    readonly queuedMax: number = queueLimits.dispatchQueuedMax,
  ) {
    assert(globalMax >= 1, 'global limit must be >= 1');
    assert(queuedMax >= 1, 'queued limit must be >= 1');
  }

  /** queuedMax entries wait: acquire() must not be called until one starts. */
  full(): boolean {
    return this.queuedCount >= this.queuedMax;
  }

  running(): number {
    return this.runningCount;
  }

  /** Entries waiting for a slot (of their key or the global one). */
  queued(): number {
    return this.queuedCount;
  }

  acquire(entry: T): void {
    assert(entry.concurrencyLimit >= 1, 'concurrency limit must be >= 1');
    assert(!this.full(), 'acquire into a full limiter queue (the caller must hold back)');
    entry.queueNext = null;
    let state = this.keys.get(entry.concurrencyKey);
    if (state === undefined) {
      state = { limit: entry.concurrencyLimit, active: 0, head: null, tail: null };
      this.keys.set(entry.concurrencyKey, state);
    }
    // A changed limit (the task was updated) applies from now on, to the waiters too.
    state.limit = entry.concurrencyLimit;
    this.queuedCount++;
    if (state.tail === null) state.head = entry;
    else state.tail.queueNext = entry;
    state.tail = entry;
    this.admitFromKey(entry.concurrencyKey, state);
    this.pump();
  }

  /** The entry's request finished: free its key slot and its global slot. */
  release(entry: T): void {
    const state = this.keys.get(entry.concurrencyKey);
    assert(state !== undefined, 'release of an unknown key');
    assert(state.active > 0, 'release of a key with no active entry');
    assert(this.runningCount > 0, 'release with nothing running');
    this.runningCount--;
    state.active--;
    this.admitFromKey(entry.concurrencyKey, state);
    this.pump();
  }

  /** Removes and returns every waiting entry (close): they never start and need no release(). */
  drainQueued(): T[] {
    const drained: T[] = [];
    for (let e = this.readyHead; e !== null; e = e.queueNext as T | null) drained.push(e);
    for (const e of drained) this.keys.get(e.concurrencyKey)!.active--;
    this.readyHead = null;
    this.readyTail = null;
    for (const [key, state] of this.keys) {
      for (let e = state.head; e !== null; e = e.queueNext) drained.push(e as T);
      state.head = null;
      state.tail = null;
      if (state.active === 0) this.keys.delete(key);
    }
    this.queuedCount = 0;
    return drained;
  }

  /** Keys with state (for tests: a key with nothing active or waiting must not leak). */
  keyCount(): number {
    return this.keys.size;
  }

  private admitFromKey(key: string, state: KeyState): void {
    while (state.head !== null && state.active < state.limit) {
      const next = state.head as T;
      state.head = next.queueNext;
      if (state.head === null) state.tail = null;
      state.active++;
      this.pushReady(next);
    }
    if (state.active === 0 && state.head === null) this.keys.delete(key);
  }

  private pushReady(entry: T): void {
    entry.queueNext = null;
    if (this.readyTail === null) this.readyHead = entry;
    else this.readyTail.queueNext = entry;
    this.readyTail = entry;
  }

  /**
   * Starts ready entries while global slots are free. Not reentrant: a start() that releases synchronously
   * (an immediate failure) lands here again and returns; the outer loop goes on, so the stack stays flat.
   */
  private pump(): void {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (this.readyHead !== null && this.runningCount < this.globalMax) {
        const entry = this.readyHead;
        this.readyHead = entry.queueNext as T | null;
        if (this.readyHead === null) this.readyTail = null;
        entry.queueNext = null;
        this.queuedCount--;
        this.runningCount++;
        this.start(entry);
      }
    } finally {
      this.pumping = false;
    }
  }
}
