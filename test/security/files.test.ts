/**
 * Files (issue 9, item 7): the data directory holds signing secrets and receivers' authorization headers, so it is
 * 0700 and every file in it 0600 whatever the umask. A real `punctual serve` child started with umask 000; and a
 * directory left world-readable by an older version is fixed at the next start.
 */
import { spawn } from 'node:child_process';
import { chmodSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { describe, expect, it } from 'vitest';
import { freePorts } from '../../src/node/testing/cluster.js';
import { useProcessBed } from '../../src/node/testing/bed.js';
import { call, kill9, root, type Child } from '../../src/node/testing/processes.js';

const bed = useProcessBed('punctual-files-');

/** `punctual serve` under `umask 000` (sh, then exec: the child is the node itself). */
function serveWithOpenUmask(dataDir: string, apiPort: number): Promise<Child> {
  const cli = join(root, 'dist', 'cmd', 'punctual.js');
  const script = `umask 000 && exec "${process.execPath}" "${cli}" serve --listen 127.0.0.1:${apiPort} --data "${dataDir}"`;
  const proc = spawn('sh', ['-c', script], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  return new Promise<Child>((resolve, reject) => {
    proc.once('exit', (code) => reject(new Error(`serve exited ${code}: ${stderr}`)));
    createInterface({ input: proc.stderr! }).on('line', (line) => {
      if (!line.includes('"msg":"ready"')) return;
      proc.removeAllListeners('exit');
      resolve({ proc, base: `http://127.0.0.1:${apiPort}`, stderr: () => stderr });
    });
  });
}

function modes(dataDir: string): { dir: string; files: Record<string, string> } {
  const octal = (path: string): string => (statSync(path).mode & 0o777).toString(8);
  return { dir: octal(dataDir), files: Object.fromEntries(readdirSync(dataDir).map((n) => [n, octal(join(dataDir, n))])) };
}

describe('data files', () => {
  it('are private (directory 0700, files 0600) under umask 000, and an open directory is fixed at start', async () => {
    const dataDir = join(bed.dir, 'data');
    const [apiPort] = await freePorts(1);
    let node = bed.track(await serveWithOpenUmask(dataDir, apiPort));
    expect((await call(node, 'PUT', '/v1/tasks/secret', { url: bed.rx.url('/x'), signing_secret: 'a-secret-of-32-characters-long!!' })).status).toBe(201);
    expect((await call(node, 'POST', '/v1/jobs', { task: 'secret', schedule: { delay_ms: 60_000 } })).status).toBe(201);
    const first = modes(dataDir);
    expect(Object.keys(first.files)).toEqual(expect.arrayContaining(['punctual.db', 'punctual.db-wal', 'punctual.db-shm', 'serve.lock']));
    expect(first).toEqual({ dir: '700', files: Object.fromEntries(Object.keys(first.files).map((n) => [n, '600'])) });

    await kill9(node);
    chmodSync(dataDir, 0o777);
    for (const name of readdirSync(dataDir)) chmodSync(join(dataDir, name), 0o666);
    node = bed.track(await serveWithOpenUmask(dataDir, apiPort));
    expect((await call(node, 'GET', '/v1/tasks/secret')).status).toBe(200);
    const again = modes(dataDir);
    expect(again).toEqual({ dir: '700', files: Object.fromEntries(Object.keys(again.files).map((n) => [n, '600'])) });
  });
});
