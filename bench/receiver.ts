/**
 * The bench's callback receiver: a node:http server on 127.0.0.1 that answers every delivery with 200 and an
 * empty body at once, and records per delivery its X-Deduplication-Key, X-Punctual-Scheduled-At and the arrival
 * time in fractional epoch ms (performance.timeOrigin + performance.now(), sub-millisecond and monotonic).
 *
 * By default it runs on its own worker thread, with its own event loop and its own server, like a real receiver
 * is its own service: an arrival is timestamped by a loop that does nothing else, so the bench's load generator
 * (building and sending batches, reading answers) cannot add its stalls to the measured lateness. `inProcess`
 * runs the same code on the caller's loop instead, to show how much the generator's stalls would add.
 *
 * Lateness is recorded for the first delivery of each deduplication key (a re-delivery is a duplicate, not a
 * second sample); "early" counts every delivery, first or not, that arrives before its scheduled time.
 *
 * Before it says it listens, the receiver sends itself `warmUpRequests` deliveries (default
 * receiverWarmUpRequests, over receiverWarmUpConnections keep-alive connections) and then forgets them: a real
 * receiver is a long-running service, and a fresh one parses and answers its first requests several times slower
 * (lazy compilation), which a burst of 20 would otherwise measure as the node's lateness.
 */
import * as http from 'node:http';
import { Worker } from 'node:worker_threads';

export interface ReceiverOptions {
  /** 0 (default) picks a free port. */
  port?: number;
  /** Only deliveries whose job id starts with this count as this run's; the others are counted as foreign. */
  jobIdPrefix?: string;
  /** Capacity hint for the sample buffers. */
  expectedDeliveries?: number;
  /** Run on the caller's event loop instead of a worker thread of its own (arrivals then wait for that loop). */
  inProcess?: boolean;
  /** Deliveries the receiver sends itself and forgets before it is used (default receiverWarmUpRequests; 0: none). */
  warmUpRequests?: number;
}

/** The receiver's own warm-up (see the header): enough for its request path to be compiled. */
export const receiverWarmUpRequests = 600;
export const receiverWarmUpConnections = 20;

export type ReceiverMode = 'thread' | 'in-process';

export interface ReceiverStats {
  /** Deliveries of this run's jobs, duplicates included. */
  deliveries: number;
  /** Distinct deduplication keys seen. */
  uniqueKeys: number;
  /** Deliveries whose deduplication key had already been seen. */
  duplicates: number;
  /** Deliveries that arrived before their X-Punctual-Scheduled-At. */
  early: number;
  /** Deliveries without a usable X-Deduplication-Key or X-Punctual-Scheduled-At header. */
  malformed: number;
  /** Deliveries of jobs outside this run (another run's leftovers, when --server points at a shared node). */
  foreign: number;
  firstArrivalMs: number | null;
  lastArrivalMs: number | null;
  /** Lateness (arrival - scheduled, ms) of the first delivery of each key, in arrival order (a copy). */
  lateness: Float64Array;
  /** The receiver's own warm-up deliveries answered before it was used (counted nowhere else). */
  warmUpAnswered: number;
}

/** What the drain loop polls: cheap to ask for every few milliseconds. */
export interface ReceiverProgress {
  /** Distinct job ids of this run delivered so far. */
  deliveredJobs: number;
  lastArrivalMs: number | null;
}

export interface CallbackReceiver {
  /** Base URL of the receiver, e.g. http://127.0.0.1:34567/cb */
  readonly url: string;
  readonly port: number;
  readonly mode: ReceiverMode;
  stats(): Promise<ReceiverStats>;
  progress(): Promise<ReceiverProgress>;
  /** How many of jobIds were never delivered. */
  countMissing(jobIds: Iterable<string>): Promise<number>;
  /** The first `limit` of jobIds never delivered, in order. */
  missingIds(jobIds: Iterable<string>, limit: number): Promise<string[]>;
  /** Distinct job ids of this run delivered so far. */
  deliveredJobCount(): Promise<number>;
  /** Resolves true once deliveredJobCount() >= count, false when timeoutMs passes first. */
  waitForJobs(count: number, timeoutMs: number): Promise<boolean>;
  close(): Promise<void>;
}

