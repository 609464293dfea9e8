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
    op('GET', '/v1/calendars', { tag, summary: 'List every calendar, in name order', query: noQuery, answers: { 200: json('Every calendar.', calendarListAnswer) } }, async ({ query, deps }) => {
      parseNoQuery(query);
      return jsonResponse(200, { calendars: (await deps.api.listCalendars()).map(calendarView) });
    }),
    op(
      'PUT',
      '/v1/calendars/:name',
      {
        tag,
        summary: 'Create or replace a calendar',
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
    op('GET', '/v1/calendars/:name', { tag, summary: 'Read a calendar', params: taskName, answers: { 200: json('The calendar.', calendarAnswer) }, errors: [404] }, async ({ params, deps }) =>
      jsonResponse(200, calendarView(await deps.api.getCalendar(parseTaskName(params.name!))))),
    op(
      'DELETE',
      '/v1/calendars/:name',
      { tag, summary: 'Delete a calendar', description: 'Jobs naming it keep the name; it excludes nothing until put back.', params: taskName, answers: { 204: { description: 'Deleted.' } }, errors: [404] },
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
    op('GET', '/v1/tasks', { tag, summary: 'List every task, in name order', query: noQuery, answers: { 200: json('Every task (secrets as "***").', taskListAnswer) } }, async ({ query, deps }) => {
      parseNoQuery(query); // a list route: `?limit=` or a typo must not be silently ignored (there is no paging)
      return jsonResponse(200, { tasks: (await deps.api.listTasks()).map(taskView) });
    }),
    op(
      'PUT',
      '/v1/tasks/:name',
      {
        tag,
        summary: 'Create or replace a task',
        description: 'PUT replaces the whole task: give the signing secrets again or they are dropped.',
        params: taskName,
        body: { schema: taskBodySchema.json, required: true },
        answers: { 200: json('Replaced.', taskAnswer), 201: json('Created.', taskAnswer) },
      },
      putTask,
      'admin',
    ),
    op('GET', '/v1/tasks/:name', { tag, summary: 'Read a task', params: taskName, answers: { 200: json('The task (secrets as "***").', taskAnswer) }, errors: [404] }, async ({ params, deps }) =>
      jsonResponse(200, taskView(await deps.api.getTask(parseTaskName(params.name!))))),
    op(
      'DELETE',
      '/v1/tasks/:name',
      { tag, summary: 'Delete a task', params: taskName, answers: { 204: { description: 'Deleted.' } }, errors: [404, 409] },
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
      { tag, summary: 'List jobs, in id order', query: jobListQuery, answers: { 200: json('A page of jobs; follow next_cursor until it is null.', jobListAnswer) } },
      listJobs,
    ),
    op(
      'POST',
      '/v1/jobs:batch',
      {
        tag,
        summary: 'Create many jobs',
        description: 'Each item is answered on its own, in input order, with the status it would have had alone.',
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
    op('GET', '/v1/jobs/:id', { tag, summary: 'Read a job', params: jobId, answers: theJob, errors: [404] }, async ({ params, deps }) =>
      jsonResponse(200, jobView(await deps.api.getJob(parseJobId(params.id!))))),
    op(
      'PATCH',
      '/v1/jobs/:id',
      { tag, summary: 'Change a job', description: 'Rescheduled atomically.', params: jobId, body: { schema: patchFields.json, required: true }, answers: theJob, errors: [404, ...writeErrors] },
      patchJob,
    ),
    op('DELETE', '/v1/jobs/:id', { tag, summary: 'Cancel a job (as POST .../cancel)', params: jobId, answers: theJob, errors: [404, ...writeErrors] }, jobAction('cancelJob')),
    action('/v1/jobs/:id/cancel', 'Cancel a job', jobAction('cancelJob')),
    action('/v1/jobs/:id/pause', 'Pause a job', jobAction('pauseJob')),
    action('/v1/jobs/:id/resume', 'Resume a job', jobAction('resumeJob')),
    action('/v1/jobs/:id/run', 'Run a job now, besides its schedule', runJob, { headers: idempotencyKey }),
    op(
      'GET',
      '/v1/jobs/:id/executions',
      { tag, summary: 'List a job\'s executions, newest first', params: jobId, query: pageQuery, answers: { 200: json('A page of executions.', executionListAnswer) }, errors: [404] },
      listExecutions,
    ),
  ];
}

function clusterRoutes(): Route[] {
  const tag = 'Cluster';
  return [
    op('GET', '/v1/cluster', { tag, summary: 'This node\'s view of the cluster', answers: { 200: json('Nodes and shards.', clusterAnswer) } }, cluster),
    op(
      'POST',
      '/v1/cluster/nodes',
      {
        tag,
        summary: 'Add a node (started with serve --join)',
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
      { tag, summary: 'Remove a node', params: { id: nodeIdSchema }, answers: { 200: json('The membership after.', membershipAnswer) }, errors: [404, 409, 503, 504] },
      removeNode,
      'admin',
    ),
    op(
      'POST',
      '/v1/cluster/shards/:shard/transfer-leader',
      {
        tag,
        summary: 'Move a shard\'s leadership',
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
    op('GET', '/v1/clock', { tag, summary: 'The scheduler\'s clock', query: noQuery, answers: { 200: json('system or manual, and its time.', clockAnswer) } }, getClock),
    op(
      'POST',
      '/v1/clock:advance',
      {
        tag,
        summary: 'Advance a manual clock (serve --clock manual)',
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
      ...op('GET', '/v1/openapi.json', { tag, summary: 'This OpenAPI 3.1 document', answers: { 200: json('The document.', { type: 'object' }) } }, async () => openApiResponse(routes)),
      open: true,
    },
    {
      ...op('GET', '/docs', { tag, summary: 'A readable API reference made from the document', answers: { 200: { description: 'HTML, no scripts.', contentType: 'text/html' } } }, async () =>
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
  op('GET', '/healthz', { tag: 'Operations', summary: 'The process answers', answers: { 200: json('Alive.', healthAnswer) } }, async ({ deps }) =>
    jsonResponse(200, { status: 'ok', node_id: deps.api.nodeId })),
  op('GET', '/readyz', { tag: 'Operations', summary: 'Every shard has a leader and this node caught up', answers: { 200: json('Ready.', readyAnswer) }, errors: [503] }, readyz),
  op('GET', '/metrics', { tag: 'Operations', summary: 'Prometheus metrics', answers: { 200: { description: 'Prometheus text format.', contentType: 'text/plain' } } }, metrics),
  ...referenceRoutes(),
  ...uiRoutes(op), // the dashboard and its read-only routes (ui.ts)
  op('GET', '/v1/due-profile', {
    tag: 'Operations',
    summary: 'PENDING occurrences per second of the next N seconds, and the measured drain rate',
    query: dueProfileQuery,
    answers: { 200: json('From this node\'s replicas (every node holds every shard).', { type: 'object', required: ['from', 'per_second', 'drain_rate_per_s'], properties: { from: { type: 'string', format: 'date-time' }, per_second: { type: 'array', items: { type: 'integer' } }, drain_rate_per_s: { type: ['number', 'null'] } } }) },
  }, dueProfile),
];
