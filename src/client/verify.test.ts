/**
 * verifySignature and verifyingHandler against REAL callbacks: a built `punctual serve` process signs them with
 * a task's two secrets (a rotation: signing_secret and signing_secret_next), a node:http receiver records them,
 * and the verifier must accept each as sent, and refuse it tampered (body, deduplication key, URL), under a wrong
 * secret, and outside the timestamp tolerance. The Standard Webhooks reference library (`standardwebhooks`),
 * which receivers are told to use, checks the same callbacks beside it and must agree on every verdict. Needs
 * `npm run build` (npm test does it).
 */
import type { IncomingHttpHeaders } from 'node:http';
import { request } from 'node:http';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Punctual } from './client.js';
import { SignatureError, verifySignature, verifyingHandler, type VerifiedRequest } from './verify.js';
import { startReceiver, startServe, type Received, type Receiver, type ServeProcess } from './testing/serve.js';

const current = 'whsec_' + Buffer.from('punctual-current-key-32-bytes!!!').toString('base64');
const next = 'the-next-secret-of-16-bytes-or-more';
const wrong = 'a-wrong-secret-of-16-bytes-or-more';

let node: ServeProcess;
let receiver: Receiver;
let client: Punctual;
/** What verifyingHandler handed to the application. */
const handled: VerifiedRequest[] = [];

/**
 * The secret as a Standard Webhooks library takes it (docs/security.md, The key): a whsec_ secret as it is, any
 * other as whsec_ + the base64 of its UTF-8 bytes, since the node keys the HMAC with those bytes.
 */
function standardSecret(secret: string): string {
  return secret.startsWith('whsec_') ? secret : 'whsec_' + Buffer.from(secret, 'utf8').toString('base64');
}

/** The reference library's verdict: 'accepted', or its error message (it throws WebhookVerificationError). */
function referenceVerdict(secret: string, body: Buffer, headers: IncomingHttpHeaders): string {
  const present = Object.entries(headers).filter((e): e is [string, string | string[]] => e[1] !== undefined);
  const flat = Object.fromEntries(present.map(([k, v]) => [k, Array.isArray(v) ? v.join(', ') : v]));
  try {
    new Webhook(standardSecret(secret)).verify(body, flat);
  } catch (err) {
    if (err instanceof WebhookVerificationError) return err.message;
    throw err;
  }
  return 'accepted';
}

function reason(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    if (err instanceof SignatureError) return err.reason;
    throw err;
  }
  return 'accepted';
}

beforeAll(async () => {
  const middleware = verifyingHandler(
    [current, next],
    (_req, res, callback) => {
      handled.push(callback);
      res.writeHead(204).end();
    },
    { url: (req) => `${receiver.base}${req.url ?? '/'}` },
  );
  receiver = await startReceiver((req, res) => {
    if (!(req.url ?? '').startsWith('/mw')) return false;
    middleware(req, res);
    return true;
  });
  node = await startServe();
  client = new Punctual({ baseUrl: node.base });
  await client.tasks.put('signed', { url: `${receiver.base}/hook?x=1`, signing_secret: current, signing_secret_next: next });
  await client.tasks.put('through-mw', { url: `${receiver.base}/mw/hook`, signing_secret: current });
});

afterAll(async () => {
  await client?.close();
  expect(await node?.stop()).toBe(0);
  await receiver?.close();
});

