/**
 * `punctual cluster status|transfer-leader|add-node|remove-node`: GET /v1/cluster,
 * POST /v1/cluster/shards/{id}/transfer-leader, POST /v1/cluster/nodes, DELETE /v1/cluster/nodes/{id}.
 * add-node and remove-node wait for the server to finish and meanwhile print each shard's change, as seen by
 * polling GET /v1/cluster.
 */
import type { Command } from 'commander';
import { cliLimits } from '../src/core/limits.js';
import { seg, withClient, type Client, type ClientOptions } from './client.js';
import { printJson, printOne, withClientOptions } from './common.js';
import { clusterText, isPlainObject } from './format.js';
import type { CliIo } from './io.js';
import { formatHostPort, parseIntIn, parseMember, parseNodeId } from './parse.js';

export function registerClusterCommands(program: Command, io: CliIo): void {
  const cluster = program.command('cluster').description('inspect and operate the cluster');
  withClientOptions(cluster.command('status').description('nodes, shards and their leaders')).action(
    async (opts: ClientOptions) => {
      await withClient(opts, io, async (client) => {
        const { body } = await client.call('GET', '/v1/cluster');
        if (client.json || !isPlainObject(body)) return printJson(io, body);
        io.stdout.write(clusterText(body));
      });
    },
  );
  withClientOptions(
    cluster
      .command('transfer-leader')
      .argument('<shard>', 'shard id')
      .requiredOption('--to <node>', 'the node that should lead the shard')
      .description("move a shard's leadership to another node"),
  ).action(async (shardText: string, opts: ClientOptions & { to: string }) => {
    const shard = parseIntIn('<shard>', shardText, 0, cliLimits.shardsMax - 1);
    const to = parseNodeId('--to', opts.to);
    await withClient(opts, io, async (client) => {
      const { body } = await client.call('POST', `/v1/cluster/shards/${shard}/transfer-leader`, { body: { to } });
      // the answer (202 {shard, to}) only echoes the request: a sentence says more; --json keeps the answer
      if (client.json && body !== null) return printOne(client, io, body);
      io.stdout.write(`leadership transfer of shard ${shard} to ${to} requested\n`);
    });
  });
  registerMembershipCommands(cluster, io);
}

/** How often add-node / remove-node look at GET /v1/cluster to report progress. */
const progressPollMs = 300;

type MemberState = 'absent' | 'learner' | 'voter';

function registerMembershipCommands(cluster: Command, io: CliIo): void {
  withClientOptions(
    cluster
      .command('add-node')
      .argument('<ID=HOST:PORT>', "the new node's id and peer address (start it first with serve --join)")
      .description('add a node to every shard: learner first, voter once caught up'),
  ).action(async (spec: string, opts: ClientOptions) => {
    const { id, host, port } = parseMember('<ID=HOST:PORT>', spec);
    const peerAddr = formatHostPort(host, port);
    await withClient(opts, io, async (client) => {
      if (!client.json) io.stdout.write(`adding ${id} (${peerAddr}) to every shard: learner first, voter once caught up\n`);
      const { body } = await watching(client, io, id, () => client.call('POST', '/v1/cluster/nodes', { body: { id, peer_addr: peerAddr } }));
      if (client.json || !isPlainObject(body)) return printJson(io, body);
      const count = Array.isArray(body.shards) ? body.shards.length : 0;
      io.stdout.write(`${id} is a voter of every shard (${count})\n`);
    });
  });
  withClientOptions(
    cluster
      .command('remove-node')
      .argument('<ID>', 'the node to remove')
      .description('remove a node from every shard (its leaderships are moved away first)'),
  ).action(async (idText: string, opts: ClientOptions) => {
    const id = parseNodeId('<ID>', idText);
    await withClient(opts, io, async (client) => {
      if (!client.json) io.stdout.write(`removing ${id} from every shard\n`);
      const { body } = await watching(client, io, id, () => client.call('DELETE', `/v1/cluster/nodes/${seg(id)}`));
      if (client.json || !isPlainObject(body)) return printJson(io, body);
      io.stdout.write(`${id} is no longer a member; stop it (its data directory is of no further use)\n`);
    });
  });
}

/**
 * Runs `call`, printing `shard N: ID learner|voter|removed` for every change seen meanwhile (not with --json), then
 * the change of every shard the polls missed, from the membership the answer carries: a change quicker than a poll
 * (a removal usually is) still gets its line.
 */
async function watching<T extends { body: unknown }>(client: Client, io: CliIo, id: string, call: () => Promise<T>): Promise<T> {
  if (client.json) return call();
  const seen = new Map<number, MemberState>();
  let done = false;
  const waker = { wake: (): void => {} };
  const look = async (report: boolean): Promise<void> => {
    try {
      const { body } = await client.call('GET', '/v1/cluster');
      // a look that returns after the answer came is left to the answer: what it saw is printed from there
      if (report && done) return;
      for (const [shard, state] of shardStates(body, id, 'members')) {
        const before = seen.get(shard);
        seen.set(shard, state);
        if (report && before !== undefined && before !== state) io.stdout.write(`shard ${shard}: ${id} ${state === 'absent' ? 'removed' : state}\n`);
      }
    } catch {
      // progress is best effort: the answer of `call` is what counts
    }
  };
  await look(false);
  const watcher = (async () => {
    while (!done) {
      await new Promise<void>((r) => {
        waker.wake = r;
        setTimeout(r, progressPollMs);
      });
      if (!done) await look(true);
    }
  })();
  let answer: T;
  try {
    answer = await call();
  } finally {
    done = true;
    waker.wake();
    await watcher;
  }
  for (const [shard, state] of shardStates(answer.body, id, 'voters')) {
    if (seen.get(shard) !== state) io.stdout.write(`shard ${shard}: ${id} ${state === 'absent' ? 'removed' : state}\n`);
  }
  return answer;
}

/**
 * The node's state in each shard of `body.shards`, whose voters are listed under `votersField`: `voters` in a
 * membership answer, `members` in GET /v1/cluster.
 */
function shardStates(body: unknown, id: string, votersField: 'voters' | 'members'): Array<[number, MemberState]> {
  if (!isPlainObject(body) || !Array.isArray(body.shards)) return [];
  return body.shards.flatMap((s: unknown): Array<[number, MemberState]> => {
    if (!isPlainObject(s) || typeof s.id !== 'number') return [];
    const voters = s[votersField];
    if (!Array.isArray(voters)) return [];
    const learners = Array.isArray(s.learners) ? s.learners : [];
    const state: MemberState = learners.includes(id) ? 'learner' : voters.includes(id) ? 'voter' : 'absent';
    return [[s.id, state]];
  });
}
