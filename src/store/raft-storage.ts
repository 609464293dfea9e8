/**
 * The Raft log of one group in the node's SQLite file: `SqliteRaftStorage implements LogStorageWriter`
 * (src/raft/storage.ts). Many groups share one better-sqlite3 Database; every row is keyed by `group_id`.
 *
 * Tables (created by ensureLogSchema, idempotent):
 * - raft_log(seq, group_id, idx, term, type, crc, data): every group's log in one append-only table keyed by a
 *   node-wide sequence (log-table.ts: LogTable maps (group, idx) -> seq in memory); crc = entryCrc(index, term,
 *   type, data).
 * - raft_hard_state(group_id, term, vote, commit_index, offset_index, offset_term): the hard state, and the
 *   point the log was compacted through (firstIndex = offset_index + 1; term(offset_index) = offset_term).
 * - raft_snapshot(group_id, idx, term, conf_state, data): the latest snapshot, data last so that reading the
 *   metadata never pages through the blob. `data` is what createSnapshot / applySnapshot were given.
 *
 * Group commit: the node persists every group's Ready inside ONE db.transaction(); the methods here never open a
 * transaction of their own when one is already open (a multi-statement write outside one runs in its own, so it
 * stays atomic). The in-memory cache (offset, last index, the terms of the log as runs) is updated as each write
 * is issued: if the caller's transaction rolls back, call reload() on every storage it touched (or drop them).
 *
 * Every entry read back from SQLite is checked against its crc: a mismatch throws CorruptEntryError (fatal for the
 * node). The newest entries are also kept in memory as they were appended (`LogTail`): the applier reads a
 * committed entry right after the round that wrote it, and a leader sends its new entries to its followers, so
 * both are served from memory instead of reading back the rows just written.
 */
import type { Statement } from 'better-sqlite3';
import { assert } from '../core/assert.js';
import { nodeLimits } from '../core/limits.js';
import { CorruptEntryError, entryCrcOk, StorageCompactedError, StorageUnavailableError } from '../raft/index.js';
import type { ConfState, Entry, GroupId, HardState, InitialState, LogIndex, LogStorageWriter, NodeId, Snapshot, Term } from '../raft/index.js';
import type { Db } from './db.js';
import { LogTable } from './log-table.js';
import { pack, plainBytes, unpack } from './rows.js';

/** The per-group tables, as a backup file (and the state file) carries them: see ensureRaftSchema. */
const backupLogTable = `
CREATE TABLE IF NOT EXISTS raft_entries (
  group_id INTEGER NOT NULL, idx INTEGER NOT NULL, term INTEGER NOT NULL, type INTEGER NOT NULL,
  data BLOB NOT NULL, crc INTEGER NOT NULL,
  PRIMARY KEY (group_id, idx)) WITHOUT ROWID;
`;

const stateTables = `
CREATE TABLE IF NOT EXISTS raft_hard_state (
  group_id INTEGER PRIMARY KEY, term INTEGER NOT NULL, vote TEXT NOT NULL, commit_index INTEGER NOT NULL,
  offset_index INTEGER NOT NULL, offset_term INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS raft_snapshot (
  group_id INTEGER PRIMARY KEY, idx INTEGER NOT NULL, term INTEGER NOT NULL, conf_state BLOB NOT NULL,
  data BLOB NOT NULL);
`;

const schema = backupLogTable + stateTables;

/**
 * Creates the Raft tables of the backup format (raft_entries per group, raft_hard_state, raft_snapshot) if they
 * are missing: a backup file, and the state file that becomes one, carry the log this way. Safe on every open.
 */
export function ensureRaftSchema(db: Db): void {
  db.exec(schema);
}

/** Creates the tables SqliteRaftStorage uses (raft_log, raft_hard_state, raft_snapshot) if they are missing. */
export function ensureLogSchema(db: Db): LogTable {
  db.exec(stateTables);
  return LogTable.of(db);
}

/** Conf-change entries are stored with this type. */
const confChangeType = 1;

/** The groups that have any Raft state in this file (bootstrapped, or joined and written to). */
export function raftGroups(db: Db): GroupId[] {
  const table = ensureLogSchema(db);
  const rows = db
    .prepare('SELECT group_id AS g FROM raft_hard_state UNION SELECT group_id AS g FROM raft_snapshot')
    .pluck()
    .all() as number[];
  // The groups with rows come from the in-memory index, not a scan of the log.
  return [...new Set([...rows, ...table.groupIds()])].sort((a, b) => a - b);
}