describe('verifySignature on callbacks a real node sent', () => {
  let hit: Received;

  beforeAll(async () => {
    await client.jobs.create({ id: 'sig-1', task: 'signed', payload: { to: 'ada', n: 1 } });
    [hit] = await receiver.waitFor(1);
  });

  it('accepts the callback as sent, with either secret of a rotation, and names what it checked', () => {
    const url = `${receiver.base}/hook?x=1`;
    expect(String(hit.headers['webhook-signature']).split(' ')).toHaveLength(2); // two secrets: two entries
    const both = verifySignature(hit.body, hit.headers, [current, next], { url, method: hit.method });
    expect(both.schemes).toEqual(['standard-webhooks', 'punctual-v2']);
    expect(both.id).toBe(hit.headers['x-deduplication-key']);
    expect(Math.abs(both.timestampMs - Date.now())).toBeLessThan(5 * 60_000);
    expect(verifySignature(hit.body, hit.headers, current).schemes).toEqual(['standard-webhooks']);
    expect(verifySignature(hit.body, hit.headers, next, { url }).schemes).toEqual(['standard-webhooks', 'punctual-v2']);
    // a Fetch Headers object and a string body work too
    const fetchHeaders = new Headers(Object.entries(hit.headers).map(([k, v]) => [k, String(v)]));
    expect(verifySignature(hit.body.toString('utf8'), fetchHeaders, [wrong, next]).id).toBe(both.id);
  });

  it('refuses a wrong secret, a tampered body, a changed deduplication key and the wrong URL', () => {
    const url = `${receiver.base}/hook?x=1`;
    expect(reason(() => verifySignature(hit.body, hit.headers, wrong))).toBe('signature_mismatch');
    const tampered = Buffer.from(hit.body.toString().replace('"n":1', '"n":2'));
    expect(tampered.equals(hit.body)).toBe(false);
    expect(reason(() => verifySignature(tampered, hit.headers, [current, next]))).toBe('signature_mismatch');
    expect(reason(() => verifySignature(Buffer.concat([hit.body, Buffer.from(' ')]), hit.headers, current))).toBe('signature_mismatch');
    const otherKey = { ...hit.headers, 'x-deduplication-key': 'sig-1:1' };
    expect(reason(() => verifySignature(hit.body, otherKey, current))).toBe('id_mismatch');
    expect(reason(() => verifySignature(hit.body, hit.headers, current, { url: `${receiver.base}/other` }))).toBe('signature_mismatch');
    expect(reason(() => verifySignature(hit.body, hit.headers, current, { url, method: 'PUT' }))).toBe('signature_mismatch');
    const replayedAt = { ...hit.headers, 'webhook-timestamp': String(Number(hit.headers['webhook-timestamp']) - 1) };
    expect(reason(() => verifySignature(hit.body, replayedAt, current))).toBe('signature_mismatch');
    expect(reason(() => verifySignature(hit.body, hit.headers, []))).toBe('no_secret');
  });

  it('refuses a genuine callback outside the tolerance: a replay (old) or a clock far ahead (future)', () => {
    const sentMs = Number(hit.headers['webhook-timestamp']) * 1000;
    const toleranceMs = 60_000;
    expect(reason(() => verifySignature(hit.body, hit.headers, current, { toleranceMs, nowMs: sentMs + 999 + toleranceMs }))).toBe('accepted');
    expect(reason(() => verifySignature(hit.body, hit.headers, current, { toleranceMs, nowMs: sentMs + 1000 + toleranceMs }))).toBe('timestamp_too_old');
    expect(reason(() => verifySignature(hit.body, hit.headers, current, { toleranceMs, nowMs: sentMs - toleranceMs - 1 }))).toBe('timestamp_in_future');
    const t = Number(/t=(\d+)/.exec(String(hit.headers['x-punctual-signature']))![1]);
    const url = `${receiver.base}/hook?x=1`;
    expect(reason(() => verifySignature(hit.body, hit.headers, current, { url, toleranceMs, nowMs: t + toleranceMs + 1 }))).toBe('timestamp_too_old');
  });

  it('the Standard Webhooks reference library (standardwebhooks) accepts it with either secret, and agrees with verifySignature on every forgery', () => {
    // as sent: both secrets of the rotation, the plain one mapped to whsec_ form as docs/security.md says
    for (const secret of [current, next]) {
      expect(referenceVerdict(secret, hit.body, hit.headers), secret).toBe('accepted');
      expect(reason(() => verifySignature(hit.body, hit.headers, secret)), secret).toBe('accepted');
    }
    expect(new Webhook(current).verify(hit.body, hit.headers as Record<string, string>)).toEqual({ to: 'ada', n: 1 });
    // the plain secret handed over unmapped is another key: the mapping is what makes it verify
    expect(referenceVerdict('whsec_' + Buffer.from(next).toString('hex'), hit.body, hit.headers)).toBe('No matching signature found');
    // each forgery: the reference library refuses it, and so does ours
    const tampered = Buffer.from(hit.body.toString().replace('"n":1', '"n":2'));
    const forgeries: [string, string, Buffer, IncomingHttpHeaders][] = [
      ['a wrong secret', wrong, hit.body, hit.headers],
      ['a tampered body', current, tampered, hit.headers],
      ['another webhook-id', current, hit.body, { ...hit.headers, 'webhook-id': 'sig-1:1', 'x-deduplication-key': 'sig-1:1' }],
      ['another webhook-timestamp', current, hit.body, { ...hit.headers, 'webhook-timestamp': String(Number(hit.headers['webhook-timestamp']) - 1) }],
      ['no webhook-signature', current, hit.body, { ...hit.headers, 'webhook-signature': undefined }],
    ];
    for (const [what, secret, body, headers] of forgeries) {
      expect(referenceVerdict(secret, body, headers), what).not.toBe('accepted');
      expect(reason(() => verifySignature(body, headers, secret)), what).not.toBe('accepted');
    }
  });

  it('needs a signature: none, or only the deprecated v1 unless allowV1', () => {
    const { 'webhook-signature': _s, 'webhook-id': _i, 'webhook-timestamp': _t, ...v1Only } = hit.headers;
    expect(reason(() => verifySignature(hit.body, v1Only, current))).toBe('missing_signature');
    // v1 is keyed by the secret's UTF-8 bytes, whsec_ or not
    expect(verifySignature(hit.body, v1Only, current, { allowV1: true }).schemes).toEqual(['punctual-v1']);
    expect(verifySignature(hit.body, v1Only, next, { allowV1: true }).schemes).toEqual(['punctual-v1']);
    expect(reason(() => verifySignature(hit.body, v1Only, wrong, { allowV1: true }))).toBe('signature_mismatch');
    const { 'x-punctual-signature': _p, ...noPunctual } = hit.headers;
    expect(reason(() => verifySignature(hit.body, noPunctual, current, { url: `${receiver.base}/hook?x=1` }))).toBe('missing_signature');
    expect(reason(() => verifySignature(hit.body, { ...hit.headers, 'webhook-timestamp': 'soon' }, current))).toBe('malformed_header');
  });
});

