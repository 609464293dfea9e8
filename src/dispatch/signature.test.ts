import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { limits } from '../core/limits.js';
import { Signer, signBody, signatureHeaders, signingKey, standardSignature, verifySignature, verifySignatureV2, verifyStandardWebhook } from './signature.js';

const body = new TextEncoder().encode('{"job":"a","n":1}');
const secret = 'topsecret';
const t = 1_700_000_000_000;

describe('signBody / verifySignature', () => {
  it('matches an HMAC computed independently with node:crypto', () => {
    const expected = createHmac('sha256', secret).update(`${t}.{"job":"a","n":1}`).digest('hex');
    expect(signBody(secret, t, body)).toBe(`t=${t},v1=${expected}`);
  });

  it('verifies within the tolerance, on either side of the clock', () => {
    const header = signBody(secret, t, body);
    expect(verifySignature(secret, header, body, 300_000, t)).toBe(true);
    expect(verifySignature(secret, header, body, 300_000, t + 300_000)).toBe(true);
    expect(verifySignature(secret, header, body, 300_000, t - 300_000)).toBe(true);
    expect(verifySignature(secret, header, body, 300_000, t + 300_001)).toBe(false);
  });

  it('refuses another secret, another body, a shifted timestamp and malformed headers', () => {
    const header = signBody(secret, t, body);
    const v1 = header.split('v1=')[1];
    expect(verifySignature('other', header, body, 1000, t)).toBe(false);
    expect(verifySignature(secret, header, new TextEncoder().encode('{"job":"b","n":1}'), 1000, t)).toBe(false);
    expect(verifySignature(secret, `t=${t + 1},v1=${v1}`, body, 1000, t)).toBe(false);
    for (const bad of ['', 'garbage', `v1=${v1}`, `t=${t}`, `t=abc,v1=${v1}`, `t=${t},v1=${v1.slice(2)}`, `t=${t},t=${t},v1=${v1}`]) {
      expect(verifySignature(secret, bad, body, 1000, t)).toBe(false);
    }
  });

  it('accepts the header when one of several v1 values matches (secret rotation)', () => {
    const header = signBody(secret, t, body);
    const stale = signBody('old-secret', t, body).split('v1=')[1];
    expect(verifySignature(secret, `${header},v1=${stale}`, body, 1000, t)).toBe(true);
    expect(verifySignature('old-secret', `${header},v1=${stale}`, body, 1000, t)).toBe(true);
  });

  it('signs the empty body', () => {
    const empty = new Uint8Array(0);
    const expected = createHmac('sha256', secret).update(`${t}.`).digest('hex');
    expect(signBody(secret, t, empty)).toBe(`t=${t},v1=${expected}`);
    expect(verifySignature(secret, signBody(secret, t, empty), empty, 0, t)).toBe(true);
  });
});

