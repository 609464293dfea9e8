/**
 * The single executable, built for real (scripts/build-binary.mjs, about 10 s) and run the way a user runs it:
 * copied alone into an empty folder, with a PATH that holds no node, an empty HOME and no NODE_OPTIONS.
 * Proves: --version and doctor answer; `serve` starts a node with the default data folder, curl schedules a
 * job, the callback arrives at a real receiver, SIGTERM stops it with exit 0; copies starting at once share one
 * cache; each cache failure mode is one line saying what to do; three copies, each alone in an empty folder,
 * form one cluster with the documented `serve` flags (a job curled to each node fires once); a rolling upgrade
 * (the file replaced with mv, SIGTERM, start again, one node at a time, /readyz between nodes) loses no job: every
 * acknowledged job due across the whole restart window fires at least once, none early.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { createServer as createNetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = resolve(fileURLToPath(new URL('.', import.meta.url)), '..', '..');
let work: string;
let built: string; // dist-like folder: the binary and its .sha256
let binary: string; // the copy, alone in an empty folder

/** The environment of every run: nothing inherited, a PATH without node, an empty HOME. */
function cleanEnv(extra: Record<string, string> = {}): Record<string, string> {
  const home = mkdtempSync(join(work, 'home-'));
  const emptyBin = join(work, 'empty-bin');
  mkdirSync(emptyBin, { recursive: true });
  return { PATH: emptyBin, HOME: home, TMPDIR: mkdtempSync(join(work, 'tmp-')), ...extra };
}

function runBinary(args: string[], env: Record<string, string>, cwd = join(work, 'run'), exe = binary) {
  return spawnSync(exe, args, { env, cwd, encoding: 'utf8', timeout: 30_000 });
}

function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const s = createNetServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolvePort(port));
    });
  });
}

beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), 'punctual-binary-test-'));
  built = join(work, 'dist');
  const env = { ...process.env, NODE_OPTIONS: '' };
  const r = spawnSync(process.execPath, ['scripts/build-binary.mjs', '--out-dir', built], {
    cwd: root,
    env,
    encoding: 'utf8',
    timeout: 180_000,
  });
  if (r.status !== 0) throw new Error(`build failed (${r.status}):\n${r.stderr}`);
  mkdirSync(join(work, 'run'));
  binary = join(work, 'run', 'punctual');
  copyFileSync(join(built, 'punctual-linux-x64'), binary);
  chmodSync(binary, 0o755);
}, 200_000);

afterAll(() => {
  rmSync(work, { recursive: true, force: true });
});

describe('the built executable', () => {
  it('is one file with a sha256sum-format checksum beside it', () => {
    expect(readdirSync(built).sort()).toEqual(['punctual-linux-x64', 'punctual-linux-x64.sha256']);
    const digest = createHash('sha256').update(readFileSync(join(built, 'punctual-linux-x64'))).digest('hex');
    expect(readFileSync(join(built, 'punctual-linux-x64.sha256'), 'utf8')).toBe(`${digest}  punctual-linux-x64\n`);
    const check = spawnSync('sha256sum', ['--check', 'punctual-linux-x64.sha256'], { cwd: built, encoding: 'utf8' });
    expect(check.stdout.trim()).toBe('punctual-linux-x64: OK');
  });

  it('runs with no node on PATH: --version prints version and commit', () => {
    const env = cleanEnv();
    for (const dir of env.PATH.split(delimiter)) expect(existsSync(join(dir, 'node'))).toBe(false);
    const r = runBinary(['--version'], env);
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string };
    expect(r.status).toBe(0);
    expect(r.stdout.trim()).toMatch(new RegExp(`^punctual ${pkg.version.replaceAll('.', '\\.')} \\([0-9a-f]{12}\\)$`));
    expect(r.stderr).toBe('');
  });

  it('doctor reports the glibc floor and loads SQLite on the main thread and in a worker', () => {
    const r = runBinary(['doctor', '--json'], cleanEnv());
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const report = JSON.parse(r.stdout) as Record<string, unknown>;
    expect(report.singleExecutable).toBe(true);
    expect(report.glibcNeeded).toMatch(/^2\.\d+ \(node 2\.\d+, sqlite addon 2\.\d+, addon built on .+\)$/);
    expect(report.sqlite).toMatch(/^3\.\d+\.\d+$/);
    expect(report.sqliteInWorker).toBe(report.sqlite);
    expect(report.problems).toEqual([]);
  });
});

