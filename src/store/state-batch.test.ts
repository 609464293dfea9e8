/**
 * The state file's write batch against a real SQLite file: writes stay invisible to another connection until the
 * batch commits (by its interval, by its entry bound, at once under a hold), the writing connection reads them
 * meanwhile, and the durable applied index moves only once the commit's fsync answered.
 */
import Database from 'better-sqlite3';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openNodeDb, type Db } from './db.js';
import { AppliedIndexes } from './shard-snapshot.js';
import { StateBatch, type StateBatchOptions } from './state-batch.js';

let dir = '';
let db: Db;
let other: Db;
const applied = [0, 0];

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-batch-'));
  db = openNodeDb(dir, 'batch');
  other = new Database(join(dir, 'punctual.db'), { readonly: true });
  applied.fill(0);
});

afterEach(() => {
  other.close();
  db.close();
  rmSync(dir, { recursive: true, force: true });
});

function batch(over: Partial<StateBatchOptions> = {}): StateBatch {
  return new StateBatch(db, {
    intervalMs: 30,
    entriesMax: 1_000,
    retryMs: 50,
    sync: null,
    applied: () => applied,
    onFatal: (err) => {
      throw err;
    },
    onFull: () => undefined,
    onSpace: () => undefined,
    ...over,
  });
}

/** One applied entry: a row and the shard's applied index, as the applier writes them. */
function write(b: StateBatch, shard: number, name: string): void {
  b.begin();
  db.prepare('INSERT INTO tasks (shard, name, data) VALUES (?, ?, ?)').run(shard, name, Buffer.from('x'));
  applied[shard]!++;
  b.added(1);
}

const committedTasks = (): number => other.prepare('SELECT count(*) FROM tasks').pluck().get() as number;
const seenTasks = (): number => db.prepare('SELECT count(*) FROM tasks').pluck().get() as number;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('StateBatch', () => {
  it('keeps its writes in one open transaction until its interval, readable by its own connection only', async () => {
    const b = batch();
    write(b, 0, 'a');
    write(b, 1, 'b');
    expect(b.isOpen()).toBe(true);
    expect(seenTasks()).toBe(2);
    expect(committedTasks()).toBe(0);
    await sleep(80);
    expect(b.isOpen()).toBe(false);
    expect(committedTasks()).toBe(2);
    expect(b.commits).toBe(1);
    expect([b.durableApplied(0), b.durableApplied(1)]).toEqual([1, 1]);
  });

  it('commits at the next turn once it holds entriesMax entries', async () => {
    const b = batch({ intervalMs: 60_000, entriesMax: 3 });
    for (const n of ['a', 'b', 'c']) write(b, 0, n);
    expect(committedTasks()).toBe(0);
    await new Promise((r) => setImmediate(r));
    expect(committedTasks()).toBe(3);
    await b.close();
  });

  it('moves the durable applied index only when the fsync of its commit answered', async () => {
    let release: () => void = () => undefined;
    const b = batch({ sync: () => new Promise<void>((r) => (release = r)) });
    write(b, 0, 'a');
    expect(b.commit()).toBe(true);
    expect(committedTasks()).toBe(1);
    await sleep(20);
    expect(b.durableApplied(0)).toBe(0);
    release();
    await b.synced();
    expect(b.durableApplied(0)).toBe(1);
  });

  it('under a hold commits at the end of every turn (no transaction stays open across the event loop)', async () => {
    const b = batch({ intervalMs: 60_000 });
    write(b, 0, 'a');
    const release = b.hold();
    expect(committedTasks()).toBe(1);
    write(b, 0, 'b');
    expect(b.isOpen()).toBe(true);
    await new Promise((r) => setImmediate(r));
    expect(b.isOpen()).toBe(false);
    expect(committedTasks()).toBe(2);
    release();
    write(b, 0, 'c');
    await new Promise((r) => setImmediate(r));
    expect(b.isOpen()).toBe(true);
    await b.close();
    expect(committedTasks()).toBe(3);
  });

  it('a savepoint inside the batch rolls back alone', async () => {
    const b = batch({ intervalMs: 60_000 });
    write(b, 0, 'a');
    expect(() =>
      db.transaction(() => {
        db.prepare('INSERT INTO tasks (shard, name, data) VALUES (0, ?, ?)').run('gone', Buffer.from('x'));
        throw new Error('the command failed');
      })(),
    ).toThrow('the command failed');
    expect(b.isOpen()).toBe(true);
    await b.close();
    expect(other.prepare('SELECT name FROM tasks').pluck().all()).toEqual(['a']);
  });

  it('a full disk inside a savepoint that rolled the whole batch back: the next commit reports it lost, never fatal', async () => {
    const fatal: unknown[] = [];
    const full: boolean[] = [];
    const b = batch({ intervalMs: 60_000, onFatal: (err) => fatal.push(err), onFull: (_err, lost) => full.push(lost) });
    write(b, 0, 'a');
    const pages = db.pragma('page_count', { simple: true }) as number;
    db.pragma(`max_page_count = ${pages + 2}`);
    expect(() =>
      db.transaction(() => {
        db.prepare('INSERT INTO tasks (shard, name, data) VALUES (0, ?, ?)').run('big', Buffer.alloc(1 << 20));
      })(),
    ).toThrow(/full/);
    // SQLite rolled back the whole transaction (not just the savepoint): the batch's row went with it.
    expect(db.inTransaction).toBe(false);
    expect(b.commit()).toBe(false);
    expect(fatal).toEqual([]);
    expect(full).toEqual([true]);
    expect(b.isOpen()).toBe(false);
    db.pragma('max_page_count = 1073741823');
    write(b, 0, 'a');
    await b.close();
    expect(other.prepare('SELECT name FROM tasks').pluck().all()).toEqual(['a']);
  });

  it('writes each shard\'s applied index once, just before its COMMIT; a lost batch leaves the committed one', async () => {
    const indexes = AppliedIndexes.of(db);
    const committedIndex = (): unknown => other.prepare('SELECT applied_index FROM shard_meta WHERE shard = 0').pluck().get();
    const b = batch({ intervalMs: 60_000 });
    for (let i = 1; i <= 3; i++) {
      write(b, 0, `r${i}`);
      indexes.write(0, i);
    }
    // Inside the batch: the rows' index is known, shard_meta is not written yet (not even on this connection).
    expect(indexes.of(0)).toBe(3);
    expect(db.prepare('SELECT count(*) FROM shard_meta').pluck().get()).toBe(0);
    expect(b.commit()).toBe(true);
    expect(committedIndex()).toBe(3);
    // A batch SQLite rolled back: its index went with its rows.
    write(b, 0, 'r4');
    indexes.write(0, 4);
    db.exec('ROLLBACK');
    expect(indexes.of(0)).toBe(3);
    expect(b.commit()).toBe(false);
    // Outside a batch the index goes with the caller's rows, at once.
    db.transaction(() => indexes.write(0, 5))();
    expect(committedIndex()).toBe(5);
    await b.close();
  });
});
