import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { crc32 } from './crc32.js';
import { openNodeDb, type Db } from './db.js';
import { LogCorruptionError, SqliteLogStorage, entryCrc, type LogEntry } from './log-storage.js';

const bytes = (s: string): Uint8Array => new TextEncoder().encode(s);
const entry = (index: number, term: number, s = `e${index}`): LogEntry => ({ index, term, data: bytes(s) });

describe('crc32', () => {
  it('matches the IEEE check value and known vectors', () => {
    expect(crc32(bytes('123456789'))).toBe(0xcbf43926);
    expect(crc32(new Uint8Array())).toBe(0);
    expect(crc32(bytes('The quick brown fox jumps over the lazy dog'))).toBe(0x414fa339);
  });
  it('continues across chunks', () => {
    expect(crc32(bytes('56789'), crc32(bytes('1234')))).toBe(0xcbf43926);
  });
});

describe('SqliteLogStorage', () => {
  let dir: string;
  let db: Db;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'punctual-log-'));
    db = openNodeDb(dir, 'batch');
  });
  afterEach(() => {
    if (db.open) db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('starts empty', () => {
    const log = new SqliteLogStorage(db, 0);
    expect(log.firstIndex()).toBe(1);
    expect(log.lastIndex()).toBe(0);
    expect(log.term(0)).toBe(0);
    expect(log.term(1)).toBeNull();
    expect(log.hardState()).toEqual({ term: 0, vote: null, commit: 0 });
    expect(log.appliedIndex()).toBe(0);
  });

  it('appends and reads back ranges with terms', () => {
    const log = new SqliteLogStorage(db, 3);
    log.append([entry(1, 1), entry(2, 1), entry(3, 2)]);
    expect(log.lastIndex()).toBe(3);
    expect(log.entries(1, 4).map((e) => [e.index, e.term, new TextDecoder().decode(e.data)])).toEqual([
      [1, 1, 'e1'],
      [2, 1, 'e2'],
      [3, 2, 'e3'],
    ]);
    expect(log.entries(2, 3).map((e) => e.index)).toEqual([2]);
    expect(log.term(3)).toBe(2);
    expect(log.appendNext(2, bytes('x'), log.lastIndex())).toBe(4);
    expect(log.lastIndex()).toBe(4);
  });

  it('keeps shards apart', () => {
    const a = new SqliteLogStorage(db, 0);
    const b = new SqliteLogStorage(db, 1);
    a.append([entry(1, 1), entry(2, 1)]);
    b.append([entry(1, 5)]);
    expect(a.lastIndex()).toBe(2);
    expect(b.lastIndex()).toBe(1);
    expect(b.term(1)).toBe(5);
    b.setAppliedIndex(1);
    expect(a.appliedIndex()).toBe(0);
  });

  it('replaces a conflicting suffix and refuses gaps', () => {
    const log = new SqliteLogStorage(db, 0);
    log.append([entry(1, 1), entry(2, 1), entry(3, 1)]);
    log.append([entry(2, 2, 'new2')]);
    expect(log.lastIndex()).toBe(2);
    expect(new TextDecoder().decode(log.entries(2, 3)[0].data)).toBe('new2');
    expect(() => log.append([entry(5, 2)])).toThrow(/gap/);
  });

  it('compacts: entries up to i are gone, term(i) is kept, later entries stay', () => {
    const log = new SqliteLogStorage(db, 0);
    log.append([entry(1, 1), entry(2, 1), entry(3, 2), entry(4, 2)]);
    log.compact(2);
    expect(log.firstIndex()).toBe(3);
    expect(log.lastIndex()).toBe(4);
    expect(log.term(2)).toBe(1);
    expect(log.term(1)).toBeNull();
    expect(() => log.entries(1, 3)).toThrow(/compacted/);
    expect(log.entries(3, 5).map((e) => e.index)).toEqual([3, 4]);
    log.compact(4);
    expect(log.lastIndex()).toBe(4);
    expect(log.firstIndex()).toBe(5);
    expect(log.appendNext(3, bytes('y'), log.lastIndex())).toBe(5);
  });

  it('detects a corrupted entry by its checksum', () => {
    const log = new SqliteLogStorage(db, 0);
    log.append([entry(1, 1, 'hello')]);
    db.prepare('UPDATE log SET data = ? WHERE shard = 0 AND idx = 1').run(Buffer.from('hellp'));
    expect(() => log.entries(1, 2)).toThrow(LogCorruptionError);
  });

  it('binds the checksum to index and term', () => {
    const d = bytes('same');
    expect(entryCrc(1, 1, d)).not.toBe(entryCrc(2, 1, d));
    expect(entryCrc(1, 1, d)).not.toBe(entryCrc(1, 2, d));
  });

  it('keeps log, hard state and applied index across close and reopen', () => {
    const log = new SqliteLogStorage(db, 2);
    log.append([entry(1, 1), entry(2, 3)]);
    log.setHardState({ term: 3, vote: 'n2', commit: 2 });
    log.setAppliedIndex(2);
    log.compact(1);
    db.close();
    db = openNodeDb(dir, 'off');
    const again = new SqliteLogStorage(db, 2);
    expect(again.hardState()).toEqual({ term: 3, vote: 'n2', commit: 2 });
    expect(again.appliedIndex()).toBe(2);
    expect(again.firstIndex()).toBe(2);
    expect(again.lastIndex()).toBe(2);
    expect(again.term(2)).toBe(3);
    expect(again.term(1)).toBe(1);
  });

  it('rolls back an append with its transaction', () => {
    const log = new SqliteLogStorage(db, 0);
    log.append([entry(1, 1)]);
    expect(() =>
      db.transaction(() => {
        log.append([entry(2, 1)]);
        log.setAppliedIndex(2);
        throw new Error('apply failed');
      })(),
    ).toThrow('apply failed');
    expect(log.lastIndex()).toBe(1);
    expect(log.appliedIndex()).toBe(0);
  });
});
