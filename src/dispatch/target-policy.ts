/**
 * The SSRF guard: which addresses a callback may connect to. The check runs on the address really connected to
 * (a custom DNS lookup handed to the socket, and a connector that checks literal addresses), so a name that
 * resolves to a safe address when the task is written and to the metadata service later (DNS rebinding) is
 * still refused.
 *
 * Decision for an address and port, in this order:
 * 1. this node's own API and peer listeners: always refused (no rule can open them);
 * 2. the explicit rules (`--callback-allow`, `--callback-deny`): the matching rule with the longest prefix
 *    decides; at equal length a deny wins;
 * 3. the built-in deny list (unspecified and link-local addresses);
 * 4. everything else (loopback and private ranges included) is allowed.
 * IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) are judged as the IPv4 address they carry.
 */
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { isIP, type LookupFunction } from 'node:net';
import { networkInterfaces } from 'node:os';
import { buildConnector } from 'undici';
import { limits } from '../core/limits.js';
import { targetRefusedCode } from './classify.js';

export interface Cidr {
  /** 4 or 16 bytes, host bits cleared. */
  bytes: Uint8Array;
  prefix: number;
  /** As given, for messages. */
  text: string;
}

interface Rule extends Cidr {
  allow: boolean;
}

/** Refused whatever the rules say, unless an explicit allow rule lifts them. */
const builtinDenyText: ReadonlyArray<[string, string]> = [
  ['0.0.0.0/8', 'unspecified'],
  ['::/128', 'unspecified'],
  ['169.254.0.0/16', 'link-local'],
  ['fe80::/10', 'link-local'],
];

/** The error a refused connect fails with: classifyError makes it a permanent failure. */
export class TargetRefusedError extends Error {
  override name = 'TargetRefusedError';
  readonly code = targetRefusedCode;
}

export interface TargetPolicyOptions {
  allow?: readonly Cidr[];
  deny?: readonly Cidr[];
}

/** A policy as plain data (structured-clone safe): the firing thread rebuilds the same policy from it. */
export interface TargetPolicyData {
  allow: string[];
  deny: string[];
  listeners: Array<[host: string, port: number, what: string]>;
}

export class TargetPolicy {
  private readonly rules: Rule[];
  private readonly listeners: Array<[string, number, string]> = [];
  private readonly changeHooks: Array<() => void> = [];
  private readonly builtin: Array<Rule & { why: string }>;
  /** Own listeners: "host port" keys of specific addresses, and ports bound on a wildcard address. */
  private readonly listenerKeys = new Map<string, string>();
  private readonly wildcardPorts = new Map<number, string>();

  constructor(options: TargetPolicyOptions = {}) {
    this.rules = [
      ...(options.deny ?? []).map((c) => ({ ...c, allow: false })),
      ...(options.allow ?? []).map((c) => ({ ...c, allow: true })),
    ];
    this.builtin = builtinDenyText.map(([text, why]) => ({ ...(parseCidr(text) as Cidr), allow: false, why }));
  }

  /**
   * Marks one of this node's listeners (what it bound, after the port is known). A wildcard host (0.0.0.0, ::)
   * or a host name means every local address with that port.
   */
  addListener(host: string, port: number, what: string): void {
    this.listeners.push([host, port, what]);
    for (const hook of this.changeHooks) hook();
    const bytes = parseAddress(host);
    if (bytes === null || isZero(bytes)) this.wildcardPorts.set(port, what);
    else this.listenerKeys.set(`${formatAddress(bytes)} ${port}`, what);
  }

  /** The rules and listeners as data, for the firing thread's copy (TargetPolicy.fromData). */
  toData(): TargetPolicyData {
    return {
      allow: this.rules.filter((r) => r.allow).map((r) => r.text),
      deny: this.rules.filter((r) => !r.allow).map((r) => r.text),
      listeners: this.listeners.map((l) => [...l]),
    };
  }

  static fromData(data: TargetPolicyData): TargetPolicy {
    const policy = targetPolicyFromLists(data.allow, data.deny);
    for (const [host, port, what] of data.listeners) policy.addListener(host, port, what);
    return policy;
  }

  /** Runs `hook` after every addListener (a copy of the policy elsewhere must learn it). */
  onChange(hook: () => void): void {
    this.changeHooks.push(hook);
  }

  /** Why a connection to address:port is refused, or null when it is allowed. */
  refusal(address: string, port: number): string | null {
    const bytes = parseAddress(address);
    if (bytes === null) return `callback target ${address} refused by policy (not an IP address)`;
    const shown = formatAddress(bytes);
    const own = this.ownListener(bytes, port);
    if (own !== null) return `callback target ${shown}:${port} refused by policy (this node's ${own})`;
    const rule = longestMatch(this.rules, bytes);
    if (rule !== null) return rule.allow ? null : `callback target ${shown} refused by policy (--callback-deny ${rule.text})`;
    for (const b of this.builtin) {
      if (contains(b, bytes)) return `callback target ${shown} refused by policy (${b.why} ${b.text})`;
    }
    return null;
  }

