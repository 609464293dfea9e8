/**
 * The route table of docs/api.md: each handler parses and validates (parse.ts, parse-job.ts), calls the
 * node (SchedulerApi) and renders the result (views.ts). Errors are thrown as PunctualError and mapped once, in
 * app.ts.
 */
import { PunctualError, invalid, toProblem, type Problem } from '../core/errors.js';
import { limits } from '../core/limits.js';
import type { CreateJobResult } from './scheduler-api.js';
import type { Principal, Scope } from './tokens.js';
import { uiRoutes } from './ui.js';
import type { ApiRequest, ApiResponse, AppDeps } from './app.js';
import { jsonResponse } from './app.js';
import {
  calendarFields,
  taskBodySchema,
  clockAdvanceFields,
  jobIdSchema,
  parseCalendarBody,
  parseClockAdvance,
  parseJobId,
  parseTaskBody,
  parseNewName,
  parseTaskName,
  taskNameSchema,
} from './parse.js';
import {
  addNodeFields,
  batchFields,
  idempotencyKeySchema,
  jobListQuery,
  jobSchema,
  noQuery,
  nodeIdSchema,
  pageQuery,
  parseAddNode,
  parseBatch,
  parseIdempotencyKey,
  parseJob,
  parseJobListQuery,
  parseNoQuery,
  parseNodeId,
  parsePageQuery,
  parsePatch,
  parsePreview,
  parseTransfer,
  patchFields,
  previewFields,
  shardSchema,
  transferFields,
  type BatchItem,
} from './parse-job.js';
import {
  batchAnswer,
  calendarAnswer,
  calendarListAnswer,
  clockAdvanceAnswer,
  clockAnswer,
  clusterAnswer,
  executionListAnswer,
  healthAnswer,
  jobAnswer,
  jobListAnswer,
  membershipAnswer,
  previewAnswer,
  readyAnswer,
  taskAnswer,
  taskListAnswer,
  transferAnswer,
} from './answers.js';
import { docsResponse, openApiResponse } from './openapi.js';
import { intParam, query, type JsonSchema, type QuerySchema, type Schema } from './schema.js';
import { renderTime, timeMsMax } from './time.js';
import { Issues, jsonDepthMax, jsonDepthOver } from './validate.js';
import { calendarView, clusterView, executionView, jobView, taskView } from './views.js';
import { adminRoutes } from './admin-routes.js';
import { deadLetterRoutes } from './dead-letter-routes.js';

/** What add-node / remove-node answer (src/node/membership.ts MembershipResult). */
export interface MembershipOutcome {
  id: string;
  peerAddr: string;
  shards: Array<{ id: number; voters: string[]; learners: string[] }>;
}

/** Optional node capability behind POST /v1/cluster/nodes and DELETE /v1/cluster/nodes/{id}. */
export interface MembershipApi {
  addNode(id: string, peerAddr: string): Promise<MembershipOutcome>;
  removeNode(id: string): Promise<MembershipOutcome>;
}

export interface RouteContext {
  req: ApiRequest;
  params: Record<string, string>;
  query: URLSearchParams;
  deps: AppDeps;
  /** The token that made the request (null without a valid one, on a route that needs none). */
  principal: Principal | null;
}

export interface Route {
  method: string;
  /** Path segments: literals or `:name` parameters. */
  segments: readonly string[];
  /** The token scope a call needs (when the node requires tokens at all; see app.ts for the unauthenticated routes). */
  scope: Scope;
  /** Answered without a token even when the node requires tokens (the API's description: nothing of the deployment). */
  open?: boolean;
  /** What the OpenAPI document says of this route; a route without it fails test/openapi (add it with op()). */
  doc?: Operation;
  /**
   * Another spelling of the documented route at this path (`/ui/` of `/ui`): the same answers, listed once in the
   * document under that path. OpenAPI tools read a trailing-slash key as a path of its own, so listing both would
   * describe one page as two operations.
   */
  aliasOf?: string;
  handler: (ctx: RouteContext) => Promise<ApiResponse>;
}

/** One answer of a route: JSON (its schema) unless contentType says otherwise. */
export interface Answer {
  description: string;
  schema?: JsonSchema;
  contentType?: string;
  headers?: Record<string, string>;
}

/**
 * A route's description for the OpenAPI document (openapi.ts). Every schema here is the one its handler's parser
 * reads with (parse.ts, parse-job.ts), so the document follows the code.
 */
