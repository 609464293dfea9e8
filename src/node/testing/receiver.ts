/**
 * Test fixture (not product code): a real node:http callback receiver on 127.0.0.1 that records every request
 * with its arrival time and answers with what `respond` decides (status, headers, optional delay).
 */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Received {
  path: string;
  method: string;
  headers: IncomingHttpHeaders;
  body: string;
  /** Date.now() when the request's headers arrived. */
  atMs: number;
}

export interface Reply {
  status: number;
  headers?: Record<string, string>;
  delayMs?: number;
  /** Never answer (the socket is destroyed when the receiver closes). */
  hang?: boolean;
}

export interface Receiver {
  url(path: string): string;
  readonly received: Received[];
  /** Requests whose X-Punctual-Job-Id is jobId. */
  of(jobId: string): Received[];
  respond: (r: Received, countForPath: number) => Reply;
  close(): Promise<void>;
}

export async function startReceiver(): Promise<Receiver> {
  const received: Received[] = [];
  const perPath = new Map<string, number>();
  let server: Server;
  const rx: Receiver = {
    received,
    url: (path) => `http://127.0.0.1:${(server.address() as AddressInfo).port}${path}`,
    of: (jobId) => received.filter((r) => r.headers['x-punctual-job-id'] === jobId),
    respond: () => ({ status: 200 }),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  server = createServer((req, res) => {
    const atMs = Date.now();
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const path = req.url ?? '/';
      const r: Received = { path, method: req.method ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), atMs };
      received.push(r);
      const n = (perPath.get(path) ?? 0) + 1;
      perPath.set(path, n);
      const reply = rx.respond(r, n);
      if (reply.hang === true) return;
      const send = (): void => {
        res.writeHead(reply.status, reply.headers ?? {});
        res.end('ok');
      };
      if (reply.delayMs !== undefined) setTimeout(send, reply.delayMs);
      else send();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return rx;
}

/** Polls cond every 5 ms until it holds; throws with `what` after timeoutMs. */
export async function waitFor(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
