/** Test helpers for the HTTP layer: an App over a MemoryApi, and a call() that decodes JSON answers. */
import { createLogger, type Logger } from '../../core/log.js';
import { createApp, type App, type AppDeps } from '../app.js';
import { MemoryApi } from './memory-api.js';

export interface Harness {
  api: MemoryApi;
  app: App;
  /** Lines the app logged (JSON). */
  logs: string[];
}

export function makeHarness(overrides: Partial<AppDeps> = {}): Harness {
  const api = new MemoryApi();
  const logs: string[] = [];
  const logger: Logger = createLogger({ level: 'debug', write: (line) => logs.push(line) });
  const app = createApp({
    api,
    authToken: null,
    metricsAuth: false,
    metrics: async () => ({ contentType: 'text/plain; version=0.0.4', body: 'punctual_up 1\n' }),
    logger,
    ...overrides,
  });
  return { api, app, logs };
}

export interface CallResult {
  status: number;
  headers: Record<string, string>;
  /** Parsed JSON body, or the text when it is not JSON, or null when empty. `any` only here: a test-side view. */
  json: any;
}

export async function call(
  app: App,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<CallResult> {
  const bytes =
    body === undefined ? new Uint8Array(0) : new TextEncoder().encode(typeof body === 'string' ? body : JSON.stringify(body));
  const lower: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) lower[k.toLowerCase()] = v;
  const res = await app.handle({ method, path, headers: lower, body: bytes });
  const text = typeof res.body === 'string' ? res.body : res.body instanceof Uint8Array ? new TextDecoder().decode(res.body) : '(a stream)';
  let json: unknown = null;
  if (text !== '') {
    try {
      json = JSON.parse(text);
    } catch {
      json = text;
    }
  }
  return { status: res.status, headers: res.headers, json };
}
