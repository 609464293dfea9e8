/**
 * The schema-2 file of job-keys.test.ts: `schema2.db` was written by the schema-2 code (commit ca4fefe, built:
 * `node src/store/testdata/schema2-fixture.mjs <that checkout>/dist src/store/testdata`), and `schema2-answers.json`
 * holds what that code's SqliteShardStore answered about it (`answers` below) and the SHA-256 of each shard's
 * snapshot image. The test opens a copy with the current code (which migrates it), asks the same questions and encodes
 * the same images. 40 jobs a shard and 2 KiB pages keep the two files under 200 KB together; run again on the
 * same code, the script writes both files byte for byte the same.
 */
const states = ['PENDING', 'RUNNING', 'PAUSED', 'SUCCEEDED', 'FAILED', 'CANCELLED'];

function rand(seed) {
  let s = seed;
  return () => {
    s = (s * 1103515245 + 12345) % 2147483648;
    return s / 2147483648;
  };
}

function task(name, retentionMs) {
  return {
    name, url: `http://127.0.0.1:9/${name}`, method: 'POST', headers: { 'content-type': 'application/json' }, timeoutMs: 10_000,
    retry: { maxAttempts: 3, initialBackoffMs: 10, maxBackoffMs: 100, multiplier: 2, jitter: false },
    signingSecret: null, maxConcurrency: 10, createdAtMs: 1, updatedAtMs: 2, ...(retentionMs === undefined ? {} : { retentionMs }),
  };
}

/** Jobs, executions (some of jobs with no row), tasks, metadata and dead letters in shards 0 and 1. */
export function writeRows(store, shard) {
  const r = rand(1000 + shard);
  store.putTask(task('email'));
  store.putTask(task('short', 5_000));
  for (let i = 0; i < 40; i++) {
    const state = states[Math.floor(r() * states.length)];
    const finished = state === 'SUCCEEDED' || state === 'FAILED' || state === 'CANCELLED';
    const id = `s${shard}-job-${String(Math.floor(r() * 1e6)).padStart(6, '0')}-${i}`;
    const t = r() < 0.3 ? 'short' : r() < 0.9 ? 'email' : null;
    for (let e = 0; e < Math.floor(r() * 4); e++) {
      const estate = e === 0 && !finished && r() < 0.5 ? (r() < 0.5 ? 'QUEUED' : 'RUNNING') : state === 'FAILED' ? 'FAILED' : 'SUCCEEDED';
      store.putExecution({
        jobId: id, scheduledAtMs: 1_000 + e * 100 + i, attempt: 1 + e, state: estate, startedAtMs: 1_005 + e * 100, finishedAtMs: null,
        statusCode: estate === 'FAILED' ? (r() < 0.5 ? 503 : 404) : null, error: estate === 'FAILED' ? 'HTTP error' : null,
        nodeId: 'n1', latenessMs: 3, retryAtMs: estate === 'QUEUED' ? 5_000 : null, fencingToken: '1.2',
      });
    }
    store.putJob({
      id, task: t, callback: t === null ? { url: 'http://127.0.0.1:9/cb', method: 'POST', headers: {}, timeoutMs: 1000 } : null,
      payload: new Uint8Array([1, 2, i % 256]), payloadEncoding: 'base64',
      schedule: { kind: 'once', atMs: 1_700_000_000_000 + i }, endAtMs: null, maxRuns: 0, misfire: 'fire_once', overlap: 'allow',
      metadata: r() < 0.5 ? { team: r() < 0.5 ? 'growth' : 'core', tier: String(i % 3) } : null,
      requestDigest: `d${i}`, idempotencyKey: null, state,
      nextFireAtMs: state === 'PENDING' || state === 'PAUSED' ? 1_700_000_000_000 + Math.floor(r() * 100) * 1000 : null,
      runs: 0, shard, createdAtMs: 5, updatedAtMs: 1_000 + Math.floor(r() * 10_000),
    });
  }
  for (let i = 0; i < 3; i++) {
    store.putExecution({
      jobId: `s${shard}-orphan-${i}`, scheduledAtMs: 10 + i, attempt: 1, state: i === 0 ? 'RUNNING' : 'SUCCEEDED', startedAtMs: null,
      finishedAtMs: null, statusCode: null, error: null, nodeId: null, latenessMs: null, retryAtMs: null, fencingToken: null,
    });
  }
}

const noSearch = { metadata: [], nextFireAfterMs: null, nextFireBeforeMs: null };

function pages(fetch, key) {
  const out = [];
  let after = null;
  for (;;) {
    const page = fetch(after);
    out.push(...page);
    if (page.length < 7) return out;
    after = key(page[page.length - 1]);
  }
}

