/**
 * `punctual cluster add-node` / `remove-node` in-process (buildProgram/run with buffered io) against a real
 * three-node cluster (startNode: real HTTP API, real peer transport on loopback, real SQLite files) plus a
 * fourth node started to join: progress lines, final lines, --json, API errors and usage errors.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../src/core/log.js';
import type { NodeConfig } from '../src/node/api.js';
import { startNode, type NodeHandle } from '../src/node/node.js';
import { clusterConfigs } from '../src/node/testing/cluster.js';
import { waitFor } from '../src/node/testing/receiver.js';
import { runCli, type CliResult } from './cli-fixture.js';

const cli = (argv: string[]): Promise<CliResult> => runCli(argv);

let root: string;
let configs: NodeConfig[];
const nodes: NodeHandle[] = [];
let server = '';

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'punctual-cli-membership-'));
  configs = await clusterConfigs(root, 4, { shards: 3 });
  for (const c of configs.slice(0, 3)) c.peers = c.peers.filter((p) => p.id !== 'n4');
  const options = { logger: silentLogger, closeGraceMs: 500, rebalanceIntervalMs: 0 };
  for (const c of configs.slice(0, 3)) nodes.push(await startNode(c, options));
  nodes.push(await startNode(configs[3]!, { ...options, join: true }));
  server = `http://127.0.0.1:${nodes[1]!.apiPort}`;
  await waitFor('founders ready', () => nodes.slice(0, 3).every((n) => n.api.readiness().ready), 10_000);
});

afterAll(async () => {
  for (const n of nodes) await n.close();
  rmSync(root, { recursive: true, force: true });
});

describe('punctual cluster add-node / remove-node', () => {
  it('adds the joining node, reporting each shard, then refuses to add it again', async () => {
    const addr = `127.0.0.1:${configs[3]!.peerListenPort}`;
    const r = await cli(['cluster', 'add-node', `n4=${addr}`, '--server', server]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines[0]).toBe(`adding n4 (${addr}) to every shard: learner first, voter once caught up`);
    expect(lines[lines.length - 1]).toBe('n4 is a voter of every shard (3)');
    // Progress lines are whatever the polls saw meanwhile: only these shapes, and every shard ends as a voter.
    for (const l of lines.slice(1, -1)) expect(l).toMatch(/^shard [0-2]: n4 (learner|voter)$/);
    expect(lines.filter((l) => l.endsWith(' voter')).sort(), r.stdout).toEqual(['shard 0: n4 voter', 'shard 1: n4 voter', 'shard 2: n4 voter']);
    const status = await cli(['cluster', 'status', '--json', '--server', server]);
    const view = JSON.parse(status.stdout) as { shards: Array<{ members: string[]; learners: string[] }> };
    for (const s of view.shards) expect([[...s.members].sort(), s.learners]).toEqual([['n1', 'n2', 'n3', 'n4'], []]);

    const again = await cli(['cluster', 'add-node', `n4=${addr}`, '--server', server]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('error: conflict: n4 is already a member');
  });

  it('removes a node with --json (the membership after), then says it is not a member', async () => {
    const r = await cli(['cluster', 'remove-node', 'n3', '--json', '--server', server]);
    expect(r.code).toBe(0);
    const body = JSON.parse(r.stdout) as { id: string; shards: Array<{ voters: string[]; learners: string[] }> };
    expect(body.id).toBe('n3');
    for (const s of body.shards) expect(s).toEqual({ id: expect.any(Number), voters: ['n1', 'n2', 'n4'], learners: [] });
    const again = await cli(['cluster', 'remove-node', 'n3', '--server', server]);
    expect([again.code, again.stdout]).toEqual([1, 'removing n3 from every shard\n']);
    expect(again.stderr).toContain('error: not_found: node "n3" is not a member');
  });

  it('removes a node printing every shard it left, even when the removal is quicker than a progress poll', async () => {
    const r = await cli(['cluster', 'remove-node', 'n4', '--server', server]);
    expect([r.code, r.stderr]).toEqual([0, '']);
    const lines = r.stdout.trim().split('\n');
    expect(lines[0]).toBe('removing n4 from every shard');
    expect(lines[lines.length - 1]).toBe('n4 is no longer a member; stop it (its data directory is of no further use)');
    // each shard once: seen by a poll, else taken from the membership the answer carries
    expect(lines.slice(1, -1).sort()).toEqual(['shard 0: n4 removed', 'shard 1: n4 removed', 'shard 2: n4 removed']);
  });

  it('usage errors exit 2 without a request', async () => {
    for (const argv of [['add-node', 'n5'], ['add-node', 'N5=127.0.0.1:1'], ['add-node', 'n5=127.0.0.1:0'], ['remove-node', 'Bad_Id']]) {
      const r = await cli(['cluster', ...argv, '--server', 'http://127.0.0.1:1']);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/<ID(=HOST:PORT)?>/);
    }
  });
});
