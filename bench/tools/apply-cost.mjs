// Measurement script (not a test, not product code): CPU us per item of create_jobs / fired / outcomes applied
// through the real SqliteShardStore in transactions of `batch` items, of the loader's page per due job, of the
// engine's per-fire reads, of NodeCore's fire (tick to dispatch order, on the same store: armed by the create's
// effects, and armed by the loader), and of the Raft log's side of a record: outcomes entries of 256 items appended
// in a transaction with the hard state, then read back as committed entries (what the applier gets) with their
// crc checked (as src/raft/log.ts does).
//   npm run build && node [--expose-gc] bench/tools/apply-cost.mjs [dist=dist] [items=20000] [batch=1000] [checkpointMs=] [perCommand=batch]
// The create / fired / outcomes phases apply through a StateBatch as the node does: `batch` items per batch
// transaction (BEGIN .. COMMIT), each command of `perCommand` items in its own savepoint inside it (at a steady
// 1,000/s a command carries one or two items, a state batch ~100 jobs).
// With checkpointMs (e.g. 100,1000): for each interval, a fresh `--fsync batch` file with the node's Checkpointer
// at that interval, the items fired then finished at a paced 10,000 items/s (100 per transaction every 10 ms);
// prints the process CPU (every thread: the checkpointer's copying included) per item and the checkpoint rounds.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
const dist = resolve(process.argv[2] ?? 'dist');
const N = Number(process.argv[3] ?? 20000), batch = Number(process.argv[4] ?? 1000);
const checkpointMs = (process.argv[5] ?? '').split(',').filter((x) => x !== '').map(Number);
const perCommand = Number(process.argv[6] || batch);
const { openNodeDb } = await import(`file://${dist}/src/store/db.js`);
const { SqliteShardStore } = await import(`file://${dist}/src/store/shard-store.js`);
const { apply } = await import(`file://${dist}/src/scheduler/machine.js`);
const { StateBatch } = await import(`file://${dist}/src/store/state-batch.js`);
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
  const inSavepoint = db.transaction((fn) => fn());
  const fail = (err) => { throw err; };
  const sb = new StateBatch(db, { intervalMs: 3_600_000, entriesMax: 1e9, retryMs: 1000, sync: null, applied: () => [], onFatal: fail, onFull: fail, onSpace: () => {} });
  for (let b = 0; b < N; b += batch) {
    sb.begin();
    const s = ids.slice(b, b + batch);
    for (let c = 0; c < s.length; c += perCommand) inSavepoint(() => apply(store, mk(s.slice(c, c + perCommand))));
    sb.commit();
  }
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
{
  // NodeCore's fire of N due one-off jobs, from tick to dispatch order: what the fire reads (or holds) included.
  const { NodeCore } = await import(`file://${dist}/src/nodecore/index.js`);
  const { silentLogger } = await import(`file://${dist}/src/core/log.js`);
  const due = t0 + 100_000;
  const fireCost = (name, viaEffects) => {
    const core = new NodeCore({ nodeId: 'n1', stores: [store], startMs: due - 10_000, rand01: () => 0.5, mergeCreates: true,
      leaseValid: () => true, applyBacklog: () => 0, logger: silentLogger });
    const cids = ids.map((id) => `${name}-${id}`);
    const heap = () => (globalThis.gc?.(), globalThis.gc?.(), process.memoryUsage().heapUsed);
    const heapBefore = heap();
    if (viaEffects) core.leaderStart(0, 1, due - 10_000);
    for (let b = 0; b < N; b += batch) {
      const cmd = { type: 'create_jobs', shard: 0, nowMs: due - 10_000, jobs: cids.slice(b, b + batch).map((id) => ({ ...job(id), schedule: { kind: 'once', atMs: due } })) };
      const { effects } = db.transaction(() => apply(store, cmd))();
      core.applied(0, cmd, effects, due - 10_000);
    }
    // Led only after the creates: their effects armed nothing, the leadership's first load arms them (keys only).
    if (!viaEffects) core.leaderStart(0, 1, due - 10_000);
    while (core.loading()) core.tick(due - 10_000);
    core.ready();
    // With `node --expose-gc`: the heap the core keeps per armed attempt (wheel, occurrence and what it holds).
    const heapPerArmed = globalThis.gc === undefined ? '' : `, ${((heap() - heapBefore) / N).toFixed(0)} B of heap per armed attempt`;
    let orders = 0;
    const cpu = process.cpuUsage();
    while (orders < N) {
      core.tick(due);
      orders += core.ready().dispatch.length;
    }
    const c = process.cpuUsage(cpu);
    console.log(`core fire (${viaEffects ? 'armed by the create: records held' : 'armed by the loader: records read'}): ${((c.user + c.system) / N).toFixed(1)} us/fire${heapPerArmed}`);
    core.stop();
  };
  fireCost('ce', true);
  fireCost('cl', false);
}
{
  const { SqliteRaftStorage } = await import(`file://${dist}/src/store/raft-storage.js`);
  const { encodeCommand } = await import(`file://${dist}/src/scheduler/codec.js`);
  const { makeEntry, entryCrcOk } = await import(`file://${dist}/src/raft/index.js`);
  const storage = new SqliteRaftStorage(db, 0);
  const per = 256;
  const data = encodeCommand({ type: 'outcomes', nowMs: t0 + 2, items: ids.slice(0, per).map((jobId) => ({ jobId, scheduledAtMs: t0, attempt: 1, startedAtMs: t0, result: 'succeeded', statusCode: 200, error: null, finishedAtMs: t0 + 2, retryAtMs: null })) });
  const entries = Math.ceil(N / per);
  let next = storage.lastIndex() + 1;
  cpu = process.cpuUsage();
  for (let k = 0; k < entries; k++, next++) {
    const e = makeEntry(next, 1, 'normal', data);
    db.transaction(() => {
      storage.append([e]);
      storage.setHardState({ term: 1, vote: 'n1', commit: next });
    })();
    for (const got of storage.entries(next, next + 1, 64 * 1024 * 1024)) if (!entryCrcOk(got)) throw new Error('crc');
  }
  c = process.cpuUsage(cpu);
  console.log(`raft log (append + read back, ${data.length} B entries of ${per} items): ${((c.user + c.system) / (entries * per)).toFixed(2)} us/item`);
}
db.close(); rmSync(dir, { recursive: true, force: true });

