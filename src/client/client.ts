/**
 * `Punctual`: a typed client of the HTTP API (docs/api.md) over undici. One Agent per client (TLS CA, connect and
 * answer timeouts), a bearer token, problem+json -> PunctualError, cursor paging as async iterators, and retries
 * only where docs/api.md says a repeat is safe:
 *
 * - an answer that proves the request was not applied (every 429; a 503 whose `reason` says "was not proposed";
 *   a connection that was refused) is repeated whatever the request;
 * - an unknown outcome (a 503 without such a proof, a 504, a connection lost or a timeout after sending) is
 *   repeated only for requests that are idempotent: reads, and the writes docs/api.md names (creating a job with
 *   an id or an Idempotency-Key, cancel, pause, patch, run with an Idempotency-Key, putting a task or calendar).
 *
 * The client makes its own writes idempotent where the API allows: a job created without an id gets an
 * Idempotency-Key, and so does every run, so both are safe to repeat.
 */
import { createHash, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request, type Dispatcher } from 'undici';
import { clientLimits } from '../core/limits.js';
import { parseProblem, parseRetryAfter, PunctualError } from './errors.js';
import type {
  BatchResult,
  Calendar,
  CalendarInput,
  ClockAdvance,
  ClockStatus,
  ClusterStatus,
  Execution,
  ExecutionPage,
  Job,
  JobInput,
  JobPage,
  JobPatch,
  JobState,
  MembershipChange,
  PreviewInput,
  Task,
  TaskInput,
  TimeInput,
} from './types.js';

export const defaultBaseUrl = 'http://127.0.0.1:8080';

export interface RetryOptions {
  /** Attempts in all, the first included; 1 turns retries off. */
  maxAttempts?: number;
  /** The first delay; each further one doubles, up to maxBackoffMs, uniform in [delay/2, delay]. */
  initialBackoffMs?: number;
  maxBackoffMs?: number;
}

export interface PunctualOptions {
  /** Any node of the cluster: an http(s) base URL (a path prefix is kept). */
  baseUrl?: string;
  /** Sent as `Authorization: Bearer TOKEN`. */
  token?: string | null;
  /** PEM CA certificate(s) that signed an https:// server's certificate (replaces the system CAs). */
  ca?: string | Buffer | Array<string | Buffer> | null;
  /** How long to wait for a connection. */
  connectTimeoutMs?: number;
  /** How long to wait for the answer's headers, then between chunks of its body. */
  timeoutMs?: number;
  /** `false` never repeats a request. */
  retry?: RetryOptions | false;
  /** Headers sent with every request. */
  headers?: Record<string, string>;
  /** An undici dispatcher of your own (then ca and the timeouts are yours to set, and close() leaves it open). */
  dispatcher?: Dispatcher;
}

export interface RequestOptions {
  body?: unknown;
  headers?: Record<string, string>;
  query?: Record<string, string | number | undefined | null>;
  /**
   * True when repeating the request after an unknown outcome cannot do it twice (default: true for GET and
   * HEAD). Requests are always repeated after answers that prove they were not applied, unless retry is off.
   */
  idempotent?: boolean;
  /** Overrides the client's retry options for this request; `false` sends it once. */
  retry?: RetryOptions | false;
  signal?: AbortSignal;
}

export interface ApiResponse<T = unknown> {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  /** The parsed JSON answer; null for an empty body (204). */
  body: T;
  /** The answer as text (JSON or, for /metrics, Prometheus text). */
  text: string;
}

/** A cursor-paged list: iterate the items (`for await`), or the pages themselves with `pages()`. */
export class Paged<T> implements AsyncIterable<T> {
  constructor(private readonly fetchPage: (cursor: string | null) => Promise<{ items: T[]; next: string | null }>, private readonly cursor: string | null = null) {}