/** Epoch milliseconds with sub-millisecond precision. */
export function nowPreciseMs(): number {
  return globalThis.performance.timeOrigin + globalThis.performance.now();
}

interface ReceiverConfig {
  port: number;
  jobIdPrefix: string;
  capacity: number;
  warmUpRequests: number;
  warmUpConnections: number;
}

type ReceiverCall =
  | { op: 'progress' }
  | { op: 'stats' }
  | { op: 'missing'; jobIds: string[]; limit: number }
  | { op: 'close' };
type ReceiverRequest = ReceiverCall & { id: number };

interface MissingReply {
  count: number;
  ids: string[];
}

type ReceiverMessage =
  | { type: 'listening'; port: number }
  | { type: 'failed'; message: string }
  | { type: 'reply'; id: number; value: unknown };

type Send = (message: ReceiverMessage, transfer?: ArrayBuffer[]) => void;

/**
 * The whole receiver: starts the server, records deliveries, answers requests. Its TEXT is the worker's source
 * (see workerSource), so it must stay self-contained: no imports, no module-level names, only its parameters
 * and globals (globalThis.performance, Map, Set, Float64Array). Returns the request handler. The thread-mode
 * tests fail if it reaches outside (vitest rewrites imported names, so the worker would not find them).
 */
function receiverMain(
  httpModule: typeof http,
  config: ReceiverConfig,
  send: Send,
): (request: ReceiverRequest) => void {
  const keyCounts = new Map<string, number>();
  const jobIds = new Set<string>();
  let lateness = new Float64Array(Math.max(1, config.capacity));
  let latenessCount = 0;
  const counts = { deliveries: 0, duplicates: 0, early: 0, malformed: 0, foreign: 0 };
  let firstArrivalMs: number | null = null;
  let lastArrivalMs: number | null = null;
  let warmUpAnswered = 0;
  /** What the warm-up recorded is forgotten before the receiver says it listens. */
  const forget = (): void => {
    keyCounts.clear();
    jobIds.clear();
    latenessCount = 0;
    counts.deliveries = counts.duplicates = counts.early = counts.malformed = counts.foreign = 0;
    firstArrivalMs = lastArrivalMs = null;
  };

  const header = (value: string | string[] | undefined): string | null =>
    typeof value === 'string' ? value : Array.isArray(value) && value.length > 0 ? value[0] : null;

  const record = (headers: Record<string, string | string[] | undefined>, arrivalMs: number): void => {
    const key = header(headers['x-deduplication-key']);
    const scheduledMs = Number(header(headers['x-punctual-scheduled-at']));
    if (key === null || !Number.isFinite(scheduledMs)) return void counts.malformed++;
    // The job id is also the deduplication key `{job_id}:{scheduled_at_ms}` minus its last ':' part.
    const colon = key.lastIndexOf(':');
    const jobId = header(headers['x-punctual-job-id']) ?? (colon < 0 ? key : key.slice(0, colon));
    if (!jobId.startsWith(config.jobIdPrefix)) return void counts.foreign++;
    counts.deliveries++;
    if (firstArrivalMs === null) firstArrivalMs = arrivalMs;
    lastArrivalMs = arrivalMs;
    if (arrivalMs < scheduledMs) counts.early++;
    const seen = keyCounts.get(key) ?? 0;
    keyCounts.set(key, seen + 1);
    if (seen > 0) return void counts.duplicates++;
    jobIds.add(jobId);
    if (latenessCount === lateness.length) {
      const grown = new Float64Array(lateness.length * 2);
      grown.set(lateness);
      lateness = grown;
    }
    lateness[latenessCount++] = arrivalMs - scheduledMs;
  };

  const server = httpModule.createServer({ keepAlive: true, noDelay: true }, (req, res) => {
    // globalThis: a module-level import would be a name the worker's copy of this text does not have.
    const arrivalMs = globalThis.performance.timeOrigin + globalThis.performance.now();
    record(req.headers, arrivalMs);
    // Drain the body so the keep-alive connection stays usable, but answer without waiting for it.
    req.resume();
    res.writeHead(200, { 'content-length': '0' });
    res.end();
  });
  // The dispatcher keeps connections open between bursts; never time them out during a run.
  server.keepAliveTimeout = 120_000;
  server.headersTimeout = 125_000;
  server.requestTimeout = 0;
  server.once('error', (err) => send({ type: 'failed', message: err.message }));
  // The warm-up's deliveries take the same path as a run's (this run's job id prefix, the same headers and body).
  const warmUp = (port: number, done: () => void): void => {
    const agent = new httpModule.Agent({ keepAlive: true, maxSockets: Math.max(1, config.warmUpConnections) });
    let left = config.warmUpRequests;
    const finish = (): void => {
      if (--left > 0) return;
      warmUpAnswered = counts.deliveries;
      agent.destroy();
      forget();
      done();
    };
    if (left <= 0) return done();
    for (let i = 0; i < config.warmUpRequests; i++) {
      const scheduledMs = Math.floor(globalThis.performance.timeOrigin + globalThis.performance.now());
      const jobId = `${config.jobIdPrefix}warm-up-${i}`;
      let settled = false;
      const once = (): void => {
        if (!settled) (settled = true), finish();
      };
      const req = httpModule.request({
        host: '127.0.0.1', port, path: '/cb', method: 'POST', agent,
        headers: {
          'content-type': 'application/json', 'x-deduplication-key': `${jobId}:${scheduledMs}`, 'x-punctual-job-id': jobId,
          'x-punctual-scheduled-at': String(scheduledMs), 'x-punctual-attempt': '1', 'x-punctual-fencing-token': '0.1',
        },
      }, (res) => {
        res.resume();
        res.on('end', once);
        res.on('error', once);
      });
      // A warm-up request that fails only leaves the receiver less warm.
      req.on('error', once);
      req.end('{}');
    }
  };
  server.listen({ host: '127.0.0.1', port: config.port, backlog: 4096 }, () => {
    const address = server.address();
    const port = typeof address === 'object' && address !== null ? address.port : 0;
    warmUp(port, () => send({ type: 'listening', port }));
  });

  const missing = (ids: string[], limit: number): MissingReply => {
    const reply: MissingReply = { count: 0, ids: [] };
    for (const id of ids) {
      if (jobIds.has(id)) continue;
      reply.count++;
      if (reply.ids.length < limit) reply.ids.push(id);
    }
    return reply;
  };

  return (request) => {
    const reply = (value: unknown, transfer?: ArrayBuffer[]): void =>
      send({ type: 'reply', id: request.id, value }, transfer);
    switch (request.op) {
      case 'progress':
        return reply({ deliveredJobs: jobIds.size, lastArrivalMs });
      case 'stats': {
        const samples = lateness.slice(0, latenessCount);
        const stats: ReceiverStats = {
          ...counts, uniqueKeys: keyCounts.size, firstArrivalMs, lastArrivalMs, lateness: samples, warmUpAnswered,
        };
        return reply(stats, [samples.buffer]);
      }
      case 'missing':
        return reply(missing(request.jobIds, request.limit));
      case 'close':
        server.closeAllConnections();
        server.close(() => reply(null));
    }
  };
}