export interface Operation {
  summary: string;
  description?: string;
  /** The group it is listed under. */
  tag: string;
  /** Path parameters, by their name in the path (`:name`). */
  params?: Record<string, Schema<string>>;
  /** The query parameters (a list route refuses others by name); none: the query string is ignored. */
  query?: QuerySchema<any>;
  /** Request headers read by the route, by name. */
  headers?: Record<string, { schema: Schema<string>; description: string }>;
  /** The JSON body and whether an empty body is refused; none: any body is ignored. */
  body?: { schema: JsonSchema; required: boolean };
  /** Success answers by status. */
  answers: Record<number, Answer>;
  /** Problem statuses particular to this route (400, 401, 403 and other answers every route may give are added). */
  errors?: number[];
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The request body as JSON; an empty body is `undefined` when optional, an error otherwise. */
function jsonBody(req: ApiRequest, optional = false): unknown {
  if (req.body.byteLength === 0) {
    if (optional) return undefined;
    throw invalid('body', 'a JSON body is required');
  }
  let text: string;
  try {
    text = utf8.decode(req.body);
  } catch {
    throw invalid('body', 'must be UTF-8');
  }
  let value: unknown;
  try {
    value = JSON.parse(text) as unknown;
  } catch (err) {
    throw invalid('body', `malformed JSON: ${(err as Error).message}`);
  }
  if (jsonDepthOver(value, jsonDepthMax)) throw invalid('body', `nested deeper than ${jsonDepthMax} levels of arrays and objects`);
  return value;
}

/** Reads need `read`, job writes `write`; `admin` is given explicitly (tasks hold secrets; cluster operations). */
function route(method: string, path: string, handler: Route['handler'], scope?: Scope): Route {
  return { method, segments: path.slice(1).split('/'), scope: scope ?? (method === 'GET' ? 'read' : 'write'), handler };
}

/** A route with its description: how every route is added (src/http/README.md, "Adding a route"). */
function op(method: string, path: string, doc: Operation, handler: Route['handler'], scope?: Scope): Route {
  return { ...route(method, path, handler, scope), doc };
}

const noContent: ApiResponse = { status: 204, headers: {}, body: '' };

async function putTask({ req, params, deps }: RouteContext): Promise<ApiResponse> {
  const name = parseNewName(params.name!);
  const spec = parseTaskBody(jsonBody(req), deps.callbackUrlCheck);
  const { task, created } = await deps.api.putTask(name, spec);
  return jsonResponse(created ? 201 : 200, taskView(task));
}

async function createJob({ req, deps }: RouteContext): Promise<ApiResponse> {
  const idempotencyKey = parseIdempotencyKey(req.headers['idempotency-key']);
  const spec = parseJob(jsonBody(req), '', { nowMs: deps.api.nowMs(), idempotencyKey, batchIndex: null, urlCheck: deps.callbackUrlCheck });
  const [result] = await deps.api.createJobs([spec]);
  if (result === undefined) throw new PunctualError('internal', 'createJobs returned no result');
  if (!result.ok) throw result.error;
  const headers = { location: jobLocation(result.job.id), ...hotInstantHeader(deps, result.created ? [result.job.nextFireAtMs] : []) };
  return jsonResponse(result.created ? 201 : 200, jobView(result.job), headers);
}

/**
 * The admission report (docs/api.md, "Hot instants"): when the submission made an instant so crowded that the
 * node's drain rate spreads its delivery past limits.hotInstantSpreadReportMs, the answer says so.
 */
function hotInstantHeader(deps: AppDeps, dueAtMs: Array<number | null>): Record<string, string> {
  const instants = dueAtMs.filter((ms): ms is number => ms !== null);
  const r = instants.length === 0 ? null : (deps.api.hotInstant?.(instants) ?? null);
  if (r === null) return {};
  const value = `at="${renderTime(r.atMs)}", due=${r.due}, spread_ms=${r.spreadMs}, drain_rate_per_s=${r.drainRatePerS}, measured=${r.measured}`;
  return { 'punctual-hot-instant': value };
}

const dueProfileQuery = query({
  seconds: intParam(1, limits.dueProfileSecondsMax, limits.dueProfileSecondsDefault, 'How many seconds from now.'),
});

/** GET /v1/due-profile?seconds=N: PENDING occurrences per second of the next N seconds (1..600, default 60). */
async function dueProfile({ query: q, deps }: RouteContext): Promise<ApiResponse> {
  const issues = new Issues();
  const seconds = dueProfileQuery.read(q, issues).seconds ?? limits.dueProfileSecondsDefault;
  issues.throwIfAny();
  if (deps.api.dueProfile === undefined) throw new PunctualError('unavailable', 'this node keeps no due profile');
  const p = deps.api.dueProfile(seconds);
  return jsonResponse(200, { from: renderTime(p.fromMs), per_second: p.perSecond, drain_rate_per_s: p.drainRatePerS });
}

/** `Location` of a new job (never `.` or `..`: newJobIdSchema refuses them, URL parsing would drop them even encoded). */
export function jobLocation(id: string): string {
  return `/v1/jobs/${encodeURIComponent(id)}`;
}

/** A node-side error of batch item i, its field paths rooted at `jobs[i]` like the item's validation errors. */
function itemProblem(err: PunctualError, index: number): Problem {
  const problem = toProblem(err);
  if (problem.errors !== undefined) {
    problem.errors = problem.errors.map((e) => ({ field: e.field.startsWith('jobs[') ? e.field : `jobs[${index}].${e.field}`, message: e.message }));
  }
  return problem;
}

/** Valid items go to the node in one call; results are merged back in input order. */
async function createBatch({ req, deps }: RouteContext): Promise<ApiResponse> {
  const idempotencyKey = parseIdempotencyKey(req.headers['idempotency-key']);
  const items: BatchItem[] = parseBatch(jsonBody(req), deps.api.nowMs(), idempotencyKey, deps.callbackUrlCheck);
  const specs = items.flatMap((item) => (item.ok ? [item.spec] : []));
  const created: CreateJobResult[] = specs.length === 0 ? [] : await deps.api.createJobs(specs);
  if (created.length !== specs.length) throw new PunctualError('internal', 'createJobs returned a wrong number of results');
  let next = 0;
  const results = items.map((item, i) => {
    if (!item.ok) return { id: item.id, status: item.error.status, error: toProblem(item.error) };
    const r = created[next++]!;
    if (r.ok) return { id: r.job.id, status: r.created ? 201 : 200 };
    return { id: r.id ?? item.spec.id, status: r.error.status, error: itemProblem(r.error, i) };
  });
  const dues = created.map((r) => (r.ok && r.created ? r.job.nextFireAtMs : null));
  return jsonResponse(200, { results }, hotInstantHeader(deps, dues));
}

type JobAction = 'cancelJob' | 'pauseJob' | 'resumeJob' | 'runJob';

function jobAction(action: JobAction): Route['handler'] {
  return async ({ params, deps }) => jsonResponse(200, jobView(await deps.api[action](parseJobId(params.id!))));
}

/** POST /v1/jobs/{id}/run: an Idempotency-Key names the run, so a repeated request runs the job once. */
async function runJob({ req, params, deps }: RouteContext): Promise<ApiResponse> {
  const id = parseJobId(params.id!);
  const runKey = parseIdempotencyKey(req.headers['idempotency-key']);
  return jsonResponse(200, jobView(await deps.api.runJob(id, runKey)));
}

async function patchJob({ req, params, deps }: RouteContext): Promise<ApiResponse> {
  const id = parseJobId(params.id!);
  const patch = parsePatch(jsonBody(req), deps.api.nowMs());
  return jsonResponse(200, jobView(await deps.api.patchJob(id, patch)));
}

async function listJobs({ query, deps }: RouteContext): Promise<ApiResponse> {
  const { jobs, nextCursor } = await deps.api.listJobs(parseJobListQuery(query));
  return jsonResponse(200, { jobs: jobs.map(jobView), next_cursor: nextCursor });
}

async function listExecutions({ params, query, deps }: RouteContext): Promise<ApiResponse> {
  const id = parseJobId(params.id!);
  const { executions, nextCursor } = await deps.api.listExecutions(id, parsePageQuery(query));
  return jsonResponse(200, { executions: executions.map(executionView), next_cursor: nextCursor });
}

async function preview({ req, deps }: RouteContext): Promise<ApiResponse> {
  const p = parsePreview(jsonBody(req, true), deps.api.nowMs());
  // Times after 9999-12-31 cannot be written as RFC 3339 (and cannot be given as input): the preview ends there.
  const occurrences = deps.api.previewSchedule(p.schedule, p.fromMs, p.count).filter((ms) => ms <= timeMsMax);
  return jsonResponse(200, { occurrences: occurrences.map(renderTime) });
}

/** Accepted (202): the node starts the transfer; GET /v1/cluster shows the new leader once it is elected. */
async function transferLeader({ req, params, deps }: RouteContext): Promise<ApiResponse> {
  const { shard, to } = parseTransfer(params.shard!, jsonBody(req));
  if (typeof deps.api.transferLeader !== 'function') {
    throw new PunctualError('unavailable', 'leadership transfer is not supported by this node');
  }
  await deps.api.transferLeader(shard, to);
  return jsonResponse(202, { shard, to });
}

function membershipApi(deps: AppDeps): MembershipApi {
  const api = deps.api as Partial<MembershipApi>;
  if (typeof api.addNode !== 'function' || typeof api.removeNode !== 'function') {
    throw new PunctualError('unavailable', 'membership changes are not supported by this node');
  }
  return api as MembershipApi;
}

function membershipView(m: MembershipOutcome): Record<string, unknown> {
  return { id: m.id, peer_addr: m.peerAddr, shards: m.shards.map((s) => ({ id: s.id, voters: s.voters, learners: s.learners })) };
}

/** POST /v1/cluster/nodes {"id","peer_addr"}: answers once the node is a voter of every shard (201). */
async function addNode({ req, deps }: RouteContext): Promise<ApiResponse> {
  const { id, peerAddr } = parseAddNode(jsonBody(req));
  return jsonResponse(201, membershipView(await membershipApi(deps).addNode(id, peerAddr)));
}

/** DELETE /v1/cluster/nodes/{id}: answers once the node is out of every shard (200, the membership after). */
async function removeNode({ params, deps }: RouteContext): Promise<ApiResponse> {
  const id = parseNodeId(params.id!);
  return jsonResponse(200, membershipView(await membershipApi(deps).removeNode(id)));
}

/** GET /v1/cluster: docs/api.md's view, with `learners` per shard (members that do not vote yet). */
async function cluster({ deps }: RouteContext): Promise<ApiResponse> {
  const c = await deps.api.cluster();
  const view = clusterView(c);
  const shards = view.shards as Array<Record<string, unknown>>;
  c.shards.forEach((s, i) => {
    const learners = (s as { learners?: unknown }).learners;
    shards[i]!.learners = Array.isArray(learners) ? [...(learners as string[])] : [];
  });
  return jsonResponse(200, view);
}

// --- the clock (docs/api.md "The clock"; `serve --clock manual`) -------------------------------------------

/** GET /v1/clock: the scheduler's clock on this node, `system` or `manual`. */
async function getClock({ query, deps }: RouteContext): Promise<ApiResponse> {
  parseNoQuery(query);
  const c = deps.api.clockView?.() ?? { mode: 'system' as const, nowMs: deps.api.nowMs() };
  return jsonResponse(200, { mode: c.mode, now: renderTime(c.nowMs) });
}

/** POST /v1/clock:advance: answers once everything due up to the new time fired and its outcomes applied. */
async function advanceClock({ req, deps }: RouteContext): Promise<ApiResponse> {
  const advance = parseClockAdvance(jsonBody(req));
  if (typeof deps.api.advanceClock !== 'function') {
    throw new PunctualError('conflict', 'this node runs on the system clock: only a node started with --clock manual can be advanced');
  }
  const r = await deps.api.advanceClock(advance);
  return jsonResponse(200, { now: renderTime(r.nowMs), fired: r.fired, complete: r.complete });
}

async function readyz({ deps }: RouteContext): Promise<ApiResponse> {
  const r = deps.api.readiness();
  if (r.ready) return jsonResponse(200, { ready: true });
  throw new PunctualError('unavailable', `not ready: ${r.reason ?? 'unknown reason'}`);
}

async function metrics({ deps }: RouteContext): Promise<ApiResponse> {
  const m = await deps.metrics();
  return { status: 200, headers: { 'content-type': m.contentType }, body: m.body };
}

// --- the route table: the router (app.ts) and the OpenAPI document (openapi.ts) both read it -----------------

const json = (description: string, schema: JsonSchema, headers?: Record<string, string>): Answer => ({ description, schema, ...(headers === undefined ? {} : { headers }) });
const taskName = { name: taskNameSchema };
const jobId = { id: jobIdSchema };
const theJob = { 200: json('The job.', jobAnswer) };
/** What a write to a job may answer besides 400 (docs/api.md, Error codes). */
const writeErrors = [409, 429, 503, 504, 507];
const idempotencyKey = {
  'Idempotency-Key': { schema: idempotencyKeySchema, description: 'Names the request: a repeat with the same key lands on the same job (or run).' },
};

/** Exclusion calendars: read scope to read, admin to write (they change when every job naming them runs). */
function calendarRoutes(): Route[] {
  const tag = 'Calendars';
  return [
    op('GET', '/v1/calendars', { tag, summary: 'List every calendar, in name order', description: 'Every exclusion calendar this node holds (every shard holds a copy), in name order. There is no paging, so the route takes no query parameter: any given is a 400 naming it. Needs the read scope.', query: noQuery, answers: { 200: json('Every calendar.', calendarListAnswer) } }, async ({ query, deps }) => {
      parseNoQuery(query);
      return jsonResponse(200, { calendars: (await deps.api.listCalendars()).map(calendarView) });
    }),
    op(
      'PUT',
      '/v1/calendars/:name',
      {
        tag,
        summary: 'Create or replace a calendar',
        description: 'Creates the calendar under this name (201) or replaces it whole (200). Its dates and ranges are local dates in its time zone; a recurring job naming it in schedule.exclude does not run on them from its next computed occurrence on. At most 1000 dates and ranges in all. Needs the admin scope.',
        params: taskName,
        body: { schema: calendarFields.json, required: true },
        answers: { 200: json('Replaced.', calendarAnswer), 201: json('Created.', calendarAnswer) },
      },
      async ({ req, params, deps }) => {
        const name = parseNewName(params.name!);
        const { calendar, created } = await deps.api.putCalendar(name, parseCalendarBody(jsonBody(req), name));
        return jsonResponse(created ? 201 : 200, calendarView(calendar));
      },
      'admin',
    ),
    op('GET', '/v1/calendars/:name', { tag, summary: 'Read a calendar', description: 'The calendar with its dates sorted, each once. 404 when no calendar has this name. Needs the read scope.', params: taskName, answers: { 200: json('The calendar.', calendarAnswer) }, errors: [404] }, async ({ params, deps }) =>
      jsonResponse(200, calendarView(await deps.api.getCalendar(parseTaskName(params.name!))))),
    op(
      'DELETE',
      '/v1/calendars/:name',
      { tag, summary: 'Delete a calendar', description: 'Deletes the calendar (204; 404 when absent). Allowed while jobs name it: they keep the name in schedule.exclude, and it excludes nothing until a calendar of that name is put back. Needs the admin scope.', params: taskName, answers: { 204: { description: 'Deleted.' } }, errors: [404] },
      async ({ params, deps }) => {
        await deps.api.deleteCalendar(parseTaskName(params.name!));
        return noContent;
      },
      'admin',
    ),
  ];
}

function taskRoutes(): Route[] {
  const tag = 'Tasks';
  return [
    op('GET', '/v1/tasks', { tag, summary: 'List every task, in name order', description: 'Every task, in name order, with every default filled in; signing secrets are never echoed (a set secret reads "***"). There is no paging, so the route takes no query parameter. Needs the read scope.', query: noQuery, answers: { 200: json('Every task (secrets as "***").', taskListAnswer) } }, async ({ query, deps }) => {
      parseNoQuery(query); // a list route: `?limit=` or a typo must not be silently ignored (there is no paging)
      return jsonResponse(200, { tasks: (await deps.api.listTasks()).map(taskView) });
    }),
    op(
      'PUT',
      '/v1/tasks/:name',
      {
        tag,
        summary: 'Create or replace a task',
        description: 'Creates the task (201) or replaces it whole (200): where and how its jobs\' callbacks are sent (URL, method, headers, timeout, retries, signing secrets, max_concurrency, retention). PUT replaces every field: give the signing secrets again or they are dropped ("***" is refused, so a GET-edit-PUT cannot write the placeholder). A callback URL the node\'s callback policy refuses is a 400 on url. Needs the admin scope.',
        params: taskName,
        body: { schema: taskBodySchema.json, required: true },
        answers: { 200: json('Replaced.', taskAnswer), 201: json('Created.', taskAnswer) },
      },
      putTask,
      'admin',
    ),
    op('GET', '/v1/tasks/:name', { tag, summary: 'Read a task', description: 'The task with every default filled in; a set signing secret reads "***". 404 when no task has this name. Needs the read scope.', params: taskName, answers: { 200: json('The task (secrets as "***").', taskAnswer) }, errors: [404] }, async ({ params, deps }) =>
      jsonResponse(200, taskView(await deps.api.getTask(parseTaskName(params.name!))))),
    op(
      'DELETE',
      '/v1/tasks/:name',
      { tag, summary: 'Delete a task', description: 'Deletes the task (204). 404 when absent; 409 while live jobs use it (cancel them or let them finish first). Needs the admin scope.', params: taskName, answers: { 204: { description: 'Deleted.' } }, errors: [404, 409] },
      async ({ params, deps }) => {
        await deps.api.deleteTask(parseTaskName(params.name!));
        return noContent;
      },
      'admin',
    ),
  ];
}

/** Creating and listing jobs, and previews. */
function jobRoutes(): Route[] {
  const tag = 'Jobs';
  return [
    op(
      'POST',
      '/v1/jobs',
      {
        tag,
        summary: 'Create a job',
        description: 'Creates a one-off or recurring job that calls a task (or an inline callback) on its schedule: 201 with the job and its Location. Idempotent: the same id, or the same Idempotency-Key without an id, with the same body answers 200 with the existing job; with a different body 409. Without either the id is a random UUID. A crowded due instant adds a Punctual-Hot-Instant header (information only). 429 and 503 carry Retry-After and a reason saying whether a repeat is safe. Needs the write scope.',
        headers: idempotencyKey,
        body: { schema: jobSchema.json, required: true },
        answers: {
          201: json('Created.', jobAnswer, { Location: '/v1/jobs/{id}' }),
          200: json('The existing job: the id (or Idempotency-Key) repeated with the same body.', jobAnswer),
        },
        errors: [404, ...writeErrors],
      },
      createJob,
    ),
    op(
      'GET',
      '/v1/jobs',
      { tag, summary: 'List jobs, in id order', description: 'A page of jobs in id (byte) order, from this node\'s replicas. Filters combine with AND: state, task, up to 4 metadata.KEY=VALUE pairs (top-level scalar metadata, indexed), and a next_fire_at range. limit 1..1000 (default 100); follow the opaque next_cursor until it is null. An unknown query parameter is a 400 naming it. Needs the read scope.', query: jobListQuery, answers: { 200: json('A page of jobs; follow next_cursor until it is null.', jobListAnswer) } },
      listJobs,
    ),
    op(
      'POST',
      '/v1/jobs:batch',
      {
        tag,
        summary: 'Create many jobs',
        description: 'Creates up to 10000 jobs in one request (body at most 64 MiB). Always 200 when the batch was read: each item is answered on its own, in input order, with the status and problem it would have had alone, so one bad item never fails the others. With an Idempotency-Key, item i without an id uses the key KEY#i, so a retried batch is idempotent item by item. Needs the write scope.',
        headers: idempotencyKey,
        body: { schema: batchFields.json, required: true },
        answers: { 200: json('One result per item.', batchAnswer) },
        errors: [413],
      },
      createBatch,
    ),
    op(
      'POST',
      '/v1/schedules:preview',
      {
        tag,
        summary: 'Preview the next fire times of a schedule',
        description: 'The next count (default 10, at most 1000) fire times at or after from (default now) that a job with this schedule would have, with its exclusions and DST policy applied; with id, the times of that job under spread_ms. Creates nothing. A cron that never matches, or a preview that runs out of its bounded search, is a 400 on schedule.cron. Needs the write scope (a POST, like the job writes it prepares).',
        body: { schema: previewFields.json, required: false },
        answers: { 200: json('The next occurrences at or after from.', previewAnswer) },
      },
      preview,
    ),
  ];
}

/** A job's routes: read, change, the actions, its executions. */
function oneJobRoutes(): Route[] {
  const tag = 'Jobs';
  const action = (path: string, summary: string, handler: Route['handler'], extra: Partial<Operation> = {}): Route =>
    op('POST', path, { tag, summary, params: jobId, answers: theJob, errors: [404, ...writeErrors], ...extra }, handler);
  return [
    op('GET', '/v1/jobs/:id', { tag, summary: 'Read a job', description: 'The job: its state (PENDING, QUEUED, RUNNING, SUCCEEDED, FAILED, PAUSED, CANCELLED), schedule, next_fire_at and last execution. 404 when no job has this id (or retention deleted it). Needs the read scope.', params: jobId, answers: theJob, errors: [404] }, async ({ params, deps }) =>
      jsonResponse(200, jobView(await deps.api.getJob(parseJobId(params.id!))))),
    op(
      'PATCH',
      '/v1/jobs/:id',
      { tag, summary: 'Change a job', description: 'Changes any of schedule, payload (or payload_base64 or payload_ref), metadata (null clears) and misfire_threshold_ms, and reschedules the job atomically from the moment of the patch, skipping any occurrence that already fired (a patch made as an occurrence fires does not run it twice). An empty object changes only updated_at. Needs the write scope.', params: jobId, body: { schema: patchFields.json, required: true }, answers: theJob, errors: [404, ...writeErrors] },
      patchJob,
    ),
    op('DELETE', '/v1/jobs/:id', { tag, summary: 'Cancel a job (as POST .../cancel)', description: 'The same as POST /v1/jobs/{id}/cancel: 200 with the job, now CANCELLED (not 204: the job stays readable). Once the cancel is acknowledged the job never fires again; cancelling a cancelled job is fine, a finished job is a 409. Needs the write scope.', params: jobId, answers: theJob, errors: [404, ...writeErrors] }, jobAction('cancelJob')),
    action('/v1/jobs/:id/cancel', 'Cancel a job', jobAction('cancelJob'), { description: 'Answers the job, now CANCELLED. Once acknowledged, the job never fires again (an attempt already in flight may still arrive). Cancelling a cancelled job is fine; a finished job is a 409. The body is ignored. Needs the write scope.' }),
    action('/v1/jobs/:id/pause', 'Pause a job', jobAction('pauseJob'), { description: 'Answers the job, now PAUSED: it fires nothing until resumed. Pausing a paused job is fine; a one-off job whose callback is in flight, or a finished job, is a 409 (a recurring job whose run is in flight can pause: that run finishes). The body is ignored. Needs the write scope.' }),
    action('/v1/jobs/:id/resume', 'Resume a job', jobAction('resumeJob'), { description: 'Answers the job, live again; occurrences missed while paused follow its misfire policy. Resuming a live job is fine; a finished or cancelled job is a 409. The body is ignored. Needs the write scope.' }),
    action('/v1/jobs/:id/run', 'Run a job now, besides its schedule', runJob, {
      headers: idempotencyKey,
      description: 'Answers the job; one extra run now, as a new occurrence with its own deduplication key, besides the schedule. A FAILED job (a dead letter) runs again as a replay. With an Idempotency-Key a repeat answers the job without running it again (the job remembers its latest 16 run keys); without one every request is a new run. 429 wheel_full while the leader\'s timer wheel is full. Needs the write scope.',
    }),
    op(
      'GET',
      '/v1/jobs/:id/executions',
      { tag, summary: 'List a job\'s executions, newest first', description: 'One execution per occurrence, newest scheduled_at first: its state, latest attempt, status code, error, lateness and every attempt (node, fencing token, times). The execution id is the callback\'s X-Deduplication-Key. limit 1..1000 (default 100); follow next_cursor until it is null. Needs the read scope.', params: jobId, query: pageQuery, answers: { 200: json('A page of executions.', executionListAnswer) }, errors: [404] },
      listExecutions,
    ),
  ];
}

function clusterRoutes(): Route[] {
  const tag = 'Cluster';
  return [
    op('GET', '/v1/cluster', { tag, summary: 'This node\'s view of the cluster', description: 'The nodes this node knows (peer and API addresses, reachable or not) and every shard with its leader, term, commit and applied indexes, members and learners, as this node sees them now. Needs the read scope.', answers: { 200: json('Nodes and shards.', clusterAnswer) } }, cluster),
    op(
      'POST',
      '/v1/cluster/nodes',
      {
        tag,
        summary: 'Add a node (started with serve --join)',
        description: 'Adds a node started with serve --join as a learner of every shard and promotes it to voter once it caught up; answers 201 when done. 504 when it did not catch up in time: it stays where it got and the same request resumes. 409 when it is already a voter everywhere, its address is another member\'s, another change runs, or a single node has no peer authentication. Needs the admin scope.',
        body: { schema: addNodeFields.json, required: true },
        answers: { 201: json('A voter of every shard.', membershipAnswer) },
        errors: [409, 503, 504],
      },
      addNode,
      'admin',
    ),
    op(
      'DELETE',
      '/v1/cluster/nodes/:id',
      { tag, summary: 'Remove a node', description: 'Removes the node from every shard\'s membership; a shard it leads is handed over first, drained as a planned transfer. Answers the membership after. 404 for a node that is no member; 409 when it is the only voter of a shard. Needs the admin scope.', params: { id: nodeIdSchema }, answers: { 200: json('The membership after.', membershipAnswer) }, errors: [404, 409, 503, 504] },
      removeNode,
      'admin',
    ),
    op(
      'POST',
      '/v1/cluster/shards/:shard/transfer-leader',
      {
        tag,
        summary: 'Move a shard\'s leadership',
        description: 'Asks the shard\'s leader to hand leadership to the node named in to. The leader drains the shard first (no new callback, the ones in flight recorded, at most about 1 s), then starts the transfer and answers 202; GET /v1/cluster shows the new leader once elected. 503 when a transfer is already under way or the node stopped leading during the drain. Needs the admin scope.',
        params: { shard: shardSchema },
        body: { schema: transferFields.json, required: true },
        answers: { 202: json('The transfer has started.', transferAnswer) },
        errors: [503],
      },
      transferLeader,
      'admin',
    ),
  ];
}

function clockRoutes(): Route[] {
  const tag = 'Clock';
  return [
    op('GET', '/v1/clock', { tag, summary: 'The scheduler\'s clock', description: 'Whether the scheduler runs on the system clock or a manual one (serve --clock manual), and the time it uses for created_at, delay_ms, next_fire_at and the executions. Needs the read scope.', query: noQuery, answers: { 200: json('system or manual, and its time.', clockAnswer) } }, getClock),
    op(
      'POST',
      '/v1/clock:advance',
      {
        tag,
        summary: 'Advance a manual clock (serve --clock manual)',
        description: 'For integration tests: moves a manual clock by by_ms or to a time, deadline by deadline, firing every occurrence and retry due on the way at its own instant and in order, and answers once their outcomes are applied. Callbacks are real requests that take no virtual time. Stops after 10000 attempts or 30 s of real time with complete: false (repeat with the same to). 409 on a node on the system clock. Needs the admin scope.',
        body: { schema: clockAdvanceFields.json, required: true },
        answers: { 200: json('Once everything due up to the new time fired.', clockAdvanceAnswer) },
        errors: [409, 503],
      },
      advanceClock,
      'admin',
    ),
  ];
}

/** The API's description and its readable reference: open to anyone (docs/security.md, Tokens and scopes). */
function referenceRoutes(): Route[] {
  const tag = 'Operations';
  return [
    {
      ...op('GET', '/v1/openapi.json', { tag, summary: 'This OpenAPI 3.1 document', description: 'The OpenAPI 3.1 description of this API, generated from the schemas the node validates requests with; the same bytes from every node of a version. Open without a token: it describes the software, nothing of the deployment.', answers: { 200: json('The document.', { type: 'object' }) } }, async () => openApiResponse(routes)),
      open: true,
    },
    {
      ...op('GET', '/docs', { tag, summary: 'A readable API reference made from the document', description: 'One static HTML page rendered from this document: no script, nothing fetched from another origin (it works offline). Open without a token.', answers: { 200: { description: 'HTML, no scripts.', contentType: 'text/html' } } }, async () =>
        docsResponse(routes)),
      open: true,
    },
  ];
}

export const routes: readonly Route[] = [
  ...taskRoutes(),
  ...calendarRoutes(),
  ...jobRoutes(),
  ...oneJobRoutes(),
  ...deadLetterRoutes(op),
  ...clusterRoutes(),
  ...clockRoutes(),
  ...adminRoutes(op),
  op('GET', '/healthz', { tag: 'Operations', summary: 'The process answers', description: 'Liveness: 200 whenever the process serves HTTP, whatever the state of its shards. Open without a token; use /readyz to know whether it can take work.', answers: { 200: json('Alive.', healthAnswer) } }, async ({ deps }) =>
    jsonResponse(200, { status: 'ok', node_id: deps.api.nodeId })),
  op('GET', '/readyz', { tag: 'Operations', summary: 'Every shard has a leader and this node caught up', description: 'Readiness: 200 once every shard has a known leader and this node has caught up with the log; 503 (problem+json, detail names the reason) until then, and for a node removed from the cluster. Open without a token.', answers: { 200: json('Ready.', readyAnswer) }, errors: [503] }, readyz),
  op('GET', '/metrics', { tag: 'Operations', summary: 'Prometheus metrics', description: 'This node\'s metrics in the Prometheus text format: fire lateness, callbacks, Raft, storage, queues, the due profile of the next minute. Open unless the node runs with --metrics-auth, which asks for a token.', answers: { 200: { description: 'Prometheus text format.', contentType: 'text/plain' } } }, metrics),
  ...referenceRoutes(),
  ...uiRoutes(op), // the dashboard and its read-only routes (ui.ts)
  op('GET', '/v1/due-profile', {
    tag: 'Operations',
    summary: 'PENDING occurrences per second of the next N seconds, and the measured drain rate',
    description: 'How many PENDING occurrences fall due in each second of the next seconds (1..600, default 60), counted from this node\'s store (any node answers; a follower may lag by what it has not applied), and drain_rate_per_s: the rate this node started callbacks at while it had more due than it could send at once, null until measured. Needs the read scope.',
    query: dueProfileQuery,
    answers: { 200: json('From this node\'s replicas (every node holds every shard).', { type: 'object', required: ['from', 'per_second', 'drain_rate_per_s'], properties: { from: { type: 'string', format: 'date-time' }, per_second: { type: 'array', items: { type: 'integer' } }, drain_rate_per_s: { type: ['number', 'null'] } } }) },
  }, dueProfile),
];
