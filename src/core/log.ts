/** Structured logs: one JSON object per line on stderr, with `msg` and fields. No console.log outside the CLI. */

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';
const levelRank: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(fields: Record<string, unknown>): Logger;
}

export interface LoggerOptions {
  level?: LogLevel;
  format?: 'json' | 'pretty';
  write?: (line: string) => void;
  bindings?: Record<string, unknown>;
}

export function createLogger(options: LoggerOptions = {}): Logger {
  const min = levelRank[options.level ?? 'info'];
  const format = options.format ?? 'json';
  const write = options.write ?? ((line: string) => process.stderr.write(line + '\n'));
  const bindings = options.bindings ?? {};
  const emit = (level: LogLevel, msg: string, fields?: Record<string, unknown>): void => {
    if (levelRank[level] < min) return;
    const time = new Date().toISOString();
    if (format === 'pretty') {
      const rest = { ...bindings, ...fields };
      const tail = Object.keys(rest).length > 0 ? ' ' + JSON.stringify(rest, errorReplacer) : '';
      write(`${time} ${level.toUpperCase().padEnd(5)} ${msg}${tail}`);
      return;
    }
    write(JSON.stringify({ time, level, msg, ...bindings, ...fields }, errorReplacer));
  };
  return {
    debug: (m, f) => emit('debug', m, f),
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
    child: (fields) => createLogger({ ...options, bindings: { ...bindings, ...fields } }),
  };
}

/** A logger that drops everything: for tests that do not look at logs. */
export const silentLogger: Logger = createLogger({ write: () => {} , level: 'error' });

function errorReplacer(_key: string, value: unknown): unknown {
  if (value instanceof Error) return { name: value.name, message: value.message, stack: value.stack };
  return value;
}