  async *pages(): AsyncGenerator<{ items: T[]; next: string | null }> {
    let cursor = this.cursor;
    for (;;) {
      const page = await this.fetchPage(cursor);
      yield page;
      if (page.next === null) return;
      // a server that hands back the cursor it was given would make this loop forever
      if (page.next === cursor) throw new PunctualError({ status: 0, code: 'bad_response', message: 'the server answered the same cursor twice', method: 'GET', url: '' });
      cursor = page.next;
    }
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<T> {
    for await (const page of this.pages()) yield* page.items;
  }

  /** Every item, at most `max` (default clientLimits.collectItemsMax, so a forgotten filter cannot fill memory). */
  async toArray(max: number = clientLimits.collectItemsMax): Promise<T[]> {
    const items: T[] = [];
    for await (const item of this) {
      if (items.length >= max) throw new RangeError(`more than ${max} items: iterate instead of collecting`);
      items.push(item);
    }
    return items;
  }
}

/**
 * The id the API gives a job created without one under Idempotency-Key `key` (docs/api.md, Idempotency); with
 * `index`, item `index` of a batch under that key.
 */
export function idempotentJobId(key: string, index?: number): string {
  const text = index === undefined ? key : `${key}#${index}`;
  return 'ik-' + createHash('sha256').update(text, 'utf8').digest('hex').slice(0, 32);
}

const notSentCodes = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT', 'EHOSTUNREACH', 'ENETUNREACH']);
const timeoutCodes = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT']);
/** Errors of the exchange itself (not of TLS or of the request's own arguments): the outcome is unknown. */
const lostCodes = new Set(['ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET', 'UND_ERR_CLOSED', 'ETIMEDOUT']);

function errCode(err: unknown): string {
  return typeof err === 'object' && err !== null && typeof (err as { code?: unknown }).code === 'string' ? (err as { code: string }).code : '';
}

function base(text: string): string {
  const url = new URL(text);
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new TypeError(`baseUrl must be http(s), got ${JSON.stringify(text)}`);
  return url.origin + url.pathname.replace(/\/+$/, '');
}

/** A path segment of an id or a name. */
const seg = (value: string | number): string => encodeURIComponent(String(value));

export class Punctual {
  readonly baseUrl: string;
  readonly jobs: Jobs;
  readonly tasks: Tasks;
  readonly calendars: Calendars;
  readonly schedules: Schedules;
  readonly cluster: Cluster;
  readonly clock: Clock;
  private readonly token: string | null;
  private readonly dispatcher: Dispatcher;
  private readonly ownsDispatcher: boolean;
  /** The retry options of every request (RequestOptions.retry overrides them). */
  readonly retryPolicy: Required<RetryOptions>;
  private readonly headers: Record<string, string>;

  constructor(options: PunctualOptions = {}) {
    this.baseUrl = base(options.baseUrl ?? defaultBaseUrl);
    if (options.token === '') throw new TypeError('token must not be empty');
    this.token = options.token ?? null;
    this.headers = { ...options.headers };
    this.retryPolicy = retryOptions(options.retry, undefined);
    this.ownsDispatcher = options.dispatcher === undefined;
    const timeoutMs = options.timeoutMs ?? clientLimits.requestTimeoutMs;
    this.dispatcher =
      options.dispatcher ??
      new Agent({
        connect: { timeout: options.connectTimeoutMs ?? clientLimits.connectTimeoutMs, ...(options.ca == null ? {} : { ca: options.ca }) },
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      });
    this.jobs = new Jobs(this);
    this.tasks = new Tasks(this);
    this.calendars = new Calendars(this);
    this.schedules = new Schedules(this);
    this.cluster = new Cluster(this);
    this.clock = new Clock(this);
  }

