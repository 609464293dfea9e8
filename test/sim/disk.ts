/**
 * A simulated disk for one Raft group on one node. Writes land in `live` (what the process reads back) and in a
 * journal of unsynced operations; sync() replays the journal onto `durable`. A crash keeps `durable` plus, on a
 * torn crash, a random prefix of the journal (writes reach the platter in order, some of them before the power
 * went), and the restarted process reads that back. Built on MemoryStorage, the core's tested storage.
 */
import type { Prng } from '../../src/core/prng.js';
import { MemoryStorage } from '../../src/raft/index.js';
import type {
  ConfState,
  Entry,
  HardState,
  InitialState,
  LogIndex,
  LogStorageWriter,
  Snapshot,
  Term,
} from '../../src/raft/index.js';

type Op =
  | { readonly kind: 'append'; readonly entries: readonly Entry[] }
  | { readonly kind: 'applySnapshot'; readonly snapshot: Snapshot }
  | { readonly kind: 'createSnapshot'; readonly index: LogIndex; readonly confState: ConfState; readonly data: Uint8Array }
  | { readonly kind: 'compact'; readonly index: LogIndex }
  | { readonly kind: 'setHardState'; readonly hardState: HardState };

export class SimDisk implements LogStorageWriter {
  private live: MemoryStorage;
  private durable: MemoryStorage;
  private journal: Op[] = [];
  syncs = 0;

  /**
   * `markerSnapshots` (the node's disks, as src/store/raft-storage.ts): a stored snapshot past the bootstrap with
   * empty data is a compaction marker, and snapshot() answers null for it so Raft asks the host for a real one.
   */
  constructor(
    bootstrap: ConfState,
    private readonly markerSnapshots = false,
  ) {
    this.live = new MemoryStorage(bootstrap);
    this.durable = new MemoryStorage(bootstrap);
  }

  initialState(): InitialState {
    return this.live.initialState();
  }
  entries(lo: LogIndex, hi: LogIndex, maxBytes: number): Entry[] {
    return this.live.entries(lo, hi, maxBytes);
  }
  term(i: LogIndex): Term {
    return this.live.term(i);
  }
  firstIndex(): LogIndex {
    return this.live.firstIndex();
  }
  lastIndex(): LogIndex {
    return this.live.lastIndex();
  }
  snapshot(): Snapshot | null {
    const snap = this.live.snapshot();
    if (this.markerSnapshots && snap !== null && snap.metadata.index > 1 && snap.data.length === 0) return null;
    return snap;
  }

  /** The stored snapshot, a marker included (what a restart reads). */
  storedSnapshot(): Snapshot {
    return this.live.snapshot()!;
  }

  append(entries: readonly Entry[]): void {
    if (entries.length === 0) return;
    this.write({ kind: 'append', entries });
  }
  applySnapshot(snapshot: Snapshot): void {
    this.write({ kind: 'applySnapshot', snapshot });
  }
  createSnapshot(index: LogIndex, confState: ConfState, data: Uint8Array): Snapshot {
    this.write({ kind: 'createSnapshot', index, confState, data });
    return this.live.snapshot()!;
  }
  compact(index: LogIndex): void {
    this.write({ kind: 'compact', index });
  }
  setHardState(hardState: HardState): void {
    this.write({ kind: 'setHardState', hardState });
  }

  /** The durable hard state (what a restart would read): for the checker. */
  durableHardState(): HardState {
    return this.durable.initialState().hardState;
  }

  unsyncedWrites(): number {
    return this.journal.length;
  }

  /** fsync: everything written so far survives a crash. */
  sync(): void {
    for (const op of this.journal) replay(this.durable, op);
    this.journal = [];
    this.syncs++;
  }

  /** Power loss. Returns how many unsynced writes were lost. */
  crash(rand: Prng, tornRate: number): number {
    const kept = this.journal.length > 0 && rand.nextFloat() < tornRate ? rand.int(this.journal.length + 1) : 0;
    for (const op of this.journal.slice(0, kept)) replay(this.durable, op);
    const lost = this.journal.length - kept;
    this.journal = [];
    this.live = cloneStorage(this.durable);
    return lost;
  }

  private write(op: Op): void {
    replay(this.live, op);
    this.journal.push(op);
  }
}

function replay(s: MemoryStorage, op: Op): void {
  switch (op.kind) {
    case 'append':
      s.append(op.entries);
      return;
    case 'applySnapshot':
      s.applySnapshot(op.snapshot);
      return;
    case 'createSnapshot':
      s.createSnapshot(op.index, op.confState, op.data);
      return;
    case 'compact':
      s.compact(op.index);
      return;
    case 'setHardState':
      s.setHardState(op.hardState);
      return;
  }
}

/** A copy through the public API: the snapshot, then the entries after it, then the hard state. */
export function cloneStorage(src: MemoryStorage): MemoryStorage {
  const snap = src.snapshot()!;
  const copy = new MemoryStorage({ voters: [], learners: [] });
  if (snap.metadata.index > 0) copy.applySnapshot(snap);
  const first = src.firstIndex();
  const last = src.lastIndex();
  if (last >= first) copy.append(src.entries(first, (last + 1) as LogIndex, Infinity));
  copy.setHardState(src.initialState().hardState);
  return copy;
}
