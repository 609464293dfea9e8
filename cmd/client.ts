/**
 * The HTTP side of the client commands: a thin adapter over the package's client library (src/client, one
 * `Punctual` per command, closed at the end so the process exits at once). It keeps the CLI's contract: bearer
 * token, JSON in and out, requests sent once (no retries, so every command's output is what the server
 * answered), and the two ways a call fails: the server answered with a problem (exit 1,
 * `error: <code>: <detail>`), or it could not be reached (exit 1, naming the server).
 */
import { readFileSync } from 'node:fs';
import { Punctual, PunctualError } from '../src/client/index.js';
import { cliLimits } from '../src/core/limits.js';
import { CliError, exitCodes, usageError, type CliIo } from './io.js';
import { isPlainObject } from './format.js';

export const defaultServer = 'http://127.0.0.1:8080';

/** The options every client command takes. */
export interface ClientOptions {
  server?: string;
  token?: string;
  /** PEM file of the CA(s) that signed an https:// server's certificate (replaces the system CAs). */
  cacert?: string;
  json?: boolean;
}

export interface CallOptions {
  body?: unknown;
  headers?: Record<string, string>;
}

export interface Client {
  readonly server: string;
  readonly json: boolean;
  /** The library client underneath (retries off), for commands that page, stream or read /metrics. */
  readonly api: Punctual;
  /** Sends one request; resolves with the parsed JSON body (null when empty), throws CliError on failure. */
  call(method: string, path: string, options?: CallOptions): Promise<{ status: number; body: unknown }>;
  close(): Promise<void>;
}

/** --server, else PUNCTUAL_SERVER, else the default; an http(s) base URL without query or fragment. */
export function resolveServer(flag: string | undefined, env: Record<string, string | undefined>): string {
  const fromEnv = env.PUNCTUAL_SERVER;
  const what = flag !== undefined ? '--server' : 'PUNCTUAL_SERVER';
  const text = flag ?? (fromEnv !== undefined && fromEnv !== '' ? fromEnv : defaultServer);
  // HOST:PORT alone (what --listen takes) parses as a URL with the host as its scheme, or not at all
  const hint = /^[^/:]+:\d+(\/.*)?$/.test(text) ? ` (did you mean http://${text}?)` : '';
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw usageError(`${what}: not a URL: ${JSON.stringify(text)}${hint}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw usageError(`${what}: must be an http:// or https:// URL, got ${JSON.stringify(text)}${hint}`);
  }
  if (url.search !== '' || url.hash !== '' || url.username !== '' || url.password !== '') {
    throw usageError(`${what}: must be a plain base URL (no credentials, query or fragment)`);
  }
  return url.origin + url.pathname.replace(/\/+$/, '');
}

/** --cacert, else PUNCTUAL_CACERT: the PEM text, read now (a usage error naming the flag when it cannot be). */
export function resolveCacert(flag: string | undefined, env: Record<string, string | undefined>): string | null {
  const fromEnv = env.PUNCTUAL_CACERT;
  const path = flag ?? (fromEnv !== undefined && fromEnv !== '' ? fromEnv : null);
  if (path === null) return null;
  const what = flag !== undefined ? '--cacert' : 'PUNCTUAL_CACERT';
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const code = isPlainObject(err) && typeof err.code === 'string' ? err.code : String(err);
    throw usageError(`${what}: cannot read ${JSON.stringify(path)}: ${code}`);
  }
  if (!text.includes('-----BEGIN CERTIFICATE-----')) throw usageError(`${what}: ${JSON.stringify(path)} holds no PEM certificate`);
  return text;
}

export function openClient(opts: ClientOptions, io: CliIo): Client {
  const server = resolveServer(opts.server, io.env);
  const fromEnv = io.env.PUNCTUAL_TOKEN;
  const token = opts.token ?? (fromEnv !== undefined && fromEnv !== '' ? fromEnv : null);
  if (token === '') throw usageError('--token: must not be empty');
  const ca = resolveCacert(opts.cacert, io.env);
  const api = new Punctual({
    baseUrl: server,
    token,
    ca,
    connectTimeoutMs: cliLimits.connectTimeoutMs,
    timeoutMs: cliLimits.requestTimeoutMs,
    retry: false,
  });
  const call = async (method: string, path: string, options: CallOptions = {}) => {
    try {
      const res = await api.request(method, path, { body: options.body, headers: options.headers });
      return { status: res.status, body: res.body };
    } catch (err) {
      throw cliErrorOf(server, err);
    }
  };
  return { server, json: opts.json === true, api, call, close: () => api.close() };
}

/** The CLI's message and exit code for a failed library call (docs/cli.md, Errors). */
export function cliErrorOf(server: string, err: unknown): CliError {
  if (!(err instanceof PunctualError)) return unreachable(server, err);
  if (err.code === 'bad_response' && err.status >= 200 && err.status < 400) {
    return new CliError(exitCodes.runtime, `error: bad_response: HTTP ${err.status} with a body that is not JSON`);
  }
  if (err.status >= 400) return apiError(err.status, err.bodyText);
  if (err.code === 'timeout') {
    return new CliError(exitCodes.runtime, `punctual: server ${server} did not answer within ${cliLimits.requestTimeoutMs} ms`);
  }
  return unreachable(server, err.cause ?? err);
}

/** `error: <code>: <detail>`, then one indented line per field error. */
export function apiError(status: number, text: string): CliError {
  let problem: unknown = null;
  try {
    problem = JSON.parse(text);
  } catch {
    // not problem+json (a proxy in between, say): show the status and the start of the body
  }
  if (!isPlainObject(problem) || typeof problem.code !== 'string') {
    const snippet = text.replace(/\s+/g, ' ').trim().slice(0, 200);
    return new CliError(exitCodes.runtime, `error: http_${status}: ${snippet === '' ? `HTTP ${status}` : snippet}`);
  }
  const detail = typeof problem.detail === 'string' ? problem.detail : String(problem.title ?? `HTTP ${status}`);
  const lines = [`error: ${problem.code}: ${detail}`];
  if (Array.isArray(problem.errors)) {
    for (const e of problem.errors) {
      if (!isPlainObject(e)) continue;
      const line = `${String(e.field)}: ${String(e.message)}`;
      // the detail is usually the first field error's line (or its message alone), then ` (and N more)` when
      // there are more: do not print that one twice
      if (line !== detail && String(e.message) !== detail && !detail.startsWith(`${line} (and `)) lines.push(`  ${line}`);
    }
  }
  return new CliError(exitCodes.runtime, lines.join('\n'));
}

function unreachable(server: string, err: unknown): CliError {
  const code = isPlainObject(err) && typeof err.code === 'string' ? err.code : '';
  const message = err instanceof Error ? err.message : String(err);
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    return new CliError(exitCodes.runtime, `punctual: server ${server} did not answer within ${cliLimits.requestTimeoutMs} ms`);
  }
  const full = code !== '' && !message.includes(code) ? `${code}: ${message}` : message;
  // one line: TLS errors carry OpenSSL's multi-line text
  const reason = full.replace(/\s+/g, ' ').trim();
  return new CliError(exitCodes.runtime, `punctual: cannot reach server ${server}: ${reason}`);
}

/** Runs fn with an open client and closes it whatever happens. */
export async function withClient<T>(opts: ClientOptions, io: CliIo, fn: (client: Client) => Promise<T>): Promise<T> {
  const client = openClient(opts, io);
  try {
    return await fn(client);
  } finally {
    await client.close();
  }
}

/** Path segment of a user-given id or name. */
export function seg(value: string): string {
  return encodeURIComponent(value);
}