interface Received {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
  /** Date.now() when the request's headers arrived. */
  atMs: number;
}

function startReceiver(onRequest: (r: Received) => void): Promise<Server> {
  const server = createServer((req, res) => {
    const atMs = Date.now();
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      onRequest({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString(), atMs });
      res.end('ok');
    });
  });
  return new Promise((r) => server.listen(0, '127.0.0.1', () => r(server)));
}

/** Resolves with the parsed `ready` log line; rejects if the process exits first. */
function waitForReady(child: ChildProcess, lines: string[]): Promise<Record<string, unknown>> {
  return new Promise((resolveReady, reject) => {
    let buffer = '';
    child.stderr!.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      let nl: number;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        lines.push(line);
        const parsed = JSON.parse(line) as Record<string, unknown>; // every line on stderr is a JSON log line
        if (parsed.msg === 'ready') resolveReady(parsed);
      }
    });
    child.once('exit', (code) => reject(new Error(`exited with ${code} before ready:\n${lines.join('\n')}`)));
  });
}

function curlPost(url: string, body: unknown): { status: number; json: Record<string, unknown> } {
  const curl = execFileSync('sh', ['-c', 'command -v curl'], { encoding: 'utf8' }).trim();
  const out = execFileSync(curl, ['-sS', '-w', '\n%{http_code}', '-X', 'POST', url, '-H', 'content-type: application/json',
    '-d', JSON.stringify(body)], { encoding: 'utf8' });
  const nl = out.lastIndexOf('\n');
  return { status: Number(out.slice(nl + 1)), json: JSON.parse(out.slice(0, nl)) as Record<string, unknown> };
}

describe('the build refuses what would break at run time', () => {
  function buildWith(args: string[]) {
    return spawnSync(process.execPath, ['scripts/build-binary.mjs', '--out-dir', join(work, 'refused'), ...args], {
      cwd: root,
      env: { ...process.env, NODE_OPTIONS: '' },
      encoding: 'utf8',
      timeout: 60_000,
    });
  }

  it('a dynamic import() of a built-in', () => {
    const r = buildWith(['--entry', 'test/binary/fixtures/dynamic-builtin.ts']);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain("test/binary/fixtures/dynamic-builtin.ts: import('node:http') (a dynamic import of a built-in crashes");
    expect(existsSync(join(work, 'refused', 'punctual-linux-x64'))).toBe(false);
  });

  it('an addon that does not load in this Node', () => {
    const fake = join(work, 'fake.node');
    writeFileSync(fake, 'not an ELF file');
    const r = buildWith(['--addon', fake]);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`^build-binary: the SQLite addon ${fake} does not load in v20\\.`, 'm'));
    expect(existsSync(join(work, 'refused', 'punctual-linux-x64'))).toBe(false);
  });
});

