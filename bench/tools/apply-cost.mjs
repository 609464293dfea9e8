// Measurement script (not a test, not product code): CPU us per item of create_jobs / fired / outcomes applied
// through the real SqliteShardStore in transactions of `batch` items, of the loader's page per due job, and of
// the engine's per-fire reads.
//   npm run build && node bench/tools/apply-cost.mjs [dist=dist] [items=20000] [batch=1000]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
const dist = resolve(process.argv[2] ?? 'dist');
const N = Number(process.argv[3] ?? 20000), batch = Number(process.argv[4] ?? 1000);
const { openNodeDb } = await import(`file://${dist}/src/store/db.js`);
const { SqliteShardStore } = await import(`file://${dist}/src/store/shard-store.js`);
const { apply } = await import(`file://${dist}/src/scheduler/machine.js`);
const dir = mkdtempSync(join(tmpdir(), 'apply-bench-'));
const db = openNodeDb(dir, 'off');
const store = new SqliteShardStore(db, 0);
const retry = { maxAttempts: 3, initialBackoffMs: 100, maxBackoffMs: 1000, multiplier: 2, jitter: true };
apply(store, { type: 'put_task', nowMs: 1, task: { name: 'hook', url: 'http://127.0.0.1:9/cb', method: 'POST', headers: {}, timeoutMs: 5000, retry, signingSecret: null, maxConcurrency: 1000, createdAtMs: 0, updatedAtMs: 0 } });
const t0 = 2_000_000_000_000;
const job = (id) => ({ id, task: 'hook', callback: null, payload: new Uint8Array([123, 125]), payloadEncoding: 'json', schedule: { kind: 'once', atMs: t0 },
  endAtMs: null, maxRuns: 0, misfire: 'fire_once', overlap: 'allow', metadata: null, requestDigest: 'd'.repeat(64), idempotencyKey: null });
const ids = Array.from({ length: N }, (_, i) => `bjob-${i.toString(36)}`);
function phase(name, mk) {
  const cpu = process.cpuUsage();
  for (let b = 0; b < N; b += batch) db.transaction(() => apply(store, mk(ids.slice(b, b + batch))))();
  const c = process.cpuUsage(cpu);
  console.log(`${name}: ${((c.user + c.system) / N).toFixed(1)} us/item`);
}
phase('create', (s) => ({ type: 'create_jobs', shard: 0, nowMs: t0 - 10000, jobs: s.map(job) }));
{
  // The loader's page: every job due within the horizon, as a full loader scan reads them.
  const cpu = process.cpuUsage();
  for (let r = 0; r < 5; r++) store.dueJobs(t0 + 1, N, null);
  const c = process.cpuUsage(cpu);
  console.log(`loader page (dueJobs): ${((c.user + c.system) / (5 * N)).toFixed(2)} us/due job`);
}
phase('fired', (s) => ({ type: 'fired', nowMs: t0, nodeId: 'n1', items: s.map((jobId) => ({ jobId, scheduledAtMs: t0, attempt: 1, startedAtMs: t0 })) }));
phase('outcomes', (s) => ({ type: 'outcomes', nowMs: t0 + 2, items: s.map((jobId) => ({ jobId, scheduledAtMs: t0, attempt: 1, result: 'succeeded', statusCode: 200, error: null, finishedAtMs: t0 + 2, retryAtMs: null })) }));
let cpu = process.cpuUsage();
for (const id of ids) { store.getJob(id); store.getExecution(id, t0); store.getTask('hook'); }
let c = process.cpuUsage(cpu);
console.log(`engine reads (getJob+getExecution+getTask): ${((c.user + c.system) / N).toFixed(1)} us/item`);
db.close(); rmSync(dir, { recursive: true, force: true });