/** An eval'd CommonJS script, like src/store/checkpointer.ts: it runs the same from dist, vitest and the executable. */
const workerSource = `
const { parentPort, workerData } = require('node:worker_threads');
const receiverMain = (${receiverMain.toString()});
const send = (m, transfer) => parentPort.postMessage(m, transfer);
parentPort.on('message', receiverMain(require('node:http'), workerData, send));
`;

/** Request/reply over either transport; the first message ('listening' or 'failed') settles `ready`. */
class Channel {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private settleReady: { resolve: (port: number) => void; reject: (e: Error) => void } | null = null;
  /** Set once the receiver died (its thread exited or failed): every later call rejects with it at once. */
  private failure: Error | null = null;
  readonly ready: Promise<number>;
  post: (request: ReceiverRequest) => void = () => undefined;

  constructor() {
    this.ready = new Promise((resolve, reject) => (this.settleReady = { resolve, reject }));
  }

  onMessage(message: ReceiverMessage): void {
    if (message.type === 'listening') this.settleReady?.resolve(message.port);
    else if (message.type === 'failed') this.fail(new Error(`bench receiver: ${message.message}`));
    else {
      this.pending.get(message.id)?.resolve(message.value);
      this.pending.delete(message.id);
    }
  }

  fail(err: Error): void {
    this.failure ??= err;
    this.settleReady?.reject(err);
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
  }

