/**
 * The examples users copy, checked against the OpenAPI document and a real node (SQLite, its engine, a real
 * callback receiver): every example request of docs/api.md and of the README's curl session is an operation of
 * the document, its body conforms to that operation's request schema (ajv, JSON Schema 2020-12), and sent to the
 * node in the order the page gives them, every answer conforms to the answer the document declares for its
 * status. Then every route once more, so each declared answer shape (job, task, calendar, execution, cluster,
 * problem, ...) is met by a real answer.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/core/log.js';
import { createApp, type App } from '../../src/http/app.js';
import { call, type CallResult } from '../../src/http/testing/harness.js';
import { nodeConfig } from '../../src/node/testing/fixtures.js';
import { useNodeBed } from '../../src/node/testing/bed.js';
import { waitFor } from '../../src/node/testing/receiver.js';
import type { OpenNode } from '../../src/node/host.js';
import { answerProblems, extractExamples, findOperation, requestProblems, scheduleFragments, validatorOf, type Example } from './document.js';

const root = join(import.meta.dirname, '..', '..');
const bed = useNodeBed('punctual-openapi-', { closeGraceMs: 2_000 });

function examplesOf(file: string): Example[] {
  return extractExamples(file, readFileSync(join(root, file), 'utf8'));
}

/**
 * A shape with placeholders (`{"by_ms": N}`, `{"jobs": [job, ...]}`) rather than JSON: described, not sent. A body
 * that is not JSON and has no placeholder is a broken example.
 */
function isShape(body: string): boolean {
  try {
    JSON.parse(body);
    return false;
  } catch {
    return /\.\.\.|:\s*[A-Z_]+\s*[,}]/.test(body);
  }
}

function parsedBody(e: Example): unknown {
  return e.body === undefined ? undefined : (JSON.parse(e.body) as unknown);
}

const appOf = (core: OpenNode): App =>
  createApp({ api: core.service, authToken: null, metricsAuth: false, metrics: async () => ({ contentType: 'text/plain; version=0.0.4', body: '' }), logger: silentLogger });

