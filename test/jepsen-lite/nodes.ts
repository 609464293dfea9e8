/**
 * Real `punctual serve` processes on loopback, driven only through the public contract (flags, signals, HTTP).
 * Each node keeps its ports and data directory across restarts; its stderr (JSON logs) is appended to one
 * file per node, so a failing run keeps every incarnation's logs.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { harnessNowMs, sleepMs } from './history.js';

export type NodeStatus = 'down' | 'up' | 'paused';

export interface NodeSpec {
  id: string;
  apiPort: number;
  peerPort: number;
  dataDir: string;
  logPath: string;
  /** The --peers value (proxy ports), '' for a single node. */
  peers: string;
  shards: number;
}

/** The checkout's root: the first directory above this file (source or dist/) that holds package.json. */
export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    dir = dirname(dir);
  }
  throw new Error('package.json not found above test/jepsen-lite');
}

/** dist/cmd/punctual.js of this checkout (`npm run build` makes it). */
export function defaultEntry(): string {
  return join(repoRoot(), 'dist', 'cmd', 'punctual.js');
}

/** Ports bound on 127.0.0.1 and held until `release()`, so nothing else started meanwhile (the fault proxies) takes them. */
export interface HeldPorts {
  ports: number[];
  release(): Promise<void>;
}

/**
 * `n` distinct free TCP ports on 127.0.0.1, all bound at once and held. Taken one at a time, the OS may hand out a
 * port it just released again, and two nodes then got the same peer port.
 */
export async function holdPorts(n: number): Promise<HeldPorts> {
  const servers = await Promise.all(
    Array.from({ length: n }, () => new Promise<ReturnType<typeof createServer>>((resolve, reject) => {
      const server = createServer();
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve(server));
    })),
  );
  return {
    ports: servers.map((s) => (s.address() as { port: number }).port),
    release: async () => {
      await Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
    },
  };
}

export class NodeProcess {
  private child: ChildProcess | null = null;
  status: NodeStatus = 'down';
  clockOffsetMs = 0;
  /** Exits the harness did not cause (a crash is a finding). */
  readonly unexpectedExits: Array<{ atMs: number; code: number | null; signal: string | null }> = [];
  private expectingExit = false;

  constructor(
    readonly spec: NodeSpec,
    private readonly entry: string,
  ) {}

  get url(): string {
    return `http://127.0.0.1:${this.spec.apiPort}`;
  }

  start(clockOffsetMs = 0): void {
    if (this.child) throw new Error(`${this.spec.id} is already running`);
    const s = this.spec;
    const args = [this.entry, 'serve', '--node-id', s.id, '--listen', `127.0.0.1:${s.apiPort}`,
      '--peer-listen', `127.0.0.1:${s.peerPort}`, '--data', s.dataDir, '--shards', String(s.shards),
      '--log-level', 'info', '--fsync', 'batch'];
    if (s.peers !== '') args.push('--peers', s.peers, '--cluster-secret', 'jepsen-lite-cluster-secret');
    // The clock nemesis skews the node through the test-only knob (docs/testing.md), not a product flag.
    const env: NodeJS.ProcessEnv = { ...process.env, NODE_OPTIONS: '', PUNCTUAL_TEST_MODE: '1', PUNCTUAL_TEST_CLOCK_OFFSET_MS: String(clockOffsetMs) };
    const log = openSync(s.logPath, 'a');
    const child = spawn(process.execPath, args, { stdio: ['ignore', log, log], env });
    closeSync(log);
    this.child = child;
    this.status = 'up';
    this.clockOffsetMs = clockOffsetMs;
    this.expectingExit = false;
    child.once('exit', (code, signal) => {
      if (!this.expectingExit) this.unexpectedExits.push({ atMs: harnessNowMs(), code, signal });
      if (this.child === child) {
        this.child = null;
        this.status = 'down';
      }
    });
  }

  /** kill -9, resolved once the process is gone. */
  kill9(): Promise<void> {
    return this.signalExit('SIGKILL');
  }

  /** Graceful stop (SIGTERM; a paused node is continued first); SIGKILL after graceMs. */
  async stop(graceMs = 15_000): Promise<void> {
    if (!this.child) return;
    if (this.status === 'paused') this.resume();
    const timer = setTimeout(() => this.child?.kill('SIGKILL'), graceMs);
    try {
      await this.signalExit('SIGTERM');
    } finally {
      clearTimeout(timer);
    }
  }

  pause(): void {
    if (this.child?.pid === undefined || this.status !== 'up') return;
    process.kill(this.child.pid, 'SIGSTOP');
    this.status = 'paused';
  }

  resume(): void {
    if (this.child?.pid === undefined || this.status !== 'paused') return;
    process.kill(this.child.pid, 'SIGCONT');
    this.status = 'up';
  }

  private signalExit(signal: NodeJS.Signals): Promise<void> {
    const child = this.child;
    if (!child) return Promise.resolve();
    this.expectingExit = true;
    return new Promise((resolve) => {
      child.once('exit', () => resolve());
      if (this.status === 'paused' && signal !== 'SIGKILL') child.kill('SIGCONT');
      child.kill(signal);
    });
  }

  /** GET /readyz answers 200 within timeoutMs. */
  async ready(timeoutMs = 1_000): Promise<boolean> {
    try {
      const res = await request(`${this.url}/readyz`, { signal: AbortSignal.timeout(timeoutMs) });
      await res.body.dump();
      return res.statusCode === 200;
    } catch {
      return false;
    }
  }
}

/** Polls every node's /readyz until all answer 200; resolves the harness time it happened, or null at the deadline. */
export async function waitAllReady(nodes: readonly NodeProcess[], timeoutMs: number, pollMs = 100): Promise<number | null> {
  const deadlineMs = harnessNowMs() + timeoutMs;
  while (harnessNowMs() < deadlineMs) {
    const answers = await Promise.all(nodes.map((n) => n.ready(Math.min(1_000, pollMs * 5))));
    if (answers.every(Boolean)) return harnessNowMs();
    await sleepMs(pollMs);
  }
  return null;
}

export interface ShardView {
  id: number;
  leader: string | null;
  term: number;
  members: string[];
}

/** GET /v1/cluster from one node (null when it does not answer). */
export async function clusterShards(url: string, timeoutMs = 1_000): Promise<ShardView[] | null> {
  try {
    const res = await request(`${url}/v1/cluster`, { signal: AbortSignal.timeout(timeoutMs) });
    if (res.statusCode !== 200) {
      await res.body.dump();
      return null;
    }
    const body = (await res.body.json()) as { shards?: ShardView[] };
    return Array.isArray(body.shards) ? body.shards : null;
  } catch {
    return null;
  }
}
