import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Prng } from '../core/prng.js';
import { CorruptEntryError, makeEntry, RawNode } from '../raft/index.js';
import type { ConfState, Config, Entry, LogIndex, LogStorageWriter, NodeId, Term } from '../raft/index.js';
import { runLogStorageContract } from '../raft/storage.contract.js';
import { openNodeDb, type Db } from './db.js';
import { bootstrapGroup, raftGroups, SqliteRaftStorage } from './raft-storage.js';

interface Opened {
  dir: string;
  db: Db;
}

const opened = new WeakMap<LogStorageWriter, Opened>();
const enc = new TextEncoder();

function ent(index: number, term: number, data = `e${index}t${term}`): Entry {
  return makeEntry(index as LogIndex, term as Term, 'normal', enc.encode(data));
}

// Group 7 in a file that also holds other groups, so group keying is exercised by the whole contract. Three tails:
// the node's (every recent read from memory), none (every read from SQLite), and two entries (reads across both).
const tails: Array<[string, { tailEntriesMax?: number }]> = [['', {}], [', no tail', { tailEntriesMax: 0 }], [', tail of 2', { tailEntriesMax: 2 }]];
for (const [name, tail] of tails) runLogStorageContract(
  `SqliteRaftStorage${name}`,
  (boot: ConfState) => {
    const dir = mkdtempSync(join(tmpdir(), 'punctual-raft-'));
    const db = openNodeDb(dir, 'off');
    bootstrapGroup(db, 3, ['x1', 'x2'] as NodeId[]);
    new SqliteRaftStorage(db, 8).append([ent(1, 9), ent(2, 9)]);
    if (boot.voters.length > 0) bootstrapGroup(db, 7, boot.voters);
    const s = new SqliteRaftStorage(db, 7, tail);
    opened.set(s, { dir, db });
    return s;
  },
  {
    reopen: (s) => {
      const o = opened.get(s)!;
      o.db.close();
      const db = openNodeDb(o.dir, 'off');
      const again = new SqliteRaftStorage(db, 7, tail);
      opened.set(again, { dir: o.dir, db });
      return again;
    },
    close: (s) => {
      const o = opened.get(s)!;
      if (o.db.open) o.db.close();
      rmSync(o.dir, { recursive: true, force: true });
    },
  },
);

