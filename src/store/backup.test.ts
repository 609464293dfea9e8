/**
 * Backups and restores against real SQLite files in temp dirs: one backup at a time (409), writes made while the
 * copy steps are in it, the temporary copy removed once streamed; restore refuses what it must (an occupied data
 * directory, a file that is not a sound Punctual database of this schema, another node's identity or a cluster
 * member's copy without --new-cluster) and rewrites Raft state for a new cluster.
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PunctualError } from '../core/errors.js';
import { silentLogger } from '../core/log.js';
import { makeEntry, type LogIndex, type NodeId, type Term } from '../raft/index.js';
import { contractJob } from '../scheduler/store.contract.js';
import { BackupTaker, RestoreError, restoreBackup } from './backup.js';
import { openNodeDb, setNodeMeta, type Db } from './db.js';
import { SqliteRaftStorage, bootstrapGroup } from './raft-storage.js';
import { AppliedIndexes } from './shard-snapshot.js';
import { SqliteShardStore } from './shard-store.js';

let dir: string;
const open: Db[] = [];

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-backup-unit-'));
});

afterEach(() => {
  for (const d of open.splice(0)) if (d.open) d.close();
  rmSync(dir, { recursive: true, force: true });
});

/** A node database as a started node leaves it: identity, Raft state of each shard, a few applied jobs. */
function nodeDb(name: string, voters: string[], nodeId = 'n1'): Db {
  const db = openNodeDb(join(dir, name), 'off');
  open.push(db);
  setNodeMeta(db, 'node_id', nodeId);
  setNodeMeta(db, 'shards', '2');
  const applied = new AppliedIndexes(db);
  for (const shard of [0, 1]) {
    bootstrapGroup(db, shard, voters as NodeId[]);
    const raft = new SqliteRaftStorage(db, shard);
    raft.append([2, 3, 4, 5, 6].map((i) => makeEntry(i as LogIndex, 7 as Term, 'normal', new Uint8Array([i]))));
    raft.setHardState({ term: 7 as Term, vote: 'n1' as never, commit: 6 as LogIndex });
    applied.write(shard, 5);
    new SqliteShardStore(db, shard).putJob(contractJob(`job-${shard}`, { shard, metadata: { team: 'growth' } }));
  }
  return db;
}

/** A backup of `db` taken through BackupTaker and written to a file. */
async function backupFile(db: Db, name: string): Promise<string> {
  const taker = new BackupTaker(db, join(dir, 'scratch'), 'n1', silentLogger);
  mkdirSync(join(dir, 'scratch'), { recursive: true });
  const copy = await taker.take();
  const chunks: Buffer[] = [];
  for await (const c of copy.stream) chunks.push(c as Buffer);
  const path = join(dir, name);
  writeFileSync(path, Buffer.concat(chunks));
  return path;
}

const refusal = (f: () => unknown): string => {
  try {
    f();
  } catch (err) {
    expect(err).toBeInstanceOf(RestoreError);
    return (err as Error).message;
  }
  throw new Error('not refused');
};

describe('BackupTaker', () => {
  it('takes one backup at a time, copies writes made while it steps, and removes its copy once streamed', async () => {
    const db = nodeDb('live', ['n1']);
    const store = new SqliteShardStore(db, 0);
    const big = new Uint8Array(64 * 1024);
    db.transaction(() => {
      for (let i = 0; i < 200; i++) store.putJob(contractJob(`bulk-${i}`, { shard: 0, payload: big }));
    })();
    const scratch = join(dir, 'scratch');
    mkdirSync(scratch);
    writeFileSync(join(scratch, 'backup-left-by-a-crash.tmp'), 'x');
    const taker = new BackupTaker(db, scratch, 'n1', silentLogger);
    expect(readdirSync(scratch)).toEqual([]);
    const first = taker.take();
    await expect(taker.take()).rejects.toMatchObject({ code: 'conflict' });
    // Writes through the node's connection between the copy's steps.
    let late = 0;
    let done = false;
    void first.then(() => (done = true));
    while (!done) {
      store.putJob(contractJob(`late-${late++}`, { shard: 0 }));
      await new Promise((r) => setImmediate(r));
    }
    expect(late).toBeGreaterThan(1);
    const copy = await first;
    expect(copy.fileName).toMatch(/^punctual-n1-.*\.db$/);
    const chunks: Buffer[] = [];
    expect(readdirSync(scratch)).toEqual([]); // unlinked once copied: streamed from its open descriptor
    for await (const c of copy.stream) chunks.push(c as Buffer);
    const path = join(dir, 'copy.db');
    writeFileSync(path, Buffer.concat(chunks));
    expect(chunks.reduce((n, c) => n + c.length, 0)).toBe(copy.bytes);
    const restored = new Database(path, { readonly: true });
    const ids = new Set(restored.prepare("SELECT id FROM jobs WHERE id LIKE 'late-%'").pluck().all() as string[]);
    restored.close();
    for (let i = 0; i < late; i++) expect(ids.has(`late-${i}`), `late-${i}`).toBe(true);
    // The next backup is allowed once the first was streamed; none after close.
    const second = await taker.take();
    second.stream.destroy();
    await taker.close();
    await expect(taker.take()).rejects.toBeInstanceOf(PunctualError);
  });
  it('copies the file whole when its first step finds a write transaction open on the connection', async () => {
    const db = nodeDb('busy', ['n1']);
    const store = new SqliteShardStore(db, 0);
    const scratch = join(dir, 'scratch');
    mkdirSync(scratch);
    const taker = new BackupTaker(db, scratch, 'n1', silentLogger);
    // An open batch (the node's state batch between two turns) when the copy's first step runs.
    db.exec('BEGIN');
    store.putJob(contractJob('in-open-batch', { shard: 0 }));
    const taking = taker.take();
    await new Promise((r) => setTimeout(r, 100));
    db.exec('COMMIT');
    const copy = await taking;
    const chunks: Buffer[] = [];
    for await (const c of copy.stream) chunks.push(c as Buffer);
    const path = join(dir, 'busy-copy.db');
    writeFileSync(path, Buffer.concat(chunks));
    const restored = new Database(path, { readonly: true });
    const ids = restored.prepare('SELECT id FROM jobs ORDER BY id').pluck().all() as string[];
    restored.close();
    expect(ids).toEqual(['in-open-batch', 'job-0', 'job-1']);
  });
});