/**
 * Writes the founding membership of `group`: the snapshot at index 1, term 0, empty data (bootstrapSnapshot of
 * src/raft). Idempotent: returns false and writes nothing when the group already has any Raft state.
 */
export function bootstrapGroup(db: Db, group: GroupId, voters: readonly NodeId[]): boolean {
  assert(voters.length > 0, 'bootstrapGroup: no voters');
  ensureLogSchema(db);
  return inTransaction(db, () => {
    const exists = db.prepare('SELECT 1 FROM raft_hard_state WHERE group_id = ? UNION SELECT 1 FROM raft_snapshot WHERE group_id = ?');
    if (exists.get(group, group) !== undefined) return false;
    const confState: ConfState = { voters: [...voters], learners: [] };
    db.prepare('INSERT INTO raft_snapshot (group_id, idx, term, conf_state, data) VALUES (?, 1, 0, ?, ?)').run(
      group,
      pack(confState),
      new Uint8Array(0),
    );
    db.prepare('INSERT INTO raft_hard_state VALUES (?, 0, \'\', 0, 1, 0)').run(group);
    return true;
  });
}

/** Runs fn inside the caller's transaction if there is one (no savepoint needed), else in its own. */
function inTransaction<T>(db: Db, fn: () => T): T {
  return db.inTransaction ? fn() : db.transaction(fn)();
}

function statements(db: Db) {
  const p = (sql: string): Statement => db.prepare(sql);
  return {
    hard: p('SELECT term, vote, commit_index, offset_index, offset_term FROM raft_hard_state WHERE group_id = ?'),
    upsertHard: p(
      `INSERT INTO raft_hard_state VALUES (?, ?, ?, ?, 0, 0)
       ON CONFLICT (group_id) DO UPDATE SET term = excluded.term, vote = excluded.vote, commit_index = excluded.commit_index`,
    ),
    upsertOffset: p(
      `INSERT INTO raft_hard_state VALUES (?, 0, '', 0, ?, ?)
       ON CONFLICT (group_id) DO UPDATE SET offset_index = excluded.offset_index, offset_term = excluded.offset_term`,
    ),
    snapMeta: p('SELECT idx, term, conf_state FROM raft_snapshot WHERE group_id = ?'),
    snapData: p('SELECT data FROM raft_snapshot WHERE group_id = ?'),
    snapBytes: p('SELECT length(data) AS n FROM raft_snapshot WHERE group_id = ?'),
    upsertSnap: p('INSERT OR REPLACE INTO raft_snapshot (group_id, idx, term, conf_state, data) VALUES (?, ?, ?, ?, ?)'),
    range: p('SELECT idx, term, type, data, crc FROM raft_log WHERE seq BETWEEN ? AND ? AND group_id = ? ORDER BY seq'),
    confRange: p(
      'SELECT idx, term, type, data, crc FROM raft_log WHERE seq BETWEEN ? AND ? AND group_id = ? AND type = ? ORDER BY seq',
    ),
  };
}

interface EntryRow {
  idx: number;
  term: number;
  type: number;
  data: Uint8Array;
  crc: number;
}

interface SnapMeta {
  index: LogIndex;
  term: Term;
  confState: ConfState;
}

const noConf: ConfState = { voters: [], learners: [] };

/**
 * The newest appended entries of one log, contiguous, the same objects Raft handed to append (as MemoryStorage
 * keeps them). Bounded by entries and bytes: the oldest leave first. It follows every write as it is issued, like
 * the cached terms, so after a rolled-back transaction reload() empties it.
 */
class LogTail {
  private ents: Entry[] = [];
  /** ents[head] is the oldest kept (dropped ones are cut off in bulk, not shifted one by one). */
  private head = 0;
  private bytes = 0;

  constructor(
    private readonly entriesMax: number,
    private readonly bytesMax: number,
  ) {}

  clear(): void {
    this.ents = [];
    this.head = 0;
    this.bytes = 0;
  }

  /** The first index held, or null when empty. */
  first(): number | null {
    return this.head < this.ents.length ? this.ents[this.head]!.index : null;
  }

