/**
 * The metadata index against real SQLite files: a snapshot image rebuilds the receiving shard's index, a file made
 * before the index existed is indexed when opened, a deleted job leaves no index rows, and a search scans the
 * index (not the jobs table).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { contractJob } from '../scheduler/store.contract.js';
import { noSearch } from '../scheduler/search.js';
import { openNodeDb, type Db } from './db.js';
import { searchSql } from './metadata-index.js';
import { encodeShardImage, restoreShardImage } from './shard-snapshot.js';
import { SqliteShardStore } from './shard-store.js';

let dir: string;
const open: Db[] = [];

function db(name: string): Db {
  const d = openNodeDb(join(dir, name), 'off');
  open.push(d);
  return d;
}

const byTeam = (store: SqliteShardStore, team: string): string[] =>
  store
    .listJobs({ state: null, task: null, limit: 100, afterId: null, search: { ...noSearch, metadata: [['team', team]] } })
    .map((j) => j.id);

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-mdindex-'));
});

afterEach(() => {
  for (const d of open.splice(0)) if (d.open) d.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('metadata index', () => {
  it('is rebuilt from a restored shard image, leaving other shards alone', () => {
    const a = db('a');
    const b = db('b');
    const src = new SqliteShardStore(a, 1);
    src.putJob(contractJob('x', { shard: 1, metadata: { team: 'growth' } }));
    src.putJob(contractJob('y', { shard: 1, metadata: { team: 'core' } }));
    const dst = new SqliteShardStore(b, 1);
    dst.putJob(contractJob('stale', { shard: 1, metadata: { team: 'growth' } }));
    const other = new SqliteShardStore(b, 2);
    other.putJob(contractJob('keep', { shard: 2, metadata: { team: 'growth' } }));
    b.transaction(() => restoreShardImage(b, 1, encodeShardImage(a, 1)))();
    expect(byTeam(dst, 'growth')).toEqual(['x']);
    expect(byTeam(dst, 'core')).toEqual(['y']);
    expect(byTeam(other, 'growth')).toEqual(['keep']);
  });

  it('indexes every job of a file made before the index existed, once, when the file is opened', () => {
    const a = db('a');
    const store = new SqliteShardStore(a, 0);
    store.putJob(contractJob('p', { shard: 0, metadata: { team: 'growth' } }));
    store.putJob(contractJob('q', { shard: 0, metadata: { team: 'growth' } }));
    // As an older version left it: no index table, no marker.
    a.exec("DROP TABLE job_metadata; DELETE FROM node_meta WHERE key = 'metadata_index'");
    a.close();
    const reopened = db('a');
    expect(byTeam(new SqliteShardStore(reopened, 0), 'growth')).toEqual(['p', 'q']);
    expect(reopened.prepare("SELECT value FROM node_meta WHERE key = 'metadata_index'").pluck().get()).toBe('1');
  });

  it('drops the rows of a deleted job (whatever deletes it) and a search reads the index', () => {
    const a = db('a');
    const store = new SqliteShardStore(a, 0);
    store.putJob(contractJob('gone', { shard: 0, metadata: { team: 'growth', tier: 1 } }));
    a.prepare("DELETE FROM jobs WHERE id = 'gone'").run();
    expect(a.prepare('SELECT count(*) FROM job_metadata').pluck().get()).toBe(0);
    const sql = searchSql('id, state, task, next_fire_at, data', { ...noSearch, metadata: [['team', 'x'], ['tier', '1']] }, true, false);
    const plan = (a.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(0, 'team', 'x', '', 'tier', '1', 'PENDING', 10) as Array<{ detail: string }>).map((r) => r.detail).join('\n');
    expect(plan).toContain('USING COVERING INDEX job_metadata_kv');
    expect(plan).not.toContain('USE TEMP B-TREE FOR ORDER BY');
  });
});
