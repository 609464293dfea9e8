/**
 * Spawns local `punctual serve` processes for a bench run (one node, or N nodes forming a cluster on loopback),
 * waits until every node answers /readyz, reads each node's peak RSS (VmHWM) and stops them at the end.
 * The nodes are REAL separate processes: the bench measures what a user would run.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'undici';
import { loopbackSans, makeCa, makeNodeCert, type CertFiles } from '../src/core/testing/certs.js';
import { sleepMs } from './load.js';
import { nowPreciseMs } from './receiver.js';

export interface LocalNodesOptions {
  nodes: number;
  token?: string | null;
  /** Path of dist/cmd/punctual.js; default: found beside this file, else this executable runs `serve` itself. */
  entry?: string | null;
  readyTimeoutMs?: number;
  logLevel?: 'debug' | 'info' | 'warn' | 'error';
  /**
   * The client API over HTTPS and the peers over mutual TLS, with a CA and one certificate per node made by the
   * `openssl` command in the run's directory (as docs/security.md makes them). Off = cleartext API, peers
   * authenticated by a cluster secret.
   */
  tls?: boolean;
}

export interface LocalNodes {
  /** Client API base URLs, one per node. */
  urls: string[];
  pids: number[];
  dataDir: string;
  /** PEM of the CA that signed the nodes' certificates (with `tls`), for the load generator's connections. */
  caPem: string | null;
  /** Peak resident set (VmHWM) of each node in bytes, null when /proc cannot tell (not Linux, or exited). */
  peakRssBytes(): Array<number | null>;
  stop(): Promise<void>;
}

/** Peak RSS of a process from /proc/<pid>/status (VmHWM), in bytes. */
export function readVmHwmBytes(pid: number): number | null {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const match = /^VmHWM:\s+(\d+)\s+kB/m.exec(status);
    return match ? Number(match[1]) * 1024 : null;
  } catch {
    return null;
  }
}

/** A free TCP port on 127.0.0.1 (bound then released; fine for a bench on a quiet machine). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

function defaultEntry(): string | null {
  try {
    const path = fileURLToPath(new URL('../cmd/punctual.js', import.meta.url));
    return existsSync(path) ? path : null;
  } catch {
    return null;
  }
}

interface NodeSpec {
  id: string;
  apiPort: number;
  peerPort: number;
}

function serveArgs(spec: NodeSpec, all: NodeSpec[], dataDir: string, options: LocalNodesOptions, certs: CertFiles | null): string[] {
  const args = [
    'serve',
    '--node-id', spec.id,
    '--listen', `127.0.0.1:${spec.apiPort}`,
    '--peer-listen', `127.0.0.1:${spec.peerPort}`,
    '--data', join(dataDir, spec.id),
    '--log-level', options.logLevel ?? 'warn',
  ];
  const peers = all.filter((s) => s !== spec).map((s) => `${s.id}=127.0.0.1:${s.peerPort}`);
  if (peers.length > 0) args.push('--peers', peers.join(','));
  if (certs !== null) {
    args.push('--tls-cert-file', certs.certFile, '--tls-key-file', certs.keyFile);
    args.push('--peer-tls-cert-file', certs.certFile, '--peer-tls-key-file', certs.keyFile, '--peer-tls-ca-file', certs.caFile);
  } else if (peers.length > 0) {
    args.push('--cluster-secret', 'bench-cluster-secret-0123');
  }
  if (options.token) args.push('--auth-token', options.token);
  return args;
}

/** A CA and one certificate per node naming it for the peers (URI SAN) and for clients on loopback. */
async function makeBenchCerts(dataDir: string, specs: NodeSpec[]): Promise<Map<string, CertFiles>> {
  const dir = join(dataDir, 'tls');
  await mkdir(dir, { mode: 0o700 });
  makeCa(dir);
  return new Map(specs.map((s) => [s.id, makeNodeCert(dir, [s.id], { extraSans: loopbackSans })]));
}

/** Keeps the last lines a child wrote on stderr, to explain a failed start. */
function tailOf(child: ChildProcess, lines = 20): () => string {
  const kept: string[] = [];
  child.stderr?.setEncoding('utf8');
  child.stderr?.on('data', (chunk: string) => {
    kept.push(...chunk.split('\n').filter((l) => l.length > 0));
    if (kept.length > lines) kept.splice(0, kept.length - lines);
  });
  return () => kept.join('\n');
}

export async function spawnLocalNodes(options: LocalNodesOptions): Promise<LocalNodes> {
  const dataDir = await mkdtemp(join(tmpdir(), 'punctual-bench-'));
  const specs: NodeSpec[] = [];
  for (let i = 1; i <= options.nodes; i++) specs.push({ id: `n${i}`, apiPort: await freePort(), peerPort: await freePort() });
  const entry = options.entry === undefined ? defaultEntry() : options.entry;
  const certs = options.tls === true ? await makeBenchCerts(dataDir, specs) : null;
  const caPem = certs === null ? null : readFileSync(certs.get(specs[0]!.id)!.caFile, 'utf8');
  const children = specs.map((spec) => {
    const args = serveArgs(spec, specs, dataDir, options, certs?.get(spec.id) ?? null);
    const child = spawn(process.execPath, entry ? [entry, ...args] : args, {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, NODE_OPTIONS: '' },
    });
    return { child, tail: tailOf(child) };
  });
  const scheme = certs === null ? 'http' : 'https';
  const urls = specs.map((s) => `${scheme}://127.0.0.1:${s.apiPort}`);
  const nodes: LocalNodes = {
    urls,
    pids: children.map((c) => c.child.pid ?? -1),
    dataDir,
    caPem,
    peakRssBytes: () => children.map((c) => (c.child.pid ? readVmHwmBytes(c.child.pid) : null)),
    stop: async () => {
      await Promise.all(children.map((c) => stopChild(c.child)));
      await rm(dataDir, { recursive: true, force: true });
    },
  };
  try {
    const probe = caPem === null ? undefined : new Agent({ connect: { ca: caPem } });
    try {
      await Promise.all(children.map((c, i) => waitReady(c.child, urls[i], options, c.tail, probe)));
    } finally {
      await probe?.close();
    }
  } catch (err) {
    await nodes.stop();
    throw err;
  }
  return nodes;
}

async function waitReady(
  child: ChildProcess,
  url: string,
  options: LocalNodesOptions,
  tail: () => string,
  dispatcher?: Agent,
): Promise<void> {
  const deadlineMs = nowPreciseMs() + (options.readyTimeoutMs ?? 30_000);
  while (nowPreciseMs() < deadlineMs) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`node at ${url} exited (code ${child.exitCode}, signal ${child.signalCode}) before ready:\n${tail()}`);
    }
    try {
      const res = await request(`${url}/readyz`, { method: 'GET', headersTimeout: 2_000, bodyTimeout: 2_000, dispatcher });
      await res.body.dump();
      if (res.statusCode === 200) return;
    } catch {
      // not listening yet
    }
    await sleepMs(100);
  }
  throw new Error(`node at ${url} not ready after ${options.readyTimeoutMs ?? 30_000} ms:\n${tail()}`);
}

/** SIGTERM (graceful), then SIGKILL if it has not exited within graceMs. */
export function stopChild(child: ChildProcess, graceMs = 10_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill('SIGTERM');
  });
}