  /** Appends entries that start at `start` (<= the last held + 1): what was held from `start` on is replaced. */
  append(from: readonly Entry[]): void {
    const start = from[0]!.index;
    const first = this.first();
    // Not contiguous with what is held (the storage checks the log itself has no gap): start over from `from`.
    if (first === null || start < first || start > first + (this.ents.length - this.head)) this.clear();
    else {
      const keep = this.head + (start - first);
      for (let i = keep; i < this.ents.length; i++) this.bytes -= this.ents[i]!.data.length;
      this.ents.length = Math.min(this.ents.length, keep);
    }
    for (const e of from) {
      this.ents.push(e);
      this.bytes += e.data.length;
    }
    while (this.ents.length - this.head > this.entriesMax || (this.bytes > this.bytesMax && this.head < this.ents.length)) {
      this.bytes -= this.ents[this.head]!.data.length;
      this.head++;
    }
    this.compactHead();
  }

  /** Forgets the entries at or below `index`. */
  dropThrough(index: number): void {
    while (this.head < this.ents.length && this.ents[this.head]!.index <= index) {
      this.bytes -= this.ents[this.head]!.data.length;
      this.head++;
    }
    this.compactHead();
  }

  /** Entries [lo, hi) by maxBytes (at least one) as entries() answers, or null when lo is not held. hi <= last + 1. */
  read(lo: number, hi: number, maxBytes: number): Entry[] | null {
    const first = this.first();
    if (first === null || lo < first) return null;
    const out: Entry[] = [];
    let bytes = 0;
    for (let i = this.head + (lo - first); i < this.ents.length && out.length < hi - lo; i++) {
      const e = this.ents[i]!;
      bytes += e.data.length;
      if (out.length > 0 && bytes > maxBytes) break;
      out.push(e);
    }
    return out;
  }

  /** Cuts off the dropped entries once they are a thousand and more than half the array (amortized O(1)). */
  private compactHead(): void {
    if (this.head === this.ents.length) this.clear();
    else if (this.head > 1024 && this.head * 2 > this.ents.length) {
      this.ents = this.ents.slice(this.head);
      this.head = 0;
    }
  }
}

/**
 * One group's log. The terms of the log [offset, last] are cached as runs (a run starts where the term changes):
 * terms change rarely, so the whole log's terms fit in a few numbers and term(i) never touches SQLite.
 */
export class SqliteRaftStorage implements LogStorageWriter {
  private readonly s: ReturnType<typeof statements>;
  private hard!: HardState;
  private snap!: SnapMeta;
  private offsetIndex = 0;
  private offsetTerm = 0;
  private last = 0;
  private readonly table: LogTable;
  private readonly tail: LogTail;
  private loaded = false;

  /**
   * `markerSnapshots`: a stored snapshot past the bootstrap with EMPTY data is a compaction marker (the node
   * compacts its log without copying its state each time): snapshot() then answers null, so the Raft core asks
   * the host for a real one (Ready.snapshotRequested) when a follower needs it.
   */
  constructor(
    private readonly db: Db,
    readonly group: GroupId,
    private readonly options: { markerSnapshots?: boolean; tailEntriesMax?: number; tailBytesMax?: number } = {},
  ) {
    this.table = ensureLogSchema(db);
    this.s = statements(db);
    this.tail = new LogTail(options.tailEntriesMax ?? nodeLimits.logTailEntriesMax, options.tailBytesMax ?? nodeLimits.logTailBytesMax);
    this.reload();
  }

  /** Re-reads the cached state from SQLite: call it after a transaction that wrote here rolled back. */
  reload(): void {
    // The shared index is re-read once after a rollback (not at construction: it is current then).
    if (this.loaded) this.table.rebuild();
    this.loaded = true;
    this.tail.clear();
    const h = this.s.hard.get(this.group) as
      | { term: number; vote: string; commit_index: number; offset_index: number; offset_term: number }
      | undefined;
    this.hard = h
      ? { term: h.term as Term, vote: h.vote as NodeId, commit: h.commit_index as LogIndex }
      : { term: 0 as Term, vote: '' as NodeId, commit: 0 as LogIndex };
    const m = this.s.snapMeta.get(this.group) as { idx: number; term: number; conf_state: Uint8Array } | undefined;
    this.snap = m
      ? { index: m.idx as LogIndex, term: m.term as Term, confState: unpack<ConfState>(m.conf_state) }
      : { index: 0 as LogIndex, term: 0 as Term, confState: noConf };
    this.offsetIndex = h?.offset_index ?? 0;
    this.offsetTerm = h?.offset_term ?? 0;
    const b = this.table.bounds(this.group);
    if (b === null) this.last = this.offsetIndex;
    else {
      assert(b[0] === this.offsetIndex + 1, `group ${this.group}: log starts at ${b[0]}, compacted through ${this.offsetIndex}`);
      this.last = b[1];
    }
  }

