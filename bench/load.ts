/**
 * Load generators: single-job submits, batch submits and a steady open-loop rate, over undici Pools
 * (keep-alive) to one or more servers. Requests are spread round-robin over the servers, so the same loops
 * drive one node or a cluster. Every loop is bounded: in concurrency (workers or in-flight requests) and in
 * total time (a deadline after which no new request starts).
 */
import { Pool } from 'undici';
import { SampleBuffer } from './histogram.js';
import { nowPreciseMs } from './receiver.js';

export interface ServerSetOptions {
  /** Connections per server. */
  connections: number;
  /** Requests in flight per connection (HTTP/1.1 pipelining); 1 = none. */
  pipelining?: number;
  token?: string | null;
  /** PEM of the CA to trust for https servers (the bench's own, with --tls). */
  caPem?: string | null;
}

/** One keep-alive Pool per server URL, handed out round-robin. */
export class ServerSet {
  readonly urls: string[];
  private readonly pools: Pool[];
  private readonly headers: Record<string, string>;
  private cursor = 0;

  constructor(urls: string[], options: ServerSetOptions) {
    if (urls.length === 0) throw new Error('ServerSet needs at least one server URL');
    this.urls = urls;
    this.pools = urls.map(
      (url) =>
        new Pool(url, {
          connections: options.connections,
          pipelining: options.pipelining ?? 1,
          keepAliveTimeout: 60_000,
          headersTimeout: 60_000,
          bodyTimeout: 60_000,
          ...(options.caPem ? { connect: { ca: options.caPem } } : {}),
        }),
    );
    this.headers = { 'content-type': 'application/json' };
    if (options.token) this.headers.authorization = `Bearer ${options.token}`;
  }

  /** Sends one request to the next server; resolves with the status and the parsed JSON body (null if none). */
  async send(method: 'POST' | 'PUT' | 'GET', path: string, body?: string): Promise<{ status: number; json: unknown }> {
    const pool = this.pools[this.cursor];
    this.cursor = (this.cursor + 1) % this.pools.length;
    const res = await pool.request({ method, path, headers: this.headers, body });
    const text = await res.body.text();
    let json: unknown = null;
    if (text.length > 0) {
      try {
        json = JSON.parse(text);
      } catch {
        json = text;
      }
    }
    return { status: res.statusCode, json };
  }

  async close(): Promise<void> {
    await Promise.all(this.pools.map((p) => p.close()));
  }
}

/** Jobs of a run: ids `${prefix}${i base 36}` (short, unique per run), each due at dueAtMs(i). */
export interface JobPlan {
  idPrefix: string;
  taskName: string;
  /** Epoch ms the job's single occurrence is due; called once per job, at submission. */
  dueAtMs(index: number): number;
}

export function jobId(plan: JobPlan, index: number): string {
  return plan.idPrefix + index.toString(36);
}

/** The JSON of one job due at dueMs, built by hand: it is the hot path of the generator. */
export function jobJson(plan: JobPlan, index: number, dueMs: number): string {
  return `{"id":"${jobId(plan, index)}","task":"${plan.taskName}","schedule":{"at":${dueMs}}}`;
}

export interface SubmitOutcome {
  /** Ids of jobs the server acknowledged (201, or 200 for an idempotent repeat). */
  acked: string[];
  /** Jobs refused or lost to a transport error. */
  failed: number;
  requests: number;
  /** Failure counts by problem `code`, `status_<n>` or transport error name. */
  errors: Record<string, number>;
  startMs: number;
  endMs: number;
  /** True when the deadline stopped the loop before every job was sent. */
  timedOut: boolean;
  /** Time from sending each request to its full answer (ms), whatever the answer. */
  requestMs: SampleBuffer;
  /** Accepted jobs whose acknowledgement arrived after their due time (they could not fire on time). */
  ackedAfterDue: number;
}

function newOutcome(): SubmitOutcome {
  const startMs = nowPreciseMs();
  return { acked: [], failed: 0, requests: 0, errors: {}, startMs, endMs: startMs, timedOut: false, requestMs: new SampleBuffer(), ackedAfterDue: 0 };
}

function countError(outcome: SubmitOutcome, code: string, jobs: number): void {
  outcome.failed += jobs;
  outcome.errors[code] = (outcome.errors[code] ?? 0) + jobs;
}

function problemCode(status: number, json: unknown): string {
  if (json !== null && typeof json === 'object' && typeof (json as { code?: unknown }).code === 'string') {
    return (json as { code: string }).code;
  }
  return `status_${status}`;
}

function transportCode(err: unknown): string {
  if (err instanceof Error) return (err as { code?: string }).code ?? err.name;
  return 'unknown_error';
}

function noteAck(outcome: SubmitOutcome, plan: JobPlan, index: number, dueMs: number, answeredMs: number): void {
  outcome.acked.push(jobId(plan, index));
  if (answeredMs > dueMs) outcome.ackedAfterDue++;
}

