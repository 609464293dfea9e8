/**
 * The callback receiver: a node:http server on 127.0.0.1 that answers every delivery 200 and records its
 * X-Deduplication-Key, job id, scheduled time, attempt, fencing token and arrival time on the harness clock
 * (taken when the request head arrives, before the body is read).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { harnessNowMs, type Delivery } from './history.js';

export interface Receiver {
  readonly url: string;
  readonly deliveries: Delivery[];
  /** Requests without the callback headers of docs/api.md (counted, not recorded). */
  malformed(): number;
  close(): Promise<void>;
}

function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

export async function startReceiver(): Promise<Receiver> {
  const deliveries: Delivery[] = [];
  let malformed = 0;
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const arrivalMs = harnessNowMs();
    const key = header(req, 'x-deduplication-key');
    const jobId = header(req, 'x-punctual-job-id');
    const scheduledAtMs = Number(header(req, 'x-punctual-scheduled-at'));
    if (key === undefined || jobId === undefined || !Number.isFinite(scheduledAtMs)) malformed++;
    else {
      deliveries.push({
        key,
        jobId,
        scheduledAtMs,
        attempt: Number(header(req, 'x-punctual-attempt') ?? 0),
        fencingToken: header(req, 'x-punctual-fencing-token') ?? '',
        arrivalMs,
      });
    }
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-length': '0' }).end());
  });
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/cb`,
    deliveries,
    malformed: () => malformed,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
