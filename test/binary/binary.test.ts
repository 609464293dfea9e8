/**
 * The single executable, built for real (scripts/build-binary.mjs, about 10 s) and run the way a user runs it:
 * copied alone into an empty folder, with a PATH that holds no node, an empty HOME and no NODE_OPTIONS.
 * Proves: --version and doctor answer; `serve` starts a node with the default data folder, curl schedules a
 * job, the callback arrives at a real receiver, SIGTERM stops it with exit 0; copies starting at once share one
 * cache; each cache failure mode is one line saying what to do.
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
}

function startReceiver(onRequest: (r: Received) => void): Promise<Server> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      onRequest({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString() });
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
    const child = spawn(exe, ['serve', '--listen', `127.0.0.1:${apiPort}`, '--peer-listen', `127.0.0.1:${peerPort}`], {
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
