/** `punctual task put|get|list|delete`: the tasks half of docs/api.md. */
import type { Command } from 'commander';
import { taskNamePattern } from '../src/core/ids.js';
import { limits } from '../src/core/limits.js';
import { taskRetentionMsMax } from '../src/scheduler/check.js';
import { seg, withClient, type ClientOptions } from './client.js';
import { collect, printJson, printOne, withClientOptions } from './common.js';
import { isPlainObject, tasksTable } from './format.js';
import { usageError, type CliIo } from './io.js';
import { callbackMethods, parseUrl } from './jobs.js';
import { parseEnum, parseHeader, parseIntIn, parseJsonObject, parseNumberIn, readTextFile } from './parse.js';

export interface TaskPutOptions extends ClientOptions {
  file?: string;
  url?: string;
  method?: string;
  header?: string[];
  timeoutMs?: string;
  maxAttempts?: string;
  initialBackoffMs?: string;
  maxBackoffMs?: string;
  multiplier?: string;
  /** false with --no-jitter; commander sets true when the flag is absent. */
  jitter?: boolean;
  signingSecret?: string;
  signingSecretNext?: string;
  maxConcurrency?: string;
  retentionMs?: string;
}

function taskName(name: string): string {
  if (!taskNamePattern.test(name)) throw usageError(`task name must match [A-Za-z0-9._-]{1,128}, got ${JSON.stringify(name)}`);
  return name;
}

function retryBody(opts: TaskPutOptions): Record<string, unknown> | undefined {
  const retry: Record<string, unknown> = {};
  if (opts.maxAttempts !== undefined) retry.max_attempts = parseIntIn('--max-attempts', opts.maxAttempts, 1, limits.retryMaxAttemptsMax);
  if (opts.initialBackoffMs !== undefined) {
    retry.initial_backoff_ms = parseIntIn('--initial-backoff-ms', opts.initialBackoffMs, 0, limits.retryBackoffMsMax);
  }
  if (opts.maxBackoffMs !== undefined) {
    retry.max_backoff_ms = parseIntIn('--max-backoff-ms', opts.maxBackoffMs, 0, limits.retryBackoffMsMax);
  }
  if (opts.multiplier !== undefined) retry.multiplier = parseNumberIn('--multiplier', opts.multiplier, 1, limits.retryMultiplierMax);
  if (opts.jitter === false) retry.jitter = false;
  return Object.keys(retry).length > 0 ? retry : undefined;
}

/** The PUT /v1/tasks/{name} body: the JSON of --file as is, or the flags (only those given). */
export function buildTaskBody(opts: TaskPutOptions): Record<string, unknown> {
  const flagNames = Object.entries({
    '--url': opts.url, '--method': opts.method, '--header': opts.header, '--timeout-ms': opts.timeoutMs,
    '--max-attempts': opts.maxAttempts, '--initial-backoff-ms': opts.initialBackoffMs,
    '--max-backoff-ms': opts.maxBackoffMs, '--multiplier': opts.multiplier,
    '--no-jitter': opts.jitter === false ? true : undefined, '--signing-secret': opts.signingSecret,
    '--signing-secret-next': opts.signingSecretNext, '--max-concurrency': opts.maxConcurrency,
    '--retention-ms': opts.retentionMs,
  }).filter(([, v]) => v !== undefined).map(([k]) => k); // prettier-ignore
  if (opts.file !== undefined) {
    if (flagNames.length > 0) throw usageError(`--file and ${flagNames.join(', ')} are mutually exclusive`);
    return parseJsonObject('--file', readTextFile('--file', opts.file));
  }
  if (opts.url === undefined) throw usageError('task put: give --url URL (or --file F with the JSON body)');
  const body: Record<string, unknown> = { url: parseUrl('--url', opts.url) };
  if (opts.method !== undefined) body.method = parseEnum('--method', opts.method.toUpperCase(), callbackMethods);
  if (opts.header !== undefined) body.headers = Object.fromEntries(opts.header.map((h) => parseHeader('--header', h)));
  if (opts.timeoutMs !== undefined) body.timeout_ms = parseIntIn('--timeout-ms', opts.timeoutMs, 1, limits.callbackTimeoutMsMax);
  const retry = retryBody(opts);
  if (retry !== undefined) body.retry = retry;
  if (opts.signingSecret !== undefined) {
    if (opts.signingSecret === '') throw usageError('--signing-secret: must not be empty');
    body.signing_secret = opts.signingSecret;
  }
  if (opts.signingSecretNext !== undefined) {
    if (opts.signingSecretNext === '') throw usageError('--signing-secret-next: must not be empty');
    body.signing_secret_next = opts.signingSecretNext;
  }
  if (opts.maxConcurrency !== undefined) {
    body.max_concurrency = parseIntIn('--max-concurrency', opts.maxConcurrency, 1, limits.maxConcurrencyMax);
  }
  if (opts.retentionMs !== undefined) body.retention_ms = parseIntIn('--retention-ms', opts.retentionMs, 1000, taskRetentionMsMax);
  return body;
}

