/**
 * `punctual restore --from FILE --data DIR [--node-id ID] [--new-cluster]`: prepares a data directory from a
 * backup (src/store/backup.ts restoreBackup) that `punctual serve --data DIR` then starts from: the node as it
 * was (a single node), or a new one-node cluster that the other nodes join (docs/deploy.md, Backup and restore).
 */
import type { Command } from 'commander';
import { resolve as resolvePath } from 'node:path';
import { restoreBackup, RestoreError } from '../src/store/backup.js';
import { CliError, exitCodes, usageError, type CliIo } from './io.js';
import { parseNodeId } from './parse.js';

interface RestoreOptions {
  from: string;
  data?: string;
  dataDir?: string;
  nodeId?: string;
  newCluster?: boolean;
  json?: boolean;
}

export function registerRestoreCommand(program: Command, io: CliIo): void {
  program
    .command('restore')
    .description('prepare a data directory from a backup, for `punctual serve --data DIR` (the node must not be running)')
    .requiredOption('--from <file>', 'the backup file (punctual backup --out)')
    .option('--data <dir>', 'the data directory to create (must hold no database yet)')
    .option('--data-dir <dir>', 'same as --data')
    .option('--node-id <id>', "with --new-cluster: the restored node's id (default: the backup's)")
    .option('--new-cluster', "start a new cluster from the backup: this node alone in every shard, at a fresh term; the others join with `serve --join` and `cluster add-node`")
    .option('--json', 'print what was restored as JSON')
    .action((opts: RestoreOptions) => restore(opts, io));
}

function restore(opts: RestoreOptions, io: CliIo): void {
  const dir = opts.data ?? opts.dataDir;
  if (dir === undefined) throw usageError('restore needs --data DIR');
  if (opts.data !== undefined && opts.dataDir !== undefined && opts.data !== opts.dataDir) throw usageError('--data and --data-dir differ');
  const nodeId = opts.nodeId === undefined ? null : parseNodeId('--node-id', opts.nodeId);
  const dataDir = resolvePath(dir);
  let result;
  try {
    result = restoreBackup({ from: resolvePath(opts.from), dataDir, nodeId, newCluster: opts.newCluster === true });
  } catch (err) {
    if (err instanceof RestoreError) throw new CliError(exitCodes.runtime, `punctual: restore refused: ${err.message}`);
    throw err;
  }
  const { restoredNodeId: id, shards, jobs } = result;
  if (opts.json === true) {
    io.stdout.write(JSON.stringify({ data: dataDir, node_id: id, shards, jobs, new_cluster: opts.newCluster === true, backup_node_id: result.nodeId }) + '\n');
    return;
  }
  const lines = [
    `restored node ${id} (${shards} shards, ${jobs} jobs) into ${dataDir}`,
    `start it with: punctual serve --data ${dataDir} --node-id ${id} --shards ${shards}`,
  ];
  if (opts.newCluster === true) {
    lines.push('it is a cluster of one: start each other node with `serve --join --peers ...` on an empty data directory, then `punctual cluster add-node ID=HOST:PORT` (docs/cluster.md)');
  }
  io.stdout.write(lines.join('\n') + '\n');
}
