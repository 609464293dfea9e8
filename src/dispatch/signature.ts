/**
 * Callback signatures (API.md section 3): `X-Punctual-Signature: t={unixMs},v1={hex HMAC-SHA256(secret,
 * t + "." + body)}`. The timestamp is inside the MAC so a receiver can refuse replays older than its tolerance.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

const hexDigestChars = 64;

function macHex(secret: string, unixMs: number, body: Uint8Array): string {
  return createHmac('sha256', secret).update(`${unixMs}.`).update(body).digest('hex');
}

/** `t={unixMs},v1={hex HMAC-SHA256(secret, t + "." + body)}` */
export function signBody(secret: string, unixMs: number, body: Uint8Array): string {
  return `t=${unixMs},v1=${macHex(secret, unixMs, body)}`;
}

/**
 * True when the header carries a timestamp within toleranceMs of nowMs (either side: clocks drift) and a v1
 * MAC that matches. Several v1 entries are accepted (a receiver rotating secrets may see more than one).
 */
export function verifySignature(
  secret: string,
  header: string,
  body: Uint8Array,
  toleranceMs: number,
  nowMs: number,
): boolean {
  let unixMs: number | null = null;
  const candidates: string[] = [];
  for (const part of header.split(',')) {
    const eq = part.indexOf('=');
    if (eq < 0) return false;
    const name = part.slice(0, eq).trim();
    const value = part.slice(eq + 1).trim();
    if (name === 't') {
      if (unixMs !== null || !/^\d{1,16}$/.test(value)) return false;
      unixMs = Number(value);
    } else if (name === 'v1') {
      candidates.push(value);
    }
  }
  if (unixMs === null || candidates.length === 0) return false;
  if (Math.abs(nowMs - unixMs) > toleranceMs) return false;
  const expected = Buffer.from(macHex(secret, unixMs, body), 'hex');
  let ok = false;
  for (const candidate of candidates) {
    if (candidate.length !== hexDigestChars || !/^[0-9a-f]+$/.test(candidate)) continue;
    // Constant time per candidate, and no early exit, so timing does not say which one matched.
    if (timingSafeEqual(expected, Buffer.from(candidate, 'hex'))) ok = true;
  }
  return ok;
}
