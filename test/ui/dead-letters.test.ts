/**
 * The Dead letters page against a real node: groups by task and error class, the failures of a group, a bulk
 * replay that asks first (showing the dry run's count) and really sends the callbacks again, the job page's
 * single replay, and no replay button for a read-only token. Needs the dead-letter API (GET /v1/dead-letters,
 * GET /v1/dead-letters:groups, POST /v1/dead-letters:replay).
 */
import { join } from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { waitFor } from '../../src/node/testing/receiver.js';
import { ignoring404, screenshotDir, startBed, unexpected, type Opened, type UiBed } from './bed.js';
import { seed } from './fixtures.js';

const failing = ['broken-hook', 'broken-1', 'broken-2', 'broken-3'];
let bed: UiBed;

beforeAll(async () => {
  bed = await startBed();
  const probe = await bed.api('GET', '/v1/dead-letters:groups');
  if (probe.status !== 200) throw new Error(`the node has no dead-letter API: GET /v1/dead-letters:groups answered ${probe.status}`);
  await seed(bed); // broken-hook fails on the task `flaky` (503, two attempts)
  for (const id of failing.slice(1)) expect((await bed.api('POST', '/v1/jobs', { id, task: 'flaky', payload: { id } })).status).toBe(201);
  for (const id of failing) {
    await waitFor(`${id} to fail`, async () => (await bed.api('GET', `/v1/jobs/${id}`)).json.state === 'FAILED', 20_000);
  }
}, 120_000);

afterAll(async () => {
  await bed?.close();
});

async function closeClean(o: Opened): Promise<void> {
  const problems = unexpected(o.problems, ignoring404('/v1/due-profile'));
  await o.close();
  expect(problems).toEqual([]);
}

test('groups by task and error; a group lists its failures; replaying it asks with the count, then sends them again', async () => {
  const o = await bed.open('write', '#/dead-letters');
  const groups = o.page.getByTestId('dead-letter-groups');
  await groups.waitFor();
  const row = groups.locator('tr', { hasText: 'flaky' });
  expect(await row.locator('td.num').textContent()).toBe(String(failing.length));
  await row.getByText('Show').click();
  const list = o.page.getByTestId('dead-letters-table');
  await list.waitFor();
  expect((await list.locator('td.id').allTextContents()).sort()).toEqual([...failing].sort());
  expect(await list.textContent()).toContain('503');
  await o.page.screenshot({ path: join(screenshotDir, 'dead-letters.png'), fullPage: true });
  const before = failing.map((id) => bed.rx.of(id).length);
  await row.getByTestId('replay-group').click();
  await o.page.getByRole('dialog').waitFor();
  expect(await o.page.getByTestId('confirm').textContent()).toBe(`Replay ${failing.length}`);
  expect(failing.map((id) => bed.rx.of(id).length)).toEqual(before); // the dry run sent nothing
  await o.page.getByTestId('confirm').click();
  await expect.poll(() => o.page.getByTestId('notice').textContent()).toContain(`Replayed ${failing.length}`);
  await waitFor('every replayed callback', () => failing.every((id, i) => bed.rx.of(id).length > before[i]!), 20_000);
  await closeClean(o);
});

test('the job page replays one dead letter after a confirmation', async () => {
  await waitFor('broken-1 to fail again', async () => (await bed.api('GET', '/v1/jobs/broken-1')).json.state === 'FAILED', 20_000);
  const o = await bed.open('write', '#/jobs/broken-1');
  const before = bed.rx.of('broken-1').length;
  await o.page.getByTestId('replay').click();
  await o.page.getByTestId('confirm').click();
  await waitFor('the replayed callback', () => bed.rx.of('broken-1').length > before, 20_000);
  await closeClean(o);
});

test('a read-only token sees the dead letters and no replay button', async () => {
  const o = await bed.open('read', '#/dead-letters?task=flaky');
  await o.page.getByTestId('dead-letter-groups').waitFor();
  await o.page.getByTestId('dead-letters-table').waitFor();
  expect(await o.page.locator('button', { hasText: 'Replay' }).count()).toBe(0);
  expect(await o.page.locator('input[type=checkbox]').count()).toBe(0);
  await closeClean(o);
});