/** Posts one single-job request; records the outcome. */
async function postOne(servers: ServerSet, plan: JobPlan, index: number, outcome: SubmitOutcome): Promise<void> {
  outcome.requests++;
  const dueMs = plan.dueAtMs(index);
  const sentMs = nowPreciseMs();
  try {
    const { status, json } = await servers.send('POST', '/v1/jobs', jobJson(plan, index, dueMs));
    const answeredMs = nowPreciseMs();
    outcome.requestMs.push(answeredMs - sentMs);
    if (status === 201 || status === 200) noteAck(outcome, plan, index, dueMs, answeredMs);
    else countError(outcome, problemCode(status, json), 1);
  } catch (err) {
    countError(outcome, transportCode(err), 1);
  }
}

/** Posts one batch of jobs [from, to); each item succeeds or fails on its own. */
async function postBatch(
  servers: ServerSet,
  plan: JobPlan,
  from: number,
  to: number,
  outcome: SubmitOutcome,
): Promise<void> {
  const parts: string[] = [];
  const dues: number[] = [];
  for (let i = from; i < to; i++) {
    dues.push(plan.dueAtMs(i));
    parts.push(jobJson(plan, i, dues[i - from]));
  }
  outcome.requests++;
  const sentMs = nowPreciseMs();
  try {
    const { status, json } = await servers.send('POST', '/v1/jobs:batch', `{"jobs":[${parts.join(',')}]}`);
    const answeredMs = nowPreciseMs();
    outcome.requestMs.push(answeredMs - sentMs);
    if (status !== 200) return countError(outcome, problemCode(status, json), to - from);
    const results = (json as { results?: Array<{ id?: string; error?: unknown }> } | null)?.results ?? [];
    for (let i = from; i < to; i++) {
      const item = results[i - from];
      if (item !== undefined && (item.error === undefined || item.error === null)) {
        noteAck(outcome, plan, i, dues[i - from], answeredMs);
      }
      else countError(outcome, item === undefined ? 'missing_result' : problemCode(0, item.error), 1);
    }
  } catch (err) {
    countError(outcome, transportCode(err), to - from);
  }
}

export interface ClosedLoopOptions {
  servers: ServerSet;
  plan: JobPlan;
  count: number;
  /** Concurrent requests (workers). */
  concurrency: number;
  /** Jobs per request; 1 = POST /v1/jobs, more = POST /v1/jobs:batch. */
  batchSize: number;
  /** Epoch ms after which no new request starts. */
  deadlineMs: number;
}

/** Closed loop: `concurrency` workers each send their next request as soon as the previous one is answered. */
export async function submitClosedLoop(options: ClosedLoopOptions): Promise<SubmitOutcome> {
  const { servers, plan, count, batchSize, deadlineMs } = options;
  const outcome = newOutcome();
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < count) {
      if (nowPreciseMs() >= deadlineMs) {
        outcome.timedOut = true;
        return;
      }
      const from = next;
      const to = Math.min(count, from + batchSize);
      next = to;
      if (batchSize === 1) await postOne(servers, plan, from, outcome);
      else await postBatch(servers, plan, from, to, outcome);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, options.concurrency) }, worker));
  outcome.endMs = nowPreciseMs();
  return outcome;
}

export interface OpenLoopOptions {
  servers: ServerSet;
  plan: JobPlan;
  ratePerS: number;
  durationS: number;
  /** How often owed jobs are sent. */
  tickMs: number;
  /** Jobs per request at most (1 = single-job requests). */
  batchSize: number;
  /** Requests in flight at most; jobs owed beyond it wait for the next tick (counted in backlogMax). */
  inFlightMax: number;
  /** Epoch ms after which no new request starts (bounds the run when the server stalls). */
  deadlineMs: number;
}

export interface OpenLoopOutcome extends SubmitOutcome {
  /** Most jobs owed but not yet sent at any tick (the server's answers were slower than the rate). */
  backlogMax: number;
  sent: number;
}

/**
 * Open loop: sends the jobs owed at ratePerS since the start, every tickMs, whatever the server's answer time,
 * so a slow server shows up as lateness and backlog, not as a silently lower rate.
 */
export async function submitOpenLoop(options: OpenLoopOptions): Promise<OpenLoopOutcome> {
  const { servers, plan, ratePerS, batchSize, inFlightMax } = options;
  const base = newOutcome();
  const outcome: OpenLoopOutcome = { ...base, backlogMax: 0, sent: 0 };
  const total = Math.floor(ratePerS * options.durationS);
  const pending = new Set<Promise<void>>();
  const track = (p: Promise<void>): void => {
    pending.add(p);
    void p.finally(() => pending.delete(p));
  };
  while (outcome.sent < total) {
    if (nowPreciseMs() >= options.deadlineMs) {
      outcome.timedOut = true;
      break;
    }
    const owed = Math.min(total, Math.floor(((nowPreciseMs() - outcome.startMs) * ratePerS) / 1000));
    while (outcome.sent < owed && pending.size < inFlightMax) {
      const from = outcome.sent;
      const to = Math.min(owed, from + batchSize);
      outcome.sent = to;
      track(to - from === 1 ? postOne(servers, plan, from, outcome) : postBatch(servers, plan, from, to, outcome));
    }
    outcome.backlogMax = Math.max(outcome.backlogMax, owed - outcome.sent);
    await sleepMs(options.tickMs);
  }
  await Promise.all(pending);
  outcome.endMs = nowPreciseMs();
  return outcome;
}

export function sleepMs(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
