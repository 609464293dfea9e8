import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../core/log.js';
import { Checkpointer } from './checkpointer.js';
import { dbFilePath, openNodeDb, synchronousPragma, type Db } from './db.js';
import { WalSyncer } from './wal-sync.js';

let dir: string;
let db: Db;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-durability-'));
  db = openNodeDb(dir, 'batch');
});

afterEach(() => {
  if (db.open) db.close();
  rmSync(dir, { recursive: true, force: true });
});

function writeRows(n: number, from = 0): void {
  const put = db.prepare('INSERT INTO node_meta (key, value) VALUES (?, ?)');
  db.transaction(() => {
    for (let i = from; i < from + n; i++) put.run(`k${i}`, 'x'.repeat(200));
  })();
}

describe('--fsync modes', () => {
  it('maps each mode to its synchronous setting; batch leaves checkpoints to the checkpointer', () => {
    expect(synchronousPragma('always')).toBe('FULL');
    expect(synchronousPragma('batch')).toBe('NORMAL');
    expect(synchronousPragma('off')).toBe('OFF');
    expect(db.pragma('synchronous', { simple: true })).toBe(1); // NORMAL
    expect(db.pragma('wal_autocheckpoint', { simple: true })).toBe(0);
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
  });
});

describe('WalSyncer', () => {
  it('releases every waiter, across several rounds, and closes after the last fsync', async () => {
    const errors: unknown[] = [];
    const syncer = new WalSyncer(dbFilePath(dir), (e) => errors.push(e));
    writeRows(10);
    const order: number[] = [];
    const waits = [0, 1, 2].map((i) => syncer.sync().then(() => order.push(i)));
    await Promise.all(waits);
    writeRows(10, 10);
    await syncer.sync();
    expect(order).toEqual([0, 1, 2]);
    expect(errors).toEqual([]);
    await syncer.close();
  });

  it('refuses a database that has no WAL file', () => {
    expect(() => new WalSyncer(join(dir, 'missing.db'), () => {})).toThrow(/does not exist/);
  });
});

describe('Checkpointer', () => {
  it('copies the WAL into the database file from its own thread', async () => {
    // wal_autocheckpoint=0: the main connection never copies pages back, so the database file stays small.
    writeRows(2_000);
    const sizeBefore = statSync(dbFilePath(dir)).size;
    expect(sizeBefore).toBeLessThan(200_000);
    const fatal: unknown[] = [];
    const cp = new Checkpointer(dbFilePath(dir), 20, silentLogger, (e) => fatal.push(e));
    const deadline = Date.now() + 5_000;
    while (statSync(dbFilePath(dir)).size < 400_000 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    await cp.close();
    expect(fatal).toEqual([]);
    expect(statSync(dbFilePath(dir)).size).toBeGreaterThanOrEqual(400_000);
    db.close();
    db = openNodeDb(dir, 'batch');
    expect((db.prepare('SELECT count(*) AS n FROM node_meta').get() as { n: number }).n).toBeGreaterThanOrEqual(2_000);
  });
});
