/**
 * `punctual serve --retention` end to end, on the BUILT code: a real `serve` process with a short retention and a
 * real receiver. A finished job answers until its retention ends, then 404; the node is killed with -9 after the
 * job finished and restarted on the same data directory, and the deletion still happens.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { freePorts } from './testing/cluster.js';
import { useProcessBed } from './testing/bed.js';
import { call, kill9, spawnServe } from './testing/processes.js';
import { waitFor } from './testing/receiver.js';

const bed = useProcessBed('punctual-retention-process-');

describe('serve --retention', () => {
  it('a finished job is deleted after the retention, across a kill -9 and a restart', async () => {
    const [api, peer] = await freePorts(2);
    const flags = ['--listen', `127.0.0.1:${api}`, '--peer-listen', `127.0.0.1:${peer}`, '--data', join(bed.dir, 'n1'), '--retention', '3s', '--log-level', 'info'];
    let node = bed.track(await spawnServe(flags, api!));
    expect((await call(node, 'PUT', '/v1/tasks/hook', { url: bed.rx.url('/hook'), retention_ms: 3_600_000 })).status).toBe(201);
    expect((await call(node, 'PUT', '/v1/tasks/plain', { url: bed.rx.url('/plain') })).status).toBe(201);
    expect((await call(node, 'POST', '/v1/jobs', { id: 'kept', task: 'hook', schedule: { delay_ms: 10 } })).status).toBe(201);
    expect((await call(node, 'POST', '/v1/jobs', { id: 'short', task: 'plain', schedule: { delay_ms: 10 } })).status).toBe(201);
    await waitFor('finished', async () => (await call(node, 'GET', '/v1/jobs/short')).json.state === 'SUCCEEDED', 10_000);
    await kill9(node);
    node = bed.track(await spawnServe(flags, api!));
    await waitFor('deleted', async () => (await call(node, 'GET', '/v1/jobs/short')).status === 404, 20_000);
    const kept = await call(node, 'GET', '/v1/jobs/kept');
    expect(kept.json.state).toBe('SUCCEEDED');
  }, 60_000);
});
