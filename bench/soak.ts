/**
 * The retention soak (docs/performance.md; its runs: bench/NOTES.md "Retention soak"): one real `punctual serve` node with a short
 * `--retention`, an open loop of one-off jobs at `--rate` callbacks/s for `--minutes`, and the size of the node's
 * data directory (database, WAL and the rest) sampled every `--sample-s` seconds. With retention working, the size
 * stops growing once the first jobs reach the end of their retention: the curve flattens. Each sample also has the
 * node's worst event-loop delay so far (its punctual_event_loop_stall_max_ms: what the WAL's TRUNCATE checkpoints,
 * which hold the writer lock, cost the firing engine). The result (every
 * sample, the parameters, and the growth over the last half of the run) is written to
 * bench/results/soak-retention-<time>.json and printed as a table.
 *
 *   npm run build --silent && node dist/bench/soak.js --minutes 5 --rate 1000 --retention 60s
 *
 * The receiver here only counts (the bench's receiver keeps every deduplication key, which a long soak must not).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdir, readdir, stat, writeFile } from 'node:fs/promises';
import { realpathSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import Database from 'better-sqlite3';
import { ServerSet, submitOpenLoop, sleepMs, type JobPlan } from './load.js';
import { spawnLocalNodes } from './node-process.js';
import { environmentInfo } from './results.js';

export interface SoakOptions {
  minutes: number;
  ratePerS: number;
  /** `serve --retention` of the node, e.g. `60s`. */
  retention: string;
  /** Each job is due this long after its submission. */
  delayMs: number;
  sampleS: number;
  outDir: string;
}

export interface SoakSample {
  atS: number;
  dataBytes: number;
  dbBytes: number;
  walBytes: number;
  accepted: number;
  delivered: number;
  /** Pages of the scheduler's state (jobs, executions and their indexes): what retention bounds. */
  stateBytes: number;
  /** Pages of the Raft log (raft_entries): bounded by its compaction (nodeLimits.logKeepEntries per shard). */
  raftLogBytes: number;
  /** Free pages in the file (reused by new rows). */
  freeBytes: number;
  jobs: number;
  /** Worst event-loop delay of the node since it started (perf_hooks.monitorEventLoopDelay, 1 s windows), in ms. */
  loopStallMaxMs: number | null;
}

export interface SoakResult {
  kind: 'soak-retention';
  startedAt: string;
  parameters: SoakOptions;
  samples: SoakSample[];
  /** Largest data directory size seen, and its growth (and the state's) from the middle of the run to its end. */
  maxDataBytes: number;
  growthSecondHalfBytes: number;
  stateGrowthSecondHalfBytes: number;
  failed: number;
  /** Largest WAL file seen. */
  maxWalBytes: number;
  /** The node's 1 s windows by worst event-loop delay at the end (cumulative, as Prometheus counts them). */
  loopStallWindows: Array<{ leMs: string; windows: number }>;
  environment: ReturnType<typeof environmentInfo>;
}

async function dirBytes(dir: string): Promise<{ total: number; db: number; wal: number }> {
  let total = 0;
  let db = 0;
  let wal = 0;
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      const sub = await dirBytes(path);
      total += sub.total;
      db += sub.db;
      wal += sub.wal;
      continue;
    }
    const size = (await stat(path).catch(() => ({ size: 0 }))).size;
    total += size;
    if (entry.name === 'punctual.db') db += size;
    if (entry.name === 'punctual.db-wal') wal += size;
  }
  return { total, db, wal };
}

/** Where the database's pages go, read through a read-only connection of its own (WAL: it never blocks the node). */
function census(db: Database.Database): { stateBytes: number; raftLogBytes: number; freeBytes: number; jobs: number } {
  const rows = db.prepare('SELECT name, sum(pgsize) AS bytes FROM dbstat GROUP BY name').all() as Array<{ name: string; bytes: number }>;
  const tableOf = db.prepare("SELECT tbl_name FROM sqlite_schema WHERE name = ?").pluck();
  let stateBytes = 0;
  let raftLogBytes = 0;
  for (const r of rows) {
    const table = (tableOf.get(r.name) as string | undefined) ?? r.name;
    if (table === 'jobs' || table === 'executions') stateBytes += r.bytes;
    if (table === 'raft_entries') raftLogBytes += r.bytes;
  }
  const pageSize = db.pragma('page_size', { simple: true }) as number;
  const freeBytes = (db.pragma('freelist_count', { simple: true }) as number) * pageSize;
  const jobs = db.prepare('SELECT count(*) FROM jobs').pluck().get() as number;
  return { stateBytes, raftLogBytes, freeBytes, jobs };
}

