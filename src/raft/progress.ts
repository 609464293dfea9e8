/**
 * The leader's view of each follower (etcd's tracker/progress.go and inflights.go, written afresh):
 *  - probe: we do not know where the follower's log matches; send one append at a time and wait.
 *  - replicate: the follower is in sync; stream appends optimistically, bounded by in-flight count and bytes.
 *  - snapshot: a snapshot is on its way; send nothing else until it lands or fails.
 */
import { assert } from '../core/assert.js';
import type { LogIndex, NodeId } from './types.js';

export type ProgressState = 'probe' | 'replicate' | 'snapshot';

/** A ring of the last index of each append in flight, with its payload bytes. */
export class Inflights {
  private readonly lastIndexes: number[] = [];
  private readonly sizes: number[] = [];
  private start = 0;
  private n = 0;
  bytes = 0;

  constructor(
    readonly countMax: number,
    /** 0: no byte limit. */
    readonly bytesMax: number,
  ) {
    assert(countMax > 0, 'maxInflightMsgs must be positive');
  }

  get count(): number {
    return this.n;
  }

  add(lastIndex: LogIndex, bytes: number): void {
    assert(!this.full(), 'inflights: add while full');
    const at = (this.start + this.n) % this.countMax;
    this.lastIndexes[at] = lastIndex;
    this.sizes[at] = bytes;
    this.n++;
    this.bytes += bytes;
  }

  /** Frees every append whose last index is <= to (the follower acknowledged through `to`). */
  freeLE(to: LogIndex): void {
    while (this.n > 0 && this.lastIndexes[this.start]! <= to) {
      this.bytes -= this.sizes[this.start]!;
      this.start = (this.start + 1) % this.countMax;
      this.n--;
    }
    if (this.n === 0) this.start = 0;
  }

  /**
   * Frees the oldest append (etcd's FreeFirstOne): a follower that answers heartbeats but whose whole window
   * is unacknowledged has lost those appends, and without a free slot the leader would never send again.
   */
  freeFirstOne(): void {
    if (this.n === 0) return;
    this.bytes -= this.sizes[this.start]!;
    this.start = (this.start + 1) % this.countMax;
    this.n--;
    if (this.n === 0) this.start = 0;
  }

  full(): boolean {
    return this.n === this.countMax || (this.bytesMax > 0 && this.bytes >= this.bytesMax);
  }

  reset(): void {
    this.start = 0;
    this.n = 0;
    this.bytes = 0;
  }
}

export class Progress {
  match = 0 as LogIndex;
  next: LogIndex;
  state: ProgressState = 'probe';
  /** In snapshot state: the index of the snapshot being sent. */
  pendingSnapshot = 0 as LogIndex;
  /** Heard from since the last CheckQuorum round. */
  recentActive = false;
  /** In probe state: an append is out, wait for its answer (or a heartbeat answer) before the next. */
  probeSent = false;
  /** The latest heartbeat round (leader tick) this follower answered: the lease counts from it. */
  leaseAckTick = Number.NEGATIVE_INFINITY;
  readonly inflights: Inflights;

  constructor(
    readonly id: NodeId,
    next: LogIndex,
    countMax: number,
    bytesMax: number,
    public isLearner: boolean,
  ) {
    this.next = next;
    this.inflights = new Inflights(countMax, bytesMax);
  }

  private resetState(state: ProgressState): void {
    this.probeSent = false;
    this.pendingSnapshot = 0 as LogIndex;
    this.state = state;
    this.inflights.reset();
  }

  becomeProbe(): void {
    if (this.state === 'snapshot') {
      const pending = this.pendingSnapshot;
      this.resetState('probe');
      this.next = Math.max(this.match + 1, pending + 1) as LogIndex;
    } else {
      this.resetState('probe');
      this.next = (this.match + 1) as LogIndex;
    }
  }

  becomeReplicate(): void {
    this.resetState('replicate');
    this.next = (this.match + 1) as LogIndex;
  }

  becomeSnapshot(index: LogIndex): void {
    this.resetState('snapshot');
    this.pendingSnapshot = index;
  }

  /** Records an append of `count` entries (bytes of payload) just sent. */
  sentEntries(count: number, bytes: number): void {
    if (this.state === 'replicate') {
      if (count > 0) {
        this.next = (this.next + count) as LogIndex;
        this.inflights.add((this.next - 1) as LogIndex, bytes);
      }
    } else if (this.state === 'probe') {
      this.probeSent = true;
    }
  }

  /** The follower acknowledged through n. Returns whether match moved. */
  maybeUpdate(n: LogIndex): boolean {
    let updated = false;
    if (this.match < n) {
      this.match = n;
      this.probeSent = false;
      updated = true;
    }
    if (this.next < n + 1) this.next = (n + 1) as LogIndex;
    return updated;
  }

  /**
   * The follower rejected an append at prevIndex `rejected`, hinting that its log matches at most up to
   * `matchHint`. Returns false if the rejection is stale (an answer to an older append).
   */
  maybeDecrTo(rejected: LogIndex, matchHint: LogIndex): boolean {
    if (this.state === 'replicate') {
      if (rejected <= this.match) return false;
      this.next = (this.match + 1) as LogIndex;
      return true;
    }
    if (this.next - 1 !== rejected) return false;
    this.next = Math.max(Math.min(rejected, matchHint + 1), this.match + 1) as LogIndex;
    this.probeSent = false;
    return true;
  }

  isPaused(): boolean {
    switch (this.state) {
      case 'probe':
        return this.probeSent;
      case 'replicate':
        return this.inflights.full();
      case 'snapshot':
        return true;
    }
  }
}

/**
 * The smallest value that a majority of `values` reach (the quorum's "committed" index or tick). Sorts `values`
 * in place (callers pass an array built for the call); an insertion sort, as a group has a handful of voters.
 */
export function quorumMin(values: number[]): number {
  assert(values.length > 0, 'quorumMin of no voters');
  for (let i = 1; i < values.length; i++) {
    const v = values[i]!;
    let j = i - 1;
    for (; j >= 0 && values[j]! < v; j--) values[j + 1] = values[j]!;
    values[j + 1] = v;
  }
  return values[Math.floor(values.length / 2)]!;
}

export function quorumSize(voters: number): number {
  return Math.floor(voters / 2) + 1;
}
