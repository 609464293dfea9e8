/**
 * The Ready round of a single node on real files (raft-host.ts): a round with nothing to make durable (the commit
 * of the entries the round before it synced) writes nothing to the log; its commit index goes into the next write
 * of the log, or the ticker's within a tick. A crash in between leaves the log's commit index behind the entries
 * already answered, and a node started on those files still has every one of them.
 */
import Database from 'better-sqlite3';
import { copyFileSync, existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { dbFilePath, logFilePath } from '../store/db.js';
import type { NodeOptions } from './host.js';
import { callbackSpec, jobSpec, nodeConfig } from './testing/fixtures.js';
import { useNodeBed } from './testing/bed.js';
import { waitFor } from './testing/receiver.js';

const bed = useNodeBed('punctual-round-', { closeGraceMs: 1_000 });
/** A state batch that never commits by itself during a test: the log alone holds what was answered. */
const longBatch: NodeOptions = { stateBatch: { intervalMs: 600_000, entriesMax: 1_000_000 } };

/** What the log file holds now, through a connection of its own. */
function logRow<T>(dir: string, sql: string): T {
  const db = new Database(logFilePath(dir), { readonly: true });
  try {
    return db.prepare(sql).get() as T;
  } finally {
    db.close();
  }
}

const lastIndex = (dir: string): number => logRow<{ n: number }>(dir, 'SELECT max(idx) AS n FROM raft_log WHERE group_id = 0').n;
const commitIndex = (dir: string): number => logRow<{ n: number }>(dir, 'SELECT commit_index AS n FROM raft_hard_state WHERE group_id = 0').n;

/** The files as a kill -9 at this instant leaves them (the OS keeps every write). */
function crashImage(from: string, to: string): void {
  mkdirSync(to, { recursive: true });
  for (const base of [dbFilePath(from), logFilePath(from)]) {
    for (const suffix of ['', '-wal']) {
      if (existsSync(base + suffix)) copyFileSync(base + suffix, join(to, (base + suffix).slice(from.length + 1)));
    }
  }
}

describe('the round of a single node', () => {
  it('writes a commit index with the next write of the log or within a tick, and a crash before that loses nothing answered', async () => {
    const dir = join(bed.dir, 'a');
    const core = await bed.startCore(nodeConfig(dir, { shards: 1 }), longBatch);
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const far = core.service.nowMs() + 3_600_000;
    const images: string[] = [];
    for (let i = 0; i < 20; i++) {
      const [r] = await core.service.createJobs([jobSpec(`j${i}`, { kind: 'once', atMs: far })]);
      expect(r!.ok).toBe(true);
      // Right after the answer, before anything else is written: the log holds the entry, its commit may lag.
      const image = join(bed.dir, `image-${i}`);
      crashImage(dir, image);
      images.push(image);
      expect(commitIndex(dir)).toBeLessThanOrEqual(lastIndex(dir));
    }
    // Nothing else is written: the ticker writes the commit index of the last round.
    await waitFor('the log commit index to reach its last entry', () => commitIndex(dir) === lastIndex(dir), 2_000);
    await core.close();
    for (const [i, image] of images.entries()) {
      if (i % 5 !== 4) continue;
      const again = await bed.startCore(nodeConfig(image, { shards: 1 }), longBatch);
      for (let k = 0; k <= i; k++) expect((await again.service.getJob(`j${k}`)).state).toBe('PENDING');
      await again.close();
    }
  });
});
