/**
 * The receiver's side of callback signing (docs/security.md, "Signing callbacks"), written from the docs and not
 * from the node's signer, so the two check each other:
 *
 * - Standard Webhooks 1.0: `webhook-signature: v1,<base64 HMAC-SHA256(key, id.timestamp.body)>` (space-separated
 *   entries while two secrets are active), `webhook-timestamp` in Unix seconds.
 * - Punctual v2 in `X-Punctual-Signature` (`t=<ms>,v2=<hex>`), over method, URL, deduplication key, t and body:
 *   checked when the receiver says which URL it is registered under.
 * - Punctual v1 (deprecated, `t.body` keyed by the secret's UTF-8 bytes): only with `allowV1`, and only when
 *   neither of the others is there to check.
 *
 * Every MAC is compared in constant time against every secret with no early exit, so timing tells nothing about
 * which secret or entry matched. The signature is checked before the timestamp, so a tampered timestamp reads
 * as a bad signature and only a genuine old callback reads as a replay.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { clientLimits } from '../core/limits.js';

export type SignatureScheme = 'standard-webhooks' | 'punctual-v2' | 'punctual-v1';

/** Why a callback was refused. */
export type SignatureFailure =
  | 'no_secret'
  | 'missing_signature'
  | 'malformed_header'
  | 'signature_mismatch'
  | 'id_mismatch'
  | 'timestamp_too_old'
  | 'timestamp_in_future';

export class SignatureError extends Error {
  override name = 'SignatureError';
  constructor(
    readonly reason: SignatureFailure,
    message: string,
  ) {
    super(message);
  }
}

export interface VerifyOptions {
  /** How far the signed timestamp may be from this receiver's clock, either side (default 5 min). */
  toleranceMs?: number;
  /** This receiver's clock, epoch ms (default Date.now()). */
  nowMs?: number;
  /**
   * The URL this receiver is registered under (the task's `url`): the v2 signature, which binds method and URL,
   * must then match too. Normalized as the node stores it (WHATWG URL, no fragment).
   */
  url?: string;
  /** The method of the callback, for v2 (default POST; the middleware passes the request's). */
  method?: string;
  /** Accept the deprecated v1 signature when the callback carries nothing else to check. */
  allowV1?: boolean;
}

export interface VerifiedCallback {
  /** The schemes that were checked and matched. */
  schemes: SignatureScheme[];
  /** webhook-id (= X-Deduplication-Key): deduplicate on it. */
  id: string | null;
  /** When the node sent this attempt, epoch ms (seconds precision when only Standard Webhooks was checked). */
  timestampMs: number;
}

/** Node's IncomingHttpHeaders, a Fetch Headers, or any object of header names (any case) to values. */
export type HeadersLike = { get(name: string): string | null } | Record<string, string | string[] | undefined>;

function headerOf(headers: HeadersLike, name: string): string | null {
  if (typeof (headers as { get?: unknown }).get === 'function') return (headers as { get(n: string): string | null }).get(name);
  const record = headers as Record<string, string | string[] | undefined>;
  const exact = record[name];
  const value = exact !== undefined ? exact : Object.entries(record).find(([k]) => k.toLowerCase() === name)?.[1];
  if (value === undefined) return null;
  return Array.isArray(value) ? value.join(', ') : value;
}

/** The HMAC key: a whsec_ secret's decoded bytes, any other secret's UTF-8 bytes (docs/security.md, The key). */
function keyOf(secret: string): Buffer {
  return secret.startsWith('whsec_') ? Buffer.from(secret.slice('whsec_'.length), 'base64') : Buffer.from(secret, 'utf8');
}

function hmac(key: Buffer | string, head: string, body: Uint8Array): Buffer {
  return createHmac('sha256', key).update(head).update(body).digest();
}

/** True when any candidate equals any expected MAC; every pair is compared (constant time, no early exit). */
function anyEqual(expected: readonly Buffer[], candidates: readonly Buffer[]): boolean {
  let ok = false;
  for (const e of expected) {
    for (const c of candidates) {
      if (c.length === e.length && timingSafeEqual(c, e)) ok = true;
    }
  }
  return ok;
}

