/**
 * payload_ref on a real node over real sockets: a real blob server serves the payloads, a real receiver gets the
 * callbacks. The body and its content type arrive as fetched; a failed fetch is retried; a sha256 mismatch and a
 * body over --payload-ref-max-bytes fail at once; jobs sharing a reference fetch it once; bad references are 400.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../core/log.js';
import { startNode, type NodeHandle } from './node.js';
import { nodeConfig } from './testing/fixtures.js';
import { startReceiver, waitFor, type Receiver } from './testing/receiver.js';

let dir: string;
let node: NodeHandle;
let rx: Receiver;
let blobs: Server;
/** path -> what the blob server answers: statuses to give first (then 200), body, content type. */
const served = new Map<string, { failFirst: number[]; body: Buffer; type: string }>();
const hits = new Map<string, number>();

const bytesMax = 4096;
const big = Buffer.alloc(bytesMax + 1, 'x');
const doc = Buffer.from('{"report":"Grüße","rows":[1,2,3]}');
const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
const blobUrl = (path: string): string => `http://127.0.0.1:${(blobs.address() as AddressInfo).port}${path}`;

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`http://127.0.0.1:${node.apiPort}${path}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

async function finalJob(id: string): Promise<any> {
  let job: any = null;
  await waitFor(`job ${id} final`, async () => {
    job = (await call('GET', `/v1/jobs/${id}`)).json;
    return job.state === 'SUCCEEDED' || job.state === 'FAILED';
  }, 10_000);
  return job;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-payload-ref-'));
  rx = await startReceiver();
  blobs = createServer((req, res) => {
    const path = req.url ?? '/';
    const n = (hits.get(path) ?? 0) + 1;
    hits.set(path, n);
    const blob = served.get(path);
    if (blob === undefined) return void res.writeHead(404).end();
    const status = blob.failFirst[n - 1] ?? 200;
    res.writeHead(status, { 'content-type': blob.type });
    res.end(status === 200 ? blob.body : 'not now');
  });
  await new Promise<void>((resolve) => blobs.listen(0, '127.0.0.1', resolve));
  node = await startNode(nodeConfig(dir, { payloadRefBytesMax: bytesMax }), { logger: silentLogger });
  const task = {
    url: rx.url('/cb'),
    headers: { 'content-type': 'application/json' },
    retry: { max_attempts: 3, initial_backoff_ms: 10, max_backoff_ms: 20, multiplier: 1, jitter: false },
  };
  expect((await call('PUT', '/v1/tasks/hook', task)).status).toBe(201);
});

afterAll(async () => {
  await node?.close();
  await rx?.close();
  await new Promise<void>((resolve) => (blobs ? blobs.close(() => resolve()) : resolve()));
  rmSync(dir, { recursive: true, force: true });
});

describe('payload_ref', () => {
  it('sends the fetched body with the reference content type, and GET shows the reference', async () => {
    served.set('/doc', { failFirst: [], body: doc, type: 'text/plain' });
    const ref = { url: blobUrl('/doc'), sha256: sha(doc).toUpperCase(), content_type: 'application/vnd.report+json' };
    const created = await call('POST', '/v1/jobs', { id: 'ref-1', task: 'hook', payload_ref: ref });
    expect(created.status).toBe(201);
    expect(created.json.payload_ref).toEqual({ url: ref.url, sha256: sha(doc), content_type: ref.content_type });
    expect(created.json.payload).toBeUndefined();
    expect((await finalJob('ref-1')).state).toBe('SUCCEEDED');
    const [got] = rx.of('ref-1');
    expect(got.body).toBe(doc.toString('utf8'));
    expect(got.headers['content-type']).toBe('application/vnd.report+json');
  });

  it("without content_type the blob server's type is sent; a failed fetch is retried (the receiver sees attempt 2 only)", async () => {
    served.set('/flaky', { failFirst: [503], body: doc, type: 'text/csv' });
    expect((await call('POST', '/v1/jobs', { id: 'ref-2', task: 'hook', payload_ref: { url: blobUrl('/flaky') } })).status).toBe(201);
    const job = await finalJob('ref-2');
    expect(job.state).toBe('SUCCEEDED');
    expect(job.last_execution.attempt).toBe(2);
    const got = rx.of('ref-2');
    expect(got.map((r) => r.headers['x-punctual-attempt'])).toEqual(['2']);
    expect(got[0].headers['content-type']).toBe('text/csv');
    expect(hits.get('/flaky')).toBe(2);
  });

  it('a fetch that keeps failing exhausts the retries with a clear error', async () => {
    expect((await call('POST', '/v1/jobs', { id: 'ref-3', task: 'hook', payload_ref: { url: blobUrl('/missing') } })).status).toBe(201);
    const job = await finalJob('ref-3');
    expect(job.state).toBe('FAILED');
    expect(job.last_execution.attempt).toBe(3);
    expect(job.last_execution.error).toBe('payload_ref fetch: HTTP 404');
    expect(rx.of('ref-3')).toEqual([]);
  });

  it('a sha256 mismatch and a body over --payload-ref-max-bytes fail at once, nothing sent', async () => {
    served.set('/big', { failFirst: [], body: big, type: 'application/octet-stream' });
    const wrong = sha(Buffer.from('something else'));
    expect((await call('POST', '/v1/jobs', { id: 'ref-4', task: 'hook', payload_ref: { url: blobUrl('/doc'), sha256: wrong } })).status).toBe(201);
    expect((await call('POST', '/v1/jobs', { id: 'ref-5', task: 'hook', payload_ref: { url: blobUrl('/big') } })).status).toBe(201);
    const mismatch = await finalJob('ref-4');
    expect(mismatch.state).toBe('FAILED');
    expect(mismatch.last_execution.attempt).toBe(1);
    expect(mismatch.last_execution.error).toContain(`payload_ref sha256 mismatch: expected ${wrong}, fetched ${sha(doc)}`);
    const tooBig = await finalJob('ref-5');
    expect(tooBig.state).toBe('FAILED');
    expect(tooBig.last_execution.attempt).toBe(1);
    expect(tooBig.last_execution.error).toBe(`payload_ref body exceeds ${bytesMax} bytes (--payload-ref-max-bytes)`);
    expect([...rx.of('ref-4'), ...rx.of('ref-5')]).toEqual([]);
  });

  it("follows the callbacks' SSRF rules after DNS: a name resolving to this node's own API is refused for good", async () => {
    const url = `http://localhost:${node.apiPort}/v1/tasks`;
    expect((await call('POST', '/v1/jobs', { id: 'ref-ssrf', task: 'hook', payload_ref: { url } })).status).toBe(201);
    const job = await finalJob('ref-ssrf');
    expect(job.state).toBe('FAILED');
    expect(job.last_execution.attempt).toBe(1);
    expect(job.last_execution.error).toMatch(/^payload_ref fetch: callback target .* refused by policy \(this node's API listener\)/);
    expect(rx.of('ref-ssrf')).toEqual([]);
  });

  it('many jobs sharing one content-addressed reference fetch it once', async () => {
    const shared = Buffer.from('shared body');
    served.set('/shared', { failFirst: [], body: shared, type: 'text/plain' });
    const jobs = Array.from({ length: 20 }, (_, i) => ({ id: `shared-${i}`, task: 'hook', payload_ref: { url: blobUrl('/shared'), sha256: sha(shared) } }));
    expect((await call('POST', '/v1/jobs:batch', { jobs })).status).toBe(200);
    for (const j of jobs) expect((await finalJob(j.id)).state).toBe('SUCCEEDED');
    for (const j of jobs) expect(rx.of(j.id).map((r) => r.body)).toEqual(['shared body']);
    expect(hits.get('/shared')).toBe(1);
  });

  it('PATCH swaps between an inline payload and a reference', async () => {
    const created = await call('POST', '/v1/jobs', { id: 'ref-6', task: 'hook', payload: { a: 1 }, schedule: { delay_ms: 3_600_000 } });
    expect(created.status).toBe(201);
    const toRef = await call('PATCH', '/v1/jobs/ref-6', { payload_ref: { url: blobUrl('/doc') } });
    expect(toRef.status).toBe(200);
    expect(toRef.json.payload_ref.url).toBe(blobUrl('/doc'));
    expect(toRef.json.payload).toBeUndefined();
    const back = await call('PATCH', '/v1/jobs/ref-6', { payload: { b: 2 } });
    expect(back.json.payload).toEqual({ b: 2 });
    expect(back.json.payload_ref).toBeUndefined();
  });

  it('refuses bad references with a 400 on the field', async () => {
    const cases: Array<[unknown, string]> = [
      [{ payload: { a: 1 }, payload_ref: { url: blobUrl('/doc') } }, 'payload_ref'],
      [{ payload_base64: 'AAAA', payload_ref: { url: blobUrl('/doc') } }, 'payload_ref'],
      [{ payload_ref: { url: 'ftp://example.com/x' } }, 'payload_ref.url'],
      [{ payload_ref: { url: 'http://169.254.169.254/latest' } }, 'payload_ref.url'],
      [{ payload_ref: { url: blobUrl('/doc'), sha256: 'abc' } }, 'payload_ref.sha256'],
      [{ payload_ref: { url: blobUrl('/doc'), extra: 1 } }, 'payload_ref.extra'],
      [{ payload_ref: 'http://example.com' }, 'payload_ref'],
    ];
    for (const [extra, field] of cases) {
      const res = await call('POST', '/v1/jobs', { task: 'hook', ...(extra as object) });
      expect(res.status, JSON.stringify(extra)).toBe(400);
      expect(res.json.errors.map((e: { field: string }) => e.field), JSON.stringify(extra)).toContain(field);
    }
    const both = await call('PATCH', '/v1/jobs/ref-6', { payload: 1, payload_ref: { url: blobUrl('/doc') } });
    expect(both.status).toBe(400);
  });
});
