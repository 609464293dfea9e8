/**
 * Value parsers for flags and env vars. Each returns the parsed value or throws usageError with a reason that
 * names the flag, so the user sees exactly one line saying what to fix.
 */
import { readFileSync } from 'node:fs';
import * as addr from '../src/core/addr.js';
import { timeMsMax } from '../src/http/time.js';
import { formatHostPort, type HostPort } from '../src/core/addr.js';
import { usageError } from './io.js';

export { formatHostPort, type HostPort };

/** HOST:PORT (src/core/addr.ts); errors name `what`. Port 0 (pick a free port) only if allowed. */
export function parseHostPort(what: string, text: string, allowPortZero: boolean): HostPort {
  return addr.parseHostPort(text, (reason) => usageError(`${what}: ${reason}`), allowPortZero);
}

export function parseNodeId(what: string, text: string): string {
  return addr.parseNodeId(text, (reason) => usageError(`${what}: ${reason}`));
}

export interface PeerAddress extends HostPort {
  id: string;
}

/** `ID=HOST:PORT`, one member: errors about the address also name the id (`--peers (n2): ...`). */
export function parseMember(what: string, text: string): PeerAddress {
  const eq = text.indexOf('=');
  if (eq < 0) throw usageError(`${what}: expected ID=HOST:PORT, got ${JSON.stringify(text)}`);
  const id = parseNodeId(what, text.slice(0, eq));
  return { id, ...parseHostPort(`${what} (${id})`, text.slice(eq + 1), false) };
}

/**
 * `ID=HOST:PORT,...`: no empty entry, no duplicate id or address, never this node itself. `what` is the flag or
 * env var the list came from (`--peers` or `PUNCTUAL_PEERS`), named in every error.
 */
export function parsePeers(what: string, text: string, selfId: string): PeerAddress[] {
  const peers: PeerAddress[] = [];
  const seenIds = new Set<string>();
  const seenAddrs = new Set<string>();
  for (const entry of text.split(',')) {
    if (entry.trim() === '') throw usageError(`${what}: empty entry in ${JSON.stringify(text)}`);
    const peer = parseMember(what, entry);
    if (peer.id === selfId) throw usageError(`${what}: lists this node's own id ${JSON.stringify(peer.id)}`);
    if (seenIds.has(peer.id)) throw usageError(`${what}: duplicate node id ${JSON.stringify(peer.id)}`);
    const key = formatHostPort(peer.host, peer.port);
    if (seenAddrs.has(key)) throw usageError(`${what}: duplicate address ${key}`);
    seenIds.add(peer.id);
    seenAddrs.add(key);
    peers.push(peer);
  }
  return peers;
}

/** A decimal integer in [min, max] (no sign unless min < 0, no exponent, no fraction). */
export function parseIntIn(what: string, text: string, min: number, max: number): number {
  if (!/^-?\d+$/.test(text)) throw usageError(`${what}: expected an integer, got ${JSON.stringify(text)}`);
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < min || n > max) {
    throw usageError(`${what}: must be in ${min}..${max}, got ${text}`);
  }
  return n;
}

export function parseNumberIn(what: string, text: string, min: number, max: number): number {
  const n = /^\d+(\.\d+)?$/.test(text) ? Number(text) : NaN;
  if (!Number.isFinite(n) || n < min || n > max) {
    throw usageError(`${what}: expected a number in ${min}..${max}, got ${JSON.stringify(text)}`);
  }
  return n;
}

export function parseEnum<T extends string>(what: string, text: string, allowed: readonly T[]): T {
  if (!(allowed as readonly string[]).includes(text)) {
    throw usageError(`${what}: must be one of ${allowed.join('|')}, got ${JSON.stringify(text)}`);
  }
  return text as T;
}

export function parseBool(what: string, text: string): boolean {
  const t = text.toLowerCase();
  if (t === 'true' || t === '1' || t === 'yes') return true;
  if (t === 'false' || t === '0' || t === 'no') return false;
  throw usageError(`${what}: expected true|false|1|0|yes|no, got ${JSON.stringify(text)}`);
}

/** A secret read from a file: readable, trailing newline(s) dropped, not empty. */
export function readSecretFile(what: string, path: string): string {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw usageError(`${what}: cannot read ${JSON.stringify(path)}: ${errorCode(err)}`);
  }
  const secret = text.replace(/[\r\n]+$/, '');
  if (secret.trim() === '') throw usageError(`${what}: ${JSON.stringify(path)} is empty`);
  if (secret.includes('\n')) throw usageError(`${what}: ${JSON.stringify(path)} must hold one line`);
  return secret;
}

export function readTextFile(what: string, path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    throw usageError(`${what}: cannot read ${JSON.stringify(path)}: ${errorCode(err)}`);
  }
}

/** JSON text (a flag value or a file), with the parser's reason on failure. */
export function parseJson(what: string, text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    // one line: the parser's message quotes the text, newlines and all
    throw usageError(`${what}: invalid JSON: ${(err instanceof Error ? err.message : String(err)).replace(/\s+/g, ' ')}`);
  }
}

export function parseJsonObject(what: string, text: string): Record<string, unknown> {
  const value = parseJson(what, text);
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw usageError(`${what}: expected a JSON object`);
  }
  return value as Record<string, unknown>;
}

const rfc3339Pattern = /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

/**
 * A time as the API accepts it (docs/api.md): RFC 3339 with any offset (sent as is) or epoch milliseconds (sent
 * as a number).
 */
export function parseTime(what: string, text: string): string | number {
  // epoch ms up to the end of year 9999, as the API takes them
  if (/^\d+$/.test(text)) return parseIntIn(what, text, 0, timeMsMax);
  if (rfc3339Pattern.test(text) && Number.isFinite(Date.parse(text)) && calendarOk(text)) return text;
  throw usageError(`${what}: expected an RFC 3339 time (2026-12-01T09:00:00Z) or epoch ms, got ${JSON.stringify(text)}`);
}

/** Date.parse rolls 2030-02-30 over to March; the API refuses it, so refuse it here (exit 2, no request). */
function calendarOk(text: string): boolean {
  const [y, m, d] = text.slice(0, 10).split('-').map(Number);
  const [hh, mm, ss] = text.slice(11, 19).split(':').map(Number);
  if (m < 1 || m > 12 || hh > 23 || mm > 59 || ss > 59) return false;
  const daysInMonth = new Date(Date.UTC(y, m, 0)).getUTCDate();
  return d >= 1 && d <= daysInMonth;
}

/** `name:value` (the first colon splits; the name is lower-cased as the API stores it). */
export function parseHeader(what: string, text: string): [string, string] {
  const colon = text.indexOf(':');
  const name = colon > 0 ? text.slice(0, colon).trim().toLowerCase() : '';
  if (name === '' || !/^[!#$%&'*+.^_`|~0-9a-z-]+$/.test(name)) {
    throw usageError(`${what}: expected NAME:VALUE, got ${JSON.stringify(text)}`);
  }
  return [name, text.slice(colon + 1).trim()];
}

export function parseBase64(what: string, text: string): string {
  const ok = text.length % 4 === 0 && /^[A-Za-z0-9+/]*={0,2}$/.test(text);
  if (!ok) throw usageError(`${what}: expected standard base64 (A-Z a-z 0-9 + / with = padding)`);
  return text;
}

function errorCode(err: unknown): string {
  if (typeof err === 'object' && err !== null && 'code' in err) return String((err as { code: unknown }).code);
  return err instanceof Error ? err.message : String(err);
}
