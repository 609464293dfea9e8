/**
 * The clock routes (docs/api.md "The clock"): GET /v1/clock on a node without a manual clock, and what
 * POST /v1/clock:advance refuses before it reaches the node (a bad body: 400 naming the field; the system clock:
 * 409; a token without admin: 403). The manual clock's behaviour is tested on a real node (src/node/manual-clock.test.ts).
 */
import { describe, expect, it } from 'vitest';
import { clockLimits } from '../core/limits.js';
import { call, makeHarness } from './testing/harness.js';
import { TokenSet } from './tokens.js';

describe('GET /v1/clock', () => {
  it('a node without a manual clock: mode system and its now', async () => {
    const { app, api } = makeHarness();
    const r = await call(app, 'GET', '/v1/clock');
    expect(r.status).toBe(200);
    expect(r.json).toEqual({ mode: 'system', now: new Date(api.nowMs()).toISOString() });
    expect((await call(app, 'GET', '/v1/clock?x=1')).status).toBe(400);
  });
});

describe('POST /v1/clock:advance', () => {
  const bad: Array<[string, unknown, string]> = [
    ['no body fields', {}, 'body'],
    ['both forms', { by_ms: 1000, to: '2027-01-01T00:00:00Z' }, 'body'],
    ['by_ms zero', { by_ms: 0 }, 'by_ms'],
    ['by_ms negative', { by_ms: -5 }, 'by_ms'],
    ['by_ms a fraction', { by_ms: 1.5 }, 'by_ms'],
    ['by_ms over the limit', { by_ms: clockLimits.advanceByMsMax + 1 }, 'by_ms'],
    ['by_ms a string', { by_ms: '1000' }, 'by_ms'],
    ['to not a time', { to: 'tomorrow' }, 'to'],
    ['an unknown field', { by_ms: 1000, speed: 2 }, 'speed'],
  ];

  it.each(bad)('%s: 400 invalid_argument naming the field', async (_name, body, field) => {
    const { app } = makeHarness();
    const r = await call(app, 'POST', '/v1/clock:advance', body);
    expect(r.status).toBe(400);
    expect(r.json.code).toBe('invalid_argument');
    expect(r.json.errors.map((e: { field: string }) => e.field)).toContain(field);
  });

  it('a body that is not JSON, or none: 400', async () => {
    const { app } = makeHarness();
    expect((await call(app, 'POST', '/v1/clock:advance', '{"by_ms":')).json.errors[0].field).toBe('body');
    expect((await call(app, 'POST', '/v1/clock:advance')).json.errors[0].field).toBe('body');
  });

  it('a node on the system clock: 409 conflict saying how to get a manual one', async () => {
    const { app } = makeHarness();
    for (const body of [{ by_ms: 1000 }, { to: '2099-01-01T00:00:00Z' }, { to: 4_000_000_000_000 }]) {
      const r = await call(app, 'POST', '/v1/clock:advance', body);
      expect(r.status).toBe(409);
      expect(r.headers['content-type']).toBe('application/problem+json');
      expect(r.json.code).toBe('conflict');
      expect(r.json.detail).toContain('--clock manual');
    }
  });

  it('reading the clock needs read; advancing it needs admin', async () => {
    const admin = 'admin-token-0123456789';
    const tokens = new TokenSet(admin, [
      { name: 'dashboard', scope: 'read', token: 'read-token-0123456789' },
      { name: 'ci', scope: 'write', token: 'write-token-0123456789' },
    ]);
    const { app } = makeHarness({ authToken: admin, tokens });
    const bearer = (t: string) => ({ authorization: `Bearer ${t}` });
    expect((await call(app, 'GET', '/v1/clock', undefined, bearer('read-token-0123456789'))).status).toBe(200);
    const denied = await call(app, 'POST', '/v1/clock:advance', { by_ms: 1000 }, bearer('write-token-0123456789'));
    expect(denied.status).toBe(403);
    expect(denied.json.detail).toContain('needs admin');
    expect((await call(app, 'POST', '/v1/clock:advance', { by_ms: 1000 }, bearer(admin))).status).toBe(409);
  });
});
