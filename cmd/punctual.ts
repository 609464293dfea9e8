#!/usr/bin/env node
/**
 * The `punctual` executable: the only place that reads argv and the environment. Commands live beside it
 * (serve.ts, jobs.ts, tasks.ts, cluster.ts, bench/cli.ts); buildProgram(io) wires them so tests can run any
 * command in-process with buffers for stdout/stderr and a recorder for exit.
 */
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Command, CommanderError } from 'commander';
import { registerBenchCommand } from '../bench/cli.js';
import { registerBackupCommand } from './backup.js';
import { registerCalendarCommands } from './calendars.js';
import { registerClockCommands } from './clock.js';
import { registerClusterCommands } from './cluster.js';
import { registerDoctorCommand } from './doctor.js';
import { registerDeadLetterCommands } from './dead-letters.js';
import { CliError, exitCodes, usageError, type CliIo } from './io.js';
import { registerJobCommands } from './jobs.js';
import { registerRestoreCommand } from './restore.js';
import { registerServeCommand } from './serve.js';
import { registerTaskCommands } from './tasks.js';
import { registerTopCommand } from './top.js';
import { programVersion } from './version.js';

export type { CliIo } from './io.js';

/**
 * The whole command tree. Commander never exits by itself (exitOverride): its errors are thrown and mapped to
 * exit codes by run(), its output goes to io. Settings are applied before any subcommand is added, because
 * subcommands copy them when they are created.
 */
export function buildProgram(io: CliIo): Command {
  const program = new Command('punctual');
  program
    .description('A self-hosted job scheduler that fires HTTP callbacks at the exact millisecond.')
    .version(programVersion(io.env), '-V, --version', 'print the version and exit')
    .exitOverride()
    .configureOutput({
      writeOut: (s) => io.stdout.write(s),
      writeErr: (s) => io.stderr.write(s),
      // commander's own usage errors, reworded to the one-line `punctual: <reason>` of every usage error
      outputError: (s, write) => write(s.replace(/^error: /, 'punctual: ')),
    })
    .showSuggestionAfterError(true);
  registerServeCommand(program, io);
  registerJobCommands(program, io);
  registerTaskCommands(program, io);
  registerCalendarCommands(program, io);
  registerClusterCommands(program, io);
  registerClockCommands(program, io);
  registerDeadLetterCommands(program, io);
  registerBenchCommand(program);
  registerDoctorCommand(program, io);
  registerTopCommand(program, io);
  registerBackupCommand(program, io);
  registerRestoreCommand(program, io);
  return program;
}

/**
 * The exit code for an error that ended a command. CommanderError: help and version 0; a command's own
 * `this.error(msg, { exitCode })` (code commander.error) keeps its code; commander's parse errors (exit 1 in
 * commander) are bad usage, 2.
 */
function exitCodeOf(err: unknown): number {
  if (err instanceof CliError) return err.exitCode;
  if (!(err instanceof CommanderError)) return exitCodes.runtime;
  if (err.exitCode === 0) return exitCodes.ok;
  return err.code === 'commander.error' ? err.exitCode : exitCodes.usage;
}

/**
 * Parses argv (without node and script) and runs the command. On success it returns without calling exit, so a
 * long-running command (serve) keeps the process alive; every failure ends in io.exit(code) after its message.
 */
export async function run(argv: readonly string[], io: CliIo): Promise<void> {
  try {
    const program = buildProgram(io);
    await program.parseAsync(helpArgv(program, argv), { from: 'user' });
  } catch (err) {
    if (err instanceof CliError) {
      if (err.message !== '') io.stderr.write(err.message + '\n');
    } else if (!(err instanceof CommanderError)) {
      // a bug, not an operating error: say so with the stack
      io.stderr.write(`punctual: internal error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    }
    const code = exitCodeOf(err);
    if (code !== exitCodes.ok) io.exit(code);
  }
}

/**
 * `punctual help job add` means `punctual job add --help`: commander's help command only looks at its first
 * operand and would show the help of `job`. Every operand must name a command (an alias counts), else it is the
 * usage error of an unknown command: commander would show some help and exit 0 (`help job nosuch`) or print the
 * whole help on stderr with no reason (`help nosuch`).
 */
function helpArgv(program: Command, argv: readonly string[]): string[] {
  const rest = argv.slice(1);
  if (argv[0] !== 'help' || rest.length === 0 || rest[0] === 'help' || rest.some((a) => a.startsWith('-'))) return [...argv];
  let cmd = program;
  for (const name of rest) {
    const sub = cmd.commands.find((c) => c.name() === name || c.aliases().includes(name));
    if (sub === undefined) throw usageError(`unknown command '${name}'`);
    cmd = sub;
  }
  return [...rest, '--help'];
}

/** True when this file is the script node was asked to run (not when a test imports it). */
function isMain(): boolean {
  const script = process.argv[1];
  if (script === undefined) return false;
  try {
    return realpathSync(script) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

/**
 * `punctual job list --all | head` closes stdout early: a reader that has seen enough is not a failure, so end
 * quietly (exit 0) instead of node's unhandled EPIPE stack.
 */
function quietOnClosedPipe(stream: NodeJS.WriteStream): void {
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') process.exit(exitCodes.ok);
    throw err;
  });
}

if (isMain()) {
  quietOnClosedPipe(process.stdout);
  const io: CliIo = {
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
    exit: (code) => process.exit(code),
  };
  void run(process.argv.slice(2), io);
}