  initialState(): InitialState {
    return { hardState: this.hard, confState: this.snap.confState };
  }

  firstIndex(): LogIndex {
    return (this.offsetIndex + 1) as LogIndex;
  }

  lastIndex(): LogIndex {
    return this.last as LogIndex;
  }

  term(i: LogIndex): Term {
    if (i < this.offsetIndex) throw new StorageCompactedError(`group ${this.group}: term(${i}) compacted through ${this.offsetIndex}`);
    if (i > this.last) throw new StorageUnavailableError(`group ${this.group}: term(${i}) past last ${this.last}`);
    if (i === this.offsetIndex) return this.offsetTerm as Term;
    return this.table.term(this.group, i) as Term;
  }

  /** The conf_change entries among [lo, hi): only those rows are read (a restart replays them). */
  confChanges(lo: LogIndex, hi: LogIndex): Entry[] {
    if (lo <= this.offsetIndex) throw new StorageCompactedError(`group ${this.group}: confChanges(${lo}) compacted through ${this.offsetIndex}`);
    if (hi > this.last + 1) throw new StorageUnavailableError(`group ${this.group}: confChanges(${lo}, ${hi}) last is ${this.last}`);
    assert(lo <= hi, `confChanges(${lo}, ${hi}): lo > hi`);
    if (lo === hi) return [];
    const out: Entry[] = [];
    const rows = this.s.confRange.iterate(this.table.seqOf(this.group, lo), this.table.seqOf(this.group, hi - 1), this.group, confChangeType);
    for (const r of rows as IterableIterator<EntryRow>) {
      const e = rowToEntry(r);
      if (!entryCrcOk(e)) throw new CorruptEntryError(`group ${this.group}: entry ${e.index} fails its crc`);
      out.push(e);
    }
    return out;
  }

  entries(lo: LogIndex, hi: LogIndex, maxBytes: number): Entry[] {
    if (lo <= this.offsetIndex) throw new StorageCompactedError(`group ${this.group}: entries(${lo}) compacted through ${this.offsetIndex}`);
    if (hi > this.last + 1) throw new StorageUnavailableError(`group ${this.group}: entries(${lo}, ${hi}) last is ${this.last}`);
    assert(lo <= hi, `entries(${lo}, ${hi}): lo > hi`);
    const held = this.tail.read(lo, hi, maxBytes);
    if (held !== null) return held;
    if (lo === hi) return [];
    const out: Entry[] = [];
    let bytes = 0;
    let full = false;
    // Iterate so a far-behind follower's read stops at maxBytes instead of loading the whole tail.
    const rows = this.s.range.iterate(this.table.seqOf(this.group, lo), this.table.seqOf(this.group, hi - 1), this.group);
    for (const r of rows as IterableIterator<EntryRow>) {
      const e = rowToEntry(r);
      if (e.index !== lo + out.length) throw new CorruptEntryError(`group ${this.group}: entry ${lo + out.length} is missing`);
      if (!entryCrcOk(e)) throw new CorruptEntryError(`group ${this.group}: entry ${e.index} fails its crc`);
      bytes += e.data.length;
      if (out.length > 0 && bytes > maxBytes) {
        full = true;
        break;
      }
      out.push(e);
    }
    if (!full && out.length !== hi - lo) throw new CorruptEntryError(`group ${this.group}: entries [${lo}, ${hi}) short`);
    return out;
  }

  /** The latest snapshot (its data read from SQLite on each call: it is large and rarely needed). */
  snapshot(): Snapshot | null {
    if (this.options.markerSnapshots === true && this.snap.index > 1 && this.snapDataBytes() === 0) return null;
    const row = this.s.snapData.get(this.group) as { data: Uint8Array } | undefined;
    const data = row ? plainBytes(row.data) : new Uint8Array(0);
    return { metadata: { ...this.snap }, data };
  }

