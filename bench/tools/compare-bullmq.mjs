// Measurement script (not a test, not product code): Punctual beside BullMQ + Redis on the same machine, in the
// same window, with the same callback receiver (bench/receiver.ts) and the same definition of lateness (arrival at
// the receiver minus the job's due time). Rounds alternate the two systems: A/B figures come from one round.
//
//   node bench/tools/compare-bullmq.mjs --bullmq DIR [--rounds 3] [--rate 1000] [--duration-s 10] [--hot 10000]
//                                       [--concurrency 200] [--dist dist] [--out bench/results/compare-bullmq]
//
// DIR is a node_modules folder holding bullmq (it is not a dependency of Punctual: `npm install --prefix DIR/..
// bullmq@5`); `redis-server` must be on PATH (Debian: apt-get install redis-server). Each BullMQ run starts its
// own redis-server on loopback (appendonly yes, appendfsync everysec, hz 100, a fresh directory) and one worker
// process (BullMQ Worker, `--concurrency` jobs at once, each POSTs to the receiver with undici, as Punctual's node
// does); the generator adds the jobs as delayed jobs (delay = due - now). Each Punctual run is `punctual bench`
// with the same rate, duration or count (it starts its own node and receiver). Scenarios:
//   steady: --rate jobs/s for --duration-s, job i due at start + i / rate + 1 s (punctual bench --scenario steady)
//   hot:    --hot jobs due at one instant after they are all added (punctual bench --scenario hot-instant)
// Writes one JSON per round and a summary.json (medians) to --out.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir, loadavg } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../..');
const { values: args } = parseArgs({
  options: {
    bullmq: { type: 'string' },
    rounds: { type: 'string', default: '3' },
    rate: { type: 'string', default: '1000' },
    'duration-s': { type: 'string', default: '10' },
    hot: { type: 'string', default: '10000' },
    concurrency: { type: 'string', default: '200' },
    dist: { type: 'string', default: 'dist' },
    out: { type: 'string', default: join(repo, 'bench/results/compare-bullmq') },
    scenarios: { type: 'string', default: 'steady,hot' },
    // Internal: this file run as the BullMQ worker process.
    worker: { type: 'boolean', default: false },
    'redis-port': { type: 'string' },
    receiver: { type: 'string' },
  },
});
if (args.bullmq === undefined) throw new Error('--bullmq DIR (a node_modules folder with bullmq) is required');
const requireBullmq = createRequire(join(resolve(args.bullmq), 'bullmq', 'package.json'));
const bullmq = requireBullmq('bullmq');
const queueName = 'callbacks';

if (args.worker) await runWorker();
else await main();

/** The worker process: takes due jobs and POSTs each to the receiver, like a node's firing path. */
async function runWorker() {
  const { Pool } = await import(join(repo, 'node_modules/undici/index.js'));
  const url = new URL(args.receiver);
  const pool = new Pool(url.origin, { connections: 128, pipelining: 1 });
  const connection = { host: '127.0.0.1', port: Number(args['redis-port']), maxRetriesPerRequest: null };
  const worker = new bullmq.Worker(
    queueName,
    async (job) => {
      const { id, due } = job.data;
      const res = await pool.request({
        method: 'POST',
        path: url.pathname,
        headers: {
          'content-type': 'application/json',
          'x-deduplication-key': `${id}:${due}`,
          'x-punctual-job-id': id,
          'x-punctual-scheduled-at': String(due),
        },
        body: '{}',
      });
      await res.body.dump();
      if (res.statusCode >= 300) throw new Error(`receiver answered ${res.statusCode}`);
    },
    { connection, concurrency: Number(args.concurrency) },
  );
  await worker.waitUntilReady();
  process.send?.('ready');
  process.on('SIGTERM', () => void worker.close().then(() => pool.close()).then(() => process.exit(0)));
}

async function main() {
  const receiverMod = await import(join(repo, args.dist, 'bench/receiver.js'));
  const histogram = await import(join(repo, args.dist, 'bench/histogram.js'));
  const rounds = Number(args.rounds);
  const scenarios = args.scenarios.split(',');
  mkdirSync(args.out, { recursive: true });
  const all = [];
  for (let round = 1; round <= rounds; round++) {
    const result = { round, startedAt: new Date().toISOString(), loadAverage: loadavg(), runs: {} };
    for (const scenario of scenarios) {
      // Alternate which system goes first, so drift within the window does not favour one.
      const order = round % 2 === 1 ? ['bullmq', 'punctual'] : ['punctual', 'bullmq'];
      for (const system of order) {
        const figures = system === 'bullmq'
          ? await runBullmq(scenario, receiverMod, histogram)
          : await runPunctual(scenario);
        result.runs[`${system}-${scenario}`] = figures;
        console.log(JSON.stringify({ round, system, scenario, ...brief(figures) }));
      }
    }
    writeFileSync(join(args.out, `round-${round}.json`), JSON.stringify(result, null, 2) + '\n');
    all.push(result);
  }
  const summary = summarize(all);
  writeFileSync(join(args.out, 'summary.json'), JSON.stringify(summary, null, 2) + '\n');
  console.log(JSON.stringify(summary, null, 2));
}