describe('punctual serve from the executable', () => {
  it('serves with the default data folder, fires a job scheduled with curl, stops on SIGTERM with exit 0', async () => {
    const folder = mkdtempSync(join(work, 'serve-'));
    const exe = join(folder, 'punctual');
    copyFileSync(binary, exe);
    chmodSync(exe, 0o755);
    let onCallback: (r: Received) => void = () => {};
    const callback = new Promise<Received>((r) => (onCallback = r));
    const receiver = await startReceiver((r) => onCallback(r));
    const [apiPort, peerPort] = [await freePort(), await freePort()];
    const child = spawn(exe, ['serve', '--listen', `127.0.0.1:${apiPort}`, '--peer-listen', `127.0.0.1:${peerPort}`, '--firing-thread', 'on'], {
      cwd: folder,
      env: cleanEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    const lines: string[] = [];
    try {
      const ready = await waitForReady(child, lines);
      expect(ready.data).toBe(join(folder, 'punctual-data'));
      const { port } = receiver.address() as { port: number };
      const created = curlPost(`http://127.0.0.1:${apiPort}/v1/jobs`, {
        callback: { url: `http://127.0.0.1:${port}/hook` },
        payload: { hello: 'from the binary' },
        schedule: { delay_ms: 200 },
      });
      expect(created.status).toBe(201);
      const got = await callback;
      expect(got.method).toBe('POST');
      expect(got.url).toBe('/hook');
      expect(JSON.parse(got.body)).toEqual({ hello: 'from the binary' });
      expect(got.headers['x-punctual-job-id']).toBe(created.json.id);
      // The callback left from the firing thread, started from the bundle embedded in the executable.
      const started = lines.map((l) => JSON.parse(l) as { msg: string; firing?: string }).find((l) => l.msg === 'node started');
      expect(started?.firing).toBe('thread');
      expect(existsSync(join(folder, 'punctual-data', 'punctual.db'))).toBe(true);
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      expect(lines.map((l) => (JSON.parse(l) as { msg: string }).msg)).toContain('stopped');
    } finally {
      child.kill('SIGKILL');
      await new Promise<void>((r) => receiver.close(() => r()));
    }
  });
});

describe('the addon cache', () => {
  // The addon is loaded before the flags are parsed; were it (wrongly) loaded, these flags fail with exit 2
  // (the two addresses must differ), so a broken check never leaves a server running.
  const noServe = ['serve', '--listen', '127.0.0.1:0', '--peer-listen', '127.0.0.1:0'];

  it('several copies starting at once share one cache folder and leave no temp file', async () => {
    const env = cleanEnv();
    const runs = Array.from({ length: 4 }, () =>
      new Promise<number | null>((r) => {
        const child = spawn(binary, ['doctor'], { env, cwd: join(work, 'run'), stdio: 'ignore' });
        child.once('exit', (code) => r(code));
      }),
    );
    expect(await Promise.all(runs)).toEqual([0, 0, 0, 0]);
    const cache = join(env.HOME, '.cache', 'punctual');
    const keys = readdirSync(cache);
    expect(keys).toHaveLength(1);
    expect(readdirSync(join(cache, keys[0])).sort()).toEqual(['better-sqlite3.cjs', 'better_sqlite3.node']);
  });

  it('rewrites a damaged cached addon', () => {
    const env = cleanEnv();
    expect(runBinary(['doctor'], env).status).toBe(0);
    const cache = join(env.HOME, '.cache', 'punctual');
    const addon = join(cache, readdirSync(cache)[0], 'better_sqlite3.node');
    writeFileSync(addon, 'not an ELF file');
    const r = runBinary(['doctor'], env);
    expect(r.status).toBe(0);
    expect(readFileSync(addon).length).toBeGreaterThan(1_000_000);
  });

  it('refuses a cache folder other users can write, in one line that says what to do, before serving', () => {
    const dir = mkdtempSync(join(work, 'shared-'));
    chmodSync(dir, 0o777);
    const r = runBinary(noServe, cleanEnv({ PUNCTUAL_CACHE_DIR: dir }));
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe(
      `punctual: cannot unpack the SQLite addon: ${dir} is writable by other users (mode 777): run chmod 700 ${dir}, ` +
        'or set PUNCTUAL_CACHE_DIR to a folder you own, on a filesystem mounted without noexec\n',
    );
  });

  it('names a cache path that is not a folder', () => {
    const file = join(work, 'a-file');
    writeFileSync(file, '');
    const r = runBinary(noServe, cleanEnv({ PUNCTUAL_CACHE_DIR: file }));
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`^punctual: cannot unpack the SQLite addon: ${file} \\(or a parent\\) is not a folder: remove it, or set PUNCTUAL_CACHE_DIR .*\n$`));
  });

  it('falls back through the candidates, and lists each one in one line when none works', () => {
    const folder = mkdtempSync(join(work, 'nowhere-'));
    const exe = join(folder, 'punctual');
    copyFileSync(binary, exe);
    chmodSync(exe, 0o755);
    const blocker = join(folder, 'blocker');
    writeFileSync(blocker, '');
    writeFileSync(join(folder, '.punctual-cache'), '');
    const env = { PATH: join(work, 'empty-bin'), HOME: blocker, XDG_CACHE_HOME: blocker, TMPDIR: blocker };
    const r = runBinary(noServe, env, folder, exe);
    expect(r.status).toBe(1);
    const lines = r.stderr.split('\n').filter((l) => l !== '');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^punctual: no folder to unpack the SQLite addon into \(XDG_CACHE_HOME: .*; HOME: .*; the temp folder: .*; the executable's folder: .*\); set PUNCTUAL_CACHE_DIR to a folder you own/);
    // with a usable folder beside the binary the same start works: the last candidate is really tried
    rmSync(join(folder, '.punctual-cache'));
    expect(runBinary(['doctor'], env, folder, exe).status).toBe(0);
    expect(readdirSync(join(folder, '.punctual-cache'))).toHaveLength(1);
  });
});

/** One copy of the executable in its own folder (cwd, so its data is the default ./punctual-data). */
interface Copy {
  id: string;
  folder: string;
  exe: string;
  apiPort: number;
  env: Record<string, string>;
  flags: string[];
  child: ChildProcess | null;
  lines: string[];
}

function startCopy(c: Copy): Promise<Record<string, unknown>> {
  c.lines = [];
  const child = spawn(c.exe, ['serve', ...c.flags], { cwd: c.folder, env: c.env, stdio: ['ignore', 'pipe', 'pipe'] });
  c.child = child;
  return waitForReady(child, c.lines);
}

/** SIGTERM; resolves the exit code (the process must stop by itself: no SIGKILL fallback hides a hang). */
function stopCopy(c: Copy): Promise<number | null> {
  const child = c.child;
  if (child === null || child.exitCode !== null) return Promise.resolve(child?.exitCode ?? null);
  return new Promise((r) => {
    child.once('exit', (code) => r(code));
    child.kill('SIGTERM');
  });
}

async function http(method: string, url: string, body?: unknown): Promise<{ status: number; json: any }> { // eslint-disable-line @typescript-eslint/no-explicit-any
  const res = await fetch(url, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(5_000),
  });
  const text = await res.text();
  return { status: res.status, json: text === '' ? null : JSON.parse(text) };
}

