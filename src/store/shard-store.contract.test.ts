import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runSchedulerStoreContract } from '../scheduler/store.contract.js';
import { openNodeDb } from './db.js';
import { SqliteShardStore } from './shard-store.js';

runSchedulerStoreContract('SqliteShardStore', () => {
  const dir = mkdtempSync(join(tmpdir(), 'punctual-contract-'));
  const db = openNodeDb(dir, 'off');
  // Another shard's rows live in the same file: the store must never see them.
  const neighbour = new SqliteShardStore(db, 1);
  neighbour.putTask({
    name: 'email',
    url: 'http://127.0.0.1:9/other-shard',
    method: 'POST',
    headers: {},
    timeoutMs: 1,
    retry: { maxAttempts: 1, initialBackoffMs: 1, maxBackoffMs: 1, multiplier: 1, jitter: false },
    signingSecret: null,
    maxConcurrency: 1,
    createdAtMs: 0,
    updatedAtMs: 0,
  });
  return {
    store: new SqliteShardStore(db, 0),
    cleanup: () => {
      db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});
