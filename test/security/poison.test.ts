/**
 * The poison command (issue 9, item 3): a forwarded create_jobs whose payload is a map instead of bytes used to be
 * appended to the log and kill every replica that applied it, again at every restart. Three real `punctual serve`
 * processes with a cluster secret; the attacker holds the peer credentials (the secret) and speaks the peer
 * protocol through the project's own PeerTransport. The leader checks the forwarded op as the client API checks a
 * request: 400 invalid_argument naming the field, nothing proposed, and the cluster lives on (and restarts).
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/core/log.js';
import { PeerTransport } from '../../src/http/peer/transport.js';
import { freePorts } from '../../src/node/testing/cluster.js';
import { jobSpec } from '../../src/node/testing/fixtures.js';
import { useProcessBed } from '../../src/node/testing/bed.js';
import { call, kill9, spawnServe, type Child } from '../../src/node/testing/processes.js';
import { waitFor } from '../../src/node/testing/receiver.js';
import { apiKind, decodeWire, encodeWire } from '../../src/node/router.js';

const bed = useProcessBed('punctual-poison-');
const secret = 'poison-test-cluster-secret-0123456789';
const shards = 2;

async function ready(c: Child): Promise<boolean> {
  try {
    return (await call(c, 'GET', '/readyz')).status === 200;
  } catch {
    return false;
  }
}

/**
 * Sends `op` to `target` as the member `as` would forward it, with the cluster's credentials, through the public
 * PeerTransport API (whatever its handshake is); returns the decoded answer.
 */
async function forge(as: string, target: { id: string; port: number }, op: unknown): Promise<{ ok: boolean; value?: unknown; error?: { code: string; errors: Array<{ field: string }> } }> {
  const transport = new PeerTransport({
    nodeId: as,
    listenHost: '127.0.0.1',
    listenPort: 0,
    peers: [{ id: target.id, host: '127.0.0.1', port: target.port }],
    clusterSecret: secret,
    shards,
    logger: silentLogger,
    onMessages: () => {},
    onSnapshot: () => Promise.reject(new Error('no snapshots here')),
    onRequest: () => Promise.reject(new Error('no requests here')),
  });
  await transport.start();
  try {
    return decodeWire(await transport.request(target.id, apiKind, encodeWire(op), 5_000));
  } finally {
    await transport.close();
  }
}

describe('a forwarded poison command', () => {
  it('is refused with 400 and its field, never proposed, and the cluster keeps serving, firing and restarting', async () => {
    const [a1, a2, a3, p1, p2, p3] = await freePorts(6);
    const apis = [a1, a2, a3];
    const peerPorts = [p1, p2, p3];
    const peers = [`n1=127.0.0.1:${p1}`, `n2=127.0.0.1:${p2}`, `n3=127.0.0.1:${p3}`];
    const serve = (i: number): Promise<Child> => {
      const id = `n${i + 1}`;
      return spawnServe(
        ['--node-id', id, '--listen', `127.0.0.1:${apis[i]}`, '--peer-listen', `127.0.0.1:${peerPorts[i]}`, '--data', join(bed.dir, id),
          '--peers', peers.filter((p) => !p.startsWith(`${id}=`)).join(','), '--shards', String(shards), '--cluster-secret', secret],
        apis[i],
      );
    };
    const nodes = bed.track(await Promise.all([0, 1, 2].map(serve)));
    await waitFor('cluster ready', async () => (await Promise.all(nodes.map(ready))).every(Boolean), 15_000);
    expect((await call(nodes[0], 'PUT', '/v1/tasks/hook', { url: bed.rx.url('/hook') })).status).toBe(201);

    const view = (await call(nodes[0], 'GET', '/v1/cluster')).json as { shards: Array<{ id: number; leader: string }> };
    for (const shard of [0, 1]) {
      const leader = view.shards[shard].leader;
      const i = Number(leader.slice(1)) - 1;
      const as = leader === 'n1' ? 'n2' : 'n1';
      const poisonJob = { ...jobSpec(`poison-${shard}`, { kind: 'once', atMs: Date.now() + 100 }), payload: { not: 'bytes' } };
      const answer = await forge(as, { id: leader, port: peerPorts[i] }, { op: 'create_jobs', shard, nowMs: Date.now(), jobs: [poisonJob] });
      expect(answer.ok).toBe(false);
      expect(answer.error).toMatchObject({ code: 'invalid_argument', errors: [{ field: 'jobs[0].payload' }] });
      // The raw-command door is closed too: only task writes are forwarded as commands, and they are checked.
      const raw = await forge(as, { id: leader, port: peerPorts[i] }, { op: 'propose', shard, command: { type: 'create_jobs', nowMs: Date.now(), shard, jobs: [poisonJob] } });
      expect(raw.error).toMatchObject({ code: 'invalid_argument', errors: [{ field: 'type' }] });
      const task = { name: 'evil', url: 'http://127.0.0.1:1/', method: 'POST', headers: { host: 'x' }, timeoutMs: 1, retry: null, signingSecret: null, maxConcurrency: 1, createdAtMs: 1, updatedAtMs: 1 };
      const badTask = await forge(as, { id: leader, port: peerPorts[i] }, { op: 'propose', shard, command: { type: 'put_task', nowMs: Date.now(), task } });
      expect(badTask.error).toMatchObject({ code: 'invalid_argument', errors: [{ field: 'headers.host' }] });
    }

    // Every node lives and serves: a job submitted now fires, and no poison job exists anywhere.
    for (const n of nodes) expect(n.proc.exitCode).toBeNull();
    expect((await call(nodes[2], 'POST', '/v1/jobs', { id: 'alive', task: 'hook', schedule: { delay_ms: 100 } })).status).toBe(201);
    await waitFor('fired', () => bed.rx.of('alive').length >= 1, 10_000);
    for (const n of nodes) expect((await call(n, 'GET', '/v1/jobs/poison-0')).status).toBe(404);

    // And every node restarts on its log.
    for (const n of nodes) await kill9(n);
    const again = bed.track(await Promise.all([0, 1, 2].map(serve)));
    await waitFor('cluster ready again', async () => (await Promise.all(again.map(ready))).every(Boolean), 15_000);
    expect((await call(again[0], 'POST', '/v1/jobs', { id: 'alive-again', task: 'hook', schedule: { delay_ms: 100 } })).status).toBe(201);
    await waitFor('fired after the restart', () => bed.rx.of('alive-again').length >= 1, 10_000);
    expect((await call(again[1], 'GET', '/v1/jobs/poison-1')).status).toBe(404);
  });
});