/** Everything the SchedulerStore and the dead-letter methods answer about the rows (JSON-comparable). */
export function answers(store) {
  const out = {};
  const list = (q) => pages((after) => store.listJobs({ limit: 7, afterId: after, ...q }), (j) => j.id);
  out.all = list({ state: null, task: null });
  for (const s of states) out[`state:${s}`] = list({ state: s, task: null }).map((j) => j.id);
  for (const t of ['email', 'short']) {
    out[`task:${t}`] = list({ state: null, task: t }).map((j) => j.id);
    out[`task:${t}:PENDING`] = list({ state: 'PENDING', task: t }).map((j) => j.id);
    out[`live:${t}`] = store.countLiveJobsOfTask(t);
  }
  out.search = list({ state: null, task: null, search: { ...noSearch, metadata: [['team', 'growth']] } }).map((j) => j.id);
  out.search2 = list({ state: null, task: 'email', search: { ...noSearch, metadata: [['team', 'core'], ['tier', '1']] } }).map((j) => j.id);
  out.searchRange = list({ state: null, task: null, search: { ...noSearch, nextFireAfterMs: 1_700_000_020_000, nextFireBeforeMs: 1_700_000_060_000 } }).map((j) => j.id);
  out.counts = store.countJobsByState();
  out.due = pages((after) => store.dueJobs(1_700_000_050_000, 7, after), (d) => ({ atMs: d.nextFireAtMs, id: d.id }));
  out.dueBetween = store.countDueBetween(1_700_000_010_000, 1_700_000_030_000);
  const bySecond = new Array(100).fill(0);
  store.addDueBySecond(1_700_000_000_000, bySecond);
  out.dueBySecond = bySecond;
  out.executions = {};
  for (const j of [...out.all.map((x) => x.id), `s${store.shard}-orphan-0`, `s${store.shard}-orphan-1`]) {
    // In full once; the other reads by the scheduled times they return (their records are the same rows).
    const at = (e) => e.scheduledAtMs;
    const last = store.lastExecution(j);
    out.executions[j] = {
      list: store.listExecutions(j, 10, null), last: last === null ? null : at(last), open: store.openExecutions(j).map(at),
      before: store.listExecutions(j, 10, 1_150).map(at),
    };
  }
  out.allOpen = pages((after) => store.allOpenExecutions(7, after), (e) => ({ jobId: e.jobId, scheduledAtMs: e.scheduledAtMs }));
  out.expired = store.expiredJobs(8_000, 3_000, 1_000);
  out.expiredOwn = store.expiredJobs(8_000, null, 1_000);
  const noFilter = { task: null, errorClass: null, sinceMs: null, untilMs: null };
  out.dead = pages((after) => store.deadLetters(noFilter, 7, after), (d) => ({ failedAtMs: d.failedAtMs, jobId: d.jobId }));
  out.deadEmail = store.deadLetters({ ...noFilter, task: 'email' }, 100, null);
  out.deadCount = store.countDeadLetters(noFilter);
  out.deadCountSince = store.countDeadLetters({ ...noFilter, sinceMs: 5_000 });
  out.deadGroups = store.deadLetterGroups();
  out.overExecutions = [];
  for (let after = null; ; ) {
    const sweep = store.jobsOverExecutions(after, 7, 1);
    out.overExecutions.push(sweep.ids);
    if (sweep.nextAfterId === null) break;
    after = sweep.nextAfterId;
  }
  return JSON.parse(JSON.stringify(out, (_k, v) => (v instanceof Uint8Array ? { bytes: [...v] } : v)));
}

if (process.argv[1] !== undefined && process.argv[1].endsWith('schema2-fixture.mjs')) {
  const { resolve } = await import('node:path');
  const { pathToFileURL } = await import('node:url');
  const [distArg, outArg] = process.argv.slice(2);
  // Resolved from the working directory (a bare import() would resolve a relative path from this file).
  const dist = pathToFileURL(resolve(distArg)).href;
  const outDir = resolve(outArg);
  const { openNodeDb, setNodeMeta, getNodeMeta } = await import(`${dist}/src/store/db.js`);
  const { SqliteShardStore } = await import(`${dist}/src/store/shard-store.js`);
  const { encodeShardImage } = await import(`${dist}/src/store/shard-snapshot.js`);
  const { writeFileSync, renameSync, rmSync } = await import('node:fs');
  const data = `${outDir}/data`;
  const db = openNodeDb(data, 'off');
  if (getNodeMeta(db, 'schema_version') !== '2') throw new Error('not the schema-2 code');
  setNodeMeta(db, 'node_id', 'n1');
  setNodeMeta(db, 'shards', '2');
  const result = {};
  for (const shard of [0, 1]) {
    const store = new SqliteShardStore(db, shard);
    db.transaction(() => writeRows(store, shard))();
    result[shard] = answers(store);
  }
  const { createHash } = await import('node:crypto');
  result.imageSha256 = Object.fromEntries([0, 1].map((shard) => [shard, createHash('sha256').update(encodeShardImage(db, shard)).digest('hex')]));
  // Out of WAL mode for VACUUM to take the smaller page size (the node's open puts the file back in WAL mode).
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.pragma('journal_mode = DELETE');
  db.pragma('page_size = 2048');
  db.exec('VACUUM');
  db.close();
  renameSync(`${data}/punctual.db`, `${outDir}/schema2.db`);
  rmSync(data, { recursive: true, force: true });
  writeFileSync(`${outDir}/schema2-answers.json`, JSON.stringify(result));
}
