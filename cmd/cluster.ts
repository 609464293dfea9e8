/** `punctual cluster status|transfer-leader`: GET /v1/cluster and POST /v1/cluster/shards/{id}/transfer-leader. */
import type { Command } from 'commander';
import { cliLimits } from '../src/core/limits.js';
import { withClient, type ClientOptions } from './client.js';
import { printJson, printOne, withClientOptions } from './common.js';
import { clusterText, isPlainObject } from './format.js';
import type { CliIo } from './io.js';
import { parseIntIn, parseNodeId } from './parse.js';

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
      if (body === null && !client.json) {
        io.stdout.write(`leadership transfer of shard ${shard} to ${to} requested\n`);
        return;
      }
      printOne(client, io, body);
    });
  });
}
