import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { CorruptEntryError, makeEntry } from '../raft/index.js';
import type { Entry, LogIndex, Term } from '../raft/index.js';
import { moveRaftTables, openLogFile, openNodeDb, type Db } from './db.js';
import { LogTable } from './log-table.js';
import { SqliteRaftStorage } from './raft-storage.js';

const dirs: string[] = [];
const dbs: Db[] = [];
const enc = new TextEncoder();
const dec = new TextDecoder();

afterEach(() => {
  for (const d of dbs.splice(0)) if (d.open) d.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'punctual-logtable-'));
  dirs.push(d);
  return d;
}

function openLog(path: string): Db {
  const db = openLogFile(path, 'off');
  dbs.push(db);
  return db;
}

function ent(index: number, term: number, data = `e${index}t${term}`, type: Entry['type'] = 'normal'): Entry {
  return makeEntry(index as LogIndex, term as Term, type, enc.encode(data));
}

function ents(lo: number, hi: number, term: number, tag = ''): Entry[] {
  return Array.from({ length: hi - lo + 1 }, (_, k) => ent(lo + k, term, `${tag}${lo + k}`));
}

function texts(s: SqliteRaftStorage, lo: number, hi: number): string[] {
  return s.entries(lo as LogIndex, hi as LogIndex, Infinity).map((e) => dec.decode(e.data));
}

/** (group, idx) of every row in seq order. */
function rows(db: Db): Array<[number, number]> {
  return (db.prepare('SELECT group_id AS g, idx FROM raft_log ORDER BY seq').all() as Array<{ g: number; idx: number }>).map((r) => [r.g, r.idx]);
}

const noTail = { tailEntriesMax: 0 };