function brief(f) {
  return {
    accepted: f.accepted, delivered: f.delivered, lost: f.lost, early: f.early, duplicates: f.duplicates,
    p50: f.lateness?.p50Ms, p99: f.lateness?.p99Ms, p999: f.lateness?.p999Ms, max: f.lateness?.maxMs,
    first: f.firstWithinMs, last: f.deliveredWithinMs, deliveredPerS: f.deliveredPerS, limitPerS: f.limitPerS,
  };
}

function median(xs) {
  const s = xs.filter((x) => typeof x === 'number').sort((a, b) => a - b);
  return s.length === 0 ? null : s[Math.floor(s.length / 2)];
}

function summarize(all) {
  const out = { rounds: all.length, rate: Number(args.rate), durationS: Number(args['duration-s']), hot: Number(args.hot), medians: {} };
  const keys = Object.keys(all[0].runs);
  for (const key of keys) {
    const per = all.map((r) => brief(r.runs[key]));
    out.medians[key] = Object.fromEntries(Object.keys(per[0]).map((k) => [k, median(per.map((p) => p[k]))]));
    out.medians[key].lostTotal = per.reduce((a, p) => a + (p.lost ?? 0), 0);
    out.medians[key].earlyTotal = per.reduce((a, p) => a + (p.early ?? 0), 0);
  }
  // Ratios within each round (Punctual over BullMQ), then their median: the comparison a busy machine keeps.
  out.ratios = {};
  for (const scenario of args.scenarios.split(',')) {
    const field = scenario === 'steady' ? 'p99' : 'deliveredPerS';
    const r = all.map((x) => brief(x.runs[`punctual-${scenario}`])[field] / brief(x.runs[`bullmq-${scenario}`])[field]);
    out.ratios[`${scenario} ${field} punctual/bullmq`] = { perRound: r, median: median(r) };
  }
  return out;
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

/** `punctual bench` for the same scenario; its own node, receiver and figures. */
async function runPunctual(scenario) {
  const out = mkdtempSync(join(tmpdir(), 'cmp-punctual-'));
  const flags = scenario === 'steady'
    ? ['--scenario', 'steady', '--rate', args.rate, '--duration-s', args['duration-s']]
    : ['--scenario', 'hot-instant', '--count', args.hot];
  await run(process.execPath, [join(repo, args.dist, 'cmd/punctual.js'), 'bench', ...flags, '--out', out], { stdio: 'ignore' });
  const name = scenario === 'steady' ? 'steady' : 'hot-instant';
  const json = JSON.parse(readFileSync(join(out, `latest-${name}.json`), 'utf8'));
  rmSync(out, { recursive: true, force: true });
  return { ...json.figures, gitCommit: json.gitCommit };
}

function run(cmd, argv, opts) {
  return new Promise((res, rej) => {
    const child = spawn(cmd, argv, opts);
    child.on('error', rej);
    child.on('exit', (code) => (code === 0 ? res() : rej(new Error(`${cmd} ${argv.join(' ')} exited ${code}`))));
  });
}

async function startRedis(dir, port) {
  const child = spawn('redis-server', [
    '--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'yes',
    '--appendfsync', 'everysec', '--hz', '100', '--maxmemory-policy', 'noeviction', '--protected-mode', 'yes',
  ], { stdio: 'ignore' });
  const { Redis } = requireBullmq('ioredis');
  for (let i = 0; i < 100; i++) {
    const c = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    try {
      await c.connect();
      await c.ping();
      c.disconnect();
      return child;
    } catch {
      c.disconnect();
      await sleep(50);
    }
  }
  child.kill('SIGKILL');
  throw new Error('redis-server did not start');
}

function startWorker(port, receiverUrl) {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), '--worker', '--bullmq', args.bullmq,
    '--redis-port', String(port), '--receiver', receiverUrl, '--concurrency', args.concurrency], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  return new Promise((res, rej) => {
    child.once('message', () => res(child));
    child.once('exit', (code) => rej(new Error(`worker exited ${code}`)));
  });
}

