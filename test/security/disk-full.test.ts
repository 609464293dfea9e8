/**
 * Disk full (issue 9, item 7): a real `punctual serve` on a small tmpfs (mounted here: the test runs as root, as
 * in CI). With the disk filled by a ballast file, writes are refused with 507 insufficient_storage (problem+json,
 * Retry-After) and reads keep working; the node does not exit. Once the ballast is deleted the node goes on by
 * itself: writes succeed again and every job that was acknowledged (201) fires, even after a kill -9 while full.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, mkdirSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePorts } from '../../src/node/testing/cluster.js';
import { useProcessBed } from '../../src/node/testing/bed.js';
import { kill9, spawnServe, type Child } from '../../src/node/testing/processes.js';
import { sleep, waitFor } from '../../src/node/testing/receiver.js';

const bed = useProcessBed('punctual-disk-full-');
const mounts: string[] = [];

/** A fresh 8 MiB tmpfs under the test's directory (unmounted after the file's tests). */
function smallDisk(name: string): string {
  if (process.getuid?.() !== 0) throw new Error('test/security/disk-full.test.ts mounts a tmpfs: run it as root (CI does)');
  const dir = join(bed.dir, name);
  mkdirSync(dir);
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=8m,mode=0700', 'tmpfs', dir]);
  mounts.push(dir);
  return dir;
}

afterAll(async () => {
  await bed.killAll();
  for (const dir of mounts) execFileSync('umount', ['-l', dir]);
});

async function ready(c: Child): Promise<boolean> {
  try {
    return (await fetch(`${c.base}/readyz`)).status === 200;
  } catch {
    return false;
  }
}

/** Fills the file system of `path` to the last byte (ENOSPC), in shrinking chunks. */
function fill(path: string): void {
  const fd = openSync(path, 'w');
  try {
    for (let chunk = 1 << 20; chunk >= 512; chunk >>= 1) {
      const buf = Buffer.alloc(chunk, 0x5a);
      for (;;) {
        try {
          writeSync(fd, buf);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'ENOSPC') break;
          throw err;
        }
      }
    }
  } finally {
    closeSync(fd);
  }
}

async function post(c: Child, path: string, body: unknown): Promise<{ status: number; headers: Headers; json: any }> {
  const res = await fetch(c.base + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, headers: res.headers, json: await res.json() };
}

async function get(c: Child, path: string): Promise<number> {
  const res = await fetch(c.base + path);
  await res.arrayBuffer();
  return res.status;
}

