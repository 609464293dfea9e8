/**
 * Log storage. Raft reads it (LogStorage) and never writes it: every write leaves the core through Ready and the
 * host performs it (LogStorageWriter). MemoryStorage is the in-memory implementation used by tests and the
 * simulator; src/store has the SQLite one. Both must pass runLogStorageContract (storage.contract.ts).
 */
import { assert } from '../core/assert.js';
import type { ConfState, Entry, HardState, LogIndex, Snapshot, Term } from './types.js';
import { noNode } from './types.js';

/** The entry asked for was compacted away: the caller needs the snapshot. */
export class StorageCompactedError extends Error {
  override name = 'StorageCompactedError';
}

/** The entry asked for is past the last index. */
export class StorageUnavailableError extends Error {
  override name = 'StorageUnavailableError';
}

export interface InitialState {
  readonly hardState: HardState;
  /** Membership as of the storage's snapshot (the core replays conf changes logged after it). */
  readonly confState: ConfState;
}

/** What the core reads. Every method is synchronous (better-sqlite3 is). */
export interface LogStorage {
  initialState(): InitialState;
  /**
   * Entries [lo, hi), stopping once their data exceeds maxBytes (but always at least one when lo < hi).
   * Throws StorageCompactedError if lo < firstIndex(), StorageUnavailableError if hi > lastIndex() + 1.
   */
  entries(lo: LogIndex, hi: LogIndex, maxBytes: number): Entry[];
  /**
   * The term of entry i, for firstIndex()-1 <= i <= lastIndex() (firstIndex()-1 is the snapshot's index).
   * Throws StorageCompactedError below that range and StorageUnavailableError above it.
   */
  term(i: LogIndex): Term;
  /** The first index still in the log (snapshot index + 1). */
  firstIndex(): LogIndex;
  /** The last index in the log (the snapshot index when the log is empty). */
  lastIndex(): LogIndex;
  /** The latest snapshot, or null when none is available right now (the core then asks the host for one). */
  snapshot(): Snapshot | null;
  /**
   * Optional: the conf_change entries among [lo, hi), in order (same bounds and errors as entries()). A restart
   * replays the conf changes logged since the snapshot; without this it reads every entry of that range.
   */
  confChanges?(lo: LogIndex, hi: LogIndex): Entry[];
}

/** What the host writes, following Ready. */
export interface LogStorageWriter extends LogStorage {
  /** Appends entries; any existing entry at or after entries[0].index is replaced (conflicting suffix). */
  append(entries: readonly Entry[]): void;
  /** Replaces the whole log by a snapshot received from the leader (newer than the current one). */
  applySnapshot(snapshot: Snapshot): void;
  /** Records a snapshot of the host's state machine at `index` (<= last index; the host's applied index). */
  createSnapshot(index: LogIndex, confState: ConfState, data: Uint8Array): Snapshot;
  /** Discards entries up to and including `index`; index must not exceed the snapshot's index. */
  compact(index: LogIndex): void;
  setHardState(hardState: HardState): void;
}

/**
 * The founding membership is a snapshot at index 1, term 0, with empty data, not log entries: a node that joins
 * later has an empty log, the leader's log starts at index 2, so the leader sends it this snapshot (or a later
 * one) and the joiner learns the membership from its confState. Without voters: nothing (index 0).
 */
export function bootstrapSnapshot(confState: ConfState): Snapshot {
  const index = (confState.voters.length > 0 ? 1 : 0) as LogIndex;
  return { metadata: { index, term: 0 as Term, confState }, data: new Uint8Array(0) };
}

export const emptyHardState: HardState = { term: 0 as Term, vote: noNode, commit: 0 as LogIndex };

/**
 * In-memory storage. ents[0] is a dummy standing for the snapshot (its index and term), like etcd's MemoryStorage,
 * so term(firstIndex - 1) needs no special case.
 */
export class MemoryStorage implements LogStorageWriter {
  private hard: HardState = emptyHardState;
  private snap: Snapshot;
  private ents: Entry[];

  /**
   * A fresh storage. With a bootstrap membership (the founding voters) the log starts with the bootstrap
   * snapshot (see bootstrapSnapshot); without one (a node that will join later) it is empty.
   */
  constructor(confState: ConfState = { voters: [], learners: [] }) {
    this.snap = bootstrapSnapshot(confState);
    this.ents = [dummy(this.snap.metadata.index, this.snap.metadata.term)];
  }

