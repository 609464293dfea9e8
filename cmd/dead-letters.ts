/**
 * `punctual dead-letters list|groups|replay`: the dead letters of docs/api.md (jobs that exhausted their retries),
 * grouped by task and error class, and replayed by ids or by filter (`--dry-run` only counts).
 */
import type { Command } from 'commander';
import { cliLimits, limits, retentionLimits } from '../src/core/limits.js';
import { errorClasses } from '../src/scheduler/failure.js';
import { withClient, type Client, type ClientOptions } from './client.js';
import { cell, isPlainObject, renderTable } from './format.js';
import { CliError, exitCodes, usageError, type CliIo } from './io.js';
import { parseEnum, parseIntIn, parseTime } from './parse.js';
import { printJson, withClientOptions } from './common.js';
import { jobIdArg, taskNameFlag } from './jobs.js';

interface FilterOptions extends ClientOptions {
  task?: string;
  errorClass?: string;
  since?: string;
  until?: string;
}

function withFilterOptions(cmd: Command): Command {
  return cmd
    .option('--task <name>', 'only dead letters of this task')
    .option('--error-class <class>', `only this error class: ${errorClasses.join('|')}`)
    .option('--since <time>', 'failed at or after TIME (RFC 3339 or epoch ms)')
    .option('--until <time>', 'failed before TIME (RFC 3339 or epoch ms)');
}

/** The filter as the API names it (query parameters or a replay's `filter`); checked here, exit 2 when bad. */
function filterOf(opts: FilterOptions): Record<string, string | number> {
  const f: Record<string, string | number> = {};
  if (opts.task !== undefined) f.task = taskNameFlag('--task', opts.task);
  if (opts.errorClass !== undefined) f.error_class = parseEnum('--error-class', opts.errorClass, errorClasses);
  if (opts.since !== undefined) f.since = parseTime('--since', opts.since);
  if (opts.until !== undefined) f.until = parseTime('--until', opts.until);
  return f;
}

function deadLettersTable(items: Record<string, unknown>[]): string {
  const headers = ['JOB', 'TASK', 'CLASS', 'STATUS', 'ATTEMPTS', 'FAILED AT', 'ERROR'];
  const rows = items.map((d) => [d.job_id, d.task, d.error_class, d.status_code, d.attempts, d.failed_at, d.error].map(cell));
  return renderTable(headers, rows);
}

async function listPages(client: Client, query: URLSearchParams, all: boolean): Promise<{ items: Record<string, unknown>[]; next: string | null; raw: unknown }> {
  const items: Record<string, unknown>[] = [];
  for (let page = 0; page < cliLimits.listPagesMax; page++) {
    const { body } = await client.call('GET', `/v1/dead-letters?${query.toString()}`);
    const list = isPlainObject(body) ? body.dead_letters : undefined;
    if (!Array.isArray(list)) throw new CliError(exitCodes.runtime, 'error: bad_response: /v1/dead-letters answered without a "dead_letters" list');
    items.push(...(list as Record<string, unknown>[]));
    const next = isPlainObject(body) && typeof body.next_cursor === 'string' ? body.next_cursor : null;
    if (!all) return { items, next, raw: body };
    if (next === null) return { items, next: null, raw: { dead_letters: items, next_cursor: null } };
    query.set('cursor', next);
  }
  throw new CliError(exitCodes.runtime, `punctual: --all stopped after ${cliLimits.listPagesMax} pages`);
}

export function registerDeadLetterCommands(program: Command, io: CliIo): void {
  const dl = program.command('dead-letters').description('jobs that exhausted their retries: list, group, replay');

  withClientOptions(withFilterOptions(dl.command('list').description('list dead letters, newest failure first (GET /v1/dead-letters)')))
    .option('--limit <n>', `per page, 1..${limits.listLimitMax} (server default ${limits.listLimitDefault})`)
    .option('--cursor <cursor>', 'continue from a previous next cursor')
    .option('--all', 'follow next cursors until the end')
    .action(async (opts: FilterOptions & { limit?: string; cursor?: string; all?: boolean }) => {
      const query = new URLSearchParams(Object.entries(filterOf(opts)).map(([k, v]): [string, string] => [k, String(v)]));
      if (opts.limit !== undefined) query.set('limit', String(parseIntIn('--limit', opts.limit, 1, limits.listLimitMax)));
      if (opts.cursor !== undefined) query.set('cursor', opts.cursor);
      await withClient(opts, io, async (client) => {
        const page = await listPages(client, query, opts.all === true);
        if (client.json) return printJson(io, page.raw);
        io.stdout.write(deadLettersTable(page.items));
        if (page.next !== null) io.stdout.write(`next cursor: ${page.next}\n`);
      });
    });

  withClientOptions(dl.command('groups').description('dead letters counted by task and error class (GET /v1/dead-letters:groups)')).action(
    async (opts: ClientOptions) => {
      await withClient(opts, io, async (client) => {
        const { body } = await client.call('GET', '/v1/dead-letters:groups');
        if (client.json) return printJson(io, body);
        const groups = isPlainObject(body) && Array.isArray(body.groups) ? (body.groups as Record<string, unknown>[]) : [];
        io.stdout.write(renderTable(['TASK', 'CLASS', 'COUNT', 'LAST FAILED AT'], groups.map((g) => [g.task, g.error_class, g.count, g.last_failed_at].map(cell))));
      });
    },
  );

  withClientOptions(withFilterOptions(dl.command('replay').argument('[ids...]', 'job ids to replay (else --all-matching with the filter)')))
    .description(`run dead letters again, at most ${retentionLimits.replayJobsMax} per call (POST /v1/dead-letters:replay)`)
    .option('--all-matching', 'replay the dead letters matching the filter options (all of them when none is given)')
    .option('--dry-run', 'only count what would be replayed')
    .action(async (ids: string[], opts: FilterOptions & { allMatching?: boolean; dryRun?: boolean }) => {
      const filter = filterOf(opts);
      if (ids.length > 0 && (opts.allMatching === true || Object.keys(filter).length > 0)) throw usageError('give job ids, or --all-matching with filter options, not both');
      if (ids.length === 0 && opts.allMatching !== true) throw usageError('give job ids, or --all-matching (with filter options) to replay by filter');
      if (ids.length > retentionLimits.replayJobsMax) throw usageError(`at most ${retentionLimits.replayJobsMax} job ids per replay, got ${ids.length}`);
      for (const id of ids) jobIdArg(id);
      const body: Record<string, unknown> = ids.length > 0 ? { ids } : { filter };
      if (opts.dryRun === true) body.dry_run = true;
      await withClient(opts, io, async (client) => {
        const { body: answer } = await client.call('POST', '/v1/dead-letters:replay', { body });
        if (client.json || !isPlainObject(answer)) return printJson(io, answer);
        io.stdout.write(`matched: ${cell(answer.matched)}\nreplayed: ${cell(answer.replayed)}\n`);
      });
    });
}