if (checkpointMs.length > 0) {
  const { Checkpointer, walFileBytes } = await import(`file://${dist}/src/store/checkpointer.js`);
  const { silentLogger } = await import(`file://${dist}/src/core/log.js`);
  const { dbFilePath } = await import(`file://${dist}/src/store/db.js`);
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  for (const ms of checkpointMs) {
    const d = mkdtempSync(join(tmpdir(), 'apply-bench-'));
    const cdb = openNodeDb(d, 'batch');
    const st = new SqliteShardStore(cdb, 0);
    apply(st, { type: 'put_task', nowMs: 1, task: { name: 'hook', url: 'http://127.0.0.1:9/cb', method: 'POST', headers: {}, timeoutMs: 5000, retry, signingSecret: null, maxConcurrency: 1000, createdAtMs: 0, updatedAtMs: 0 } });
    for (let b = 0; b < N; b += batch) cdb.transaction(() => apply(st, { type: 'create_jobs', shard: 0, nowMs: t0 - 10000, jobs: ids.slice(b, b + batch).map(job) }))();
    const ckpt = new Checkpointer(dbFilePath(d), ms, silentLogger, (err) => { throw err; });
    await sleep(Math.max(ms, 200));
    const step = 100;
    const cpu0 = process.cpuUsage();
    const started = performance.now();
    for (const kind of ['fired', 'outcomes']) {
      for (let b = 0; b < N; b += step) {
        const s = ids.slice(b, b + step);
        const cmd = kind === 'fired'
          ? { type: 'fired', nowMs: t0, nodeId: 'n1', items: s.map((jobId) => ({ jobId, scheduledAtMs: t0, attempt: 1, startedAtMs: t0 })) }
          : { type: 'outcomes', nowMs: t0 + 2, items: s.map((jobId) => ({ jobId, scheduledAtMs: t0, attempt: 1, result: 'succeeded', statusCode: 200, error: null, finishedAtMs: t0 + 2, retryAtMs: null })) };
        cdb.transaction(() => apply(st, cmd))();
        await sleep(10);
      }
    }
    await sleep(Math.max(ms, 200)); // the last checkpoint of the run is part of its cost
    const cc = process.cpuUsage(cpu0);
    const stats = ckpt.stats();
    console.log(`checkpoint every ${ms} ms: ${((cc.user + cc.system) / (2 * N)).toFixed(1)} us/item of process CPU (fired + outcomes, paced), ${stats.rounds} rounds, ${stats.truncates} truncates, WAL ${(walFileBytes(dbFilePath(d)) / 1e6).toFixed(1)} MB, ${((performance.now() - started) / 1000).toFixed(1)} s`);
    await ckpt.close();
    cdb.close();
    rmSync(d, { recursive: true, force: true });
  }
}
