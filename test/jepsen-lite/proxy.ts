/**
 * A fault-injecting TCP proxy: one listener per directed peer link a->b (node a dials the proxy, the proxy dials
 * b's real --peer-listen). Partitions need no root and no kernel features: the harness flips a link's mode.
 *
 * Modes (both directions of every connection on the link):
 * - pass: forward bytes, optionally each chunk held delayMs first (order kept);
 * - blackhole: accept and read, forward nothing (bytes are discarded, as a dropped packet would be);
 * - reset: reset every open connection (RST) and every new one at once;
 * - one-way: bytes from the dialer (a) reach b, b's bytes back to a are discarded.
 * A connection that lost bytes (blackhole, one-way) is reset when the link leaves that mode: its byte stream is
 * corrupt (HTTP/2 frames cut in half), and a real network would have timed it out; the endpoints reconnect.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

export type LinkMode = 'pass' | 'blackhole' | 'reset' | 'one-way';

export interface LinkFaults {
  mode: LinkMode;
  /** Held per chunk in pass and one-way modes (the forwarded direction). 0 = none. */
  delayMs: number;
}

export interface LinkStats {
  connections: number;
  bytesForwarded: number;
  bytesDropped: number;
  resets: number;
}

interface Conn {
  client: Socket;
  upstream: Socket;
  /** Bytes were discarded on this connection: it must be reset before bytes flow again. */
  dirty: boolean;
  /** Per direction: when the last delayed chunk is due, so a later chunk never overtakes it. */
  lastDueMs: { up: number; down: number };
  timers: Set<NodeJS.Timeout>;
}

export const passFaults: LinkFaults = { mode: 'pass', delayMs: 0 };

export class LinkProxy {
  private server: Server | null = null;
  private readonly conns = new Set<Conn>();
  private faults: LinkFaults = passFaults;
  readonly stats: LinkStats = { connections: 0, bytesForwarded: 0, bytesDropped: 0, resets: 0 };
  port = 0;

  constructor(
    readonly from: string,
    readonly to: string,
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  /** Listens on 127.0.0.1 (port 0 = a free one); resolves the port. */
  start(port = 0): Promise<number> {
    const server = createServer((client) => this.accept(client));
    this.server = server;
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        this.port = (server.address() as AddressInfo).port;
        resolve(this.port);
      });
    });
  }

  get current(): LinkFaults {
    return this.faults;
  }

  set(faults: LinkFaults): void {
    const before = this.faults;
    this.faults = faults;
    if (faults.mode === 'reset') {
      for (const c of [...this.conns]) this.reset(c);
      return;
    }
    const flowing = faults.mode === 'pass' || faults.mode === 'one-way';
    if (flowing && before.mode !== faults.mode) {
      for (const c of [...this.conns]) if (c.dirty) this.reset(c);
    }
  }

  async close(): Promise<void> {
    for (const c of [...this.conns]) this.drop(c);
    const server = this.server;
    this.server = null;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    this.stats.connections++;
    if (this.faults.mode === 'reset') {
      this.stats.resets++;
      client.resetAndDestroy();
      return;
    }
    const upstream = connect(this.targetPort, this.targetHost);
    const conn: Conn = { client, upstream, dirty: false, lastDueMs: { up: 0, down: 0 }, timers: new Set() };
    this.conns.add(conn);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    client.on('data', (chunk: Buffer) => this.onChunk(conn, 'up', chunk));
    upstream.on('data', (chunk: Buffer) => this.onChunk(conn, 'down', chunk));
    // Either side ending or failing ends the pair: a refused upstream (node down) looks like a reset to a.
    const end = (): void => this.drop(conn);
    client.on('error', end);
    upstream.on('error', end);
    client.on('close', end);
    upstream.on('close', end);
  }

  private onChunk(conn: Conn, dir: 'up' | 'down', chunk: Buffer): void {
    const mode = this.faults.mode;
    if (mode === 'blackhole' || mode === 'reset' || (mode === 'one-way' && dir === 'down')) {
      conn.dirty = true;
      this.stats.bytesDropped += chunk.length;
      return;
    }
    const dst = dir === 'up' ? conn.upstream : conn.client;
    const delayMs = this.faults.delayMs;
    if (delayMs <= 0 && conn.timers.size === 0) {
      this.write(conn, dir, dst, chunk);
      return;
    }
    const nowMs = Date.now();
    const dueMs = Math.max(nowMs + delayMs, conn.lastDueMs[dir]);
    conn.lastDueMs[dir] = dueMs;
    const timer = setTimeout(() => {
      conn.timers.delete(timer);
      this.write(conn, dir, dst, chunk);
    }, dueMs - nowMs);
    conn.timers.add(timer);
  }

  private write(conn: Conn, dir: 'up' | 'down', dst: Socket, chunk: Buffer): void {
    if (dst.destroyed || !this.conns.has(conn)) return;
    this.stats.bytesForwarded += chunk.length;
    if (!dst.write(chunk)) {
      // Backpressure: stop reading the source until the destination drains.
      const src = dir === 'up' ? conn.client : conn.upstream;
      src.pause();
      dst.once('drain', () => src.resume());
    }
  }

  private reset(conn: Conn): void {
    this.stats.resets++;
    if (!conn.client.destroyed) conn.client.resetAndDestroy();
    if (!conn.upstream.destroyed) conn.upstream.resetAndDestroy();
    this.drop(conn);
  }

  private drop(conn: Conn): void {
    if (!this.conns.delete(conn)) return;
    for (const t of conn.timers) clearTimeout(t);
    conn.timers.clear();
    conn.client.destroy();
    conn.upstream.destroy();
  }
}

