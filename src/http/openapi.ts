/**
 * The OpenAPI 3.1 document of the client API, generated from the route table (routes.ts): every route's path,
 * parameters, body and answers are the schemas its handler reads with (schema.ts), so a route cannot be added or
 * changed without the document following. Built once per process, the same bytes on every build (no clock, no
 * host names, keys in a fixed order). `/docs` is docs-page.ts's rendering of it.
 */
import { errorCatalog, type ErrorCode } from '../core/errors.js';
import { problemAnswer } from './answers.js';
import type { ApiResponse } from './app.js';
import { renderDocsPage } from './docs-page.js';
import type { Answer, Operation, Route } from './routes.js';
import { namedSchemas, type JsonSchema, type QueryParam } from './schema.js';

export type OpenApiDocument = JsonSchema;

/** `info.version`: the version of the /v1 contract this document describes (not of the program). */
export const apiVersion = '1';

const tagDescriptions: Record<string, string> = {
  Tasks: 'Where and how callbacks are sent: URL, method, headers, timeout, retries, signing secrets, concurrency.',
  Calendars: 'Named exclusion calendars: a recurring job naming one in schedule.exclude does not run on its dates.',
  Jobs: 'One-off and recurring jobs, their executions, and schedule previews.',
  Cluster: 'Nodes, shards and their leaders; membership changes and leadership transfer.',
  Clock: 'The scheduler\'s clock, and advancing a manual one (integration tests).',
  Operations: 'Health, readiness, metrics, and this description of the API.',
};

const problemType = 'application/problem+json';

/** `/v1/jobs/:id` -> `/v1/jobs/{id}`. */
export function openApiPath(route: Pick<Route, 'segments'>): string {
  return '/' + route.segments.map((s) => (s.startsWith(':') ? `{${s.slice(1)}}` : s)).join('/');
}

/** A stable, unique name: `post_v1_jobs_id_cancel`. */
function operationId(method: string, route: Route): string {
  return `${method.toLowerCase()}_${route.segments.join('_').replace(/[^A-Za-z0-9]+/g, '_').replace(/^_+|_+$/g, '')}`;
}

function codeOfStatus(status: number): ErrorCode | undefined {
  return (Object.keys(errorCatalog) as ErrorCode[]).find((code) => errorCatalog[code].status === status);
}

function problemResponse(status: number, note?: string): JsonSchema {
  const code = codeOfStatus(status);
  const description = code === undefined ? 'A problem.' : `${errorCatalog[code].title} (code ${code})${note === undefined ? '' : `: ${note}`}.`;
  return { description, content: { [problemType]: { schema: problemAnswer } } };
}

function answerResponse(a: Answer): JsonSchema {
  const headers = a.headers === undefined ? {} : {
    headers: Object.fromEntries(Object.entries(a.headers).map(([name, value]) => [name, { description: value, schema: { type: 'string' } }])),
  };
  if (a.contentType !== undefined) return { description: a.description, ...headers, content: { [a.contentType]: { schema: { type: 'string' } } } };
  if (a.schema === undefined) return { description: a.description, ...headers };
  return { description: a.description, ...headers, content: { 'application/json': { schema: a.schema } } };
}

function parameters(route: Route, doc: Operation): JsonSchema[] {
  const out: JsonSchema[] = [];
  for (const segment of route.segments) {
    if (!segment.startsWith(':')) continue;
    const name = segment.slice(1);
    const schema = doc.params?.[name];
    if (schema === undefined) throw new Error(`${route.method} /${route.segments.join('/')}: path parameter ${name} has no schema`);
    out.push({ name, in: 'path', required: true, schema: schema.json });
  }
  for (const [name, p] of Object.entries((doc.query?.params ?? {}) as Record<string, QueryParam<unknown>>)) {
    out.push({ name, in: 'query', required: false, description: p.description, schema: p.json });
  }
  // A family of parameters (metadata.KEY) has no name OpenAPI can list: one entry names the pattern.
  for (const p of doc.query?.prefixed ?? []) {
    out.push({ name: `${p.prefix}KEY`, in: 'query', required: false, description: p.description, schema: p.json, 'x-punctual-name-prefix': p.prefix });
  }
  for (const [name, h] of Object.entries(doc.headers ?? {})) {
    out.push({ name, in: 'header', required: false, description: h.description, schema: h.schema.json });
  }
  return out;
}

function responses(route: Route, doc: Operation): JsonSchema {
  const out: Record<string, JsonSchema> = {};
  for (const [status, a] of Object.entries(doc.answers)) out[status] = answerResponse(a);
  const errors = new Set(doc.errors ?? []);
  const takesInput = route.segments.some((s) => s.startsWith(':')) || doc.query !== undefined || doc.body !== undefined || doc.headers !== undefined;
  if (takesInput) errors.add(400);
  if (doc.body !== undefined) errors.add(413);
  const guarded = route.open !== true && (route.segments[0] === 'v1' || route.segments[0] === 'metrics');
  if (guarded) {
    errors.add(401);
    errors.add(403);
  }
  for (const status of [...errors].sort((a, b) => a - b)) {
    const note = status === 401 && route.segments[0] === 'metrics' ? 'only with --metrics-auth' : undefined;
    out[String(status)] = problemResponse(status, note);
  }
  out.default = { description: 'Any other problem (a 500 is a bug, logged on the node).', content: { [problemType]: { schema: problemAnswer } } };
  return out;
}

