/** Test fixture (not product code): runs the CLI in-process through `run` with buffered io. */
import { expect } from 'vitest';
import { run, type CliIo } from './punctual.js';

export interface CliResult {
  stdout: string;
  stderr: string;
  /** The exit code asked for (0 when none). */
  code: number;
}

export async function runCli(argv: string[], env: Record<string, string> = {}): Promise<CliResult> {
  let stdout = '';
  let stderr = '';
  const exits: number[] = [];
  const io: CliIo = {
    stdout: { write: (s: string) => (stdout += s) },
    stderr: { write: (s: string) => (stderr += s) },
    env,
    exit: (code) => void exits.push(code),
  };
  await run(argv, io);
  expect(exits.length, 'a command asks for an exit at most once').toBeLessThanOrEqual(1);
  return { stdout, stderr, code: exits[0] ?? 0 };
}