describe('restore', () => {
  it('restores a single node as it was, metadata index included', async () => {
    const file = await backupFile(nodeDb('live', ['n1']), 'single.db');
    const result = restoreBackup({ from: file, dataDir: join(dir, 'restored'), nodeId: null, newCluster: false });
    expect(result).toMatchObject({ nodeId: 'n1', restoredNodeId: 'n1', shards: 2, jobs: 2 });
    expect(readdirSync(join(dir, 'restored'))).toEqual(['punctual.db']);
    const db = openNodeDb(join(dir, 'restored'), 'off');
    open.push(db);
    const raft = new SqliteRaftStorage(db, 0);
    expect(raft.initialState().hardState).toEqual({ term: 7, vote: 'n1', commit: 6 });
    expect(raft.lastIndex()).toBe(6);
    const search = { metadata: [['team', 'growth']] as const, nextFireAfterMs: null, nextFireBeforeMs: null };
    expect(new SqliteShardStore(db, 1).listJobs({ state: null, task: null, limit: 10, afterId: null, search }).map((j) => j.id)).toEqual(['job-1']);
  });

  it('refuses an occupied data directory, files that are not sound Punctual databases, and foreign identities', async () => {
    const file = await backupFile(nodeDb('live', ['n1']), 'single.db');
    const to = (name: string) => ({ from: file, dataDir: join(dir, name), nodeId: null, newCluster: false });
    restoreBackup(to('taken'));
    expect(refusal(() => restoreBackup(to('taken')))).toContain('already holds a database');
    expect(refusal(() => restoreBackup({ ...to('other'), nodeId: 'n2' }))).toContain('the backup is of node n1');
    expect(refusal(() => restoreBackup({ ...to('missing'), from: join(dir, 'nope.db') }))).toContain('no such file');

    const junk = join(dir, 'junk.db');
    writeFileSync(junk, Buffer.alloc(8192, 7));
    expect(refusal(() => restoreBackup({ ...to('junk'), from: junk }))).toMatch(/not a readable Punctual backup|cannot open/);
    const plain = join(dir, 'plain.db');
    new Database(plain).exec('CREATE TABLE t (x)');
    expect(refusal(() => restoreBackup({ ...to('plain'), from: plain }))).toContain('not a Punctual node database');

    const old = join(dir, 'old.db');
    writeFileSync(old, readFileSync(file));
    const edit = new Database(old);
    edit.prepare("UPDATE node_meta SET value = '1' WHERE key = 'schema_version'").run();
    edit.close();
    expect(refusal(() => restoreBackup({ ...to('old'), from: old }))).toContain('schema version 1');

    const corrupt = join(dir, 'corrupt.db');
    const bytes = readFileSync(file);
    bytes.fill(0xff, 4096 * 3, 4096 * 3 + 2000);
    writeFileSync(corrupt, bytes);
    expect(refusal(() => restoreBackup({ ...to('corrupt'), from: corrupt }))).toMatch(/integrity|malformed|not a readable/);
    // Nothing was left behind by the refused restores, not even the data directories they made.
    for (const name of ['other', 'junk', 'plain', 'old', 'corrupt']) expect(existsSync(join(dir, name)), name).toBe(false);
    // A directory that was there before stays (empty, as it was).
    mkdirSync(join(dir, 'given'));
    expect(refusal(() => restoreBackup({ ...to('given'), from: junk }))).toMatch(/not a readable Punctual backup|cannot open/);
    expect(readdirSync(join(dir, 'given'))).toEqual([]);
  });

  it("a cluster member's copy needs --new-cluster, which makes this node the only voter at a fresh term", async () => {
    const file = await backupFile(nodeDb('member', ['n1', 'n2', 'n3']), 'member.db');
    const base = { from: file, nodeId: null, newCluster: false };
    expect(refusal(() => restoreBackup({ ...base, dataDir: join(dir, 'as-was') }))).toContain('also n2, n3');
    const result = restoreBackup({ ...base, dataDir: join(dir, 'new'), nodeId: 'm1', newCluster: true });
    expect(result).toMatchObject({ nodeId: 'n1', restoredNodeId: 'm1', jobs: 2 });
    const db = openNodeDb(join(dir, 'new'), 'off');
    open.push(db);
    expect(db.prepare("SELECT value FROM node_meta WHERE key = 'node_id'").pluck().get()).toBe('m1');
    for (const shard of [0, 1]) {
      const raft = new SqliteRaftStorage(db, shard, { markerSnapshots: true });
      expect(raft.initialState()).toEqual({ hardState: { term: 8, vote: '', commit: 5 }, confState: { voters: ['m1'], learners: [] } });
      expect([raft.firstIndex(), raft.lastIndex(), raft.term(5 as LogIndex)]).toEqual([6, 5, 7]);
      expect(raft.snapshot()).toBeNull(); // a marker: a joining node is sent a real snapshot of the rows
      expect(new AppliedIndexes(db).of(shard)).toBe(5);
      expect(new SqliteShardStore(db, shard).getJob(`job-${shard}`)).not.toBeNull();
    }
  });
});
