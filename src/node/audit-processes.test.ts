/**
 * Real processes (the BUILT code in dist/: `npm test` builds first): what a load balancer probing /readyz sees of
 * a healthy three-node cluster under write load: never 503 "catching up" merely because the applier trails the
 * commit index by a slice while writes flow.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { clusterConfigs } from './testing/cluster.js';
import { useProcessBed } from './testing/bed.js';
import { call, spawnNode, type Child } from './testing/processes.js';
import { waitFor } from './testing/receiver.js';

const bed = useProcessBed('punctual-audit-');

async function readyz(c: Child): Promise<{ status: number; detail: string }> {
  const r = await call(c, 'GET', '/readyz');
  return { status: r.status, detail: String(r.json?.detail ?? '') };
}

describe('/readyz under load, real processes', () => {
  it('a healthy node under write load is never "catching up"', async () => {
    const configs = await clusterConfigs(join(bed.dir, 'ready'), 3, { shards: 4, logLevel: 'warn' });
    const children = bed.track(await Promise.all(configs.map((c) => spawnNode(c))));
    await waitFor('cluster ready', async () => (await Promise.all(children.map(readyz))).every((r) => r.status === 200), 15_000);
    const [n1] = children;
    expect((await call(n1, 'PUT', '/v1/tasks/hook', { url: bed.rx.url('/hook') })).status).toBe(201);
    const ids = Array.from({ length: 48 }, (_, i) => `load-${i}`);
    const far = Date.now() + 3_600_000;
    const batch = await call(n1, 'POST', '/v1/jobs:batch', { jobs: ids.map((id) => ({ id, task: 'hook', schedule: { at: far } })) });
    expect(batch.status).toBe(200);
    let writing = true;
    let writes = 0;
    // Pauses and resumes through every node (most are forwarded): a steady stream of small entries.
    const load = Promise.all(
      ids.map(async (id, i) => {
        const via = children[i % children.length];
        for (let round = 0; writing; round++) {
          await call(via, 'POST', `/v1/jobs/${id}/${round % 2 === 0 ? 'pause' : 'resume'}`);
          writes++;
        }
      }),
    );
    const answers: Array<{ status: number; detail: string }> = [];
    // Probe until enough of both happened (counts, not a time window: a loaded machine only takes longer).
    const giveUpMs = Date.now() + 45_000;
    while ((answers.length < 120 || writes < 300) && Date.now() < giveUpMs) {
      answers.push(...(await Promise.all(children.map(readyz))));
      await new Promise((r) => setTimeout(r, 10));
    }
    writing = false;
    await load;
    expect(writes).toBeGreaterThanOrEqual(300); // a stream of writes did flow while /readyz was probed
    expect(answers.length).toBeGreaterThanOrEqual(120);
    // Elections under load may briefly leave a shard leaderless ("no known leader"): that is a true 503.
    expect(answers.filter((a) => a.detail.includes('catching up'))).toEqual([]);
  }, 90_000);
});
