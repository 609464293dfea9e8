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
