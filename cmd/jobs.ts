/** `punctual job add|get|list|cancel|pause|resume|run|history`: the jobs half of docs/api.md. */
import type { Command } from 'commander';
import { jobIdPattern, taskNamePattern } from '../src/core/ids.js';
import { cliLimits, limits, searchLimits } from '../src/core/limits.js';
import { dstGapPolicies, dstRepeatPolicies } from '../src/scheduler/check.js';
import { jobStates } from '../src/scheduler/types.js';
import { seg, withClient, type Client, type ClientOptions } from './client.js';
import { collect, printJson, printOne, withClientOptions } from './common.js';
import { registerJobEditCommands } from './job-edit.js';
import { executionsTable, isPlainObject, jobsTable } from './format.js';
import { CliError, exitCodes, usageError, type CliIo } from './io.js';
import {
  parseBase64,
  parseEnum,
  parseHeader,
  parseIntIn,
  parseJson,
  parseJsonObject,
  parseTime,
  readTextFile,
} from './parse.js';

export interface JobAddOptions extends ClientOptions {
  task?: string;
  url?: string;
  method?: string;
  header?: string[];
  timeoutMs?: string;
  maxAttempts?: string;
  payload?: string;
  payloadFile?: string;
  payloadBase64?: string;
  at?: string;
  delayMs?: string;
  cron?: string;
  timezone?: string;
  everyMs?: string;
  startAt?: string;
  dstGap?: string;
  dstRepeat?: string;
  spreadMs?: string;
  id?: string;
  endAt?: string;
  maxRuns?: string;
  misfire?: string;
  misfireThresholdMs?: string;
  overlap?: string;
  metadata?: string;
  idempotencyKey?: string;
  /** Calendars whose dates the recurring schedule skips (schedule.exclude). */
  exclude?: string[];
}

export const callbackMethods = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;

/** The flags of exactly-one-of groups that were given, by name. */
function given(entries: Array<[string, unknown]>): string[] {
  return entries.filter(([, v]) => v !== undefined).map(([k]) => k);
}

function atMostOne(names: string[], group: string): void {
  if (names.length > 1) throw usageError(`${names.join(' and ')} are mutually exclusive (${group})`);
}

export function parseUrl(what: string, text: string): string {
  let url: URL | null = null;
  try {
    url = new URL(text);
  } catch {
    url = null;
  }
  if (url === null || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
    throw usageError(`${what}: expected an absolute http(s) URL, got ${JSON.stringify(text)}`);
  }
  return text;
}

/** The inline `callback` of `job add --url ...`: only the fields given, the server fills the defaults. */
function callbackBody(opts: JobAddOptions): Record<string, unknown> {
  const callback: Record<string, unknown> = { url: parseUrl('--url', opts.url!) };
  if (opts.method !== undefined) callback.method = parseEnum('--method', opts.method.toUpperCase(), callbackMethods);
  if (opts.header !== undefined) callback.headers = Object.fromEntries(opts.header.map((h) => parseHeader('--header', h)));
  if (opts.timeoutMs !== undefined) {
    callback.timeout_ms = parseIntIn('--timeout-ms', opts.timeoutMs, 1, limits.callbackTimeoutMsMax);
  }
  if (opts.maxAttempts !== undefined) {
    callback.retry = { max_attempts: parseIntIn('--max-attempts', opts.maxAttempts, 1, limits.retryMaxAttemptsMax) };
  }
  return callback;
}

function targetFields(opts: JobAddOptions, body: Record<string, unknown>): void {
  atMostOne(given([['--task', opts.task], ['--url', opts.url]]), 'a job calls a task or an inline callback');
  if (opts.task === undefined && opts.url === undefined) throw usageError('job add: give --task NAME or --url URL');
  if (opts.task !== undefined) {
    const inline = given([
      ['--method', opts.method],
      ['--header', opts.header],
      ['--timeout-ms', opts.timeoutMs],
      ['--max-attempts', opts.maxAttempts],
    ]);
    if (inline.length > 0) throw usageError(`${inline.join(', ')}: only with --url (the task defines them)`);
    body.task = taskNameFlag('--task', opts.task);
  } else {
    body.callback = callbackBody(opts);
  }
}

