import * as http2 from 'node:http2';
import { createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../core/log.js';
import { makeEntry } from '../../raft/index.js';
import type { GroupId, LogIndex, Message, NodeId, SnapshotMessage, Term } from '../../raft/index.js';
import { nodeIdHeader, secretHeader, secretProof } from './auth.js';
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

describe('PeerTransport: who may talk', () => {
  it('refuses a wrong or missing secret (403, logged once per address), accepts the right one', async () => {
    const secrets: Record<string, string | null> = { n1: 's3cret', n2: 's3cret', n3: 'other', n4: null };
    const nodes = await cluster(['n1', 'n2', 'n3', 'n4'], (id) => ({ clusterSecret: secrets[id]! }));
    const [n1, n2, n3, n4] = nodes as [TestNode, TestNode, TestNode, TestNode];
    n2.t.send([hb('n2', 'n1', 1)]);
    for (let i = 0; i < 5; i++) {
      n3.t.send([hb('n3', 'n1', 1, i)]);
      n4.t.send([hb('n4', 'n1', 1, i)]);
      await sleep(20);
    }
    await until(() => n1.t.stats().refused >= 10, 'refusals');
    expect(n1.got.map((g) => g.from)).toEqual(['n2']);
    const refusals = n1.logs.filter((l) => l.msg === 'peer request refused');
    expect(refusals.map((l) => l.reason).sort()).toEqual(['missing_secret', 'wrong_secret']);
    expect(refusals.every((l) => l.remote === '127.0.0.1' && l.level === 'warn')).toBe(true);
    expect(n3.t.stats().dropped).toBeGreaterThanOrEqual(5);
    // A node without a secret accepts a peer that presents one.
    n1.t.send([hb('n1', 'n4', 2)]);
    await until(() => n4.got.length === 1, 'accepted by the node without a secret');
  });

  it('refuses a stranger (an id not in --peers) and a forged header', async () => {
    const [a] = await cluster(['n1', 'n2'], () => ({ clusterSecret: 'k' }));
    const frame = encodeMessages([hb('zz', 'n1', 1)]);
    expect(await rawPost(a!.port, '/raft/messages', { [nodeIdHeader]: 'zz', [secretHeader]: secretProof('k', 'zz') }, frame)).toBe(403);
    expect(await rawPost(a!.port, '/raft/messages', {}, frame)).toBe(403);
    expect(await rawPost(a!.port, '/raft/messages', { [nodeIdHeader]: 'n2', [secretHeader]: secretProof('k', 'n3') }, frame)).toBe(403);
    expect(a!.got).toEqual([]);
    expect(a!.logs.filter((l) => l.msg === 'peer request refused').map((l) => l.reason)).toEqual(['stranger', 'wrong_secret']);
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
    const n1 = await node('n1', ports[0]!, [addr('n2', 1)], { clusterSecret: 'k' });
    await node('n2', ports[1]!, [addr('n1', 0)], { clusterSecret: 'k' });
    // n3 joins: it knows n1 from the start, n1 does not know it yet.
    const n3 = await node('n3', ports[2]!, [addr('n1', 0)], { clusterSecret: 'k' });
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
    await until(() => n1.got.length === 1 && n3.got.length === 1, 'both directions after addPeer');
    expect(await n1.t.request('n3', 'ping', new Uint8Array([1]), 2_000)).toEqual(new Uint8Array([...new TextEncoder().encode('ping:'), 1]));

    // n3 moves to another port: the old link is closed, the new address is used.
    await n3.t.close();
    const moved = await node('n3', ports[3]!, [addr('n1', 0)], { clusterSecret: 'k' });
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
    expect(n1.got).toHaveLength(1);
  });
});
