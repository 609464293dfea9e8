/**
 * GET /v1/admin/backup on a real node over real sockets: an admin token is needed, the answer is a SQLite file of
 * this node (its length as announced), and a download cut by the client or a HEAD frees the node for the next
 * backup (the one-at-a-time slot is held only while a copy is streamed).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../core/log.js';
import { startNode, type NodeHandle } from './node.js';
import { nodeConfig } from './testing/fixtures.js';
import { waitFor } from './testing/receiver.js';

const token = 'backup-test-admin-token-0123456789';
let dir: string;
let node: NodeHandle;

const url = (path: string): string => `http://127.0.0.1:${node.apiPort}${path}`;
const auth = { authorization: `Bearer ${token}` };

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-backup-http-'));
  node = await startNode(nodeConfig(join(dir, 'data'), { authToken: token }), { logger: silentLogger });
  const put = await fetch(url('/v1/tasks/hook'), { method: 'PUT', headers: auth, body: JSON.stringify({ url: 'http://127.0.0.1:9/x' }) });
  expect(put.status).toBe(201);
  const jobs = Array.from({ length: 50 }, (_, i) => ({ id: `b-${i}`, task: 'hook', schedule: { delay_ms: 3_600_000 } }));
  expect((await fetch(url('/v1/jobs:batch'), { method: 'POST', headers: auth, body: JSON.stringify({ jobs }) })).status).toBe(200);
});

afterAll(async () => {
  await node?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Reads the headers of a backup, then destroys the connection before the body is read. */
function cutDownload(): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url('/v1/admin/backup'), { headers: auth }, (res) => {
      req.destroy();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end();
  });
}

describe('GET /v1/admin/backup', () => {
  it('needs a token, answers this node as a SQLite file, and a cut download or a HEAD frees the next backup', async () => {
    expect((await fetch(url('/v1/admin/backup'))).status).toBe(401);
    expect((await fetch(url('/v1/admin/backup?compress=1'), { headers: auth })).status).toBe(400);

    // The slot is freed once the server has seen the connection go (a 409 until then, never for good).
    expect(await cutDownload()).toBe(200);
    await waitFor('a backup after a cut download', async () => (await fetch(url('/v1/admin/backup'), { method: 'HEAD', headers: auth })).status === 200);

    let res: Response | null = null;
    await waitFor('a backup after a HEAD', async () => {
      res = await fetch(url('/v1/admin/backup'), { headers: auth });
      if (res.status === 200) return true;
      expect(res.status).toBe(409);
      await res.arrayBuffer();
      return false;
    });
    res = res!;
    expect(res.headers.get('content-type')).toBe('application/vnd.sqlite3');
    expect(res.headers.get('content-disposition')).toMatch(/^attachment; filename="punctual-n1-.*\.db"$/);
    const body = Buffer.from(await res.arrayBuffer());
    expect(body.length).toBe(Number(res.headers.get('content-length')));
    const file = join(dir, 'copy.db');
    writeFileSync(file, body);
    const copy = new Database(file, { readonly: true });
    expect(copy.prepare("SELECT value FROM node_meta WHERE key = 'node_id'").pluck().get()).toBe('n1');
    expect(copy.prepare("SELECT count(*) FROM jobs WHERE id LIKE 'b-%'").pluck().get()).toBe(50);
    copy.close();
  });
});
