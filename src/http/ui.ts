/**
 * The dashboard's side of the client API: the built dashboard (scripts/build-ui.mjs) served at /ui with a strict
 * Content-Security-Policy, and the two read-only routes only it needs: GET /v1/overview (this node's figures)
 * and GET /v1/whoami (the scope of the caller's token, so the dashboard hides what would be refused).
 * The assets are read once at start, from dist/ui beside the compiled code or, in the single executable, from
 * its embedded assets; a node without them answers /ui with 404.
 */
import { readFileSync } from 'node:fs';
import { PunctualError } from '../core/errors.js';
import { assetNames, embeddedAsset, runningAsSea } from '../platform/sea.js';
import type { ApiResponse } from './app.js';
import type { Operation, Route, RouteContext } from './routes.js';
import { pattern } from './schema.js';
import { renderTime } from './time.js';
import { Issues } from './validate.js';

/** One built file: its Content-Type and bytes. */
export interface UiAsset {
  type: string;
  body: Uint8Array;
}

/** The built dashboard: `index.html` and `assets/NAME-HASH.ext`, keyed by their path under /ui/. */
export type UiAssets = ReadonlyMap<string, UiAsset>;

/** dist/ui/manifest.json as scripts/build-ui.mjs writes it: each file's path under /ui/ and its Content-Type. */
interface UiManifest {
  files: Record<string, string>;
}

/**
 * The policy of every /ui answer: only this origin's scripts, styles, images and API; no inline script or style,
 * no plugin, no <base>, no form posting anywhere (the token form is handled by the script), never in a frame.
 */
export const uiSecurityHeaders: Readonly<Record<string, string>> = {
  'content-security-policy':
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; font-src 'self'; " +
    "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
};