describe('SqliteRaftStorage beyond the contract', () => {
  let dir = '';
  let db: Db | null = null;
  const open = (): Db => {
    dir = mkdtempSync(join(tmpdir(), 'punctual-raft-'));
    db = openNodeDb(dir, 'off');
    return db;
  };
  afterEach(() => {
    if (db?.open) db.close();
    db = null;
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('bootstraps a group once: a second call is a no-op that keeps later state', () => {
    const db = open();
    expect(bootstrapGroup(db, 0, ['n1', 'n2', 'n3'] as NodeId[])).toBe(true);
    const s = new SqliteRaftStorage(db, 0);
    s.append([ent(2, 1)]);
    s.setHardState({ term: 1 as Term, vote: 'n1' as NodeId, commit: 2 as LogIndex });
    expect(bootstrapGroup(db, 0, ['n9'] as NodeId[])).toBe(false);
    const again = new SqliteRaftStorage(db, 0);
    expect(again.initialState().confState.voters).toEqual(['n1', 'n2', 'n3']);
    expect(again.initialState().hardState).toEqual({ term: 1, vote: 'n1', commit: 2 });
    expect(again.lastIndex()).toBe(2);
    expect(bootstrapGroup(db, 1, ['n1'] as NodeId[])).toBe(true);
    new SqliteRaftStorage(db, 5).append([ent(1, 1)]);
    expect(raftGroups(db)).toEqual([0, 1, 5]);
  });

  it('writes of many groups join the caller transaction; after a rollback reload() restores the cache', () => {
    const db = open();
    const groups = [0, 1, 2].map((g) => {
      bootstrapGroup(db, g, ['n1'] as NodeId[]);
      return new SqliteRaftStorage(db, g);
    });
    db.transaction(() => {
      for (const s of groups) {
        s.append([ent(2, 1, `g${s.group}`), ent(3, 1)]);
        s.setHardState({ term: 1 as Term, vote: 'n1' as NodeId, commit: 3 as LogIndex });
      }
    })();
    expect(groups.map((s) => s.lastIndex())).toEqual([3, 3, 3]);
    expect(() =>
      db.transaction(() => {
        for (const s of groups) s.append([ent(4, 2), ent(5, 2)]);
        groups[1]!.setHardState({ term: 2 as Term, vote: 'n1' as NodeId, commit: 5 as LogIndex });
        throw new Error('fsync failed');
      })(),
    ).toThrow('fsync failed');
    for (const s of groups) s.reload();
    expect(groups.map((s) => s.lastIndex())).toEqual([3, 3, 3]);
    expect(groups[1]!.initialState().hardState.term).toBe(1);
    expect(new TextDecoder().decode(groups[2]!.entries(2 as LogIndex, 3 as LogIndex, 1e9)[0]!.data)).toBe('g2');
  });

  it('throws CorruptEntryError for a flipped byte and for a missing row', () => {
    const db = open();
    new SqliteRaftStorage(db, 4).append([ent(1, 1, 'hello'), ent(2, 1), ent(3, 1)]);
    db.prepare('UPDATE raft_log SET data = ? WHERE group_id = 4 AND idx = 1').run(Buffer.from('hellp'));
    // Opened again, as after a restart: every entry is read from the file.
    const s = new SqliteRaftStorage(db, 4);
    expect(() => s.entries(1 as LogIndex, 2 as LogIndex, 1e9)).toThrow(CorruptEntryError);
    db.prepare('DELETE FROM raft_log WHERE group_id = 4 AND idx = 2').run();
    expect(() => s.entries(2 as LogIndex, 4 as LogIndex, 1e9)).toThrow(CorruptEntryError);
  });

  it('serves the newest entries as appended from memory, older ones from SQLite, whatever the truncation', () => {
    const db = open();
    const s = new SqliteRaftStorage(db, 0, { tailEntriesMax: 3 });
    const first = [1, 2, 3, 4, 5].map((i) => ent(i, 1));
    s.append(first);
    const recent = s.entries(3 as LogIndex, 6 as LogIndex, 1e9);
    expect(recent).toHaveLength(3);
    recent.forEach((e, i) => expect(e).toBe(first[i + 2]));
    // Below the tail: read back from the rows, equal but not the same objects.
    const older = s.entries(1 as LogIndex, 6 as LogIndex, 1e9);
    expect(older).toEqual(first);
    expect(older[4]).not.toBe(first[4]);
    // A new leader's entries replace the held suffix.
    const second = [4, 5, 6].map((i) => ent(i, 2));
    s.append(second);
    expect(s.entries(4 as LogIndex, 7 as LogIndex, 1e9)).toEqual(second);
    expect(s.entries(4 as LogIndex, 7 as LogIndex, 1e9)[2]).toBe(second[2]);
    expect(s.entries(1 as LogIndex, 7 as LogIndex, 1e9).map((e) => e.term)).toEqual([1, 1, 1, 2, 2, 2]);
    // The byte bound applies as it does to rows: at least one entry.
    expect(s.entries(4 as LogIndex, 7 as LogIndex, 1)).toEqual([second[0]]);
    // A rolled-back append is forgotten once reload() runs (what the host does after a failed transaction).
    expect(() =>
      db.transaction(() => {
        s.append([ent(7, 2, 'lost')]);
        throw new Error('disk full');
      })(),
    ).toThrow('disk full');
    s.reload();
    expect(s.lastIndex()).toBe(6);
    expect(() => s.entries(7 as LogIndex, 8 as LogIndex, 1e9)).toThrow();
    const kept = ent(7, 2, 'kept');
    s.append([kept]);
    expect(s.entries(7 as LogIndex, 8 as LogIndex, 1e9)[0]).toBe(kept);
    // Compaction drops the held entries it passes; the rest are still served.
    s.createSnapshot(5 as LogIndex, { voters: ['n1'] as NodeId[], learners: [] }, new Uint8Array(0));
    s.compact(5 as LogIndex);
    expect(() => s.entries(5 as LogIndex, 8 as LogIndex, 1e9)).toThrow();
    expect(s.entries(6 as LogIndex, 8 as LogIndex, 1e9)).toEqual([second[2], kept]);
  });

  it('holds about tailBytesMax of entry data: a large entry pushes the older ones out', () => {
    const db = open();
    const s = new SqliteRaftStorage(db, 0, { tailBytesMax: 100 });
    const small = [1, 2, 3].map((i) => ent(i, 1, 'x'.repeat(30)));
    s.append(small);
    expect(s.entries(1 as LogIndex, 4 as LogIndex, 1e9)[0]).toBe(small[0]);
    const big = ent(4, 1, 'y'.repeat(80));
    s.append([big]);
    const got = s.entries(1 as LogIndex, 5 as LogIndex, 1e9);
    expect(got.map((e) => e.index)).toEqual([1, 2, 3, 4]);
    expect(got[0]).not.toBe(small[0]);
    expect(s.entries(4 as LogIndex, 5 as LogIndex, 1e9)[0]).toBe(big);
  });

  it('answers term() across term changes, truncation and compaction from its cache', () => {
    const db = open();
    const s = new SqliteRaftStorage(db, 0);
    s.append([ent(1, 1), ent(2, 1), ent(3, 2), ent(4, 2), ent(5, 3)]);
    s.append([ent(4, 4), ent(5, 4), ent(6, 5)]);
    expect([1, 2, 3, 4, 5, 6].map((i) => s.term(i as LogIndex))).toEqual([1, 1, 2, 4, 4, 5]);
    s.createSnapshot(4 as LogIndex, { voters: ['n1'] as NodeId[], learners: [] }, new Uint8Array([1]));
    s.compact(3 as LogIndex);
    expect([3, 4, 5, 6].map((i) => s.term(i as LogIndex))).toEqual([2, 4, 4, 5]);
    const again = new SqliteRaftStorage(db, 0);
    expect([3, 4, 5, 6].map((i) => again.term(i as LogIndex))).toEqual([2, 4, 4, 5]);
    expect(again.firstIndex()).toBe(4);
  });

  it('keeps a multi-MB snapshot blob intact', () => {
    const db = open();
    const s = new SqliteRaftStorage(db, 0);
    const data = new Uint8Array(5 * 1024 * 1024).map((_, i) => (i * 31) & 0xff);
    s.applySnapshot({ metadata: { index: 100 as LogIndex, term: 3 as Term, confState: { voters: ['n1'] as NodeId[], learners: [] } }, data });
    const got = new SqliteRaftStorage(db, 0).snapshot()!;
    expect(got.metadata.index).toBe(100);
    expect(Buffer.compare(Buffer.from(got.data), Buffer.from(data))).toBe(0);
  });

  it('carries a real RawNode through elections, commits and a restart', () => {
    const db = open();
    bootstrapGroup(db, 2, ['n1'] as NodeId[]);
    const config: Config = {
      id: 'n1' as NodeId, group: 2, electionTicks: 10, heartbeatTicks: 1, preVote: true, checkQuorum: true,
      maxInflightMsgs: 64, maxInflightBytes: 0, maxMsgBytes: 1 << 20, leaseTicks: 8, rand: new Prng(1),
    };
    let applied: string[] = [];
    const drive = (raw: RawNode, s: SqliteRaftStorage): void => {
      while (raw.hasReady()) {
        const rd = raw.ready();
        db.transaction(() => {
          s.append(rd.entries);
          if (rd.hardState) s.setHardState(rd.hardState);
        })();
        for (const e of rd.committedEntries) if (e.type === 'normal' && e.data.length > 0) applied.push(new TextDecoder().decode(e.data));
        raw.advance();
      }
    };
    let s = new SqliteRaftStorage(db, 2);
    let raw = new RawNode(config, s);
    raw.campaign();
    drive(raw, s);
    expect(raw.status().role).toBe('leader');
    for (const word of ['a', 'b', 'c']) expect(raw.propose(enc.encode(word)).ok).toBe(true);
    drive(raw, s);
    expect(applied).toEqual(['a', 'b', 'c']);
    const before = raw.status();
    s = new SqliteRaftStorage(db, 2);
    applied = [];
    raw = new RawNode({ ...config, applied: 1 as LogIndex }, s);
    drive(raw, s);
    expect(raw.status().term).toBe(before.term);
    expect(s.lastIndex()).toBe(before.lastIndex);
    raw.campaign();
    drive(raw, s);
    expect(raw.status().role).toBe('leader');
    expect(applied).toEqual(['a', 'b', 'c']);
  });
});
