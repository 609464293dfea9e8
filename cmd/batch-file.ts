/**
 * `punctual job batch --file jobs.ndjson`: a streamed import. The file (one job body per line) is read in chunks,
 * never whole; jobs go out in batches of POST /v1/jobs:batch (at most 10,000 jobs and 64 MiB each), with a
 * progress bar on stderr. After each answered batch a state file records how far the import got, so `--resume`
 * continues after an interruption (Ctrl-C, a crash, a server gone for good) from the first unanswered batch.
 *
 * Repeating a batch is safe because every job goes out with an id: its own, or the id the API would derive from
 * the import's Idempotency-Key and the job's position in the file (docs/api.md, Idempotency), with the key kept
 * in the state file. A resumed import therefore lands on the jobs the interrupted one created (`200` existing).
 */
import { createReadStream, existsSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { randomUUID } from 'node:crypto';
import { idempotentJobId, type BatchResult, type JobInput } from '../src/client/index.js';
import { clientLimits, limits } from '../src/core/limits.js';
import { cliErrorOf, withClient, type Client, type ClientOptions } from './client.js';
import { cell, isPlainObject } from './format.js';
import { CliError, exitCodes, usageError, type CliIo } from './io.js';
import { parseIntIn } from './parse.js';
import { Progress } from './progress.js';

export interface BatchFileOptions extends ClientOptions {
  file: string;
  batchSize?: string;
  resume?: boolean;
  stateFile?: string;
  idempotencyKey?: string;
}

/** What the state file holds: enough to skip what was answered and to give the rest the same ids. */
interface ImportState {
  version: 1;
  file: string;
  size: number;
  mtime_ms: number;
  idempotency_key: string;
  /** Byte offset just after the last line of the last answered batch. */
  next_byte: number;
  /** Lines read up to there (for line numbers) and jobs among them (for the derived ids). */
  lines: number;
  jobs: number;
  created: number;
  existing: number;
  failed: number;
}

interface Line {
  /** The line's text, or null when it was longer than clientLimits.batchLineBytesMax. */
  text: string | null;
  lineNo: number;
  /** Byte offset just after the line's newline. */
  end: number;
}

/** The lines of a stream from byte `start`, split by hand so a line's end offset is exact and its size bounded. */
async function* lines(stream: AsyncIterable<Buffer>, start: number, firstLineNo: number): AsyncGenerator<Line> {
  let parts: Buffer[] = [];
  let partBytes = 0;
  let overlong = false;
  let offset = start;
  let lineNo = firstLineNo;
  const take = (piece: Buffer): void => {
    if (overlong) return;
    if (partBytes + piece.length > clientLimits.batchLineBytesMax) {
      overlong = true;
      parts = [];
      return;
    }
    parts.push(piece);
    partBytes += piece.length;
  };
  const emit = (): Line => {
    const line = { text: overlong ? null : Buffer.concat(parts).toString('utf8'), lineNo: ++lineNo, end: offset };
    parts = [];
    partBytes = 0;
    overlong = false;
    return line;
  };
  for await (const chunk of stream) {
    let from = 0;
    for (let nl = chunk.indexOf(10, from); nl >= 0; nl = chunk.indexOf(10, from)) {
      take(chunk.subarray(from, nl));
      offset += nl - from + 1;
      from = nl + 1;
      yield emit();
    }
    take(chunk.subarray(from));
    offset += chunk.length - from;
  }
  if (partBytes > 0 || overlong) yield emit();
}

function readState(path: string): ImportState {
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw usageError(`--resume: cannot read the state file ${JSON.stringify(path)}: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (!isPlainObject(value) || value.version !== 1 || typeof value.idempotency_key !== 'string' || typeof value.next_byte !== 'number') {
    throw usageError(`--resume: ${JSON.stringify(path)} is not a state file of job batch --file`);
  }
  return value as unknown as ImportState;
}

/** Written whole to a temporary file, then renamed over the old one: an interruption leaves one or the other. */
function writeState(path: string, state: ImportState): void {
  writeFileSync(path + '.tmp', JSON.stringify(state) + '\n');
  renameSync(path + '.tmp', path);
}

/** The import's starting point: a fresh state, or the interrupted one (checked against the file). */
function startState(opts: BatchFileOptions, statePath: string | null): ImportState {
  const stdin = opts.file === '-';
  if (stdin && (opts.resume === true || opts.stateFile !== undefined)) {
    throw usageError('--resume, --state-file: not with --file - (stdin cannot be read again)');
  }
  let size = 0;
  let mtimeMs = 0;
  if (!stdin) {
    try {
      const st = statSync(opts.file);
      size = st.size;
      mtimeMs = st.mtimeMs;
    } catch (err) {
      const code = isPlainObject(err) && typeof err.code === 'string' ? err.code : String(err);
      throw usageError(`--file: cannot read ${JSON.stringify(opts.file)}: ${code}`);
    }
  }
  const fresh: ImportState = {
    version: 1,
    file: stdin ? '-' : resolve(opts.file),
    size,
    mtime_ms: mtimeMs,
    idempotency_key: opts.idempotencyKey ?? randomUUID(),
    next_byte: 0,
    lines: 0,
    jobs: 0,
    created: 0,
    existing: 0,
    failed: 0,
  };
  if (statePath === null) return fresh;
  if (opts.resume !== true) {
    if (existsSync(statePath)) {
      throw usageError(`--file: ${statePath} holds the position of an interrupted import: add --resume to continue it, or delete it to start again`);
    }
    return fresh;
  }
  if (!existsSync(statePath)) throw usageError(`--resume: no state file ${statePath}: nothing to resume`);
  const state = readState(statePath);
  if (state.file !== fresh.file || state.size !== size || state.mtime_ms !== mtimeMs) {
    throw usageError(`--resume: ${opts.file} changed since the interrupted import (size or time differs from ${statePath})`);
  }
  if (opts.idempotencyKey !== undefined && opts.idempotencyKey !== state.idempotency_key) {
    throw usageError('--idempotency-key: differs from the key of the interrupted import (leave it out with --resume)');
  }
  return state;
}

interface Pending {
  lineNo: number;
  job: JobInput;
}

/**
 * A job line as sent: its JSON object with an id (derived when absent), or why it cannot be sent (the detail of an
 * `invalid_argument`).
 */
function jobOf(line: Line, key: string, index: number): { job: JobInput } | { error: string } {
  if (line.text === null) return { error: `line over ${clientLimits.batchLineBytesMax} bytes` };
  let value: unknown;
  try {
    value = JSON.parse(line.text);
  } catch (err) {
    return { error: `not JSON: ${err instanceof Error ? err.message : String(err)}` };
  }
  if (!isPlainObject(value)) return { error: 'a line must hold one job object' };
  const job = value as JobInput;
  return { job: job.id === undefined || job.id === null ? { ...job, id: idempotentJobId(key, index) } : job };
}

class Report {
  constructor(
    private readonly io: CliIo,
    private readonly json: boolean,
    private readonly progress: Progress,
  ) {}

  item(lineNo: number, id: unknown, status: number | null, error: string | null, problem: unknown): void {
    if (this.json) {
      this.io.stdout.write(JSON.stringify({ line: lineNo, id: id ?? null, status, ...(problem === undefined ? {} : { error: problem }) }) + '\n');
    } else if (error !== null) {
      this.progress.note(`line ${lineNo}: ${id === null || id === undefined ? 'not sent' : `${cell(id)}: ${status ?? '-'}`} ${error}`);
    }
  }
}

/** Errors of a failed item, as one line: `code: detail` and the first field. */
function itemError(r: BatchResult): string {
  const e = r.error;
  if (e === undefined) return `HTTP ${r.status}`;
  // fields are rooted at the request's jobs[k]: the line number already says which job
  const field = Array.isArray(e.errors) && e.errors[0] !== undefined ? ` (${String(e.errors[0].field).replace(/^jobs\[\d+\]\.?/, '') || 'job'})` : '';
  return `${cell(e.code)}: ${cell(e.detail)}${field}`;
}

/**
 * One import: the batch being filled, and what a flush does with it (send, report, record the position). The
 * position only moves past lines that are fully handled, so a resume re-reads exactly what has no answer yet.
 */
class Importer {
  private batch: Pending[] = [];
  private batchBytes = 0;
  /** Job lines read so far (the next job's position, from which its id derives). */
  private readJobs: number;
  private reportedEnd = -1;
  private readonly retry = { maxAttempts: clientLimits.retryAttemptsDefault };

  constructor(
    private readonly client: Client,
    private readonly state: ImportState,
    private readonly statePath: string | null,
    private readonly batchSize: number,
    private readonly progress: Progress,
    private readonly report: Report,
  ) {
    this.readJobs = state.jobs;
  }

  /** Takes one line; `end`/`lineNo` of the last line handled before it, where an early flush leaves the position. */
  async add(line: Line, handledEnd: number, handledLines: number): Promise<void> {
    if (line.text !== null && line.text.trim() === '') return;
    const parsed = jobOf(line, this.state.idempotency_key, this.readJobs);
    if ('error' in parsed) {
      this.readJobs++;
      this.state.failed++;
      this.report.item(line.lineNo, null, null, `invalid_argument: ${parsed.error}`, { code: 'invalid_argument', detail: parsed.error });
      return;
    }
    const bytes = Buffer.byteLength(JSON.stringify(parsed.job)) + 1;
    // a batch body must stay under the batch limit: `{"jobs":[` and `]}` fit in the margin
    if (this.batch.length > 0 && this.batchBytes + bytes > limits.batchBodyBytesMax - 1024) await this.flush(handledEnd, handledLines);
    this.readJobs++;
    this.batch.push({ lineNo: line.lineNo, job: parsed.job });
    this.batchBytes += bytes;
  }

  get full(): boolean {
    return this.batch.length >= this.batchSize;
  }

  /** Sends the batch (if any), reports its items, then records `end` (the byte after the last handled line). */
  async flush(end: number, lineCount: number, final = false): Promise<void> {
    if (this.batch.length > 0) await this.send();
    const state = this.state;
    state.next_byte = end;
    state.lines = lineCount;
    state.jobs = this.readJobs;
    if (this.statePath !== null) writeState(this.statePath, state);
    // the last flush often has nothing new (the file ended on a full batch): no second line for it
    if (end !== this.reportedEnd || (final && this.progress.live)) this.progress.update(end, this.detail(), final);
    this.reportedEnd = end;
    this.batch = [];
    this.batchBytes = 0;
  }

  detail(): string {
    const s = this.state;
    return `${s.jobs} jobs: ${s.created} created, ${s.existing} existing, ${s.failed} failed, ${this.progress.rate(s.jobs)}`;
  }

  private async send(): Promise<void> {
    let results: BatchResult[];
    try {
      results = await this.client.api.jobs.sendBatch(this.batch.map((p) => p.job), { retry: this.retry });
    } catch (err) {
      this.progress.finish();
      const failure = cliErrorOf(this.client.server, err);
      const hint = this.statePath === null ? '' : `\npunctual: stopped before line ${this.batch[0]!.lineNo}; run the same command with --resume to continue`;
      throw new CliError(failure.exitCode, failure.message + hint);
    }
    results.forEach((r, k) => {
      const failed = r.status !== 201 && r.status !== 200;
      if (r.status === 201) this.state.created++;
      else if (r.status === 200) this.state.existing++;
      else this.state.failed++;
      this.report.item(this.batch[k]!.lineNo, r.id, r.status, failed ? itemError(r) : null, r.error);
    });
  }
}

export async function runBatchFile(opts: BatchFileOptions, io: CliIo): Promise<void> {
  const batchSize = opts.batchSize === undefined ? limits.batchJobsMax : parseIntIn('--batch-size', opts.batchSize, 1, limits.batchJobsMax);
  if (opts.idempotencyKey !== undefined && opts.idempotencyKey.trim() === '') throw usageError('--idempotency-key: must not be empty');
  const statePath = opts.stateFile ?? (opts.file === '-' ? null : `${opts.file}.punctual-batch`);
  const state = startState(opts, statePath);
  const progress = new Progress(io.stderr, { total: opts.file === '-' ? null : state.size });
  const report = new Report(io, opts.json === true, progress);
  await withClient(opts, io, async (client) => {
    // recorded before the first batch goes out: one that is applied but never answered is then resumed with the
    // same key (so the same ids), not started again under a new one
    if (statePath !== null && opts.resume !== true) writeState(statePath, state);
    const importer = new Importer(client, state, statePath, batchSize, progress, report);
    const input = opts.file === '-' ? createReadStream('', { fd: 0 }) : createReadStream(opts.file, { start: state.next_byte });
    // the last line fully handled (in a batch, reported as bad, or blank): where a flush may put the position
    let handledEnd = state.next_byte;
    let handledLines = state.lines;
    for await (const line of lines(input as AsyncIterable<Buffer>, state.next_byte, state.lines)) {
      await importer.add(line, handledEnd, handledLines);
      handledEnd = line.end;
      handledLines = line.lineNo;
      if (importer.full) await importer.flush(handledEnd, handledLines);
    }
    await importer.flush(handledEnd, handledLines, true);
    progress.finish();
  });
  if (statePath !== null) rmSync(statePath, { force: true });
  if (opts.json !== true) io.stdout.write(`${state.created} created, ${state.existing} existing, ${state.failed} failed\n`);
  if (state.failed > 0) throw new CliError(exitCodes.runtime, `punctual: ${state.failed} of ${state.jobs} jobs failed`);
}
