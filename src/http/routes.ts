/**
 * The route table of docs/api.md: each handler parses and validates (parse.ts, parse-job.ts), calls the
 * node (SchedulerApi) and renders the result (views.ts). Errors are thrown as PunctualError and mapped once, in
 * app.ts.
 */
import { PunctualError, invalid, toProblem, type Problem } from '../core/errors.js';
import { nodeIdPattern } from '../core/ids.js';
import { limits } from '../core/limits.js';
import type { CreateJobResult } from './scheduler-api.js';
import type { Scope } from './tokens.js';
import type { ApiRequest, ApiResponse, AppDeps } from './app.js';
import { jsonResponse } from './app.js';
import { parseCalendarBody, parseClockAdvance, parseJobId, parseTaskBody, parseTaskName } from './parse.js';
import {
  parseBatch,
  parseIdempotencyKey,
  parseJob,
  parseJobListQuery,
  parseNoQuery,
  parsePageQuery,
  parsePatch,
  parsePreview,
  parseTransfer,
  type BatchItem,
} from './parse-job.js';
import { renderTime, timeMsMax } from './time.js';
import { Issues, jsonDepthMax, jsonDepthOver, onlyKeys, readObject, readPattern, readString } from './validate.js';
import { calendarView, clusterView, executionView, jobView, taskView } from './views.js';

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
}

export interface Route {
  method: string;
  /** Path segments: literals or `:name` parameters. */
  segments: readonly string[];
  /** The token scope a call needs (when the node requires tokens at all; see app.ts for the unauthenticated routes). */
  scope: Scope;
  handler: (ctx: RouteContext) => Promise<ApiResponse>;
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

const noContent: ApiResponse = { status: 204, headers: {}, body: '' };

async function putTask({ req, params, deps }: RouteContext): Promise<ApiResponse> {
  const name = parseTaskName(params.name!);
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

/** GET /v1/due-profile?seconds=N: PENDING occurrences per second of the next N seconds (1..600, default 60). */
async function dueProfile({ query, deps }: RouteContext): Promise<ApiResponse> {
  const text = query.get('seconds');
  const seconds = text === null ? limits.dueProfileSecondsDefault : Number(text);
  if (!/^\d{1,4}$/.test(text ?? '60') || !Number.isInteger(seconds) || seconds < 1 || seconds > limits.dueProfileSecondsMax) {
    throw invalid('seconds', `an integer from 1 to ${limits.dueProfileSecondsMax}`);
  }
  if (deps.api.dueProfile === undefined) throw new PunctualError('internal', 'this node keeps no due profile');
  const p = deps.api.dueProfile(seconds);
  return jsonResponse(200, { from: renderTime(p.fromMs), per_second: p.perSecond, drain_rate_per_s: p.drainRatePerS });
}

/**
 * `Location` of a job. encodeURIComponent leaves `.` alone, and the ids `.` and `..` (valid: [A-Za-z0-9._:-])
 * would be resolved away as dot segments by any client following the header, so those are percent-encoded.
 */
export function jobLocation(id: string): string {
  const segment = id === '.' || id === '..' ? id.replace(/\./g, '%2E') : encodeURIComponent(id);
  return `/v1/jobs/${segment}`;
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
  const issues = new Issues();
  const o = readObject(jsonBody(req), '', issues);
  if (o !== undefined) onlyKeys(o, ['id', 'peer_addr'], '', issues);
  const id = o === undefined ? undefined : readPattern(o.id, 'id', nodeIdPattern, '[a-z0-9-]{1,32}', issues);
  const peerAddr = o === undefined ? undefined : readString(o.peer_addr, 'peer_addr', 300, issues);
  if (!issues.ok) throw issues.toError();
  return jsonResponse(201, membershipView(await membershipApi(deps).addNode(id!, peerAddr!)));
}

/** DELETE /v1/cluster/nodes/{id}: answers once the node is out of every shard (200, the membership after). */
async function removeNode({ params, deps }: RouteContext): Promise<ApiResponse> {
  const id = params.id!;
  if (!nodeIdPattern.test(id)) throw invalid('id', 'a node id must match [a-z0-9-]{1,32}');
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

/** Exclusion calendars: read scope to read, admin to write (they change when every job naming them runs). */
function calendarRoutes(): Route[] {
  return [
    route('GET', '/v1/calendars', async ({ query, deps }) => {
      parseNoQuery(query);
      return jsonResponse(200, { calendars: (await deps.api.listCalendars()).map(calendarView) });
    }),
    route('PUT', '/v1/calendars/:name', async ({ req, params, deps }) => {
      const name = parseTaskName(params.name!);
      const { calendar, created } = await deps.api.putCalendar(name, parseCalendarBody(jsonBody(req), name));
      return jsonResponse(created ? 201 : 200, calendarView(calendar));
    }, 'admin'),
    route('GET', '/v1/calendars/:name', async ({ params, deps }) =>
      jsonResponse(200, calendarView(await deps.api.getCalendar(parseTaskName(params.name!))))),
    route('DELETE', '/v1/calendars/:name', async ({ params, deps }) => {
      await deps.api.deleteCalendar(parseTaskName(params.name!));
      return noContent;
    }, 'admin'),
  ];
}

export const routes: readonly Route[] = [
  route('GET', '/v1/tasks', async ({ query, deps }) => {
    parseNoQuery(query); // a list route: `?limit=` or a typo must not be silently ignored (there is no paging)
    return jsonResponse(200, { tasks: (await deps.api.listTasks()).map(taskView) });
  }),
  route('PUT', '/v1/tasks/:name', putTask, 'admin'),
  route('GET', '/v1/tasks/:name', async ({ params, deps }) => jsonResponse(200, taskView(await deps.api.getTask(parseTaskName(params.name!))))),
  route('DELETE', '/v1/tasks/:name', async ({ params, deps }) => {
    await deps.api.deleteTask(parseTaskName(params.name!));
    return noContent;
  }, 'admin'),
  ...calendarRoutes(),
  route('POST', '/v1/jobs', createJob),
  route('GET', '/v1/jobs', listJobs),
  route('POST', '/v1/jobs:batch', createBatch),
  route('GET', '/v1/jobs/:id', async ({ params, deps }) => jsonResponse(200, jobView(await deps.api.getJob(parseJobId(params.id!))))),
  route('PATCH', '/v1/jobs/:id', patchJob),
  route('DELETE', '/v1/jobs/:id', jobAction('cancelJob')),
  route('POST', '/v1/jobs/:id/cancel', jobAction('cancelJob')),
  route('POST', '/v1/jobs/:id/pause', jobAction('pauseJob')),
  route('POST', '/v1/jobs/:id/resume', jobAction('resumeJob')),
  route('POST', '/v1/jobs/:id/run', runJob),
  route('GET', '/v1/jobs/:id/executions', listExecutions),
  route('POST', '/v1/schedules:preview', preview),
  route('GET', '/v1/cluster', cluster),
  route('POST', '/v1/cluster/nodes', addNode, 'admin'),
  route('DELETE', '/v1/cluster/nodes/:id', removeNode, 'admin'),
  route('POST', '/v1/cluster/shards/:shard/transfer-leader', transferLeader, 'admin'),
  route('GET', '/v1/clock', getClock),
  route('POST', '/v1/clock:advance', advanceClock, 'admin'),
  route('GET', '/healthz', async ({ deps }) => jsonResponse(200, { status: 'ok', node_id: deps.api.nodeId })),
  route('GET', '/readyz', readyz),
  route('GET', '/metrics', metrics),
  route('GET', '/v1/due-profile', dueProfile),
];
