/**
 * The client API core: request -> response (Hono style), no sockets. server.ts adapts it to HTTP/1.1 and h2c;
 * tests call handle() directly. Authentication, routing (404 / 405) and the error mapping live here; the routes
 * themselves are in routes.ts.
 */
import type { Readable } from 'node:stream';
import { PunctualError, invalid, toProblem } from '../core/errors.js';
import { clusterLimits, limits, quarantineLimits, queueLimits } from '../core/limits.js';
import type { Logger } from '../core/log.js';
import type { CallbackUrlCheck } from './parse.js';
import type { SchedulerApi } from './scheduler-api.js';
import { routes, type Route } from './routes.js';
import { TokenSet, scopeAllows, type Principal } from './tokens.js';
import type { UiAssets } from './ui.js';

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
  /** A stream (a backup) is piped as it comes; its route sets content-length. */
  body: string | Uint8Array | Readable;
}

/** Optional node capability behind POST /v1/cluster/shards/{id}/transfer-leader. */
export interface LeaderTransferApi {
  transferLeader(shard: number, to: string): Promise<void>;
}

export interface AppDeps {
  api: SchedulerApi & Partial<LeaderTransferApi>;
  /** When set, `/v1/*` (and /metrics when metricsAuth) require `Authorization: Bearer <token>` (an admin token). */
  authToken: string | null;
  /** Every accepted token with its scope (--auth-token and --auth-tokens-file); when given, authToken is ignored. */
  tokens?: TokenSet;
  metricsAuth: boolean;
  metrics: () => Promise<{ contentType: string; body: string }>;
  logger: Logger;
  /** The SSRF guard at submit: a callback URL with a refused literal address is a 400 on its url field. */
  callbackUrlCheck?: CallbackUrlCheck;
  /** The built dashboard served at /ui (src/http/ui.ts loadUiAssets); absent or null: /ui answers 404. */
  ui?: UiAssets | null;
}

export interface App {
  handle(req: ApiRequest): Promise<ApiResponse>;
  /**
   * The answer to a request that will be refused whatever its body (401, 403, 404, 405), or null: the server asks
   * before reading a body, so a refused upload is never read.
   */
  precheck?(req: { method: string; path: string; headers: Record<string, string | undefined> }): ApiResponse | null;
  /** Largest request body accepted for this route (the server answers 413 beyond it, without buffering). */
  bodyLimitFor(method: string, path: string): number;
  /**
   * precheck, bodyLimitFor and handle in one: the request is routed and authenticated once, before its body is
   * read (the server's path; optional so a test may hand the server a bare App).
   */
  begin?(req: { method: string; path: string; headers: Record<string, string | undefined> }): Begun;
}

/** What App.begin decided before the body: a refusal to answer unread, or the body limit and how to go on. */
export type Begun =
  | { refusal: ApiResponse }
  | { refusal: null; bodyLimit: number; finish(body: Uint8Array): Promise<ApiResponse> };

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
  const tokens = deps.tokens ?? new TokenSet(deps.authToken, null);
  const admit = (req: { method: string; path: string; headers: Record<string, string | undefined> }): Admission => {
    const { segments, query } = splitTarget(req.path);
    const pathname = '/' + segments.join('/');
    const found = matchRoute(routes, req.method === 'HEAD' ? 'GET' : req.method, segments);
    const open = found.kind === 'route' && found.route.open === true; // the API's description (routes.ts)
    const needsAuth = !open && (segments[0] === 'v1' || (pathname === '/metrics' && deps.metricsAuth));
    const principal = tokens.authenticate(req.headers.authorization);
    if (needsAuth && principal === null) {
      const err = new PunctualError('unauthorized', 'missing or invalid bearer token');
      return { kind: 'refused', principal, response: problemResponse(err, { 'www-authenticate': 'Bearer' }) };
    }
    if (found.kind === 'none') return { kind: 'refused', principal, response: problemResponse(new PunctualError('not_found', `no route for ${pathname}`)) };
    if (found.kind === 'method') {
      const err = new PunctualError('method_not_allowed', `${req.method} is not allowed on ${pathname}`);
      return { kind: 'refused', principal, response: problemResponse(err, { allow: found.allowed.join(', ') }) };
    }
    if (needsAuth && !scopeAllows(principal!.scope, found.route.scope)) {
      const err = new PunctualError('forbidden', `this token (${principal!.name}) has scope ${principal!.scope}; ${req.method} ${pathname} needs ${found.route.scope}`);
      return { kind: 'refused', principal, response: problemResponse(err) };
    }
    return { kind: 'admitted', principal, route: found.route, params: found.params, query };
  };
  const answer = (err: unknown, req: ApiRequest): ApiResponse => {
    if (!(err instanceof PunctualError)) deps.logger.error('request failed', { method: req.method, path: req.path, err });
    return problemResponse(err, retryHeaders(err));
  };
  const run = async (req: ApiRequest, admitted: Admission | null): Promise<ApiResponse> => {
    const startedMs = performance.now();
    let principal: Principal | null = null;
    let response: ApiResponse;
    try {
      const admission = admitted ?? admit(req);
      principal = admission.principal;
      response =
        admission.kind === 'refused'
          ? admission.response
          : await admission.route.handler({ req, params: admission.params, query: admission.query, deps, principal });
    } catch (err) {
      response = answer(err, req);
    }
    logAccess(deps, req, response.status, principal, startedMs);
    return response;
  };
  const handle = (req: ApiRequest): Promise<ApiResponse> => run(req, null);
  const precheck = (req: { method: string; path: string; headers: Record<string, string | undefined> }): ApiResponse | null => {
    const startedMs = performance.now();
    let admission: Admission;
    try {
      admission = admit(req);
    } catch {
      return null; // a malformed target: handle() answers it (there is no body worth keeping to read first)
    }
    if (admission.kind === 'admitted') return null;
    logAccess(deps, { method: req.method, path: req.path }, admission.response.status, admission.principal, startedMs);
    return admission.response;
  };
  const bodyLimitFor = (method: string, path: string): number => {
    const batch = method === 'POST' && safeDecode(path.split('?', 1)[0]!) === '/v1/jobs:batch';
    return batch ? limits.batchBodyBytesMax : limits.requestBodyBytesMax;
  };
  const begin = (req: { method: string; path: string; headers: Record<string, string | undefined> }): Begun => {
    const startedMs = performance.now();
    let admitted: Admission | null;
    try {
      admitted = admit(req);
    } catch {
      admitted = null; // a malformed target: answered after the body, as handle() does
    }
    if (admitted !== null && admitted.kind === 'refused') {
      logAccess(deps, req, admitted.response.status, admitted.principal, startedMs);
      return { refusal: admitted.response };
    }
    return { refusal: null, bodyLimit: bodyLimitFor(req.method, req.path), finish: (body) => run({ ...req, body }, admitted) };
  };
  return { handle, precheck, bodyLimitFor, begin };
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

type Admission =
  | { kind: 'refused'; principal: Principal | null; response: ApiResponse }
  | { kind: 'admitted'; principal: Principal | null; route: Route; params: Record<string, string>; query: URLSearchParams };

/** One structured line per write (any method but GET/HEAD): who (the token's name), what, the answer, how long. */
function logAccess(deps: AppDeps, req: { method: string; path: string }, status: number, principal: Principal | null, startedMs: number): void {
  if (req.method === 'GET' || req.method === 'HEAD') return;
  deps.logger.info('access', {
    method: req.method,
    path: req.path,
    status,
    token: principal === null ? null : principal.name,
    duration_ms: Math.round((performance.now() - startedMs) * 1000) / 1000,
  });
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
