/**
 * The dead-letter routes of docs/api.md "Dead letters": GET /v1/dead-letters (filtered, paged, newest failure
 * first), GET /v1/dead-letters:groups (counts per task and error class) and POST /v1/dead-letters:replay (by ids or
 * by filter, with a dry run that only counts). Reads need `read`, the replay `write`. The node side is optional
 * (DeadLetterApi): a node without it answers 503.
 */
import { PunctualError, invalid } from '../core/errors.js';
import { limits, retentionLimits } from '../core/limits.js';
import { errorClasses, type ErrorClass } from '../scheduler/failure.js';
import type { DeadLetter, DeadLetterFilter, DeadLetterGroup } from '../scheduler/types.js';
import type { ApiRequest, AppDeps } from './app.js';
import { jsonResponse } from './app.js';
import { jobIdSchema, taskNameSchema, timeSchema } from './parse.js';
import { noQuery, pageQuery, parseNoQuery } from './parse-job.js';
import type { Operation, Route, RouteContext } from './routes.js';
import { annotate, arrayOf, boolean, enumOf, field, object, query, textParam, type QueryParam } from './schema.js';
import { renderTime, renderTimeOrNull } from './time.js';
import { Issues, jsonDepthMax, jsonDepthOver, readTime } from './validate.js';

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

const timeParam = (description: string): QueryParam<number> => ({
  json: { type: 'string', description: 'RFC 3339, or epoch milliseconds' },
  description,
  read: (text, name, issues) => readTime(/^\d{1,16}$/.test(text) ? Number(text) : text, name, issues),
});
const errorClassSchema = enumOf(errorClasses, 'Only this error class.');

/** GET /v1/dead-letters: the filter and the page (unknown parameters refused by name). */
export const deadLetterQuery = query({
  task: textParam(taskNameSchema, 'Only dead letters of this task.'),
  error_class: textParam(errorClassSchema, 'Only this error class.'),
  since: timeParam('Failed at or after this instant (inclusive).'),
  until: timeParam('Failed before this instant (exclusive).'),
  limit: pageQuery.params.limit,
  cursor: pageQuery.params.cursor,
});

const filterFields = object(
  {
    task: field(annotate(taskNameSchema, 'Only dead letters of this task.')),
    error_class: field(errorClassSchema),
    since: field(annotate(timeSchema, 'Failed at or after (inclusive).')),
    until: field(annotate(timeSchema, 'Failed before (exclusive): after since.')),
  },
  'Which dead letters: every field given must match.',
);

/** POST /v1/dead-letters:replay. */
export const replayFields = object(
  {
    ids: field(arrayOf(jobIdSchema, 1, retentionLimits.replayJobsMax, `Job ids of dead letters, 1 to ${retentionLimits.replayJobsMax}.`)),
    filter: field(filterFields),
    dry_run: field(boolean('Only count what would be replayed.'), { default: false }),
  },
  `Exactly one of ids or filter. By filter, the newest ${retentionLimits.replayJobsMax} matches are replayed per request (matched counts them all).`,
);

function checkRange(filter: DeadLetterFilter, field: string, issues: Issues): DeadLetterFilter {
  if (filter.sinceMs !== null && filter.untilMs !== null && filter.untilMs <= filter.sinceMs) issues.add(field, 'must be after since');
  return filter;
}

export function parseDeadLetterQuery(params: URLSearchParams): { filter: DeadLetterFilter; limit: number; cursor: string | null } {
  const issues = new Issues();
  const q = deadLetterQuery.read(params, issues);
  const filter = checkRange({ task: q.task, errorClass: q.error_class as ErrorClass | null, sinceMs: q.since, untilMs: q.until }, 'until', issues);
  issues.throwIfAny();
  return { filter, limit: q.limit ?? limits.listLimitDefault, cursor: q.cursor };
}

