/**
 * The Punctual client: against a built `punctual serve` process for the API's shapes, paging, idempotency and
 * errors; against a node:http server that answers the 503/429 problems of docs/api.md for the retry rules (what
 * is repeated, what is not, with which headers). Needs `npm run build` (npm test does it).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { backoffMs, idempotentJobId, Punctual } from './client.js';
import { PunctualError } from './errors.js';
import { startServe, type ServeProcess } from './testing/serve.js';
import { loopbackSans, makeCa, makeCert } from '../core/testing/certs.js';

const far = '2031-01-01T00:00:00.000Z';

describe('against a real node', () => {
  let node: ServeProcess;
  let client: Punctual;

  beforeAll(async () => {
    node = await startServe();
    client = new Punctual({ baseUrl: node.base + '/' });
    await client.tasks.put('t1', { url: 'http://127.0.0.1:9/hook', retry: { max_attempts: 2 } });
  });

  afterAll(async () => {
    await client?.close();
    expect(await node?.stop()).toBe(0);
  });

  it('tasks and calendars: put, get, list, delete with the shapes of docs/api.md', async () => {
    const task = await client.tasks.get('t1');
    expect(task).toMatchObject({ name: 't1', url: 'http://127.0.0.1:9/hook', method: 'POST', retry: { max_attempts: 2, multiplier: 2 } });
    expect((await client.tasks.list()).map((t) => t.name)).toEqual(['t1']);
    const cal = await client.calendars.put('hol', { dates: ['2031-12-25'], ranges: [{ from: '2031-12-27', to: '2031-12-31' }] });
    expect(cal).toMatchObject({ name: 'hol', timezone: 'UTC', dates: ['2031-12-25'], description: null });
    expect((await client.calendars.list()).map((c) => c.name)).toEqual(['hol']);
    await client.calendars.delete('hol');
    expect(await client.calendars.list()).toEqual([]);
  });

  it('jobs: create with an id, or without one under a generated Idempotency-Key; the same key lands on the same job', async () => {
    const withId = await client.jobs.create({ id: 'c-1', task: 't1', schedule: { at: far }, metadata: { team: 'ops' } });
    expect(withId).toMatchObject({ id: 'c-1', task: 't1', state: 'PENDING', schedule: { at: far }, metadata: { team: 'ops' } });
    const generated = await client.jobs.create({ task: 't1', schedule: { delay_ms: 3_600_000 } });
    expect(generated.id).toMatch(/^ik-[0-9a-f]{32}$/);
    const keyed = await client.jobs.create({ task: 't1', schedule: { at: far } }, { idempotencyKey: 'order-42' });
    expect(keyed.id).toBe(idempotentJobId('order-42'));
    expect((await client.jobs.create({ task: 't1', schedule: { at: far } }, { idempotencyKey: 'order-42' })).id).toBe(keyed.id);
    const conflict = await client.jobs.create({ task: 't1', schedule: { at: '2032-01-01T00:00:00Z' } }, { idempotencyKey: 'order-42' }).catch((e: unknown) => e);
    expect(conflict).toBeInstanceOf(PunctualError);
    expect((conflict as PunctualError).status).toBe(409);
    expect((conflict as PunctualError).code).toBe('conflict');
  });

  it('jobs: list pages by cursor as an async iterator, with filters; pages() shows the pages', async () => {
    for (let i = 0; i < 5; i++) await client.jobs.create({ id: `page-${i}`, task: 't1', schedule: { at: far } });
    await client.jobs.pause('page-3');
    const ids: string[] = [];
    for await (const job of client.jobs.list({ limit: 2 })) if (job.id.startsWith('page-')) ids.push(job.id);
    expect(ids).toEqual(['page-0', 'page-1', 'page-2', 'page-3', 'page-4']);
    const sizes: number[] = [];
    for await (const page of client.jobs.list({ limit: 2 }).pages()) sizes.push(page.items.length);
    expect(sizes.every((n) => n <= 2)).toBe(true);
    expect(sizes.length).toBeGreaterThanOrEqual(4);
    const paused = await client.jobs.list({ state: 'paused' }).toArray();
    expect(paused.map((j) => j.id)).toEqual(['page-3']);
    await expect(client.jobs.list({ limit: 2 }).toArray(3)).rejects.toThrow(/more than 3 items/);
  });

  it('jobs: update, pause, resume, cancel, preview; batch derives the ids of items without one', async () => {
    await client.jobs.create({ id: 'u-1', task: 't1', schedule: { at: far } });
    const updated = await client.jobs.update('u-1', { schedule: { cron: '0 9 * * *', timezone: 'Europe/Berlin' }, payload: { v: 2 } });
    expect(updated).toMatchObject({ schedule: { cron: '0 9 * * *', timezone: 'Europe/Berlin' }, payload: { v: 2 } });
    expect((await client.jobs.pause('u-1')).state).toBe('PAUSED');
    expect((await client.jobs.resume('u-1')).state).toBe('PENDING');
    expect((await client.jobs.cancel('u-1')).state).toBe('CANCELLED');
    const times = await client.schedules.preview({ schedule: { cron: '30 2 * * *', timezone: 'America/New_York' }, from: '2027-03-13T00:00:00Z', count: 3 });
    expect(times).toEqual(['2027-03-13T07:30:00.000Z', '2027-03-14T07:30:00.000Z', '2027-03-15T06:30:00.000Z']);
    const jobs = [{ id: 'b-1', task: 't1', schedule: { at: far } }, { task: 't1', schedule: { at: far } }, { task: 'nope' }];
    const results = await client.jobs.batch(jobs, { idempotencyKey: 'import-7' });
    expect(results.map((r) => [r.id, r.status])).toEqual([['b-1', 201], [idempotentJobId('import-7', 1), 201], [idempotentJobId('import-7', 2), 404]]);
    expect(results[2]!.error).toMatchObject({ code: 'not_found' });
    const again = await client.jobs.batch(jobs, { idempotencyKey: 'import-7' });
    expect(again.map((r) => r.status)).toEqual([200, 200, 404]);
  });

  it('errors: a 400 names its field, a 404 its code; cluster, clock, health and metrics read', async () => {
    const bad = (await client.jobs.create({ id: 'e-1', task: 't1', schedule: { cron: 'nope' } }).catch((e: unknown) => e)) as PunctualError;
    expect(bad).toMatchObject({ status: 400, code: 'invalid_argument', field: 'schedule.cron', reason: null });
    expect(bad.errors[0]!.message).not.toBe('');
    const missing = (await client.jobs.get('no-such-job').catch((e: unknown) => e)) as PunctualError;
    expect(missing).toMatchObject({ status: 404, code: 'not_found' });
    const cluster = await client.cluster.status();
    expect(cluster.shards).toHaveLength(2);
    expect(cluster.shards.every((s) => s.leader === cluster.node_id)).toBe(true);
    expect((await client.clock.get()).mode).toBe('system');
    expect((await client.health()).status).toBe('ok');
    expect(await client.ready()).toBe(true);
    expect(await client.metrics()).toMatch(/^punctual_jobs\{state="PENDING"\} \d+$/m);
  });

  it('a token: 401 without it, the calls work with it', async () => {
    const token = 'client-test-token-0123456789';
    const secured = await startServe(['--auth-token', token]);
    const anonymous = new Punctual({ baseUrl: secured.base });
    const authed = new Punctual({ baseUrl: secured.base, token });
    try {
      const refused = (await anonymous.tasks.list().catch((e: unknown) => e)) as PunctualError;
      expect(refused).toMatchObject({ status: 401, code: 'unauthorized' });
      expect(await authed.tasks.list()).toEqual([]);
    } finally {
      await anonymous.close();
      await authed.close();
      expect(await secured.stop()).toBe(0);
    }
  });

  it('https with the ca option: refused without it (not retried: TLS is not transient), works with it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'punctual-client-tls-'));
    makeCa(dir);
    const cert = makeCert(dir, 'api', loopbackSans);
    const tls = await startServe(['--tls-cert-file', cert.certFile, '--tls-key-file', cert.keyFile]);
    const httpsBase = tls.base.replace('http://', 'https://');
    const untrusting = new Punctual({ baseUrl: httpsBase });
    const trusting = new Punctual({ baseUrl: httpsBase, ca: readFileSync(cert.caFile, 'utf8') });
    try {
      const refused = (await untrusting.tasks.list().catch((e: unknown) => e)) as PunctualError;
      expect(refused).toMatchObject({ status: 0, code: 'connection_failed', notSent: false });
      expect(refused.transient).toBe(false);
      expect(await trusting.tasks.list()).toEqual([]);
    } finally {
      await untrusting.close();
      await trusting.close();
      expect(await tls.stop()).toBe(0);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Retries: a server that answers the problems of docs/api.md ("503 and 429") as scripted.

interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
}

describe('retries follow docs/api.md: what is safe to repeat', () => {
  let server: Server;
  let base = '';
  let seen: Seen[] = [];
  /** Answers, in order, to the next requests; then 200 with `{}`... as the route's body. */
  let script: Array<{ status: number; reason?: string; retryAfter?: string }> = [];
  const clients: Punctual[] = [];

  const fast = (extra: Partial<ConstructorParameters<typeof Punctual>[0]> = {}) => {
    const c = new Punctual({ baseUrl: base, retry: { maxAttempts: 4, initialBackoffMs: 1, maxBackoffMs: 2 }, ...extra });
    clients.push(c);
    return c;
  };

  beforeAll(async () => {
    server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers });
        const next = script.shift();
        if (next === undefined) {
          const body = req.url === '/v1/jobs' && req.method === 'GET' ? { jobs: [], next_cursor: null } : { id: 'x', state: 'PENDING' };
          res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
          return;
        }
        const problem = { type: 'about:blank', title: 't', status: next.status, detail: 'scripted', code: next.status === 429 ? 'rate_limited' : next.status === 504 ? 'timeout' : 'unavailable', ...(next.reason === undefined ? {} : { reason: next.reason }) };
        res.writeHead(next.status, { 'content-type': 'application/problem+json', 'retry-after': next.retryAfter ?? '0' }).end(JSON.stringify(problem));
      });
    });
    await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterEach(async () => {
    seen = [];
    script = [];
    await Promise.all(clients.splice(0).map((c) => c.close()));
  });

  afterAll(async () => {
    await new Promise<void>((ok) => server.close(() => ok()));
  });

  it('a write whose 503 proves it was not proposed, and every 429, is repeated: even resume', async () => {
    script = [{ status: 503, reason: 'not_leader' }, { status: 429, reason: 'proposer_queue_full' }];
    expect((await fast().jobs.resume('j')).id).toBe('x');
    expect(seen.map((s) => s.url)).toEqual(['/v1/jobs/j/resume', '/v1/jobs/j/resume', '/v1/jobs/j/resume']);
  });

  it('an unknown outcome is repeated for idempotent writes, never for resume or a task delete', async () => {
    script = [{ status: 503, reason: 'proposal_timeout' }, { status: 504 }];
    expect((await fast().jobs.cancel('j')).state).toBe('PENDING');
    expect(seen).toHaveLength(3);
    seen = [];
    script = [{ status: 503, reason: 'leader_unreachable' }];
    const err = (await fast().jobs.resume('j').catch((e: unknown) => e)) as PunctualError;
    expect(err).toMatchObject({ status: 503, code: 'unavailable', reason: 'leader_unreachable', retryAfterMs: 0 });
    expect(err.provesNotApplied).toBe(false);
    expect(seen).toHaveLength(1);
    seen = [];
    script = [{ status: 503, reason: 'interrupted' }];
    await expect(fast().tasks.delete('t')).rejects.toMatchObject({ reason: 'interrupted' });
    expect(seen).toHaveLength(1);
  });

  it('a create without an id carries one Idempotency-Key through its repeats; a run always carries a run key', async () => {
    script = [{ status: 503, reason: 'snapshot_overtook' }];
    await fast().jobs.create({ task: 't' });
    expect(seen).toHaveLength(2);
    const key = seen[0]!.headers['idempotency-key'];
    expect(key).toMatch(/^[0-9a-f-]{36}$/);
    expect(seen[1]!.headers['idempotency-key']).toBe(key);
    seen = [];
    await fast().jobs.create({ id: 'mine', task: 't' });
    expect(seen[0]!.headers['idempotency-key']).toBeUndefined(); // the id makes it safe already
    seen = [];
    script = [{ status: 503, reason: 'proposal_timeout' }];
    await fast().jobs.run('j');
    expect(seen).toHaveLength(2);
    expect(seen[0]!.headers['idempotency-key']).toBe(seen[1]!.headers['idempotency-key']);
  });

  it('gives up after maxAttempts with the last error; retry: false sends once; reads are repeated', async () => {
    script = [{ status: 503, reason: 'no_leader' }, { status: 503, reason: 'no_leader' }, { status: 503, reason: 'no_leader' }, { status: 503, reason: 'no_leader' }];
    await expect(fast().jobs.get('j')).rejects.toMatchObject({ status: 503, reason: 'no_leader' });
    expect(seen).toHaveLength(4);
    seen = [];
    script = [{ status: 503, reason: 'no_leader' }];
    await expect(fast({ retry: false }).jobs.get('j')).rejects.toMatchObject({ status: 503 });
    expect(seen).toHaveLength(1);
    seen = [];
    script = [{ status: 503 }];
    expect((await fast().jobs.page()).jobs).toEqual([]);
    expect(seen).toHaveLength(2);
  });

  it('a refused connection is repeated (nothing was sent), then named: status 0, code unreachable', async () => {
    const closed = createServer();
    await new Promise<void>((ok) => closed.listen(0, '127.0.0.1', ok));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((ok) => closed.close(() => ok()));
    const err = (await fast({ baseUrl: `http://127.0.0.1:${port}` }).jobs.resume('j').catch((e: unknown) => e)) as PunctualError;
    expect(err).toBeInstanceOf(PunctualError);
    expect(err).toMatchObject({ status: 0, code: 'unreachable', notSent: true });
    expect((err.cause as { code?: string }).code).toBe('ECONNREFUSED');
  });

  it('backoff doubles up to the ceiling, with jitter in [d/2, d], never below Retry-After (clamped at 60 s)', () => {
    const retry = { maxAttempts: 5, initialBackoffMs: 100, maxBackoffMs: 1000 };
    expect([1, 2, 3, 4, 5].map((a) => backoffMs(retry, a, null, () => 1))).toEqual([100, 200, 400, 800, 1000]);
    expect(backoffMs(retry, 1, null, () => 0)).toBe(50);
    expect(backoffMs(retry, 1, 1000, () => 0)).toBe(1000);
    expect(backoffMs(retry, 1, 3_600_000, () => 0)).toBe(60_000);
  });
});