  /**
   * For a URL whose host is a literal IP address, why it would be refused (checked when a task or job is
   * written); null when allowed or when the host is a name (names are checked when connecting).
   */
  refusalForUrl(url: string): string | null {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      return null;
    }
    const host = parsed.hostname.startsWith('[') ? parsed.hostname.slice(1, -1) : parsed.hostname;
    if (isIP(host) === 0) return null;
    const port = parsed.port !== '' ? Number(parsed.port) : parsed.protocol === 'https:' ? 443 : 80;
    return this.refusal(host, port);
  }

  /**
   * The undici `connect` option. A literal address is checked here; a name goes through a lookup that checks
   * every address it resolves to, and the socket connects only to those. A lookup is not told the port, so
   * there is one undici connector (with its lookup) per port.
   */
  connector(): buildConnector.connector {
    const byPort = new Map<number, buildConnector.connector>();
    return (options, callback) => {
      const host = options.hostname.startsWith('[') ? options.hostname.slice(1, -1) : options.hostname;
      const port = Number(options.port) || (options.protocol === 'https:' ? 443 : 80);
      const why = isIP(host) !== 0 ? this.refusal(host, port) : null;
      if (why !== null) {
        // Asynchronously, as a real connect failure would be.
        queueMicrotask(() => callback(new TargetRefusedError(why), null));
        return;
      }
      let connect = byPort.get(port);
      if (connect === undefined) {
        if (byPort.size >= limits.dispatchConnectorPortsMax) byPort.clear();
        connect = buildConnector({ lookup: this.lookupFor(port), timeout: limits.dispatchConnectTimeoutMs });
        byPort.set(port, connect);
      }
      connect(options, callback);
    };
  }

  /** A dns.lookup that fails unless every address the name resolves to is allowed (with this port). */
  lookupFor(port: number): LookupFunction {
    return (hostname, options, callback) => {
      dnsLookup(hostname, { ...options, all: true }, (err, addresses: LookupAddress[]) => {
        if (err !== null) return callback(err, '', 0);
        for (const a of addresses) {
          const why = this.refusal(a.address, port);
          if (why !== null) return callback(new TargetRefusedError(`${why} (resolved from ${hostname})`), '', 0);
        }
        if (options.all === true) return (callback as AllCallback)(null, addresses);
        const first = addresses[0];
        if (first === undefined) return callback(Object.assign(new Error(`no address for ${hostname}`), { code: 'ENOTFOUND' }), '', 0);
        callback(null, first.address, first.family);
      });
    };
  }

  private ownListener(bytes: Uint8Array, port: number): string | null {
    const key = `${formatAddress(bytes)} ${port}`;
    const specific = this.listenerKeys.get(key);
    if (specific !== undefined) return specific;
    const wildcard = this.wildcardPorts.get(port);
    if (wildcard !== undefined && isLocal(bytes)) return wildcard;
    return null;
  }
}