/** Reads the built dashboard, or null when this build has none (a node run from sources, before `npm run build`). */
export function loadUiAssets(): UiAssets | null {
  if (runningAsSea()) return readAssets((path) => embeddedAsset(`${assetNames.uiPrefix}${path}`));
  // dist/src/http/ui.js -> dist/ui/; src/http/ui.ts (tests run from sources) -> dist/ui/ too.
  for (const dir of ['../../ui/', '../../dist/ui/']) {
    const base = new URL(dir, import.meta.url);
    try {
      return readAssets((path) => readFileSync(new URL(path, base)));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
  return null;
}

function readAssets(read: (path: string) => Uint8Array): UiAssets {
  const manifest = JSON.parse(Buffer.from(read('manifest.json')).toString('utf8')) as UiManifest;
  const files = new Map<string, UiAsset>();
  for (const [path, type] of Object.entries(manifest.files)) files.set(path, { type, body: read(path) });
  if (!files.has('index.html')) throw new Error('the dashboard manifest lists no index.html');
  return files;
}

// Not app.ts's jsonResponse: routes.ts imports this module, so a value import of app.ts here would be a cycle.
function jsonResponse(status: number, body: unknown): ApiResponse {
  return { status, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) };
}

function notBuilt(): PunctualError {
  return new PunctualError('not_found', 'this node was built without the dashboard (npm run build makes it)');
}

/** index.html is revalidated on every load; the hashed assets it names never change, so they are cached for a year. */
function serveUi(path: string, ctx: RouteContext): Promise<ApiResponse> {
  const assets = ctx.deps.ui;
  if (assets == null) throw notBuilt();
  const asset = assets.get(path);
  if (asset === undefined) throw new PunctualError('not_found', `no dashboard file ${JSON.stringify(path)}`);
  const cache = path === 'index.html' ? 'no-cache' : 'public, max-age=31536000, immutable';
  return Promise.resolve({ status: 200, headers: { 'content-type': asset.type, 'cache-control': cache, ...uiSecurityHeaders }, body: asset.body });
}

async function overview({ deps }: RouteContext): Promise<ApiResponse> {
  if (typeof deps.api.overview !== 'function') throw new PunctualError('unavailable', 'this node keeps no overview figures');
  const o = await deps.api.overview();
  return jsonResponse(200, {
    node_id: deps.api.nodeId,
    now: renderTime(Date.now()),
    jobs: o.jobs,
    callbacks: {
      interval_ms: o.callbackIntervalMs,
      samples: o.callbacks.map((s) => ({ start: renderTime(s.startMs), sent: s.sent, failed: s.failed })),
    },
    fire_lateness_ms: {
      buckets: o.lateness.buckets.map((b) => ({ le: b.leMs, count: b.count })),
      count: o.lateness.count,
      sum: o.lateness.sumMs,
    },
  });
}

/** Which token made the request: its name and scope (an open node answers `anonymous`, `admin`). */
async function whoami({ principal, deps }: RouteContext): Promise<ApiResponse> {
  const authRequired = deps.tokens?.enabled ?? deps.authToken !== null;
  return jsonResponse(200, { name: principal?.name ?? null, scope: principal?.scope ?? null, auth_required: authRequired });
}

/** The dashboard's file names: hashed by the build, never a path. */
const assetFileSchema = pattern(/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/, '[A-Za-z0-9][A-Za-z0-9._-]{0,127}', 'A hashed file name the page names.');

function readAssetFile(name: string): string {
  const issues = new Issues();
  assetFileSchema.read(name, 'file', issues);
  issues.throwIfAny();
  return name;
}

type Op = (method: string, path: string, doc: Operation, handler: Route['handler'], scope?: Route['scope']) => Route;

const overviewAnswer = {
  type: 'object',
  required: ['node_id', 'now', 'jobs', 'callbacks', 'fire_lateness_ms'],
  properties: {
    node_id: { type: 'string' },
    now: { type: 'string', format: 'date-time' },
    jobs: { type: 'object', description: 'Jobs per stored state in this node\'s replicas.', additionalProperties: { type: 'integer' } },
    callbacks: {
      type: 'object',
      properties: {
        interval_ms: { type: 'integer' },
        samples: {
          type: 'array',
          items: { type: 'object', properties: { start: { type: 'string', format: 'date-time' }, sent: { type: 'integer' }, failed: { type: 'integer' } } },
        },
      },
    },
    fire_lateness_ms: {
      type: 'object',
      properties: {
        buckets: { type: 'array', items: { type: 'object', properties: { le: { type: ['number', 'null'] }, count: { type: 'integer' } } } },
        count: { type: 'integer' },
        sum: { type: 'number' },
      },
    },
  },
};
const whoamiAnswer = {
  type: 'object',
  required: ['name', 'scope', 'auth_required'],
  properties: { name: { type: ['string', 'null'] }, scope: { enum: ['read', 'write', 'admin', null] }, auth_required: { type: 'boolean' } },
};

const pageDescription =
  'The dashboard\'s HTML page (docs/ui.md in the repository): open without a token, since the page holds the token form and sends the token as a bearer header to /v1. Served under a strict Content-Security-Policy, revalidated on every load; 404 on a build without the dashboard.';
const assetDescription = 'A script, stylesheet or image the dashboard page names by its hashed file name; cached for a year (the name changes with the content). 404 for a name the build does not have.';

/** The dashboard's files (open: the page holds the token form) and its two read-only routes. */
export function uiRoutes(op: Op): Route[] {
  const tag = 'Dashboard';
  const page = (path: string, file: string | null, summary: string, description: string): Route => ({
    ...op('GET', path, { tag, summary, description, answers: { 200: { description: 'The dashboard (docs/ui.md), under a strict Content-Security-Policy.', contentType: file === null ? 'application/octet-stream' : 'text/html' } }, errors: [404] }, (ctx) =>
      serveUi(file ?? `assets/${ctx.params.file!}`, ctx)),
    open: true,
  });
  const fileParam = { file: assetFileSchema };
  return [
    page('/ui', 'index.html', 'The dashboard', pageDescription),
    // Browsers reach the page as /ui/ too; it is /ui under another spelling, not an operation of the API.
    { ...page('/ui/', 'index.html', 'The dashboard', pageDescription), aliasOf: '/ui' },
    { ...page('/ui/assets/:file', null, 'A file of the dashboard (cached for a year)', assetDescription), handler: (ctx) => serveUi(`assets/${readAssetFile(ctx.params.file!)}`, ctx), doc: { tag, summary: 'A file of the dashboard (cached for a year)', description: assetDescription, params: fileParam, answers: { 200: { description: 'Script, style or image.', contentType: 'application/octet-stream' } }, errors: [404] } },
    op('GET', '/v1/overview', { tag, summary: 'This node\'s figures: jobs by state, the last hour of callbacks, fire lateness', description: 'Jobs per stored state in this node\'s replicas, the callback attempts this node sent and how many failed per 10-second interval over the last hour, and the histogram of its fire lateness since it started. Never forwarded: in a cluster each node answers for itself. 503 on a node that keeps no such figures. Needs the read scope.', answers: { 200: { description: 'Never forwarded: each node answers for itself.', schema: overviewAnswer } }, errors: [503] }, overview),
    op('GET', '/v1/whoami', { tag, summary: 'The token\'s name and scope', description: 'The name and scope (read, write or admin) of the token that made the request, and whether this node requires tokens at all; the dashboard hides what the scope would refuse. Needs the read scope.', answers: { 200: { description: 'A node without tokens answers anonymous, admin.', schema: whoamiAnswer } } }, whoami),
  ];
}