/** One LinkProxy per directed pair of nodes: the whole peer network of a run. */
export class ProxyMesh {
  private readonly links = new Map<string, LinkProxy>();

  private constructor(readonly nodeIds: readonly string[]) {}

  /** peerPorts: each node's real --peer-listen port. */
  static async start(peerPorts: ReadonlyMap<string, number>): Promise<ProxyMesh> {
    const mesh = new ProxyMesh([...peerPorts.keys()]);
    try {
      for (const a of mesh.nodeIds) {
        for (const b of mesh.nodeIds) {
          if (a === b) continue;
          const link = new LinkProxy(a, b, '127.0.0.1', peerPorts.get(b)!);
          await link.start();
          mesh.links.set(`${a}>${b}`, link);
        }
      }
    } catch (err) {
      await mesh.close();
      throw err;
    }
    return mesh;
  }

  link(from: string, to: string): LinkProxy {
    const link = this.links.get(`${from}>${to}`);
    if (!link) throw new Error(`no link ${from}>${to}`);
    return link;
  }

  /** The --peers value of node `from`: every other node at its proxy port. */
  peersFlag(from: string): string {
    return this.nodeIds
      .filter((id) => id !== from)
      .map((to) => `${to}=127.0.0.1:${this.link(from, to).port}`)
      .join(',');
  }

  /** Blackholes every link between nodes of different groups (both directions); links inside a group pass. */
  partition(groups: readonly (readonly string[])[]): void {
    const groupOf = new Map<string, number>();
    groups.forEach((g, i) => g.forEach((id) => groupOf.set(id, i)));
    for (const link of this.links.values()) {
      const same = groupOf.get(link.from) === groupOf.get(link.to);
      link.set(same ? passFaults : { mode: 'blackhole', delayMs: 0 });
    }
  }

  /** Node x can send but not receive: its requests reach the others, nothing comes back to it. */
  oneWay(x: string): void {
    for (const link of this.links.values()) {
      if (link.from === x) link.set({ mode: 'one-way', delayMs: 0 });
      else if (link.to === x) link.set({ mode: 'blackhole', delayMs: 0 });
      else link.set(passFaults);
    }
  }

  setAll(faults: LinkFaults): void {
    for (const link of this.links.values()) link.set(faults);
  }

  heal(): void {
    this.setAll(passFaults);
  }

  stats(): Record<string, LinkStats> {
    return Object.fromEntries([...this.links].map(([k, l]) => [k, { ...l.stats }]));
  }

  async close(): Promise<void> {
    await Promise.all([...this.links.values()].map((l) => l.close()));
  }
}
