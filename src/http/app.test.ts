/** The app core without sockets: routes, status codes, normalization, idempotency, auth, errors. */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { PunctualError } from '../core/errors.js';
import { limits } from '../core/limits.js';
import { call, makeHarness } from './testing/harness.js';

const now = Date.UTC(2026, 11, 1, 9, 0, 0);
const cb = { url: 'https://example.com/hook' };

describe('jobs', () => {
  it('POST creates (201 + Location), repeats with the same body (200), conflicts with another (409)', async () => {
    const { app } = makeHarness();
    const body = { id: 'j1', callback: cb, schedule: { delay_ms: 5000 } };
    const first = await call(app, 'POST', '/v1/jobs', body);
    expect(first.status).toBe(201);
    expect(first.headers.location).toBe('/v1/jobs/j1');
    expect(first.json.next_fire_at).toBe('2026-12-01T09:00:05.000Z');
    const again = await call(app, 'POST', '/v1/jobs', { schedule: { delay_ms: 5000 }, callback: cb, id: 'j1' }); // key order differs
    expect(again.status).toBe(200);
    const other = await call(app, 'POST', '/v1/jobs', { ...body, payload: 1 });
    expect(other.status).toBe(409);
    expect(other.json.code).toBe('conflict');
  });

  it('Idempotency-Key without id derives ik- + 32 hex of sha256(key)', async () => {
    const { app } = makeHarness();
    const key = 'order-7:email';
    const expected = 'ik-' + createHash('sha256').update(key).digest('hex').slice(0, 32);
    const a = await call(app, 'POST', '/v1/jobs', { callback: cb }, { 'Idempotency-Key': key });
    expect(a.status).toBe(201);
    expect(a.json.id).toBe(expected);
    const b = await call(app, 'POST', '/v1/jobs', { callback: cb }, { 'Idempotency-Key': key });
    expect(b.status).toBe(200);
    expect(b.json.id).toBe(expected);
    const c = await call(app, 'POST', '/v1/jobs', { callback: cb, payload: 2 }, { 'Idempotency-Key': key });
    expect(c.status).toBe(409);
  });

  it('without id or key, each job gets a fresh UUID', async () => {
    const { app } = makeHarness();
    const a = await call(app, 'POST', '/v1/jobs', { callback: cb });
    const b = await call(app, 'POST', '/v1/jobs', { callback: cb });
    expect(a.json.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(b.json.id).not.toBe(a.json.id);
    expect([a.status, b.status]).toEqual([201, 201]);
  });

  it('normalizes: schedules resolved with nowMs, defaults filled, headers lower-cased', async () => {
    const { app, api } = makeHarness();
    const bodies = [
      { id: 'now', callback: { ...cb, method: 'put', headers: { 'Content-Type': 'application/json' } } },
      { id: 'empty', callback: cb, schedule: {} },
      { id: 'delay', callback: cb, schedule: { delay_ms: 250 } },
      { id: 'at', callback: cb, schedule: { at: '2026-12-01T10:00:00.5+01:00' } },
      { id: 'epoch', callback: cb, schedule: { at: now + 7 } },
      { id: 'cron', callback: cb, schedule: { cron: '0 9 * * MON-FRI' } },
      { id: 'every', callback: cb, schedule: { every_ms: 60_000 } },
    ];
    for (const b of bodies) expect((await call(app, 'POST', '/v1/jobs', b)).status).toBe(201);
    const specs = Object.fromEntries(api.created.map(([s]) => [s!.id, s!]));
    expect(specs.now!.schedule).toEqual({ kind: 'once', atMs: now });
    expect(specs.empty!.schedule).toEqual({ kind: 'once', atMs: now });
    expect(specs.delay!.schedule).toEqual({ kind: 'once', atMs: now + 250 });
    expect(specs.at!.schedule).toEqual({ kind: 'once', atMs: now + 500 });
    expect(specs.epoch!.schedule).toEqual({ kind: 'once', atMs: now + 7 });
    expect(specs.cron!.schedule).toEqual({ kind: 'cron', cron: '0 9 * * MON-FRI', timezone: 'UTC', startAtMs: null });
    // every_ms without start_at starts when its command is stamped: the state machine resolves it, not the parser.
    expect(specs.every!.schedule).toEqual({ kind: 'every', everyMs: 60_000, startAtMs: null });
    expect(specs.every!.misfireThresholdMs).toBe(5_000);
    expect(specs.now!.callback).toEqual({
      url: cb.url,
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      timeoutMs: 10_000,
      retry: { maxAttempts: 5, initialBackoffMs: 1000, maxBackoffMs: 60_000, multiplier: 2, jitter: true },
      signingSecret: null,
      maxConcurrency: 100,
    });
    expect(specs.now!).toMatchObject({ maxRuns: 0, misfire: 'fire_once', overlap: 'allow', metadata: null, endAtMs: null });
  });

  it('null is absent inside schedule too: every-field-null serializers work, {"at": null} is now', async () => {
    const { app } = makeHarness();
    const nulls = { at: null, delay_ms: null, cron: null, timezone: null, every_ms: null, start_at: null };
    const delay = await call(app, 'POST', '/v1/jobs', { callback: cb, schedule: { ...nulls, delay_ms: 250 } });
    expect([delay.status, delay.json.schedule]).toEqual([201, { at: '2026-12-01T09:00:00.250Z' }]);
    const cron = await call(app, 'POST', '/v1/jobs', { callback: cb, schedule: { ...nulls, cron: '0 9 * * *' } });
    expect([cron.status, cron.json.schedule]).toEqual([201, { cron: '0 9 * * *', timezone: 'UTC' }]);
    const every = await call(app, 'POST', '/v1/jobs', { callback: cb, schedule: { ...nulls, every_ms: 1000 } });
    expect(every.json.schedule).toEqual({ every_ms: 1000, start_at: '2026-12-01T09:00:00.000Z' });
    for (const schedule of [nulls, { at: null }]) {
      const res = await call(app, 'POST', '/v1/jobs', { callback: cb, schedule });
      expect([res.status, res.json.schedule]).toEqual([201, { at: '2026-12-01T09:00:00.000Z' }]);
    }
    const bad = await call(app, 'POST', '/v1/jobs', { callback: cb, schedule: { ...nulls, at: 0, cron: '* * * * *' } });
    expect([bad.status, bad.json.errors[0].field]).toEqual([400, 'schedule']);
  });

  it('the callback URL is stored as the URL that will be requested (normalized)', async () => {
    const { app } = makeHarness();
    const res = await call(app, 'PUT', '/v1/tasks/t', { url: 'HTTPS://Example.COM:443/a b?q=ü' });
    expect([res.status, res.json.url]).toEqual([201, 'https://example.com/a%20b?q=%C3%BC']);
    const job = await call(app, 'POST', '/v1/jobs', { callback: { url: 'http://127.0.0.1:9000' } });
    expect(job.json.callback.url).toBe('http://127.0.0.1:9000/');
  });

  it('Location percent-encodes the id; the dot-segment ids . and .. are refused (URL parsing resolves them away, %2E%2E too)', async () => {
    const { app } = makeHarness();
    const res = await call(app, 'POST', '/v1/jobs', { id: 'a.b:c', callback: cb });
    expect([res.status, res.headers.location]).toEqual([201, '/v1/jobs/a.b%3Ac']);
    expect((await call(app, 'GET', res.headers.location!)).json.id).toBe('a.b:c');
    for (const id of ['..', '.']) {
      const refused = await call(app, 'POST', '/v1/jobs', { id, callback: cb });
      expect([refused.status, refused.json.errors[0].field]).toEqual([400, 'id']);
    }
  });

  it('payload is sent as UTF-8 JSON text; payload_base64 as raw bytes', async () => {
    const { app, api } = makeHarness();
    await call(app, 'POST', '/v1/jobs', { id: 'j', callback: cb, payload: { to: 'ada', n: [1, 2] } });
    await call(app, 'POST', '/v1/jobs', { id: 'b', callback: cb, payload_base64: 'AP8=' });
    await call(app, 'POST', '/v1/jobs', { id: 'n', callback: cb, payload: null });
    const [[j], [b], [n]] = api.created;
    expect(new TextDecoder().decode(j!.payload)).toBe('{"to":"ada","n":[1,2]}');
    expect(j!.payloadEncoding).toBe('json');
    expect([...b!.payload]).toEqual([0, 255]);
    expect(b!.payloadEncoding).toBe('base64');
    expect(new TextDecoder().decode(n!.payload)).toBe('null');
  });

  it('unknown task -> 404 not_found from the node', async () => {
    const { app } = makeHarness();
    const res = await call(app, 'POST', '/v1/jobs', { task: 'missing' });
    expect(res.status).toBe(404);
    expect(res.json.code).toBe('not_found');
  });

  it('batch: per-item statuses, Idempotency-Key derives per-item ids, retried batch answers 200s', async () => {
    const { app } = makeHarness();
    const body = { jobs: [{ callback: cb }, { callback: cb, payload: 1 }] };
    const first = await call(app, 'POST', '/v1/jobs:batch', body, { 'Idempotency-Key': 'k' });
    expect(first.json.results.map((r: { status: number }) => r.status)).toEqual([201, 201]);
    const ids = first.json.results.map((r: { id: string }) => r.id);
    expect(ids[0]).toBe('ik-' + createHash('sha256').update('k#0').digest('hex').slice(0, 32));
    expect(ids[1]).not.toBe(ids[0]);
    const again = await call(app, 'POST', '/v1/jobs:batch', body, { 'Idempotency-Key': 'k' });
    expect(again.json.results).toEqual([
      { id: ids[0], status: 200 },
      { id: ids[1], status: 200 },
    ]);
  });

  it('batch: a node-side failure of one item (409) leaves the others', async () => {
    const { app } = makeHarness();
    await call(app, 'POST', '/v1/jobs', { id: 'x', callback: cb });
    const res = await call(app, 'POST', '/v1/jobs:batch', { jobs: [{ id: 'x', callback: cb, payload: 1 }, { id: 'y', callback: cb }] });
    expect(res.json.results[0]).toMatchObject({ id: 'x', status: 409, error: { code: 'conflict', status: 409 } });
    expect(res.json.results[1]).toEqual({ id: 'y', status: 201 });
  });

  it('batch: a node-side error names its field under jobs[i], like validation errors', async () => {
    const { app } = makeHarness();
    const res = await call(app, 'POST', '/v1/jobs:batch', { jobs: [{ callback: cb }, { id: 'z', task: 'missing' }, { task: 'a/b' }] });
    expect(res.json.results[1]).toMatchObject({ id: 'z', status: 404, error: { code: 'not_found', errors: [{ field: 'jobs[1].task' }] } });
    expect(res.json.results[2]).toMatchObject({ id: null, status: 400, error: { errors: [{ field: 'jobs[2].task' }] } });
    const alone = await call(app, 'POST', '/v1/jobs', { task: 'missing' });
    expect(alone.json.errors).toEqual([{ field: 'task', message: 'not found' }]);
  });

  it('get, list with filter and cursor, actions, DELETE = cancel, PATCH', async () => {
    const { app } = makeHarness();
    for (const id of ['a', 'b', 'c']) await call(app, 'POST', '/v1/jobs', { id, callback: cb });
    expect((await call(app, 'GET', '/v1/jobs/a')).json.id).toBe('a');
    const page1 = await call(app, 'GET', '/v1/jobs?limit=2');
    expect(page1.json.jobs.map((j: { id: string }) => j.id)).toEqual(['a', 'b']);
    const page2 = await call(app, 'GET', `/v1/jobs?limit=2&cursor=${page1.json.next_cursor}`);
    expect(page2.json).toMatchObject({ jobs: [{ id: 'c' }], next_cursor: null });
    expect((await call(app, 'POST', '/v1/jobs/a/pause')).json.state).toBe('PAUSED');
    expect((await call(app, 'GET', '/v1/jobs?state=paused')).json.jobs.map((j: { id: string }) => j.id)).toEqual(['a']);
    expect((await call(app, 'POST', '/v1/jobs/a/resume')).json.state).toBe('PENDING');
    expect((await call(app, 'POST', '/v1/jobs/a/run')).json.runs).toBe(1);
    expect((await call(app, 'POST', '/v1/jobs/b/cancel')).json.state).toBe('CANCELLED');
    const deleted = await call(app, 'DELETE', '/v1/jobs/c');
    expect([deleted.status, deleted.json.state]).toEqual([200, 'CANCELLED']);
    const patched = await call(app, 'PATCH', '/v1/jobs/a', { schedule: { every_ms: 1000 }, metadata: { k: 'v' }, payload_base64: 'AA==' });
    expect(patched.json).toMatchObject({ schedule: { every_ms: 1000 }, metadata: { k: 'v' }, payload_base64: 'AA==' });
    expect((await call(app, 'GET', '/v1/jobs/zzz')).status).toBe(404);
  });

  it('executions list with next_cursor', async () => {
    const { app, api } = makeHarness();
    await call(app, 'POST', '/v1/jobs', { id: 'e', callback: cb });
    api.executions.set('e', [1, 2, 3].map((k) => ({
      jobId: 'e', scheduledAtMs: now + k, attempt: 1, state: 'SUCCEEDED' as const, startedAtMs: now + k + 2,
      finishedAtMs: now + k + 9, statusCode: 200, error: null, latenessMs: 2, nodeId: 'n1', retryAtMs: null,
    })));
    const res = await call(app, 'GET', '/v1/jobs/e/executions?limit=2');
    expect(res.json.executions.map((e: { id: string }) => e.id)).toEqual([`e:${now + 1}`, `e:${now + 2}`]);
    expect(res.json.next_cursor).toBe('2');
  });

  it('preview renders occurrences as RFC 3339', async () => {
    const { app } = makeHarness();
    const res = await call(app, 'POST', '/v1/schedules:preview', { schedule: { every_ms: 1500 }, count: 3 });
    expect(res.json).toEqual({ occurrences: ['2026-12-01T09:00:00.000Z', '2026-12-01T09:00:01.500Z', '2026-12-01T09:00:03.000Z'] });
    const cron = await call(app, 'POST', '/v1/schedules:preview', {
      schedule: { cron: '30 2 * * *', timezone: 'America/New_York' }, from: '2027-03-13T00:00:00Z', count: 2,
    });
    expect(cron.json.occurrences).toEqual(['2027-03-13T07:30:00.000Z', '2027-03-14T07:30:00.000Z']);
    const empty = await call(app, 'POST', '/v1/schedules:preview');
    expect(empty.json.occurrences).toEqual(['2026-12-01T09:00:00.000Z']);
  });

  it('preview ends at 9999-12-31: later times have no RFC 3339 form', async () => {
    const { app } = makeHarness();
    const from = '9999-12-31T23:58:00Z';
    const cron = await call(app, 'POST', '/v1/schedules:preview', { schedule: { cron: '* * * * *' }, from, count: 5 });
    expect(cron.json.occurrences).toEqual(['9999-12-31T23:58:00.000Z', '9999-12-31T23:59:00.000Z']);
    const every = await call(app, 'POST', '/v1/schedules:preview', { schedule: { every_ms: 86_400_000 }, from, count: 3 });
    expect(every.json.occurrences).toEqual(['9999-12-31T23:58:00.000Z']);
  });
});

describe('tasks', () => {
  it('PUT 201 then 200, GET redacts the secret, list, DELETE 204 then 404', async () => {
    const { app } = makeHarness();
    const body = { url: 'https://example.com/email', signing_secret: 's3cret-s3cret-s3cret', retry: { max_attempts: 3 } };
    const created = await call(app, 'PUT', '/v1/tasks/send-email', body);
    expect(created.status).toBe(201);
    expect(created.json).toMatchObject({ name: 'send-email', signing_secret: '***', retry: { max_attempts: 3, multiplier: 2 } });
    expect(JSON.stringify(created.json)).not.toContain('s3cret-s3cret-s3cret');
    expect((await call(app, 'PUT', '/v1/tasks/send-email', body)).status).toBe(200);
    expect((await call(app, 'GET', '/v1/tasks/send-email')).json.signing_secret).toBe('***');
    expect((await call(app, 'GET', '/v1/tasks')).json.tasks.map((t: { name: string }) => t.name)).toEqual(['send-email']);
    const job = await call(app, 'POST', '/v1/jobs', { task: 'send-email' });
    expect([job.status, job.json.task]).toEqual([201, 'send-email']);
    const del = await call(app, 'DELETE', '/v1/tasks/send-email');
    expect([del.status, del.json, del.headers['content-type']]).toEqual([204, null, undefined]);
    expect((await call(app, 'GET', '/v1/tasks/send-email')).status).toBe(404);
  });
});

describe('cluster and operations', () => {
  it('GET /v1/cluster renders snake_case', async () => {
    const { app } = makeHarness();
    expect((await call(app, 'GET', '/v1/cluster')).json).toEqual({
      node_id: 'n1',
      nodes: [{ id: 'n1', peer_addr: '127.0.0.1:9001', api_addr: '127.0.0.1:8001', reachable: true }],
      shards: [{ id: 0, leader: 'n1', term: 3, commit_index: 42, applied_index: 41, members: ['n1'], learners: [] }],
    });
  });

  it('GET /v1/cluster marks learners per shard', async () => {
    const h = makeHarness();
    const base = await h.api.cluster();
    const withLearner = Object.assign(h.api, {
      cluster: async () => ({ ...base, shards: [{ ...base.shards[0]!, members: ['n1', 'n4'], learners: ['n4'] }] }),
    });
    const res = await call(makeHarness({ api: withLearner }).app, 'GET', '/v1/cluster');
    expect(res.json.shards[0]).toMatchObject({ members: ['n1', 'n4'], learners: ['n4'] });
  });

  it('POST /v1/cluster/nodes: 503 when unsupported, 400 on a bad body, 201 with the membership after', async () => {
    const h = makeHarness();
    const unsupported = await call(h.app, 'POST', '/v1/cluster/nodes', { id: 'n4', peer_addr: '127.0.0.1:7950' });
    expect([unsupported.status, unsupported.json.code]).toEqual([503, 'unavailable']);
    const calls: string[] = [];
    const shardsAfter = [{ id: 0, voters: ['n1', 'n4'], learners: [] }];
    const api = Object.assign(h.api, {
      addNode: async (id: string, peerAddr: string) => {
        calls.push(`add ${id} ${peerAddr}`);
        if (id === 'n2') throw new PunctualError('conflict', 'n2 is already a member (a voter of every shard)');
        if (id === 'n5') throw new PunctualError('timeout', 'n5 did not catch up with shard 0 within 30000 ms');
        return { id, peerAddr, shards: shardsAfter };
      },
      removeNode: async (id: string) => {
        calls.push(`remove ${id}`);
        if (id === 'n9') throw new PunctualError('not_found', 'node "n9" is not a member');
        return { id, peerAddr: '127.0.0.1:7950', shards: [{ id: 0, voters: ['n1'], learners: [] }] };
      },
    });
    const { app } = makeHarness({ api });
    const ok = await call(app, 'POST', '/v1/cluster/nodes', { id: 'n4', peer_addr: '127.0.0.1:7950' });
    expect([ok.status, ok.json]).toEqual([201, { id: 'n4', peer_addr: '127.0.0.1:7950', shards: [{ id: 0, voters: ['n1', 'n4'], learners: [] }] }]);
    for (const [body, field] of [
      [{ peer_addr: '127.0.0.1:7950' }, 'id'],
      [{ id: 'N4', peer_addr: '127.0.0.1:7950' }, 'id'],
      [{ id: 'n4' }, 'peer_addr'],
      [{ id: 'n4', peer_addr: 'x:1', extra: 1 }, 'extra'],
    ] as const) {
      const bad = await call(app, 'POST', '/v1/cluster/nodes', body);
      expect([bad.status, bad.headers['content-type'], bad.json.code]).toEqual([400, 'application/problem+json', 'invalid_argument']);
      expect(bad.json.errors.map((e: { field: string }) => e.field)).toContain(field);
    }
    const dup = await call(app, 'POST', '/v1/cluster/nodes', { id: 'n2', peer_addr: '127.0.0.1:7951' });
    expect([dup.status, dup.json.code, dup.json.detail]).toEqual([409, 'conflict', 'n2 is already a member (a voter of every shard)']);
    const late = await call(app, 'POST', '/v1/cluster/nodes', { id: 'n5', peer_addr: '127.0.0.1:7952' });
    expect([late.status, late.json.code]).toEqual([504, 'timeout']);
    expect(calls).toEqual(['add n4 127.0.0.1:7950', 'add n2 127.0.0.1:7951', 'add n5 127.0.0.1:7952']);

    const gone = await call(app, 'DELETE', '/v1/cluster/nodes/n4');
    expect([gone.status, gone.json]).toEqual([200, { id: 'n4', peer_addr: '127.0.0.1:7950', shards: [{ id: 0, voters: ['n1'], learners: [] }] }]);
    expect((await call(app, 'DELETE', '/v1/cluster/nodes/n9')).status).toBe(404);
    expect((await call(app, 'DELETE', '/v1/cluster/nodes/BAD')).json.code).toBe('invalid_argument');
    expect(calls.slice(3)).toEqual(['remove n4', 'remove n9']);
  });

  it('transfer-leader: 503 unavailable when the node cannot, 202 when it can', async () => {
    const h = makeHarness();
    const res = await call(h.app, 'POST', '/v1/cluster/shards/3/transfer-leader', { to: 'n2' });
    expect([res.status, res.json.code]).toEqual([503, 'unavailable']);
    const calls: Array<[number, string]> = [];
    const withTransfer = Object.assign(h.api, { transferLeader: async (shard: number, to: string) => void calls.push([shard, to]) });
    const h2 = makeHarness({ api: withTransfer });
    const ok = await call(h2.app, 'POST', '/v1/cluster/shards/3/transfer-leader', { to: 'n2' });
    expect([ok.status, ok.json]).toEqual([202, { shard: 3, to: 'n2' }]);
    expect(calls).toEqual([[3, 'n2']]);
  });

  it('healthz 200; readyz 200 when ready, 503 problem with the reason when not', async () => {
    const { app, api } = makeHarness();
    expect((await call(app, 'GET', '/healthz')).status).toBe(200);
    expect((await call(app, 'GET', '/readyz')).json).toEqual({ ready: true });
    api.ready = { ready: false, reason: 'shard 2 has no leader' };
    const res = await call(app, 'GET', '/readyz');
    expect([res.status, res.json.code, res.headers['content-type']]).toEqual([503, 'unavailable', 'application/problem+json']);
    expect(res.json.detail).toContain('shard 2 has no leader');
  });

  it('metrics: Prometheus text with its content type', async () => {
    const { app } = makeHarness();
    const res = await call(app, 'GET', '/metrics');
    expect([res.status, res.headers['content-type'], res.json]).toEqual([200, 'text/plain; version=0.0.4', 'punctual_up 1\n']);
  });
});

describe('routing and errors', () => {
  it('unknown route -> 404 not_found; trailing slash is a different route', async () => {
    const { app } = makeHarness();
    for (const path of ['/v2/jobs', '/v1/jobs/a/b/c', '/v1/jobs/', '/']) {
      const res = await call(app, 'GET', path);
      expect([res.status, res.json.code]).toEqual([404, 'not_found']);
    }
  });

  it('wrong method -> 405 method_not_allowed with Allow', async () => {
    const { app } = makeHarness();
    const res = await call(app, 'PUT', '/v1/jobs');
    expect([res.status, res.json.code]).toEqual([405, 'method_not_allowed']);
    expect(res.headers.allow).toBe('POST, GET, HEAD');
    expect((await call(app, 'GET', '/v1/jobs:batch')).status).toBe(405);
  });

  it('percent-encoded ids and the batch path decode', async () => {
    const { app } = makeHarness();
    await call(app, 'POST', '/v1/jobs', { id: 'a:b', callback: cb });
    expect((await call(app, 'GET', '/v1/jobs/a%3Ab')).json.id).toBe('a:b');
    expect((await call(app, 'POST', '/v1/jobs%3Abatch', { jobs: [] })).json).toEqual({ results: [] });
    expect(app.bodyLimitFor('POST', '/v1/jobs%3Abatch')).toBe(limits.batchBodyBytesMax);
    expect(app.bodyLimitFor('POST', '/v1/jobs')).toBe(limits.requestBodyBytesMax);
  });

  it('node errors map through toProblem; anything else is a logged 500 without the stack', async () => {
    const h = makeHarness();
    h.api.getJob = async () => {
      throw new PunctualError('unavailable', 'shard 4 has no leader');
    };
    const res = await call(h.app, 'GET', '/v1/jobs/x');
    expect([res.status, res.json.code, res.json.detail]).toEqual([503, 'unavailable', 'shard 4 has no leader']);
    h.api.listTasks = async () => {
      throw new Error('disk on fire at /secret/path');
    };
    const boom = await call(h.app, 'GET', '/v1/tasks');
    expect([boom.status, boom.json.code, boom.json.detail]).toEqual([500, 'internal', 'internal error']);
    expect(JSON.stringify(boom.json)).not.toContain('secret');
    expect(h.logs.some((l) => l.includes('disk on fire'))).toBe(true);
  });
});

describe('auth', () => {
  const token = 'tok-123';
  const cases: Array<[string, string, Record<string, string>, number]> = [
    ['missing header', '/v1/jobs', {}, 401],
    ['wrong token', '/v1/jobs', { authorization: 'Bearer tok-124' }, 401],
    ['token prefix', '/v1/jobs', { authorization: 'Bearer tok-12' }, 401],
    ['wrong scheme', '/v1/jobs', { authorization: `Basic ${token}` }, 401],
    ['right token', '/v1/jobs', { authorization: `Bearer ${token}` }, 200],
    ['scheme is case-insensitive', '/v1/jobs', { authorization: `bearer ${token}` }, 200],
    ['unknown /v1 route still needs auth', '/v1/nope', {}, 401],
    ['healthz is open', '/healthz', {}, 200],
    ['readyz is open', '/readyz', {}, 200],
    ['metrics open without --metrics-auth', '/metrics', {}, 200],
  ];
  it.each(cases)('%s -> %s', async (_name, path, headers, status) => {
    const { app } = makeHarness({ authToken: token });
    const res = await call(app, 'GET', path, undefined, headers);
    expect(res.status).toBe(status);
    if (status === 401) {
      expect(res.json.code).toBe('unauthorized');
      expect(res.headers['www-authenticate']).toBe('Bearer');
      expect(res.headers['content-type']).toBe('application/problem+json');
    }
  });

  it('metrics need the token with --metrics-auth', async () => {
    const { app } = makeHarness({ authToken: token, metricsAuth: true });
    expect((await call(app, 'GET', '/metrics')).status).toBe(401);
    expect((await call(app, 'GET', '/metrics', undefined, { authorization: `Bearer ${token}` })).status).toBe(200);
  });

  it('no token configured: /v1 is open', async () => {
    const { app } = makeHarness({ authToken: null });
    expect((await call(app, 'GET', '/v1/jobs')).status).toBe(200);
  });
});
