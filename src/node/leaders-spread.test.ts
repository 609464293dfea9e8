/**
 * Real processes (the BUILT code in dist/), real loopback sockets: a fresh three-node cluster with the rebalancer
 * off, so only elections place leaders. Each node but a shard's preferred leader waits longer before its first
 * campaign, so the first elections already spread the leaderships: each node leads the shards it is preferred for
 * (voters sorted by id, `voters[shard % 3]`), none led by one node alone. A full restart places them the same way.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { clusterConfigs } from './testing/cluster.js';
import { useProcessBed } from './testing/bed.js';
import { call, kill9, spawnNode, type Child } from './testing/processes.js';
import { waitFor } from './testing/receiver.js';

const bed = useProcessBed('punctual-leaders-spread-');

async function ready(c: Child): Promise<boolean> {
  try {
    return (await call(c, 'GET', '/readyz')).status === 200;
  } catch {
    return false;
  }
}

async function leaders(c: Child): Promise<Array<string | null>> {
  const view = (await call(c, 'GET', '/v1/cluster')).json as { shards: Array<{ id: number; leader: string | null }> };
  return view.shards.sort((a, b) => a.id - b.id).map((s) => s.leader);
}

describe('leaderships spread from the start', () => {
  it('a fresh cluster, and the same cluster restarted, elect each shard its preferred leader', async () => {
    const shards = 8;
    const configs = await clusterConfigs(join(bed.dir, 'c'), 3, { shards, logLevel: 'warn' });
    const ids = configs.map((c) => c.nodeId).sort();
    const preferred = Array.from({ length: shards }, (_, s) => ids[s % ids.length]);
    for (const round of ['fresh', 'restarted']) {
      const nodes = bed.track(await Promise.all(configs.map((c) => spawnNode(c, { rebalanceIntervalMs: 0 }))));
      await waitFor(`${round} cluster ready`, async () => (await Promise.all(nodes.map(ready))).every(Boolean), 20_000);
      await waitFor(`${round}: every shard led`, async () => (await leaders(nodes[0]!)).every((l) => l !== null), 10_000);
      expect(await leaders(nodes[0]!), round).toEqual(preferred);
      await Promise.all(nodes.map(kill9));
    }
  });
});