async function allReady(copies: readonly Copy[], timeoutMs: number): Promise<void> {
  const deadlineMs = Date.now() + timeoutMs;
  for (;;) {
    const answers = await Promise.all(copies.map((c) => http('GET', `http://127.0.0.1:${c.apiPort}/readyz`).then((r) => r.status === 200, () => false)));
    if (answers.every(Boolean)) return;
    if (Date.now() > deadlineMs) throw new Error(`not every node ready within ${timeoutMs} ms: ${answers}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('a three-node cluster from the executable', () => {
  const copies: Copy[] = [];
  const received: Received[] = [];
  let receiver: Server;
  let hookUrl: string;
  const of = (id: string): Received[] => received.filter((r) => r.headers['x-punctual-job-id'] === id);

  beforeAll(async () => {
    receiver = await startReceiver((r) => received.push(r));
    hookUrl = `http://127.0.0.1:${(receiver.address() as { port: number }).port}/hook`;
    const ids = ['n1', 'n2', 'n3'];
    const apiPorts = [await freePort(), await freePort(), await freePort()];
    const peerPorts = [await freePort(), await freePort(), await freePort()];
    for (const [i, id] of ids.entries()) {
      const folder = mkdtempSync(join(work, `cluster-${id}-`));
      const exe = join(folder, 'punctual');
      copyFileSync(binary, exe);
      chmodSync(exe, 0o755);
      const peers = ids.flatMap((other, k) => (k === i ? [] : [`${other}=127.0.0.1:${peerPorts[k]}`])).join(',');
      const flags = ['--node-id', id, '--listen', `127.0.0.1:${apiPorts[i]}`, '--peer-listen', `127.0.0.1:${peerPorts[i]}`, '--peers', peers, '--cluster-secret', 'binary-test-cluster-secret'];
      copies.push({ id, folder, exe, apiPort: apiPorts[i], env: cleanEnv(), flags, child: null, lines: [] });
    }
    await Promise.all(copies.map(startCopy));
    await allReady(copies, 30_000);
  }, 60_000);

  afterAll(async () => {
    for (const c of copies) c.child?.kill('SIGKILL');
    await new Promise<void>((r) => receiver.close(() => r()));
  });

  it('forms one cluster; a job curled to each node fires once with a {shard}.{term} fencing token', async () => {
    const cluster = await http('GET', `http://127.0.0.1:${copies[0].apiPort}/v1/cluster`);
    expect(cluster.json.nodes.map((n: { id: string }) => n.id).sort()).toEqual(['n1', 'n2', 'n3']);
    expect(cluster.json.shards.length).toBe(8); // the --shards default
    for (const s of cluster.json.shards) expect([...s.members].sort()).toEqual(['n1', 'n2', 'n3']);
    for (const c of copies) {
      const created = curlPost(`http://127.0.0.1:${c.apiPort}/v1/jobs`, {
        id: `curl-${c.id}`, callback: { url: hookUrl }, payload: { via: c.id }, schedule: { delay_ms: 300 },
      });
      expect(created.status).toBe(201);
    }
    const deadlineMs = Date.now() + 15_000;
    while (!copies.every((c) => of(`curl-${c.id}`).length > 0) && Date.now() < deadlineMs) await new Promise((r) => setTimeout(r, 20));
    await new Promise((r) => setTimeout(r, 500));
    for (const c of copies) {
      const got = of(`curl-${c.id}`);
      expect(got, `callbacks of curl-${c.id}`).toHaveLength(1);
      expect(JSON.parse(got[0].body)).toEqual({ via: c.id });
      expect(String(got[0].headers['x-punctual-fencing-token'])).toMatch(/^[0-7]\.[1-9][0-9]*$/);
    }
  }, 30_000);

  it('a rolling upgrade (mv the new file in, SIGTERM, start, /readyz, next node) loses no acknowledged job', async () => {
    const api = (c: Copy): string => `http://127.0.0.1:${c.apiPort}`;
    expect((await http('PUT', `${api(copies[0])}/v1/tasks/roll`, { url: hookUrl, retry: { max_attempts: 20, initial_backoff_ms: 100, max_backoff_ms: 1_000 } })).status).toBe(201);
    const acked = new Map<string, number>(); // job id -> scheduled time
    // 400 jobs due over the next 16.5 s (the restarts take about 12 s), created before the first restart.
    const t0 = Date.now();
    const jobs = Array.from({ length: 400 }, (_, i) => ({ id: `roll-${i}`, task: 'roll', schedule: { at: t0 + 500 + i * 40 } }));
    const batch = await http('POST', `${api(copies[1])}/v1/jobs:batch`, { jobs });
    expect(batch.status).toBe(200);
    for (const [i, r] of (batch.json.results as Array<{ id: string; status: number }>).entries()) {
      expect(r.status).toBe(201);
      acked.set(r.id, jobs[i].schedule.at);
    }
    // And a client that keeps creating jobs due 0.3-2 s ahead through whichever node answers, while nodes restart.
    let writing = true;
    let refused = 0;
    const writer = (async () => {
      for (let n = 0; writing; n++) {
        const c = copies[n % copies.length];
        const at = Date.now() + 300 + ((n * 137) % 1_700);
        const id = `live-${n}`;
        const r = await http('POST', `${api(c)}/v1/jobs`, { id, task: 'roll', schedule: { at } }).catch(() => ({ status: 0, json: null }));
        if (r.status === 201) acked.set(id, at);
        else refused++;
        await new Promise((res) => setTimeout(res, 40));
      }
    })();
    const restarts: Array<{ id: string; stopMs: number; readyMs: number }> = [];
    for (const c of copies) {
      const beganMs = Date.now();
      // The upgrade step of docs/install.md: the new file goes in beside, then mv over the running one's name.
      copyFileSync(binary, join(c.folder, 'punctual.new'));
      chmodSync(join(c.folder, 'punctual.new'), 0o755);
      execFileSync('mv', [join(c.folder, 'punctual.new'), c.exe]);
      expect(await stopCopy(c), `${c.id} exit code on SIGTERM`).toBe(0);
      const stoppedMs = Date.now();
      await startCopy(c);
      await allReady(copies, 30_000);
      restarts.push({ id: c.id, stopMs: stoppedMs - beganMs, readyMs: Date.now() - stoppedMs });
      // One rebalance interval (clusterLimits.rebalanceIntervalMs): the restarted node gets its shards back, so
      // the next restart takes shard leaders down too.
      await new Promise((r) => setTimeout(r, 3_000));
    }
    writing = false;
    await writer;
    const lastDueMs = Math.max(...acked.values());
    const deadlineMs = Math.max(lastDueMs, Date.now()) + 20_000;
    const missing = (): string[] => [...acked.keys()].filter((id) => of(id).length === 0);
    while (missing().length > 0 && Date.now() < deadlineMs) await new Promise((r) => setTimeout(r, 100));
    expect(missing(), 'acknowledged jobs that never fired').toEqual([]);
    let worstMs = 0;
    let deliveries = 0;
    for (const [id, at] of acked) {
      for (const r of of(id)) {
        deliveries++;
        expect(Number(r.headers['x-punctual-scheduled-at'])).toBe(at);
        expect(r.atMs, `${id} fired early`).toBeGreaterThanOrEqual(at);
        worstMs = Math.max(worstMs, r.atMs - at);
      }
    }
    expect(restarts).toHaveLength(3);
    console.info(`rolling upgrade: ${acked.size} acknowledged jobs (${acked.size - jobs.length} created during restarts, ` +
      `${refused} creates not acknowledged), ${deliveries - acked.size} duplicates, worst lateness ${worstMs} ms, ` +
      `restarts ${restarts.map((r) => `${r.id} stop ${r.stopMs} ms + ready ${r.readyMs} ms`).join(', ')}`);
  }, 120_000);
});