function checkTime(sentFromMs: number, sentToMs: number, nowMs: number, toleranceMs: number): void {
  if (nowMs - sentToMs > toleranceMs) {
    throw new SignatureError('timestamp_too_old', `signed ${nowMs - sentToMs} ms ago, more than the tolerance of ${toleranceMs} ms (a replay?)`);
  }
  if (sentFromMs - nowMs > toleranceMs) {
    throw new SignatureError('timestamp_in_future', `signed ${sentFromMs - nowMs} ms in the future, more than the tolerance of ${toleranceMs} ms (clock skew?)`);
  }
}

interface PunctualHeader {
  t: number;
  v1: Buffer[];
  v2: Buffer[];
}

function parsePunctualHeader(text: string): PunctualHeader {
  let t: number | null = null;
  const out: PunctualHeader = { t: 0, v1: [], v2: [] };
  for (const part of text.split(',')) {
    const eq = part.indexOf('=');
    const name = part.slice(0, eq).trim();
    const value = part.slice(eq + 1).trim();
    if (eq < 0) throw new SignatureError('malformed_header', 'X-Punctual-Signature: expected t=...,v2=...');
    if (name === 't') {
      if (t !== null || !/^\d{1,16}$/.test(value)) throw new SignatureError('malformed_header', 'X-Punctual-Signature: bad t');
      t = Number(value);
    } else if ((name === 'v1' || name === 'v2') && /^[0-9a-f]{64}$/.test(value)) {
      out[name].push(Buffer.from(value, 'hex'));
    }
  }
  if (t === null) throw new SignatureError('malformed_header', 'X-Punctual-Signature: no t');
  out.t = t;
  return out;
}

function verifyStandard(headers: HeadersLike, signature: string, body: Uint8Array, secrets: readonly string[]): { id: string; seconds: number } {
  const id = headerOf(headers, 'webhook-id');
  const timestamp = headerOf(headers, 'webhook-timestamp');
  if (id === null || timestamp === null) throw new SignatureError('missing_signature', 'webhook-signature without webhook-id and webhook-timestamp');
  if (!/^\d{1,13}$/.test(timestamp)) throw new SignatureError('malformed_header', 'webhook-timestamp: expected Unix seconds');
  const entries = signature
    .split(' ')
    .filter((e) => e.startsWith('v1,'))
    .map((e) => Buffer.from(e.slice(3), 'base64'));
  const expected = secrets.map((s) => hmac(keyOf(s), `${id}.${timestamp}.`, body));
  if (!anyEqual(expected, entries)) throw new SignatureError('signature_mismatch', 'webhook-signature matches none of the secrets (wrong secret, or a body or header changed on the way)');
  return { id, seconds: Number(timestamp) };
}

function verifyV2(headers: HeadersLike, parsed: PunctualHeader, body: Uint8Array, secrets: readonly string[], method: string, url: string): void {
  const dedup = headerOf(headers, 'x-deduplication-key') ?? headerOf(headers, 'webhook-id');
  if (dedup === null) throw new SignatureError('missing_signature', 'v2 needs X-Deduplication-Key');
  const target = new URL(url);
  target.hash = '';
  const head = `${method.toUpperCase()}\n${target.href}\n${dedup}\n${parsed.t}\n`;
  const expected = secrets.map((s) => hmac(keyOf(s), head, body));
  if (parsed.v2.length === 0) throw new SignatureError('missing_signature', 'X-Punctual-Signature carries no v2 entry');
  if (!anyEqual(expected, parsed.v2)) {
    throw new SignatureError('signature_mismatch', `X-Punctual-Signature v2 matches none of the secrets for ${method.toUpperCase()} ${target.href}`);
  }
}

/**
 * Verifies a signed callback and answers what was checked; throws SignatureError with a `reason` otherwise.
 * `rawBody` must be the bytes received (a re-serialized JSON does not match). `secrets`: every secret the task
 * may sign with (during a rotation, `signing_secret` and `signing_secret_next`); either one matching is enough.
 */