export function payloadFields(opts: Pick<JobAddOptions, 'payload' | 'payloadFile' | 'payloadBase64'>, body: Record<string, unknown>): void {
  const names = given([['--payload', opts.payload], ['--payload-file', opts.payloadFile], ['--payload-base64', opts.payloadBase64]]);
  atMostOne(names, 'one payload');
  if (opts.payload !== undefined) body.payload = parseJson('--payload', opts.payload);
  if (opts.payloadFile !== undefined) {
    body.payload = parseJson('--payload-file', readTextFile('--payload-file', opts.payloadFile));
  }
  if (opts.payloadBase64 !== undefined) body.payload_base64 = parseBase64('--payload-base64', opts.payloadBase64);
}

export type ScheduleOptions = Pick<
  JobAddOptions,
  'at' | 'delayMs' | 'cron' | 'timezone' | 'everyMs' | 'startAt' | 'dstGap' | 'dstRepeat' | 'spreadMs'
>;

export function scheduleField(opts: ScheduleOptions): Record<string, unknown> | undefined {
  const kinds = given([['--at', opts.at], ['--delay-ms', opts.delayMs], ['--cron', opts.cron], ['--every-ms', opts.everyMs]]);
  atMostOne(kinds, 'one schedule');
  if (opts.timezone !== undefined && opts.cron === undefined) throw usageError('--timezone: only with --cron');
  if (opts.startAt !== undefined && opts.everyMs === undefined) throw usageError('--start-at: only with --every-ms');
  const dst = given([['--dst-gap', opts.dstGap], ['--dst-repeat', opts.dstRepeat]]);
  if (dst.length > 0 && opts.cron === undefined) throw usageError(`${dst.join(', ')}: only with --cron`);
  if (opts.spreadMs !== undefined && opts.cron === undefined && opts.everyMs === undefined) {
    throw usageError('--spread-ms: only with --cron or --every-ms');
  }
  if (opts.at !== undefined) return { at: parseTime('--at', opts.at) };
  if (opts.delayMs !== undefined) return { delay_ms: parseIntIn('--delay-ms', opts.delayMs, 0, Number.MAX_SAFE_INTEGER) };
  let schedule: Record<string, unknown> | undefined;
  if (opts.cron !== undefined) {
    if (opts.cron.trim() === '') throw usageError('--cron: must not be empty');
    schedule = opts.timezone === undefined ? { cron: opts.cron } : { cron: opts.cron, timezone: opts.timezone };
    if (dst.length > 0) {
      const policy: Record<string, string> = {};
      if (opts.dstGap !== undefined) policy.gap = oneOfFlag('--dst-gap', opts.dstGap, dstGapPolicies);
      if (opts.dstRepeat !== undefined) policy.repeat = oneOfFlag('--dst-repeat', opts.dstRepeat, dstRepeatPolicies);
      schedule.dst = policy;
    }
  }
  if (opts.everyMs !== undefined) {
    schedule = { every_ms: parseIntIn('--every-ms', opts.everyMs, limits.everyMsMin, limits.everyMsMax) };
    if (opts.startAt !== undefined) schedule.start_at = parseTime('--start-at', opts.startAt);
  }
  if (schedule !== undefined && opts.spreadMs !== undefined) schedule.spread_ms = parseIntIn('--spread-ms', opts.spreadMs, 1, limits.spreadMsMax);
  return schedule; // absent = now
}

function oneOfFlag(flag: string, value: string, values: readonly string[]): string {
  if (!values.includes(value)) throw usageError(`${flag}: must be one of ${values.join('|')}, got ${JSON.stringify(value)}`);
  return value;
}

/** The flags of a schedule's `dst` and `spread_ms` (job add, update, preview). */
export const scheduleExtraFlags: ReadonlyArray<readonly [string, string]> = [
  ['--dst-gap <policy>', `with --cron: a local time that does not exist that day, ${dstGapPolicies.join('|')} (default shift_forward)`],
  ['--dst-repeat <policy>', `with --cron: a local time that happens twice, ${dstRepeatPolicies.join('|')} (default first)`],
  ['--spread-ms <ms>', `with --cron or --every-ms: run at a stable offset of the job id within MS ms after each time, 1..${limits.spreadMsMax}`],
];

