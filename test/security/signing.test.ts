/**
 * Signed callbacks from a real `punctual serve` process, checked with the receiver code that docs/security.md
 * ("Signing callbacks") gives: the Node.js and Python blocks are cut out of the page and run as they are, so the
 * documented snippets cannot drift from what the node sends. A task with two secrets (a plain one and a whsec_
 * one) is the rotation case: each secret verifies alone, a third never does, a changed body or URL never does.
 * `npm run build` first: the node runs dist/cmd/punctual.js.
 */
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = resolve(fileURLToPath(import.meta.url), '../../..');
const bin = join(root, 'dist/cmd/punctual.js');

const current = 'current-plain-secret-0123';
const next = 'whsec_' + Buffer.from('the-next-key-has-32-bytes-in-it!').toString('base64');
const third = 'someone-elses-secret-0123';

interface Captured {
  method: string;
  url: string;
  headers: Record<string, string>;
  body: Buffer;
}

/** The first fenced block of `lang` in the "Signing callbacks" section of docs/security.md. */
function documentedSnippet(lang: string): string {
  const page = readFileSync(join(root, 'docs/security.md'), 'utf8');
  const section = page.slice(page.indexOf('## Signing callbacks'));
  const start = section.indexOf('```' + lang + '\n');
  if (start < 0) throw new Error(`no ${lang} block in docs/security.md, Signing callbacks`);
  const body = section.slice(start + lang.length + 4);
  return body.slice(0, body.indexOf('```'));
}

let dir: string;
let node: ChildProcessWithoutNullStreams | null = null;
let stderr = '';
let receiver: Server;
let receiverUrl: string;
let captured: Captured;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-signing-'));
  let resolveCaptured: (c: Captured) => void = () => {};
  const got = new Promise<Captured>((ok) => (resolveCaptured = ok));
  receiver = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      res.end();
      resolveCaptured({ method: req.method!, url: req.url!, headers: req.headers as Record<string, string>, body: Buffer.concat(chunks) });
    });
  });
  await new Promise<void>((ok) => receiver.listen(0, '127.0.0.1', ok));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;

  node = spawn(process.execPath, [bin, 'serve', '--listen', '127.0.0.1:0', '--data', join(dir, 'n1'), '--shards', '1', '--fsync', 'off'], {
    env: { PATH: process.env.PATH ?? '' },
  });
  node.stdout.resume();
  let api = '';
  await new Promise<void>((ok, fail) => {
    node!.on('exit', (code) => fail(new Error(`node exited ${code}: ${stderr}`)));
    node!.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
      const ready = stderr.split('\n').find((l) => l.includes('"msg":"ready"'));
      if (ready !== undefined && api === '') {
        api = `http://${(JSON.parse(ready) as { listen: string }).listen}`;
        ok();
      }
    });
  });
  const put = await fetch(`${api}/v1/tasks/signed`, {
    method: 'PUT',
    body: JSON.stringify({ url: `${receiverUrl}/hooks/in?tenant=a`, signing_secret: current, signing_secret_next: next }),
  });
  expect(put.status).toBe(201);
  const job = await fetch(`${api}/v1/jobs`, { method: 'POST', body: JSON.stringify({ id: 'sig-1', task: 'signed', payload: { hello: 'wörld' } }) });
  expect(job.status).toBe(201);
  captured = await got;
}, 60_000);

afterAll(async () => {
  if (node !== null && node.exitCode === null) {
    const exited = new Promise((ok) => node!.once('exit', ok));
    node.kill('SIGKILL');
    await exited;
  }
  receiver?.closeAllConnections();
  await new Promise<void>((ok) => (receiver ? receiver.close(() => ok()) : ok()));
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

describe('a real callback, verified with the documented receiver code', () => {
  it('carries the Standard Webhooks headers and both Punctual signatures for both secrets', () => {
    const h = captured.headers;
    expect(h['webhook-id']).toBe(h['x-deduplication-key']);
    expect(h['webhook-id']).toMatch(/^sig-1:\d+$/);
    expect(h['webhook-timestamp']).toMatch(/^\d{10}$/);
    expect(h['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]{43}= v1,[A-Za-z0-9+/]{43}=$/);
    expect(h['x-punctual-signature']).toMatch(/^t=(\d{13}),v1=[0-9a-f]{64},v1=[0-9a-f]{64},v2=[0-9a-f]{64},v2=[0-9a-f]{64}$/);
    expect(Math.floor(Number(/^t=(\d+)/.exec(h['x-punctual-signature']!)![1]) / 1000)).toBe(Number(h['webhook-timestamp']));
  });

  it('Node.js: the docs snippet verifies with either secret and refuses a third one, another body or another URL', async () => {
    const file = join(dir, 'verify.mjs');
    writeFileSync(file, documentedSnippet('js'));
    const { verifyWebhook, verifyPunctualV2 } = (await import(pathToFileURL(file).href)) as {
      verifyWebhook: (secret: string, headers: Record<string, string>, body: Buffer) => boolean;
      verifyPunctualV2: (secret: string, method: string, url: string, headers: Record<string, string>, body: Buffer) => boolean;
    };
    const { method, headers, body } = captured;
    const url = `${receiverUrl}/hooks/in?tenant=a`;
    for (const secret of [current, next]) {
      expect(verifyWebhook(secret, headers, body)).toBe(true);
      expect(verifyPunctualV2(secret, method, url, headers, body)).toBe(true);
    }
    const tampered = Buffer.from(body.toString().replace('wörld', 'world'));
    expect(verifyWebhook(third, headers, body)).toBe(false);
    expect(verifyWebhook(current, headers, tampered)).toBe(false);
    expect(verifyPunctualV2(third, method, url, headers, body)).toBe(false);
    expect(verifyPunctualV2(current, method, `${receiverUrl}/other?tenant=a`, headers, body)).toBe(false);
    expect(verifyPunctualV2(current, 'PUT', url, headers, body)).toBe(false);
  });

  it('Python: the docs snippet verifies with either secret and refuses a third one or another URL', () => {
    const file = join(dir, 'verify.py');
    const runner = `
import base64, json, sys
c = json.load(sys.stdin)
body = base64.b64decode(c["body"])
out = {}
for name, secret in c["secrets"].items():
    out[name] = [verify_webhook(secret, c["headers"], body), verify_punctual_v2(secret, c["method"], c["url"], c["headers"], body)]
out["other_url"] = verify_punctual_v2(c["secrets"]["current"], c["method"], c["url"] + "x", c["headers"], body)
print(json.dumps(out))
`;
    writeFileSync(file, documentedSnippet('python') + runner);
    const input = JSON.stringify({
      secrets: { current, next, third },
      method: captured.method,
      url: `${receiverUrl}/hooks/in?tenant=a`,
      headers: captured.headers,
      body: captured.body.toString('base64'),
    });
    const r = spawnSync('python3', [file], { input, encoding: 'utf8' });
    expect(r.stderr).toBe('');
    expect(JSON.parse(r.stdout)).toEqual({ current: [true, true], next: [true, true], third: [false, false], other_url: false });
  });
});