function security(route: Route): JsonSchema[] {
  if (route.open === true || (route.segments[0] !== 'v1' && route.segments[0] !== 'metrics')) return [];
  if (route.segments[0] === 'metrics') return [{}, { bearer: [] }]; // a token only with --metrics-auth
  return [{ bearer: [] }];
}

function operation(route: Route, doc: Operation): JsonSchema {
  const params = parameters(route, doc);
  const scope = route.open === true || route.segments[0] !== 'v1' ? null : route.scope;
  return {
    operationId: operationId(route.method, route),
    summary: doc.summary,
    ...(doc.description === undefined ? {} : { description: doc.description }),
    tags: [doc.tag],
    ...(params.length > 0 ? { parameters: params } : {}),
    ...(doc.body === undefined
      ? {}
      : { requestBody: { required: doc.body.required, content: { 'application/json': { schema: doc.body.schema } } } }),
    responses: responses(route, doc),
    security: security(route),
    ...(scope === null ? {} : { 'x-punctual-scope': scope }),
  };
}

/** The document of these routes. Throws on a route without `doc` (test/openapi names it first). */
export function buildOpenApi(routes: readonly Route[]): OpenApiDocument {
  const paths: Record<string, Record<string, JsonSchema>> = {};
  const tags = new Set<string>();
  for (const route of routes) {
    if (route.doc === undefined) continue; // reported by documentationGaps()
    if (route.aliasOf !== undefined) continue; // listed once, under the path it spells differently
    const path = openApiPath(route);
    paths[path] ??= {};
    paths[path]![route.method.toLowerCase()] = operation(route, route.doc);
    tags.add(route.doc.tag);
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Punctual HTTP API',
      version: apiVersion,
      summary: 'A self-hosted job scheduler that fires HTTP callbacks at the exact millisecond.',
      description:
        'Generated from the schemas the node validates requests with. Times on input are RFC 3339 with any offset or epoch ms; ' +
        'durations are integers of ms named *_ms; unknown fields are refused by name; null is the same as absent for optional fields ' +
        '(except payload, and metadata in PATCH). Errors are application/problem+json with a stable code and, for a 400, every bad field. ' +
        'Every default, limit and choice: docs/api.md in the repository.',
      // The project has no public address yet; a url belongs here once it has one.
      contact: { name: 'The Punctual project' },
      license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
    },
    // Relative: the node that served the document, whichever it is (every node answers the whole API), so the
    // document names nothing of the deployment and stays the same bytes on every node.
    servers: [{ url: '/', description: 'The node that served this document.' }],
    tags: [...tags].map((name) => ({ name, description: tagDescriptions[name] ?? name })),
    paths,
    components: {
      schemas: namedSchemas(),
      securitySchemes: {
        bearer: { type: 'http', scheme: 'bearer', description: '--auth-token or a token of --auth-tokens-file; each route needs a scope (x-punctual-scope): read < write < admin.' },
      },
    },
  };
}

/**
 * Routes the router answers that the document does not describe: `METHOD /path` each. An alias counts as
 * described when the route it names is (same method, documented).
 */
export function documentationGaps(routes: readonly Route[]): string[] {
  const documented = new Set(routes.filter((r) => r.doc !== undefined && r.aliasOf === undefined).map((r) => `${r.method} ${openApiPath(r)}`));
  const described = (r: Route): boolean => (r.aliasOf === undefined ? r.doc !== undefined : documented.has(`${r.method} ${r.aliasOf}`));
  return routes.filter((r) => !described(r)).map((r) => `${r.method} /${r.segments.join('/')}`);
}

let cachedJson: { routes: readonly Route[]; body: string } | null = null;
let cachedDocs: { routes: readonly Route[]; body: string; csp: string } | null = null;

function documentJson(routes: readonly Route[]): string {
  if (cachedJson?.routes !== routes) cachedJson = { routes, body: JSON.stringify(buildOpenApi(routes)) };
  return cachedJson.body;
}

/** GET /v1/openapi.json. */
export function openApiResponse(routes: readonly Route[]): ApiResponse {
  return { status: 200, headers: { 'content-type': 'application/json' }, body: documentJson(routes) };
}

/** GET /docs: static HTML without a script, styled by one hashed stylesheet (the CSP allows nothing else). */
export function docsResponse(routes: readonly Route[]): ApiResponse {
  if (cachedDocs?.routes !== routes) {
    const page = renderDocsPage(JSON.parse(documentJson(routes)) as OpenApiDocument);
    cachedDocs = { routes, body: page.html, csp: page.csp };
  }
  return {
    status: 200,
    headers: {
      'content-type': 'text/html; charset=utf-8',
      'content-security-policy': cachedDocs.csp,
      'x-content-type-options': 'nosniff',
      'referrer-policy': 'no-referrer',
      'cache-control': 'no-cache',
    },
    body: cachedDocs.body,
  };
}