/** A job id given as an argument: checked here, so a typo is bad usage (exit 2) and sends no request. */
export function jobIdArg(id: string): string {
  if (!jobIdPattern.test(id)) throw usageError(`job id must match [A-Za-z0-9._:-]{1,128}, got ${JSON.stringify(id)}`);
  return id;
}

/** A task name given to a flag (`--task`): one the API would refuse is bad usage (exit 2) and sends no request. */
export function taskNameFlag(what: string, name: string): string {
  if (!taskNamePattern.test(name)) throw usageError(`${what}: invalid task name ${JSON.stringify(name)} (must match [A-Za-z0-9._-]{1,128})`);
  return name;
}

/** The POST /v1/jobs body and headers that `job add` sends; usage errors (exit 2) before any request. */
export function buildJobRequest(opts: JobAddOptions): { body: Record<string, unknown>; headers: Record<string, string> } {
  const body: Record<string, unknown> = {};
  if (opts.id !== undefined) {
    if (!jobIdPattern.test(opts.id)) throw usageError(`--id: must match [A-Za-z0-9._:-]{1,128}, got ${JSON.stringify(opts.id)}`);
    body.id = opts.id;
  }
  targetFields(opts, body);
  payloadFields(opts, body);
  const schedule = scheduleField(opts);
  if (schedule !== undefined) body.schedule = schedule;
  if (opts.exclude !== undefined) {
    if (opts.cron === undefined && opts.everyMs === undefined) throw usageError('--exclude: only with --cron or --every-ms');
    body.schedule = { ...schedule, exclude: opts.exclude };
  }
  if (opts.endAt !== undefined) body.end_at = parseTime('--end-at', opts.endAt);
  if (opts.maxRuns !== undefined) body.max_runs = parseIntIn('--max-runs', opts.maxRuns, 0, Number.MAX_SAFE_INTEGER);
  if (opts.misfire !== undefined) body.misfire = parseEnum('--misfire', opts.misfire, ['fire_once', 'skip', 'fire_all'] as const);
  if (opts.misfireThresholdMs !== undefined) {
    body.misfire_threshold_ms = parseIntIn('--misfire-threshold-ms', opts.misfireThresholdMs, limits.misfireThresholdMsMin, limits.misfireThresholdMsMax);
  }
  if (opts.overlap !== undefined) body.overlap = parseEnum('--overlap', opts.overlap, ['allow', 'skip', 'buffer_one'] as const);
  if (opts.metadata !== undefined) body.metadata = parseJsonObject('--metadata', opts.metadata);
  const headers: Record<string, string> = {};
  if (opts.idempotencyKey !== undefined) {
    if (opts.idempotencyKey.trim() === '') throw usageError('--idempotency-key: must not be empty');
    headers['idempotency-key'] = opts.idempotencyKey;
  }
  return { body, headers };
}

interface PageOptions extends ClientOptions {
  limit?: string;
  cursor?: string;
  all?: boolean;
}

/**
 * GET a paged list (`{<key>: [...], next_cursor}`); with --all, follow next_cursor until null (bounded by
 * cliLimits.listPagesMax) and answer one page holding every item.
 */
async function fetchPages(
  client: Client,
  path: string,
  query: URLSearchParams,
  key: string,
  opts: PageOptions,
): Promise<{ items: Record<string, unknown>[]; nextCursor: string | null; raw: unknown }> {
  if (opts.limit !== undefined) query.set('limit', String(parseIntIn('--limit', opts.limit, 1, limits.listLimitMax)));
  let cursor = opts.cursor ?? null;
  const items: Record<string, unknown>[] = [];
  for (let page = 0; page < cliLimits.listPagesMax; page++) {
    if (cursor !== null) query.set('cursor', cursor);
    const qs = query.toString();
    const { body } = await client.call('GET', qs === '' ? path : `${path}?${qs}`);
    const list = isPlainObject(body) ? body[key] : undefined;
    if (!Array.isArray(list)) throw new CliError(exitCodes.runtime, `error: bad_response: ${path} answered without a "${key}" list`);
    items.push(...(list as Record<string, unknown>[]));
    const next = isPlainObject(body) && typeof body.next_cursor === 'string' ? body.next_cursor : null;
    if (opts.all !== true) return { items, nextCursor: next, raw: body };
    if (next === null) return { items, nextCursor: null, raw: { [key]: items, next_cursor: null } };
    cursor = next;
  }
  throw new CliError(exitCodes.runtime, `punctual: --all stopped after ${cliLimits.listPagesMax} pages`);
}

