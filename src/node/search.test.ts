/**
 * GET /v1/jobs search on a real node over real sockets (SQLite in a temp dir): metadata filters (AND), next fire
 * time ranges, combined with state, task and paging across shards; bad filters are a 400 naming the parameter.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../core/log.js';
import { startNode, type NodeHandle } from './node.js';
import { nodeConfig } from './testing/fixtures.js';

let dir: string;
let node: NodeHandle;

async function call(path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`http://127.0.0.1:${node.apiPort}${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

/** Every id of a listing, following cursors (pages of `limit`). */
async function ids(query: string, limit = 2): Promise<string[]> {
  const out: string[] = [];
  let cursor: string | null = null;
  do {
    const page = await call(`/v1/jobs?${query}&limit=${limit}${cursor === null ? '' : `&cursor=${cursor}`}`);
    expect(page.status).toBe(200);
    out.push(...page.json.jobs.map((j: { id: string }) => j.id));
    cursor = page.json.next_cursor;
  } while (cursor !== null);
  return out;
}

const day = 24 * 60 * 60 * 1000;
const t0 = Date.parse('2030-01-01T00:00:00Z');

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-search-'));
  node = await startNode(nodeConfig(dir), { logger: silentLogger });
  const put = await fetch(`http://127.0.0.1:${node.apiPort}/v1/tasks/hook`, { method: 'PUT', body: JSON.stringify({ url: 'http://127.0.0.1:9/hook' }) });
  expect(put.status).toBe(201);
  const jobs = [];
  for (let i = 0; i < 12; i++) {
    jobs.push({
      id: `job-${String(i).padStart(2, '0')}`,
      task: 'hook',
      schedule: { at: new Date(t0 + i * day).toISOString() },
      metadata: { team: i % 3 === 0 ? 'growth' : 'core', tier: i % 2, note: { nested: 'growth' } },
    });
  }
  const batch = await call('/v1/jobs:batch', { jobs });
  expect(batch.status).toBe(200);
  expect((await call('/v1/jobs/job-03/pause', {})).status).toBe(200);
});

afterAll(async () => {
  await node?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('GET /v1/jobs search', () => {
  it('by metadata: one pair, pairs with AND (numbers by their JSON text), paged across shards', async () => {
    expect(await ids('metadata.team=growth')).toEqual(['job-00', 'job-03', 'job-06', 'job-09']);
    expect(await ids('metadata.team=growth&metadata.tier=1')).toEqual(['job-03', 'job-09']);
    expect(await ids('metadata.note=growth')).toEqual([]);
    expect(await ids('metadata.team=nobody')).toEqual([]);
  });

  it('by next fire time: [next_fire_after, next_fire_before), combined with metadata, state and task', async () => {
    const at = (i: number) => encodeURIComponent(new Date(t0 + i * day).toISOString());
    expect(await ids(`next_fire_after=${at(9)}`)).toEqual(['job-09', 'job-10', 'job-11']);
    expect(await ids(`next_fire_before=${at(2)}`)).toEqual(['job-00', 'job-01']);
    expect(await ids(`next_fire_after=${at(2)}&next_fire_before=${at(7)}&metadata.team=core`)).toEqual(['job-02', 'job-04', 'job-05']);
    expect(await ids('metadata.team=growth&state=paused')).toEqual(['job-03']);
    expect(await ids('metadata.team=growth&state=pending&task=hook')).toEqual(['job-00', 'job-06', 'job-09']);
  });

  it('refuses bad filters with a 400 naming the parameter', async () => {
    const long = 'x'.repeat(257);
    const cases: Array<[string, string]> = [
      [`metadata.team=${long}`, 'metadata.team'],
      ['metadata.=x', 'metadata.'],
      ['metadata.a=1&metadata.b=2&metadata.c=3&metadata.d=4&metadata.e=5', 'metadata'],
      ['metadata.a=1&metadata.a=2', 'metadata.a'],
      ['next_fire_after=yesterday', 'next_fire_after'],
      ['next_fire_after=2030-01-02T00:00:00Z&next_fire_before=2030-01-01T00:00:00Z', 'next_fire_before'],
      ['meta.team=x', 'meta.team'],
    ];
    for (const [query, field] of cases) {
      const res = await call(`/v1/jobs?${query}`);
      expect(res.status, query).toBe(400);
      expect(res.json.code).toBe('invalid_argument');
      expect(res.json.errors.map((e: { field: string }) => e.field), query).toContain(field);
    }
  });
});