  call<T>(request: ReceiverCall): Promise<T> {
    if (this.failure !== null) return Promise.reject(this.failure);
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.post({ ...request, id });
    });
  }
}

function startThread(channel: Channel, config: ReceiverConfig): () => Promise<void> {
  const worker = new Worker(workerSource, { eval: true, workerData: config });
  worker.on('message', (m: ReceiverMessage) => channel.onMessage(m));
  worker.on('error', (err) => channel.fail(err));
  worker.on('exit', (code) => channel.fail(new Error(`bench receiver thread exited (code ${code})`)));
  channel.post = (request) => worker.postMessage(request);
  return async () => {
    worker.removeAllListeners('exit'); // a requested exit is not a failure
    await worker.terminate();
  };
}

function startInProcess(channel: Channel, config: ReceiverConfig): () => Promise<void> {
  const handle = receiverMain(http, config, (m) => channel.onMessage(m));
  channel.post = handle;
  return async () => undefined;
}

export async function startReceiver(options: ReceiverOptions = {}): Promise<CallbackReceiver> {
  const config: ReceiverConfig = {
    port: options.port ?? 0,
    jobIdPrefix: options.jobIdPrefix ?? '',
    capacity: options.expectedDeliveries ?? 1024,
    warmUpRequests: options.warmUpRequests ?? receiverWarmUpRequests,
    warmUpConnections: receiverWarmUpConnections,
  };
  const mode: ReceiverMode = options.inProcess ? 'in-process' : 'thread';
  const channel = new Channel();
  const stop = mode === 'thread' ? startThread(channel, config) : startInProcess(channel, config);
  let port: number;
  try {
    port = await channel.ready;
  } catch (err) {
    await stop();
    throw err;
  }
  const progress = (): Promise<ReceiverProgress> => channel.call({ op: 'progress' });
  const missing = (jobIds: Iterable<string>, limit: number): Promise<MissingReply> =>
    channel.call({ op: 'missing', jobIds: Array.from(jobIds), limit });
  return {
    url: `http://127.0.0.1:${port}/cb`,
    port,
    mode,
    stats: () => channel.call({ op: 'stats' }),
    progress,
    countMissing: async (jobIds) => (await missing(jobIds, 0)).count,
    missingIds: async (jobIds, limit) => (await missing(jobIds, limit)).ids,
    deliveredJobCount: async () => (await progress()).deliveredJobs,
    waitForJobs: (count, timeoutMs) => waitUntil(async () => (await progress()).deliveredJobs >= count, timeoutMs),
    close: async () => {
      await channel.call({ op: 'close' });
      await stop();
    },
  };
}

/** Polls cond every 20 ms (waiting for each answer); true as soon as it holds, false after timeoutMs. */
export async function waitUntil(cond: () => boolean | Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const deadlineMs = nowPreciseMs() + timeoutMs;
  for (;;) {
    if (await cond()) return true;
    if (nowPreciseMs() >= deadlineMs) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
