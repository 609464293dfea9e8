import { describe, expect, it } from 'vitest';
import { limits } from '../core/limits.js';
import { classifyError, classifyStatus, parseRetryAfterMs } from './classify.js';

describe('classifyStatus', () => {
  it('2xx succeeded, 408/429/5xx retryable, the rest permanent', () => {
    for (let s = 100; s <= 599; s++) {
      const want = s >= 200 && s < 300 ? 'succeeded' : s === 408 || s === 429 || s >= 500 ? 'retryable' : 'permanent';
      expect(classifyStatus(s)).toBe(want);
    }
  });
});

describe('parseRetryAfterMs', () => {
  const now = 1_700_000_000_000;
  it('reads delta-seconds and HTTP dates, clamped to [0, retryAfterMsMax]', () => {
    expect(parseRetryAfterMs('0', now)).toBe(0);
    expect(parseRetryAfterMs(' 30 ', now)).toBe(30_000);
    expect(parseRetryAfterMs(['5', '9'], now)).toBe(5_000);
    expect(parseRetryAfterMs(new Date(now + 90_000).toUTCString(), now)).toBe(90_000);
    expect(parseRetryAfterMs(new Date(now - 90_000).toUTCString(), now)).toBe(0);
    expect(parseRetryAfterMs('86400', now)).toBe(limits.retryAfterMsMax);
    expect(parseRetryAfterMs(new Date(now + 10 * limits.retryAfterMsMax).toUTCString(), now)).toBe(limits.retryAfterMsMax);
  });
  it('returns null for absent or unparsable values', () => {
    for (const v of [undefined, '', '-5', '1.5', 'soon', 'Mon, 99 Foo 2024']) expect(parseRetryAfterMs(v, now)).toBeNull();
  });
  it('clamps delta-seconds of any length to the bound instead of ignoring them', () => {
    expect(parseRetryAfterMs('99999999999999', now)).toBe(limits.retryAfterMsMax);
    expect(parseRetryAfterMs('9'.repeat(400), now)).toBe(limits.retryAfterMsMax);
    expect(parseRetryAfterMs('0000000000000000007', now)).toBe(7_000);
  });
  it('reads the three HTTP-date forms of RFC 9110, and nothing else as a date', () => {
    const at = Date.parse('2023-11-14T22:13:50Z'); // now + 30 s
    expect(at - now).toBe(30_000);
    expect(parseRetryAfterMs('Tue, 14 Nov 2023 22:13:50 GMT', now)).toBe(30_000);
    expect(parseRetryAfterMs('tue, 14 nov 2023 22:13:50 gmt', now)).toBe(30_000);
    expect(parseRetryAfterMs('Tuesday, 14-Nov-23 22:13:50 GMT', now)).toBe(30_000);
    expect(parseRetryAfterMs('Tue Nov 14 22:13:50 2023', now)).toBe(30_000);
    expect(parseRetryAfterMs('Sun Nov  6 08:49:37 1994', now)).toBe(0);
    // Texts Date.parse would read as dates (some of them an hour or more ahead): not HTTP dates, ignored.
    for (const v of ['x 2027', 'soon 2030', 'abc 100', 'Dec 3', 'May 5 2099', '2023-11-14T22:13:50Z', 'Tue, 14 Nov 2023 22:13:50 +0500', 'Tue, 14 Nov 2023 22:13:50', '1.5 s', '2 h', 'in 5 minutes']) {
      expect(parseRetryAfterMs(v, now), v).toBeNull();
    }
    // Impossible dates and times are refused, not rolled over.
    for (const v of ['Thu, 30 Feb 2023 00:00:00 GMT', 'Tue, 14 Nov 2023 24:00:00 GMT', 'Tue, 14 Nov 2023 22:61:00 GMT', 'Tue, 00 Nov 2023 22:13:50 GMT']) {
      expect(parseRetryAfterMs(v, now), v).toBeNull();
    }
  });
  it('reads a two-digit RFC 850 year as the latest such year not more than 50 years ahead', () => {
    expect(parseRetryAfterMs('Friday, 31-Dec-99 23:59:59 GMT', now)).toBe(0); // 1999, in the past
    expect(parseRetryAfterMs('Sunday, 31-Dec-73 23:59:59 GMT', now)).toBe(limits.retryAfterMsMax); // 2073
  });
});

describe('classifyError', () => {
  function withCode(code: string, message = 'boom'): Error {
    return Object.assign(new Error(message), { code });
  }
  it('reports system errors by code, retryable', () => {
    for (const code of ['ECONNRESET', 'ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EPIPE']) {
      expect(classifyError(withCode(code))).toEqual({ kind: 'retryable', error: code });
    }
  });
  it('fails invalid requests permanently, and retries other transport errors', () => {
    expect(classifyError(withCode('UND_ERR_INVALID_ARG', 'invalid x header'))).toEqual({
      kind: 'permanent',
      error: 'UND_ERR_INVALID_ARG: invalid x header',
    });
    expect(classifyError(withCode('UND_ERR_SOCKET', 'other side closed'))).toEqual({
      kind: 'retryable',
      error: 'UND_ERR_SOCKET: other side closed',
    });
    const parser = Object.assign(new Error('bad response'), { name: 'HTTPParserError' });
    expect(classifyError(parser)).toEqual({ kind: 'retryable', error: 'HTTPParserError: bad response' });
    expect(classifyError(withCode('ERR_STREAM_PREMATURE_CLOSE', 'closed')).error).toBe('ERR_STREAM_PREMATURE_CLOSE: closed');
    expect(classifyError(new Error('x'.repeat(1000))).error.length).toBeLessThanOrEqual(200);
  });
});
