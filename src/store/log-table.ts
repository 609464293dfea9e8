/**
 * The node's one Raft log table and its in-memory index (issue 23, item 2: "One log for every group").
 *
 * raft_log(seq, group_id, idx, term, type, crc, data) is a rowid table keyed by a node-wide sequence: a round's
 * entries, whatever their group, are appended at max seq + 1 and share the rightmost leaf pages, where a table
 * keyed by (group, idx) dirtied one leaf per group. There is no SQL index on (group_id, idx): `LogTable` maps
 * (group, idx) -> seq in memory, per group one growable Float64Array (a group's indexes are contiguous and its seqs
 * ascending), plus the terms of the group's rows as runs. It is built by ONE scan of the table in seq order at
 * open, shared by every SqliteRaftStorage of the Database (LogTable.of), and hands out the next seq.
 *
 * Rows interleave, so a page is freed only when every row on it is dead: a group that stays idle keeps its old
 * rows, and the pages around them, alive. relocateIdle() moves such a group's live rows to the tail when more than
 * `deadRowsMax` dead rows lie between its first live row and the first live row of any other group.
 *
 * The index follows every write as it is issued. After a rolled-back transaction, rebuild() re-reads it (one scan;
 * SqliteRaftStorage.reload() calls it, at most once while nothing was written since).
 */
import { assert } from '../core/assert.js';
import { nodeLimits } from '../core/limits.js';
import { CorruptEntryError } from '../raft/index.js';
import type { Db } from './db.js';

export const logTableSchema = `
CREATE TABLE IF NOT EXISTS raft_log (
  seq INTEGER PRIMARY KEY, group_id INTEGER NOT NULL, idx INTEGER NOT NULL, term INTEGER NOT NULL,
  type INTEGER NOT NULL, crc INTEGER NOT NULL, data BLOB NOT NULL);
`;

/** One group's live rows: seqs[head + k] is the seq of index firstIdx + k. */
class GroupIndex {
  seqs = new Float64Array(16);
  head = 0;
  end = 0;
  firstIdx = 0;
  /** runStart[k] is the first index of run k of equal terms, runTerm[k] its term (live rows only). */
  runStart: number[] = [];
  runTerm: number[] = [];

  get count(): number {
    return this.end - this.head;
  }

  get lastIdx(): number {
    return this.firstIdx + this.count - 1;
  }

  push(idx: number, seq: number, term: number): void {
    if (this.count === 0) {
      this.head = this.end = 0;
      this.firstIdx = idx;
      this.runStart = [];
      this.runTerm = [];
    } else if (idx !== this.lastIdx + 1) {
      throw new CorruptEntryError(`raft_log: index ${idx} does not follow ${this.lastIdx} (seq ${seq})`);
    }
    if (this.end === this.seqs.length) {
      const live = this.count;
      const grown = new Float64Array(Math.max(16, live * 2));
      grown.set(this.seqs.subarray(this.head, this.end));
      this.seqs = grown;
      this.head = 0;
      this.end = live;
    }
    this.seqs[this.end++] = seq;
    if (this.runTerm[this.runTerm.length - 1] !== term) {
      this.runStart.push(idx);
      this.runTerm.push(term);
    }
  }

  /** Index of the first seq >= s among the live ones (count when none). */
  lowerBound(s: number): number {
    let lo = this.head;
    let hi = this.end;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.seqs[mid]! < s) lo = mid + 1;
      else hi = mid;
    }
    return lo - this.head;
  }
}

export interface LogTableOptions {
  /** Relocate a group that pins more dead rows than this (nodeLimits.logDeadRowsMax). */
  deadRowsMax?: number;
}

const tables = new WeakMap<Db, LogTable>();

export class LogTable {
  private groups = new Map<number, GroupIndex>();
  private next = 1;
  /** total_changes() when the index was last read from SQLite: a rebuild is needed only after writes since. */
  private builtAtChanges = -1;
  deadRowsMax: number;
  private readonly s;

  /** The table of `db`, created (schema and index) on first use; `options` given later still apply. */
  static of(db: Db, options: LogTableOptions = {}): LogTable {
    let t = tables.get(db);
    if (t === undefined) {
      t = new LogTable(db, options);
      tables.set(db, t);
    } else if (options.deadRowsMax !== undefined) t.deadRowsMax = options.deadRowsMax;
    return t;
  }

  private constructor(
    private readonly db: Db,
    options: LogTableOptions,
  ) {
    db.exec(logTableSchema);
    this.deadRowsMax = options.deadRowsMax ?? nodeLimits.logDeadRowsMax;
    const p = (sql: string) => db.prepare(sql);
    this.s = {
      scan: p('SELECT seq, group_id AS g, idx, term FROM raft_log ORDER BY seq'),
      changes: p('SELECT total_changes() AS n').pluck(),
      insert: p('INSERT INTO raft_log (seq, group_id, idx, term, type, crc, data) VALUES (?, ?, ?, ?, ?, ?, ?)'),
      deleteSpan: p('DELETE FROM raft_log WHERE seq BETWEEN ? AND ? AND group_id = ?'),
      copyRow: p('INSERT INTO raft_log (seq, group_id, idx, term, type, crc, data) SELECT ?, group_id, idx, term, type, crc, data FROM raft_log WHERE seq = ?'),
      deleteRow: p('DELETE FROM raft_log WHERE seq = ?'),
    };
    this.rebuild(true);
  }

