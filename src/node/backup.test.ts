/**
 * Backup under load and restore, with REAL processes (dist/: `npm run build` first): a `punctual serve` node takes
 * jobs and fires callbacks while `punctual backup` copies it; `punctual restore` prepares fresh data directories
 * from the copy, as the node it was and as a new one-node cluster under another id; each restored node starts
 * and holds every job acknowledged (201) before the backup began, and fires.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePorts } from './testing/cluster.js';
import { assertBuilt, call, root, spawnServe, type Child } from './testing/processes.js';
import { startReceiver, waitFor, type Receiver } from './testing/receiver.js';

const dir = mkdtempSync(join(tmpdir(), 'punctual-backup-'));
const children: Child[] = [];
let rx: Receiver | null = null;

afterAll(async () => {
  for (const c of children) {
    if (c.proc.exitCode === null && c.proc.signalCode === null) {
      await new Promise<void>((resolve) => {
        c.proc.once('exit', () => resolve());
        c.proc.kill('SIGKILL');
      });
    }
  }
  await rx?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** `punctual ARGS` as a child process: its exit code and output. */
function cli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const proc = spawn(process.execPath, [join(root, 'dist', 'cmd', 'punctual.js'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  proc.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  return new Promise((resolve) => proc.once('close', (code) => resolve({ code, stdout, stderr })));
}

async function serve(data: string, nodeId: string): Promise<Child> {
  const [api, peer] = await freePorts(2);
  const flags = ['--listen', `127.0.0.1:${api}`, '--peer-listen', `127.0.0.1:${peer}`, '--data', data, '--node-id', nodeId, '--shards', '4', '--log-level', 'info'];
  const child = await spawnServe(flags, api);
  children.push(child);
  return child;
}

/** Every id of `ids` the node answers 200 for (GET /v1/jobs/{id}), asked 32 at a time. */
async function found(node: Child, ids: string[]): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < ids.length; i += 32) {
    const answers = await Promise.all(ids.slice(i, i + 32).map(async (id) => ((await call(node, 'GET', `/v1/jobs/${id}`)).status === 200 ? id : null)));
    out.push(...answers.filter((id): id is string => id !== null));
  }
  return out;
}

describe('backup and restore (real processes)', () => {
  it('a backup taken while jobs are submitted and fired restores every acknowledged job, as the node and as a new cluster', async () => {
    assertBuilt();
    const receiver = await startReceiver();
    rx = receiver;
    const node = await serve(join(dir, 'live'), 'n1');
    expect((await call(node, 'PUT', '/v1/tasks/hook', { url: receiver.url('/cb') })).status).toBe(201);

    // Load: 8 writers submitting jobs until told to stop; half fire within 200 ms, half in a day.
    const acked: string[] = [];
    let stop = false;
    let next = 0;
    const writer = async (): Promise<void> => {
      while (!stop) {
        const n = next++;
        const id = `load-${n}`;
        const res = await call(node, 'POST', '/v1/jobs', { id, task: 'hook', payload: { n }, schedule: { delay_ms: n % 2 === 0 ? n % 200 : 86_400_000 } });
        if (res.status === 201) acked.push(id);
      }
    };
    const writers = Array.from({ length: 8 }, writer);
    await waitFor('jobs acknowledged before the backup', () => acked.length >= 400, 30_000);
    const before = [...acked];
    const firedBefore = receiver.received.length;

    const out = join(dir, 'node.backup');
    const taken = await cli(['backup', '--server', node.base, '--out', out]);
    stop = true;
    await Promise.all(writers);
    expect(taken.code, taken.stderr).toBe(0);
    expect(taken.stdout).toContain(`backup written to ${out}`);
    expect(statSync(out).mode & 0o777).toBe(0o600);
    // The node kept taking jobs and firing around the backup.
    expect(acked.length).toBeGreaterThan(before.length);
    await waitFor('callbacks after the backup', () => receiver.received.length > firedBefore, 10_000);
    const again = await cli(['backup', '--server', node.base, '--out', out]);
    expect([again.code, again.stderr.trim()]).toEqual([2, `punctual: --out: ${out} exists (give --force to replace it)`]);

    // As it was: same node id, fresh data directory.
    const asWas = await cli(['restore', '--from', out, '--data', join(dir, 'restored')]);
    expect(asWas.code, asWas.stderr).toBe(0);
    expect(asWas.stdout).toContain('restored node n1 (4 shards');
    node.proc.kill('SIGTERM');
    const restored = await serve(join(dir, 'restored'), 'n1');
    expect((await call(restored, 'GET', '/readyz')).status).toBe(200);
    expect(await found(restored, before)).toEqual(before);

    // As a new one-node cluster under another id.
    const asNew = await cli(['restore', '--from', out, '--data-dir', join(dir, 'new'), '--new-cluster', '--node-id', 'm1']);
    expect(asNew.code, asNew.stderr).toBe(0);
    const fresh = await serve(join(dir, 'new'), 'm1');
    await waitFor('new cluster ready', async () => (await call(fresh, 'GET', '/readyz')).status === 200, 10_000);
    expect(await found(fresh, before)).toEqual(before);
    const cluster = (await call(fresh, 'GET', '/v1/cluster')).json;
    expect(cluster.shards.map((s: { leader: string; members: string[] }) => [s.leader, s.members])).toEqual(Array(4).fill(['m1', ['m1']]));
    // It fires: a new job on the restored cluster reaches the receiver.
    expect((await call(fresh, 'POST', '/v1/jobs', { id: 'after-restore', task: 'hook', schedule: { delay_ms: 10 } })).status).toBe(201);
    await waitFor('a callback from the restored cluster', () => receiver.of('after-restore').length === 1, 10_000);

    // The restored data directory is not restored onto twice.
    const twice = await cli(['restore', '--from', out, '--data', join(dir, 'restored')]);
    expect(twice.code).toBe(1);
    expect(twice.stderr).toContain('already holds a database');
  }, 120_000);
});
