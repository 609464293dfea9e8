import { describe, expect, it } from 'vitest';
import { formatHostPort, parseHostPort, parseNodeId } from './addr.js';

class Refused extends Error {}
const fail = (reason: string): Error => new Refused(reason);

/** The reason parseHostPort gives for `text`, or null when it parses. */
function reasonFor(text: string, allowPortZero = false): string | null {
  try {
    parseHostPort(text, fail, allowPortZero);
    return null;
  } catch (err) {
    expect(err).toBeInstanceOf(Refused);
    return (err as Error).message;
  }
}

describe('parseHostPort', () => {
  it('reads an IPv4 address, a host name and a bracketed IPv6 address (brackets dropped)', () => {
    expect(parseHostPort('127.0.0.1:8080', fail)).toEqual({ host: '127.0.0.1', port: 8080 });
    expect(parseHostPort('node-2.example.com:7947', fail)).toEqual({ host: 'node-2.example.com', port: 7947 });
    expect(parseHostPort('[::1]:7947', fail)).toEqual({ host: '::1', port: 7947 });
    expect(parseHostPort('[fe80::1:2]:1', fail)).toEqual({ host: 'fe80::1:2', port: 1 });
  });

  it('takes port 0 (a free port) only when allowed', () => {
    expect(parseHostPort('127.0.0.1:0', fail, true)).toEqual({ host: '127.0.0.1', port: 0 });
    expect(reasonFor('127.0.0.1:0')).toBe('port must be in 1..65535, got 0');
    expect(reasonFor('127.0.0.1:70000', true)).toBe('port must be in 0..65535, got 70000');
  });

  it('refuses what is not HOST:PORT, naming the text', () => {
    expect(reasonFor('127.0.0.1')).toBe('expected HOST:PORT, got "127.0.0.1"');
    expect(reasonFor('::1:80')).toBe('expected HOST:PORT, got "::1:80"');
    expect(reasonFor('h:123456')).toBe('expected HOST:PORT, got "h:123456"');
    expect(reasonFor('')).toBe('expected HOST:PORT, got ""');
  });

  it('refuses a bad host: invalid characters, an IPv4 typo, a bad IPv6 address, a label starting with -', () => {
    expect(reasonFor('bad_host!:80')).toBe('invalid host "bad_host!"');
    expect(reasonFor('999.0.0.1:80')).toBe('invalid host "999.0.0.1"');
    expect(reasonFor('[::zz]:80')).toBe('invalid host "[::zz]"');
    expect(reasonFor('-node:80')).toBe('invalid host "-node"');
  });

  it('round-trips through formatHostPort', () => {
    for (const text of ['127.0.0.1:8080', '[::1]:7947', 'localhost:1']) {
      const { host, port } = parseHostPort(text, fail);
      expect(formatHostPort(host, port)).toBe(text);
    }
  });
});

describe('parseNodeId', () => {
  it('accepts [a-z0-9-]{1,32}', () => {
    expect(parseNodeId('n1', fail)).toBe('n1');
    expect(parseNodeId('a'.repeat(32), fail)).toBe('a'.repeat(32));
  });

  it('refuses anything else, naming the value', () => {
    expect(() => parseNodeId('N1', fail)).toThrow('node id must match [a-z0-9-]{1,32}, got "N1"');
    expect(() => parseNodeId('a'.repeat(33), fail)).toThrow(/^node id must match/);
    expect(() => parseNodeId('', fail)).toThrow('got ""');
    expect(() => parseNodeId(7, fail)).toThrow('node id must match [a-z0-9-]{1,32}, got 7');
    expect(() => parseNodeId(undefined, fail)).toThrow('got undefined');
  });
});
