/**
 * startNode end to end over real sockets: the real HTTP app on 127.0.0.1 (port 0), a temp data dir, and a real
 * callback receiver. Proves the wiring of NodeHandle (api, metrics, close) the CLI relies on.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../core/log.js';
import type { NodeConfig } from './api.js';
import { startNode, type NodeHandle } from './node.js';
import { nodeConfig, apiCall } from './testing/fixtures.js';
import { startReceiver, waitFor, type Receiver } from './testing/receiver.js';

let dir: string;
let rx: Receiver;
let node: NodeHandle | null = null;

async function boot(over: Partial<NodeConfig> = {}): Promise<NodeHandle> {
  node = await startNode(nodeConfig(dir, over), { logger: silentLogger });
  return node;
}

function call(path: string, init: { method?: string; body?: unknown; token?: string } = {}): ReturnType<typeof apiCall> {
  return apiCall(node!.apiPort, path, init);
}

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-serve-'));
  rx = await startReceiver();
});

afterEach(async () => {
  await node?.close();
  node = null;
  await rx.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('startNode', () => {
  it('serves the API: task, delayed job, callback, job view, executions, list, cluster, readiness, metrics', async () => {
    await boot();
    expect((await call('/healthz')).status).toBe(200);
    expect((await call('/readyz')).status).toBe(200);
    const put = await call('/v1/tasks/hook', { method: 'PUT', body: { url: rx.url('/cb'), headers: { 'x-team': 'a' } } });
    expect(put.status).toBe(201);
    const before = Date.now();
    const created = await call('/v1/jobs', { method: 'POST', body: { id: 'http-1', task: 'hook', payload: { hello: 'world' }, schedule: { delay_ms: 120 } } });
    expect(created.status).toBe(201);
    expect(created.json.state).toBe('QUEUED');
    const scheduledAt = Date.parse(created.json.next_fire_at);
    expect(scheduledAt).toBeGreaterThanOrEqual(before + 120);
    await waitFor('callback', () => rx.of('http-1').length === 1);
    const [r] = rx.of('http-1');
    expect(r.body).toBe('{"hello":"world"}');
    expect(r.headers['x-team']).toBe('a');
    expect(r.headers['x-deduplication-key']).toBe(`http-1:${scheduledAt}`);
    expect(r.headers['x-punctual-scheduled-at']).toBe(String(scheduledAt));
    expect(r.atMs).toBeGreaterThanOrEqual(scheduledAt);
    await waitFor('succeeded', async () => (await call('/v1/jobs/http-1')).json.state === 'SUCCEEDED');
    const execs = await call('/v1/jobs/http-1/executions');
    expect(execs.status).toBe(200);
    expect(execs.json.executions).toHaveLength(1);
    expect(execs.json.executions[0]).toMatchObject({ id: `http-1:${scheduledAt}`, attempt: 1, state: 'SUCCEEDED', status_code: 200, node_id: 'n1' });
    const list = await call('/v1/jobs?limit=10');
    expect(list.json.jobs.map((j: { id: string }) => j.id)).toEqual(['http-1']);
    expect(list.json.next_cursor).toBeNull();
    const cluster = await call('/v1/cluster');
    expect(cluster.json.node_id).toBe('n1');
    expect(cluster.json.nodes[0].api_addr).toBe(`127.0.0.1:${node!.apiPort}`);
    expect(cluster.json.shards).toHaveLength(4);
    const metrics = await call('/metrics');
    expect(metrics.status).toBe(200);
    expect(metrics.text).toContain('punctual_callbacks_total{outcome="succeeded"} 1');
    expect(metrics.text).toContain('punctual_jobs{state="SUCCEEDED"} 1');
    expect((await node!.metrics()).body).toContain('punctual_jobs_submitted_total 1');
  });

  it('requires the auth token on /v1 when configured', async () => {
    await boot({ authToken: 'secret-token' });
    expect((await call('/v1/tasks')).status).toBe(401);
    expect((await call('/v1/tasks', { token: 'secret-token' })).status).toBe(200);
    expect((await call('/metrics')).status).toBe(200);
  });

  it('close stops the listener and keeps the data', async () => {
    const first = await boot();
    const port = first.apiPort;
    expect((await call('/v1/tasks/hook', { method: 'PUT', body: { url: rx.url('/cb') } })).status).toBe(201);
    await first.close();
    node = null;
    await expect(fetch(`http://127.0.0.1:${port}/healthz`)).rejects.toThrow();
    await boot();
    expect((await call('/v1/tasks/hook')).json.url).toBe(rx.url('/cb'));
  });

  it('fails to start on a port in use and leaves the data directory reusable', async () => {
    const first = await boot();
    await expect(startNode(nodeConfig(join(dir, 'other'), { listenPort: first.apiPort }), { logger: silentLogger })).rejects.toThrow();
    const again = await startNode(nodeConfig(join(dir, 'other')), { logger: silentLogger });
    await again.close();
  });
});