describe('LogTable: one raft_log for every group', () => {
  it('appends the entries of many groups in one sequence and reads each group back by seq', () => {
    const db = openLog(join(tempDir(), 'raft-log.db'));
    const a = new SqliteRaftStorage(db, 0, noTail);
    const b = new SqliteRaftStorage(db, 1, noTail);
    db.transaction(() => {
      a.append(ents(1, 2, 1, 'a'));
      b.append(ents(1, 1, 1, 'b'));
    })();
    db.transaction(() => {
      b.append(ents(2, 3, 1, 'b'));
      a.append(ents(3, 3, 1, 'a'));
    })();
    expect(rows(db)).toEqual([[0, 1], [0, 2], [1, 1], [1, 2], [1, 3], [0, 3]]);
    expect(texts(a, 1, 4)).toEqual(['a1', 'a2', 'a3']);
    expect(texts(b, 2, 4)).toEqual(['b2', 'b3']);
    expect(db.prepare("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'raft_log'").pluck().get()).toBe(0);
  });

  it('truncates a group suffix and appends the replacement at the tail; a reopen rebuilds the index', () => {
    const path = join(tempDir(), 'raft-log.db');
    let db = openLog(path);
    const a = new SqliteRaftStorage(db, 0, noTail);
    const b = new SqliteRaftStorage(db, 1, noTail);
    a.append(ents(1, 5, 1, 'a'));
    b.append(ents(1, 2, 1, 'b'));
    a.append(ents(3, 4, 2, 'x')); // conflicting suffix from 3 on: 3..5 go, 3..4 at term 2 come
    expect(rows(db)).toEqual([[0, 1], [0, 2], [1, 1], [1, 2], [0, 3], [0, 4]]);
    expect(texts(a, 1, 5)).toEqual(['a1', 'a2', 'x3', 'x4']);
    expect([a.lastIndex(), a.term(2 as LogIndex), a.term(4 as LogIndex)]).toEqual([4, 1, 2]);
    db.close();
    db = openLog(path);
    const again = new SqliteRaftStorage(db, 0, noTail);
    expect([again.firstIndex(), again.lastIndex(), again.term(3 as LogIndex)]).toEqual([1, 4, 2]);
    expect(texts(again, 1, 5)).toEqual(['a1', 'a2', 'x3', 'x4']);
    expect(texts(new SqliteRaftStorage(db, 1, noTail), 1, 3)).toEqual(['b1', 'b2']);
    again.append(ents(5, 5, 2, 'y'));
    expect(rows(db).at(-1)).toEqual([0, 5]);
  });

  it('compacts one group without touching the others', () => {
    const db = openLog(join(tempDir(), 'raft-log.db'));
    const a = new SqliteRaftStorage(db, 0, noTail);
    const b = new SqliteRaftStorage(db, 1, noTail);
    for (let i = 1; i <= 4; i++) {
      a.append([ent(i, 1, `a${i}`)]);
      b.append([ent(i, 1, `b${i}`)]);
    }
    a.createSnapshot(3 as LogIndex, { voters: [], learners: [] }, new Uint8Array([1]));
    a.compact(3 as LogIndex);
    expect(rows(db)).toEqual([[1, 1], [1, 2], [1, 3], [0, 4], [1, 4]]);
    expect([a.firstIndex(), a.term(3 as LogIndex)]).toEqual([4, 1]);
    expect(texts(a, 4, 5)).toEqual(['a4']);
    expect(texts(b, 1, 5)).toEqual(['b1', 'b2', 'b3', 'b4']);
    expect(() => a.entries(3 as LogIndex, 5 as LogIndex, Infinity)).toThrow();
  });

  it('moves an idle group to the tail once it pins more dead rows than the limit', () => {
    const db = openLog(join(tempDir(), 'raft-log.db'));
    const table = LogTable.of(db, { deadRowsMax: 10 });
    const idle = new SqliteRaftStorage(db, 0, noTail);
    const busy = new SqliteRaftStorage(db, 1, noTail);
    idle.append(ents(1, 2, 1, 'i'));
    busy.append(ents(1, 5, 1, 'b'));
    expect(rows(db).slice(0, 2)).toEqual([[0, 1], [0, 2]]);
    // 5 dead rows ahead of the busy group: under the limit, nothing moves.
    busy.createSnapshot(5 as LogIndex, { voters: [], learners: [] }, new Uint8Array(0));
    busy.append(ents(6, 20, 1, 'b'));
    busy.compact(5 as LogIndex);
    expect(table.pinnedDeadRows(0)).toBe(5);
    expect(rows(db)[0]).toEqual([0, 1]);
    // 15 more: 20 dead rows after the idle group's first one, so it moves behind the busy group's rows.
    busy.createSnapshot(20 as LogIndex, { voters: [], learners: [] }, new Uint8Array(0));
    busy.append(ents(21, 22, 1, 'b'));
    busy.compact(20 as LogIndex);
    expect(rows(db)).toEqual([[1, 21], [1, 22], [0, 1], [0, 2]]);
    expect(table.pinnedDeadRows(0)).toBe(0);
    expect(texts(idle, 1, 3)).toEqual(['i1', 'i2']);
    idle.append(ents(3, 3, 1, 'i'));
    expect(texts(idle, 1, 4)).toEqual(['i1', 'i2', 'i3']);
    expect(db.prepare('SELECT min(seq) FROM raft_log').pluck().get()).toBeGreaterThan(20);
  });

  it('after a rolled-back transaction, reload() rebuilds the shared index, moved groups included', () => {
    const db = openLog(join(tempDir(), 'raft-log.db'));
    LogTable.of(db, { deadRowsMax: 3 });
    const idle = new SqliteRaftStorage(db, 0, noTail);
    const busy = new SqliteRaftStorage(db, 1, noTail);
    idle.append(ents(1, 2, 1, 'i'));
    busy.append(ents(1, 8, 1, 'b'));
    busy.createSnapshot(8 as LogIndex, { voters: [], learners: [] }, new Uint8Array(0));
    const before = rows(db);
    expect(() =>
      db.transaction(() => {
        busy.append(ents(9, 10, 1, 'b'));
        busy.compact(8 as LogIndex); // relocates the idle group (8 dead rows > 3)
        expect(rows(db).slice(-2)).toEqual([[0, 1], [0, 2]]);
        throw new Error('boom');
      })(),
    ).toThrow('boom');
    expect(rows(db)).toEqual(before);
    busy.reload(); // only the storage the transaction was for: the idle group's seqs come back too
    expect([busy.firstIndex(), busy.lastIndex()]).toEqual([1, 8]);
    expect(texts(idle, 1, 3)).toEqual(['i1', 'i2']);
    expect(texts(busy, 7, 9)).toEqual(['b7', 'b8']);
    busy.append(ents(9, 9, 1, 'b'));
    idle.append(ents(3, 3, 1, 'i'));
    expect(rows(db).slice(-2)).toEqual([[1, 9], [0, 3]]);
    expect(texts(idle, 1, 4)).toEqual(['i1', 'i2', 'i3']);
  });

  it('detects a row that fails its crc, through entries() and confChanges()', () => {
    const db = openLog(join(tempDir(), 'raft-log.db'));
    const s = new SqliteRaftStorage(db, 3, noTail);
    s.append([ent(1, 1, 'one'), ent(2, 1, 'conf', 'conf_change'), ent(3, 1, 'three')]);
    expect(s.confChanges(1 as LogIndex, 4 as LogIndex).map((e) => e.index)).toEqual([2]);
    db.prepare('UPDATE raft_log SET data = ? WHERE group_id = 3 AND idx = 2').run(Buffer.from('conF'));
    expect(() => s.entries(1 as LogIndex, 4 as LogIndex, Infinity)).toThrow(CorruptEntryError);
    expect(() => s.confChanges(1 as LogIndex, 4 as LogIndex)).toThrow(CorruptEntryError);
    expect(texts(s, 3, 4)).toEqual(['three']);
  });

  it('creates a new log file with 1 KiB pages in WAL mode', () => {
    const path = join(tempDir(), 'raft-log.db');
    const db = openLog(path);
    new SqliteRaftStorage(db, 0).append(ents(1, 3, 1));
    expect(db.pragma('page_size', { simple: true })).toBe(1024);
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    expect(existsSync(`${path}-wal`)).toBe(true);
  });
});

