/**
 * The Raft log as the core sees it: the stable part in storage plus an unstable tail (entries and maybe a
 * snapshot) that Ready hands to the host to persist. Modelled on etcd's raftLog/unstable, written afresh.
 */
import { assert } from '../core/assert.js';
import { entryCrcOk } from './crc32.js';
import type { LogStorage } from './storage.js';
import { StorageCompactedError, StorageUnavailableError, limitSize } from './storage.js';
import type { Entry, LogIndex, Snapshot, Term } from './types.js';

/** An entry read back from storage fails its checksum: the disk is corrupt. Fatal for the node. */
export class CorruptEntryError extends Error {
  override name = 'CorruptEntryError';
}

/** Entries and a snapshot not yet persisted. entries[0] has index `offset`. */
class Unstable {
  snapshot: Snapshot | null = null;
  entries: Entry[] = [];
  constructor(public offset: LogIndex) {}

  lastIndex(): LogIndex | null {
    if (this.entries.length > 0) return (this.offset + this.entries.length - 1) as LogIndex;
    return this.snapshot ? this.snapshot.metadata.index : null;
  }

  term(i: LogIndex): Term | null {
    if (i < this.offset) {
      const s = this.snapshot;
      return s && s.metadata.index === i ? s.metadata.term : null;
    }
    const e = this.entries[i - this.offset];
    return e ? e.term : null;
  }

  stableTo(i: LogIndex, t: Term): void {
    const term = this.term(i);
    // A conflicting append may have replaced the entry while the host was persisting it: keep the new one.
    if (term === null || term !== t || i < this.offset) return;
    this.entries = this.entries.slice(i - this.offset + 1);
    this.offset = (i + 1) as LogIndex;
  }

  stableSnapTo(i: LogIndex): void {
    if (this.snapshot && this.snapshot.metadata.index === i) this.snapshot = null;
  }

  restore(s: Snapshot): void {
    this.offset = (s.metadata.index + 1) as LogIndex;
    this.entries = [];
    this.snapshot = s;
  }

  truncateAndAppend(ents: readonly Entry[]): void {
    const first = ents[0]!.index;
    if (first === this.offset + this.entries.length) {
      for (const e of ents) this.entries.push(e);
    } else if (first <= this.offset) {
      // Replaces everything unstable; the host's append will truncate storage from `first` on.
      this.offset = first;
      this.entries = ents.slice();
    } else {
      this.entries = this.entries.slice(0, first - this.offset);
      for (const e of ents) this.entries.push(e);
    }
  }
}

export class RaftLog {
  readonly unstable: Unstable;
  committed: LogIndex;
  applied: LogIndex;

  constructor(readonly storage: LogStorage) {
    const first = storage.firstIndex();
    this.unstable = new Unstable((storage.lastIndex() + 1) as LogIndex);
    this.committed = (first - 1) as LogIndex;
    this.applied = (first - 1) as LogIndex;
  }

  firstIndex(): LogIndex {
    const s = this.unstable.snapshot;
    return s ? ((s.metadata.index + 1) as LogIndex) : this.storage.firstIndex();
  }

  lastIndex(): LogIndex {
    return this.unstable.lastIndex() ?? this.storage.lastIndex();
  }

  /** The last index known to be persisted with the current log's terms (the leader's own "match"). */
  stableIndex(): LogIndex {
    return this.unstable.snapshot ? (0 as LogIndex) : ((this.unstable.offset - 1) as LogIndex);
  }

  /** The term of entry i, or null if it is compacted or past the end. */
  term(i: LogIndex): Term | null {
    const u = this.unstable.term(i);
    if (u !== null) return u;
    if (i < this.firstIndex() - 1 || i > this.lastIndex()) return null;
    if (i >= this.unstable.offset && !this.unstable.snapshot) return null;
    try {
      return this.storage.term(i);
    } catch (err) {
      if (err instanceof StorageCompactedError || err instanceof StorageUnavailableError) return null;
      throw err;
    }
  }

  lastTerm(): Term {
    const t = this.term(this.lastIndex());
    assert(t !== null, 'the last entry has no term');
    return t;
  }

  matchTerm(i: LogIndex, t: Term): boolean {
    return this.term(i) === t;
  }

  /** Raft's "at least as up to date" (paper 5.4.1). */
  isUpToDate(lastIndex: LogIndex, lastTerm: Term): boolean {
    const myTerm = this.lastTerm();
    return lastTerm > myTerm || (lastTerm === myTerm && lastIndex >= this.lastIndex());
  }