/** One BullMQ run: redis + worker process + this process as the generator; the same receiver as punctual bench. */
async function runBullmq(scenario, receiverMod, histogram) {
  const tag = `q${Date.now().toString(36)}-`;
  const count = scenario === 'steady' ? Number(args.rate) * Number(args['duration-s']) : Number(args.hot);
  const receiver = await receiverMod.startReceiver({ jobIdPrefix: tag, expectedDeliveries: count });
  const dir = mkdtempSync(join(tmpdir(), 'cmp-redis-'));
  const port = 16379 + Math.floor(Math.random() * 1000);
  const redis = await startRedis(dir, port);
  const worker = await startWorker(port, receiver.url);
  const queue = new bullmq.Queue(queueName, { connection: { host: '127.0.0.1', port } });
  await queue.waitUntilReady();
  const acked = [];
  let lastDue = 0;
  let instant = null;
  const add = async (items) => {
    const now = Date.now();
    await queue.addBulk(items.map(({ id, due }) => ({ name: 'cb', data: { id, due }, opts: { jobId: id, delay: Math.max(0, due - now) } })));
    for (const { id, due } of items) {
      acked.push(id);
      lastDue = Math.max(lastDue, due);
    }
  };
  const startMs = Date.now();
  if (scenario === 'steady') {
    const rate = Number(args.rate);
    // The open loop of punctual bench: every 5 ms, the jobs owed so far; job i due at start + i / rate + 1 s.
    let sent = 0;
    while (sent < count) {
      const owed = Math.min(count, Math.floor(((Date.now() - startMs) * rate) / 1000));
      const items = [];
      for (; sent < owed; sent++) items.push({ id: `${tag}${sent.toString(36)}`, due: Math.floor(startMs + (sent * 1000) / rate) + 1_000 });
      if (items.length > 0) await add(items);
      await sleep(5);
    }
  } else {
    // As punctual bench's hot-instant: the instant after the whole submission (its lead for this count).
    instant = startMs + Math.ceil((count / 10_000) * 1_500) + 2_000;
    for (let i = 0; i < count; i += 1_000) {
      const items = [];
      for (let j = i; j < Math.min(count, i + 1_000); j++) items.push({ id: `${tag}${j.toString(36)}`, due: instant });
      await add(items);
    }
    if (Date.now() > instant - 100) console.error('bullmq: the submission ran past the instant');
  }
  const submitEnd = Date.now();
  // Drain: every job delivered, or 15 s without an arrival after the last due time.
  let lastSeen = 0;
  let lastCount = -1;
  for (;;) {
    const p = await receiver.progress();
    if (p.deliveredJobs >= acked.length) break;
    if (p.deliveredJobs !== lastCount) (lastCount = p.deliveredJobs), (lastSeen = Date.now());
    if (Date.now() > Math.max(lastDue, submitEnd) + 15_000 && Date.now() - lastSeen > 15_000) break;
    await sleep(20);
  }
  await sleep(250);
  const stats = await receiver.stats();
  const lost = await receiver.countMissing(acked);
  worker.kill('SIGTERM');
  await new Promise((r) => worker.once('exit', r));
  await queue.close();
  redis.kill('SIGTERM');
  await new Promise((r) => redis.once('exit', r));
  rmSync(dir, { recursive: true, force: true });
  // The machine's limit in the same window: plain undici into the same receiver (punctual bench's `limit`).
  let limitPerS = null;
  if (scenario !== 'steady') {
    const { pushLimit } = await import(join(repo, args.dist, 'bench/limit.js'));
    limitPerS = (await pushLimit(receiver, `${tag}limit-`, 50_000)).perS ?? null;
  }
  await receiver.close();
  const lateness = histogram.summarize(stats.lateness);
  const spanMs = stats.firstArrivalMs === null ? 0 : stats.lastArrivalMs - stats.firstArrivalMs;
  const deliveredPerS = spanMs > 0 ? (stats.deliveries * 1000) / spanMs : null;
  return {
    system: `bullmq ${requireBullmq('bullmq/package.json').version}, redis-server on loopback`,
    accepted: acked.length,
    delivered: stats.uniqueKeys,
    lost,
    early: stats.early,
    duplicates: stats.duplicates,
    lateness,
    firstWithinMs: instant === null ? null : stats.firstArrivalMs - instant,
    deliveredWithinMs: instant === null ? null : stats.lastArrivalMs - instant,
    // As punctual bench: deliveries over the first to the last arrival.
    deliveredPerS,
    limitPerS,
    shareOfLimit: limitPerS && deliveredPerS ? deliveredPerS / limitPerS : null,
  };
}