export function verifySignature(rawBody: Uint8Array | string, headers: HeadersLike, secrets: string | readonly string[], options: VerifyOptions = {}): VerifiedCallback {
  const keys = (typeof secrets === 'string' ? [secrets] : [...secrets]).filter((s) => s !== '');
  if (keys.length === 0) throw new SignatureError('no_secret', 'no signing secret to verify with');
  const body = typeof rawBody === 'string' ? Buffer.from(rawBody, 'utf8') : rawBody;
  const nowMs = options.nowMs ?? Date.now();
  const toleranceMs = options.toleranceMs ?? clientLimits.signatureToleranceMsDefault;
  const standard = headerOf(headers, 'webhook-signature');
  const punctual = headerOf(headers, 'x-punctual-signature');
  const schemes: SignatureScheme[] = [];
  let id: string | null = null;
  let sent: { from: number; to: number } | null = null;

  if (standard !== null) {
    const s = verifyStandard(headers, standard, body, keys);
    schemes.push('standard-webhooks');
    id = s.id;
    sent = { from: s.seconds * 1000, to: s.seconds * 1000 + 999 };
    // the deduplication key is not under the Standard Webhooks MAC: it must be the id that is
    const dedup = headerOf(headers, 'x-deduplication-key');
    if (dedup !== null && dedup !== id) throw new SignatureError('id_mismatch', 'X-Deduplication-Key differs from the signed webhook-id');
  }
  if (options.url !== undefined) {
    if (punctual === null) throw new SignatureError('missing_signature', 'no X-Punctual-Signature header (needed for v2)');
    const parsed = parsePunctualHeader(punctual);
    verifyV2(headers, parsed, body, keys, options.method ?? 'POST', options.url);
    schemes.push('punctual-v2');
    sent = { from: parsed.t, to: parsed.t };
    id ??= headerOf(headers, 'x-deduplication-key');
  }
  if (schemes.length === 0 && options.allowV1 === true && punctual !== null) {
    const parsed = parsePunctualHeader(punctual);
    const expected = keys.map((s) => hmac(s, `${parsed.t}.`, body));
    if (!anyEqual(expected, parsed.v1)) throw new SignatureError('signature_mismatch', 'X-Punctual-Signature v1 matches none of the secrets');
    schemes.push('punctual-v1');
    sent = { from: parsed.t, to: parsed.t };
    id = headerOf(headers, 'x-deduplication-key');
  }
  if (sent === null) {
    const why = punctual === null ? 'is a signing_secret set on the task?' : 'only X-Punctual-Signature: give options.url to check its v2';
    throw new SignatureError('missing_signature', `no webhook-signature header (${why})`);
  }
  checkTime(sent.from, sent.to, nowMs, toleranceMs);
  return { schemes, id, timestampMs: sent.from };
}

export interface VerifyingHandlerOptions extends Omit<VerifyOptions, 'url' | 'method'> {
  /** The URL the task calls, for v2 (a function of the request when one handler serves several). */
  url?: string | ((req: IncomingMessage) => string);
  /** The largest body read; a larger one is answered 413 (default 1 MiB). */
  bodyBytesMax?: number;
}

export interface VerifiedRequest {
  /** The raw body bytes (parse them yourself: `JSON.parse(body.toString())`). */
  body: Buffer;
  verified: VerifiedCallback;
}

/**
 * A node:http request listener that reads the body, verifies it, and calls `handler` only for a genuine
 * callback. A refused one gets `401` with `{"error": reason, "detail"}` (Punctual does not retry a 4xx); a
 * handler that throws before answering gets `500`, so Punctual retries.
 */
export function verifyingHandler(
  secrets: string | readonly string[],
  handler: (req: IncomingMessage, res: ServerResponse, callback: VerifiedRequest) => void | Promise<void>,
  options: VerifyingHandlerOptions = {},
): (req: IncomingMessage, res: ServerResponse) => void {
  const bodyBytesMax = options.bodyBytesMax ?? clientLimits.verifyBodyBytesMax;
  const answer = (res: ServerResponse, status: number, body: Record<string, string>): void => {
    if (res.headersSent) return;
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  };
  return (req, res) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > bodyBytesMax) tooLarge = true;
      else chunks.push(chunk);
    });
    req.on('error', () => res.destroy());
    req.on('end', () => {
      if (tooLarge) return answer(res, 413, { error: 'payload_too_large', detail: `body over ${bodyBytesMax} bytes` });
      const body = Buffer.concat(chunks);
      let verified: VerifiedCallback;
      try {
        const url = typeof options.url === 'function' ? options.url(req) : options.url;
        verified = verifySignature(body, req.headers, secrets, { ...options, url, method: req.method });
      } catch (err) {
        if (!(err instanceof SignatureError)) return answer(res, 500, { error: 'internal', detail: 'verification failed' });
        return answer(res, 401, { error: err.reason, detail: err.message });
      }
      Promise.resolve()
        .then(() => handler(req, res, { body, verified }))
        .catch(() => answer(res, 500, { error: 'internal', detail: 'handler failed' }));
    });
  };
}
