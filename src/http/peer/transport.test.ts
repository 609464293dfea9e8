import * as http2 from 'node:http2';
import { createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../core/log.js';
import { makeEntry } from '../../raft/index.js';
import type { GroupId, LogIndex, Message, NodeId, SnapshotMessage, Term } from '../../raft/index.js';
import { createHmac } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  authPath, clientProof, helloPath, newNonce, nodeIdHeader, nonceHeader, peerProtocol, proofHeader, protocolHeader, refusalHeader,
  secretHeader, targetNodeHeader,
} from './auth.js';
import { makeCa, makeNodeCert } from '../../core/testing/certs.js';
import { encodeMessages } from './frame.js';
import type { PeerAddress, PeerLimits, PeerTransportOptions } from './transport.js';
import { PeerRequestError, PeerTimeoutError, PeerTransport, PeerUnavailableError } from './transport.js';

interface LogLine {
  level: string;
  msg: string;
  [k: string]: unknown;
}

interface TestNode {
  id: string;
  port: number;
  t: PeerTransport;
  got: Array<{ from: string; m: Message }>;
  deliveries: number;
  snaps: Array<{ from: string; m: Message; data: Uint8Array }>;
  logs: LogLine[];
}

const open: PeerTransport[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((t) => t.close()));
});

/** Ports chosen by the OS, released at once, then handed to the transports (which need each other's ports). */
async function freePorts(n: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from({ length: n }, () => new Promise<ReturnType<typeof createServer>>((resolve) => {
      const s = createServer();
      s.listen(0, '127.0.0.1', () => resolve(s));
    })),
  );
  const ports = servers.map((s) => (s.address() as { port: number }).port);
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  return ports;
}

type Extra = Partial<Omit<PeerTransportOptions, 'limits'>> & { limits?: Partial<PeerLimits> };

async function node(id: string, port: number, peers: PeerAddress[], extra: Extra = {}): Promise<TestNode> {
  const logs: LogLine[] = [];
  const n: TestNode = { id, port, got: [], deliveries: 0, snaps: [], logs, t: null as unknown as PeerTransport };
  n.t = new PeerTransport({
    nodeId: id,
    listenHost: '127.0.0.1',
    listenPort: port,
    peers,
    clusterSecret: null,
    logger: createLogger({ level: 'debug', write: (line) => logs.push(JSON.parse(line) as LogLine) }),
    onMessages: (from, ms) => {
      n.deliveries++;
      for (const m of ms) n.got.push({ from, m });
    },
    onSnapshot: async (from, m, data) => {
      n.snaps.push({ from, m, data });
    },
    onRequest: async (_from, kind, body) => new Uint8Array([...new TextEncoder().encode(kind + ':'), ...body]),
    ...extra,
  });
  open.push(n.t);
  await n.t.start();
  return n;
}

async function cluster(ids: string[], extra: (id: string) => Extra = () => ({})): Promise<TestNode[]> {
  const ports = await freePorts(ids.length);
  const addrs = ids.map((id, i) => ({ id, host: '127.0.0.1', port: ports[i]! }));
  return Promise.all(ids.map((id, i) => node(id, ports[i]!, addrs, extra(id))));
}