  initialState(): InitialState {
    return { hardState: this.hard, confState: this.snap.metadata.confState };
  }

  entries(lo: LogIndex, hi: LogIndex, maxBytes: number): Entry[] {
    const offset = this.ents[0]!.index;
    if (lo <= offset) throw new StorageCompactedError(`entries(${lo}): compacted through ${offset}`);
    if (hi > this.lastIndex() + 1) throw new StorageUnavailableError(`entries(${lo}, ${hi}): last is ${this.lastIndex()}`);
    assert(lo <= hi, `entries(${lo}, ${hi}): lo > hi`);
    return limitSize(this.ents.slice(lo - offset, hi - offset), maxBytes);
  }

  confChanges(lo: LogIndex, hi: LogIndex): Entry[] {
    return this.entries(lo, hi, Infinity).filter((e) => e.type === 'conf_change');
  }

  term(i: LogIndex): Term {
    const offset = this.ents[0]!.index;
    if (i < offset) throw new StorageCompactedError(`term(${i}): compacted through ${offset}`);
    if (i > this.lastIndex()) throw new StorageUnavailableError(`term(${i}): last is ${this.lastIndex()}`);
    return this.ents[i - offset]!.term;
  }

  firstIndex(): LogIndex {
    return (this.ents[0]!.index + 1) as LogIndex;
  }

  lastIndex(): LogIndex {
    return (this.ents[0]!.index + this.ents.length - 1) as LogIndex;
  }

  snapshot(): Snapshot | null {
    return this.snap;
  }

  append(entries: readonly Entry[]): void {
    if (entries.length === 0) return;
    for (let i = 1; i < entries.length; i++) {
      assert(entries[i]!.index === entries[i - 1]!.index + 1, 'append: entries not contiguous');
    }
    const first = this.firstIndex();
    const last = entries[entries.length - 1]!.index;
    if (last < first) return; // all already compacted into the snapshot
    const from = entries[0]!.index < first ? entries.slice(first - entries[0]!.index) : entries;
    const start = from[0]!.index;
    assert(start <= this.lastIndex() + 1, `append: gap (last ${this.lastIndex()}, got ${start})`);
    this.ents.length = start - this.ents[0]!.index; // drop the conflicting suffix
    for (const e of from) this.ents.push(e);
  }

  applySnapshot(snapshot: Snapshot): void {
    const index = snapshot.metadata.index;
    assert(index > this.snap.metadata.index, `applySnapshot(${index}): not newer than ${this.snap.metadata.index}`);
    this.snap = snapshot;
    this.ents = [dummy(index, snapshot.metadata.term)];
  }

  createSnapshot(index: LogIndex, confState: ConfState, data: Uint8Array): Snapshot {
    assert(index >= this.snap.metadata.index, `createSnapshot(${index}): older than ${this.snap.metadata.index}`);
    assert(index <= this.lastIndex(), `createSnapshot(${index}): past last index ${this.lastIndex()}`);
    this.snap = { metadata: { index, term: this.term(index), confState }, data };
    return this.snap;
  }

  compact(index: LogIndex): void {
    const offset = this.ents[0]!.index;
    if (index <= offset) return;
    assert(index <= this.snap.metadata.index, `compact(${index}): past the snapshot (${this.snap.metadata.index})`);
    const keep = this.ents.slice(index - offset + 1);
    this.ents = [dummy(index, this.ents[index - offset]!.term), ...keep];
  }

  setHardState(hardState: HardState): void {
    this.hard = hardState;
  }
}

function dummy(index: LogIndex, term: Term): Entry {
  return { index, term, type: 'normal', data: new Uint8Array(0), crc: 0 };
}

/** Keeps a prefix of entries whose data fits in maxBytes; always keeps the first. */
export function limitSize(entries: Entry[], maxBytes: number): Entry[] {
  if (entries.length === 0) return entries;
  let size = entries[0]!.data.length;
  let n = 1;
  while (n < entries.length) {
    size += entries[n]!.data.length;
    if (size > maxBytes) break;
    n++;
  }
  return n === entries.length ? entries : entries.slice(0, n);
}
