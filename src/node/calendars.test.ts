/**
 * Exclusion calendars on a real node (SQLite, its firing engine, a real receiver): the client API's routes over
 * the node's service, a daily job that skips the excluded dates across restarts on a manual clock, and the
 * calendars kept in the node's file.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../core/clock.js';
import { silentLogger } from '../core/log.js';
import { createApp } from '../http/app.js';
import { call } from '../http/testing/harness.js';
import type { OpenNode } from './host.js';
import { callbackSpec, jobSpec, nodeConfig } from './testing/fixtures.js';
import { useNodeBed } from './testing/bed.js';
import { waitFor } from './testing/receiver.js';

const bed = useNodeBed('punctual-calendars-', { closeGraceMs: 2_000 });
const D = 86_400_000;

const appOf = (core: OpenNode) =>
  createApp({ api: core.service, authToken: null, metricsAuth: false, metrics: async () => ({ contentType: 'text/plain', body: '' }), logger: silentLogger });

const scheduledAt = (id: string): number[] => bed.rx.of(id).map((r) => Number(r.headers['x-punctual-scheduled-at']));
const day = (ms: number): string => new Date(ms).toISOString().slice(0, 10);

describe('calendars on a real node', () => {
  it('the routes: put, get, list, replace, a job naming it, the preview, delete; an unknown name is a 400', async () => {
    const core = await bed.startCore(nodeConfig(bed.dir));
    const app = appOf(core);
    const body = { timezone: 'Europe/Berlin', dates: ['2027-12-26', '2027-12-25', '2027-12-25'], ranges: [{ from: '2027-12-28', to: '2027-12-29' }], description: 'Christmas' };
    const put = await call(app, 'PUT', '/v1/calendars/holidays-de', body);
    expect(put.status).toBe(201);
    expect(put.json).toMatchObject({ name: 'holidays-de', timezone: 'Europe/Berlin', dates: ['2027-12-25', '2027-12-26'], ranges: [{ from: '2027-12-28', to: '2027-12-29' }], description: 'Christmas' });
    expect((await call(app, 'GET', '/v1/calendars/holidays-de')).json).toEqual(put.json);
    expect((await call(app, 'GET', '/v1/calendars')).json).toEqual({ calendars: [put.json] });

    const schedule = { cron: '0 9 * * *', timezone: 'Europe/Berlin', exclude: ['holidays-de'] };
    const preview = await call(app, 'POST', '/v1/schedules:preview', { schedule, from: '2027-12-24T12:00:00Z', count: 3 });
    expect(preview.status).toBe(200);
    expect(preview.json.occurrences).toEqual(['2027-12-27T08:00:00.000Z', '2027-12-30T08:00:00.000Z', '2027-12-31T08:00:00.000Z']);
    const unknownPreview = await call(app, 'POST', '/v1/schedules:preview', { schedule: { ...schedule, exclude: ['nope'] } });
    expect(unknownPreview.status).toBe(400);
    expect(unknownPreview.json.errors).toEqual([{ field: 'schedule.exclude[0]', message: 'calendar "nope" not found' }]);

    const created = await call(app, 'POST', '/v1/jobs', { id: 'daily', callback: { url: bed.rx.url('/hook') }, schedule });
    expect(created.status).toBe(201);
    expect(created.json.schedule).toEqual(schedule);
    expect(created.json.next_fire_at).not.toMatch(/^2027-12-2[56]/);
    // jobs on every shard find it (each shard holds its own copy, as with tasks)
    const batch = Array.from({ length: 16 }, (_, i) => ({ id: `j${i}`, callback: { url: bed.rx.url('/hook') }, schedule }));
    const made = await call(app, 'POST', '/v1/jobs:batch', { jobs: batch });
    expect(made.status).toBe(200);
    expect(made.json.results.map((r: { status: number }) => r.status)).toEqual(batch.map(() => 201));
    const shards = await Promise.all(batch.map(async (j) => (await core.service.getJob(j.id)).shard));
    expect(new Set(shards).size).toBe(4);
    const unknown = await call(app, 'POST', '/v1/jobs', { id: 'other', callback: { url: bed.rx.url('/hook') }, schedule: { ...schedule, exclude: ['nope'] } });
    expect(unknown.status).toBe(400);
    expect(unknown.json).toMatchObject({ code: 'invalid_argument', errors: [{ field: 'schedule.exclude[0]' }] });

    const replaced = await call(app, 'PUT', '/v1/calendars/holidays-de', { ...body, dates: ['2027-12-25'] });
    expect(replaced.status).toBe(200);
    expect(replaced.json.created_at).toBe(put.json.created_at);
    // allowed while the job names it (documented): the job keeps its reference, which now excludes nothing
    expect((await call(app, 'DELETE', '/v1/calendars/holidays-de')).status).toBe(204);
    expect((await call(app, 'DELETE', '/v1/calendars/holidays-de')).json).toMatchObject({ status: 404, code: 'not_found' });
    expect((await call(app, 'GET', '/v1/calendars/holidays-de')).status).toBe(404);
    expect((await call(app, 'GET', '/v1/jobs/daily')).json.schedule.exclude).toEqual(['holidays-de']);
  });

  it('a daily job does not run on excluded dates: after each restart it runs the first date that is not excluded', async () => {
    const t = Date.now();
    const clock = new ManualClock(t);
    const config = nodeConfig(bed.dir);
    let core = await bed.startCore(config, { clock });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    // the next two dates (UTC) are excluded
    await core.service.putCalendar('off', { timezone: 'UTC', dates: [day(t + D), day(t + 2 * D)], ranges: [], description: null });
    const every = { kind: 'every' as const, everyMs: D, startAtMs: t + 500, exclude: ['off'] };
    for (const r of await core.service.createJobs([jobSpec('daily', every, { misfire: 'fire_once' })])) if (!r.ok) throw r.error;
    clock.set(t + 500);
    await waitFor('the first run', () => bed.rx.of('daily').length === 1);
    await waitFor('the next occurrence skips the excluded dates', async () => (await core.service.getJob('daily')).nextFireAtMs === t + 500 + 3 * D);
    await bed.stop(core);

    // Back a day later, then past the second excluded date: nothing was due (a missed occurrence would be caught up
    // at once by fire_once); back on the third day, its occurrence runs.
    clock.set(t + 500 + 2 * D + 1_000);
    core = await bed.startCore(config, { clock });
    expect((await core.service.getJob('daily')).nextFireAtMs).toBe(t + 500 + 3 * D);
    expect((await core.service.getCalendar('off')).dates).toEqual([day(t + D), day(t + 2 * D)]); // kept in the file
    await bed.stop(core);
    clock.set(t + 500 + 3 * D + 100);
    core = await bed.startCore(config, { clock });
    await waitFor('the run of the third day', () => bed.rx.of('daily').length === 2);
    expect(scheduledAt('daily')).toEqual([t + 500, t + 500 + 3 * D]);
    await waitFor('and on to the fourth', async () => (await core.service.getJob('daily')).nextFireAtMs === t + 500 + 4 * D);
  });
});
