/**
 * spawnLocalNodes with --tls: the bench's nodes serve HTTPS and their peers use mutual TLS, with certificates made
 * by openssl for the run; the load generator's connections trust the run's CA. Real `punctual serve` processes
 * of dist/ (`npm run build` first).
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { assertBuilt } from '../src/node/testing/processes.js';
import { ServerSet } from './load.js';
import { spawnLocalNodes, type LocalNodes } from './node-process.js';

const entry = join(fileURLToPath(new URL('..', import.meta.url)), 'dist', 'cmd', 'punctual.js');
let nodes: LocalNodes | null = null;

afterEach(async () => {
  await nodes?.stop();
  nodes = null;
});

describe('spawnLocalNodes with tls', () => {
  it('three nodes: HTTPS only on the API, a cluster over mutual TLS, the CA trusted by the load generator', async () => {
    assertBuilt();
    nodes = await spawnLocalNodes({ nodes: 3, tls: true, entry });
    expect(nodes.urls.every((u) => u.startsWith('https://127.0.0.1:'))).toBe(true);
    expect(nodes.caPem).toContain('BEGIN CERTIFICATE');
    // Cleartext on the HTTPS port gets nothing useful; the CA-trusting client gets the cluster view.
    await expect(request(nodes.urls[0]!.replace('https:', 'http:') + '/healthz', { headersTimeout: 2_000 })).rejects.toThrow();
    const servers = new ServerSet(nodes.urls, { connections: 1, caPem: nodes.caPem });
    try {
      type View = { nodes: Array<{ id: string; reachable: boolean }>; shards: Array<{ leader: string | null }> };
      // Ready means every shard has a leader; reachability of every peer is seen a moment later: poll for it.
      let view: View | null = null;
      for (let i = 0; i < 100; i++) {
        const { status, json } = await servers.send('GET', '/v1/cluster');
        expect(status).toBe(200);
        view = json as View;
        if (view.nodes.every((n) => n.reachable) && view.shards.every((s) => s.leader !== null)) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(view!.nodes.map((n) => n.id).sort()).toEqual(['n1', 'n2', 'n3']);
      expect(view!.nodes.every((n) => n.reachable)).toBe(true);
      expect(view!.shards.every((s) => s.leader !== null)).toBe(true);
    } finally {
      await servers.close();
    }
    // A client that does not trust the run's CA is refused.
    const untrusting = new Agent();
    try {
      await expect(request(nodes.urls[1]! + '/healthz', { dispatcher: untrusting, headersTimeout: 2_000 })).rejects.toThrow();
    } finally {
      await untrusting.close();
    }
  });
});