function printPage(client: Client, io: CliIo, page: { nextCursor: string | null; raw: unknown }, table: string): void {
  if (client.json) {
    printJson(io, page.raw);
    return;
  }
  io.stdout.write(table);
  if (page.nextCursor !== null) io.stdout.write(`next cursor: ${page.nextCursor}\n`);
}

function addJobAdd(job: Command, io: CliIo): void {
  withClientOptions(job.command('add').description('create a job (POST /v1/jobs)'))
    .option('--task <name>', 'the task to run (or --url for an inline callback)')
    .option('--url <url>', 'inline callback URL')
    .option('--method <method>', 'inline callback method: GET|POST|PUT|PATCH|DELETE (default POST)')
    .option('--header <name:value>', 'inline callback header (repeatable)', collect)
    .option('--timeout-ms <ms>', 'inline callback timeout')
    .option('--max-attempts <n>', 'inline callback attempts before the execution fails')
    .option('--payload <json>', 'callback body, JSON')
    .option('--payload-file <file>', 'callback body, a JSON file')
    .option('--payload-base64 <b64>', 'callback body, raw bytes in base64')
    .option('--at <time>', 'fire once at TIME (RFC 3339 or epoch ms)')
    .option('--delay-ms <ms>', 'fire once after MS milliseconds')
    .option('--cron <expr>', 'cron expression, 5 fields or 6 with seconds first')
    .option('--timezone <zone>', 'IANA time zone of --cron (default UTC)')
    .option('--every-ms <ms>', 'fire every MS milliseconds')
    .option('--start-at <time>', 'first fire time of --every-ms (default: the moment the job is created)')
    .option(scheduleExtraFlags[0]![0], scheduleExtraFlags[0]![1])
    .option(scheduleExtraFlags[1]![0], scheduleExtraFlags[1]![1])
    .option(scheduleExtraFlags[2]![0], scheduleExtraFlags[2]![1])
    .option('--id <id>', 'client job id, [A-Za-z0-9._:-]{1,128} (default: generated)')
    .option('--end-at <time>', 'end of a recurring schedule')
    .option('--max-runs <n>', 'stop after N runs (0 = unlimited)')
    .option('--misfire <policy>', 'fire_once|skip|fire_all (recurring jobs, after downtime)')
    .option('--misfire-threshold-ms <ms>', `an occurrence later than this is missed, ${limits.misfireThresholdMsMin}..${limits.misfireThresholdMsMax} (server default ${limits.misfireThresholdMs})`)
    .option('--overlap <policy>', 'allow|skip|buffer_one (recurring jobs, while a run is going)')
    .option('--metadata <json>', 'free-form JSON object (<= 4 KiB)')
    .option('--idempotency-key <key>', 'Idempotency-Key header: a repeat returns the existing job')
    .option('--exclude <calendar>', 'skip the dates of this calendar (repeatable; with --cron or --every-ms)', collect)
    .action(async (opts: JobAddOptions) => {
      const req = buildJobRequest(opts);
      await withClient(opts, io, async (client) => {
        const { body } = await client.call('POST', '/v1/jobs', { body: req.body, headers: req.headers });
        printOne(client, io, body);
      });
    });
}

function parseState(text: string): string {
  const state = text.toUpperCase();
  if (!(jobStates as readonly string[]).includes(state)) {
    throw usageError(`--state: must be one of ${jobStates.join('|')} (any case), got ${JSON.stringify(text)}`);
  }
  return state;
}