  /** The stored snapshot's data as written (empty for a compaction marker or none). */
  snapshotData(): Uint8Array {
    const row = this.s.snapData.get(this.group) as { data: Uint8Array } | undefined;
    return row ? plainBytes(row.data) : new Uint8Array(0);
  }

  private snapDataBytes(): number {
    const row = this.s.snapBytes.get(this.group) as { n: number } | undefined;
    return row?.n ?? 0;
  }

  /** The index of the stored snapshot (a marker or a real one). */
  snapshotIndex(): LogIndex {
    return this.snap.index;
  }

  append(entries: readonly Entry[]): void {
    if (entries.length === 0) return;
    for (let i = 1; i < entries.length; i++) {
      assert(entries[i]!.index === entries[i - 1]!.index + 1, 'append: entries not contiguous');
    }
    const first = this.offsetIndex + 1;
    const lastNew = entries[entries.length - 1]!.index;
    if (lastNew < first) return; // all already compacted into the snapshot
    const from = entries[0]!.index < first ? entries.slice(first - entries[0]!.index) : entries;
    const start = from[0]!.index;
    assert(start <= this.last + 1, `append: gap (last ${this.last}, got ${start})`);
    inTransaction(this.db, () => {
      if (start <= this.last) this.table.truncateFrom(this.group, start);
      for (const e of from) this.table.insert(this.group, e.index, e.term, e.type === 'normal' ? 0 : confChangeType, e.crc, e.data);
    });
    this.last = from[from.length - 1]!.index;
    this.tail.append(from);
  }

  applySnapshot(snapshot: Snapshot): void {
    const { index, term, confState } = snapshot.metadata;
    assert(index > this.snap.index, `applySnapshot(${index}): not newer than ${this.snap.index}`);
    inTransaction(this.db, () => {
      this.table.deleteThrough(this.group, Number.MAX_SAFE_INTEGER);
      this.s.upsertSnap.run(this.group, index, term, pack(confState), snapshot.data);
      this.s.upsertOffset.run(this.group, index, term);
    });
    this.snap = { index, term, confState };
    this.offsetIndex = index;
    this.offsetTerm = term;
    this.tail.clear();
    this.last = index;
  }

  createSnapshot(index: LogIndex, confState: ConfState, data: Uint8Array): Snapshot {
    assert(index >= this.snap.index, `createSnapshot(${index}): older than ${this.snap.index}`);
    assert(index <= this.last, `createSnapshot(${index}): past last index ${this.last}`);
    const term = this.term(index);
    this.s.upsertSnap.run(this.group, index, term, pack(confState), data);
    this.snap = { index, term, confState };
    return { metadata: { ...this.snap }, data };
  }

  compact(index: LogIndex): void {
    if (index <= this.offsetIndex) return;
    assert(index <= this.snap.index, `compact(${index}): past the snapshot (${this.snap.index})`);
    const term = this.term(index);
    inTransaction(this.db, () => {
      this.table.deleteThrough(this.group, index);
      this.s.upsertOffset.run(this.group, index, term);
      // Compaction frees the front of the table only when every group has compacted past it: an idle group's
      // old rows are moved to the tail once they keep too many dead rows alive.
      this.table.relocateIdle();
    });
    this.offsetIndex = index;
    this.offsetTerm = term;
    this.tail.dropThrough(index);
  }

  setHardState(hardState: HardState): void {
    this.s.upsertHard.run(this.group, hardState.term, hardState.vote, hardState.commit);
    this.hard = hardState;
  }

  /**
   * The commit index raised in memory only, when the file cannot take it (a full disk at start): Raft's commit
   * index may trail on disk (etcd writes it without an fsync), and the next write of the hard state stores it.
   */
  raiseCommitInMemory(commit: LogIndex): void {
    if (commit > this.hard.commit) this.hard = { ...this.hard, commit };
  }
}

function rowToEntry(r: EntryRow): Entry {
  return {
    index: r.idx as LogIndex,
    term: r.term as Term,
    type: r.type === 0 ? 'normal' : 'conf_change',
    data: plainBytes(r.data),
    crc: r.crc,
  };
}
