/** The fault proxy over real sockets on 127.0.0.1: an echo server behind it, a plain TCP client in front. */
import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, test } from 'vitest';
import { LinkProxy, ProxyMesh } from './proxy.js';

interface Echo {
  port: number;
  /** Every byte the server received, in order. */
  received(): string;
  close(): Promise<void>;
}

async function echoServer(): Promise<Echo> {
  let got = '';
  const sockets = new Set<Socket>();
  const server: Server = createServer((s) => {
    sockets.add(s);
    s.on('data', (d) => {
      got += d.toString();
      s.write(d);
    });
    s.on('error', () => {});
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as AddressInfo).port,
    received: () => got,
    close: () => new Promise((r) => {
      for (const s of sockets) s.destroy();
      server.close(() => r());
    }),
  };
}

interface Client {
  socket: Socket;
  data(): string;
  /** Resolves with the error code (or 'closed') when the connection ends. */
  ended: Promise<string>;
}

function client(port: number): Promise<Client> {
  return new Promise((resolve, reject) => {
    let data = '';
    const socket = connect(port, '127.0.0.1');
    const ended = new Promise<string>((r) => {
      socket.on('error', (e: NodeJS.ErrnoException) => r(e.code ?? 'error'));
      socket.on('close', () => r('closed'));
    });
    socket.on('data', (d) => (data += d.toString()));
    socket.once('connect', () => resolve({ socket, data: () => data, ended }));
    socket.once('error', reject);
  });
}

const until = async (cond: () => boolean, timeoutMs = 3_000): Promise<boolean> => {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (cond()) return true;
    await new Promise((r) => setTimeout(r, 5));
  }
  return cond();
};
const pauseMs = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

const open: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const f of open.splice(0).reverse()) await f();
});

async function setup(): Promise<{ echo: Echo; proxy: LinkProxy }> {
  const echo = await echoServer();
  open.push(() => echo.close());
  const proxy = new LinkProxy('a', 'b', '127.0.0.1', echo.port);
  await proxy.start();
  open.push(() => proxy.close());
  return { echo, proxy };
}

async function dial(port: number): Promise<Client> {
  const c = await client(port);
  open.push(() => void c.socket.destroy());
  return c;
}

describe('LinkProxy', () => {
  test('pass forwards both ways', async () => {
    const { proxy } = await setup();
    const c = await dial(proxy.port);
    c.socket.write('hello');
    expect(await until(() => c.data() === 'hello')).toBe(true);
    expect(proxy.stats.bytesForwarded).toBe(10);
  });

  test('blackhole forwards nothing; leaving it resets the connection that lost bytes, new ones pass', async () => {
    const { echo, proxy } = await setup();
    const c = await dial(proxy.port);
    c.socket.write('one');
    expect(await until(() => c.data() === 'one')).toBe(true);
    proxy.set({ mode: 'blackhole', delayMs: 0 });
    c.socket.write('two');
    expect(await until(() => proxy.stats.bytesDropped === 3)).toBe(true);
    await pauseMs(100);
    expect(echo.received()).toBe('one');
    expect(c.data()).toBe('one');
    proxy.set({ mode: 'pass', delayMs: 0 });
    expect(await c.ended).toBe('ECONNRESET');
    const d = await dial(proxy.port);
    d.socket.write('three');
    expect(await until(() => d.data() === 'three')).toBe(true);
  });

  test('reset resets open connections and every new one', async () => {
    const { proxy } = await setup();
    const c = await dial(proxy.port);
    c.socket.write('x');
    expect(await until(() => c.data() === 'x')).toBe(true);
    proxy.set({ mode: 'reset', delayMs: 0 });
    expect(await c.ended).toBe('ECONNRESET');
    const d = await client(proxy.port).catch(() => null);
    if (d) expect(await d.ended).toBe('ECONNRESET');
    expect(proxy.stats.resets).toBeGreaterThanOrEqual(2);
  });

  test('one-way: the dialer reaches the target, nothing comes back', async () => {
    const { echo, proxy } = await setup();
    const c = await dial(proxy.port);
    proxy.set({ mode: 'one-way', delayMs: 0 });
    c.socket.write('ping');
    expect(await until(() => echo.received() === 'ping')).toBe(true);
    expect(await until(() => proxy.stats.bytesDropped === 4)).toBe(true);
    expect(c.data()).toBe('');
  });

  test('delay holds each chunk at least delayMs and keeps their order', async () => {
    const { echo, proxy } = await setup();
    proxy.set({ mode: 'pass', delayMs: 150 });
    const c = await dial(proxy.port);
    const sentMs = Date.now();
    for (const part of ['a', 'b', 'c']) c.socket.write(part);
    expect(await until(() => echo.received() === 'abc')).toBe(true);
    expect(Date.now() - sentMs).toBeGreaterThanOrEqual(150);
    expect(await until(() => c.data() === 'abc')).toBe(true);
  });

  test('a target that is down looks like a closed connection', async () => {
    const echo = await echoServer();
    const port = echo.port;
    await echo.close();
    const proxy = new LinkProxy('a', 'b', '127.0.0.1', port);
    await proxy.start();
    open.push(() => proxy.close());
    const c = await dial(proxy.port);
    expect(['closed', 'ECONNRESET']).toContain(await c.ended);
  });
});

describe('ProxyMesh', () => {
  test('one listener per directed link; --peers points at them; partitions set link modes', async () => {
    const echos = await Promise.all([echoServer(), echoServer(), echoServer()]);
    for (const e of echos) open.push(() => e.close());
    const mesh = await ProxyMesh.start(new Map([['n1', echos[0].port], ['n2', echos[1].port], ['n3', echos[2].port]]));
    open.push(() => mesh.close());
    expect(mesh.peersFlag('n1')).toBe(`n2=127.0.0.1:${mesh.link('n1', 'n2').port},n3=127.0.0.1:${mesh.link('n1', 'n3').port}`);
    // n1 -> n2 really reaches n2's listener.
    const c = await dial(mesh.link('n1', 'n2').port);
    c.socket.write('to-n2');
    expect(await until(() => echos[1].received() === 'to-n2')).toBe(true);

    mesh.partition([['n1'], ['n2', 'n3']]);
    expect(mesh.link('n1', 'n2').current.mode).toBe('blackhole');
    expect(mesh.link('n3', 'n1').current.mode).toBe('blackhole');
    expect(mesh.link('n2', 'n3').current.mode).toBe('pass');

    mesh.oneWay('n3');
    expect(mesh.link('n3', 'n1').current.mode).toBe('one-way');
    expect(mesh.link('n1', 'n3').current.mode).toBe('blackhole');
    expect(mesh.link('n1', 'n2').current.mode).toBe('pass');

    mesh.heal();
    expect(Object.values(mesh.stats()).length).toBe(6);
    expect(mesh.link('n1', 'n3').current.mode).toBe('pass');
  });
});
