/**
 * docs/api.md read as a user would, against a real node over real sockets (SQLite in a temp dir, a real callback
 * receiver): the statements an audit of the contract found the node breaking, one test each.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../core/log.js';
import { startNode, type NodeHandle } from '../node/node.js';
import { apiCall, nodeConfig } from '../node/testing/fixtures.js';
import { startReceiver, type Receiver } from '../node/testing/receiver.js';

let dir: string;
let node: NodeHandle;
let rx: Receiver;

const call = (path: string, method = 'GET', body?: unknown) => apiCall(node.apiPort, path, { method, body });

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-contract-'));
  rx = await startReceiver();
  node = await startNode(nodeConfig(dir), { logger: silentLogger });
  expect((await call('/v1/tasks/hook', 'PUT', { url: rx.url('/hook') })).status).toBe(201);
});

afterAll(async () => {
  await node?.close();
  await rx?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('PATCH /v1/jobs/{id}', () => {
  it('"schedule": null is absent (Conventions): the schedule stays, the job is not rescheduled to now', async () => {
    const created = await call('/v1/jobs', 'POST', { id: 'patch-null', task: 'hook', schedule: { at: '2031-06-01T00:00:00Z' } });
    expect(created.status).toBe(201);
    const patched = await call('/v1/jobs/patch-null', 'PATCH', { schedule: null, metadata: { k: 'v' } });
    expect(patched.status).toBe(200);
    expect(patched.json.schedule).toEqual({ at: '2031-06-01T00:00:00.000Z' });
    expect(patched.json.next_fire_at).toBe('2031-06-01T00:00:00.000Z');
    expect(patched.json.state).toBe('PENDING');
    expect(patched.json.metadata).toEqual({ k: 'v' });
  });
});

describe('PUT /v1/calendars/{name}', () => {
  it('one 400 names every bad field: a range out of order beside a malformed one', async () => {
    const res = await call('/v1/calendars/every-field', 'PUT', {
      ranges: [
        { from: '2027-12-31', to: '2027-12-01' },
        { from: '2027-01-01' },
      ],
    });
    expect(res.status).toBe(400);
    expect(res.json.code).toBe('invalid_argument');
    expect(res.json.errors.map((e: { field: string }) => e.field).sort()).toEqual(['ranges[0].to', 'ranges[1].to']);
    expect((await call('/v1/calendars/every-field')).status).toBe(404);
  });
});

describe('POST /v1/jobs: one 400 lists every bad field of the body', () => {
  const fields = (res: { json: { errors: Array<{ field: string }> } }) => res.json.errors.map((e) => e.field).sort();

  it('a bad cron beside an unknown time zone: both named, nothing stored', async () => {
    const res = await call('/v1/jobs', 'POST', { id: 'bad-cron-zone', task: 'hook', schedule: { cron: 'bogus', timezone: 'Mars/Base' } });
    expect(res.status).toBe(400);
    expect(fields(res)).toEqual(['schedule.cron', 'schedule.timezone']);
    expect((await call('/v1/jobs/bad-cron-zone')).status).toBe(404);
  });

  it('a bad cron beside a bad start_at: both named', async () => {
    const res = await call('/v1/schedules:preview', 'POST', { schedule: { cron: '0 0 30 2 *', start_at: 'tomorrow' } });
    expect(res.status).toBe(400);
    expect(fields(res)).toEqual(['schedule.cron', 'schedule.start_at']);
  });
});

describe('integer query parameters', () => {
  it('a negative limit or seconds is out of range, said so (it is an integer)', async () => {
    for (const path of ['/v1/jobs?limit=-1', '/v1/dead-letters?limit=-5', '/v1/due-profile?seconds=-1']) {
      const res = await call(path);
      expect(res.status, path).toBe(400);
      expect(res.json.errors[0].message, path).toMatch(/^must be between /);
    }
    expect((await call('/v1/jobs?limit=1.5')).json.errors[0].message).toBe('must be an integer');
  });
});

describe('ids and names a URL cannot address', () => {
  it('a job id, task or calendar name of . or .. is refused when created (fetch would remove it from the path)', async () => {
    for (const id of ['.', '..']) {
      const job = await call('/v1/jobs', 'POST', { id, task: 'hook', schedule: { at: '2031-06-01T00:00:00Z' } });
      expect([job.status, job.json.errors?.[0]?.field], id).toEqual([400, 'id']);
      const batch = await call('/v1/jobs:batch', 'POST', { jobs: [{ id, task: 'hook', schedule: { at: '2031-06-01T00:00:00Z' } }] });
      expect([batch.json.results[0].status, batch.json.results[0].error.errors[0].field], id).toEqual([400, 'jobs[0].id']);
      // the raw path as a client that keeps dot segments sends it (fetch could not)
      for (const path of [`/v1/tasks/${id === '.' ? '%2E' : '%2E%2E'}`, `/v1/calendars/${id === '.' ? '%2E' : '%2E%2E'}`]) {
        const put = await rawPut(path, path.includes('tasks') ? { url: rx.url('/hook') } : {});
        expect([put.status, put.json.errors?.[0]?.field], path).toEqual([400, 'name']);
      }
    }
    // ids with dots inside stay valid
    expect((await call('/v1/jobs', 'POST', { id: 'a..b', task: 'hook', schedule: { at: '2031-06-01T00:00:00Z' } })).status).toBe(201);
  });
});

/** A PUT whose path is sent as written (node:http does not normalize dot segments as fetch does). */
async function rawPut(path: string, body: unknown): Promise<{ status: number; json: any }> {
  const { request } = await import('node:http');
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: node.apiPort, method: 'PUT', path, headers: { 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) }));
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

describe('numbers a double cannot hold (JSON.parse reads them as Infinity, which would be stored as null)', () => {
  const post = async (path: string, method: string, text: string) => {
    const res = await fetch(`http://127.0.0.1:${node.apiPort}${path}`, { method, headers: { 'content-type': 'application/json' }, body: text });
    return { status: res.status, json: (await res.json()) as any };
  };

  it('in payload or metadata: a 400 naming the number, nothing stored or changed', async () => {
    const at = '"schedule": {"at": "2031-06-01T00:00:00Z"}';
    const payload = await post('/v1/jobs', 'POST', `{"id": "huge-1", "task": "hook", ${at}, "payload": {"x": [1, 1e400]}}`);
    expect([payload.status, payload.json.errors]).toEqual([400, [{ field: 'payload.x[1]', message: expect.stringMatching(/beyond the range of a double/) }]]);
    expect((await call('/v1/jobs/huge-1')).status).toBe(404);
    const metadata = await post('/v1/jobs', 'POST', `{"id": "huge-2", "task": "hook", ${at}, "metadata": {"n": -1e999}}`);
    expect([metadata.status, metadata.json.errors[0].field]).toEqual([400, 'metadata.n']);
    expect((await call('/v1/jobs', 'POST', { id: 'huge-3', task: 'hook', schedule: { at: '2031-06-01T00:00:00Z' }, payload: { x: 1 } })).status).toBe(201);
    const patch = await post('/v1/jobs/huge-3', 'PATCH', '{"payload": 1e400}');
    expect([patch.status, patch.json.errors[0].field]).toEqual([400, 'payload']);
    expect((await call('/v1/jobs/huge-3')).json.payload).toEqual({ x: 1 });
  });
});
