/** PUT/GET/DELETE /v1/calendars and `schedule.exclude` through the app: bodies, every bad field named, scopes. */
import { describe, expect, it } from 'vitest';
import { limits } from '../core/limits.js';
import { call, makeHarness } from './testing/harness.js';
import { TokenSet } from './tokens.js';

const body = { timezone: 'Europe/Berlin', dates: ['2027-12-25'], ranges: [{ from: '2027-12-27', to: '2027-12-31' }], description: 'Christmas' };

describe('calendar bodies', () => {
  it('timezone defaults to UTC, dates and ranges to [], description to null; dates come back sorted, once each', async () => {
    const { app } = makeHarness();
    const put = await call(app, 'PUT', '/v1/calendars/empty', {});
    expect(put.status).toBe(201);
    expect(put.json).toMatchObject({ name: 'empty', timezone: 'UTC', dates: [], ranges: [], description: null });
    const sorted = await call(app, 'PUT', '/v1/calendars/x', { dates: ['2027-12-26', '2027-01-01', '2027-12-26'] });
    expect(sorted.json.dates).toEqual(['2027-01-01', '2027-12-26']);
    const full = Array.from({ length: limits.calendarEntriesMax }, (_, i) => new Date(Date.UTC(2027, 0, 1 + i)).toISOString().slice(0, 10));
    expect((await call(app, 'PUT', '/v1/calendars/full', { dates: full })).status).toBe(201);
  });

  it.each([
    ['a date that does not exist', { ...body, dates: ['2027-02-29'] }, 'dates[0]'],
    ['a date with a time', { ...body, dates: ['2027-12-25T00:00:00Z'] }, 'dates[0]'],
    ['a range backwards', { ...body, ranges: [{ from: '2027-12-31', to: '2027-12-27' }] }, 'ranges[0].to'],
    ['a range without to', { ...body, ranges: [{ from: '2027-12-31' }] }, 'ranges[0].to'],
    ['a range with another key', { ...body, ranges: [{ from: '2027-12-27', to: '2027-12-31', until: 'x' }] }, 'ranges[0].until'],
    ['an unknown zone', { ...body, timezone: 'Europe/Atlantis' }, 'timezone'],
    ['an unknown key', { ...body, weekdays: [0, 6] }, 'weekdays'],
    ['dates not an array', { ...body, dates: '2027-12-25' }, 'dates'],
    ['too many entries', { dates: Array.from({ length: limits.calendarEntriesMax }, (_, i) => new Date(Date.UTC(2027, 0, 1 + i)).toISOString().slice(0, 10)), ranges: [{ from: '2030-01-01', to: '2030-01-02' }] }, 'dates'],
    ['a description too long', { ...body, description: 'x'.repeat(limits.calendarDescriptionLengthMax + 1) }, 'description'],
  ])('%s: 400 naming the field, nothing stored', async (_name, bad, field) => {
    const { app, api } = makeHarness();
    const res = await call(app, 'PUT', '/v1/calendars/hol', bad);
    expect(res.status).toBe(400);
    expect(res.headers['content-type']).toBe('application/problem+json');
    expect(res.json.code).toBe('invalid_argument');
    expect(res.json.errors.map((e: { field: string }) => e.field)).toContain(field);
    expect(api.calendars.size).toBe(0);
  });

  it('a bad name is a 400 on name; an unknown one a 404 on GET and DELETE', async () => {
    const { app } = makeHarness();
    expect((await call(app, 'PUT', '/v1/calendars/a%20b', body)).json).toMatchObject({ status: 400, errors: [{ field: 'name' }] });
    expect((await call(app, 'GET', '/v1/calendars/nope')).json).toMatchObject({ status: 404, code: 'not_found' });
    expect((await call(app, 'DELETE', '/v1/calendars/nope')).json).toMatchObject({ status: 404, code: 'not_found' });
    expect((await call(app, 'GET', '/v1/calendars?limit=5')).status).toBe(400);
  });
});

