/** The jobs and tasks every dashboard test sees: a little of everything an operator meets. */
import type { UiBed } from './bed.js';

export const batchJobs = 120;

export async function seed(bed: UiBed): Promise<void> {
  bed.rx.respond = (r) => ({ status: r.path.startsWith('/fail') ? 503 : 200 });
  const put = async (name: string, body: unknown): Promise<void> => {
    const r = await bed.api('PUT', `/v1/tasks/${name}`, body);
    if (r.status !== 201) throw new Error(`task ${name}: ${r.status} ${JSON.stringify(r.json)}`);
  };
  await put('hello', { url: bed.rx.url('/hook'), signing_secret: 'a-secret-of-16-bytes-or-more' });
  await put('reports', { url: bed.rx.url('/reports'), timeout_ms: 30000, max_concurrency: 4 });
  await put('flaky', { url: bed.rx.url('/fail/flaky'), retry: { max_attempts: 2, initial_backoff_ms: 50, max_backoff_ms: 50, jitter: false } });
  const inMs = (ms: number): string => new Date(Date.now() + ms).toISOString();
  const jobs: unknown[] = [
    { id: 'nightly-report', task: 'reports', schedule: { cron: '0 30 2 * * *', timezone: 'Europe/Berlin' }, metadata: { team: 'billing' } },
    { id: 'heartbeat', task: 'hello', schedule: { every_ms: 2000 }, payload: { ping: true } },
    { id: 'welcome-ada', task: 'hello', schedule: { delay_ms: 1_800_000 }, payload: { to: 'ada' } },
    { id: 'invoice-42', task: 'reports', schedule: { at: inMs(3_600_000) }, metadata: { team: 'billing', customer: '42' } },
    { id: 'sync-crm', task: 'hello', schedule: { cron: '*/5 * * * *' } },
    { id: 'broken-hook', task: 'flaky', payload: { order: 7 } },
  ];
  // Enough jobs for two pages of the list, due over the next minutes (the due profile has something to show).
  for (let i = 0; i < batchJobs; i++) {
    jobs.push({ id: `order-${String(i).padStart(4, '0')}`, task: 'hello', schedule: { at: inMs(20_000 + ((i * 7919) % 500) * 1000) }, payload: { order: i } });
  }
  const r = await bed.api('POST', '/v1/jobs:batch', { jobs });
  const bad = (r.json.results as Array<{ status: number }>).filter((x) => x.status !== 201);
  if (r.status !== 200 || bad.length > 0) throw new Error(`seed batch: ${r.status} ${JSON.stringify(bad)}`);
}
