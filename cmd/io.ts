/**
 * What every command writes to and how it ends: the process streams and exit in production, buffers and a
 * recorder in tests (buildProgram(io) runs a whole command in-process).
 */

export interface CliIo {
  stdout: { write(chunk: string): unknown };
  stderr: { write(chunk: string): unknown };
  /** The environment (process.env in production): the CLI never reads process.env directly. */
  env: Record<string, string | undefined>;
  exit: (code: number) => void;
}

/** Exit codes of docs/cli.md. */
export const exitCodes = { ok: 0, runtime: 1, usage: 2 } as const;

/**
 * An error that ends the command with `exitCode` after printing `message` (already formatted, possibly several
 * lines) on stderr. Thrown from actions, caught once in run().
 */
export class CliError extends Error {
  override name = 'CliError';
  constructor(
    readonly exitCode: number,
    message: string,
  ) {
    super(message);
  }
}

/** Bad usage or configuration: one line `punctual: <reason>`, exit 2. */
export function usageError(reason: string): CliError {
  return new CliError(exitCodes.usage, `punctual: ${reason}`);
}