describe('verifyingHandler (node:http middleware)', () => {
  it('hands a genuine callback to the application, which answers it: the execution succeeds', async () => {
    await client.jobs.create({ id: 'mw-1', task: 'through-mw', payload_base64: Buffer.from([0, 1, 2, 255]).toString('base64') });
    for (let i = 0; i < 2000 && handled.length === 0; i++) await new Promise((ok) => setTimeout(ok, 10));
    expect(handled).toHaveLength(1);
    expect([...handled[0]!.body]).toEqual([0, 1, 2, 255]);
    expect(handled[0]!.verified.schemes).toEqual(['standard-webhooks', 'punctual-v2']);
    let job = await client.jobs.get('mw-1');
    for (let i = 0; i < 500 && job.state !== 'SUCCEEDED'; i++) {
      await new Promise((ok) => setTimeout(ok, 10));
      job = await client.jobs.get('mw-1');
    }
    expect(job.last_execution?.status_code).toBe(204);
  });

  it('answers 401 with the reason to a forged or unsigned request, and never calls the application', async () => {
    const before = handled.length;
    const post = (headers: Record<string, string>, body: string) =>
      new Promise<{ status: number; body: string }>((ok, fail) => {
        const req = request(`${receiver.base}/mw/hook`, { method: 'POST', headers }, (res) => {
          let text = '';
          res.on('data', (d: Buffer) => (text += d.toString()));
          res.on('end', () => ok({ status: res.statusCode ?? 0, body: text }));
        });
        req.on('error', fail);
        req.end(body);
      });
    const seconds = String(Math.floor(Date.now() / 1000));
    const forged = await post({ 'webhook-id': 'mw-1:1', 'webhook-timestamp': seconds, 'webhook-signature': 'v1,' + Buffer.alloc(32).toString('base64') }, '{}');
    expect(forged.status).toBe(401);
    expect(JSON.parse(forged.body)).toMatchObject({ error: 'signature_mismatch' });
    const unsigned = await post({}, '{}');
    expect(unsigned.status).toBe(401);
    expect(JSON.parse(unsigned.body)).toMatchObject({ error: 'missing_signature' });
    expect(handled.length).toBe(before);
  });
});
