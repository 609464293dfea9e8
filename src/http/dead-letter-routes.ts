/**
 * The dead-letter routes of docs/api.md "Dead letters": GET /v1/dead-letters (filtered, paged, newest failure
 * first), GET /v1/dead-letters:groups (counts per task and error class) and POST /v1/dead-letters:replay (by ids or
 * by filter, with a dry run that only counts). Reads need `read`, the replay `write`. The node side is optional
 * (DeadLetterApi): a node without it answers 503.
 */
import { PunctualError, invalid } from '../core/errors.js';
import { jobIdPattern, taskNamePattern } from '../core/ids.js';
import { httpLimits, limits, retentionLimits } from '../core/limits.js';
import { errorClasses, type ErrorClass } from '../scheduler/failure.js';
import type { DeadLetter, DeadLetterFilter, DeadLetterGroup } from '../scheduler/types.js';
import type { ApiRequest, AppDeps } from './app.js';
import { jsonResponse } from './app.js';
import type { Route, RouteContext } from './routes.js';
import { renderTime, renderTimeOrNull } from './time.js';
import { Issues, jsonDepthMax, jsonDepthOver, onlyKeys, readBool, readEnum, readObject, readPattern, readTime } from './validate.js';

export type DeadLetterReplay = { ids: string[]; dryRun: boolean } | { filter: DeadLetterFilter; dryRun: boolean };

/** The node's side (src/node/service.ts). */
export interface DeadLetterApi {
  listDeadLetters(filter: DeadLetterFilter, page: { limit: number; cursor: string | null }): Promise<{ deadLetters: DeadLetter[]; nextCursor: string | null }>;
  deadLetterGroups(): Promise<DeadLetterGroup[]>;
  replayDeadLetters(req: DeadLetterReplay): Promise<{ matched: number; replayed: number }>;
}

function deadLetterApi(deps: AppDeps): DeadLetterApi {
  const api = deps.api as Partial<DeadLetterApi>;
  if (typeof api.listDeadLetters !== 'function' || typeof api.deadLetterGroups !== 'function' || typeof api.replayDeadLetters !== 'function') {
    throw new PunctualError('unavailable', 'dead letters are not supported by this node');
  }
  return api as DeadLetterApi;
}

const filterKeys = ['task', 'error_class', 'since', 'until'] as const;

/** The filter fields (query parameters or a replay's `filter` object); `since` inclusive, `until` exclusive. */
function readFilter(get: (key: string) => unknown, prefix: string, issues: Issues): DeadLetterFilter {
  const field = (k: string): string => (prefix === '' ? k : `${prefix}.${k}`);
  const task = get('task');
  const errorClass = get('error_class');
  const since = get('since');
  const until = get('until');
  const filter: DeadLetterFilter = {
    task: task == null ? null : (readPattern(task, field('task'), taskNamePattern, '[A-Za-z0-9._-]{1,128}', issues) ?? null),
    errorClass: errorClass == null ? null : ((readEnum(errorClass, field('error_class'), errorClasses, issues) as ErrorClass | undefined) ?? null),
    sinceMs: since == null ? null : (readTime(since, field('since'), issues) ?? null),
    untilMs: until == null ? null : (readTime(until, field('until'), issues) ?? null),
  };
  if (filter.sinceMs !== null && filter.untilMs !== null && filter.untilMs <= filter.sinceMs) issues.add(field('until'), 'must be after since');
  return filter;
}

/** A query parameter as text; empty counts as absent, and a number-like time stays a string for readTime. */
function queryGetter(query: URLSearchParams): (key: string) => unknown {
  return (key) => {
    const v = query.get(key);
    if (v === null || v === '') return null;
    return (key === 'since' || key === 'until') && /^\d{1,16}$/.test(v) ? Number(v) : v;
  };
}

export function parseDeadLetterQuery(query: URLSearchParams): { filter: DeadLetterFilter; limit: number; cursor: string | null } {
  const issues = new Issues();
  for (const name of new Set(query.keys())) {
    if (!([...filterKeys, 'limit', 'cursor'] as string[]).includes(name)) issues.add(name, 'unknown query parameter');
  }
  const filter = readFilter(queryGetter(query), '', issues);
  const limitText = query.get('limit');
  let limit: number = limits.listLimitDefault;
  if (limitText !== null && limitText !== '') {
    const n = /^\d{1,9}$/.test(limitText) ? Number(limitText) : NaN;
    if (!(n >= 1 && n <= limits.listLimitMax)) issues.add('limit', `must be an integer from 1 to ${limits.listLimitMax}`);
    else limit = n;
  }
  const cursorText = query.get('cursor');
  const cursor = cursorText === null || cursorText === '' ? null : cursorText;
  if (cursor !== null && cursor.length > httpLimits.listCursorLengthMax) issues.add('cursor', 'is too long');
  issues.throwIfAny();
  return { filter, limit, cursor };
}