/** `{"ids": [...]}` (1..replayJobsMax job ids) or `{"filter": {...}}`, and `dry_run`. */
export function parseReplayBody(body: unknown): DeadLetterReplay {
  const issues = new Issues();
  const o = replayFields.read(body, '', issues);
  issues.throwIfAny();
  if (o === undefined || (o.ids === null) === (o.filter === null)) throw invalid('ids', 'give exactly one of ids or filter');
  const dryRun = o.dry_run ?? false;
  if (o.ids !== null) return { ids: o.ids, dryRun };
  const f = o.filter!;
  const filter = checkRange({ task: f.task, errorClass: f.error_class as ErrorClass | null, sinceMs: f.since, untilMs: f.until }, 'filter.until', issues);
  issues.throwIfAny();
  return { filter, dryRun };
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
  parseNoQuery(query);
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
  const request = parseReplayBody(jsonBody(req));
  const r = await deadLetterApi(deps).replayDeadLetters(request);
  return jsonResponse(200, { matched: r.matched, replayed: r.replayed });
}

type Op = (method: string, path: string, doc: Operation, handler: Route['handler'], scope?: Route['scope']) => Route;

const deadLetterAnswer = {
  type: 'object',
  required: ['job_id', 'task', 'error_class', 'error', 'status_code', 'attempts', 'scheduled_at', 'failed_at'],
  properties: {
    job_id: { type: 'string' },
    task: { type: ['string', 'null'] },
    error_class: { enum: [...errorClasses] },
    error: { type: ['string', 'null'] },
    status_code: { type: ['integer', 'null'] },
    attempts: { type: 'integer' },
    scheduled_at: { type: ['string', 'null'], format: 'date-time' },
    failed_at: { type: 'string', format: 'date-time' },
  },
};

export function deadLetterRoutes(op: Op): Route[] {
  const tag = 'Dead letters';
  return [
    op('GET', '/v1/dead-letters', {
      tag,
      summary: 'Jobs that exhausted their retries (FAILED), newest failure first',
      description: 'Dead letters: jobs whose last occurrence failed for good, newest failed_at first, with the failed attempt\'s error class, error, status code and attempt count. Filters: task, error_class, and a failure time range (since inclusive, until exclusive). limit 1..1000 (default 100); follow next_cursor until it is null. Needs the read scope.',
      query: deadLetterQuery,
      answers: { 200: { description: 'A page; follow next_cursor until it is null.', schema: { type: 'object', required: ['dead_letters', 'next_cursor'], properties: { dead_letters: { type: 'array', items: deadLetterAnswer }, next_cursor: { type: ['string', 'null'] } } } } },
      errors: [503],
    }, list, 'read'),
    op('GET', '/v1/dead-letters:groups', {
      tag,
      summary: 'Dead letters counted per task and error class',
      description: 'Every dead letter counted per task and error class (http_3xx, http_4xx, http_5xx, timeout, connection, tls, target_refused, other) with the latest failure time, ordered by task then class; at most 1000 groups. Needs the read scope.',
      query: noQuery,
      answers: { 200: { description: 'At most 1000 groups.', schema: { type: 'object', required: ['groups'], properties: { groups: { type: 'array', items: { type: 'object', properties: { task: { type: ['string', 'null'] }, error_class: { enum: [...errorClasses] }, count: { type: 'integer' }, last_failed_at: { type: 'string', format: 'date-time' } } } } } } } },
      errors: [503],
    }, groups, 'read'),
    op('POST', '/v1/dead-letters:replay', {
      tag,
      summary: 'Run dead letters once more (by ids or by filter; a dry run only counts)',
      description: 'Runs each matching dead letter once more now, as POST /v1/jobs/{id}/run does: by up to 1000 ids, or by a filter whose newest 1000 matches are replayed (repeat for the rest). Answers how many matched and how many were replayed; dry_run only counts. A job is replayed only if still FAILED when the command applies, so two replays at once run it once. Needs the write scope.',
      body: { schema: replayFields.json, required: true },
      answers: { 200: { description: 'How many matched and how many were replayed.', schema: { type: 'object', required: ['matched', 'replayed'], properties: { matched: { type: 'integer' }, replayed: { type: 'integer' } } } } },
      errors: [503],
    }, replay, 'write'),
  ];
}