function addJobList(job: Command, io: CliIo): void {
  withClientOptions(job.command('list').description('list jobs (GET /v1/jobs)'))
    .option('--state <state>', `only jobs in this state: ${jobStates.join('|')}`)
    .option('--task <name>', 'only jobs of this task')
    .option('--limit <n>', `jobs per page, 1..${limits.listLimitMax} (server default ${limits.listLimitDefault})`)
    .option('--cursor <cursor>', 'continue from a previous next cursor')
    .option('--all', 'follow next cursors until the end')
    .option('--metadata <key=value>', 'only jobs whose metadata has this top-level value (repeatable: all must match)', collect)
    .option('--next-fire-after <time>', 'only jobs whose next fire time is at or after this (RFC 3339 or epoch ms)')
    .option('--next-fire-before <time>', 'only jobs whose next fire time is before this (RFC 3339 or epoch ms)')
    .action(async (opts: PageOptions & { state?: string; task?: string; metadata?: string[]; nextFireAfter?: string; nextFireBefore?: string }) => {
      const query = new URLSearchParams();
      if (opts.state !== undefined) query.set('state', parseState(opts.state));
      if (opts.task !== undefined) query.set('task', taskNameFlag('--task', opts.task));
      if ((opts.metadata ?? []).length > searchLimits.metadataFiltersMax) {
        throw usageError(`--metadata: at most ${searchLimits.metadataFiltersMax} filters, got ${opts.metadata!.length}`);
      }
      for (const pair of opts.metadata ?? []) {
        const eq = pair.indexOf('=');
        if (eq <= 0) throw usageError(`--metadata: expected KEY=VALUE, got ${JSON.stringify(pair)}`);
        query.append(`metadata.${pair.slice(0, eq)}`, pair.slice(eq + 1));
      }
      if (opts.nextFireAfter !== undefined) query.set('next_fire_after', String(parseTime('--next-fire-after', opts.nextFireAfter)));
      if (opts.nextFireBefore !== undefined) query.set('next_fire_before', String(parseTime('--next-fire-before', opts.nextFireBefore)));
      await withClient(opts, io, async (client) => {
        const page = await fetchPages(client, '/v1/jobs', query, 'jobs', opts);
        printPage(client, io, page, jobsTable(page.items));
      });
    });
}

function addJobHistory(job: Command, io: CliIo): void {
  withClientOptions(job.command('history').argument('<id>', 'job id').description('executions of a job'))
    .option('--limit <n>', `executions per page, 1..${limits.listLimitMax}`)
    .option('--cursor <cursor>', 'continue from a previous next cursor')
    .option('--all', 'follow next cursors until the end')
    .action(async (id: string, opts: PageOptions) => {
      await withClient(opts, io, async (client) => {
        const page = await fetchPages(client, `/v1/jobs/${seg(jobIdArg(id))}/executions`, new URLSearchParams(), 'executions', opts);
        printPage(client, io, page, executionsTable(page.items));
      });
    });
}

/** get, cancel, pause, resume, run: one id in, the job out. */
function addJobVerbs(job: Command, io: CliIo): void {
  const verbs: Array<[string, string, string | null]> = [
    ['get', 'show a job', null],
    ['cancel', 'cancel a job: once acknowledged, it never fires again', 'cancel'],
    ['pause', 'pause a job', 'pause'],
    ['resume', 'resume a paused job', 'resume'],
    ['run', 'fire one extra run now', 'run'],
  ];
  for (const [name, description, action] of verbs) {
    const cmd = job.command(name).argument('<id>', 'job id').description(description);
    // DELETE /v1/jobs/{id} is the same as cancel: `job delete` is what a user of that route types
    if (name === 'cancel') cmd.alias('delete');
    // A run is not idempotent: a key lets a retry after an unknown outcome (503) run once, not twice.
    if (name === 'run') cmd.option('--idempotency-key <key>', 'Idempotency-Key header: a repeat with the same key runs once');
    withClientOptions(cmd).action(
      async (id: string, opts: ClientOptions & { idempotencyKey?: string }) => {
        jobIdArg(id);
        const headers: Record<string, string> = {};
        if (opts.idempotencyKey !== undefined) {
          if (opts.idempotencyKey.trim() === '') throw usageError('--idempotency-key: must not be empty');
          headers['idempotency-key'] = opts.idempotencyKey;
        }
        await withClient(opts, io, async (client) => {
          const path = `/v1/jobs/${seg(id)}` + (action === null ? '' : `/${action}`);
          const { body } = await client.call(action === null ? 'GET' : 'POST', path, { headers });
          printOne(client, io, body);
        });
      },
    );
  }
}

export function registerJobCommands(program: Command, io: CliIo): void {
  const job = program.command('job').description('create, inspect and control jobs');
  addJobAdd(job, io);
  addJobVerbs(job, io);
  addJobList(job, io);
  addJobHistory(job, io);
  registerJobEditCommands(job, io);
}