describe('a full disk', () => {
  it('refuses writes with 507 while reads work, and the node goes on by itself once space returns, losing nothing acknowledged', async () => {
    const mountDir = smallDisk('single');
    const [api] = await freePorts(1);
    let node = bed.track(await spawnServe(['--listen', `127.0.0.1:${api}`, '--data', join(mountDir, 'data')], api));
    expect((await fetch(`${node.base}/v1/tasks/hook`, { method: 'PUT', body: JSON.stringify({ url: bed.rx.url('/hook') }) })).status).toBe(201);
    const acknowledged: string[] = [];
    const job = (id: string): unknown => ({ id, task: 'hook', schedule: { delay_ms: 1_000 }, payload: { pad: 'x'.repeat(100_000) } });
    for (let i = 0; i < 3; i++) {
      expect((await post(node, '/v1/jobs', job(`before-${i}`))).status).toBe(201);
      acknowledged.push(`before-${i}`);
    }

    const ballast = join(mountDir, 'ballast');
    fill(ballast);
    // Writes go on until the WAL must grow; from then on every write is refused (the first may time out, 503,
    // its entry being retried below Raft: it is not acknowledged, so the test does not count it).
    let refused: { status: number; headers: Headers; json: any } | null = null;
    for (let i = 0; i < 200 && refused === null; i++) {
      const r = await post(node, '/v1/jobs', job(`during-${i}`));
      if (r.status === 201) acknowledged.push(`during-${i}`);
      else if (r.status === 507) refused = r;
      else expect(r.status).toBe(503);
    }
    expect(refused?.status).toBe(507);
    expect(refused!.headers.get('content-type')).toMatch(/application\/problem\+json/);
    expect(refused!.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(refused!.json).toMatchObject({ status: 507, code: 'insufficient_storage' });
    expect((await post(node, '/v1/jobs', job('refused-again'))).status).toBe(507);
    expect((await fetch(`${node.base}/v1/tasks/other`, { method: 'PUT', body: JSON.stringify({ url: bed.rx.url('/o') }) })).status).toBe(507);
    // Reads keep working, and the node is alive.
    expect(await get(node, '/v1/jobs/before-0')).toBe(200);
    expect(await get(node, '/v1/jobs?limit=10')).toBe(200);
    expect(await get(node, '/v1/tasks/hook')).toBe(200);
    expect(await get(node, '/healthz')).toBe(200);
    expect(node.proc.exitCode).toBeNull();
    expect(node.stderr()).toMatch(/disk full/);

    // A crash while the disk is full: the restarted node cannot even persist its vote, so it waits (alive, not
    // ready) and goes on once space returns, with every acknowledged job.
    await kill9(node);
    let exited: unknown = null;
    const restarting = spawnServe(['--listen', `127.0.0.1:${api}`, '--data', join(mountDir, 'data')], api);
    restarting.catch((err: unknown) => (exited = err));
    await sleep(2_000);
    expect(exited).toBeNull();
    rmSync(ballast);
    node = bed.track(await restarting);
    let back = 0;
    await waitFor('writes accepted again', async () => {
      const r = await post(node, '/v1/jobs', job(`after-${back}`));
      if (r.status === 201) acknowledged.push(`after-${back}`);
      back++;
      return r.status === 201;
    }, 20_000);
    expect(node.proc.exitCode).toBeNull();
    await waitFor('every acknowledged job fired', () => acknowledged.every((id) => bed.rx.of(id).length >= 1), 20_000);
    for (const id of acknowledged) expect(await get(node, `/v1/jobs/${id}`)).toBe(200);
  }, 90_000);

  it('in a cluster, a follower whose disk is full stays up while the others go on, and catches up by itself with every job', async () => {
    const mountDir = smallDisk('cluster');
    const [a1, a2, a3, p1, p2, p3] = await freePorts(6);
    const apis = [a1, a2, a3];
    const peerPorts = [p1, p2, p3];
    const peers = [`n1=127.0.0.1:${p1}`, `n2=127.0.0.1:${p2}`, `n3=127.0.0.1:${p3}`];
    // n3 keeps its data on the small tmpfs; n1 and n2 on the ordinary disk.
    const dataOf = (id: string): string => (id === 'n3' ? join(mountDir, 'n3') : join(bed.dir, id));
    const nodes = bed.track(await Promise.all([0, 1, 2].map((i) => {
      const id = `n${i + 1}`;
      return spawnServe(['--node-id', id, '--listen', `127.0.0.1:${apis[i]}`, '--peer-listen', `127.0.0.1:${peerPorts[i]}`, '--data', dataOf(id),
        '--peers', peers.filter((p) => !p.startsWith(`${id}=`)).join(','), '--shards', '2', '--cluster-secret', 'disk-full-test-cluster-secret-01234'], apis[i]);
    })));
    const [n1, , n3] = nodes;
    await waitFor('cluster ready', async () => (await Promise.all(nodes.map(ready))).every(Boolean), 15_000);
    // n1 leads both shards, so the writes below never wait for a leader to be replaced.
    for (const shard of [0, 1]) expect((await post(n1, `/v1/cluster/shards/${shard}/transfer-leader`, { to: 'n1' })).status).toBe(202);
    await waitFor('n1 leads', async () => ((await (await fetch(`${n1.base}/v1/cluster`)).json()) as { shards: Array<{ leader: string }> }).shards.every((s) => s.leader === 'n1'), 10_000);
    expect((await fetch(`${n1.base}/v1/tasks/hook`, { method: 'PUT', body: JSON.stringify({ url: bed.rx.url('/hook') }) })).status).toBe(201);

    const ballast = join(mountDir, 'ballast-n3');
    fill(ballast);
    const job = (id: string): unknown => ({ id, task: 'hook', schedule: { delay_ms: 500 }, payload: { pad: 'y'.repeat(20_000) } });
    const ids = Array.from({ length: 40 }, (_, i) => `c-${i}`);
    for (const id of ids) expect((await post(n1, '/v1/jobs', job(id))).status).toBe(201);
    await waitFor('n3 found its disk full', () => /disk full/.test(n3.stderr()), 10_000);
    expect(n3.proc.exitCode).toBeNull();
    await waitFor('every job fired, from the nodes with space', () => ids.every((id) => bed.rx.of(id).length >= 1), 20_000);

    rmSync(ballast);
    // n3 goes on by itself: it writes what it held back, catches up, and its replica has every job.
    await waitFor('n3 has every job', async () => {
      const r = await fetch(`${n3.base}/v1/jobs?limit=100`);
      if (r.status !== 200) return false;
      const listed = ((await r.json()) as { jobs: Array<{ id: string }> }).jobs.map((j) => j.id);
      return ids.every((id) => listed.includes(id));
    }, 20_000);
    await waitFor('n3 ready', () => ready(n3), 10_000);
    expect(n3.proc.exitCode).toBeNull();
  }, 120_000);
});
