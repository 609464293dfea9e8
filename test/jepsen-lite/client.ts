/**
 * The harness's HTTP client for the API of docs/api.md, with the definite-failure rule: 2xx is ok, a 4xx is a
 * definite failure (fail), a 5xx, a timeout or a connection error leaves the outcome unknown (info).
 */
import { Agent, request } from 'undici';

export type Answer =
  | { kind: 'ok'; status: number; body: unknown }
  | { kind: 'fail'; status: number; code: string; body: unknown }
  | { kind: 'info'; reason: string };

export class ApiClient {
  private readonly agent: Agent;

  constructor(private readonly timeoutMs: number) {
    this.agent = new Agent({
      connect: { timeout: timeoutMs },
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      keepAliveTimeout: 4_000,
      connections: 16,
    });
  }

  async call(baseUrl: string, method: 'GET' | 'POST' | 'PUT', path: string, body?: unknown): Promise<Answer> {
    try {
      const res = await request(baseUrl + path, {
        method,
        dispatcher: this.agent,
        headers: body === undefined ? {} : { 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
      const text = await res.body.text();
      const parsed = parseJson(text);
      if (res.statusCode >= 200 && res.statusCode < 300) return { kind: 'ok', status: res.statusCode, body: parsed };
      if (res.statusCode >= 400 && res.statusCode < 500) {
        const code = typeof parsed === 'object' && parsed !== null ? (parsed as { code?: unknown }).code : undefined;
        return { kind: 'fail', status: res.statusCode, code: typeof code === 'string' ? code : `http_${res.statusCode}`, body: parsed };
      }
      return { kind: 'info', reason: `http_${res.statusCode}` };
    } catch (err) {
      const e = err as { code?: string; name?: string; message?: string };
      return { kind: 'info', reason: e.code ?? e.name ?? String(e.message) };
    }
  }

  close(): Promise<void> {
    return this.agent.destroy();
  }
}

function parseJson(text: string): unknown {
  if (text === '') return null;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
