/** Test fixture (not product code): configs and specs for node tests. */
import { createHash } from 'node:crypto';
import type { CallbackSpec, JobSpec, Schedule } from '../../scheduler/types.js';
import type { NodeConfig } from '../api.js';

/** The cluster secret of test nodes (>= 16 bytes): nodes with peers need peer authentication to start. */
export const testClusterSecret = 'punctual-test-cluster-secret';

export function nodeConfig(dataDir: string, over: Partial<NodeConfig> = {}): NodeConfig {
  return {
    listenHost: '127.0.0.1',
    listenPort: 0,
    dataDir,
    nodeId: 'n1',
    peerListenHost: '127.0.0.1',
    peerListenPort: 0,
    peers: [],
    shards: 4,
    authToken: null,
    clusterSecret: testClusterSecret,
    fsync: 'batch',
    logLevel: 'error',
    logFormat: 'json',
    metricsAuth: false,
    clockOffsetMs: 0,
    ...over,
  };
}

export function callbackSpec(url: string, over: Partial<CallbackSpec> = {}): CallbackSpec {
  return {
    url,
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-custom': 'yes' },
    timeoutMs: 2_000,
    retry: { maxAttempts: 3, initialBackoffMs: 20, maxBackoffMs: 100, multiplier: 2, jitter: false },
    signingSecret: null,
    maxConcurrency: 100,
    ...over,
  };
}

/** A job of task `task` (or an inline callback when `callback` is given). */
export function jobSpec(id: string, schedule: Schedule, over: Partial<JobSpec> = {}): JobSpec {
  const payload = new TextEncoder().encode(JSON.stringify({ job: id }));
  return {
    id,
    task: 'hook',
    callback: null,
    payload,
    payloadEncoding: 'json',
    schedule,
    endAtMs: null,
    maxRuns: 0,
    misfire: 'fire_once',
    overlap: 'allow',
    metadata: null,
    requestDigest: createHash('sha256').update(id + JSON.stringify(schedule)).digest('hex'),
    idempotencyKey: null,
    ...over,
  };
}

/** One request to a node's client API on loopback; the body is parsed as JSON when it is JSON. */
export async function apiCall(
  port: number,
  path: string,
  init: { method?: string; body?: unknown; token?: string } = {},
): Promise<{ status: number; json: any; headers: Headers; text: string }> {
  const headers: Record<string, string> = {};
  if (init.body !== undefined) headers['content-type'] = 'application/json';
  if (init.token !== undefined) headers.authorization = `Bearer ${init.token}`;
  const res = await fetch(`http://127.0.0.1:${port}${path}`, {
    method: init.method ?? 'GET',
    headers,
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = null;
  }
  return { status: res.status, json, headers: res.headers, text };
}
