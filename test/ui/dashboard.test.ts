/**
 * The dashboard at /ui in a real browser against a real node: the token form, every page, the job actions
 * (checked through the API), scopes (a read-only token sees no write button), the security headers, and no
 * console error on any page. Screenshots go to test-results/ui/.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { waitFor } from '../../src/node/testing/receiver.js';
import { ignoring404, screenshotDir, startBed, unexpected, type Opened, type UiBed } from './bed.js';
import { batchJobs, seed } from './fixtures.js';

// Routes other work adds to the API: until then the pages say they are not available (a 404 the page expects).
const optional = ignoring404('/v1/due-profile', '/v1/dead-letters');

let bed: UiBed;

beforeAll(async () => {
  bed = await startBed();
  await seed(bed);
  // the overview's history and lateness need a few callbacks; the failing job needs its two attempts
  await waitFor('callbacks', () => bed.rx.received.filter((r) => r.path === '/hook').length >= 2, 20_000);
  await waitFor('broken-hook to fail', async () => (await bed.api('GET', '/v1/jobs/broken-hook')).json.state === 'FAILED', 20_000);
}, 120_000);

afterAll(async () => {
  await bed?.close();
});

async function shot(o: Opened, name: string): Promise<void> {
  await o.page.screenshot({ path: join(screenshotDir, `${name}.png`), fullPage: true });
}

async function closeClean(o: Opened): Promise<void> {
  const problems = unexpected(o.problems, optional);
  await o.close();
  expect(problems).toEqual([]);
}

describe('serving /ui', () => {
  test('index and assets carry a strict CSP and no inline script; hashed assets are cached for good', async () => {
    const res = await fetch(`${bed.base}/ui`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
    const csp = res.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("default-src 'self'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("style-src 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).not.toContain('unsafe-inline');
    expect(csp).not.toContain('unsafe-eval');
    expect(csp).not.toMatch(/https?:/);
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    expect(res.headers.get('cache-control')).toBe('no-cache');
    const html = await res.text();
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)/); // every script is a file of this origin
    expect(html).not.toMatch(/<style|style=/);
    const assets = [...html.matchAll(/(?:src|href)="(\/ui\/assets\/[^"]+)"/g)].map((m) => m[1]!);
    expect(assets.length).toBe(3);
    for (const path of assets) {
      const a = await fetch(bed.base + path);
      expect(a.status).toBe(200);
      expect(a.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
      expect(a.headers.get('content-security-policy')).toBe(csp);
      expect((await a.arrayBuffer()).byteLength).toBeGreaterThan(100);
    }
    expect((await fetch(`${bed.base}/ui/assets/nope.js`)).status).toBe(404);
  });

  test('the API behind it still needs a token: /v1/whoami and /v1/overview answer 401 without one', async () => {
    for (const path of ['/v1/whoami', '/v1/overview']) expect((await fetch(bed.base + path)).status).toBe(401);
    const who = await bed.api('GET', '/v1/whoami', undefined, 'read');
    expect(who.json).toEqual({ name: 'read-ops', scope: 'read', auth_required: true });
  });

  test('/v1/overview counts the callbacks the receiver got, the failed attempts, and their lateness', async () => {
    const received = bed.rx.received.length;
    const failed = bed.rx.received.filter((r) => r.path.startsWith('/fail')).length;
    expect(failed).toBe(2); // broken-hook: two attempts, both 503
    const sum = async (k: 'sent' | 'failed'): Promise<number> =>
      ((await bed.api('GET', '/v1/overview', undefined, 'read')).json.callbacks.samples as Array<Record<string, number>>).reduce((n, x) => n + x[k]!, 0);
    await expect.poll(() => sum('sent')).toBeGreaterThanOrEqual(received);
    expect(await sum('failed')).toBe(failed);
    const o = (await bed.api('GET', '/v1/overview', undefined, 'read')).json;
    expect(o.node_id).toBe('n1');
    expect(o.callbacks.interval_ms).toBe(10_000);
    for (const s of o.callbacks.samples) expect(Date.parse(s.start) % 10_000).toBe(0);
    const buckets = o.fire_lateness_ms.buckets as Array<{ le: number | null; count: number }>;
    expect(buckets[buckets.length - 1]!.le).toBeNull();
    expect(buckets.reduce((n, b) => n + b.count, 0)).toBe(o.fire_lateness_ms.count);
    expect(o.fire_lateness_ms.count).toBeGreaterThanOrEqual(2); // first attempts only: not the retry
  });
});

describe('token form', () => {
  test('a wrong token is refused; the right one is kept in session storage, never in the URL; log out forgets it', async () => {
    const o = await bed.open(null);
    await o.page.getByTestId('token').fill('not-a-token-of-this-node');
    await o.page.getByTestId('login').click();
    await expect.poll(() => o.page.getByRole('alert').textContent()).toContain('did not accept this token');
    await shot(o, 'login');
    await o.page.getByTestId('token').fill('admin-token-0123456789abcdef');
    await o.page.getByTestId('login').click();
    await o.page.getByTestId('who').waitFor();
    expect(await o.page.getByTestId('who').textContent()).toContain('admin-ops');
    expect(o.page.url()).not.toContain('admin-token');
    expect(await o.page.evaluate('sessionStorage.getItem("punctual.token")')).toBe('admin-token-0123456789abcdef');
    expect(await o.page.evaluate('localStorage.length')).toBe(0);
    await o.page.getByTestId('logout').click();
    await o.page.getByTestId('token').waitFor();
    expect(await o.page.evaluate('sessionStorage.getItem("punctual.token")')).toBeNull();
    // the refused token's 401 is what the form shows; nothing else may fail
    const problems = unexpected(o.problems.filter((p) => !p.startsWith('401 GET /v1/whoami')), optional);
    await o.close();
    expect(problems.filter((p) => !p.includes('/v1/whoami'))).toEqual([]);
  });
});

describe('pages', () => {
  test('overview: jobs by state as the API counts them, and the charts', async () => {
    const o = await bed.open('admin', '#/');
    const states = o.page.getByTestId('job-states');
    await states.waitFor();
    // jobs move between states while the page is open; their total does not
    const api = (await bed.api('GET', '/v1/overview')).json;
    const total = Object.values(api.jobs as Record<string, number>).reduce((n, x) => n + x, 0);
    expect(total).toBe(batchJobs + 6);
    await expect.poll(async () => (await states.locator('tr.total').textContent()) ?? '').toBe(`total${total}`);
    expect(await states.locator('tr', { hasText: 'FAILED' }).textContent()).toBe('FAILED1');
    expect(await o.page.locator('.chart canvas').count()).toBeGreaterThanOrEqual(2);
    expect(await o.page.getByText('callbacks, last hour', { exact: false }).count()).toBeGreaterThan(0);
    await o.page.waitForTimeout(300); // let uPlot draw before the picture
    await shot(o, 'overview');
    // the same in the dark scheme (the charts take their colours when drawn: reload)
    await o.page.emulateMedia({ colorScheme: 'dark' });
    await o.page.reload();
    await o.page.getByTestId('job-states').waitFor();
    await o.page.waitForTimeout(300);
    await shot(o, 'overview-dark');
    await closeClean(o);
  });

  test('jobs: filter by task and state, page by cursor, search by id', async () => {
    const o = await bed.open('admin', '#/jobs');
    const table = o.page.getByTestId('jobs-table');
    await table.waitFor();
    await shot(o, 'jobs');
    const firstPage = await table.locator('tbody tr').count();
    expect(firstPage).toBe(50);
    await o.page.getByTestId('next-page').click();
    await expect.poll(() => o.page.url()).toContain('cursor=');
    await expect.poll(async () => (await table.locator('tbody tr td.id').first().textContent()) ?? '').not.toBe('broken-hook');
    // filters: the task's jobs only
    await o.page.getByTestId('filter-task').fill('reports');
    await o.page.getByTestId('apply-filters').click();
    await expect.poll(async () => (await table.locator('td.id').allTextContents()).sort()).toEqual(['invoice-42', 'nightly-report']);
    await o.page.getByTestId('filter-state').selectOption('FAILED');
    await o.page.getByTestId('filter-task').fill('');
    await o.page.getByTestId('apply-filters').click();
    await expect.poll(async () => await table.locator('td.id').allTextContents()).toEqual(['broken-hook']);
    await o.page.getByTestId('job-search').fill('invoice-42');
    await o.page.getByTestId('job-search').press('Enter');
    await expect.poll(async () => await o.page.getByTestId('job-id').textContent()).toBe('invoice-42');
    expect(batchJobs).toBeGreaterThan(50);
    await closeClean(o);
  });

  test('job: schedule, next occurrences from the preview, executions', async () => {
    const o = await bed.open('admin', '#/jobs/heartbeat');
    await o.page.getByTestId('occurrences').waitFor();
    expect(await o.page.getByTestId('occurrences').locator('li').count()).toBe(10);
    await o.page.getByTestId('executions-table').waitFor();
    expect(await o.page.getByTestId('executions-table').locator('tr.execution').count()).toBeGreaterThanOrEqual(1);
    await shot(o, 'job');
    await closeClean(o);
  });

  test('a failed job shows each attempt\'s error', async () => {
    const o = await bed.open('admin', '#/jobs/broken-hook');
    await o.page.getByTestId('executions-table').waitFor();
    expect(await o.page.getByTestId('executions-table').textContent()).toContain('HTTP 503');
    await shot(o, 'job-failed');
    await closeClean(o);
  });

  test('tasks and cluster', async () => {
    const o = await bed.open('admin', '#/tasks');
    await o.page.getByTestId('tasks-table').waitFor();
    expect(await o.page.getByTestId('tasks-table').locator('td.id').allTextContents()).toEqual(['flaky', 'hello', 'reports']);
    await shot(o, 'tasks');
    await o.page.goto(`${bed.base}/ui#/cluster`);
    await o.page.getByTestId('shards-table').waitFor();
    const cluster = (await bed.api('GET', '/v1/cluster')).json;
    expect(await o.page.getByTestId('shards-table').locator('tbody tr').count()).toBe(cluster.shards.length);
    expect(await o.page.getByTestId('nodes-table').textContent()).toContain('n1');
    await shot(o, 'cluster');
    await closeClean(o);
  });

  test('dead letters say calmly when the node has no dead-letter API', async () => {
    const probe = await bed.api('GET', '/v1/dead-letters:groups');
    const o = await bed.open('admin', '#/dead-letters');
    if (probe.status === 404) await o.page.getByText('not available on this node').waitFor();
    else await o.page.getByText('By task and error').waitFor();
    await closeClean(o);
  });
});

describe('actions, checked through the API', () => {
  test('cancel asks first, then the job is CANCELLED', async () => {
    const o = await bed.open('write', '#/jobs/welcome-ada');
    await o.page.getByTestId('cancel').click();
    await o.page.getByRole('dialog').waitFor();
    await shot(o, 'cancel-confirm');
    expect((await bed.api('GET', '/v1/jobs/welcome-ada')).json.state).not.toBe('CANCELLED'); // nothing before the confirmation
    await o.page.getByTestId('confirm').click();
    await expect.poll(async () => (await bed.api('GET', '/v1/jobs/welcome-ada')).json.state).toBe('CANCELLED');
    await expect.poll(() => o.page.locator('.page-head .badge').textContent()).toBe('CANCELLED');
    expect(await o.page.getByTestId('cancel').count()).toBe(0);
    await closeClean(o);
  });

  test('pause and resume', async () => {
    const o = await bed.open('write', '#/jobs/sync-crm');
    await o.page.getByTestId('pause').click();
    await expect.poll(async () => (await bed.api('GET', '/v1/jobs/sync-crm')).json.state).toBe('PAUSED');
    await o.page.getByTestId('resume').click();
    // live again: PENDING, or QUEUED when its next occurrence is within the firing horizon
    await expect.poll(async () => (await bed.api('GET', '/v1/jobs/sync-crm')).json.state).toMatch(/^(PENDING|QUEUED)$/);
    await o.page.getByTestId('pause').waitFor();
    await closeClean(o);
  });

  test('run now sends the callback', async () => {
    const o = await bed.open('write', '#/jobs/nightly-report');
    expect(bed.rx.of('nightly-report')).toEqual([]);
    await o.page.getByTestId('run-now').click();
    await waitFor('the run-now callback', () => bed.rx.of('nightly-report').length === 1, 10_000);
    await expect.poll(async () => (await bed.api('GET', '/v1/jobs/nightly-report/executions')).json.executions.length).toBe(1);
    await closeClean(o);
  });
});

describe('scopes', () => {
  test('a read-only token sees every page and no write button', async () => {
    const o = await bed.open('read', '#/jobs/invoice-42');
    await o.page.getByTestId('job-id').waitFor();
    await o.page.getByText('needs a token with the write scope').waitFor();
    expect(await o.page.getByTestId('job-actions').count()).toBe(0);
    expect(await o.page.locator('button', { hasText: /Cancel|Pause|Run now|Resume|Replay/ }).count()).toBe(0);
    await shot(o, 'read-only-job');
    await o.page.goto(`${bed.base}/ui#/cluster`);
    await o.page.getByTestId('shards-table').waitFor();
    expect(await o.page.locator('button', { hasText: 'Transfer' }).count()).toBe(0);
    expect(await o.page.getByText('transfer leadership').count()).toBe(0);
    await closeClean(o);
  });

  test('a write token may act on jobs but not move leadership', async () => {
    const o = await bed.open('write', '#/cluster');
    await o.page.getByTestId('shards-table').waitFor();
    expect(await o.page.locator('button', { hasText: 'Transfer' }).count()).toBe(0);
    await closeClean(o);
  });
});
