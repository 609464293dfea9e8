// Measurement script (not a test, not product code): a soak of ONE `punctual serve` under a long, mixed load,
// looking for state that grows without bound. Starts the node (API 127.0.0.1:18801, peer 18811, data under
// /tmp/audit-soak/), a callback receiver of its own (a child process on 127.0.0.1: 200 mostly, 503 ~10 %, 1-2 s
// late ~2 %, never ~0.5 %), and drives for N minutes: one-off jobs (~300/s, due 0-5 s later, some with an inline
// callback), a few hundred recurring jobs (every_ms 1000, cron `*/2 * * * * *`, mixed overlap / misfire),
// cancels, pauses / resumes, PATCH reschedules, /run, retries, batches and GET / list reads.
// Every 10 s it samples the node's RSS (/proc/PID/status), its /metrics gauges, the size of every Map / Set /
// array inside the node's shell and NodeCore (firing records, group commit), the dispatcher and Raft host (read by a probe preloaded into the node
// with --import: it wraps a few prototype methods to find the instances, changes nothing), and the data
// directory's size. Prints a table, writes bench/results/soak-<timestamp>.json.
//   npm run build && node bench/tools/soak.mjs [--minutes 10] [--rate 300] [--recurring 300] [--heap]
// --heap: the node runs with --heapsnapshot-signal=SIGUSR2; snapshots at minute 2 and at the end, compared by
// constructor (count and self size) in the output. `--compare A B` compares two snapshot files only.
import { fork, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const self = fileURLToPath(import.meta.url);
const repo = resolve(dirname(self), '../..');
const apiPort = 18801;
const peerPort = 18811;
const root = '/tmp/audit-soak';


// --- the probe (runs inside the node, preloaded with --import) -----------------------------------------------

async function probe(file) {
  const dist = process.env.SOAK_DIST;
  const found = {};
  const hook = async (mod, cls, methods, name) => {
    const m = await import(pathToFileURL(join(dist, mod)).href);
    for (const method of methods) {
      const orig = m[cls].prototype[method];
      m[cls].prototype[method] = function (...args) {
        found[name] ??= this;
        return orig.apply(this, args);
      };
    }
  };
  await hook('src/node/shell.js', 'NodeShell', ['start', 'startShard', 'onApplied', 'propose'], 'shell');
  await hook('src/node/raft-host.js', 'RaftHost', ['start', 'propose'], 'raftHost');
  const write = () => {
    const out = { atMs: Date.now(), heapUsedBytes: process.memoryUsage().heapUsed, sizes: {} };
    for (const [name, obj] of Object.entries(found)) collectSizes(obj, name, 0, new Set(), out.sizes);
    const e = found.shell;
    if (e !== undefined) {
      out.dispatcher = { inFlight: e.dispatcher.inFlight?.(), queued: e.dispatcher.queued?.() };
      out.foldedTotal = e.foldedTotal;
      out.proposerHeld = e.heldCount();
      out.armedBy = armedHistogram(e.core.firing);
    }
    writeFileSync(file + '.tmp', JSON.stringify(out));
    writeFileSync(file, readFileSync(file + '.tmp'));
  };
  setInterval(() => {
    try {
      write();
    } catch (err) {
      writeFileSync(file, JSON.stringify({ error: String(err?.stack ?? err) }));
    }
  }, 2000).unref();
}

/** The armed occurrences by how far ahead they are due, by attempt and by where they came from. */
function armedHistogram(firing) {
  const now = Date.now();
  const h = { overdue: 0, within5s: 0, within60s: 0, later: 0, retries: 0, fromLoader: 0, recurring: 0 };
  for (const rec of firing.occ.values()) {
    const a = rec.armed;
    if (a === null) continue;
    const d = a.dueAtMs - now;
    if (d < 0) h.overdue++;
    else if (d <= 5000) h.within5s++;
    else if (d <= 60000) h.within60s++;
    else h.later++;
    if (a.attempt > 1) h.retries++;
    if (!a.fromEffect) h.fromLoader++;
    if (a.jobId.startsWith('r-')) h.recurring++;
  }
  // Timers in the wheel without an armed record (they fire into nothing): how many, and how far ahead.
  const pool = firing.wheel.pool;
  h.wheelOnly = 0;
  h.wheelOnlyLaterThan60s = 0;
  h.wheelOnlySample = [];
  for (const [key, handle] of firing.wheel.handles) {
    if (firing.occ.get(key)?.armed?.where === 'wheel') continue;
    h.wheelOnly++;
    if (pool.deadlineMs[handle] - now > 60000) h.wheelOnlyLaterThan60s++;
    if (h.wheelOnlySample.length < 5) h.wheelOnlySample.push({ key, dueInMs: pool.deadlineMs[handle] - now });
  }
  return h;
}

/** Paths of every Map, Set and array (and typed array) reachable within a few levels, with their sizes. */
function collectSizes(obj, path, depth, seen, out) {
  if (obj === null || typeof obj !== 'object' || seen.has(obj) || depth > 8) return;
  seen.add(obj);
  if (obj instanceof Map || obj instanceof Set) {
    out[path] = obj.size;
    return;
  }
  if (ArrayBuffer.isView(obj)) {
    out[path] = obj.length;
    return;
  }
  if (Array.isArray(obj)) {
    out[path] = obj.length;
    // Small arrays of objects (the shard groups) are looked into; large ones are data.
    if (obj.length <= 64) obj.forEach((v, i) => collectSizes(v, `${path}[${i}]`, depth + 1, seen, out));
    return;
  }
  const ctor = obj.constructor?.name;
  if (ctor === 'Database' || ctor === 'Statement' || ctor === 'Agent' || ctor === 'Server' || ctor === 'Socket') return;
  for (const k of Object.keys(obj)) {
    let v;
    try {
      v = obj[k];
    } catch {
      continue;
    }
    collectSizes(v, `${path}.${k}`, depth + 1, seen, out);
  }
}

// --- the callback receiver (a child process) -----------------------------------------------------------------

function receiver() {
  import('node:http').then(({ createServer }) => {
    const counts = { ok: 0, s503: 0, slow: 0, never: 0, total: 0 };
    const held = new Set();
    const srv = createServer({ keepAlive: true }, (req, res) => {
      req.resume();
      counts.total++;
      const r = Math.random();
      if (r < 0.005) {
        counts.never++;
        // Never answered: the node times out (timeout_ms) and drops the connection; closed here after 30 s anyway.
        held.add(res);
        setTimeout(() => {
          held.delete(res);
          res.destroy();
        }, 30000).unref();
      } else if (r < 0.025) {
        counts.slow++;
        setTimeout(() => res.writeHead(200, { 'content-length': '0' }).end(), 1000 + Math.random() * 1000);
      } else if (r < 0.125) {
        counts.s503++;
        res.writeHead(503, { 'content-length': '0' }).end();
      } else {
        counts.ok++;
        res.writeHead(200, { 'content-length': '0' }).end();
      }
    });
    srv.keepAliveTimeout = 120000;
    srv.listen({ port: 0, host: '127.0.0.1', backlog: 4096 }, () => process.send({ port: srv.address().port }));
    process.on('message', (m) => {
      if (m === 'counts') process.send({ counts });
      else process.exit(0);
    });
  });
}

// --- the driver ----------------------------------------------------------------------------------------------

function parseArgs(argv) {
  const o = { minutes: 10, rate: 300, recurring: 300, heap: false, dist: 'dist', out: join(repo, 'bench/results') };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--heap') o.heap = true;
    else if (a === '--minutes') o.minutes = Number(argv[++i]);
    else if (a === '--rate') o.rate = Number(argv[++i]);
    else if (a === '--recurring') o.recurring = Number(argv[++i]);
    else if (a === '--dist') o.dist = argv[++i];
    else if (a === '--out') o.out = argv[++i];
    else throw new Error(`unknown flag ${a}`);
  }
  o.dist = resolve(repo, o.dist);
  return o;
}

