/**
 * `punctual job update|batch|preview`: the rest of the jobs API that `job add` does not cover, so the CLI can do
 * everything the HTTP API offers for jobs: PATCH /v1/jobs/{id}, POST /v1/jobs:batch, POST /v1/schedules:preview.
 */
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { limits } from '../src/core/limits.js';
import { runBatchFile } from './batch-file.js';
import { seg, withClient, type ClientOptions } from './client.js';
import { printJson, printOne, withClientOptions } from './common.js';
import { cell, isPlainObject, renderTable } from './format.js';
import { CliError, exitCodes, usageError, type CliIo } from './io.js';
import { jobIdArg, payloadFields, scheduleExtraFlags, scheduleField, type ScheduleOptions } from './jobs.js';
import { parseIntIn, parseJson, parseJsonObject, parseTime } from './parse.js';

type ScheduleFlags = ScheduleOptions;

export interface JobUpdateOptions extends ClientOptions, ScheduleFlags {
  payload?: string;
  payloadFile?: string;
  payloadBase64?: string;
  metadata?: string;
  clearMetadata?: boolean;
}

/** The schedule flags of `job add`, shared by update and preview. */
function withScheduleOptions(cmd: Command): Command {
  return cmd
    .option('--at <time>', 'fire once at TIME (RFC 3339 or epoch ms)')
    .option('--delay-ms <ms>', 'fire once after MS milliseconds')
    .option('--cron <expr>', 'cron expression, 5 fields or 6 with seconds first')
    .option('--timezone <zone>', 'IANA time zone of --cron (default UTC)')
    .option('--every-ms <ms>', 'fire every MS milliseconds')
    .option('--start-at <time>', 'first fire time of --every-ms (default now)')
    .option(scheduleExtraFlags[0]![0], scheduleExtraFlags[0]![1])
    .option(scheduleExtraFlags[1]![0], scheduleExtraFlags[1]![1])
    .option(scheduleExtraFlags[2]![0], scheduleExtraFlags[2]![1]);
}

/** The PATCH /v1/jobs/{id} body: only what was given; usage errors (exit 2) before any request. */
export function buildJobPatch(opts: JobUpdateOptions): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  const schedule = scheduleField(opts);
  if (schedule !== undefined) body.schedule = schedule;
  payloadFields(opts, body);
  if (opts.metadata !== undefined && opts.clearMetadata === true) {
    throw usageError('--metadata and --clear-metadata are mutually exclusive');
  }
  if (opts.metadata !== undefined) body.metadata = parseJsonObject('--metadata', opts.metadata);
  if (opts.clearMetadata === true) body.metadata = null;
  if (Object.keys(body).length === 0) {
    throw usageError('job update: give a schedule (--at, --delay-ms, --cron, --every-ms), a payload or --metadata');
  }
  return body;
}

function addJobUpdate(job: Command, io: CliIo): void {
  const cmd = job.command('update').argument('<id>', 'job id').description('change the schedule, payload or metadata of a job (PATCH /v1/jobs/{id})');
  withScheduleOptions(withClientOptions(cmd))
    .option('--payload <json>', 'new callback body, JSON')
    .option('--payload-file <file>', 'new callback body, a JSON file')
    .option('--payload-base64 <b64>', 'new callback body, raw bytes in base64')
    .option('--metadata <json>', 'new metadata, a JSON object (<= 4 KiB)')
    .option('--clear-metadata', 'remove the metadata')
    .action(async (id: string, opts: JobUpdateOptions) => {
      jobIdArg(id);
      const body = buildJobPatch(opts);
      await withClient(opts, io, async (client) => {
        const res = await client.call('PATCH', `/v1/jobs/${seg(id)}`, { body });
        printOne(client, io, res.body);
      });
    });
}

/** A batch file: `{"jobs": [...]}` as POST /v1/jobs:batch takes it, or a bare array of jobs. `-` is stdin. */
export function readBatchFile(path: string): { jobs: unknown[] } {
  let text: string;
  try {
    text = readFileSync(path === '-' ? 0 : path, 'utf8');
  } catch (err) {
    const code = isPlainObject(err) && typeof err.code === 'string' ? err.code : String(err);
    throw usageError(`<file>: cannot read ${JSON.stringify(path)}: ${code}`);
  }
  const value = parseJson('<file>', text);
  const jobs = Array.isArray(value) ? value : isPlainObject(value) && Array.isArray(value.jobs) ? value.jobs : null;
  if (jobs === null) throw usageError('<file>: expected {"jobs": [...]} or a JSON array of jobs');
  if (jobs.length === 0) throw usageError('<file>: holds no jobs');
  if (jobs.length > limits.batchJobsMax) {
    throw usageError(`<file>: at most ${limits.batchJobsMax} jobs per batch, got ${jobs.length}`);
  }
  return { jobs };
}

