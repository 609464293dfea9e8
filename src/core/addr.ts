/**
 * The one parser of the address formats: `HOST:PORT` and node ids, for the CLI's flags (cmd/parse.ts) and the
 * membership API (src/node/membership.ts). Each caller passes `fail`, which turns the one-line reason into its
 * own error (a usage error naming the flag, or invalid_argument naming the field), so both say the same thing.
 */
import { isIPv4, isIPv6 } from 'node:net';
import { nodeIdPattern } from './ids.js';

export interface HostPort {
  /** Without brackets for IPv6 (what net.Server.listen and undici expect). */
  host: string;
  port: number;
}

export type Fail = (reason: string) => Error;

const hostnamePattern = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

/** HOST:PORT with HOST an IPv4 address, a host name, or [IPv6]. Port 0 (pick a free port) only if allowed. */
export function parseHostPort(text: string, fail: Fail, allowPortZero = false): HostPort {
  const m = /^(\[[^\]]+\]|[^:[\]]+):(\d{1,5})$/.exec(text);
  if (m === null) throw fail(`expected HOST:PORT, got ${JSON.stringify(text)}`);
  const rawHost = m[1];
  const port = Number(m[2]);
  const host = rawHost.startsWith('[') ? rawHost.slice(1, -1) : rawHost;
  // a dotted all-digit host that is not a valid IPv4 address (999.0.0.1) is a typo, not a host name
  const looksNumeric = /^[\d.]+$/.test(host);
  const hostOk = rawHost.startsWith('[') ? isIPv6(host) : isIPv4(host) || (!looksNumeric && hostnamePattern.test(host));
  if (!hostOk) throw fail(`invalid host ${JSON.stringify(rawHost)}`);
  const portMin = allowPortZero ? 0 : 1;
  if (port < portMin || port > 65535) throw fail(`port must be in ${portMin}..65535, got ${m[2]}`);
  return { host, port };
}

/** The inverse of parseHostPort: IPv6 goes back into brackets. */
export function formatHostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/** A node id: [a-z0-9-]{1,32} (it names the node in the member book, logs and metrics). */
export function parseNodeId(text: unknown, fail: Fail): string {
  if (typeof text !== 'string' || !nodeIdPattern.test(text)) {
    throw fail(`node id must match [a-z0-9-]{1,32}, got ${JSON.stringify(text) ?? String(text)}`);
  }
  return text;
}