describe('Standard Webhooks and v2', () => {
  it('reproduces the Standard Webhooks specification test vector (whsec_ key = decoded bytes)', () => {
    const key = signingKey('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
    const payload = new TextEncoder().encode('{"test": 2432232314}');
    expect(standardSignature(key, 'msg_p5jXN8AQM9LWM0D4loKWxJek', 1614265330, payload)).toBe(
      'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
    );
    const headers = { id: 'msg_p5jXN8AQM9LWM0D4loKWxJek', timestamp: '1614265330', signature: 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=' };
    expect(verifyStandardWebhook('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', headers, payload, 300, 1614265330_000)).toBe(true);
    expect(verifyStandardWebhook('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', headers, payload, 300, 1614265631_000)).toBe(false);
  });

  it('signatureHeaders: fixed vectors for one and two secrets', () => {
    const r = { method: 'POST', url: 'https://example.com/hooks?x=1', dedupKey: 'job-1:1700000000000', unixMs: 1_700_000_001_234, body };
    const one = signatureHeaders(['0123456789abcdef'], r);
    const hex = (key: string | Buffer, text: string): string => createHmac('sha256', key).update(text).digest('hex');
    const canonical = 'POST\nhttps://example.com/hooks?x=1\njob-1:1700000000000\n1700000001234\n{"job":"a","n":1}';
    expect(one).toEqual({
      webhookTimestamp: '1700000001',
      webhookSignature: 'v1,' + createHmac('sha256', '0123456789abcdef').update('job-1:1700000000000.1700000001.{"job":"a","n":1}').digest('base64'),
      punctualSignature: `t=1700000001234,v1=${hex('0123456789abcdef', '1700000001234.{"job":"a","n":1}')},v2=${hex('0123456789abcdef', canonical)}`,
    });
    const two = signatureHeaders(['0123456789abcdef', 'fedcba9876543210'], r);
    expect(two.webhookSignature.split(' ')).toHaveLength(2);
    expect(two.punctualSignature.split(',').map((p) => p.split('=')[0])).toEqual(['t', 'v1', 'v1', 'v2', 'v2']);
    // v1 keeps keying by the secret string, whatever its form (receivers of the old scheme keep verifying).
    const whsec = 'whsec_' + Buffer.from('k'.repeat(24)).toString('base64');
    const withWhsec = signatureHeaders([whsec], r);
    expect(withWhsec.punctualSignature).toContain(`v1=${hex(whsec, '1700000001234.{"job":"a","n":1}')}`);
    expect(withWhsec.punctualSignature).toContain(`v2=${hex(Buffer.from('k'.repeat(24)), canonical)}`);
  });

  it('verifySignatureV2 refuses a changed method, URL, key, body or timestamp, and a stale t', () => {
    const r = { method: 'POST', url: 'https://e.com/a', dedupKey: 'j:1', body };
    const header = signatureHeaders(['0123456789abcdef'], { ...r, unixMs: t }).punctualSignature;
    expect(verifySignatureV2('0123456789abcdef', header, r, 1000, t)).toBe(true);
    expect(verifySignatureV2('0123456789abcdef', header, { ...r, method: 'GET' }, 1000, t)).toBe(false);
    expect(verifySignatureV2('0123456789abcdef', header, { ...r, url: 'https://e.com/b' }, 1000, t)).toBe(false);
    expect(verifySignatureV2('0123456789abcdef', header, { ...r, dedupKey: 'j:2' }, 1000, t)).toBe(false);
    expect(verifySignatureV2('0123456789abcdef', header, { ...r, body: new Uint8Array(0) }, 1000, t)).toBe(false);
    expect(verifySignatureV2('0123456789abcdef', header.replace(`t=${t}`, `t=${t + 1}`), r, 1000, t)).toBe(false);
    expect(verifySignatureV2('0123456789abcdef', header, r, 1000, t + 1001)).toBe(false);
    // Old receivers: the v1 entry is still there and still verifies.
    expect(verifySignature('0123456789abcdef', header, body, 1000, t)).toBe(true);
  });
});

describe('Signer (the sending side, keys decoded once)', () => {
  it('gives what node:crypto gives for every family: keys past one HMAC block, non-ASCII fields, empty and large bodies', () => {
    const longKey = 'whsec_' + Buffer.alloc(100, 7).toString('base64'); // decoded key longer than SHA-256's 64-byte block
    const longText = 'k'.repeat(90); // a plain secret longer than a block, used as is
    const secrets = [longKey, longText];
    const signer = new Signer(secrets);
    // The shared scratch buffer grows for the 10,000 bytes; the next body is past its bound (a buffer of its own).
    const past = new Uint8Array(limits.signScratchBytesMax + 1_000).fill(0x61);
    const bodies = [new Uint8Array(0), body, new Uint8Array(10_000).fill(0x62), past, body];
    for (const b of bodies) {
      // The same signer used over and over: nothing of one MAC may leak into the next.
      for (const r of [
        { method: 'POST', url: 'http://127.0.0.1:9/h?q=1', dedupKey: 'job-é:1700000000000', unixMs: t, body: b },
        { method: 'PUT', url: 'http://[::1]:8080/p', dedupKey: 'j:1', unixMs: t + 999, body: b },
      ]) {
        const signed = signer.sign(r);
        const seconds = Math.floor(r.unixMs / 1000);
        const std = secrets.map((s) => 'v1,' + createHmac('sha256', signingKey(s)).update(`${r.dedupKey}.${seconds}.`).update(b).digest('base64'));
        const v1 = secrets.map((s) => 'v1=' + createHmac('sha256', s).update(`${r.unixMs}.`).update(b).digest('hex'));
        const v2 = secrets.map(
          (s) => 'v2=' + createHmac('sha256', signingKey(s)).update(`${r.method}\n${r.url}\n${r.dedupKey}\n${r.unixMs}\n`).update(b).digest('hex'),
        );
        expect(signed).toEqual({
          webhookTimestamp: String(seconds),
          webhookSignature: std.join(' '),
          punctualSignature: [`t=${r.unixMs}`, ...v1, ...v2].join(','),
        });
        for (const s of secrets) {
          expect(verifySignature(s, signed.punctualSignature, b, 0, r.unixMs)).toBe(true);
          expect(verifySignatureV2(s, signed.punctualSignature, { method: r.method, url: r.url, dedupKey: r.dedupKey, body: b }, 0, r.unixMs)).toBe(true);
          expect(verifyStandardWebhook(s, { id: r.dedupKey, timestamp: signed.webhookTimestamp, signature: signed.webhookSignature }, b, 0, seconds * 1000)).toBe(true);
        }
      }
    }
  });
});
