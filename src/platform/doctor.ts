/**
 * The checks behind `punctual doctor` (cmd/doctor.ts prints them): what this executable is and whether it can
 * run here: Node, the glibc it needs against the one it finds, where the SQLite addon was unpacked and that it
 * loads (on the main thread and in a worker thread, as the WAL checkpointer does).
 */
import Database from 'better-sqlite3';
import { Worker } from 'node:worker_threads';
import { embeddedBuildInfo } from './build-info.js';
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

/** `version` is the program's own `--version` line, which the caller knows (cmd/version.ts). */
export async function doctorReport(env: Record<string, string | undefined>, version: string): Promise<DoctorReport> {
  const info = embeddedBuildInfo();
  const report: DoctorReport = {
    version,
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