/** Sends a request and checks its answer against the document; returns the answer. */
async function checked(app: App, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<CallResult> {
  const found = findOperation(method, path);
  expect(found, `${method} ${path} is an operation of the document`).not.toBeNull();
  const res = await call(app, method, path, body, headers);
  expect(answerProblems(found!.op, res.status, res.headers['content-type'], res.json), `${method} ${path} -> ${res.status} ${JSON.stringify(res.json)}`).toEqual([]);
  return res;
}

describe('the examples of the docs', () => {
  const pages = ['docs/api.md', 'README.md'];

  it('are found (the extractor reads the pages as written)', () => {
    const all = pages.flatMap(examplesOf);
    expect(all.filter((e) => e.source.startsWith('README.md')).length).toBeGreaterThanOrEqual(10);
    expect(all.filter((e) => e.source.startsWith('docs/api.md')).length).toBeGreaterThanOrEqual(5);
    expect(all.filter((e) => e.body !== undefined && !isShape(e.body)).length).toBeGreaterThanOrEqual(10);
    expect(scheduleFragments(readFileSync(join(root, 'docs/api.md'), 'utf8')).length).toBeGreaterThanOrEqual(5);
  });

  it('every schedule written in docs/api.md (`{"cron": ...}`, `"schedule": {...}`) conforms to the Schedule schema', () => {
    const schedule = validatorOf({ $ref: '#/components/schemas/Schedule' });
    for (const fragment of scheduleFragments(readFileSync(join(root, 'docs/api.md'), 'utf8'))) {
      expect([fragment, schedule(JSON.parse(fragment)), schedule.errors ?? null]).toEqual([fragment, true, null]);
    }
  });

  it('are operations of the document, and their bodies conform to the operation\'s request schema', () => {
    for (const e of pages.flatMap(examplesOf)) {
      const found = findOperation(e.method, e.path.replace(/\{[a-z_]+\}/g, '0'));
      expect(found, e.source).not.toBeNull();
      if (e.body === undefined) continue;
      if (isShape(e.body)) continue; // a shape with placeholders: no JSON to check
      expect(requestProblems(found!.op, parsedBody(e)), e.source).toEqual([]);
    }
  });

  it('sent to a real node in the order of the page, every answer is one the document declares', async () => {
    const app = appOf(await bed.startCore(nodeConfig(bed.dir)));
    for (const page of pages) {
      for (const e of examplesOf(page)) {
        if (e.body !== undefined && isShape(e.body)) continue;
        const res = await checked(app, e.method, e.path.replace(/\{[a-z_]+\}/g, '0'), parsedBody(e));
        // the job, task and calendar examples are meant to work as written
        if (/\/v1\/(tasks|jobs|calendars|schedules)/.test(e.path)) expect(res.status, `${e.source}: ${JSON.stringify(res.json)}`).toBeLessThan(300);
      }
    }
  });
});

describe('every route of a real node answers as the document says', () => {
  it('tasks, calendars, jobs with a fired execution, batch, preview, cluster, clock, operations, problems', async () => {
    const core = await bed.startCore(nodeConfig(bed.dir));
    const app = appOf(core);
    const hook = bed.rx.url('/hook');
    const secret = 'a-secret-of-16-bytes';

    await checked(app, 'PUT', '/v1/tasks/t1', { url: hook, signing_secret: secret, headers: { 'X-Team': 'ops' }, retry: { max_attempts: 2 } });
    await checked(app, 'PUT', '/v1/tasks/t1', { url: hook, signing_secret: secret, signing_secret_next: 'b-secret-of-16-bytes' });
    await checked(app, 'GET', '/v1/tasks/t1');
    await checked(app, 'GET', '/v1/tasks');
    await checked(app, 'PUT', '/v1/calendars/c1', { dates: ['2027-12-25'], ranges: [{ from: '2027-12-24', to: '2027-12-31' }], description: 'x' });
    await checked(app, 'GET', '/v1/calendars/c1');
    await checked(app, 'GET', '/v1/calendars');

    const now = await checked(app, 'POST', '/v1/jobs', { id: 'now', task: 't1', payload: { a: 1 }, metadata: { team: 'ops' } });
    expect(now.status).toBe(201);
    await waitFor('the callback of job now', () => bed.rx.of('now').length > 0);
    await waitFor('its execution recorded', async () => (await call(app, 'GET', '/v1/jobs/now/executions')).json.executions.length > 0);
    const executions = await checked(app, 'GET', '/v1/jobs/now/executions?limit=5');
    expect(executions.json.executions[0]).toMatchObject({ id: expect.stringMatching(/^now:\d+$/), attempt: 1 });
    await waitFor('the job ends', async () => (await call(app, 'GET', '/v1/jobs/now')).json.state === 'SUCCEEDED');
    expect((await checked(app, 'GET', '/v1/jobs/now')).json.last_execution).not.toBeNull();

    await checked(app, 'POST', '/v1/jobs', { id: 'cron', callback: { url: hook, signing_secret: secret }, payload_base64: 'AAEC', schedule: { cron: '0 9 * * *', timezone: 'Europe/Berlin', dst: { gap: 'skip' }, spread_ms: 60000, exclude: ['c1'] }, end_at: '2099-01-01T00:00:00Z' });
    await checked(app, 'POST', '/v1/jobs', { id: 'every', task: 't1', schedule: { every_ms: 3_600_000, start_at: '2030-01-01T00:00:00Z' }, misfire: 'skip', overlap: 'buffer_one', misfire_threshold_ms: 60000 }, { 'idempotency-key': 'k1' });
    await checked(app, 'POST', '/v1/jobs', { id: 'every', task: 't1', schedule: { every_ms: 1000 } }); // 409: another body
    await checked(app, 'PATCH', '/v1/jobs/every', { metadata: null, schedule: { every_ms: 7_200_000 } });
    await checked(app, 'POST', '/v1/jobs/every/pause');
    await checked(app, 'POST', '/v1/jobs/every/resume');
    await checked(app, 'POST', '/v1/jobs/every/run', undefined, { 'idempotency-key': 'run-1' });
    await checked(app, 'POST', '/v1/jobs/every/cancel');
    await checked(app, 'DELETE', '/v1/jobs/cron');
    await checked(app, 'GET', '/v1/jobs?state=cancelled&limit=1');
    await checked(app, 'GET', '/v1/jobs?task=t1');
    await checked(app, 'POST', '/v1/jobs:batch', { jobs: [{ task: 't1', schedule: { delay_ms: 60_000 } }, { task: 'nope' }, { task: 't1', schedule: { cron: 'bad' } }] });
    await checked(app, 'POST', '/v1/schedules:preview', { schedule: { cron: '0 9 * * *' }, count: 3 });
    await checked(app, 'POST', '/v1/schedules:preview');

    await checked(app, 'GET', '/v1/cluster');
    await checked(app, 'POST', '/v1/cluster/shards/0/transfer-leader', { to: 'n1' });
    await checked(app, 'POST', '/v1/cluster/nodes', { id: 'n1', peer_addr: '127.0.0.1:1' }); // itself: 409
    await checked(app, 'DELETE', '/v1/cluster/nodes/n9');
    await checked(app, 'GET', '/v1/clock');
    await checked(app, 'POST', '/v1/clock:advance', { by_ms: 1000 });
    await checked(app, 'GET', '/healthz');
    await checked(app, 'GET', '/readyz');
    await checked(app, 'GET', '/metrics');
    await checked(app, 'GET', '/v1/openapi.json');
    await checked(app, 'GET', '/docs');

    // problems: 400 with every field, 404, 405 is not an operation (no such method), 409
    const bad = await checked(app, 'POST', '/v1/jobs', { task: 't1', schedule: { delay_ms: -1 }, misfire: 'never', zz: 1 });
    expect(bad.json.errors.map((e: { field: string }) => e.field).sort()).toEqual(['misfire', 'schedule.delay_ms', 'zz']);
    await checked(app, 'GET', '/v1/jobs/missing');
    await checked(app, 'GET', '/v1/tasks/missing');
    await checked(app, 'DELETE', '/v1/tasks/t1'); // 409: live jobs use it
    await checked(app, 'DELETE', '/v1/calendars/c1');
  });
});