/** The results table of a batch and how many failed. */
function batchTable(results: unknown[]): { table: string; failed: number; created: number; existing: number } {
  let failed = 0;
  let created = 0;
  let existing = 0;
  const rows = results.map((r, i) => {
    const item = isPlainObject(r) ? r : {};
    const error = isPlainObject(item.error) ? `${cell(item.error.code)}: ${cell(item.error.detail)}` : '-';
    if (item.status === 201) created++;
    else if (item.status === 200) existing++;
    else failed++;
    return [String(i), cell(item.id), cell(item.status), error];
  });
  return { table: renderTable(['#', 'ID', 'STATUS', 'ERROR'], rows), failed, created, existing };
}

function addJobBatch(job: Command, io: CliIo): void {
  const cmd = job
    .command('batch')
    .argument('[file]', 'JSON file with {"jobs": [...]} (job bodies of docs/api.md) or a JSON array; - reads stdin')
    .description(`create up to ${limits.batchJobsMax} jobs in one request (POST /v1/jobs:batch); each succeeds or fails on its own; --file streams a file of any size`);
  withClientOptions(cmd)
    .option('--idempotency-key <key>', 'Idempotency-Key header of the batch (with --file: the key the ids of jobs without one derive from)')
    .option('--file <ndjson>', 'stream this file of one job per line (- reads stdin) in batches, with progress on stderr')
    .option('--batch-size <n>', `with --file: jobs per request, 1..${limits.batchJobsMax} (default ${limits.batchJobsMax})`)
    .option('--resume', 'with --file: continue an interrupted import from its state file')
    .option('--state-file <file>', 'with --file: where the position is kept (default <file>.punctual-batch)')
    .action(async (path: string | undefined, opts: ClientOptions & BatchFileFlags) => {
      if (opts.file !== undefined || path === undefined) return batchFileCommand(path, opts, io);
      const streamed = [opts.batchSize, opts.resume, opts.stateFile].some((v) => v !== undefined);
      if (streamed) throw usageError('--batch-size, --resume, --state-file: only with --file');
      const body = readBatchFile(path);
      const headers: Record<string, string> = {};
      if (opts.idempotencyKey !== undefined) {
        if (opts.idempotencyKey.trim() === '') throw usageError('--idempotency-key: must not be empty');
        headers['idempotency-key'] = opts.idempotencyKey;
      }
      await withClient(opts, io, async (client) => {
        const res = await client.call('POST', '/v1/jobs:batch', { body, headers });
        const results = isPlainObject(res.body) && Array.isArray(res.body.results) ? res.body.results : null;
        if (results === null) throw new CliError(exitCodes.runtime, 'error: bad_response: /v1/jobs:batch answered without "results"');
        const summary = batchTable(results);
        if (client.json) printJson(io, res.body);
        else io.stdout.write(summary.table + `${summary.created} created, ${summary.existing} existing, ${summary.failed} failed\n`);
        // a partly failed batch must not look like a success to a script
        if (summary.failed > 0) throw new CliError(exitCodes.runtime, `punctual: ${summary.failed} of ${results.length} jobs failed`);
      });
    });
}

interface BatchFileFlags {
  idempotencyKey?: string;
  file?: string;
  batchSize?: string;
  resume?: boolean;
  stateFile?: string;
}

/** `job batch --file F`: streamed (cmd/batch-file.ts); a FILE argument beside it is ambiguous. */
function batchFileCommand(path: string | undefined, opts: ClientOptions & BatchFileFlags, io: CliIo): Promise<void> {
  if (opts.file === undefined) throw usageError("missing required argument 'file'");
  if (path !== undefined) throw usageError('give the file as an argument (one JSON batch) or --file (streamed), not both');
  return runBatchFile({ ...opts, file: opts.file }, io);
}

function addJobPreview(job: Command, io: CliIo): void {
  const cmd = job
    .command('preview')
    .description('the next fire times of a schedule, to check a cron and its time zone (POST /v1/schedules:preview)');
  withScheduleOptions(withClientOptions(cmd))
    .option('--from <time>', 'first time to consider (default now)')
    .option('--count <n>', `how many fire times, 1..${limits.previewCountMax} (server default ${limits.previewCountDefault})`)
    .option('--id <id>', 'with --spread-ms: the times of the job with this id (default: the nominal times)')
    .action(async (opts: ClientOptions & ScheduleFlags & { from?: string; count?: string; id?: string }) => {
      const body: Record<string, unknown> = { schedule: scheduleField(opts) ?? {} };
      if (opts.id !== undefined) body.id = jobIdArg(opts.id);
      if (opts.from !== undefined) body.from = parseTime('--from', opts.from);
      if (opts.count !== undefined) body.count = parseIntIn('--count', opts.count, 1, limits.previewCountMax);
      await withClient(opts, io, async (client) => {
        const res = await client.call('POST', '/v1/schedules:preview', { body });
        const list = isPlainObject(res.body) && Array.isArray(res.body.occurrences) ? res.body.occurrences : null;
        if (client.json || list === null) return printJson(io, res.body);
        io.stdout.write(list.map((t) => cell(t) + '\n').join(''));
      });
    });
}

export function registerJobEditCommands(job: Command, io: CliIo): void {
  addJobUpdate(job, io);
  addJobBatch(job, io);
  addJobPreview(job, io);
}
