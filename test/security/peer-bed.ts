/**
 * Test bed of the peer attacks (not product code): three real `punctual serve` processes (dist/, build first)
 * with a cluster secret or mutual TLS, a callback receiver, and an attacker's raw HTTP/2 sessions to a peer port.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import * as http2 from 'node:http2';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  authPath, clientProof, helloPath, newNonce, nodeIdHeader, nonceHeader, peerProtocol, proofHeader, protocolHeader,
} from '../../src/http/peer/auth.js';
import type { CertFiles } from '../../src/core/testing/certs.js';
import { freePorts } from '../../src/node/testing/cluster.js';
import { call, kill9, spawnServe, type Child } from '../../src/node/testing/processes.js';
import { waitFor } from '../../src/node/testing/receiver.js';

export const root = join(fileURLToPath(new URL('.', import.meta.url)), '..', '..');
export const entry = join(root, 'dist', 'cmd', 'punctual.js');
export const secret = 'security-test-cluster-secret';

export interface ServeNode {
  id: string;
  apiPort: number;
  peerPort: number;
  child: Child;
  /** The flags it was started with (to restart it). */
  flags: string[];
}

/** Three nodes n1..n3 naming each other in --peers; `auth(id)` gives each node's authentication flags. */
export async function startCluster(dir: string, auth: (id: string) => string[], shards = 2): Promise<ServeNode[]> {
  const ports = await freePorts(6);
  const ids = ['n1', 'n2', 'n3'];
  const peers = ids.map((id, i) => `${id}=127.0.0.1:${ports[3 + i]}`);
  const nodes = await Promise.all(ids.map(async (id, i): Promise<ServeNode> => {
    const flags = ['--node-id', id, '--listen', `127.0.0.1:${ports[i]}`, '--peer-listen', `127.0.0.1:${ports[3 + i]}`,
      '--data', join(dir, id), '--peers', peers.filter((_, k) => k !== i).join(','), '--shards', String(shards),
      '--log-level', 'info', ...auth(id)];
    return { id, apiPort: ports[i]!, peerPort: ports[3 + i]!, flags, child: await spawnServe(flags, ports[i]!) };
  }));
  await waitFor('every node ready', async () => (await Promise.all(nodes.map(ready))).every(Boolean), 20_000);
  return nodes;
}

export async function ready(n: ServeNode): Promise<boolean> {
  try {
    return (await fetch(`${n.child.base}/readyz`)).status === 200;
  } catch {
    return false;
  }
}

export async function stopAll(nodes: ServeNode[]): Promise<void> {
  await Promise.all(nodes.map((n) => kill9(n.child)));
}

/** A task and a one-off job due soon, created through `via`; resolves once the receiver got its callback. */
export async function jobFires(via: ServeNode, rx: { url(p: string): string; of(id: string): unknown[] }, id: string): Promise<void> {
  const task = await call(via.child, 'PUT', '/v1/tasks/hook', { url: rx.url('/hook') });
  if (task.status !== 200 && task.status !== 201) throw new Error(`task: ${task.status} ${JSON.stringify(task.json)}`);
  const r = await call(via.child, 'POST', '/v1/jobs', { id, task: 'hook', schedule: { at: Date.now() + 300 } });
  if (r.status !== 201) throw new Error(`job ${id}: ${r.status} ${JSON.stringify(r.json)}`);
  await waitFor(`job ${id} fired`, () => rx.of(id).length >= 1, 15_000);
}

/** Every shard's term as GET /v1/cluster reports it through `via`. */
export async function terms(via: ServeNode): Promise<number[]> {
  return ((await call(via.child, 'GET', '/v1/cluster')).json.shards as Array<{ term: number }>).map((s) => s.term);
}

/** `punctual serve` with `args` run to its exit: the code and what it wrote. */
export function runServe(args: string[], timeoutMs = 20_000): Promise<{ code: number | null; stderr: string; stdout: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [entry, 'serve', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    let stdout = '';
    p.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    p.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    const timer = setTimeout(() => {
      p.kill('SIGKILL');
      reject(new Error(`serve ${args.join(' ')} did not exit: ${stderr}`));
    }, timeoutMs);
    p.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stderr, stdout });
    });
  });
}

export interface Answer {
  status: number;
  headers: http2.IncomingHttpHeaders;
  body: Buffer;
}

/** An attacker's (or a test member's) HTTP/2 session to a peer port, cleartext or TLS. */
export class PeerSession {
  readonly session: http2.ClientHttp2Session;
  constructor(readonly port: number, tls?: CertFiles) {
    const url = `${tls ? 'https' : 'http'}://127.0.0.1:${port}`;
    this.session = tls
      ? http2.connect(url, {
        ca: readFileSync(tls.caFile), cert: readFileSync(tls.certFile), key: readFileSync(tls.keyFile),
        servername: 'peer', checkServerIdentity: () => undefined,
      })
      : http2.connect(url);
    this.session.on('error', () => {});
  }

  post(path: string, headers: http2.OutgoingHttpHeaders, body: Uint8Array = new Uint8Array(0), timeoutMs = 10_000): Promise<Answer> {
    return new Promise((resolve, reject) => {
      const req = this.session.request({ ':method': 'POST', ':path': path, ...headers });
      const chunks: Buffer[] = [];
      let head: http2.IncomingHttpHeaders | null = null;
      const timer = setTimeout(() => {
        req.close();
        reject(new Error(`no answer to ${path} within ${timeoutMs} ms`));
      }, timeoutMs);
      req.on('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      req.on('response', (h) => (head = h));
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('close', () => {
        clearTimeout(timer);
        if (head === null) reject(new Error(`stream of ${path} closed without an answer`));
        else resolve({ status: Number(head[':status']), headers: head, body: Buffer.concat(chunks) });
      });
      req.end(body);
    });
  }

  /** The cluster-secret handshake as node `me` to node `them`; the auth answer and what a recorder would keep. */
  async handshake(me: string, them: string, key: string, clientNonce = newNonce()): Promise<{ auth: Answer; proof: string; clientNonce: string; serverNonce: string }> {
    const hello = await this.post(helloPath, { [protocolHeader]: peerProtocol, [nodeIdHeader]: me, [nonceHeader]: clientNonce });
    const serverNonce = String(hello.headers[nonceHeader]);
    const proof = clientProof(key, { serverNonce, clientNonce, clientId: me, serverId: them, target: `127.0.0.1:${this.port}` });
    const auth = await this.post(authPath, { [nodeIdHeader]: me, [proofHeader]: proof });
    return { auth, proof, clientNonce, serverNonce };
  }

  close(): void {
    this.session.destroy();
  }
}

/** The value of `punctual_peer_rpc_errors{kind}` in a node's /metrics. */
export async function peerCounter(n: ServeNode, kind: string): Promise<number> {
  const text = await (await fetch(`${n.child.base}/metrics`)).text();
  const m = new RegExp(`^punctual_peer_rpc_errors\\{kind="${kind}"\\} (\\d+)`, 'm').exec(text);
  return m === null ? 0 : Number(m[1]);
}
