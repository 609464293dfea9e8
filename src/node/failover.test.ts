/**
 * Real processes (the BUILT code in dist/: `npm test` builds first), real kill -9, real loopback sockets:
 * - the leader of every shard is killed while 1,000 jobs fall due over the next 3 s: every job fires at least
 *   once, none early, later deliveries carry a higher fencing token; the worst lateness and the failover gap are
 *   printed (measured, not asserted);
 * - three `punctual serve` processes started with flags, a job submitted through a follower fires once, and a
 *   fourth-party node with the wrong --cluster-secret is refused and logged.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { shardOf } from '../core/ids.js';
import { clusterConfigs, freePorts } from './testing/cluster.js';
import { useProcessBed } from './testing/bed.js';
import { call, kill9, spawnNode, spawnServe, type Child } from './testing/processes.js';
import { waitFor } from './testing/receiver.js';

const bed = useProcessBed('punctual-failover-');

async function ready(c: Child): Promise<boolean> {
  try {
    return (await call(c, 'GET', '/readyz')).status === 200;
  } catch {
    return false;
  }
}

describe('failover with real processes', () => {
  it('kill -9 of the leader of every shard while 1,000 jobs fall due: each fires at least once, none early', async () => {
    const shards = 4;
    const configs = await clusterConfigs(join(bed.dir, 'kill'), 3, { shards, logLevel: 'warn' });
    // Leaders are placed by hand below, so no rebalancing moves them back.
    const [n1, n2, n3] = bed.track(await Promise.all(configs.map((c) => spawnNode(c, { rebalanceIntervalMs: 0 }))));
    await waitFor('cluster ready', async () => (await ready(n1)) && (await ready(n2)) && (await ready(n3)), 15_000);
    for (let s = 0; s < shards; s++) {
      const r = await call(n2, 'POST', `/v1/cluster/shards/${s}/transfer-leader`, { to: 'n1' });
      expect(r.status).toBe(202);
    }
    await waitFor('n1 leads every shard', async () => (await call(n2, 'GET', '/v1/cluster')).json.shards.every((s: { leader: string }) => s.leader === 'n1'), 10_000);
    expect((await call(n3, 'PUT', '/v1/tasks/hook', { url: bed.rx.url('/hook') })).status).toBe(201);

    const count = 1_000;
    const t0 = Date.now();
    const jobs = Array.from({ length: count }, (_, i) => ({ id: `f-${i}`, task: 'hook', schedule: { at: t0 + 1_000 + Math.floor((i * 3_000) / count) } }));
    const batch = await call(n2, 'POST', '/v1/jobs:batch', { jobs });
    expect(batch.status).toBe(200);
    expect(batch.json.results.filter((r: { status: number }) => r.status !== 201)).toEqual([]);
    const termsBefore = new Map((await call(n2, 'GET', '/v1/cluster')).json.shards.map((s: { id: number; term: number }) => [s.id, s.term]));

    // Kill the leader of every shard once firing has started.
    await waitFor('first fires', () => bed.rx.received.length > 0, 5_000);
    await kill9(n1);
    const killedAtMs = Date.now();

    await waitFor('every job fired at least once', () => jobs.every((j) => bed.rx.of(j.id).length >= 1), 20_000);
    let worstMs = 0;
    for (const r of bed.rx.received) {
      const at = Number(r.headers['x-punctual-scheduled-at']);
      expect(r.atMs).toBeGreaterThanOrEqual(at);
      worstMs = Math.max(worstMs, r.atMs - at);
    }
    const after = bed.rx.received.filter((r) => r.atMs > killedAtMs + 50);
    expect(after.length).toBeGreaterThan(0);
    for (const r of after) {
      const [shard, term] = String(r.headers['x-punctual-fencing-token']).split('.').map(Number);
      expect(term).toBeGreaterThan(termsBefore.get(shard) as number);
    }
    const firstAfterMs = Math.min(...after.map((r) => r.atMs)) - killedAtMs;
    const duplicates = bed.rx.received.length - count;
    console.info(`failover: worst lateness ${worstMs} ms, first fire ${firstAfterMs} ms after kill -9, ${duplicates} duplicate deliveries`);
  }, 60_000);

  it('three `punctual serve` processes: a job through a follower fires once; a wrong --cluster-secret is refused', async () => {
    const [a1, a2, a3, p1, p2, p3] = await freePorts(6);
    const peers = [`n1=127.0.0.1:${p1}`, `n2=127.0.0.1:${p2}`, `n3=127.0.0.1:${p3}`];
    const serve = (id: string, api: number, peer: number, secret: string): Promise<Child> =>
      spawnServe(
        ['--node-id', id, '--listen', `127.0.0.1:${api}`, '--peer-listen', `127.0.0.1:${peer}`, '--data', join(bed.dir, 'serve', id),
          '--peers', peers.filter((p) => !p.startsWith(`${id}=`)).join(','), '--shards', '4', '--cluster-secret', secret, '--log-level', 'info'],
        api,
      );
    const s1 = await serve('n1', a1, p1, 'right-cluster-secret-0123');
    const s2 = await serve('n2', a2, p2, 'right-cluster-secret-0123');
    const s3 = await serve('n3', a3, p3, 'wrong-cluster-secret-0123');
    bed.track([s1, s2, s3]);
    await waitFor('n1 and n2 ready', async () => (await ready(s1)) && (await ready(s2)), 15_000);
    expect(await ready(s3)).toBe(false);
    await waitFor('refusal logged', () => /peer request refused.*wrong_secret|wrong_secret.*peer request refused/.test(s1.stderr() + s2.stderr()), 5_000);

    expect((await call(s2, 'PUT', '/v1/tasks/hook', { url: bed.rx.url('/serve') })).status).toBe(201);
    const cluster = (await call(s1, 'GET', '/v1/cluster')).json;
    // Submit every job through a node that does not lead its shard.
    const atMs = Date.now() + 500;
    for (let i = 0; i < 8; i++) {
      const id = `s-${i}`;
      const follower = cluster.shards[shardOf(id, 4)].leader === 'n1' ? s2 : s1;
      const r = await call(follower, 'POST', '/v1/jobs', { id, task: 'hook', schedule: { at: atMs } });
      expect(r.status).toBe(201);
      const view = (await call(s2, 'GET', `/v1/jobs/${id}`)).json;
      expect(view.id).toBe(id);
    }
    await waitFor('fired', () => Array.from({ length: 8 }, (_, i) => bed.rx.of(`s-${i}`).length).every((n) => n >= 1), 10_000);
    await new Promise((r) => setTimeout(r, 300));
    for (let i = 0; i < 8; i++) expect(bed.rx.of(`s-${i}`)).toHaveLength(1);
    const stopped = new Promise<number | null>((resolve) => s2.proc.once('exit', (code) => resolve(code)));
    s2.proc.kill('SIGTERM');
    expect(await stopped).toBe(0);
  }, 60_000);
});
