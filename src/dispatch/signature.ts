/**
 * Callback signatures. Every signed callback carries three families at once (docs/security.md, "Signing
 * callbacks"):
 *
 * - Standard Webhooks 1.0: `webhook-id` (the X-Deduplication-Key), `webhook-timestamp` (Unix seconds),
 *   `webhook-signature: v1,<base64 HMAC-SHA256(key, id + "." + timestamp + "." + body)>`, one space-separated
 *   entry per active secret. A `whsec_<base64>` secret's key is the decoded bytes; any other secret's key is its
 *   UTF-8 bytes.
 * - Punctual v2, which also binds the method and URL: `v2=<hex HMAC-SHA256(key, canonicalV2)>` inside
 *   X-Punctual-Signature, where canonicalV2 = method "\n" url "\n" dedupKey "\n" t "\n" body (same key).
 * - Punctual v1 (deprecated, kept one release): `v1=<hex HMAC-SHA256(secret as UTF-8, t + "." + body)>`.
 *
 * `X-Punctual-Signature: t=<unix ms>,v1=<hex>[,v1=<hex>],v2=<hex>[,v2=<hex>]`: every entry of the current
 * secret first, then those of the next one while both are set. The timestamp is inside every MAC so a receiver
 * can refuse replays older than its tolerance.
 */
import { createHmac, hash, timingSafeEqual } from 'node:crypto';
import { limits } from '../core/limits.js';

const hexDigestChars = 64;
/** The Standard Webhooks secret prefix: the rest is the key in base64. */
export const whsecPrefix = 'whsec_';

/** What the v2 and Standard Webhooks signatures bind, besides the secret. */
export interface SignedRequest {
  /** Upper case, as sent. */
  method: string;
  /** As requested: scheme://host[:port]/path?query, no fragment. */
  url: string;
  /** X-Deduplication-Key, also webhook-id. */
  dedupKey: string;
  /** The sending node's clock, epoch ms: `t` of X-Punctual-Signature; webhook-timestamp is it in seconds. */
  unixMs: number;
  body: Uint8Array;
}

export interface SignatureHeaders {
  webhookTimestamp: string;
  webhookSignature: string;
  punctualSignature: string;
}

/** The HMAC key of v2 and Standard Webhooks: a whsec_ secret's decoded bytes, else the secret's UTF-8 bytes. */
export function signingKey(secret: string): Buffer {
  return secret.startsWith(whsecPrefix) ? Buffer.from(secret.slice(whsecPrefix.length), 'base64') : Buffer.from(secret, 'utf8');
}

function v1Hex(secret: string, unixMs: number, body: Uint8Array): string {
  return createHmac('sha256', secret).update(`${unixMs}.`).update(body).digest('hex');
}

/** The bytes v2 signs, before the body: method, url, dedupKey and t, each followed by a line feed. */
export function canonicalV2Head(r: Omit<SignedRequest, 'body'>): string {
  return `${r.method}\n${r.url}\n${r.dedupKey}\n${r.unixMs}\n`;
}

function v2Hex(key: Buffer, r: SignedRequest): string {
  return createHmac('sha256', key).update(canonicalV2Head(r)).update(r.body).digest('hex');
}

/** One Standard Webhooks entry: `v1,<base64>`. */
export function standardSignature(key: Buffer, id: string, timestampSeconds: number, body: Uint8Array): string {
  return 'v1,' + createHmac('sha256', key).update(`${id}.${timestampSeconds}.`).update(body).digest('base64');
}

/** Every signature header of one attempt, for the active secrets (current first, then next). */
export function signatureHeaders(secrets: readonly string[], r: SignedRequest): SignatureHeaders {
  return new Signer(secrets).sign(r);
}

const sha256BlockBytes = 64;
const sha256DigestBytes = 32;

/**
 * HMAC-SHA256 with the key's padded blocks computed once: two one-shot hashes per MAC instead of an Hmac object
 * (and its key schedule) per MAC. The sender's path only; the verify functions keep node:crypto's Hmac, so the
 * tests check one against the other.
 */
class HmacKey {
  private readonly inner: Buffer;
  private readonly outer: Buffer;

  constructor(key: Uint8Array) {
    const k = key.length > sha256BlockBytes ? hash('sha256', key, 'buffer') : key;
    this.inner = Buffer.alloc(sha256BlockBytes, 0x36);
    this.outer = Buffer.alloc(sha256BlockBytes + sha256DigestBytes, 0x5c);
    for (let i = 0; i < k.length; i++) {
      this.inner[i] ^= k[i];
      this.outer[i] ^= k[i];
    }
  }

  /** HMAC(key, prefix as UTF-8 + body). */
  mac(prefix: string, body: Uint8Array, encoding: 'hex' | 'base64'): string {
    const need = sha256BlockBytes + prefix.length * 3 + body.length;
    if (scratch.length < need && need <= limits.signScratchBytesMax) scratch = Buffer.allocUnsafe(limits.signScratchBytesMax);
    const input = scratch.length >= need ? scratch : Buffer.allocUnsafe(need);
    this.inner.copy(input, 0);
    const end = sha256BlockBytes + input.write(prefix, sha256BlockBytes, 'utf8');
    input.set(body, end);
    const innerDigest = hash('sha256', input.subarray(0, end + body.length), 'buffer');
    innerDigest.copy(this.outer, sha256BlockBytes);
    return hash('sha256', this.outer, encoding);
  }
}