/** `{"ids": [...]}` (1..replayJobsMax job ids) or `{"filter": {...}}`, and `dry_run`. */
export function parseReplayBody(body: unknown): DeadLetterReplay {
  const issues = new Issues();
  const o = readObject(body, 'body', issues) ?? {};
  onlyKeys(o, ['ids', 'filter', 'dry_run'], '', issues);
  const dryRun = o.dry_run == null ? false : (readBool(o.dry_run, 'dry_run', issues) ?? false);
  if ((o.ids === undefined) === (o.filter === undefined)) {
    issues.add('ids', 'give exactly one of ids or filter');
    issues.throwIfAny();
  }
  let req: DeadLetterReplay;
  if (o.ids !== undefined) {
    const ids: string[] = [];
    if (!Array.isArray(o.ids) || o.ids.length === 0 || o.ids.length > retentionLimits.replayJobsMax) {
      issues.add('ids', `must be an array of 1 to ${retentionLimits.replayJobsMax} job ids`);
    } else {
      o.ids.forEach((id, i) => {
        const ok = readPattern(id, `ids[${i}]`, jobIdPattern, '[A-Za-z0-9._:-]{1,128}', issues);
        if (ok !== undefined) ids.push(ok);
      });
    }
    req = { ids, dryRun };
  } else {
    const f = readObject(o.filter, 'filter', issues) ?? {};
    onlyKeys(f, filterKeys, 'filter', issues);
    req = { filter: readFilter((k) => f[k], 'filter', issues), dryRun };
  }
  issues.throwIfAny();
  return req;
}

export function deadLetterView(d: DeadLetter): Record<string, unknown> {
  return {
    job_id: d.jobId,
    task: d.task,
    error_class: d.errorClass,
    error: d.error,
    status_code: d.statusCode,
    attempts: d.attempts,
    scheduled_at: renderTimeOrNull(d.scheduledAtMs),
    failed_at: renderTime(d.failedAtMs),
  };
}

async function list({ query, deps }: RouteContext) {
  const q = parseDeadLetterQuery(query);
  const { deadLetters, nextCursor } = await deadLetterApi(deps).listDeadLetters(q.filter, { limit: q.limit, cursor: q.cursor });
  return jsonResponse(200, { dead_letters: deadLetters.map(deadLetterView), next_cursor: nextCursor });
}

async function groups({ query, deps }: RouteContext) {
  for (const name of new Set(query.keys())) throw new PunctualError('invalid_argument', `${name}: unknown query parameter`, [{ field: name, message: 'unknown query parameter' }]);
  const all = await deadLetterApi(deps).deadLetterGroups();
  const view = all.map((g) => ({ task: g.task, error_class: g.errorClass, count: g.count, last_failed_at: renderTime(g.lastFailedAtMs) }));
  return jsonResponse(200, { groups: view });
}

/** The JSON body, checked as routes.ts checks every body (this file is imported by it, so it does not import back). */
function jsonBody(req: ApiRequest): unknown {
  if (req.body.byteLength === 0) throw invalid('body', 'a JSON body is required');
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(req.body)) as unknown;
  } catch (err) {
    throw invalid('body', err instanceof SyntaxError ? `malformed JSON: ${err.message}` : 'must be UTF-8');
  }
  if (jsonDepthOver(value, jsonDepthMax)) throw invalid('body', `nested deeper than ${jsonDepthMax} levels of arrays and objects`);
  return value;
}

async function replay({ req, deps }: RouteContext) {
  const r = await deadLetterApi(deps).replayDeadLetters(parseReplayBody(jsonBody(req)));
  return jsonResponse(200, { matched: r.matched, replayed: r.replayed });
}

function route(method: string, path: string, handler: Route['handler'], scope: Route['scope']): Route {
  return { method, segments: path.slice(1).split('/'), scope, handler };
}

export const deadLetterRoutes: readonly Route[] = [
  route('GET', '/v1/dead-letters', list, 'read'),
  route('GET', '/v1/dead-letters:groups', groups, 'read'),
  route('POST', '/v1/dead-letters:replay', replay, 'write'),
];