  /** Re-reads the whole index from SQLite (after a rollback). Skipped when nothing was written since the last read. */
  rebuild(force = false): void {
    const changes = this.s.changes.get() as number;
    if (!force && changes === this.builtAtChanges) return;
    this.groups = new Map();
    let max = 0;
    for (const r of this.s.scan.iterate() as IterableIterator<{ seq: number; g: number; idx: number; term: number }>) {
      this.group(r.g).push(r.idx, r.seq, r.term);
      max = r.seq;
    }
    this.next = max + 1;
    this.builtAtChanges = changes;
  }

  private group(g: number): GroupIndex {
    let gi = this.groups.get(g);
    if (gi === undefined) {
      gi = new GroupIndex();
      this.groups.set(g, gi);
    }
    return gi;
  }

  /** The groups with live rows. */
  groupIds(): number[] {
    return [...this.groups].filter(([, gi]) => gi.count > 0).map(([g]) => g);
  }

  /** [first, last] index of the group's rows, or null when it has none. */
  bounds(g: number): [number, number] | null {
    const gi = this.groups.get(g);
    return gi === undefined || gi.count === 0 ? null : [gi.firstIdx, gi.lastIdx];
  }

  /** The seq of (g, idx); idx must be held. */
  seqOf(g: number, idx: number): number {
    const gi = this.groups.get(g);
    assert(gi !== undefined && idx >= gi.firstIdx && idx <= gi.lastIdx, `raft_log: group ${g} has no index ${idx}`);
    return gi.seqs[gi.head + idx - gi.firstIdx]!;
  }

  /** The term of (g, idx) from the cached runs; idx must be held. */
  term(g: number, idx: number): number {
    const gi = this.groups.get(g)!;
    let k = gi.runStart.length - 1;
    while (gi.runStart[k]! > idx) k--;
    return gi.runTerm[k]!;
  }

  /** Terms runs of the group's rows (copies), for a storage that starts. */
  runs(g: number): { start: number[]; term: number[] } {
    const gi = this.groups.get(g);
    return gi === undefined || gi.count === 0 ? { start: [], term: [] } : { start: [...gi.runStart], term: [...gi.runTerm] };
  }

  /** Inserts one row at the tail. Indexes of a group must follow its last one (truncate first). */
  insert(g: number, idx: number, term: number, type: number, crc: number, data: Uint8Array): void {
    const seq = this.next;
    this.s.insert.run(seq, g, idx, term, type, crc, data);
    this.group(g).push(idx, seq, term);
    this.next = seq + 1;
  }

  /** Deletes the group's rows of index >= from. */
  truncateFrom(g: number, from: number): void {
    const gi = this.groups.get(g);
    if (gi === undefined || gi.count === 0 || from > gi.lastIdx) return;
    const k = Math.max(0, from - gi.firstIdx);
    this.s.deleteSpan.run(gi.seqs[gi.head + k]!, gi.seqs[gi.end - 1]!, g);
    gi.end = gi.head + k;
    while (gi.runStart.length > 0 && gi.runStart[gi.runStart.length - 1]! >= from) {
      gi.runStart.pop();
      gi.runTerm.pop();
    }
  }

  /** Deletes the group's rows of index <= through (compaction). */
  deleteThrough(g: number, through: number): void {
    const gi = this.groups.get(g);
    if (gi === undefined || gi.count === 0 || through < gi.firstIdx) return;
    const n = Math.min(gi.count, through - gi.firstIdx + 1);
    this.s.deleteSpan.run(gi.seqs[gi.head]!, gi.seqs[gi.head + n - 1]!, g);
    gi.head += n;
    gi.firstIdx += n;
    if (gi.count === 0) {
      gi.runStart = [];
      gi.runTerm = [];
      return;
    }
    let k = gi.runStart.length - 1;
    while (gi.runStart[k]! > gi.firstIdx) k--;
    gi.runStart = [gi.firstIdx, ...gi.runStart.slice(k + 1)];
    gi.runTerm = gi.runTerm.slice(k);
    // Keep the array compact: shift once the dead head is more than half of it.
    if (gi.head > 1024 && gi.head * 2 > gi.end) {
      gi.seqs = gi.seqs.slice(gi.head, gi.head + Math.max(16, gi.count * 2));
      gi.end = gi.count;
      gi.head = 0;
    }
  }

  /**
   * Dead rows that group g alone keeps from being freed: those between its first live seq and the first live seq
   * of every other group (or the tail), minus its own live rows there. 0 unless g holds the table's front.
   */
  pinnedDeadRows(g: number): number {
    const gi = this.groups.get(g);
    if (gi === undefined || gi.count === 0) return 0;
    const first = gi.seqs[gi.head]!;
    let bound = this.next;
    for (const [h, hi] of this.groups) if (h !== g && hi.count > 0) bound = Math.min(bound, hi.seqs[hi.head]!);
    if (bound <= first) return 0;
    return bound - first - gi.lowerBound(bound);
  }

  /**
   * Moves the live rows of the group holding the table's front to the tail when it pins more than deadRowsMax
   * dead rows (in the caller's transaction), so the pages it held are freed and reused. Returns the group moved.
   */
  relocateIdle(): number | null {
    let front: number | null = null;
    let frontSeq = Infinity;
    for (const [g, gi] of this.groups) {
      if (gi.count > 0 && gi.seqs[gi.head]! < frontSeq) {
        frontSeq = gi.seqs[gi.head]!;
        front = g;
      }
    }
    if (front === null || this.pinnedDeadRows(front) <= this.deadRowsMax) return null;
    const gi = this.groups.get(front)!;
    const run = () => {
      for (let k = gi.head; k < gi.end; k++) {
        const old = gi.seqs[k]!;
        this.s.copyRow.run(this.next, old);
        this.s.deleteRow.run(old);
        gi.seqs[k] = this.next++;
      }
    };
    if (this.db.inTransaction) run();
    else this.db.transaction(run)();
    return front;
  }
}
