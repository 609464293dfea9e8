import { describe, expect, it } from 'vitest';
import { errorClassOf } from './failure.js';

describe('errorClassOf', () => {
  it('classes a failed attempt by its status, else by the error text the dispatcher writes', () => {
    const cases: Array<[number | null, string | null, string]> = [
      [302, 'HTTP 302 (redirect to https://h/p not followed)', 'http_3xx'],
      [404, 'HTTP 404', 'http_4xx'],
      [429, 'HTTP 429', 'http_4xx'],
      [503, 'HTTP 503', 'http_5xx'],
      [600, 'HTTP 600', 'http_5xx'],
      [null, 'timeout after 10000 ms', 'timeout'],
      [null, 'ECONNREFUSED', 'connection'],
      [null, 'ENOTFOUND', 'connection'],
      [null, 'UND_ERR_SOCKET: other side closed', 'connection'],
      [null, 'DEPTH_ZERO_SELF_SIGNED_CERT: self-signed certificate', 'tls'],
      [null, 'ERR_TLS_CERT_ALTNAME_INVALID: Hostname/IP does not match certificate', 'tls'],
      [null, "callback target 127.0.0.1:8080 refused by policy (this node's API listener)", 'target_refused'],
      [null, 'HTTPParserError: Response does not match the HTTP/1.1 protocol', 'other'],
      [null, 'task hook not found', 'other'],
      [null, null, 'other'],
    ];
    for (const [status, error, want] of cases) expect([status, error, errorClassOf(status, error)]).toEqual([status, error, want]);
  });
});
