/**
 * One shard group's log and hard state, in the node's SQLite file (`log` and `shard_meta` rows of that shard).
 * Shaped like etcd-raft's Storage so the Raft issue can reuse it: entries live in [firstIndex, lastIndex];
 * everything up to snapshotIndex was compacted away (term(snapshotIndex) is still known).
 *
 * Each entry carries a CRC-32 over (index, term, data); a mismatch on read throws LogCorruptionError, which is
 * fatal for the process (a corrupted log must never be applied).
 *
 * Single-node issue: the node appends a command and applies it in the SAME transaction that also advances
 * applied_index; the Raft issue splits append (persist) from apply (after commit).
 */
import type { Statement } from 'better-sqlite3';
import { assert } from '../core/assert.js';
import { crc32 } from './crc32.js';
import type { Db } from './db.js';

export interface LogEntry {
  index: number;
  term: number;
  data: Uint8Array;
}

export interface HardState {
  term: number;
  vote: string | null;
  commit: number;
}

export interface LogStorage {
  /** Appends entries (contiguous, first.index in [firstIndex, lastIndex + 1]); a conflicting suffix is replaced. */
  append(entries: LogEntry[]): void;
  /** Entries with index in [lo, hi), CRC-checked. */
  entries(lo: number, hi: number): LogEntry[];
  /** Term of entry i; null when i was compacted away (below snapshotIndex) or is past lastIndex. */
  term(index: number): number | null;
  firstIndex(): number;
  lastIndex(): number;
  /** Discards every entry with index <= i (i <= lastIndex); term(i) stays known. */
  compact(index: number): void;
  hardState(): HardState;
  setHardState(hs: HardState): void;
}

export class LogCorruptionError extends Error {
  override name = 'LogCorruptionError';
  readonly code = 'PUNCTUAL_LOG_CORRUPT';
}

const header = new DataView(new ArrayBuffer(16));
const headerBytes = new Uint8Array(header.buffer);

/** CRC-32 of (index, term, data): an entry moved to another index or term does not verify either. */
export function entryCrc(index: number, term: number, data: Uint8Array): number {
  header.setFloat64(0, index);
  header.setFloat64(8, term);
  return crc32(data, crc32(headerBytes));
}

interface MetaRow {
  term: number;
  vote: string | null;
  commit_index: number;
  applied_index: number;
  snapshot_index: number;
  snapshot_term: number;
}

function statements(db: Db) {
  const p = (sql: string): Statement => db.prepare(sql);
  return {
    ensureMeta: p('INSERT OR IGNORE INTO shard_meta (shard) VALUES (?)'),
    meta: p('SELECT * FROM shard_meta WHERE shard = ?'),
    setHard: p('UPDATE shard_meta SET term = ?, vote = ?, commit_index = ? WHERE shard = ?'),
    setCommit: p('UPDATE shard_meta SET commit_index = ? WHERE shard = ?'),
    setApplied: p('UPDATE shard_meta SET applied_index = ? WHERE shard = ?'),
    setSnapshot: p('UPDATE shard_meta SET snapshot_index = ?, snapshot_term = ? WHERE shard = ?'),
    maxIdx: p('SELECT max(idx) AS m FROM log WHERE shard = ?'),
    insert: p('INSERT INTO log (shard, idx, term, data, crc) VALUES (?, ?, ?, ?, ?)'),
    truncateFrom: p('DELETE FROM log WHERE shard = ? AND idx >= ?'),
    deleteUpTo: p('DELETE FROM log WHERE shard = ? AND idx <= ?'),
    range: p('SELECT idx, term, data, crc FROM log WHERE shard = ? AND idx >= ? AND idx < ? ORDER BY idx'),
    termOf: p('SELECT term FROM log WHERE shard = ? AND idx = ?'),
  };
}

export class SqliteLogStorage implements LogStorage {
  private readonly s: ReturnType<typeof statements>;

  constructor(
    db: Db,
    readonly shard: number,
  ) {
    this.s = statements(db);
    this.s.ensureMeta.run(shard);
  }

  private meta(): MetaRow {
    return this.s.meta.get(this.shard) as MetaRow;
  }

  firstIndex(): number {
    return this.meta().snapshot_index + 1;
  }

  lastIndex(): number {
    const m = (this.s.maxIdx.get(this.shard) as { m: number | null }).m;
    return m ?? this.meta().snapshot_index;
  }

  append(entries: LogEntry[]): void {
    if (entries.length === 0) return;
    const first = entries[0].index;
    const last = this.lastIndex();
    assert(first >= this.firstIndex(), `append at ${first} below firstIndex`);
    assert(first <= last + 1, `append at ${first} leaves a gap after ${last}`);
    if (first <= last) this.s.truncateFrom.run(this.shard, first);
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i];
      assert(e.index === first + i, 'entries must be contiguous');
      this.s.insert.run(this.shard, e.index, e.term, e.data, entryCrc(e.index, e.term, e.data));
    }
  }

  /** The node's single-writer fast path: appends one entry at lastIndex + 1 and returns its index. */
  appendNext(term: number, data: Uint8Array, lastIndex: number): number {
    const index = lastIndex + 1;
    this.s.insert.run(this.shard, index, term, data, entryCrc(index, term, data));
    return index;
  }

  entries(lo: number, hi: number): LogEntry[] {
    assert(lo >= this.firstIndex(), `entries from ${lo} were compacted`);
    const rows = this.s.range.all(this.shard, lo, hi) as Array<{ idx: number; term: number; data: Uint8Array; crc: number }>;
    const out: LogEntry[] = [];
    for (const r of rows) {
      const data = new Uint8Array(r.data.buffer, r.data.byteOffset, r.data.byteLength);
      if (entryCrc(r.idx, r.term, data) !== r.crc) {
        throw new LogCorruptionError(`log entry ${r.idx} of shard ${this.shard} fails its checksum`);
      }
      out.push({ index: r.idx, term: r.term, data });
    }
    return out;
  }

  term(index: number): number | null {
    const m = this.meta();
    if (index === m.snapshot_index) return m.snapshot_term;
    if (index < m.snapshot_index) return null;
    const row = this.s.termOf.get(this.shard, index) as { term: number } | undefined;
    return row === undefined ? null : row.term;
  }

  compact(index: number): void {
    const m = this.meta();
    if (index <= m.snapshot_index) return;
    const t = this.term(index);
    assert(t !== null, `compact(${index}) past lastIndex`);
    this.s.deleteUpTo.run(this.shard, index);
    this.s.setSnapshot.run(index, t, this.shard);
  }

  hardState(): HardState {
    const m = this.meta();
    return { term: m.term, vote: m.vote, commit: m.commit_index };
  }

  setHardState(hs: HardState): void {
    this.s.setHard.run(hs.term, hs.vote, hs.commit, this.shard);
  }

  setCommitIndex(index: number): void {
    this.s.setCommit.run(index, this.shard);
  }

  appliedIndex(): number {
    return this.meta().applied_index;
  }

  setAppliedIndex(index: number): void {
    this.s.setApplied.run(index, this.shard);
  }
}
