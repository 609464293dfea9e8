/**
 * Shard images for Raft snapshots against real SQLite files: a copy restores exactly the shard's rows (other
 * shards untouched), an empty image clears the shard, applied indexes persist; and SqliteRaftStorage's marker
 * snapshots hide themselves from the Raft core until a real one is recorded.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { LogIndex, NodeId, Term } from '../raft/index.js';
import { makeEntry } from '../raft/index.js';
import type { JobRecord, TaskRecord } from '../scheduler/types.js';
import { openNodeDb, type Db } from './db.js';
import { SqliteRaftStorage, bootstrapGroup } from './raft-storage.js';
import { AppliedIndexes, encodeShardImage, restoreShardImage } from './shard-snapshot.js';
import { SqliteShardStore } from './shard-store.js';

let dir: string;
let a: Db;
let b: Db;

const task = (name: string): TaskRecord => ({
  name, url: 'http://127.0.0.1:9/hook', method: 'POST', headers: {}, timeoutMs: 1000,
  retry: { maxAttempts: 3, initialBackoffMs: 10, maxBackoffMs: 100, multiplier: 2, jitter: false },
  signingSecret: null, maxConcurrency: 10, createdAtMs: 1, updatedAtMs: 2,
});

const job = (id: string, shard: number): JobRecord => ({
  id, task: 't', callback: null, payload: new Uint8Array([1, 2, 3]), payloadEncoding: 'base64',
  schedule: { kind: 'once', atMs: 1_700_000_000_000 }, endAtMs: null, maxRuns: 0, misfire: 'fire_once',
  overlap: 'allow', metadata: null, requestDigest: 'd', idempotencyKey: null, state: 'PENDING',
  nextFireAtMs: 1_700_000_000_000, runs: 0, shard, createdAtMs: 5, updatedAtMs: 6,
});

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-image-'));
  a = openNodeDb(join(dir, 'a'), 'off');
  b = openNodeDb(join(dir, 'b'), 'off');
});

afterEach(() => {
  a.close();
  b.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('shard images', () => {
  it('restores exactly the shard rows, leaves other shards alone, and an empty image clears the shard', () => {
    const src = new SqliteShardStore(a, 1);
    src.putTask(task('t'));
    src.putCalendar({ name: 'hol', timezone: 'Europe/Berlin', dates: ['2027-12-25'], ranges: [], description: null, createdAtMs: 1, updatedAtMs: 2 });
    for (let i = 0; i < 50; i++) src.putJob(job(`j${i}`, 1));
    const dst = new SqliteShardStore(b, 1);
    dst.putJob(job('stale', 1));
    const other = new SqliteShardStore(b, 2);
    other.putJob(job('keep', 2));
    b.transaction(() => restoreShardImage(b, 1, encodeShardImage(a, 1)))();
    expect(dst.getJob('stale')).toBeNull();
    expect(dst.getJob('j49')).toEqual(src.getJob('j49'));
    expect(dst.getTask('t')).toEqual(src.getTask('t'));
    expect(dst.getCalendar('hol')).toEqual(src.getCalendar('hol'));
    expect(dst.getCalendar('hol')?.dates).toEqual(['2027-12-25']);
    expect(dst.countJobsByState().PENDING).toBe(50);
    expect(other.getJob('keep')).not.toBeNull();
    b.transaction(() => restoreShardImage(b, 1, new Uint8Array(0)))();
    expect(dst.countJobsByState().PENDING).toBe(0);
    expect(dst.listCalendars()).toEqual([]);
    expect(other.getJob('keep')).not.toBeNull();
  });

  it('keeps applied indexes per shard', () => {
    const idx = new AppliedIndexes(a);
    expect(idx.of(3)).toBe(0);
    idx.write(3, 42);
    expect(new AppliedIndexes(a).of(3)).toBe(42);
  });

  it('marker snapshots (no data) are hidden from Raft until a real snapshot is recorded', () => {
    bootstrapGroup(a, 0, ['n1' as NodeId]);
    const s = new SqliteRaftStorage(a, 0, { markerSnapshots: true });
    expect(s.snapshot()).not.toBeNull(); // the bootstrap snapshot (index 1, empty state) is real
    s.append(Array.from({ length: 10 }, (_, i) => makeEntry((i + 2) as LogIndex, 1 as Term, 'normal', new Uint8Array([i]))));
    const conf = { voters: ['n1' as NodeId], learners: [] };
    s.createSnapshot(8 as LogIndex, conf, new Uint8Array(0));
    s.compact(6 as LogIndex);
    expect(s.snapshot()).toBeNull();
    expect(s.snapshotIndex()).toBe(8);
    s.createSnapshot(10 as LogIndex, conf, new Uint8Array([9, 9]));
    expect(s.snapshot()?.metadata.index).toBe(10);
    expect(s.snapshot()?.data).toEqual(new Uint8Array([9, 9]));
  });
});
