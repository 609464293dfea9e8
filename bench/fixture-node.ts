/**
 * A TEST FIXTURE, not Punctual: a tiny HTTP server that answers the few routes of docs/api.md the bench uses
 * (PUT /v1/tasks/{name}, POST /v1/jobs, POST /v1/jobs:batch, GET /readyz) and fires each job's callback with
 * setTimeout, with faults on demand (lose, duplicate, fire early, refuse) so the bench's accounting can be
 * checked end to end against known answers before (and independently of) the real node.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'undici';

export interface FixtureFaults {
  /** Every nth accepted job (by arrival order, 1-based) is never fired. */
  loseEvery?: number;
  /** Every nth accepted job is fired twice. */
  duplicateEvery?: number;
  /** Every nth accepted job is fired 30 ms before its time. */
  earlyEvery?: number;
  /** Every nth submitted job is refused (429 for a single job, an item error in a batch). */
  rejectEvery?: number;
  /** Answer every job request this late (a slow server). */
  answerDelayMs?: number;
  /** Fire no callback sooner than this after its job was accepted (a slow firing path). */
  fireDelayMs?: number;
}

export interface FixtureNode {
  url: string;
  /** Requests seen per route, e.g. { 'POST /v1/jobs:batch': 3 }. */
  routes: Record<string, number>;
  /** Bearer tokens seen (the last one). */
  lastAuthorization: string | null;
  close(): Promise<void>;
}

interface JobIn {
  id: string;
  task?: string;
  schedule?: { at?: number };
}

export async function startFixtureNode(faults: FixtureFaults = {}): Promise<FixtureNode> {
  const tasks = new Map<string, string>();
  const timers = new Set<NodeJS.Timeout>();
  const pools = new Map<string, Pool>();
  let submitted = 0;
  let accepted = 0;
  const handle: FixtureNode = { url: '', routes: {}, lastAuthorization: null, close: async () => {} };

  const fire = (url: string, job: JobIn, atMs: number, earlyMs: number): void => {
    const origin = new URL(url);
    let pool = pools.get(origin.origin);
    if (!pool) pools.set(origin.origin, (pool = new Pool(origin.origin, { connections: 16 })));
    // On time means 2 ms after (timers may wake a little early, and the receiver reads another clock).
    const onTimeMs = Math.max(atMs, Date.now() + (faults.fireDelayMs ?? 0));
    const targetMs = earlyMs > 0 ? atMs - earlyMs : onTimeMs + 2;
    const arm = (): void => {
      const timer = setTimeout(() => {
        timers.delete(timer);
        if (Date.now() < targetMs) return arm();
        const headers = {
          'x-deduplication-key': `${job.id}:${atMs}`,
          'x-punctual-job-id': job.id,
          // An early fault arrives before the time it names even when a loaded machine delays the send past atMs.
          'x-punctual-scheduled-at': String(earlyMs > 0 ? Math.max(atMs, Date.now() + 5_000) : atMs),
          'x-punctual-attempt': '1',
        };
        pool!.request({ method: 'POST', path: origin.pathname, headers, body: '' }).then((r) => r.body.dump(), () => {});
      }, Math.max(0, targetMs - Date.now()));
      timers.add(timer);
    };
    arm();
  };

  /** Accepts or refuses one job; returns the problem code when refused. */
  const take = (job: JobIn): string | null => {
    submitted++;
    if (faults.rejectEvery && submitted % faults.rejectEvery === 0) return 'rate_limited';
    const url = tasks.get(job.task ?? '');
    if (url === undefined) return 'not_found';
    accepted++;
    const atMs = job.schedule?.at ?? Date.now();
    if (faults.loseEvery && accepted % faults.loseEvery === 0) return null;
    const early = faults.earlyEvery && accepted % faults.earlyEvery === 0 ? 30 : 0;
    fire(url, job, atMs, early);
    if (faults.duplicateEvery && accepted % faults.duplicateEvery === 0) fire(url, job, atMs, 0);
    return null;
  };

  const server = createServer({ keepAlive: true }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    const delayMs = req.url?.startsWith('/v1/jobs') ? (faults.answerDelayMs ?? 0) : 0;
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      if (delayMs === 0) return route(req, res, body);
      const timer = setTimeout(() => {
        timers.delete(timer);
        route(req, res, body);
      }, delayMs);
      timers.add(timer);
    });
  });

  const route = (req: IncomingMessage, res: ServerResponse, body: string): void => {
    const path = req.url ?? '';
    const key = `${req.method} ${path.startsWith('/v1/tasks/') ? '/v1/tasks/{name}' : path}`;
    handle.routes[key] = (handle.routes[key] ?? 0) + 1;
    handle.lastAuthorization = req.headers.authorization ?? null;
    if (key === 'GET /readyz') return send(res, 200, { ready: true });
    if (key === 'PUT /v1/tasks/{name}') {
      tasks.set(decodeURIComponent(path.slice('/v1/tasks/'.length)), (JSON.parse(body) as { url: string }).url);
      return send(res, 201, { name: path.slice('/v1/tasks/'.length) });
    }
    if (key === 'POST /v1/jobs') {
      const job = JSON.parse(body) as JobIn;
      const code = take(job);
      if (code) return send(res, 429, { type: 'about:blank', title: code, status: 429, detail: code, code });
      return send(res, 201, { id: job.id, state: 'PENDING' });
    }
    if (key === 'POST /v1/jobs:batch') {
      const { jobs } = JSON.parse(body) as { jobs: JobIn[] };
      const results = jobs.map((job) => {
        const code = take(job);
        return code ? { id: job.id, status: 429, error: { code, detail: code } } : { id: job.id, status: 201 };
      });
      return send(res, 200, { results });
    }
    send(res, 404, { code: 'not_found', status: 404 });
  };

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  handle.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  handle.close = async () => {
    for (const t of timers) clearTimeout(t);
    await Promise.all([...pools.values()].map((p) => p.close()));
    await closeServer(server);
  };
  return handle;
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  });
}
