/** `schedule.dst` and `schedule.spread_ms` through the API: parsing (problem+json fields), views, preview. */
import { describe, expect, it } from 'vitest';
import { limits } from '../core/limits.js';
import { spreadOffsetOf } from '../scheduler/schedule.js';
import { call, makeHarness } from './testing/harness.js';

const cb = { url: 'https://example.com/hook' };
const newYork = { cron: '30 1 * * *', timezone: 'America/New_York' };

describe('schedule.dst', () => {
  it('is stored with its defaults filled in and shown by GET', async () => {
    const { app } = makeHarness();
    const created = await call(app, 'POST', '/v1/jobs', { id: 'd1', callback: cb, schedule: { ...newYork, dst: { repeat: 'both' } } });
    expect(created.status).toBe(201);
    expect(created.json.schedule).toEqual({ ...newYork, dst: { gap: 'shift_forward', repeat: 'both' } });
    const got = await call(app, 'GET', '/v1/jobs/d1');
    expect(got.json.schedule.dst).toEqual({ gap: 'shift_forward', repeat: 'both' });
    const plain = await call(app, 'POST', '/v1/jobs', { id: 'd2', callback: cb, schedule: { ...newYork, dst: null } });
    expect(plain.json.schedule).toEqual(newYork);
  });

  it('preview shows each policy\'s runs on the fall-back day', async () => {
    const { app } = makeHarness();
    const from = '2027-11-06T12:00:00Z';
    const runs = async (dst: Record<string, string>) =>
      (await call(app, 'POST', '/v1/schedules:preview', { schedule: { ...newYork, dst }, from, count: 2 })).json.occurrences;
    expect(await runs({ repeat: 'first' })).toEqual(['2027-11-07T05:30:00.000Z', '2027-11-08T06:30:00.000Z']);
    expect(await runs({ repeat: 'last' })).toEqual(['2027-11-07T06:30:00.000Z', '2027-11-08T06:30:00.000Z']);
    expect(await runs({ repeat: 'both' })).toEqual(['2027-11-07T05:30:00.000Z', '2027-11-07T06:30:00.000Z']);
    const skip = await call(app, 'POST', '/v1/schedules:preview', {
      schedule: { cron: '30 2 * * *', timezone: 'America/New_York', dst: { gap: 'skip' } }, from: '2027-03-13T12:00:00Z', count: 1,
    });
    expect(skip.json.occurrences).toEqual(['2027-03-15T06:30:00.000Z']);
  });

  it('bad values are problem+json naming schedule.dst.<field>', async () => {
    const { app } = makeHarness();
    const cases: Array<[unknown, string]> = [
      [{ gap: 'later' }, 'schedule.dst.gap'],
      [{ repeat: 'twice' }, 'schedule.dst.repeat'],
      [{ fold: 'first' }, 'schedule.dst.fold'],
      ['skip', 'schedule.dst'],
    ];
    for (const [dst, field] of cases) {
      const res = await call(app, 'POST', '/v1/jobs', { callback: cb, schedule: { ...newYork, dst } });
      expect(res.status, field).toBe(400);
      expect(res.headers['content-type']).toContain('application/problem+json');
      expect(res.json.code).toBe('invalid_argument');
      expect(res.json.errors.map((e: { field: string }) => e.field)).toContain(field);
    }
    const notCron = await call(app, 'POST', '/v1/jobs', { callback: cb, schedule: { every_ms: 1000, dst: { gap: 'skip' } } });
    expect(notCron.status).toBe(400);
    expect(notCron.json.errors).toEqual([{ field: 'schedule.dst', message: 'only allowed with cron' }]);
  });
});

describe('schedule.spread_ms', () => {
  it('a job runs at its offset after the nominal time; GET shows spread_ms and the offset; preview with id agrees', async () => {
    const { app } = makeHarness(); // the harness clock reads 2026-12-01T09:00:00Z
    const schedule = { cron: '0 10 * * *', timezone: 'UTC', spread_ms: 3_600_000 };
    const offset = spreadOffsetOf('report-7', 3_600_000);
    const created = await call(app, 'POST', '/v1/jobs', { id: 'report-7', callback: cb, schedule });
    expect(created.status).toBe(201);
    expect(created.json.schedule).toEqual({ ...schedule, spread_offset_ms: offset });
    const first = Date.UTC(2026, 11, 1, 10) + offset;
    expect(created.json.next_fire_at).toBe(new Date(first).toISOString());
    const preview = await call(app, 'POST', '/v1/schedules:preview', { schedule, id: 'report-7', count: 2 });
    expect(preview.json.occurrences).toEqual([new Date(first).toISOString(), new Date(first + 86_400_000).toISOString()]);
    const nominal = await call(app, 'POST', '/v1/schedules:preview', { schedule, count: 1 });
    expect(nominal.json.occurrences).toEqual(['2026-12-01T10:00:00.000Z']);
  });

  it('every_ms: runs first at creation plus the offset; the view round-trips through PATCH', async () => {
    const { app } = makeHarness();
    const created = await call(app, 'POST', '/v1/jobs', { id: 'e1', callback: cb, schedule: { every_ms: 60_000, spread_ms: 60_000 } });
    const offset = spreadOffsetOf('e1', 60_000);
    expect(created.json.next_fire_at).toBe(new Date(Date.UTC(2026, 11, 1, 9) + offset).toISOString());
    const patched = await call(app, 'PATCH', '/v1/jobs/e1', { schedule: created.json.schedule });
    expect(patched.status).toBe(200);
    expect(patched.json.schedule.spread_offset_ms).toBe(offset);
  });

  it('bounds: 1 to an hour, at most every_ms, only on recurring schedules', async () => {
    const { app } = makeHarness();
    const refused: Array<[Record<string, unknown>, string]> = [
      [{ cron: '0 9 * * *', spread_ms: 0 }, 'schedule.spread_ms'],
      [{ cron: '0 9 * * *', spread_ms: limits.spreadMsMax + 1 }, 'schedule.spread_ms'],
      [{ cron: '0 9 * * *', spread_ms: 1.5 }, 'schedule.spread_ms'],
      [{ every_ms: 1000, spread_ms: 1001 }, 'schedule.spread_ms'],
      [{ at: '2027-01-01T00:00:00Z', spread_ms: 10 }, 'schedule.spread_ms'],
    ];
    for (const [schedule, field] of refused) {
      const res = await call(app, 'POST', '/v1/jobs', { callback: cb, schedule });
      expect(res.status, JSON.stringify(schedule)).toBe(400);
      expect(res.json.errors[0].field).toBe(field);
    }
    const max = await call(app, 'POST', '/v1/jobs', { callback: cb, schedule: { every_ms: 1000, spread_ms: 1000 } });
    expect(max.status).toBe(201);
    const badId = await call(app, 'POST', '/v1/schedules:preview', { schedule: { every_ms: 1000, spread_ms: 10 }, id: 'no spaces' });
    expect(badId.status).toBe(400);
    expect(badId.json.errors[0].field).toBe('id');
  });
});