  /** One API call with the retries of the module comment; throws PunctualError for every failure. */
  async request<T = unknown>(method: string, path: string, options: RequestOptions = {}): Promise<ApiResponse<T>> {
    const retry = options.retry === undefined ? this.retryPolicy : retryOptions(options.retry, this.retryPolicy);
    const idempotent = options.idempotent ?? (method === 'GET' || method === 'HEAD');
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.once<T>(method, path, options);
      } catch (err) {
        if (!(err instanceof PunctualError) || attempt >= retry.maxAttempts) throw err;
        if (!(err.provesNotApplied || (idempotent && err.transient))) throw err;
        await sleep(backoffMs(retry, attempt, err.retryAfterMs), undefined, options.signal === undefined ? undefined : { signal: options.signal });
      }
    }
  }

  private async once<T>(method: string, path: string, options: RequestOptions): Promise<ApiResponse<T>> {
    const url = this.baseUrl + path + queryString(options.query);
    const headers: Record<string, string> = { accept: 'application/json', ...this.headers, ...options.headers };
    if (this.token !== null) headers.authorization = `Bearer ${this.token}`;
    let body: string | undefined;
    if (options.body !== undefined) {
      body = JSON.stringify(options.body);
      headers['content-type'] = 'application/json';
    }
    let status: number;
    let text: string;
    let resHeaders: Record<string, string | string[] | undefined>;
    try {
      const res = await request(url, { method: method as Dispatcher.HttpMethod, headers, body, dispatcher: this.dispatcher, signal: options.signal });
      status = res.statusCode;
      resHeaders = res.headers;
      text = await res.body.text();
    } catch (err) {
      throw networkError(method, url, err);
    }
    if (status >= 400) throw answerError(method, url, status, resHeaders, text);
    let parsed: unknown = null;
    // a caller that asked for text (GET /metrics) gets the text; every other answer must be JSON
    if (text !== '' && headers.accept !== 'text/plain') {
      try {
        parsed = JSON.parse(text);
      } catch (err) {
        throw new PunctualError({ status, code: 'bad_response', message: `HTTP ${status} with a body that is not JSON`, method, url, bodyText: text.slice(0, 1024), cause: err });
      }
    }
    return { status, headers: resHeaders, body: parsed as T, text };
  }

  /** GET /healthz. */
  async health(): Promise<{ status: 'ok'; node_id: string }> {
    return (await this.request<{ status: 'ok'; node_id: string }>('GET', '/healthz')).body;
  }

  /** GET /readyz: true when ready; false on its 503 (every other failure throws). */
  async ready(): Promise<boolean> {
    try {
      await this.request('GET', '/readyz', { retry: false });
      return true;
    } catch (err) {
      if (err instanceof PunctualError && err.status === 503) return false;
      throw err;
    }
  }

  /** GET /metrics: the Prometheus text. */
  async metrics(): Promise<string> {
    return (await this.request('GET', '/metrics', { headers: { accept: 'text/plain' } })).text;
  }

  /** Closes the connections (not a dispatcher you passed in). */
  async close(): Promise<void> {
    if (this.ownsDispatcher) await this.dispatcher.close();
  }
}

function retryOptions(given: RetryOptions | false | undefined, fallback: Required<RetryOptions> | undefined): Required<RetryOptions> {
  const defaults = fallback ?? {
    maxAttempts: clientLimits.retryAttemptsDefault,
    initialBackoffMs: clientLimits.retryInitialBackoffMs,
    maxBackoffMs: clientLimits.retryMaxBackoffMs,
  };
  if (given === false) return { ...defaults, maxAttempts: 1 };
  return { ...defaults, ...given };
}

/** Exponential backoff with jitter, never below the server's Retry-After (clamped). */
export function backoffMs(retry: Required<RetryOptions>, attempt: number, retryAfterMs: number | null, random: () => number = Math.random): number {
  const ceiling = Math.min(retry.maxBackoffMs, retry.initialBackoffMs * 2 ** (attempt - 1));
  const jittered = ceiling / 2 + random() * (ceiling / 2);
  const floor = Math.min(retryAfterMs ?? 0, clientLimits.retryAfterMsMax);
  return Math.round(Math.max(jittered, floor));
}

