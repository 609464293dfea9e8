import { describe, expect, it } from 'vitest';
import { TargetPolicy, formatAddress, parseAddress, parseCidr, parseCidrList, type Cidr } from './target-policy.js';

const cidr = (text: string): Cidr => parseCidr(text) as Cidr;

describe('addresses and CIDR ranges', () => {
  it('parses IPv4, IPv6, embedded and mapped forms', () => {
    expect(formatAddress(parseAddress('10.1.2.3')!)).toBe('10.1.2.3');
    expect(formatAddress(parseAddress('2001:DB8:0:0:0:0:0:1')!)).toBe('2001:db8::1');
    expect(formatAddress(parseAddress('::ffff:169.254.169.254')!)).toBe('169.254.169.254');
    expect(formatAddress(parseAddress('::ffff:a9fe:a9fe')!)).toBe('169.254.169.254');
    expect(formatAddress(parseAddress('[fe80::1%eth0]')!)).toBe('fe80::1');
    expect(formatAddress(parseAddress('::')!)).toBe('::');
    expect(parseAddress('example.com')).toBeNull();
    expect(parseAddress('1.2.3')).toBeNull();
  });

  it('parses CIDRs and refuses bad ones with the reason', () => {
    expect(cidr('10.0.0.0/8')).toMatchObject({ prefix: 8, text: '10.0.0.0/8' });
    expect(cidr('192.168.1.7')).toMatchObject({ prefix: 32 });
    expect(cidr('fd00::/8')).toMatchObject({ prefix: 8 });
    expect(cidr('::ffff:169.254.0.0/112')).toMatchObject({ prefix: 16, bytes: Uint8Array.from([169, 254, 0, 0]) });
    expect(parseCidr('10.0.0.1/8')).toMatch(/host bits set \(did you mean 10\.0\.0\.0\/8\?\)/);
    expect(parseCidr('10.0.0.0/33')).toMatch(/prefix length must be 0\.\.32/);
    expect(parseCidr('fd00::/129')).toMatch(/prefix length must be 0\.\.128/);
    expect(parseCidr('bogus/8')).toMatch(/not an IP address or CIDR range/);
    expect(parseCidr('10.0.0.0/')).toMatch(/prefix length/);
    expect(parseCidrList('10.0.0.0/8, fd00::/8')).toHaveLength(2);
    expect(parseCidrList('10.0.0.0/8,,fd00::/8')).toMatch(/empty entry/);
  });
});

describe('decision order', () => {
  it('by default: link-local and unspecified refused, loopback and private allowed', () => {
    const p = new TargetPolicy();
    for (const a of ['169.254.169.254', 'fe80::1', 'febf::1', '0.0.0.0', '0.1.2.3', '::', '::ffff:169.254.1.1', '::ffff:0.0.0.0']) {
      expect({ a, refused: p.refusal(a, 80) !== null }).toEqual({ a, refused: true });
    }
    for (const a of ['127.0.0.1', '::1', '10.0.0.1', '172.16.0.1', '192.168.1.1', 'fd00::1', '93.184.216.34', '2001:db8::1', 'fec0::1']) {
      expect({ a, refusal: p.refusal(a, 80) }).toEqual({ a, refusal: null });
    }
  });

  it('the longest matching explicit range decides, a deny wins a tie, and explicit rules beat the built-in list', () => {
    const p = new TargetPolicy({
      deny: [cidr('10.0.0.0/8'), cidr('192.168.0.0/16')],
      allow: [cidr('10.1.0.0/16'), cidr('169.254.169.254'), cidr('192.168.0.0/16')],
    });
    expect(p.refusal('10.2.0.1', 80)).toBe('callback target 10.2.0.1 refused by policy (--callback-deny 10.0.0.0/8)');
    expect(p.refusal('10.1.0.1', 80)).toBeNull();
    expect(p.refusal('192.168.1.1', 80)).toBe('callback target 192.168.1.1 refused by policy (--callback-deny 192.168.0.0/16)');
    expect(p.refusal('169.254.169.254', 80)).toBeNull();
    expect(p.refusal('169.254.169.253', 80)).toMatch(/link-local/);
    // An allow-list: deny everything, allow one range.
    const only = new TargetPolicy({ deny: [cidr('0.0.0.0/0'), cidr('::/0')], allow: [cidr('10.9.0.0/16')] });
    expect(only.refusal('10.9.1.1', 443)).toBeNull();
    expect(only.refusal('127.0.0.1', 443)).toMatch(/--callback-deny 0\.0\.0\.0\/0/);
    expect(only.refusal('::1', 443)).toMatch(/--callback-deny ::\/0/);
  });

  it('own listeners are refused whatever the rules; a wildcard listener covers every local address', () => {
    const p = new TargetPolicy({ allow: [cidr('0.0.0.0/0'), cidr('::/0')] });
    p.addListener('127.0.0.1', 8080, 'API listener');
    p.addListener('::', 8081, 'peer listener');
    expect(p.refusal('127.0.0.1', 8080)).toBe("callback target 127.0.0.1:8080 refused by policy (this node's API listener)");
    expect(p.refusal('::ffff:127.0.0.1', 8080)).toMatch(/API listener/);
    expect(p.refusal('127.0.0.2', 8080)).toBeNull();
    expect(p.refusal('127.0.0.1', 8082)).toBeNull();
    for (const a of ['127.0.0.1', '127.5.5.5', '::1', '0.0.0.0', '::']) expect(p.refusal(a, 8081)).toMatch(/peer listener/);
    expect(p.refusal('93.184.216.34', 8081)).toBeNull();
  });

  it('refusalForUrl checks literal hosts with their default ports and leaves names to connect time', () => {
    const p = new TargetPolicy();
    p.addListener('127.0.0.1', 80, 'API listener');
    expect(p.refusalForUrl('http://169.254.169.254/latest')).toMatch(/^callback target 169\.254\.169\.254 refused/);
    expect(p.refusalForUrl('http://[::ffff:a9fe:a9fe]/')).toMatch(/169\.254\.169\.254/);
    expect(p.refusalForUrl('http://127.0.0.1/')).toMatch(/API listener/);
    expect(p.refusalForUrl('https://127.0.0.1/')).toBeNull();
    expect(p.refusalForUrl('http://metadata.internal/')).toBeNull();
  });
});
