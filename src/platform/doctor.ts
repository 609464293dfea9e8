/**
 * `punctual doctor`: what this executable is and whether it can run here: version, Node, the glibc it needs
 * against the one it finds, where the SQLite addon was unpacked and that it loads (on the main thread and in a
 * worker thread, as the WAL checkpointer does). Exit 0 when everything is fine, 1 with each problem named.
 */
import Database from 'better-sqlite3';
import type { Command } from 'commander';
import { Worker } from 'node:worker_threads';
import { CliError, exitCodes, type CliIo } from '../../cmd/io.js';
import { versionString } from '../../cmd/version.js';
import { embeddedBuildInfo, seaVersionString } from './build-info.js';
import { runningAsSea } from './sea.js';
import { seaSqlite, sqliteModulePath, sqliteOpenOptions } from './sqlite.js';

export interface DoctorReport {
  version: string;
  executable: string;
  singleExecutable: boolean;
  node: string;
  platform: string;
  glibcRuntime: string | null;
  /** The glibc the build needs (single executable only), e.g. "2.28 (node 2.28, sqlite addon 2.28)". */
  glibcNeeded: string | null;
  addonCache: string | null;
  sqlite: string | null;
  sqliteInWorker: string | null;
  problems: string[];
}

/** Compares dotted versions numerically: "2.28" < "2.31". */
export function versionAtLeast(found: string, needed: string): boolean {
  const a = found.split('.').map(Number);
  const b = needed.split('.').map(Number);
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const x = a[i] ?? 0;
    const y = b[i] ?? 0;
    if (x !== y) return x > y;
  }
  return true;
}

function glibcRuntime(): string | null {
  const header = (process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header;
  return header?.glibcVersionRuntime ?? null;
}

function sqliteVersionMainThread(): string {
  const db = new Database(':memory:', sqliteOpenOptions());
  try {
    return (db.prepare('SELECT sqlite_version() AS v').get() as { v: string }).v;
  } finally {
    db.close();
  }
}

/** Loads better-sqlite3 the way src/store/checkpointer.ts does: require(sqliteModulePath()) in a worker. */
function sqliteVersionInWorker(): Promise<string> {
  const source = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.modulePath);
const db = new Database(':memory:');
parentPort.postMessage(db.prepare('SELECT sqlite_version() AS v').get().v);
db.close();
`;
  return new Promise((resolve, reject) => {
    const worker = new Worker(source, { eval: true, workerData: { modulePath: sqliteModulePath() } });
    worker.once('message', (v: string) => resolve(v));
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`worker exited with code ${code} before answering`)));
  });
}

function errorLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split('\n')[0];
}

async function checkSqlite(report: DoctorReport): Promise<void> {
  try {
    if (report.singleExecutable) {
      const unpacked = seaSqlite();
      report.addonCache = `${unpacked.dir} (from ${unpacked.from})`;
    }
    report.sqlite = sqliteVersionMainThread();
    report.sqliteInWorker = await sqliteVersionInWorker();
  } catch (err) {
    report.problems.push(errorLine(err));
  }
}

export async function doctorReport(env: Record<string, string | undefined>): Promise<DoctorReport> {
  const info = embeddedBuildInfo();
  const report: DoctorReport = {
    version: seaVersionString(env) ?? versionString(env),
    executable: process.execPath,
    singleExecutable: runningAsSea(),
    node: process.version,
    platform: `${process.platform} ${process.arch}`,
    glibcRuntime: glibcRuntime(),
    glibcNeeded: null,
    addonCache: null,
    sqlite: null,
    sqliteInWorker: null,
    problems: [],
  };
  if (info !== null) {
    report.glibcNeeded = `${info.glibcFloor} (node ${info.nodeGlibcFloor}, sqlite addon ${info.addonGlibcFloor}, addon built on ${info.addonOrigin})`;
    if (report.glibcRuntime !== null && !versionAtLeast(report.glibcRuntime, info.glibcFloor)) {
      report.problems.push(`glibc ${report.glibcRuntime} is older than the ${info.glibcFloor} this build needs`);
    }
  }
  if ((env.NODE_OPTIONS ?? '') !== '') {
    report.problems.push('NODE_OPTIONS is set and applies to this executable too: unset it (NODE_OPTIONS= punctual ...)');
  }
  await checkSqlite(report);
  return report;
}

function formatReport(r: DoctorReport): string {
  const rows: Array<[string, string | null]> = [
    ['version', r.version],
    ['executable', `${r.executable} (${r.singleExecutable ? 'single executable' : 'node script'})`],
    ['node', r.node],
    ['platform', r.platform],
    ['glibc found', r.glibcRuntime ?? 'none (not a glibc system)'],
    ['glibc needed', r.glibcNeeded ?? 'whatever node needs (not a single executable)'],
    ['addon cache', r.addonCache ?? '-'],
    ['sqlite', r.sqlite ?? '-'],
    ['sqlite in a worker', r.sqliteInWorker ?? '-'],
  ];
  const lines = rows.map(([k, v]) => `${(k + ':').padEnd(20)}${v ?? '-'}`);
  lines.push(r.problems.length === 0 ? 'ok' : r.problems.map((p) => `problem: ${p}`).join('\n'));
  return lines.join('\n') + '\n';
}

export function registerDoctorCommand(program: Command, io: CliIo): void {
  program
    .command('doctor')
    .description('check that this executable can run here (glibc, SQLite addon, cache folder) and print what it is')
    .option('--json', 'print the report as JSON')
    .action(async (opts: { json?: boolean }) => {
      const report = await doctorReport(io.env);
      io.stdout.write(opts.json === true ? JSON.stringify(report, null, 2) + '\n' : formatReport(report));
      if (report.problems.length > 0) throw new CliError(exitCodes.runtime, '');
    });
}