async function until(cond: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const start = Date.now();
  while (!cond()) {
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function hb(from: string, to: string, group: GroupId, sentTick = 1): Message {
  return { type: 'heartbeat', group, from: from as NodeId, to: to as NodeId, term: 3 as Term, commit: 7 as LogIndex, sentTick, ctx: '' };
}

function append(from: string, to: string, group: GroupId, data: string): Message {
  const e = makeEntry(8 as LogIndex, 3 as Term, 'normal', new TextEncoder().encode(data));
  return {
    type: 'append', group, from: from as NodeId, to: to as NodeId, term: 3 as Term,
    prevIndex: 7 as LogIndex, prevTerm: 3 as Term, entries: [e], commit: 7 as LogIndex,
  };
}

function snapMsg(from: string, to: string, group: GroupId, data: Uint8Array): SnapshotMessage {
  return {
    type: 'snapshot', group, from: from as NodeId, to: to as NodeId, term: 4 as Term,
    snapshot: { metadata: { index: 50 as LogIndex, term: 4 as Term, confState: { voters: [from, to] as NodeId[], learners: [] } }, data },
  };
}

/** A raw HTTP/2 POST to a peer port, as a misbehaving or foreign client would send it. */
async function rawPost(port: number, path: string, headers: http2.OutgoingHttpHeaders, body: Uint8Array): Promise<number> {
  const session = http2.connect(`http://127.0.0.1:${port}`);
  session.on('error', () => {});
  try {
    return await new Promise<number>((resolve, reject) => {
      const req = session.request({ ':method': 'POST', ':path': path, ...headers });
      req.on('error', reject);
      req.on('response', (h) => resolve(Number(h[':status'])));
      req.resume();
      req.end(body);
    });
  } finally {
    session.destroy();
  }
}

// First in the file, so no timer of an earlier test (a slow handler's sleep) skews the resource count.
describe('PeerTransport: close', () => {
  it('leaves no socket, server or timer behind, and fails what was pending', async () => {
    const kinds = (): Record<string, number> => {
      const out: Record<string, number> = {};
      for (const k of process.getActiveResourcesInfo()) out[k] = (out[k] ?? 0) + 1;
      return out;
    };
    await sleep(20);
    const before = kinds();
    const [a, b] = await cluster(['n1', 'n2'], () => ({ onRequest: () => new Promise<Uint8Array>(() => {}) }));
    a!.t.send([hb('n1', 'n2', 1)]);
    b!.t.send([hb('n2', 'n1', 1)]);
    await until(() => a!.got.length === 1 && b!.got.length === 1, 'traffic');
    const pending = a!.t.request('n2', 'hang', new Uint8Array(0), 60_000).catch((e: unknown) => e);
    await sleep(20);
    await Promise.all([a!.t.close(), b!.t.close()]);
    expect(await pending).toBeInstanceOf(Error);
    await sleep(20);
    const after = kinds();
    // <=: an unrelated timer of the runner may expire meanwhile; anything of ours left open would add to the count.
    for (const k of ['TCPSocketWrap', 'TCPServerWrap', 'Timeout', 'Immediate']) {
      expect(after[k] ?? 0, k).toBeLessThanOrEqual(before[k] ?? 0);
    }
    // The port is free again.
    const again = await node('n1', a!.port, []);
    await again.t.close();
  });
});

describe('PeerTransport: messages', () => {
  it('two nodes exchange messages of several groups, entries intact', async () => {
    const [a, b] = await cluster(['n1', 'n2']);
    a!.t.send([hb('n1', 'n2', 0), append('n1', 'n2', 5, 'hello'), hb('n1', 'n2', 300)]);
    b!.t.send([hb('n2', 'n1', 7)]);
    await until(() => b!.got.length === 3 && a!.got.length === 1, 'delivery');
    expect(b!.got.map((g) => [g.from, g.m.type, g.m.group])).toEqual([['n1', 'heartbeat', 0], ['n1', 'append', 5], ['n1', 'heartbeat', 300]]);
    const ap = b!.got[1]!.m;
    expect(ap.type === 'append' && new TextDecoder().decode(ap.entries[0]!.data)).toBe('hello');
    expect(ap.type === 'append' && ap.entries[0]!.crc).toBe((append('n1', 'n2', 5, 'hello') as unknown as { entries: Array<{ crc: number }> }).entries[0]!.crc);
    expect(a!.got[0]).toMatchObject({ from: 'n2', m: { group: 7, to: 'n1' } });
    await until(() => a!.t.stats().sent === 3, 'acknowledgements');
    expect(b!.t.stats().received).toBe(3);
    expect(a!.t.reachable('n2')).toBe(true);
    expect(a!.t.reachable('n9')).toBe(false);
  });

  it('three nodes: everyone reaches everyone', async () => {
    const nodes = await cluster(['n1', 'n2', 'n3']);
    for (const n of nodes) {
      const msgs: Message[] = [];
      for (const o of nodes) if (o !== n) for (let g = 0; g < 4; g++) msgs.push(hb(n.id, o.id, g));
      n.t.send(msgs);
    }
    await until(() => nodes.every((n) => n.got.length === 8), 'all deliveries');
    for (const n of nodes) {
      const from = n.got.map((g) => g.from).sort();
      expect(from).toEqual(nodes.filter((o) => o !== n).flatMap((o) => [o.id, o.id, o.id, o.id]));
      expect(n.got.every((g) => g.m.to === n.id)).toBe(true);
    }
  });

  it('coalesces what is sent in one turn into few batch requests', async () => {
    const [a, b] = await cluster(['n1', 'n2']);
    await until(() => a!.t.stats().peers.n2!.state === 'idle', 'idle link');
    for (let i = 0; i < 2_000; i++) a!.t.send([hb('n1', 'n2', i % 64, i)]);
    await until(() => b!.got.length === 2_000, 'all 2000');
    // Every message of the turn is queued before the first flush: 1 batch (2 if the first left alone).
    expect(a!.t.stats().peers.n2!.batches).toBeLessThanOrEqual(2);
    expect(b!.deliveries).toBeLessThanOrEqual(2);
    expect(b!.got.map((g) => (g.m as { sentTick: number }).sentTick)).toEqual(Array.from({ length: 2_000 }, (_, i) => i));
  });

  it('bounds the queue of a peer that is down: drops and counts, logs the state change once', async () => {
    const [down] = await freePorts(1);
    const a = await node('n1', (await freePorts(1))[0]!, [{ id: 'n2', host: '127.0.0.1', port: down! }], {
      limits: { queueMessagesMax: 100 },
    });
    for (let i = 0; i < 250; i++) a.t.send([hb('n1', 'n2', 1, i)]);
    a.t.send([hb('n1', 'n7', 1)]); // not a peer at all
    const s = a.t.stats();
    expect(s.peers.n2!.queued).toBe(100);
    expect(s.dropped).toBe(151);
    await sleep(400); // several reconnect attempts (50, 100, 200 ms backoff)
    expect(a.t.reachable('n2')).toBe(false);
    expect(a.t.stats().peers.n2!.state).toBe('down');
    expect(a.logs.filter((l) => l.msg === 'peer link down')).toHaveLength(1);
    expect(a.t.stats().peers.n2!.queued).toBe(100);
  });

  it('resets a session whose peer stops answering (a frozen process) and connects again', async () => {
    const frozen = http2.createServer();
    const sessions: http2.ServerHttp2Session[] = [];
    frozen.on('session', (s) => sessions.push(s));
    frozen.on('stream', (s) => s.on('error', () => {})); // read nothing, answer nothing
    await new Promise<void>((r) => frozen.listen(0, '127.0.0.1', () => r()));
    const port = (frozen.address() as { port: number }).port;
    try {
      const a = await node('n1', (await freePorts(1))[0]!, [{ id: 'n2', host: '127.0.0.1', port }], {
        limits: { batchTimeoutMs: 100, reachableMs: 150 },
      });
      a.t.send([hb('n1', 'n2', 1)]);
      await until(() => a.logs.some((l) => l.msg === 'peer batch timed out: resetting the session'), 'the batch timeout');
      await until(() => a.t.stats().peers.n2!.connects >= 2, 'a new session');
      // Connected, but nothing heard for reachableMs: not reachable.
      await until(() => !a.t.reachable('n2'), 'reachability to expire');
      expect(a.t.stats().peers.n2!.state).toBe('up');
      expect(a.t.stats().peers.n2!.dropped).toBe(1);
    } finally {
      const closed = new Promise((r) => frozen.close(r));
      for (const se of sessions) se.destroy();
      await closed;
    }
  });

  it('reconnects after the peer restarts and delivers what was queued', async () => {
    const [a, b] = await cluster(['n1', 'n2'], () => ({ limits: { reconnectBackoffMsMax: 100 } }));
    a!.t.send([hb('n1', 'n2', 1)]);
    await until(() => b!.got.length === 1, 'first delivery');
    await b!.t.close();
    await until(() => a!.t.stats().peers.n2!.state !== 'up', 'link down');
    a!.t.send([hb('n1', 'n2', 2), hb('n1', 'n2', 3)]);
    await sleep(250);
    const b2 = await node('n2', b!.port, [{ id: 'n1', host: '127.0.0.1', port: a!.port }]);
    await until(() => b2.got.length === 2, 'delivery after restart');
    expect(b2.got.map((g) => g.m.group)).toEqual([2, 3]);
    await until(() => a!.t.reachable('n2'), 'reachable again');
    expect(a!.logs.filter((l) => l.msg === 'peer link down')).toHaveLength(1);
    expect(a!.logs.filter((l) => l.msg === 'peer link up')).toHaveLength(2);
  });
});

describe('PeerTransport: snapshots', () => {
  it('streams a snapshot of several MB in chunks; the receiver gets it whole', async () => {
    const [a, b] = await cluster(['n1', 'n2'], () => ({ limits: { snapshotChunkBytes: 64 * 1024 } }));
    const data = new Uint8Array(6 * 1024 * 1024 + 123).map((_, i) => (i * 7 + (i >> 12)) & 0xff);
    expect(await a!.t.sendSnapshot(snapMsg('n1', 'n2', 9, data), data)).toBe(true);
    expect(b!.snaps).toHaveLength(1);
    const got = b!.snaps[0]!;
    expect(got.from).toBe('n1');
    expect(got.m).toMatchObject({ type: 'snapshot', group: 9, snapshot: { metadata: { index: 50, term: 4 } } });
    expect(Buffer.compare(Buffer.from(got.data), Buffer.from(data))).toBe(0);
    expect((got.m as SnapshotMessage).snapshot.data).toBe(got.data);
    expect(a!.t.stats().snapshotsSent).toBe(1);
    expect(b!.t.stats().snapshotsReceived).toBe(1);
  });

  it('reports failure when the install fails or the snapshot is over the limit; send() routes snapshots', async () => {
    const statuses: Array<[string, number, boolean]> = [];
    const [a, b] = await cluster(['n1', 'n2'], (id) => ({
      limits: { snapshotBytesMax: 1024 * 1024 },
      onSnapshotStatus: (peer, group, ok) => statuses.push([peer, group, ok]),
      onSnapshot: async (_from, m) => {
        if (id === 'n2' && m.group === 13) throw new Error('disk full');
      },
    }));
    expect(await a!.t.sendSnapshot(snapMsg('n1', 'n2', 13, new Uint8Array(10)), new Uint8Array(10))).toBe(false);
    expect(await a!.t.sendSnapshot(snapMsg('n1', 'n2', 1, new Uint8Array(2 << 20)), new Uint8Array(2 << 20))).toBe(false);
    expect(b!.logs.some((l) => l.msg === 'snapshot install failed')).toBe(true);
    a!.t.send([snapMsg('n1', 'n2', 2, new Uint8Array(1000))]);
    await until(() => statuses.length === 1, 'snapshot status');
    expect(statuses).toEqual([['n2', 2, true]]);
  });
});

describe('PeerTransport: request/response', () => {
  it('answers, reports handler errors, times out, refuses unknown peers', async () => {
    const [a] = await cluster(['n1', 'n2'], (id) => ({
      onRequest: async (_from, kind, body) => {
        if (id !== 'n2') return new Uint8Array(0);
        if (kind === 'boom') throw new Error('not the leader');
        if (kind === 'slow') await sleep(1_000);
        return new Uint8Array([...new TextEncoder().encode(kind + ':'), ...body]);
      },
    }));
    const answer = await a!.t.request('n2', 'propose', new Uint8Array([1, 2, 3]), 2_000);
    expect(new TextDecoder().decode(answer.subarray(0, 8))).toBe('propose:');
    expect([...answer.subarray(8)]).toEqual([1, 2, 3]);
    const boom = await a!.t.request('n2', 'boom', new Uint8Array(0), 2_000).catch((e: unknown) => e);
    expect(boom).toBeInstanceOf(PeerRequestError);
    expect((boom as PeerRequestError).status).toBe(500);
    expect((boom as Error).message).toContain('not the leader');
    await expect(a!.t.request('n2', 'slow', new Uint8Array(0), 50)).rejects.toBeInstanceOf(PeerTimeoutError);
    await expect(a!.t.request('n9', 'x', new Uint8Array(0), 50)).rejects.toBeInstanceOf(PeerUnavailableError);
    expect(a!.t.stats().rpcErrors).toBe(2);
    // The link survives its failed requests.
    expect([...(await a!.t.request('n2', 'k', new Uint8Array([9]), 2_000)).subarray(2)]).toEqual([9]);
  });
});

const secretA = 'cluster-secret-aaaaaaaaaaaa';
const secretB = 'cluster-secret-bbbbbbbbbbbb';

/** One raw HTTP/2 session to a peer port, as a stranger (or a recorder of someone else's handshake) would hold it. */
class RawSession {
  readonly session: http2.ClientHttp2Session;
  constructor(port: number) {
    this.session = http2.connect(`http://127.0.0.1:${port}`);
    this.session.on('error', () => {});
  }

  post(path: string, headers: http2.OutgoingHttpHeaders, body: Uint8Array = new Uint8Array(0)): Promise<{ status: number; headers: http2.IncomingHttpHeaders }> {
    return new Promise((resolve, reject) => {
      const req = this.session.request({ ':method': 'POST', ':path': path, ...headers });
      req.on('error', reject);
      req.on('response', (h) => resolve({ status: Number(h[':status']), headers: h }));
      req.resume();
      req.end(body);
    });
  }

  close(): void {
    this.session.destroy();
  }
}

/** The cluster-secret handshake done by hand (what PeerLink does), on `raw`'s session. */
async function handshake(raw: RawSession, port: number, me: string, them: string, secret: string, clientNonce = newNonce()) {
  const hello = await raw.post(helloPath, { [protocolHeader]: peerProtocol, [nodeIdHeader]: me, [nonceHeader]: clientNonce });
  const serverNonce = String(hello.headers[nonceHeader]);
  const input = { serverNonce, clientNonce, clientId: me, serverId: them, target: `127.0.0.1:${port}` };
  const proof = clientProof(secret, input);
  const auth = await raw.post(authPath, { [nodeIdHeader]: me, [proofHeader]: proof });
  return { hello, auth, proof, clientNonce };
}

/** What a refusal tells the one refused: the status, the reason, and every header but the date. */
function refusalView(r: { status: number; headers: http2.IncomingHttpHeaders }): unknown {
  const { date: _date, ...rest } = r.headers;
  return { status: r.status, ...rest };
}

describe('PeerTransport: who may talk (cluster secret)', () => {
  it('peers with the same secret talk; another secret, no secret or an insecure node are refused, each side says why', async () => {
    const secrets: Record<string, string | null> = { n1: secretA, n2: secretA, n3: secretB, n4: null };
    const nodes = await cluster(['n1', 'n2', 'n3', 'n4'], (id) => ({ clusterSecret: secrets[id]! }));
    const [n1, n2, n3, n4] = nodes as [TestNode, TestNode, TestNode, TestNode];
    n2.t.send([hb('n2', 'n1', 1)]);
    n1.t.send([hb('n1', 'n2', 1)]);
    for (let i = 0; i < 5; i++) {
      n3.t.send([hb('n3', 'n1', 1, i)]);
      n4.t.send([hb('n4', 'n1', 1, i)]);
      n1.t.send([hb('n1', 'n4', 1, i)]);
      await sleep(20);
    }
    await until(() => n1.got.length === 1 && n2.got.length === 1, 'the members with the same secret');
    await until(() => n3.logs.some((l) => l.msg === 'peer refuses this node (403)'), 'n3 told');
    await until(() => n4.logs.some((l) => l.msg === 'peer refuses this node (403)'), 'n4 told');
    await until(() => n1.logs.some((l) => l.msg === 'peer refuses this node (403)'), 'n1 told by the insecure node');
    expect(n1.got.map((g) => g.from)).toEqual(['n2']);
    expect(n4.got).toEqual([]);
    const refusals = n1.logs.filter((l) => l.msg === 'peer request refused');
    expect(new Set(refusals.map((l) => l.reason))).toEqual(new Set(['wrong_secret', 'unauthenticated']));
    expect(refusals.every((l) => l.remote === '127.0.0.1' && l.level === 'warn')).toBe(true);
    expect(n3.logs.find((l) => l.msg === 'peer refuses this node (403)')).toMatchObject({ peer: 'n1', reason: 'wrong_secret' });
    expect(n1.logs.find((l) => l.msg === 'peer refuses this node (403)')).toMatchObject({ peer: 'n4', reason: 'peer_mode' });
    expect(n3.t.reachable('n1')).toBe(false);
    expect(n1.t.reachable('n2')).toBe(true);
  });

  it('refuses every forged request before a handshake, the same way for a member id and a stranger id', async () => {
    const [a] = await cluster(['n1', 'n2'], () => ({ clusterSecret: secretA }));
    const frame = encodeMessages([hb('n2', 'n1', 1)]);
    const v1Proof = createHmac('sha256', secretA).update('punctual-peer-v1:n2').digest('hex');
    const answers: Array<{ id: string; proof: boolean; r: { status: number; headers: http2.IncomingHttpHeaders } }> = [];
    for (const [id, proof] of [['n2', undefined], ['zz', undefined], ['n2', v1Proof], ['zz', 'x']] as const) {
      for (const path of ['/raft/messages', '/raft/request', '/raft/snapshot']) {
        const raw = new RawSession(a!.port);
        const headers: http2.OutgoingHttpHeaders = { [nodeIdHeader]: id, 'x-punctual-kind': 'api' };
        if (proof !== undefined) headers[secretHeader] = proof;
        answers.push({ id, proof: proof !== undefined, r: await raw.post(path, headers, frame) });
        raw.close();
      }
    }
    expect(answers.every((x) => x.r.status === 403)).toBe(true);
    // Nothing in a refusal depends on the id claimed: a stranger learns no member id.
    const byId = (id: string, proof: boolean): unknown[] => answers.filter((x) => x.id === id && x.proof === proof).map((x) => refusalView(x.r));
    expect(byId('n2', false)).toEqual(byId('zz', false));
    expect(byId('n2', true)).toEqual(byId('zz', true));
    expect(answers.filter((x) => !x.proof).every((x) => x.r.headers[refusalHeader] === 'unauthenticated')).toBe(true);
    // A proof of protocol 1 is refused as such (an older node is told to upgrade), whether right or not.
    expect(answers.filter((x) => x.proof).every((x) => x.r.headers[refusalHeader] === 'protocol_version')).toBe(true);
    // A hello names no member either: a stranger id gets a nonce as a member id does.
    const raw1 = new RawSession(a!.port);
    const raw2 = new RawSession(a!.port);
    const h1 = await raw1.post(helloPath, { [protocolHeader]: peerProtocol, [nodeIdHeader]: 'n2', [nonceHeader]: newNonce() });
    const h2 = await raw2.post(helloPath, { [protocolHeader]: peerProtocol, [nodeIdHeader]: 'zz', [nonceHeader]: newNonce() });
    expect([h1.status, h2.status]).toEqual([200, 200]);
    expect(Object.keys(h1.headers).sort()).toEqual(Object.keys(h2.headers).sort());
    // An older peer protocol on the hello is refused as such.
    const raw3 = new RawSession(a!.port);
    expect((await raw3.post(helloPath, { [protocolHeader]: '1', [nodeIdHeader]: 'n2', [nonceHeader]: newNonce() })).headers[refusalHeader]).toBe('protocol_version');
    for (const r of [raw1, raw2, raw3]) r.close();
    expect(a!.got).toEqual([]);
    expect(a!.t.stats().refused).toBeGreaterThanOrEqual(13);
  });

  it('a handshake done right opens the session; replayed on a new connection it is refused', async () => {
    const [a] = await cluster(['n1', 'n2'], () => ({ clusterSecret: secretA }));
    const frame = encodeMessages([hb('n2', 'n1', 1)]);
    const good = new RawSession(a!.port);
    const captured = await handshake(good, a!.port, 'n2', 'n1', secretA);
    expect(captured.auth.status).toBe(200);
    expect((await good.post('/raft/messages', { [nodeIdHeader]: 'n2' }, frame)).status).toBe(204);
    await until(() => a!.got.length === 1, 'the message on the authenticated session');
    // On the same session, the authenticated id is the only one it speaks for.
    expect((await good.post('/raft/messages', { [nodeIdHeader]: 'n3' }, frame)).status).toBe(403);
    good.close();
    // The attacker replays the recorded hello (same client nonce) and auth proof on its own connection.
    const replay = new RawSession(a!.port);
    const hello = await replay.post(helloPath, { [protocolHeader]: peerProtocol, [nodeIdHeader]: 'n2', [nonceHeader]: captured.clientNonce });
    expect(hello.status).toBe(200);
    expect(hello.headers[nonceHeader]).not.toBe(captured.hello.headers[nonceHeader]);
    const auth = await replay.post(authPath, { [nodeIdHeader]: 'n2', [proofHeader]: captured.proof });
    expect(auth.status).toBe(403);
    expect(auth.headers[refusalHeader]).toBe('wrong_secret');
    expect(auth.headers[proofHeader]).toBeUndefined();
    replay.close();
    // The right secret with an id that is not a member: authenticated, so it may be told it is a stranger.
    const stranger = new RawSession(a!.port);
    expect((await handshake(stranger, a!.port, 'zz', 'n1', secretA)).auth.headers[refusalHeader]).toBe('stranger');
    stranger.close();
    expect(a!.got).toHaveLength(1);
  });

  it('a peer address that reaches another node: the right secret is told wrong_node, a wrong one learns nothing', async () => {
    const ports = await freePorts(2);
    const book = [{ id: 'n1', host: '127.0.0.1', port: ports[0]! }, { id: 'n3', host: '127.0.0.1', port: ports[1]! }];
    const n1 = await node('n1', ports[0]!, book, { clusterSecret: secretA });
    // n3's book says n2 lives at n1's address (an address reused after a move, or two entries swapped).
    const n3 = await node('n3', ports[1]!, [{ id: 'n2', host: '127.0.0.1', port: ports[0]! }, book[1]!], { clusterSecret: secretA });
    for (let i = 0; i < 5 && !n3.logs.some((l) => l.msg === 'peer refuses this node (403)'); i++) {
      n3.t.send([hb('n3', 'n2', 1, i)]);
      await sleep(20);
    }
    await until(() => n3.logs.some((l) => l.msg === 'peer refuses this node (403)'), 'n3 told');
    expect(n3.logs.find((l) => l.msg === 'peer refuses this node (403)')).toMatchObject({ peer: 'n2', reason: 'wrong_node' });
    expect(n1.logs.find((l) => l.msg === 'peer request refused')).toMatchObject({ reason: 'wrong_node', nodeId: 'n3', meant: 'n2' });
    expect(n1.got).toEqual([]);
    // Without the secret, naming the node meant changes nothing: the refusal is wrong_secret, as for any other id.
    const raw = new RawSession(n1.port);
    const clientNonce = newNonce();
    const hello = await raw.post(helloPath, { [protocolHeader]: peerProtocol, [nodeIdHeader]: 'n3', [nonceHeader]: clientNonce, [targetNodeHeader]: 'n2' });
    const input = { serverNonce: String(hello.headers[nonceHeader]), clientNonce, clientId: 'n3', serverId: 'n2', target: `127.0.0.1:${n1.port}` };
    const auth = await raw.post(authPath, { [nodeIdHeader]: 'n3', [proofHeader]: clientProof(secretB, input) });
    expect([auth.status, auth.headers[refusalHeader]]).toEqual([403, 'wrong_secret']);
    raw.close();
  });

  it('a node of peer protocol 1 (no handshake) is told apart: refused with protocol_version both ways', async () => {
    // An older node with a secret: it refuses what lacks its fixed proof (403 missing_secret) and knows no /peer/hello.
    const old = http2.createServer();
    const sessions: http2.ServerHttp2Session[] = [];
    old.on('session', (se) => sessions.push(se));
    old.on('stream', (st) => {
      st.on('error', () => {});
      st.respond({ ':status': 403, [refusalHeader]: 'missing_secret' }, { endStream: true });
    });
    await new Promise<void>((r) => old.listen(0, '127.0.0.1', () => r()));
    const port = (old.address() as { port: number }).port;
    try {
      const a = await node('n1', (await freePorts(1))[0]!, [{ id: 'n2', host: '127.0.0.1', port }], { clusterSecret: secretA });
      a.t.send([hb('n1', 'n2', 1)]);
      await until(() => a.logs.some((l) => l.msg === 'peer refuses this node (403)'), 'the refusal logged');
      expect(a.logs.find((l) => l.msg === 'peer refuses this node (403)')).toMatchObject({ peer: 'n2', reason: 'protocol_version' });
      // The other way: what the old node sends (its fixed proof, no handshake) is refused as protocol 1.
      const v1 = createHmac('sha256', secretA).update('punctual-peer-v1:n2').digest('hex');
      expect(await rawPost(a.port, '/raft/messages', { [nodeIdHeader]: 'n2', [secretHeader]: v1 }, encodeMessages([hb('n2', 'n1', 1)]))).toBe(403);
      await until(() => a.logs.some((l) => l.msg === 'peer request refused' && l.reason === 'protocol_version'), 'logged as protocol 1');
      expect(a.got).toEqual([]);
    } finally {
      const closed = new Promise((r) => old.close(r));
      for (const se of sessions) se.destroy();
      await closed;
    }
  });

  it('a link does not come up with a server that cannot prove the secret', async () => {
    // A fake peer that answers the handshake with a made-up proof (it does not know the secret).
    const fake = http2.createServer();
    const sessions: http2.ServerHttp2Session[] = [];
    fake.on('session', (s) => sessions.push(s));
    let gotFrames = 0;
    fake.on('stream', (st, h) => {
      st.on('error', () => {});
      if (h[':path'] === helloPath) st.respond({ ':status': 200, [nonceHeader]: newNonce() }, { endStream: true });
      else if (h[':path'] === authPath) st.respond({ ':status': 200, [proofHeader]: 'ab'.repeat(32) }, { endStream: true });
      else {
        gotFrames++;
        st.respond({ ':status': 204 }, { endStream: true });
      }
    });
    await new Promise<void>((r) => fake.listen(0, '127.0.0.1', () => r()));
    const port = (fake.address() as { port: number }).port;
    try {
      const a = await node('n1', (await freePorts(1))[0]!, [{ id: 'n2', host: '127.0.0.1', port }], { clusterSecret: secretA });
      a.t.send([hb('n1', 'n2', 1)]);
      await expect(a.t.request('n2', 'x', new Uint8Array(0), 2_000)).rejects.toBeInstanceOf(PeerUnavailableError);
      await until(() => a.logs.some((l) => l.msg === 'peer did not prove the cluster secret: not talking to it'), 'the warning');
      expect(gotFrames).toBe(0);
      expect(a.t.reachable('n2')).toBe(false);
    } finally {
      const closed = new Promise((r) => fake.close(r));
      for (const se of sessions) se.destroy();
      await closed;
    }
  });
});

describe('PeerTransport: mutual TLS', () => {
  let dir = '';
  afterEach(() => {
    if (dir !== '') rmSync(dir, { recursive: true, force: true });
    dir = '';
  });

  it('nodes with CA-signed certificates naming their ids talk; a wrong name, another CA or no certificate are refused', async () => {
    dir = mkdtempSync(join(tmpdir(), 'peer-tls-'));
    makeCa(dir);
    makeCa(dir, 'other-ca');
    const tls = {
      n1: makeNodeCert(dir, ['n1']),
      n2: makeNodeCert(dir, ['n2']),
      // The certificate at n3's address names n9: n1 dialling n3 does not accept it, nor a client using it as n3.
      n3: makeNodeCert(dir, ['n9'], { file: 'n3-names-n9' }),
    };
    const ports = await freePorts(4);
    const addrs = ['n1', 'n2', 'n3'].map((id, i) => ({ id, host: '127.0.0.1', port: ports[i]! }));
    // A node with n9's certificate listens at n3's address (a node's own id must be in its certificate).
    const n1 = await node('n1', ports[0]!, addrs, { tls: tls.n1 });
    const n2 = await node('n2', ports[1]!, addrs, { tls: tls.n2 });
    const n3 = await node('n9', ports[2]!, addrs.map((a) => ({ ...a })), { tls: tls.n3 });
    n1.t.send([hb('n1', 'n2', 1)]);
    n2.t.send([hb('n2', 'n1', 2)]);
    await until(() => n1.got.length === 1 && n2.got.length === 1, 'TLS traffic both ways');
    expect(await n1.t.request('n2', 'k', new Uint8Array([7]), 2_000)).toEqual(new Uint8Array([...new TextEncoder().encode('k:'), 7]));
    expect(n1.logs.some((l) => l.msg === 'peer links: mutual TLS')).toBe(true);
    // n1 dials the node at n3's address: its certificate does not name n3.
    n1.t.send([hb('n1', 'n3', 1)]);
    await until(() => n1.logs.some((l) => l.msg === 'peer link down' && String(l.error).includes('does not name node n3')), 'n1 refuses the server');
    // A client whose certificate names n9 cannot speak for n3 (a member of n1).
    const { readFileSync } = await import('node:fs');
    const tlsOf = (f: { certFile: string; keyFile: string; caFile: string }) => ({ ca: readFileSync(f.caFile), cert: readFileSync(f.certFile), key: readFileSync(f.keyFile) });
    const impostor = http2.connect(`https://127.0.0.1:${ports[0]}`, { ...tlsOf(tls.n3), servername: 'x', checkServerIdentity: () => undefined });
    impostor.on('error', () => {});
    const refused = await new Promise<http2.IncomingHttpHeaders>((resolve, reject) => {
      const req = impostor.request({ ':method': 'POST', ':path': '/raft/messages', [nodeIdHeader]: 'n3' });
      req.on('error', reject);
      req.on('response', resolve);
      req.end(encodeMessages([hb('n3', 'n1', 3)]));
    });
    impostor.destroy();
    expect([refused[':status'], refused[refusalHeader]]).toEqual([403, 'unauthenticated']);
    expect(n1.logs.find((l) => l.msg === 'peer request refused' && l.nodeId === 'n3')).toMatchObject({ reason: 'unauthenticated', certNames: ['n9'] });
    void n3;
    // A client without a certificate, or with one from another CA, fails the TLS handshake.
    const other = makeNodeCert(dir, ['n2'], { ca: 'other-ca', file: 'n2-other-ca' });
    for (const opts of [{ ca: readFileSync(tls.n1.caFile) }, { ca: readFileSync(tls.n1.caFile), cert: readFileSync(other.certFile), key: readFileSync(other.keyFile) }]) {
      const before = n1.t.stats().refused;
      const s = http2.connect(`https://127.0.0.1:${ports[0]}`, { ...opts, servername: 'x', checkServerIdentity: () => undefined });
      const err = await new Promise<unknown>((resolve) => {
        s.on('error', resolve);
        const req = s.request({ ':method': 'POST', ':path': '/raft/messages', [nodeIdHeader]: 'n2' });
        req.on('error', resolve);
        req.on('response', (h) => resolve(h[':status']));
        req.on('close', () => resolve('closed'));
        req.end(encodeMessages([hb('n2', 'n1', 9)]));
      });
      s.destroy();
      expect(typeof err === 'number').toBe(false);
      await until(() => n1.t.stats().refused > before, 'the refused handshake counted');
    }
    expect(n1.got).toHaveLength(1);
  });

  it('reloads its certificate: new connections use the new one; a bad file keeps the old', async () => {
    dir = mkdtempSync(join(tmpdir(), 'peer-tls-'));
    makeCa(dir);
    const c1 = makeNodeCert(dir, ['n1']);
    const c2 = makeNodeCert(dir, ['n2']);
    const [n1, n2] = await cluster(['n1', 'n2'], (id) => ({ tls: id === 'n1' ? c1 : c2 }));
    n2!.t.send([hb('n2', 'n1', 1)]);
    await until(() => n1!.got.length === 1, 'first delivery');
    const first = n1!.logs.find((l) => l.msg === 'peer links: mutual TLS')!.cert_sha256;
    // A certificate for n1 with another key replaces the files; SIGHUP would call reloadTls.
    makeNodeCert(dir, ['n1']);
    expect(n1!.t.reloadTls()).toBe(true);
    const second = n1!.logs.find((l) => l.msg === 'peer TLS reloaded')!.cert_sha256;
    expect(second).not.toBe(first);
    // A new connection to n1 sees the new certificate.
    const { readFileSync, writeFileSync } = await import('node:fs');
    const seen = await new Promise<string>((resolve, reject) => {
      const s = http2.connect(`https://127.0.0.1:${n1!.port}`, {
        ca: readFileSync(c2.caFile), cert: readFileSync(c2.certFile), key: readFileSync(c2.keyFile), servername: 'x',
        checkServerIdentity: () => undefined,
      });
      s.on('error', reject);
      s.on('connect', () => {
        const fp = (s.socket as import('node:tls').TLSSocket).getPeerCertificate().fingerprint256;
        s.destroy();
        resolve(fp);
      });
    });
    expect(seen).toBe(second);
    // A broken key file: logged, the old material kept, new connections still work.
    writeFileSync(c1.keyFile, 'not a key');
    expect(n1!.t.reloadTls()).toBe(false);
    expect(n1!.logs.some((l) => l.msg === 'peer TLS reload failed: keeping the certificates in use' && l.level === 'error')).toBe(true);
    await n2!.t.close();
    const n2b = await node('n2', n2!.port, [{ id: 'n1', host: '127.0.0.1', port: n1!.port }], { tls: c2 });
    n2b.t.send([hb('n2', 'n1', 2)]);
    await until(() => n1!.got.length === 2, 'delivery on a new connection after the failed reload');
  });

  it('refuses to start with files that do not name this node', async () => {
    dir = mkdtempSync(join(tmpdir(), 'peer-tls-'));
    makeCa(dir);
    const c = makeNodeCert(dir, ['n2']);
    expect(() => new PeerTransport({
      nodeId: 'n1', listenHost: '127.0.0.1', listenPort: 0, peers: [], clusterSecret: null, tls: c,
      logger: createLogger({ level: 'error', write: () => {} }),
      onMessages: () => {}, onSnapshot: async () => {}, onRequest: async () => new Uint8Array(0),
    })).toThrow(/URI:punctual:node:n1/);
  });
});

describe('PeerTransport: who may talk (membership)', () => {
  it('refuses a stranger (an id not in --peers) with an insecure node', async () => {
    const [a] = await cluster(['n1', 'n2']);
    const frame = encodeMessages([hb('zz', 'n1', 1)]);
    expect(await rawPost(a!.port, '/raft/messages', { [nodeIdHeader]: 'zz' }, frame)).toBe(403);
    expect(await rawPost(a!.port, '/raft/messages', {}, frame)).toBe(403);
    expect(a!.got).toEqual([]);
    expect(a!.logs.filter((l) => l.msg === 'peer request refused').map((l) => l.reason)).toEqual(['stranger', 'unauthenticated']);
  });
});

describe('PeerTransport: bad frames', () => {
  it('drops malformed, oversized and misaddressed frames and keeps serving', async () => {
    const [a, b] = await cluster(['n1', 'n2'], () => ({ limits: { frameBytesMax: 64 * 1024, batchBytesMax: 16 * 1024 } }));
    const h = { [nodeIdHeader]: 'n2' };
    expect(await rawPost(a!.port, '/raft/messages', h, new Uint8Array([0xc1, 0xff, 0x00]))).toBe(400);
    expect(await rawPost(a!.port, '/raft/messages', h, encodeMessages([{ type: 'nope' } as unknown as Message]))).toBe(400);
    expect(await rawPost(a!.port, '/raft/messages', h, new Uint8Array(100 * 1024))).toBe(413);
    expect(await rawPost(a!.port, '/raft/snapshot', h, new Uint8Array([0, 0, 0, 3, 1, 2, 3]))).toBe(400);
    expect(await rawPost(a!.port, '/raft/snapshot', h, new Uint8Array([0xff, 0xff, 0xff, 0xff]))).toBe(413);
    // Spoofed sender: n2 may not speak for n3, nor deliver to someone else.
    expect(await rawPost(a!.port, '/raft/messages', h, encodeMessages([hb('n3', 'n1', 1), hb('n2', 'n3', 1)]))).toBe(204);
    expect(a!.got).toEqual([]);
    expect(a!.t.stats().badFrames).toBe(6);
    expect(a!.logs.some((l) => l.msg === 'peer frame dropped')).toBe(true);
    // A message too big for one frame is dropped by the sender (it travels alone: over batchBytesMax), the rest flows.
    b!.t.send([append('n2', 'n1', 1, 'x'.repeat(70 * 1024))]);
    b!.t.send([hb('n2', 'n1', 4)]);
    await until(() => a!.got.length === 1, 'the good message');
    expect(a!.got[0]!.m.group).toBe(4);
    await until(() => b!.t.stats().dropped === 1, 'sender-side drop');
  });
});

describe('PeerTransport: membership while running', () => {
  it('adds a peer (accepted and reached from then on), moves it, and removes it (refused, messages dropped)', async () => {
    const ports = await freePorts(4);
    const addr = (id: string, i: number): PeerAddress => ({ id, host: '127.0.0.1', port: ports[i]! });
    const n1 = await node('n1', ports[0]!, [addr('n2', 1)], { clusterSecret: secretA });
    await node('n2', ports[1]!, [addr('n1', 0)], { clusterSecret: secretA });
    // n3 joins: it knows n1 from the start, n1 does not know it yet.
    const n3 = await node('n3', ports[2]!, [addr('n1', 0)], { clusterSecret: secretA });
    n3.t.send([hb('n3', 'n1', 1)]);
    await until(() => n1.t.stats().refused >= 1, 'a stranger refused');
    expect(n1.got).toEqual([]);
    n1.t.send([hb('n1', 'n3', 1)]);
    expect(n1.t.stats().dropped).toBe(1); // unknown peer

    expect(n1.t.addPeer(addr('n3', 2))).toBe(true);
    expect(n1.t.addPeer(addr('n3', 2))).toBe(false); // same address: nothing to do
    expect(n1.t.peers().map((p) => p.id).sort()).toEqual(['n2', 'n3']);
    n3.t.send([hb('n3', 'n1', 2)]);
    n1.t.send([hb('n1', 'n3', 2)]);
    // (n3's first heartbeat, refused while n1 did not know it, stayed queued on n3 and may arrive as well.)
    await until(() => n1.got.some((g) => g.m.group === 2) && n3.got.length === 1, 'both directions after addPeer');
    expect(await n1.t.request('n3', 'ping', new Uint8Array([1]), 2_000)).toEqual(new Uint8Array([...new TextEncoder().encode('ping:'), 1]));

    // n3 moves to another port: the old link is closed, the new address is used.
    await n3.t.close();
    const moved = await node('n3', ports[3]!, [addr('n1', 0)], { clusterSecret: secretA });
    expect(n1.t.addPeer(addr('n3', 3))).toBe(true);
    n1.t.send([hb('n1', 'n3', 3)]);
    await until(() => moved.got.length === 1, 'delivered at the new address');

    expect(await n1.t.removePeer('n3')).toBe(true);
    expect(await n1.t.removePeer('n3')).toBe(false);
    expect(n1.t.peers().map((p) => p.id)).toEqual(['n2']);
    const refusedBefore = n1.t.stats().refused;
    moved.t.send([hb('n3', 'n1', 4)]);
    await until(() => n1.t.stats().refused > refusedBefore, 'the removed peer refused');
    await expect(n1.t.request('n3', 'ping', new Uint8Array(0), 500)).rejects.toBeInstanceOf(PeerUnavailableError);
    expect(n1.got.filter((g) => g.m.group === 4)).toEqual([]);
  });
});
