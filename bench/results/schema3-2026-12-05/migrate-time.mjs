/**
 * How long the schema-2 -> 3 migration takes at a node's first start (docs/deploy.md): writes a schema-2 state
 * file of JOBS jobs with the schema-2 code (8 shards; three quarters finished with one execution each, the rest
 * pending), then times `openNodeDb` of the new code on it (the migration and the indexes made after it).
 * Usage: node migrate-time.mjs <dist of the schema-2 code> <dist of the schema-3 code> [JOBS] [DIR]
 */
import { mkdtempSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [oldArg, newArg, jobsArg, dirArg] = process.argv.slice(2);
// Resolved from the working directory (a bare import() would resolve a relative path from this file).
const oldDist = pathToFileURL(resolve(oldArg)).href;
const newDist = pathToFileURL(resolve(newArg)).href;
const jobs = Number(jobsArg ?? 200_000);
const dir = dirArg ?? mkdtempSync(join(tmpdir(), 'punctual-migrate-'));
const shards = 8;

const old = await import(`${oldDist}/src/store/db.js`);
const { SqliteShardStore } = await import(`${oldDist}/src/store/shard-store.js`);
const db = old.openNodeDb(dir, 'off');
if (old.getNodeMeta(db, 'schema_version') !== '2') throw new Error(`${oldDist} is not the schema-2 code`);
old.setNodeMeta(db, 'node_id', 'n1');
old.setNodeMeta(db, 'shards', String(shards));
const task = {
  name: 'email', url: 'http://127.0.0.1:9/hook', method: 'POST', headers: { 'content-type': 'application/json' }, timeoutMs: 10_000,
  retry: { maxAttempts: 3, initialBackoffMs: 10, maxBackoffMs: 100, multiplier: 2, jitter: false },
  signingSecret: null, maxConcurrency: 10, createdAtMs: 1, updatedAtMs: 2,
};
const stores = Array.from({ length: shards }, (_, s) => new SqliteShardStore(db, s));
for (const s of stores) s.putTask(task);
const t0 = performance.now();
for (let base = 0; base < jobs; base += 10_000) {
  db.transaction(() => {
    for (let i = base; i < Math.min(jobs, base + 10_000); i++) {
      const id = crypto.randomUUID();
      const shard = i % shards;
      const done = i % 4 !== 0;
      const at = 1_700_000_000_000 + i * 10;
      if (done) {
        stores[shard].putExecution({
          jobId: id, scheduledAtMs: at, attempt: 1, state: 'SUCCEEDED', startedAtMs: at + 1, finishedAtMs: at + 20, statusCode: 200,
          error: null, nodeId: 'n1', latenessMs: 1, retryAtMs: null, fencingToken: '1.1',
        });
      }
      stores[shard].putJob({
        id, task: 'email', callback: null, payload: new TextEncoder().encode(`{"to":"user-${i}@example.com"}`), payloadEncoding: 'json',
        schedule: { kind: 'once', atMs: at }, endAtMs: null, maxRuns: 0, misfire: 'fire_once', overlap: 'allow', metadata: null,
        requestDigest: `d${i}`, idempotencyKey: null, state: done ? 'SUCCEEDED' : 'PENDING', nextFireAtMs: done ? null : at + 86_400_000,
        runs: done ? 1 : 0, shard, createdAtMs: at - 1000, updatedAtMs: done ? at + 20 : at - 1000,
      });
    }
  })();
}
db.pragma('wal_checkpoint(TRUNCATE)');
db.close();
const written = performance.now() - t0;
const bytes = statSync(join(dir, 'punctual.db')).size;

const fresh = await import(`${newDist}/src/store/db.js`);
const t1 = performance.now();
const migrated = fresh.openNodeDb(dir, 'off');
const migrateMs = performance.now() - t1;
const version = fresh.getNodeMeta(migrated, 'schema_version');
const count = migrated.prepare('SELECT count(*) FROM jobs').pluck().get();
migrated.pragma('wal_checkpoint(TRUNCATE)');
migrated.close();
console.log(JSON.stringify({
  jobs, executions: Math.floor(jobs * 0.75), shards, schema2FileBytes: bytes, writeSchema2Ms: Math.round(written),
  migrateMs: Math.round(migrateMs), msPerMillionJobs: Math.round((migrateMs * 1e6) / jobs), version, jobsAfter: count,
  schema3FileBytes: statSync(join(dir, 'punctual.db')).size, dir,
}));
