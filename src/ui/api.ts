/**
 * The dashboard's only way to the node: fetch on this origin with the bearer token from session storage. The
 * token never goes into a URL (no query parameter, no hash): it is sent as a header and forgotten at log out or
 * when the tab closes.
 */

const tokenKey = 'punctual.token';

export type Scope = 'read' | 'write' | 'admin';

export interface Whoami {
  name: string | null;
  scope: Scope | null;
  auth_required: boolean;
}

/** A problem+json answer (docs/api.md, Errors), or a network failure (status 0). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly fields: Array<{ field: string; message: string }> = [],
  ) {
    super(message);
  }

  /** The route does not exist on this node (an older node, or a feature it lacks). */
  get missing(): boolean {
    return this.status === 404 && this.code === 'not_found' && this.message.startsWith('no route for');
  }
}

export function storedToken(): string | null {
  return sessionStorage.getItem(tokenKey);
}

export function storeToken(token: string | null): void {
  if (token === null) sessionStorage.removeItem(tokenKey);
  else sessionStorage.setItem(tokenKey, token);
}

type Unauthorized = () => void;
let onUnauthorized: Unauthorized = () => {};

/** Called when a request answers 401: the token expired or was revoked, back to the token form. */
export function setUnauthorizedHandler(f: Unauthorized): void {
  onUnauthorized = f;
}

export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json' };
  const token = storedToken();
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  let res: Response;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store' });
  } catch (err) {
    throw new ApiError(0, 'network', `the node did not answer (${(err as Error).message})`);
  }
  const text = await res.text();
  const json = text === '' ? null : (JSON.parse(text) as unknown);
  if (res.ok) return json as T;
  const p = (json ?? {}) as { code?: string; detail?: string; title?: string; errors?: Array<{ field: string; message: string }> };
  const err = new ApiError(res.status, p.code ?? 'http', p.detail ?? p.title ?? `HTTP ${res.status}`, p.errors ?? []);
  if (res.status === 401 && path !== '/v1/whoami') onUnauthorized();
  throw err;
}

export const get = <T>(path: string): Promise<T> => api<T>('GET', path);
export const post = <T>(path: string, body?: unknown): Promise<T> => api<T>('POST', path, body ?? {});

/** `/v1/jobs/{id}` with the id as one path segment (ids may hold `:` and `.`). */
export function jobPath(id: string, tail = ''): string {
  const seg = id === '.' || id === '..' ? id.replace(/\./g, '%2E') : encodeURIComponent(id);
  return `/v1/jobs/${seg}${tail}`;
}

export function query(params: Record<string, string | number | null | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s === '' ? '' : `?${s}`;
}

const probes = new Map<string, Promise<boolean>>();

/**
 * Whether this node has a route (asked once per page load with a GET that reads one item): actions that need an
 * API an older node lacks are not offered there.
 */
export function hasRoute(path: string): Promise<boolean> {
  let p = probes.get(path);
  if (p === undefined) {
    p = get(path).then(
      () => true,
      (err: unknown) => !(err instanceof ApiError && err.missing),
    );
    probes.set(path, p);
  }
  return p;
}

export function canWrite(scope: Scope | null): boolean {
  return scope === 'write' || scope === 'admin';
}

export function isAdmin(scope: Scope | null): boolean {
  return scope === 'admin';
}

// --- the API's shapes, as far as the dashboard reads them (docs/api.md) ---

export interface Execution {
  id: string;
  scheduled_at: string;
  attempt: number | null;
  state: string;
  started_at: string | null;
  finished_at: string | null;
  status_code: number | null;
  error: string | null;
  lateness_ms: number | null;
  node_id: string | null;
  attempts?: Attempt[];
}

export interface Attempt {
  attempt: number;
  started_at: string | null;
  finished_at: string | null;
  duration_ms: number | null;
  status_code: number | null;
  error: string | null;
  node_id: string | null;
  fencing_token: string | null;
}

export interface Job {
  id: string;
  task: string | null;
  callback?: { url: string; method: string };
  schedule: Record<string, unknown>;
  state: string;
  next_fire_at: string | null;
  created_at: string;
  updated_at: string;
  runs: number;
  max_runs: number;
  shard: number;
  end_at: string | null;
  misfire: string;
  misfire_threshold_ms: number;
  overlap: string;
  metadata: Record<string, unknown> | null;
  last_execution: Execution | null;
  payload?: unknown;
  payload_base64?: string;
}

export interface Task {
  name: string;
  url: string;
  method: string;
  headers: Record<string, string>;
  timeout_ms: number;
  retry: { max_attempts: number; initial_backoff_ms: number; max_backoff_ms: number; multiplier: number; jitter: boolean };
  signing_secret?: string;
  signing_secret_next?: string;
  max_concurrency: number;
  created_at: string;
  updated_at: string;
}

export interface Overview {
  node_id: string;
  now: string;
  jobs: Record<string, number>;
  callbacks: { interval_ms: number; samples: Array<{ start: string; sent: number; failed: number }> };
  fire_lateness_ms: { buckets: Array<{ le: number | null; count: number }>; count: number; sum: number };
}

export interface DueProfile {
  from: string;
  per_second: number[];
  drain_rate_per_s: number | null;
}

export interface DeadLetter {
  job_id: string;
  task: string | null;
  error_class: string;
  error: string | null;
  status_code: number | null;
  attempts: number;
  scheduled_at: string;
  failed_at: string;
}

export interface DeadLetterGroup {
  task: string | null;
  error_class: string;
  count: number;
  last_failed_at: string;
}

export interface ClusterInfo {
  node_id: string;
  nodes: Array<{ id: string; peer_addr: string; api_addr: string | null; reachable: boolean }>;
  shards: Array<{ id: number; leader: string | null; term: number; commit_index: number; applied_index: number; members: string[]; learners: string[] }>;
}