/** The log file as the per-group code wrote it: raft_entries keyed by (group_id, idx), 4 KiB pages, WAL. */
function writeOldLayout(path: string): void {
  const old = new Database(path);
  old.pragma('journal_mode = WAL');
  old.exec(`
CREATE TABLE raft_entries (
  group_id INTEGER NOT NULL, idx INTEGER NOT NULL, term INTEGER NOT NULL, type INTEGER NOT NULL,
  data BLOB NOT NULL, crc INTEGER NOT NULL,
  PRIMARY KEY (group_id, idx)) WITHOUT ROWID;
CREATE TABLE raft_hard_state (
  group_id INTEGER PRIMARY KEY, term INTEGER NOT NULL, vote TEXT NOT NULL, commit_index INTEGER NOT NULL,
  offset_index INTEGER NOT NULL, offset_term INTEGER NOT NULL);
CREATE TABLE raft_snapshot (
  group_id INTEGER PRIMARY KEY, idx INTEGER NOT NULL, term INTEGER NOT NULL, conf_state BLOB NOT NULL,
  data BLOB NOT NULL);`);
  const ins = old.prepare('INSERT INTO raft_entries (group_id, idx, term, type, data, crc) VALUES (?, ?, ?, ?, ?, ?)');
  // Groups written interleaved, as rounds do; group 1 compacted through 3.
  for (let i = 1; i <= 40; i++) {
    for (const g of [0, 1, 2]) {
      if (g === 1 && i <= 3) continue;
      const e = ent(i, i > 30 ? 3 : 2, `g${g}-${i}`, i === 7 ? 'conf_change' : 'normal');
      ins.run(g, e.index, e.term, e.type === 'normal' ? 0 : 1, e.data, e.crc);
    }
  }
  old.prepare("INSERT INTO raft_hard_state VALUES (0, 3, 'n1', 40, 0, 0), (1, 3, 'n1', 40, 3, 2), (2, 3, 'n2', 39, 0, 0)").run();
  old.close();
}

describe('a log file of the per-group layout', () => {
  it('is converted at open: rows in raft_log, raft_entries gone, 1 KiB pages, WAL again', () => {
    const path = join(tempDir(), 'raft-log.db');
    writeOldLayout(path);
    const db = openLog(path);
    expect(db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").pluck().all()).toEqual([
      'raft_hard_state',
      'raft_log',
      'raft_snapshot',
    ]);
    expect(db.pragma('page_size', { simple: true })).toBe(1024);
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    const s1 = new SqliteRaftStorage(db, 1, noTail);
    expect([s1.firstIndex(), s1.lastIndex(), s1.term(3 as LogIndex), s1.term(40 as LogIndex)]).toEqual([4, 40, 2, 3]);
    expect(texts(s1, 4, 6)).toEqual(['g1-4', 'g1-5']);
    const s2 = new SqliteRaftStorage(db, 2, noTail);
    expect(s2.initialState().hardState).toEqual({ term: 3, vote: 'n2', commit: 39 });
    expect(s2.confChanges(1 as LogIndex, 41 as LogIndex).map((e) => dec.decode(e.data))).toEqual(['g2-7']);
    // Moved in (group, idx) order.
    expect(rows(db).slice(0, 2)).toEqual([[0, 1], [0, 2]]);
    expect(rows(db)[40]).toEqual([1, 4]);
    s2.append(ents(41, 41, 3, 'new'));
    expect(existsSync(`${path}-wal`)).toBe(true);
    db.close();
    const again = openLog(path); // opened again: nothing left to convert
    expect(texts(new SqliteRaftStorage(again, 2, noTail), 40, 42)).toEqual(['g2-40', 'new41']);
    expect(again.pragma('page_size', { simple: true })).toBe(1024);
  });

  it('a state file holding the per-group tables (a restored backup) is moved into raft_log', () => {
    const dir = tempDir();
    const state = openNodeDb(dir, 'off');
    dbs.push(state);
    const ins = state.prepare('INSERT INTO raft_entries (group_id, idx, term, type, data, crc) VALUES (?, ?, ?, ?, ?, ?)');
    for (const g of [0, 1]) for (const e of ents(2, 4, 5, `s${g}-`)) ins.run(g, e.index, e.term, 0, e.data, e.crc);
    state.prepare("INSERT INTO raft_hard_state VALUES (0, 5, '', 4, 1, 0), (1, 5, '', 4, 1, 0)").run();
    const log = openLog(join(dir, 'raft-log.db'));
    new SqliteRaftStorage(log, 0); // the index built before the move must follow it
    moveRaftTables(state, log);
    expect(state.prepare('SELECT count(*) FROM raft_entries').pluck().get()).toBe(0);
    expect(rows(log)).toEqual([[0, 2], [0, 3], [0, 4], [1, 2], [1, 3], [1, 4]]);
    const s = new SqliteRaftStorage(log, 1, noTail);
    expect([s.firstIndex(), s.lastIndex()]).toEqual([2, 4]);
    expect(texts(s, 2, 5)).toEqual(['s1-2', 's1-3', 's1-4']);
  });
});