  /** Appends leader entries after (prevIndex, prevTerm). Returns the last new index, or null on mismatch. */
  maybeAppend(prevIndex: LogIndex, prevTerm: Term, committed: LogIndex, ents: readonly Entry[]): LogIndex | null {
    if (!this.matchTerm(prevIndex, prevTerm)) return null;
    const lastNew = (prevIndex + ents.length) as LogIndex;
    const ci = this.findConflict(ents);
    if (ci !== 0) {
      assert(ci > this.committed, `conflict at ${ci} is within the committed prefix (${this.committed})`);
      this.append(ents.slice(ci - (prevIndex + 1)));
    }
    this.commitTo(Math.min(committed, lastNew) as LogIndex);
    return lastNew;
  }

  append(ents: readonly Entry[]): LogIndex {
    if (ents.length === 0) return this.lastIndex();
    assert(ents[0]!.index - 1 >= this.committed, `append at ${ents[0]!.index} overwrites committed ${this.committed}`);
    this.unstable.truncateAndAppend(ents);
    return this.lastIndex();
  }

  /** The index of the first entry whose term differs from ours (or that we lack), 0 if none. */
  findConflict(ents: readonly Entry[]): number {
    for (const e of ents) if (!this.matchTerm(e.index, e.term)) return e.index;
    return 0;
  }

  /**
   * The largest index <= `index` whose term is <= `term`, and that term: the leader and the follower both
   * use it to skip a whole term of mismatching entries per round trip.
   */
  findConflictByTerm(index: LogIndex, term: Term): [LogIndex, Term] {
    for (let i = index; i > 0; i--) {
      const t = this.term(i as LogIndex);
      if (t === null) return [i as LogIndex, 0 as Term];
      if (t <= term) return [i as LogIndex, t];
    }
    return [0 as LogIndex, 0 as Term];
  }

  commitTo(i: LogIndex): void {
    if (i <= this.committed) return;
    assert(i <= this.lastIndex(), `commitTo(${i}) past the last index ${this.lastIndex()}`);
    this.committed = i;
  }

  appliedTo(i: LogIndex): void {
    if (i === 0) return;
    assert(i <= this.committed, `appliedTo(${i}) past committed ${this.committed}`);
    assert(i >= this.applied, `appliedTo(${i}) goes back from ${this.applied}`);
    this.applied = i;
  }

  /** Entries [lo, hi) limited to maxBytes (at least one). Throws StorageCompactedError if lo was compacted. */
  slice(lo: LogIndex, hi: LogIndex, maxBytes: number): Entry[] {
    if (lo >= hi) return [];
    assert(hi <= this.lastIndex() + 1, `slice(${lo}, ${hi}) past the last index ${this.lastIndex()}`);
    if (lo < this.firstIndex()) throw new StorageCompactedError(`slice(${lo}): compacted`);
    const off = this.unstable.offset;
    let out: Entry[] = [];
    if (lo < off) {
      out = this.storage.entries(lo, Math.min(hi, off) as LogIndex, maxBytes);
      for (const e of out) if (!entryCrcOk(e)) throw new CorruptEntryError(`entry ${e.index} fails its crc`);
      if (out.length < Math.min(hi, off) - lo) return out; // hit the byte limit inside storage
    }
    if (hi > off) {
      const u = this.unstable.entries.slice(Math.max(lo, off) - off, hi - off);
      out = out.length > 0 ? out.concat(u) : u;
    }
    return limitSize(out, maxBytes);
  }

  entriesFrom(i: LogIndex, maxBytes: number): Entry[] {
    return this.slice(i, (this.lastIndex() + 1) as LogIndex, maxBytes);
  }

  hasPendingSnapshot(): boolean {
    return this.unstable.snapshot !== null;
  }

  /** Committed entries not yet applied; none while a snapshot waits to be installed. */
  nextCommittedEntries(maxBytes: number): Entry[] {
    if (this.hasPendingSnapshot()) return [];
    return this.slice((this.applied + 1) as LogIndex, (this.committed + 1) as LogIndex, maxBytes);
  }

  hasNextCommittedEntries(): boolean {
    return !this.hasPendingSnapshot() && this.committed > this.applied;
  }

  snapshot(): Snapshot | null {
    return this.unstable.snapshot ?? this.storage.snapshot();
  }

  restore(s: Snapshot): void {
    this.committed = s.metadata.index;
    this.unstable.restore(s);
  }
}
