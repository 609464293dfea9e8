/**
 * `punctual backup --out FILE`: GET /v1/admin/backup streamed into FILE (written as FILE.partial, then renamed,
 * so a cut download never looks complete; mode 0600: the copy holds signing secrets). Progress on stderr when it
 * is a terminal.
 */
import { closeSync, createWriteStream, existsSync, openSync, readSync, renameSync, rmSync } from 'node:fs';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Command } from 'commander';
import { Agent, request } from 'undici';
import { backupLimits, cliLimits } from '../src/core/limits.js';
import { apiError, cliErrorOf, resolveCacert, resolveServer, type ClientOptions } from './client.js';
import { withClientOptions } from './common.js';
import { CliError, exitCodes, usageError, type CliIo } from './io.js';

interface BackupOptions extends ClientOptions {
  out: string;
  force?: boolean;
}

export function registerBackupCommand(program: Command, io: CliIo): void {
  withClientOptions(
    program
      .command('backup')
      .description("take a consistent online backup of a node's database into a file (admin token)")
      .requiredOption('--out <file>', 'where to write the backup')
      .option('--force', 'replace --out if it exists'),
  ).action(async (opts: BackupOptions) => {
    await backup(opts, io);
  });
}

async function backup(opts: BackupOptions, io: CliIo): Promise<void> {
  const server = resolveServer(opts.server, io.env);
  const token = opts.token ?? (io.env.PUNCTUAL_TOKEN || null);
  if (token === '') throw usageError('--token: must not be empty');
  if (existsSync(opts.out) && opts.force !== true) throw usageError(`--out: ${opts.out} exists (give --force to replace it)`);
  const ca = resolveCacert(opts.cacert, io.env);
  // The server copies the whole database before it answers: the headers may take as long as a backup may.
  const agent = new Agent({
    connect: { timeout: cliLimits.connectTimeoutMs, ...(ca === null ? {} : { ca }) },
    headersTimeout: backupLimits.durationMsMax,
    bodyTimeout: cliLimits.requestTimeoutMs,
  });
  const partial = `${opts.out}.partial`;
  try {
    const headers: Record<string, string> = { accept: 'application/vnd.sqlite3, application/problem+json' };
    if (token !== null) headers.authorization = `Bearer ${token}`;
    let res: Awaited<ReturnType<typeof request>>;
    try {
      res = await request(`${server}/v1/admin/backup`, { method: 'GET', headers, dispatcher: agent });
    } catch (err) {
      const code = (err as { code?: unknown }).code;
      if (code === 'UND_ERR_HEADERS_TIMEOUT') throw new CliError(exitCodes.runtime, `punctual: server ${server} did not answer within ${backupLimits.durationMsMax} ms`);
      throw cliErrorOf(server, err); // the one line of every client command (a TLS error's text is several)
    }
    if (res.statusCode >= 400) throw apiError(res.statusCode, await res.body.text());
    const total = Number(res.headers['content-length'] ?? NaN);
    const progress = progressLine(io, total);
    let written = 0;
    const counter = new Transform({
      transform(chunk: Buffer, _enc, done) {
        written += chunk.length;
        progress(written);
        done(null, chunk);
      },
    });
    const file = createWriteStream(partial, { mode: 0o600 });
    try {
      await pipeline(res.body, counter, file);
    } catch (err) {
      throw new CliError(exitCodes.runtime, `punctual: backup download cut after ${written} bytes: ${(err as Error).message}`);
    }
    progress(written, true);
    if (Number.isFinite(total) && written !== total) {
      throw new CliError(exitCodes.runtime, `punctual: backup download cut: ${written} of ${total} bytes`);
    }
    // a server that is not a Punctual node (a proxy's page, another service) answers 200 too: keep no such "backup"
    if (!isSqliteFile(partial)) {
      throw new CliError(exitCodes.runtime, `error: bad_response: ${server}/v1/admin/backup answered ${written} bytes that are not an SQLite database`);
    }
    renameSync(partial, opts.out);
    if (opts.json === true) io.stdout.write(JSON.stringify({ file: opts.out, bytes: written }) + '\n');
    else io.stdout.write(`backup written to ${opts.out} (${written} bytes)\n`);
  } finally {
    rmSync(partial, { force: true });
    await agent.close();
  }
}

/** True when the file starts with the SQLite 3 header, as every database file does. */
function isSqliteFile(path: string): boolean {
  const header = Buffer.alloc(sqliteHeader.length);
  const fd = openSync(path, 'r');
  try {
    return readSync(fd, header, 0, header.length, 0) === header.length && header.equals(sqliteHeader);
  } finally {
    closeSync(fd);
  }
}

const sqliteHeader = Buffer.from('SQLite format 3\0', 'latin1');

/** `\rbackup: 12.0 MiB of 40.0 MiB` on a terminal's stderr, at most every 100 ms; nothing otherwise. */
function progressLine(io: CliIo, total: number): (bytes: number, last?: boolean) => void {
  if ((io.stderr as { isTTY?: boolean }).isTTY !== true) return () => {};
  let shownAt = 0;
  const mib = (n: number): string => `${(n / 1024 / 1024).toFixed(1)} MiB`;
  return (bytes, last = false) => {
    const now = Date.now();
    if (!last && now - shownAt < 100) return;
    shownAt = now;
    io.stderr.write(`\rbackup: ${mib(bytes)}${Number.isFinite(total) ? ` of ${mib(total)}` : ''}${last ? '\n' : ''}`);
  };
}