const base = `http://127.0.0.1:${apiPort}`;
const stats = { requests: 0, errors: 0, byStatus: {} };

async function call(method, path, body) {
  stats.requests++;
  try {
    const res = await fetch(base + path, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    stats.byStatus[res.status] = (stats.byStatus[res.status] ?? 0) + 1;
    return { status: res.status, body: text.length > 0 && text[0] === '{' ? JSON.parse(text) : null };
  } catch (err) {
    stats.errors++;
    return { status: 0, body: null, error: String(err) };
  }
}

const pick = (arr) => arr[Math.floor(Math.random() * arr.length)];

function startNode(o) {
  const args = ['--import', self];
  if (o.heap) args.push('--heapsnapshot-signal=SIGUSR2');
  args.push(join(o.dist, 'cmd/punctual.js'), 'serve', '--listen', `127.0.0.1:${apiPort}`, '--peer-listen', `127.0.0.1:${peerPort}`);
  args.push('--data', join(root, 'data'), '--log-level', 'warn');
  const child = spawn(process.execPath, args, {
    cwd: root,
    env: { ...process.env, SOAK_PROBE_FILE: join(root, 'probe.json'), SOAK_DIST: o.dist },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d) => {
    stderr += d;
    if (stderr.length > 20000) stderr = stderr.slice(-10000);
  });
  child.stderrText = () => stderr;
  return child;
}

async function waitReady() {
  for (let i = 0; i < 200; i++) {
    const r = await call('GET', '/readyz');
    if (r.status === 200) return;
    await sleep(100);
  }
  throw new Error('node not ready');
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function taskBody(port) {
  return {
    url: `http://127.0.0.1:${port}/hook`,
    method: 'POST',
    timeout_ms: 2500,
    retry: { max_attempts: 3, initial_backoff_ms: 200, max_backoff_ms: 1000, multiplier: 2, jitter: true },
    max_concurrency: 300,
  };
}

/** The load: a state of known ids and the operations drawn at random on them. */
class Load {
  constructor(port, recurringTarget) {
    this.port = port;
    this.recurringTarget = recurringTarget;
    this.recurring = [];
    this.paused = new Set();
    this.oneOffs = [];
    this.seq = 0;
    this.ops = {};
  }

  count(op) {
    this.ops[op] = (this.ops[op] ?? 0) + 1;
  }

  oneOffSpec() {
    const id = `o-${this.seq++}`;
    const spec = { id, payload: { n: this.seq }, schedule: { delay_ms: Math.floor(Math.random() * 5000) } };
    if (Math.random() < 0.2) spec.callback = { ...taskBody(this.port), max_concurrency: 2 };
    else spec.task = 'soak';
    return spec;
  }

  recurringSpec() {
    const id = `r-${this.seq++}`;
    const cron = Math.random() < 0.5;
    const schedule = cron ? { cron: '*/2 * * * * *' } : { every_ms: 1000 };
    const r = Math.random();
    const overlap = r < 0.6 ? 'allow' : r < 0.8 ? 'skip' : 'buffer_one';
    const misfire = Math.random() < 0.5 ? 'fire_once' : 'skip';
    return { id, task: 'soak', payload: { r: id }, schedule, overlap, misfire };
  }

  async createOneOff() {
    const spec = this.oneOffSpec();
    const r = await call('POST', '/v1/jobs', spec);
    this.count('create_one_off');
    if (r.status === 201 || r.status === 200) {
      this.oneOffs.push(spec.id);
      if (this.oneOffs.length > 20000) this.oneOffs.splice(0, 10000);
    }
  }

  async createRecurring() {
    const spec = this.recurringSpec();
    const r = await call('POST', '/v1/jobs', spec);
    this.count('create_recurring');
    if (r.status === 201 || r.status === 200) this.recurring.push(spec.id);
  }

  async batch(n) {
    const jobs = Array.from({ length: n }, () => this.oneOffSpec());
    const r = await call('POST', '/v1/jobs:batch', { jobs });
    this.count('batch');
    if (r.status === 200) for (const j of jobs) this.oneOffs.push(j.id);
  }

  /** One random operation other than creating one-offs. */
  async mixed() {
    const x = Math.random();
    if (x < 0.12 && this.oneOffs.length > 0) {
      await call('POST', `/v1/jobs/${pick(this.oneOffs)}/cancel`);
      this.count('cancel_one_off');
    } else if (x < 0.2 && this.recurring.length > 0) {
      // Churn: a recurring job is cancelled (or deleted) and a new one takes its place.
      const i = Math.floor(Math.random() * this.recurring.length);
      const id = this.recurring.splice(i, 1)[0];
      this.paused.delete(id);
      if (Math.random() < 0.5) await call('DELETE', `/v1/jobs/${id}`);
      else await call('POST', `/v1/jobs/${id}/cancel`);
      this.count('cancel_recurring');
      if (this.recurring.length < this.recurringTarget) await this.createRecurring();
    } else if (x < 0.35 && this.recurring.length > 0) {
      const id = pick(this.recurring);
      if (this.paused.has(id)) {
        this.paused.delete(id);
        await call('POST', `/v1/jobs/${id}/resume`);
        this.count('resume');
      } else {
        this.paused.add(id);
        await call('POST', `/v1/jobs/${id}/pause`);
        this.count('pause');
      }
    } else if (x < 0.45 && this.recurring.length > 0) {
      const schedule = Math.random() < 0.5 ? { every_ms: pick([1000, 1500, 700]) } : { cron: pick(['*/2 * * * * *', '*/3 * * * * *']) };
      await call('PATCH', `/v1/jobs/${pick(this.recurring)}`, { schedule });
      this.count('patch_recurring');
    } else if (x < 0.55 && this.oneOffs.length > 0) {
      await call('PATCH', `/v1/jobs/${pick(this.oneOffs)}`, { schedule: { delay_ms: Math.floor(Math.random() * 5000) } });
      this.count('patch_one_off');
    } else if (x < 0.65) {
      await call('POST', `/v1/jobs/${pick(Math.random() < 0.5 && this.recurring.length > 0 ? this.recurring : this.oneOffs)}/run`);
      this.count('run');
    } else if (x < 0.85 && this.oneOffs.length > 0) {
      await call('GET', `/v1/jobs/${pick(Math.random() < 0.5 && this.recurring.length > 0 ? this.recurring : this.oneOffs)}`);
      this.count('get');
    } else if (x < 0.93 && this.recurring.length > 0) {
      await call('GET', `/v1/jobs/${pick(this.recurring)}/executions?limit=20`);
      this.count('executions');
    } else {
      await call('GET', `/v1/jobs?limit=100${Math.random() < 0.5 ? '&state=' + pick(['PENDING', 'QUEUED', 'RUNNING', 'PAUSED']) : ''}`);
      this.count('list');
    }
  }
}

/** Runs `fn` about `perS` times a second, at most `concurrency` at once, until `stop()`. */
function pace(perS, concurrency, fn) {
  let running = 0;
  let stopped = false;
  const tickMs = 50;
  let carry = 0;
  const timer = setInterval(() => {
    carry += (perS * tickMs) / 1000;
    while (carry >= 1 && running < concurrency) {
      carry--;
      running++;
      fn().finally(() => running--);
    }
    if (carry > Math.max(1, perS)) carry = Math.max(1, perS);
  }, tickMs);
  return () => {
    stopped = true;
    clearInterval(timer);
    return stopped;
  };
}

function procStatus(pid) {
  const text = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (name) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? NaN);
  return { rssMiB: kb('VmRSS') / 1024, hwmMiB: kb('VmHWM') / 1024 };
}

function parseMetrics(text) {
  const out = {};
  for (const line of text.split('\n')) {
    if (!line.startsWith('punctual_') || line.includes('_bucket{') || line.startsWith('punctual_raft_role')) continue;
    const sp = line.lastIndexOf(' ');
    out[line.slice(0, sp)] = Number(line.slice(sp + 1));
  }
  return out;
}

function dirBytes(dir) {
  let total = 0;
  const files = {};
  for (const f of readdirSync(dir)) {
    const s = statSync(join(dir, f));
    if (s.isFile()) {
      total += s.size;
      files[f] = s.size;
    }
  }
  return { total, files };
}

async function sample(child, startMs, o) {
  let metricsText = '';
  try {
    metricsText = await (await fetch(base + '/metrics')).text();
  } catch {}
  let probeData = null;
  try {
    probeData = JSON.parse(readFileSync(join(root, 'probe.json'), 'utf8'));
  } catch {}
  return {
    tS: Math.round((Date.now() - startMs) / 1000),
    ...procStatus(child.pid),
    metrics: parseMetrics(metricsText),
    data: dirBytes(join(root, 'data')),
    probe: probeData,
  };
}

/** The collections worth a column: NodeCore's records and queues, the wheel, the limiter, the Raft log. */
const columns = [
  ['occ', 'shell.core.firing.occ'],
  ['byJob', 'shell.core.firing.byJob'],
  ['due', 'shell.core.firing.dueBacklog'],
  ['park', 'shell.core.firing.parked'],
  ['items', 'shell.core.batcher.items'],
  ['staged', 'shell.core.batcher.staged'],
  ['calls', 'shell.callers'],
  ['pool', 'shell.core.firing.wheel.pool.keys'],
  ['keys', 'shell.dispatcher.engine.limiter.keys'],
  ['uns0', 'raftHost.replication.shards[0].raw.raft.log.unstable.entries'],
];

function row(s) {
  const p = s.probe?.sizes ?? {};
  const g = (k) => s.metrics[k] ?? '';
  const cells = [
    String(s.tS).padStart(5),
    s.rssMiB.toFixed(0).padStart(5),
    ((s.probe?.heapUsedBytes ?? 0) / 2 ** 20).toFixed(0).padStart(5),
    String(g('punctual_timer_wheel_size')).padStart(6),
    String(g('punctual_dispatch_in_flight')).padStart(5),
    ...columns.map(([, k]) => String(p[k] ?? '-').padStart(6)),
    (s.data.total / 2 ** 20).toFixed(1).padStart(7),
  ];
  return cells.join(' ');
}

function header() {
  return ['  t_s', '  rss', ' heap', ' wheel', ' infl', ...columns.map(([h]) => h.padStart(6)), 'data_MiB'].join(' ');
}

async function heapSnapshot(child, label) {
  const before = new Set(readdirSync(root).filter((f) => f.endsWith('.heapsnapshot')));
  process.kill(child.pid, 'SIGUSR2');
  for (let i = 0; i < 600; i++) {
    await sleep(500);
    const f = readdirSync(root).find((x) => x.endsWith('.heapsnapshot') && !before.has(x));
    if (f === undefined) continue;
    const p = join(root, f);
    const s1 = statSync(p).size;
    await sleep(1500);
    if (statSync(p).size === s1 && s1 > 0) {
      console.log(`heap snapshot ${label}: ${p} (${(s1 / 2 ** 20).toFixed(0)} MiB)`);
      return p;
    }
  }
  throw new Error('heap snapshot did not appear');
}

/** Self size and count per constructor (object, closure and string nodes), and the retained size of the maps. */
function summarizeSnapshot(file) {
  const snap = JSON.parse(readFileSync(file, 'utf8'));
  const meta = snap.snapshot.meta;
  const nf = meta.node_fields.length;
  const types = meta.node_types[0];
  const iType = meta.node_fields.indexOf('type');
  const iName = meta.node_fields.indexOf('name');
  const iSize = meta.node_fields.indexOf('self_size');
  const by = new Map();
  const nodes = snap.nodes;
  for (let i = 0; i < nodes.length; i += nf) {
    const type = types[nodes[i + iType]];
    const name = type === 'string' || type === 'concatenated string' || type === 'sliced string' ? '(string)' : `${snap.strings[nodes[i + iName]]}`;
    const key = type === 'object' || type === '(string)' ? name : `${name} [${type}]`;
    const e = by.get(key) ?? { count: 0, bytes: 0 };
    e.count++;
    e.bytes += nodes[i + iSize];
    by.set(key, e);
  }
  return by;
}

function compareSnapshots(a, b) {
  const sa = summarizeSnapshot(a);
  const sb = summarizeSnapshot(b);
  const total = (s) => [...s.values()].reduce((n, e) => n + e.bytes, 0);
  const rows = [];
  for (const [k, e] of sb) {
    const was = sa.get(k) ?? { count: 0, bytes: 0 };
    rows.push({ name: k, countA: was.count, countB: e.count, bytesA: was.bytes, bytesB: e.bytes, growth: e.bytes - was.bytes });
  }
  rows.sort((x, y) => y.growth - x.growth);
  return { a, b, totalA: total(sa), totalB: total(sb), topGrowth: rows.slice(0, 25) };
}

function formatCompare(c) {
  const lines = [`heap snapshots: self sizes ${(c.totalA / 2 ** 20).toFixed(1)} MiB -> ${(c.totalB / 2 ** 20).toFixed(1)} MiB`];
  for (const r of c.topGrowth) {
    lines.push(`  ${r.name.slice(0, 60).padEnd(60)} ${String(r.countA).padStart(8)} -> ${String(r.countB).padStart(8)}  ${(r.bytesA / 1024).toFixed(0).padStart(8)} KiB -> ${(r.bytesB / 1024).toFixed(0).padStart(8)} KiB`);
  }
  return lines.join('\n');
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  if (!existsSync(join(o.dist, 'cmd/punctual.js'))) throw new Error(`no ${o.dist}/cmd/punctual.js: npm run build first`);
  rmSync(root, { recursive: true, force: true });
  mkdirSync(join(root, 'data'), { recursive: true });
  const recv = fork(self, ['--receiver']);
  const { port } = await new Promise((r) => recv.once('message', r));
  const child = startNode(o);
  // Never leave the node or the receiver behind, whatever happens to this process.
  process.on('exit', () => {
    child.kill('SIGKILL');
    recv.kill('SIGKILL');
  });
  const exited = new Promise((r) => child.once('exit', (code, sig) => r({ code, sig })));
  await waitReady();
  const startMs = Date.now();
  const put = await call('PUT', '/v1/tasks/soak', taskBody(port));
  if (put.status !== 200 && put.status !== 201) throw new Error(`PUT task: ${put.status} ${JSON.stringify(put.body)}`);
  const load = new Load(port, o.recurring);
  for (let i = 0; i < o.recurring; i++) await load.createRecurring();
  const stops = [
    pace(o.rate, 64, () => load.createOneOff()),
    pace(40, 16, () => load.mixed()),
    pace(0.2, 1, () => load.batch(500)),
  ];
  const samples = [];
  const snapshots = [];
  console.log(`soak: ${o.minutes} min, one-offs ${o.rate}/s, ${o.recurring} recurring, node pid ${child.pid}, receiver port ${port}`);
  console.log(header());
  const endMs = startMs + o.minutes * 60000;
  let nextSampleMs = startMs;
  let snapAt2 = o.heap && o.minutes > 2;
  let dead = null;
  void exited.then((e) => (dead = e));
  while (Date.now() < endMs && dead === null) {
    await sleep(Math.max(0, nextSampleMs - Date.now()));
    nextSampleMs += 10000;
    const s = await sample(child, startMs, o);
    samples.push(s);
    console.log(row(s));
    if (snapAt2 && Date.now() - startMs >= 120000) {
      snapAt2 = false;
      snapshots.push(await heapSnapshot(child, 'minute 2'));
    }
  }
  for (const stop of stops) stop();
  if (dead !== null) console.log(`node exited: ${JSON.stringify(dead)}\n${child.stderrText()}`);
  // Quiet for a few seconds (recurring jobs still fire): the last sample shows the state without the one-offs.
  if (dead === null) {
    await sleep(8000);
    const s = await sample(child, startMs, o);
    samples.push(s);
    console.log(row(s) + '  (load stopped 8 s ago)');
    if (o.heap) snapshots.push(await heapSnapshot(child, 'end'));
  }
  recv.send('counts');
  const { counts } = await new Promise((r) => recv.once('message', r));
  recv.send('exit');
  child.kill('SIGTERM');
  await exited;
  const db = census(join(root, 'data', 'punctual.db'));
  console.log(`database after the run: ${JSON.stringify(db)}`);
  let compare = null;
  if (snapshots.length === 2) {
    compare = compareSnapshots(snapshots[0], snapshots[1]);
    console.log(formatCompare(compare));
  }
  const last = samples[samples.length - 1];
  const stamp = new Date(startMs).toISOString().replace(/[:.]/g, '-');
  const commit = await gitCommit();
  const result = {
    scenario: 'soak',
    startedAt: new Date(startMs).toISOString(),
    commit,
    parameters: { minutes: o.minutes, oneOffRatePerS: o.rate, recurring: o.recurring, mixedOpsPerS: 40, batchEveryS: 5, batchSize: 500, heap: o.heap },
    requests: stats,
    operations: load.ops,
    receiver: counts,
    nodeStderrTail: child.stderrText().slice(-4000),
    samples: samples.map((s) => ({ ...s, probe: s.probe === null ? null : { ...s.probe, sizes: nonZero(s.probe.sizes ?? {}) } })),
    heapCompare: compare,
    database: db,
    final: { rssMiB: last?.rssMiB, hwmMiB: last?.hwmMiB, dataBytes: last?.data.total },
  };
  mkdirSync(o.out, { recursive: true });
  const out = join(o.out, `soak-${stamp}.json`);
  writeFileSync(out, JSON.stringify(result));
  console.log(`receiver: ${JSON.stringify(counts)}; requests: ${JSON.stringify(stats)}; ops: ${JSON.stringify(load.ops)}`);
  console.log(`wrote ${out}`);
  process.exit(0);
}

/** Rows per table (and per state), once the node has stopped: what the SQLite file is made of. */
function census(file) {
  const require = createRequire(join(repo, 'package.json'));
  const Database = require('better-sqlite3');
  const db = new Database(file, { readonly: true });
  try {
    const one = (sql) => db.prepare(sql).get();
    const all = (sql) => db.prepare(sql).all();
    const pageSize = one('PRAGMA page_size').page_size;
    const pages = one('PRAGMA page_count').page_count;
    const free = one('PRAGMA freelist_count').freelist_count;
    const out = { fileBytes: statSync(file).size, pageSize, pages, freePages: free, tables: {} };
    for (const { name } of all("SELECT name FROM sqlite_master WHERE type = 'table'")) out.tables[name] = one(`SELECT count(*) AS n FROM "${name}"`).n;
    out.jobsByState = Object.fromEntries(all('SELECT state, count(*) AS n FROM jobs GROUP BY state').map((r) => [r.state, r.n]));
    out.executionsByState = Object.fromEntries(all('SELECT state, count(*) AS n FROM executions GROUP BY state').map((r) => [r.state, r.n]));
    out.executionBytes = one('SELECT sum(length(data)) AS n FROM executions').n;
    out.jobBytes = one('SELECT sum(length(data)) AS n FROM jobs').n;
    return out;
  } finally {
    db.close();
  }
}

/** Non-empty collections, without the copies reached through other paths (metrics registry, shared options). */
function nonZero(sizes) {
  const noise = /\.metrics\.|\.o\.sink\.|\.activeHead\.|^shell\.o\.shards\[|^shell\.core\.d\.stores\[|\.firing\.d\.stores\[/;
  return Object.fromEntries(Object.entries(sizes).filter(([k, n]) => n > 0 && !noise.test(k)));
}

async function gitCommit() {
  return new Promise((r) => {
    const p = spawn('git', ['rev-parse', '--short=12', 'HEAD'], { cwd: repo });
    let s = '';
    p.stdout.on('data', (d) => (s += d));
    p.on('close', () => r(s.trim()));
  });
}

// Dispatch last: the module's constants above must be initialized first.
if (process.env.SOAK_PROBE_FILE !== undefined) await probe(process.env.SOAK_PROBE_FILE);
else if (process.argv[2] === '--receiver') receiver();
else if (process.argv[2] === '--compare') console.log(formatCompare(compareSnapshots(process.argv[3], process.argv[4])));
else await main();
