/**
 * `punctual doctor [--json]`: prints the report of src/platform/doctor.ts. Exit 0 when everything is fine, 1
 * with each problem named.
 */
import type { Command } from 'commander';
import { doctorReport, type DoctorReport } from '../src/platform/doctor.js';
import { CliError, exitCodes, type CliIo } from './io.js';
import { programVersion } from './version.js';

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
      const report = await doctorReport(io.env, programVersion(io.env));
      io.stdout.write(opts.json === true ? JSON.stringify(report, null, 2) + '\n' : formatReport(report));
      if (report.problems.length > 0) throw new CliError(exitCodes.runtime, '');
    });
}