function addTaskPut(task: Command, io: CliIo): void {
  withClientOptions(task.command('put').argument('<name>', 'task name').description('create or replace a task'))
    .option('--file <file>', 'the whole task as a JSON file (the task body of docs/api.md) instead of the flags')
    .option('--url <url>', 'callback URL')
    .option('--method <method>', 'GET|POST|PUT|PATCH|DELETE (default POST)')
    .option('--header <name:value>', 'callback header (repeatable)', collect)
    .option('--timeout-ms <ms>', `callback timeout (default ${limits.callbackTimeoutMsDefault})`)
    .option('--max-attempts <n>', `attempts before an execution fails (default ${limits.retryMaxAttemptsDefault})`)
    .option('--initial-backoff-ms <ms>', `first retry delay (default ${limits.retryInitialBackoffMsDefault})`)
    .option('--max-backoff-ms <ms>', `largest retry delay (default ${limits.retryMaxBackoffMsDefault})`)
    .option('--multiplier <x>', `backoff multiplier (default ${limits.retryMultiplierDefault})`)
    .option('--no-jitter', 'retry delays without random jitter')
    .option('--signing-secret <secret>', 'sign every callback (webhook-signature and X-Punctual-Signature)')
    .option('--signing-secret-next <secret>', 'a second secret, signed beside the first while receivers rotate')
    .option('--max-concurrency <n>', `callbacks of this task in flight at once (default ${limits.maxConcurrencyDefault})`)
    .option('--retention-ms <ms>', "keep this task's finished jobs this long instead of the node's --retention")
    .action(async (name: string, opts: TaskPutOptions) => {
      const body = buildTaskBody(opts);
      await withClient(opts, io, async (client) => {
        const res = await client.call('PUT', `/v1/tasks/${seg(taskName(name))}`, { body });
        printOne(client, io, res.body);
      });
    });
}

function addTaskReads(task: Command, io: CliIo): void {
  withClientOptions(task.command('get').argument('<name>', 'task name').description('show a task')).action(
    async (name: string, opts: ClientOptions) => {
      await withClient(opts, io, async (client) => {
        const { body } = await client.call('GET', `/v1/tasks/${seg(taskName(name))}`);
        printOne(client, io, body);
      });
    },
  );
  withClientOptions(task.command('list').description('list tasks')).action(async (opts: ClientOptions) => {
    await withClient(opts, io, async (client) => {
      const { body } = await client.call('GET', '/v1/tasks');
      if (client.json) return printJson(io, body);
      const tasks = isPlainObject(body) && Array.isArray(body.tasks) ? (body.tasks as Record<string, unknown>[]) : [];
      io.stdout.write(tasksTable(tasks));
    });
  });
  withClientOptions(task.command('delete').argument('<name>', 'task name').description('delete a task')).action(
    async (name: string, opts: ClientOptions) => {
      await withClient(opts, io, async (client) => {
        const { body } = await client.call('DELETE', `/v1/tasks/${seg(taskName(name))}`);
        if (client.json) return printOne(client, io, body);
        io.stdout.write(`deleted task ${name}\n`);
      });
    },
  );
}

export function registerTaskCommands(program: Command, io: CliIo): void {
  const task = program.command('task').description('define reusable tasks (where and how to call)');
  addTaskPut(task, io);
  addTaskReads(task, io);
}