type AllCallback = (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void;

/** The matching rule with the longest prefix; a deny wins a tie (deny rules come first in the list). */
function longestMatch(rules: readonly Rule[], bytes: Uint8Array): Rule | null {
  let best: Rule | null = null;
  for (const r of rules) {
    if (!contains(r, bytes)) continue;
    if (best === null || r.prefix > best.prefix) best = r;
  }
  return best;
}

function contains(c: Cidr, bytes: Uint8Array): boolean {
  if (c.bytes.length !== bytes.length) return false;
  const whole = c.prefix >> 3;
  for (let i = 0; i < whole; i++) if (c.bytes[i] !== bytes[i]) return false;
  const rest = c.prefix & 7;
  if (rest === 0) return true;
  const mask = (0xff << (8 - rest)) & 0xff;
  return (c.bytes[whole]! & mask) === (bytes[whole]! & mask);
}

function isZero(bytes: Uint8Array): boolean {
  return bytes.every((b) => b === 0);
}

/** Loopback, unspecified, or an address of one of this host's interfaces. */
function isLocal(bytes: Uint8Array): boolean {
  if (bytes.length === 4 && (bytes[0] === 127 || bytes[0] === 0)) return true;
  if (bytes.length === 16 && (isZero(bytes) || (isZero(bytes.subarray(0, 15)) && bytes[15] === 1))) return true;
  const shown = formatAddress(bytes);
  for (const list of Object.values(networkInterfaces())) {
    for (const i of list ?? []) {
      const own = parseAddress(i.address);
      if (own !== null && formatAddress(own) === shown) return true;
    }
  }
  return false;
}

/**
 * An IPv4 or IPv6 address as 4 or 16 bytes; an IPv4-mapped IPv6 address comes back as its 4 IPv4 bytes, so it
 * meets the IPv4 rules. A zone (`fe80::1%eth0`) is ignored. null when not an address.
 */
export function parseAddress(text: string): Uint8Array | null {
  const bare = text.startsWith('[') && text.endsWith(']') ? text.slice(1, -1) : text;
  const zoneAt = bare.indexOf('%');
  const host = zoneAt >= 0 ? bare.slice(0, zoneAt) : bare;
  const family = isIP(host);
  if (family === 4) return Uint8Array.from(host.split('.').map(Number));
  if (family !== 6) return null;
  const bytes = parseIPv6(host);
  const mapped = bytes.subarray(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff;
  return mapped ? bytes.slice(12) : bytes;
}

/** Only called on text that net.isIPv6 accepted. */
function parseIPv6(text: string): Uint8Array {
  const out = new Uint8Array(16);
  let words = text;
  // An embedded IPv4 tail (::ffff:1.2.3.4) becomes two hex words.
  const lastColon = words.lastIndexOf(':');
  const tail = words.slice(lastColon + 1);
  if (tail.includes('.')) {
    const v4 = tail.split('.').map(Number);
    words = `${words.slice(0, lastColon + 1)}${((v4[0]! << 8) | v4[1]!).toString(16)}:${((v4[2]! << 8) | v4[3]!).toString(16)}`;
  }
  const [head, rest] = words.includes('::') ? words.split('::') : [words, null];
  const headWords = head === '' ? [] : head!.split(':');
  const restWords = rest === null || rest === '' ? [] : rest.split(':');
  const all = rest === null ? headWords : [...headWords, ...Array(8 - headWords.length - restWords.length).fill('0'), ...restWords];
  all.forEach((w, i) => {
    const v = parseInt(w, 16);
    out[i * 2] = v >> 8;
    out[i * 2 + 1] = v & 0xff;
  });
  return out;
}

/** Dotted IPv4, or the compressed lower-case IPv6 form (what WHATWG URLs show). */
export function formatAddress(bytes: Uint8Array): string {
  if (bytes.length === 4) return Array.from(bytes).join('.');
  return new URL(`http://[${Array.from({ length: 8 }, (_, i) => ((bytes[i * 2]! << 8) | bytes[i * 2 + 1]!).toString(16)).join(':')}]/`).hostname.slice(1, -1);
}

/**
 * `a.b.c.d/n`, `x:y::/n`, or a bare address (/32, /128). Host bits must be zero (`10.0.0.1/8` is probably a
 * typo). An IPv4-mapped IPv6 range (::ffff:0:0/96 and longer) becomes the IPv4 range. A string is the problem.
 */
export function parseCidr(text: string): Cidr | string {
  const slash = text.indexOf('/');
  const addressText = slash < 0 ? text : text.slice(0, slash);
  const bytes = parseAddress(addressText);
  if (bytes === null || addressText.includes('%')) return `${JSON.stringify(text)} is not an IP address or CIDR range`;
  const v6Mapped = bytes.length === 4 && isIP(addressText) === 6;
  const width = v6Mapped ? 128 : bytes.length * 8;
  let prefix = width;
  if (slash >= 0) {
    const p = text.slice(slash + 1);
    if (!/^\d{1,3}$/.test(p) || Number(p) > width) return `${JSON.stringify(text)}: prefix length must be 0..${width}`;
    prefix = Number(p);
  }
  if (v6Mapped) {
    if (prefix < 96) return `${JSON.stringify(text)}: an IPv4-mapped range needs a prefix of at least 96`;
    prefix -= 96;
  }
  for (let bit = prefix; bit < bytes.length * 8; bit++) {
    if ((bytes[bit >> 3]! >> (7 - (bit & 7))) & 1) return `${JSON.stringify(text)}: host bits set (did you mean ${formatAddress(masked(bytes, prefix))}/${slash < 0 ? prefix : text.slice(slash + 1)}?)`;
  }
  return { bytes, prefix, text };
}

function masked(bytes: Uint8Array, prefix: number): Uint8Array {
  const out = bytes.slice();
  for (let bit = prefix; bit < out.length * 8; bit++) out[bit >> 3]! &= ~(1 << (7 - (bit & 7)));
  return out;
}

/** A comma-separated list of CIDRs (a flag's value); a string is the first problem. */
export function parseCidrList(text: string): Cidr[] | string {
  const out: Cidr[] = [];
  const entries = text.split(',').map((e) => e.trim());
  if (entries.length > limits.callbackTargetRulesMax) return `at most ${limits.callbackTargetRulesMax} ranges`;
  for (const entry of entries) {
    if (entry === '') return `empty entry in ${JSON.stringify(text)}`;
    const c = parseCidr(entry);
    if (typeof c === 'string') return c;
    out.push(c);
  }
  return out;
}

/** The policy of `--callback-allow` / `--callback-deny` lists (already validated by the CLI; throws if not). */
export function targetPolicyFromLists(allow: readonly string[] = [], deny: readonly string[] = []): TargetPolicy {
  const parse = (list: readonly string[]): Cidr[] =>
    list.map((text) => {
      const c = parseCidr(text);
      if (typeof c === 'string') throw new Error(`callback target policy: ${c}`);
      return c;
    });
  return new TargetPolicy({ allow: parse(allow), deny: parse(deny) });
}
