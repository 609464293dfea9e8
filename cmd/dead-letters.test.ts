/**
 * `punctual dead-letters list|groups|replay` and the HTTP routes behind them against a real node (in-process,
 * SQLite in a temp dir, real HTTP) and a real callback receiver; the executions' attempts and a task's
 * retention_ms over HTTP.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../src/core/log.js';
import { startNode, type NodeHandle } from '../src/node/node.js';
import { nodeConfig } from '../src/node/testing/fixtures.js';
import { startReceiver, waitFor, type Receiver } from '../src/node/testing/receiver.js';
import { runCli } from './cli-fixture.js';

let dir: string;
let node: NodeHandle;
let server: string;
let rx: Receiver;
let failing = true;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-cli-dead-letters-'));
  rx = await startReceiver();
  rx.respond = (r) => ({ status: failing ? (r.path === '/gone' ? 404 : 500) : 200 });
  node = await startNode(nodeConfig(join(dir, 'data')), { logger: silentLogger });
  server = `http://127.0.0.1:${node.apiPort}`;
});

afterAll(async () => {
  await node.close();
  await rx.close();
  rmSync(dir, { recursive: true, force: true });
});

const cli = (argv: string[]) => runCli([...argv, '--server', server]);

async function http(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(server + path, { method, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, json: text === '' ? null : JSON.parse(text) };
}

describe('dead letters over HTTP and the CLI', () => {
  it('lists, groups, replays (dry run, then for real) failed jobs; a replayed job succeeds with both executions', async () => {
    const retry = { max_attempts: 2, initial_backoff_ms: 10, max_backoff_ms: 10, jitter: false };
    expect((await http('PUT', '/v1/tasks/hook', { url: rx.url('/down'), retry })).status).toBe(201);
    expect((await http('PUT', '/v1/tasks/other', { url: rx.url('/gone') })).status).toBe(201);
    for (const [id, task] of [['d1', 'hook'], ['d2', 'hook'], ['d3', 'other']]) {
      expect((await http('POST', '/v1/jobs', { id, task, schedule: { delay_ms: 10 } })).status).toBe(201);
    }
    await waitFor('three dead letters', async () => (await http('GET', '/v1/dead-letters')).json.dead_letters.length === 3, 10_000);

    const list = await cli(['dead-letters', 'list']);
    expect(list.code).toBe(0);
    expect(list.stdout.split('\n')[0]).toMatch(/^JOB\s+TASK\s+CLASS\s+STATUS\s+ATTEMPTS\s+FAILED AT\s+ERROR$/);
    expect(list.stdout).toContain('http_5xx');
    const only4xx = await cli(['dead-letters', 'list', '--error-class', 'http_4xx', '--json']);
    const body = JSON.parse(only4xx.stdout);
    expect(body.dead_letters).toHaveLength(1);
    expect(body.dead_letters[0]).toMatchObject({ job_id: 'd3', task: 'other', error_class: 'http_4xx', error: 'HTTP 404', status_code: 404, attempts: 1 });
    expect(Object.keys(body.dead_letters[0]).sort()).toEqual(['attempts', 'error', 'error_class', 'failed_at', 'job_id', 'scheduled_at', 'status_code', 'task']);
    expect(body.next_cursor).toBeNull();
    const paged = await http('GET', '/v1/dead-letters?task=hook&limit=1');
    expect(paged.json.dead_letters).toHaveLength(1);
    const second = await http('GET', `/v1/dead-letters?task=hook&limit=1&cursor=${paged.json.next_cursor}`);
    expect(second.json.dead_letters.map((d: { job_id: string }) => d.job_id)).not.toEqual(paged.json.dead_letters.map((d: { job_id: string }) => d.job_id));
    const future = new Date(Date.now() + 3_600_000).toISOString();
    expect((await http('GET', `/v1/dead-letters?since=${future}`)).json.dead_letters).toEqual([]);

    const groups = JSON.parse((await cli(['dead-letters', 'groups', '--json'])).stdout);
    expect(groups.groups.map((g: Record<string, unknown>) => [g.task, g.error_class, g.count])).toEqual([
      ['hook', 'http_5xx', 2],
      ['other', 'http_4xx', 1],
    ]);

    const dry = await cli(['dead-letters', 'replay', '--all-matching', '--task', 'hook', '--dry-run', '--json']);
    expect(JSON.parse(dry.stdout)).toEqual({ matched: 2, replayed: 0 });
    failing = false;
    const replay = await cli(['dead-letters', 'replay', 'd1', 'd2']);
    expect(replay.stdout).toBe('matched: 2\nreplayed: 2\n');
    await waitFor('replayed jobs succeeded', async () => (await http('GET', '/v1/jobs/d1')).json.state === 'SUCCEEDED' && (await http('GET', '/v1/jobs/d2')).json.state === 'SUCCEEDED', 10_000);
    const remaining = await http('GET', '/v1/dead-letters');
    expect(remaining.json.dead_letters.map((d: { job_id: string }) => d.job_id)).toEqual(['d3']);

    const history = JSON.parse((await cli(['job', 'history', 'd1', '--json'])).stdout);
    expect(history.executions.map((e: { state: string }) => e.state)).toEqual(['SUCCEEDED', 'FAILED']);
    const failed = history.executions[1];
    expect(failed.attempts.map((a: { attempt: number; status_code: number }) => [a.attempt, a.status_code])).toEqual([[1, 500], [2, 500]]);
    expect(failed.started_at).toBe(failed.attempts[0].started_at);
    for (const a of failed.attempts) {
      expect(Object.keys(a).sort()).toEqual(['attempt', 'duration_ms', 'error', 'fencing_token', 'finished_at', 'node_id', 'started_at', 'status_code']);
      expect(a.node_id).toBe('n1');
      expect(a.fencing_token).toMatch(/^\d+\.\d+$/);
      expect(a.duration_ms).toBeGreaterThanOrEqual(0);
    }
  });

  it('bad requests are problems naming the field; bad CLI input exits 2 without a request', async () => {
    const noTarget = await http('POST', '/v1/dead-letters:replay', { dry_run: true });
    expect(noTarget.status).toBe(400);
    expect(noTarget.json.errors[0].field).toBe('ids');
    const badClass = await http('GET', '/v1/dead-letters?error_class=flaky');
    expect(badClass.status).toBe(400);
    expect(badClass.json.errors[0].field).toBe('error_class');
    const unknown = await http('GET', '/v1/dead-letters?state=failed');
    expect(unknown.json.errors[0].field).toBe('state');
    const badFilter = await http('POST', '/v1/dead-letters:replay', { filter: { since: 'yesterday' } });
    expect(badFilter.json.errors[0].field).toBe('filter.since');
    const tooMany = await http('POST', '/v1/dead-letters:replay', { ids: Array.from({ length: 1001 }, (_, i) => `j${i}`) });
    expect(tooMany.json.errors[0].field).toBe('ids');
    const cursor = await http('GET', '/v1/dead-letters?cursor=garbage');
    expect(cursor.json.errors[0].field).toBe('cursor');

    const r = await cli(['dead-letters', 'list', '--error-class', 'nope']);
    expect(r.code).toBe(2);
    expect((await cli(['dead-letters', 'replay'])).code).toBe(2);
    expect((await cli(['dead-letters', 'replay', 'd1', '--task', 'hook'])).code).toBe(2);
  });

  it('task put --retention-ms sends retention_ms', async () => {
    const r = await cli(['task', 'put', 'by-cli', '--url', rx.url('/cli'), '--retention-ms', '60000', '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).retention_ms).toBe(60_000);
    expect((await cli(['task', 'put', 'by-cli', '--url', rx.url('/cli'), '--retention-ms', '10'])).code).toBe(2);
  });

  it('a task carries retention_ms (1 s at least), shown on GET', async () => {
    expect((await http('PUT', '/v1/tasks/kept', { url: rx.url('/kept'), retention_ms: 86_400_000 })).status).toBe(201);
    expect((await http('GET', '/v1/tasks/kept')).json.retention_ms).toBe(86_400_000);
    expect((await http('GET', '/v1/tasks/hook')).json.retention_ms).toBeNull();
    const bad = await http('PUT', '/v1/tasks/kept', { url: rx.url('/kept'), retention_ms: 10 });
    expect(bad.status).toBe(400);
    expect(bad.json.errors[0].field).toBe('retention_ms');
  });
});

describe('dead-letter scopes', () => {
  it('a read token lists and groups but may not replay (403); a write token replays', async () => {
    const reader = 'reader-token-0123456789abcdef';
    const writer = 'writer-token-0123456789abcdef';
    const file = join(dir, 'tokens');
    writeFileSync(file, `ro read ${reader}\nrw write ${writer}\n`);
    const scoped = await startNode(nodeConfig(join(dir, 'scoped'), { authTokensFile: file }), { logger: silentLogger });
    try {
      const base = `http://127.0.0.1:${scoped.apiPort}`;
      const as = (token: string, method: string, path: string, body?: unknown) =>
        fetch(base + path, { method, headers: { authorization: `Bearer ${token}` }, body: body === undefined ? undefined : JSON.stringify(body) });
      expect((await as(reader, 'GET', '/v1/dead-letters')).status).toBe(200);
      expect((await as(reader, 'GET', '/v1/dead-letters:groups')).status).toBe(200);
      expect((await as(reader, 'POST', '/v1/dead-letters:replay', { filter: {}, dry_run: true })).status).toBe(403);
      const ok = await as(writer, 'POST', '/v1/dead-letters:replay', { filter: {}, dry_run: true });
      expect(ok.status).toBe(200);
      expect(await ok.json()).toEqual({ matched: 0, replayed: 0 });
    } finally {
      await scoped.close();
    }
  });
});