/**
 * Shared by every HmacKey: a MAC's input is copied here (the sender runs on one thread, nothing awaits inside).
 * It grows once to limits.signScratchBytesMax; a MAC over more is copied into a buffer of its own.
 */
let scratch = Buffer.allocUnsafe(4096);

/**
 * The signing side for one set of secrets (current, then next), kept as long as the callback spec that holds
 * them: each secret's keys are decoded and padded once, not once per attempt.
 */
export class Signer {
  private readonly keys: Array<{ key: HmacKey; v1: HmacKey }>;

  constructor(secrets: readonly string[]) {
    this.keys = secrets.map((secret) => ({ key: new HmacKey(signingKey(secret)), v1: new HmacKey(Buffer.from(secret, 'utf8')) }));
  }

  sign(r: SignedRequest): SignatureHeaders {
    const seconds = Math.floor(r.unixMs / 1000);
    const standardHead = `${r.dedupKey}.${seconds}.`;
    const v1Head = `${r.unixMs}.`;
    const v2Head = canonicalV2Head(r);
    let standard = '';
    let v1 = '';
    let v2 = '';
    for (const { key, v1: v1Key } of this.keys) {
      standard += (standard.length === 0 ? 'v1,' : ' v1,') + key.mac(standardHead, r.body, 'base64');
      v1 += ',v1=' + v1Key.mac(v1Head, r.body, 'hex');
      v2 += ',v2=' + key.mac(v2Head, r.body, 'hex');
    }
    return { webhookTimestamp: String(seconds), webhookSignature: standard, punctualSignature: `t=${r.unixMs}${v1}${v2}` };
  }
}

/** `t={unixMs},v1={hex HMAC-SHA256(secret, t + "." + body)}`: the v1 scheme alone. */
export function signBody(secret: string, unixMs: number, body: Uint8Array): string {
  return `t=${unixMs},v1=${v1Hex(secret, unixMs, body)}`;
}

interface ParsedHeader {
  unixMs: number;
  v1: string[];
  v2: string[];
}

/** `t=...,v1=...,v2=...`; unknown names are skipped (a later version may add some); null when malformed. */
function parsePunctualHeader(header: string): ParsedHeader | null {
  let unixMs: number | null = null;
  const out: ParsedHeader = { unixMs: 0, v1: [], v2: [] };
  for (const part of header.split(',')) {
    const eq = part.indexOf('=');
    if (eq < 0) return null;
    const name = part.slice(0, eq).trim();
    const value = part.slice(eq + 1).trim();
    if (name === 't') {
      if (unixMs !== null || !/^\d{1,16}$/.test(value)) return null;
      unixMs = Number(value);
    } else if (name === 'v1') {
      out.v1.push(value);
    } else if (name === 'v2') {
      out.v2.push(value);
    }
  }
  if (unixMs === null) return null;
  out.unixMs = unixMs;
  return out;
}

/** Constant time per candidate and no early exit, so timing does not tell which candidate matched. */
function anyHexMatches(expectedHex: string, candidates: readonly string[]): boolean {
  const expected = Buffer.from(expectedHex, 'hex');
  let ok = false;
  for (const candidate of candidates) {
    if (candidate.length !== hexDigestChars || !/^[0-9a-f]+$/.test(candidate)) continue;
    if (timingSafeEqual(expected, Buffer.from(candidate, 'hex'))) ok = true;
  }
  return ok;
}

/**
 * v1: true when the header carries a timestamp within toleranceMs of nowMs (either side: clocks drift) and a v1
 * MAC that matches. Several v1 entries are accepted (a receiver rotating secrets may see more than one).
 */
export function verifySignature(
  secret: string,
  header: string,
  body: Uint8Array,
  toleranceMs: number,
  nowMs: number,
): boolean {
  const parsed = parsePunctualHeader(header);
  if (parsed === null || parsed.v1.length === 0) return false;
  if (Math.abs(nowMs - parsed.unixMs) > toleranceMs) return false;
  return anyHexMatches(v1Hex(secret, parsed.unixMs, body), parsed.v1);
}

/** v2: as verifySignature, over the method, URL and deduplication key as well. */
export function verifySignatureV2(
  secret: string,
  header: string,
  r: Omit<SignedRequest, 'unixMs'>,
  toleranceMs: number,
  nowMs: number,
): boolean {
  const parsed = parsePunctualHeader(header);
  if (parsed === null || parsed.v2.length === 0) return false;
  if (Math.abs(nowMs - parsed.unixMs) > toleranceMs) return false;
  return anyHexMatches(v2Hex(signingKey(secret), { ...r, unixMs: parsed.unixMs }), parsed.v2);
}

/** Standard Webhooks: the timestamp within toleranceSeconds of nowMs and one `v1,` entry that matches. */
export function verifyStandardWebhook(
  secret: string,
  headers: { id: string; timestamp: string; signature: string },
  body: Uint8Array,
  toleranceSeconds: number,
  nowMs: number,
): boolean {
  if (!/^\d{1,13}$/.test(headers.timestamp)) return false;
  const seconds = Number(headers.timestamp);
  if (Math.abs(nowMs / 1000 - seconds) > toleranceSeconds) return false;
  const expected = Buffer.from(standardSignature(signingKey(secret), headers.id, seconds, body).slice(3), 'base64');
  let ok = false;
  for (const entry of headers.signature.split(' ')) {
    if (!entry.startsWith('v1,')) continue;
    const given = Buffer.from(entry.slice(3), 'base64');
    if (given.length === expected.length && timingSafeEqual(given, expected)) ok = true;
  }
  return ok;
}