function queryString(query: RequestOptions['query']): string {
  if (query === undefined) return '';
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== '') params.set(k, String(v));
  const qs = params.toString();
  return qs === '' ? '' : `?${qs}`;
}

function header(headers: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function answerError(method: string, url: string, status: number, headers: Record<string, string | string[] | undefined>, text: string): PunctualError {
  const problem = parseProblem(text);
  const retryAfterMs = parseRetryAfter(header(headers, 'retry-after'), Date.now());
  if (problem === null) {
    const snippet = text.replace(/\s+/g, ' ').trim().slice(0, 200);
    return new PunctualError({ status, code: `http_${status}`, message: snippet === '' ? `HTTP ${status}` : snippet, method, url, bodyText: text.slice(0, clientLimits.errorBodyCharsMax), retryAfterMs });
  }
  const message = typeof problem.detail === 'string' ? problem.detail : String(problem.title ?? `HTTP ${status}`);
  return new PunctualError({ status, code: problem.code!, message, method, url, problem, bodyText: text.slice(0, clientLimits.errorBodyCharsMax), retryAfterMs });
}

function networkError(method: string, url: string, err: unknown): PunctualError {
  const code = errCode(err);
  const message = err instanceof Error ? err.message : String(err);
  if (err instanceof Error && (err.name === 'AbortError' || code === 'ABORT_ERR')) {
    return new PunctualError({ status: 0, code: 'aborted', message, method, url, cause: err });
  }
  if (timeoutCodes.has(code)) return new PunctualError({ status: 0, code: 'timeout', message, method, url, cause: err });
  const notSent = notSentCodes.has(code);
  // TLS failures and bad arguments are not transient: repeating cannot help, so they are not retried
  const transient = notSent || lostCodes.has(code);
  return new PunctualError({ status: 0, code: transient ? 'unreachable' : 'connection_failed', message, method, url, notSent, cause: err });
}

// --- resources ------------------------------------------------------------------------------------------------

export interface JobListQuery {
  state?: JobState | Lowercase<JobState>;
  task?: string;
  /** Jobs per page, 1..1000 (server default 100). */
  limit?: number;
  cursor?: string;
}

class Jobs {
  constructor(private readonly c: Punctual) {}

  /**
   * POST /v1/jobs. Without an id or idempotencyKey, a random Idempotency-Key is sent, so a retry after an
   * unknown outcome lands on the same job (its id is then `ik-...`, docs/api.md Idempotency).
   */
  async create(job: JobInput, options: { idempotencyKey?: string; signal?: AbortSignal } = {}): Promise<Job> {
    const key = options.idempotencyKey ?? (job.id === undefined ? randomUUID() : undefined);
    const headers: Record<string, string> = key === undefined ? {} : { 'idempotency-key': key };
    return (await this.c.request<Job>('POST', '/v1/jobs', { body: job, headers, idempotent: true, signal: options.signal })).body;
  }

  async get(id: string): Promise<Job> {
    return (await this.c.request<Job>('GET', `/v1/jobs/${seg(id)}`)).body;
  }

  /** GET /v1/jobs: `for await (const job of client.jobs.list({ state: 'PENDING' }))`. */
  list(query: JobListQuery = {}): Paged<Job> {
    const { cursor, ...filters } = query;
    return new Paged<Job>(async (c) => {
      const page = (await this.c.request<JobPage>('GET', '/v1/jobs', { query: { ...filters, cursor: c } })).body;
      return { items: page.jobs, next: page.next_cursor };
    }, cursor ?? null);
  }

  /** One page of GET /v1/jobs. */
  async page(query: JobListQuery = {}): Promise<JobPage> {
    return (await this.c.request<JobPage>('GET', '/v1/jobs', { query: { ...query } })).body;
  }

  /** PATCH /v1/jobs/{id} (safe to repeat: docs/api.md). */
  async update(id: string, patch: JobPatch): Promise<Job> {
    return (await this.c.request<Job>('PATCH', `/v1/jobs/${seg(id)}`, { body: patch, idempotent: true })).body;
  }

  async cancel(id: string): Promise<Job> {
    return (await this.c.request<Job>('POST', `/v1/jobs/${seg(id)}/cancel`, { idempotent: true })).body;
  }

  async pause(id: string): Promise<Job> {
    return (await this.c.request<Job>('POST', `/v1/jobs/${seg(id)}/pause`, { idempotent: true })).body;
  }

  /** Not repeated after an unknown outcome (docs/api.md): read the job to see. */
  async resume(id: string): Promise<Job> {
    return (await this.c.request<Job>('POST', `/v1/jobs/${seg(id)}/resume`)).body;
  }

  /** One extra run now. A run key (Idempotency-Key) is always sent, generated when not given: runs once. */
  async run(id: string, options: { idempotencyKey?: string } = {}): Promise<Job> {
    const headers = { 'idempotency-key': options.idempotencyKey ?? randomUUID() };
    return (await this.c.request<Job>('POST', `/v1/jobs/${seg(id)}/run`, { headers, idempotent: true })).body;
  }

  /** GET /v1/jobs/{id}/executions, newest first. */
  executions(id: string, query: { limit?: number; cursor?: string } = {}): Paged<Execution> {
    return new Paged<Execution>(async (c) => {
      const page = (await this.c.request<ExecutionPage>('GET', `/v1/jobs/${seg(id)}/executions`, { query: { limit: query.limit, cursor: c } })).body;
      return { items: page.executions, next: page.next_cursor };
    }, query.cursor ?? null);
  }

  /**
   * POST /v1/jobs:batch (at most 10,000 jobs). Items without an id get the id the API would derive from the
   * batch's Idempotency-Key (given or generated), so the batch and each of its items are safe to repeat; items
   * answered 429 or 503 are sent again (with backoff) until they get an answer of their own or the attempts
   * run out. Results are in input order.
   */
  async batch(jobs: JobInput[], options: { idempotencyKey?: string; signal?: AbortSignal } = {}): Promise<BatchResult[]> {
    const key = options.idempotencyKey ?? randomUUID();
    const items = jobs.map((job, i) => (job.id === undefined || job.id === null ? { ...job, id: idempotentJobId(key, i) } : job));
    return this.sendBatch(items, { signal: options.signal });
  }

  /**
   * Sends a batch whose items all carry ids (so every repeat is safe), repeating the request and the items
   * answered 429 or 503; for streamed imports that assign the ids themselves. `retry` overrides the client's.
   */
  async sendBatch(items: JobInput[], options: { signal?: AbortSignal; retry?: RetryOptions } = {}): Promise<BatchResult[]> {
    const signal = options.signal;
    const results: BatchResult[] = new Array(items.length);
    let pending = items.map((_, i) => i);
    const retry = options.retry === undefined ? this.c.retryPolicy : retryOptions(options.retry, this.c.retryPolicy);
    for (let attempt = 1; pending.length > 0; attempt++) {
      const body = { jobs: pending.map((i) => items[i]) };
      const res = await this.c.request<{ results: BatchResult[] }>('POST', '/v1/jobs:batch', { body, idempotent: true, signal, retry: options.retry });
      const answered = res.body?.results;
      if (!Array.isArray(answered) || answered.length !== pending.length) {
        throw new PunctualError({ status: res.status, code: 'bad_response', message: '/v1/jobs:batch answered without one result per job', method: 'POST', url: '/v1/jobs:batch' });
      }
      const again: number[] = [];
      pending.forEach((index, k) => {
        results[index] = answered[k]!;
        if ((answered[k]!.status === 429 || answered[k]!.status === 503) && attempt < retry.maxAttempts) again.push(index);
      });
      pending = again;
      if (pending.length > 0) await sleep(backoffMs(retry, attempt, clientLimits.batchItemRetryMs), undefined, signal === undefined ? undefined : { signal });
    }
    return results;
  }
}

class Tasks {
  constructor(private readonly c: Punctual) {}

  /** PUT /v1/tasks/{name}: creates or replaces (safe to repeat). */
  async put(name: string, task: TaskInput): Promise<Task> {
    return (await this.c.request<Task>('PUT', `/v1/tasks/${seg(name)}`, { body: task, idempotent: true })).body;
  }

  async get(name: string): Promise<Task> {
    return (await this.c.request<Task>('GET', `/v1/tasks/${seg(name)}`)).body;
  }

  async list(): Promise<Task[]> {
    return (await this.c.request<{ tasks: Task[] }>('GET', '/v1/tasks')).body.tasks;
  }

  /** Not repeated after an unknown outcome (docs/api.md). */
  async delete(name: string): Promise<void> {
    await this.c.request('DELETE', `/v1/tasks/${seg(name)}`);
  }
}

class Calendars {
  constructor(private readonly c: Punctual) {}

  async put(name: string, calendar: CalendarInput): Promise<Calendar> {
    return (await this.c.request<Calendar>('PUT', `/v1/calendars/${seg(name)}`, { body: calendar, idempotent: true })).body;
  }

  async get(name: string): Promise<Calendar> {
    return (await this.c.request<Calendar>('GET', `/v1/calendars/${seg(name)}`)).body;
  }

  async list(): Promise<Calendar[]> {
    return (await this.c.request<{ calendars: Calendar[] }>('GET', '/v1/calendars')).body.calendars;
  }

  async delete(name: string): Promise<void> {
    await this.c.request('DELETE', `/v1/calendars/${seg(name)}`);
  }
}

class Schedules {
  constructor(private readonly c: Punctual) {}

  /** POST /v1/schedules:preview: the next fire times (RFC 3339 strings). A read: safe to repeat. */
  async preview(input: PreviewInput): Promise<string[]> {
    return (await this.c.request<{ occurrences: string[] }>('POST', '/v1/schedules:preview', { body: input, idempotent: true })).body.occurrences;
  }
}

class Cluster {
  constructor(private readonly c: Punctual) {}

  async status(): Promise<ClusterStatus> {
    return (await this.c.request<ClusterStatus>('GET', '/v1/cluster')).body;
  }

  /** Starts a leadership transfer of a shard (202). */
  async transferLeader(shard: number, to: string): Promise<{ shard: number; to: string }> {
    return (await this.c.request<{ shard: number; to: string }>('POST', `/v1/cluster/shards/${seg(shard)}/transfer-leader`, { body: { to }, idempotent: true })).body;
  }

  /** Adds a node started with `serve --join`; the same request resumes after a 504. */
  async addNode(id: string, peerAddr: string): Promise<MembershipChange> {
    return (await this.c.request<MembershipChange>('POST', '/v1/cluster/nodes', { body: { id, peer_addr: peerAddr }, idempotent: true })).body;
  }

  async removeNode(id: string): Promise<MembershipChange> {
    return (await this.c.request<MembershipChange>('DELETE', `/v1/cluster/nodes/${seg(id)}`)).body;
  }
}

class Clock {
  constructor(private readonly c: Punctual) {}

  async get(): Promise<ClockStatus> {
    return (await this.c.request<ClockStatus>('GET', '/v1/clock')).body;
  }

  /** POST /v1/clock:advance on a `serve --clock manual` node; repeat with the same `to` while complete is false. */
  async advance(by: { by_ms: number } | { to: TimeInput }): Promise<ClockAdvance> {
    return (await this.c.request<ClockAdvance>('POST', '/v1/clock:advance', { body: by })).body;
  }
}

export type { Jobs, Tasks, Calendars, Schedules, Cluster, Clock };
