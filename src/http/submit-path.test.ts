/**
 * The submission path's shortcuts give the answers of the long way: App.begin (routing and authentication once,
 * before the body) answers as precheck + bodyLimitFor + handle do, and the request digest stays the sha256 of the
 * key-sorted JSON it always was (digests are stored with jobs: a repeat after an upgrade must still match).
 */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { limits } from '../core/limits.js';
import type { ApiResponse, App } from './app.js';
import { canonicalJson, requestDigest, sha256Hex } from './idempotency.js';
import { makeHarness } from './testing/harness.js';
import { TokenSet } from './tokens.js';

const cb = { url: 'https://example.com/hook' };
const enc = (v: unknown): Uint8Array => new TextEncoder().encode(JSON.stringify(v));

function bodyOf(res: ApiResponse): unknown {
  return JSON.parse(res.body as string);
}

/** begin() then finish(body), or its refusal. */
async function viaBegin(app: App, method: string, path: string, headers: Record<string, string>, body: Uint8Array): Promise<ApiResponse> {
  const begun = app.begin!({ method, path, headers });
  if (begun.refusal !== null) return begun.refusal;
  return begun.finish(body);
}

describe('App.begin', () => {
  it('creates a job as handle() does (201, Location, the same view)', async () => {
    const a = makeHarness();
    const b = makeHarness();
    const body = enc({ id: 'j1', callback: cb, schedule: { delay_ms: 5000 } });
    const viaHandle = await a.app.handle({ method: 'POST', path: '/v1/jobs', headers: {}, body });
    const begun = await viaBegin(b.app, 'POST', '/v1/jobs', {}, body);
    expect(begun.status).toBe(201);
    expect(begun.headers).toEqual(viaHandle.headers);
    expect(bodyOf(begun)).toEqual(bodyOf(viaHandle));
    expect(b.logs.filter((l) => l.includes('"access"'))).toHaveLength(1);
  });

  it('gives the body limit of the route: 64 MiB for the batch, 1 MiB elsewhere', () => {
    const { app } = makeHarness();
    const batch = app.begin!({ method: 'POST', path: '/v1/jobs%3Abatch', headers: {} });
    const one = app.begin!({ method: 'POST', path: '/v1/jobs', headers: {} });
    expect(batch.refusal === null && batch.bodyLimit).toBe(limits.batchBodyBytesMax);
    expect(one.refusal === null && one.bodyLimit).toBe(limits.requestBodyBytesMax);
  });

  it('refuses before the body what precheck refuses (401, 403, 404, 405), with the same answer and one access line', () => {
    const tokens = new TokenSet(null, [{ name: 'reader', scope: 'read', token: 'r-token' }]);
    const { app, logs } = makeHarness({ tokens });
    const cases: Array<[string, string, Record<string, string>, number]> = [
      ['POST', '/v1/jobs', {}, 401],
      ['POST', '/v1/jobs', { authorization: 'Bearer r-token' }, 403],
      ['GET', '/v1/nope', { authorization: 'Bearer r-token' }, 404],
      ['DELETE', '/v1/jobs', { authorization: 'Bearer r-token' }, 405],
    ];
    for (const [method, path, headers, status] of cases) {
      const pre = app.precheck!({ method, path, headers });
      const before = logs.length;
      const begun = app.begin!({ method, path, headers });
      expect(begun.refusal?.status).toBe(status);
      expect(begun.refusal).toEqual(pre);
      expect(logs.length - before).toBe(method === 'GET' ? 0 : 1);
    }
  });

  it('answers a malformed target after its body, as handle() does', async () => {
    const { app } = makeHarness();
    const begun = app.begin!({ method: 'GET', path: '/v1/jobs/%E0%A4%A', headers: {} });
    expect(begun.refusal).toBeNull();
    const res = begun.refusal === null ? await begun.finish(new Uint8Array(0)) : begun.refusal;
    const direct = await app.handle({ method: 'GET', path: '/v1/jobs/%E0%A4%A', headers: {}, body: new Uint8Array(0) });
    expect(res.status).toBe(400);
    expect(bodyOf(res)).toEqual(bodyOf(direct));
  });
});

describe('request digest', () => {
  it('is the sha256 hex of the key-sorted JSON, undefined members left out, as before', () => {
    expect(sha256Hex('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    expect(canonicalJson({ b: 1, a: undefined, 'é"k': [undefined, { y: 'ü', x: [] }], c: {} })).toBe(
      '{"b":1,"c":{},"é\\"k":[null,{"x":[],"y":"ü"}]}',
    );
    expect(canonicalJson([])).toBe('[]');
    expect(canonicalJson({})).toBe('{}');
    expect(canonicalJson({ a: undefined })).toBe('{}');
    const body = { task: 'télé', schedule: { at: 1_700_000_000_000 }, id: 'j-1' };
    const expected = createHash('sha256').update('{"id":"j-1","schedule":{"at":1700000000000},"task":"télé"}', 'utf8').digest('hex');
    expect(requestDigest(body)).toBe(expected);
  });
});
