/**
 * The client API core: request -> response (Hono style), no sockets. server.ts adapts it to HTTP/1.1 and h2c;
 * tests call handle() directly. Authentication, routing (404 / 405) and the error mapping live here; the routes
 * themselves are in routes.ts.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { PunctualError, invalid, toProblem } from '../core/errors.js';
import { clusterLimits, limits, quarantineLimits, queueLimits } from '../core/limits.js';
import type { Logger } from '../core/log.js';
import type { CallbackUrlCheck } from './parse.js';
import type { SchedulerApi } from './scheduler-api.js';
import { routes, type Route } from './routes.js';

export interface ApiRequest {
  method: string;
  /** The request target: path with query. */
  path: string;
  /** Lower-case names. */
  headers: Record<string, string | undefined>;
  body: Uint8Array;
}

export interface ApiResponse {
  status: number;
  headers: Record<string, string>;
  body: string | Uint8Array;
}

/** Optional node capability behind POST /v1/cluster/shards/{id}/transfer-leader. */
export interface LeaderTransferApi {
  transferLeader(shard: number, to: string): Promise<void>;
}

export interface AppDeps {
  api: SchedulerApi & Partial<LeaderTransferApi>;
  /** When set, `/v1/*` (and /metrics when metricsAuth) require `Authorization: Bearer <token>`. */
  authToken: string | null;
  metricsAuth: boolean;
  metrics: () => Promise<{ contentType: string; body: string }>;
  logger: Logger;
  /** The SSRF guard at submit: a callback URL with a refused literal address is a 400 on its url field. */
  callbackUrlCheck?: CallbackUrlCheck;
}

export interface App {
  handle(req: ApiRequest): Promise<ApiResponse>;
  /** Largest request body accepted for this route (the server answers 413 beyond it, without buffering). */
  bodyLimitFor(method: string, path: string): number;
}

export const jsonType = 'application/json';
export const problemType = 'application/problem+json';

export function jsonResponse(status: number, body: unknown, headers: Record<string, string> = {}): ApiResponse {
  return { status, headers: { 'content-type': jsonType, ...headers }, body: JSON.stringify(body) };
}

export function problemResponse(err: unknown, headers: Record<string, string> = {}): ApiResponse {
  const problem = toProblem(err);
  return { status: problem.status, headers: { 'content-type': problemType, ...headers }, body: JSON.stringify(problem) };
}

export function createApp(deps: AppDeps): App {
  const isAuthorized = bearerCheck(deps.authToken);
  const handle = async (req: ApiRequest): Promise<ApiResponse> => {
    try {
      const { segments, query } = splitTarget(req.path);
      const pathname = '/' + segments.join('/');
      const needsAuth = segments[0] === 'v1' || (pathname === '/metrics' && deps.metricsAuth);
      if (needsAuth && !isAuthorized(req.headers.authorization)) {
        const err = new PunctualError('unauthorized', 'missing or invalid bearer token');
        return problemResponse(err, { 'www-authenticate': 'Bearer' });
      }
      const found = matchRoute(routes, req.method === 'HEAD' ? 'GET' : req.method, segments);
      if (found.kind === 'none') throw new PunctualError('not_found', `no route for ${pathname}`);
      if (found.kind === 'method') {
        const err = new PunctualError('method_not_allowed', `${req.method} is not allowed on ${pathname}`);
        return problemResponse(err, { allow: found.allowed.join(', ') });
      }
      return await found.route.handler({ req, params: found.params, query, deps });
    } catch (err) {
      if (!(err instanceof PunctualError)) {
        deps.logger.error('request failed', { method: req.method, path: req.path, err });
      }
      return problemResponse(err, retryHeaders(err));
    }
  };
  return {
    handle,
    bodyLimitFor: (method, path) => {
      const batch = method === 'POST' && safeDecode(path.split('?', 1)[0]!) === '/v1/jobs:batch';
      return batch ? limits.batchBodyBytesMax : limits.requestBodyBytesMax;
    },
  };
}

/**
 * 503 (no shard leader known, node shutting down) and 507 (disk full): when to try again. 429 (a queue of the node is full): the same,
 * and the IETF RateLimit field (draft-ietf-httpapi-ratelimit-headers) naming the full queue as the policy, with
 * nothing remaining until it resets. No RateLimit-Policy: the limit is a queue's depth, not a quota per window.
 */
function retryHeaders(err: unknown): Record<string, string> {
  if (!(err instanceof PunctualError)) return {};
  if (err.code === 'unavailable') return { 'retry-after': String(clusterLimits.retryAfterS) };
  if (err.code === 'insufficient_storage') return { 'retry-after': String(quarantineLimits.diskFullRetryAfterS) };
  if (err.code !== 'rate_limited') return {};
  const policy = err.reason ?? 'queue';
  return { 'retry-after': String(queueLimits.retryAfterS), ratelimit: `"${policy}";r=0;t=${queueLimits.retryAfterS}` };
}

/**
 * Bearer token check in constant time: both sides are hashed first so timingSafeEqual compares equal lengths and
 * the token's length does not leak either.
 */
function bearerCheck(token: string | null): (header: string | undefined) => boolean {
  if (token === null) return () => true;
  const expected = createHash('sha256').update(token, 'utf8').digest();
  return (header) => {
    const m = header === undefined ? null : /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header);
    if (m === null) return false;
    const got = createHash('sha256').update(m[1]!, 'utf8').digest();
    return timingSafeEqual(got, expected);
  };
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

function splitTarget(target: string): { segments: string[]; query: URLSearchParams } {
  const q = target.indexOf('?');
  const pathname = q < 0 ? target : target.slice(0, q);
  const query = new URLSearchParams(q < 0 ? '' : target.slice(q + 1));
  if (!pathname.startsWith('/')) throw new PunctualError('not_found', 'the request target must be a path');
  try {
    return { segments: pathname.slice(1).split('/').map((s) => decodeURIComponent(s)), query };
  } catch {
    throw invalid('path', 'malformed percent-encoding');
  }
}

type Match =
  | { kind: 'route'; route: Route; params: Record<string, string> }
  | { kind: 'method'; allowed: string[] }
  | { kind: 'none' };

function matchRoute(table: readonly Route[], method: string, segments: string[]): Match {
  const allowed: string[] = [];
  for (const route of table) {
    const params = matchSegments(route.segments, segments);
    if (params === null) continue;
    if (route.method === method) return { kind: 'route', route, params };
    allowed.push(route.method);
  }
  if (allowed.length === 0) return { kind: 'none' };
  if (allowed.includes('GET')) allowed.push('HEAD');
  return { kind: 'method', allowed };
}

/** Template segments are literals or `:name` parameters (a parameter matches one non-empty segment). */
function matchSegments(template: readonly string[], segments: string[]): Record<string, string> | null {
  if (template.length !== segments.length) return null;
  const params: Record<string, string> = {};
  for (let i = 0; i < template.length; i++) {
    const t = template[i]!;
    const s = segments[i]!;
    if (t.startsWith(':') && s !== '') params[t.slice(1)] = s;
    else if (t !== s) return null;
  }
  return params;
}