/** The node's event-loop stall figures from its /metrics (null when it does not answer). */
async function loopStall(servers: ServerSet): Promise<{ maxMs: number | null; windows: Array<{ leMs: string; windows: number }> }> {
  const res = await servers.send('GET', '/metrics').catch(() => null);
  if (res === null || res.status !== 200 || typeof res.json !== 'string') return { maxMs: null, windows: [] };
  const text = res.json;
  const max = /^punctual_event_loop_stall_max_ms (\S+)$/m.exec(text);
  const windows = [...text.matchAll(/^punctual_event_loop_stall_ms_bucket\{le="([^"]+)"\} (\S+)$/gm)].map((m) => ({ leMs: m[1]!, windows: Number(m[2]) }));
  return { maxMs: max === null ? null : Number(max[1]), windows };
}

/** Answers 200 at once and counts: nothing kept per delivery. */
async function countingReceiver(): Promise<{ url: string; delivered(): number; close(): Promise<void> }> {
  let delivered = 0;
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      delivered++;
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/soak`,
    delivered: () => delivered,
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}

export async function runRetentionSoak(o: SoakOptions, log: (line: string) => void): Promise<{ result: SoakResult; path: string }> {
  const rx = await countingReceiver();
  // The spawned node reads its flags' env vars: the short retention of the soak.
  process.env.PUNCTUAL_RETENTION = o.retention;
  const nodes = await spawnLocalNodes({ nodes: 1, logLevel: 'warn' });
  const servers = new ServerSet(nodes.urls, { connections: 8 });
  const samples: SoakSample[] = [];
  let accepted = 0;
  const startedMs = Date.now();
  let db: Database.Database | null = null;
  try {
    db = new Database(join(nodes.dataDir, 'n1', 'punctual.db'), { readonly: true, fileMustExist: true });
    const task = await servers.send('PUT', '/v1/tasks/soak', JSON.stringify({ url: rx.url, retry: { max_attempts: 1 } }));
    if (task.status >= 300) throw new Error(`PUT /v1/tasks/soak answered ${task.status}`);
    const plan: JobPlan = { idPrefix: `s${startedMs.toString(36)}-`, taskName: 'soak', dueAtMs: () => Date.now() + o.delayMs };
    const sample = async (): Promise<void> => {
      const size = await dirBytes(nodes.dataDir);
      const c = census(db!);
      const loopStallMaxMs = (await loopStall(servers)).maxMs;
      const s: SoakSample = { atS: Math.round((Date.now() - startedMs) / 1000), dataBytes: size.total, dbBytes: size.db, walBytes: size.wal, accepted, delivered: rx.delivered(), ...c, loopStallMaxMs };
      samples.push(s);
      const mb = (n: number, w: number): string => (n / 1e6).toFixed(1).padStart(w);
      log(`${String(s.atS).padStart(6)} s  data ${mb(s.dataBytes, 7)} MB  db ${mb(s.dbBytes, 7)}  wal ${mb(s.walBytes, 5)}  state ${mb(s.stateBytes, 6)}  raft log ${mb(s.raftLogBytes, 6)}  free ${mb(s.freeBytes, 5)}  jobs ${s.jobs}  delivered ${s.delivered}  loop stall max ${s.loopStallMaxMs ?? '?'} ms`);
    };
    const timer = setInterval(() => void sample(), o.sampleS * 1000);
    let outcome;
    try {
      outcome = await submitOpenLoop({
        servers,
        plan,
        ratePerS: o.ratePerS,
        durationS: o.minutes * 60,
        tickMs: 5,
        batchSize: 50,
        inFlightMax: 64,
        deadlineMs: startedMs + o.minutes * 60_000 + 60_000,
      });
      accepted = outcome.acked.length;
      await sleepMs(o.delayMs + 2_000);
    } finally {
      clearInterval(timer);
    }
    await sample();
    const loopStallWindows = (await loopStall(servers)).windows;
    const mid = samples.find((s) => s.atS >= (o.minutes * 60) / 2) ?? samples[0]!;
    const last = samples[samples.length - 1]!;
    const result: SoakResult = {
      kind: 'soak-retention',
      startedAt: new Date(startedMs).toISOString(),
      parameters: o,
      samples,
      maxDataBytes: Math.max(...samples.map((s) => s.dataBytes)),
      growthSecondHalfBytes: last.dataBytes - mid.dataBytes,
      stateGrowthSecondHalfBytes: last.stateBytes - mid.stateBytes,
      failed: outcome.failed,
      maxWalBytes: Math.max(...samples.map((s) => s.walBytes)),
      loopStallWindows,
      environment: environmentInfo(),
    };
    await mkdir(o.outDir, { recursive: true });
    const path = join(o.outDir, `soak-retention-${result.startedAt.replace(/[:.]/g, '-')}.json`);
    await writeFile(path, JSON.stringify(result, null, 2) + '\n');
    return { result, path };
  } finally {
    db?.close();
    await servers.close();
    await nodes.stop();
    await rx.close();
  }
}

function main(): void {
  const { values } = parseArgs({
    options: {
      minutes: { type: 'string', default: '5' },
      rate: { type: 'string', default: '1000' },
      retention: { type: 'string', default: '60s' },
      'delay-ms': { type: 'string', default: '1000' },
      'sample-s': { type: 'string', default: '10' },
      out: { type: 'string', default: join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', 'results') },
    },
  });
  const o: SoakOptions = {
    minutes: Number(values.minutes),
    ratePerS: Number(values.rate),
    retention: values.retention!,
    delayMs: Number(values['delay-ms']),
    sampleS: Number(values['sample-s']),
    outDir: values.out!,
  };
  runRetentionSoak(o, (line) => process.stdout.write(line + '\n')).then(
    ({ result, path }) => {
      const mb = (n: number): string => (n / 1e6).toFixed(1);
      process.stdout.write(
        `max data ${mb(result.maxDataBytes)} MB, max WAL ${mb(result.maxWalBytes)} MB; growth over the second half: data ${mb(result.growthSecondHalfBytes)} MB, state ${mb(result.stateGrowthSecondHalfBytes)} MB; failed submits ${result.failed}\n` +
          `1 s windows by worst event-loop delay (cumulative): ${result.loopStallWindows.map((w) => `<=${w.leMs} ms: ${w.windows}`).join(', ')}\n${path}\n`,
      );
    },
    (err: unknown) => {
      process.stderr.write(`soak failed: ${(err as Error).message}\n`);
      process.exitCode = 1;
    },
  );
}

const script = process.argv[1];
// Run as a script only: imported by the bench command (and bundled into the single executable, which has no
// import.meta.url), it does nothing.
if (script !== undefined && typeof import.meta.url === 'string' && realpathSync(script) === realpathSync(fileURLToPath(import.meta.url))) main();
