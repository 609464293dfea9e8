import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { signBody, verifySignature } from './signature.js';

const body = new TextEncoder().encode('{"job":"a","n":1}');
const secret = 'topsecret';
const t = 1_700_000_000_000;

describe('signBody / verifySignature', () => {
  it('matches an HMAC computed independently with node:crypto', () => {
    const expected = createHmac('sha256', secret).update(`${t}.{"job":"a","n":1}`).digest('hex');
    expect(signBody(secret, t, body)).toBe(`t=${t},v1=${expected}`);
  });

  it('verifies within the tolerance, on either side of the clock', () => {
    const header = signBody(secret, t, body);
    expect(verifySignature(secret, header, body, 300_000, t)).toBe(true);
    expect(verifySignature(secret, header, body, 300_000, t + 300_000)).toBe(true);
    expect(verifySignature(secret, header, body, 300_000, t - 300_000)).toBe(true);
    expect(verifySignature(secret, header, body, 300_000, t + 300_001)).toBe(false);
  });

  it('refuses another secret, another body, a shifted timestamp and malformed headers', () => {
    const header = signBody(secret, t, body);
    const v1 = header.split('v1=')[1];
    expect(verifySignature('other', header, body, 1000, t)).toBe(false);
    expect(verifySignature(secret, header, new TextEncoder().encode('{"job":"b","n":1}'), 1000, t)).toBe(false);
    expect(verifySignature(secret, `t=${t + 1},v1=${v1}`, body, 1000, t)).toBe(false);
    for (const bad of ['', 'garbage', `v1=${v1}`, `t=${t}`, `t=abc,v1=${v1}`, `t=${t},v1=${v1.slice(2)}`, `t=${t},t=${t},v1=${v1}`]) {
      expect(verifySignature(secret, bad, body, 1000, t)).toBe(false);
    }
  });

  it('accepts the header when one of several v1 values matches (secret rotation)', () => {
    const header = signBody(secret, t, body);
    const stale = signBody('old-secret', t, body).split('v1=')[1];
    expect(verifySignature(secret, `${header},v1=${stale}`, body, 1000, t)).toBe(true);
    expect(verifySignature('old-secret', `${header},v1=${stale}`, body, 1000, t)).toBe(true);
  });

  it('signs the empty body', () => {
    const empty = new Uint8Array(0);
    const expected = createHmac('sha256', secret).update(`${t}.`).digest('hex');
    expect(signBody(secret, t, empty)).toBe(`t=${t},v1=${expected}`);
    expect(verifySignature(secret, signBody(secret, t, empty), empty, 0, t)).toBe(true);
  });
});