describe('schedule.exclude', () => {
  const job = (schedule: unknown) => ({ id: 'j', callback: { url: 'http://127.0.0.1:9/hook' }, schedule });

  it('cron and every_ms carry it to the node; the job shows it', async () => {
    const { app, api } = makeHarness();
    const res = await call(app, 'POST', '/v1/jobs', job({ every_ms: 60_000, exclude: ['hol', 'weekends'] }));
    expect(res.status).toBe(201);
    expect(api.created[0]![0]!.schedule).toEqual({ kind: 'every', everyMs: 60_000, startAtMs: null, exclude: ['hol', 'weekends'] });
    expect(res.json.schedule.exclude).toEqual(['hol', 'weekends']);
    const cron = await call(app, 'POST', '/v1/jobs', { ...job({ cron: '0 9 * * 1-5', exclude: ['hol'] }), id: 'c' });
    expect(api.created[1]![0]!.schedule).toMatchObject({ kind: 'cron', exclude: ['hol'] });
    expect(cron.json.schedule).toEqual({ cron: '0 9 * * 1-5', timezone: 'UTC', exclude: ['hol'] });
  });

  it.each([
    ['with at', { at: '2030-01-01T00:00:00Z', exclude: ['hol'] }, 'schedule.exclude'],
    ['with delay_ms', { delay_ms: 1000, exclude: ['hol'] }, 'schedule.exclude'],
    ['empty', { every_ms: 60_000, exclude: [] }, 'schedule.exclude'],
    ['not an array', { every_ms: 60_000, exclude: 'hol' }, 'schedule.exclude'],
    ['too many', { every_ms: 60_000, exclude: Array.from({ length: limits.calendarsPerScheduleMax + 1 }, (_, i) => `c${i}`) }, 'schedule.exclude'],
    ['a bad name', { every_ms: 60_000, exclude: ['hol', 'a b'] }, 'schedule.exclude[1]'],
    ['a name twice', { every_ms: 60_000, exclude: ['hol', 'hol'] }, 'schedule.exclude[1]'],
  ])('%s: 400 naming the field', async (_name, schedule, field) => {
    const { app, api } = makeHarness();
    const res = await call(app, 'POST', '/v1/jobs', job(schedule));
    expect(res.status).toBe(400);
    expect(res.json.errors.map((e: { field: string }) => e.field)).toContain(field);
    expect(api.created).toEqual([]);
  });
});

describe('scopes', () => {
  const admin = 'admin-token-0123456789';
  const reader = 'read-token-0123456789';
  const writer = 'write-token-0123456789';
  const tokens = () =>
    new TokenSet(admin, [
      { name: 'dashboard', scope: 'read', token: reader },
      { name: 'ci', scope: 'write', token: writer },
    ]);
  const bearer = (t: string) => ({ authorization: `Bearer ${t}` });

  it('reads need read; put and delete need admin (a write token is refused 403)', async () => {
    const { app } = makeHarness({ authToken: admin, tokens: tokens() });
    expect((await call(app, 'PUT', '/v1/calendars/hol', body)).status).toBe(401);
    const denied = await call(app, 'PUT', '/v1/calendars/hol', body, bearer(writer));
    expect(denied.status).toBe(403);
    expect(denied.json).toMatchObject({ code: 'forbidden' });
    expect((await call(app, 'PUT', '/v1/calendars/hol', body, bearer(admin))).status).toBe(201);
    expect((await call(app, 'GET', '/v1/calendars', undefined, bearer(reader))).status).toBe(200);
    expect((await call(app, 'GET', '/v1/calendars/hol', undefined, bearer(reader))).status).toBe(200);
    expect((await call(app, 'DELETE', '/v1/calendars/hol', undefined, bearer(writer))).status).toBe(403);
    expect((await call(app, 'DELETE', '/v1/calendars/hol', undefined, bearer(admin))).status).toBe(204);
  });
});
