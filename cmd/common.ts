/** Pieces shared by the client command groups (job, task, cluster). */
import type { Command } from 'commander';
import { defaultServer, type Client } from './client.js';
import type { CliIo } from './io.js';
import { renderObject, isPlainObject } from './format.js';

/** Adds the options every client command takes: --server, --token, --cacert, --json. */
export function withClientOptions(cmd: Command): Command {
  return cmd
    .option('--server <url>', `server base URL (env PUNCTUAL_SERVER, default ${defaultServer})`)
    .option('--token <token>', 'bearer token for the API (env PUNCTUAL_TOKEN)')
    .option('--cacert <file>', 'PEM CA certificate(s) to verify an https:// server with, instead of the system CAs (env PUNCTUAL_CACERT)')
    .option('--json', 'print the JSON the server answered instead of a table');
}

/** Repeatable option collector: `--header a:1 --header b:2`. */
export function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

/** One object: `key: value` lines, or the JSON with --json (nothing for an empty answer such as a 204). */
export function printOne(client: Client, io: CliIo, body: unknown): void {
  if (body === null) return;
  if (client.json || !isPlainObject(body)) {
    io.stdout.write(JSON.stringify(body, null, 2) + '\n');
    return;
  }
  io.stdout.write(renderObject(body));
}

export function printJson(io: CliIo, body: unknown): void {
  io.stdout.write(JSON.stringify(body, null, 2) + '\n');
}
