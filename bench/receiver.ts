/**
 * The bench's callback receiver: a node:http server on 127.0.0.1 that answers every delivery with 200 and an
 * empty body at once, and records per delivery its X-Deduplication-Key, X-Punctual-Scheduled-At and the arrival
 * time in fractional epoch ms (performance.timeOrigin + performance.now(), sub-millisecond and monotonic).
 *
 * Lateness is recorded for the first delivery of each deduplication key (a re-delivery is a duplicate, not a
 * second sample); "early" counts every delivery, first or not, that arrives before its scheduled time.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { SampleBuffer } from './histogram.js';

export interface ReceiverOptions {
  /** 0 (default) picks a free port. */
  port?: number;
  /** Only deliveries whose job id starts with this count as this run's; the others are counted as foreign. */
  jobIdPrefix?: string;
  /** Capacity hint for the sample buffers. */
  expectedDeliveries?: number;
}

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
  /** Lateness (arrival - scheduled, ms) of the first delivery of each key. */
  lateness: SampleBuffer;
}

export interface CallbackReceiver {
  /** Base URL of the receiver, e.g. http://127.0.0.1:34567/cb */
  readonly url: string;
  readonly port: number;
  stats(): ReceiverStats;
  /** How many of jobIds were never delivered. */
  countMissing(jobIds: Iterable<string>): number;
  /** The first `limit` of jobIds never delivered, in order. */
  missingIds(jobIds: Iterable<string>, limit: number): string[];
  /** Distinct job ids of this run delivered so far. */
  deliveredJobCount(): number;
  /** Resolves true once deliveredJobCount() >= count, false when timeoutMs passes first. */
  waitForJobs(count: number, timeoutMs: number): Promise<boolean>;
  close(): Promise<void>;
}

/** Epoch milliseconds with sub-millisecond precision. */
export function nowPreciseMs(): number {
  return performance.timeOrigin + performance.now();
}

class Recorder {
  readonly keyCounts = new Map<string, number>();
  readonly jobIds = new Set<string>();
  readonly lateness: SampleBuffer;
  deliveries = 0;
  duplicates = 0;
  early = 0;
  malformed = 0;
  foreign = 0;
  firstArrivalMs: number | null = null;
  lastArrivalMs: number | null = null;

  constructor(
    private readonly jobIdPrefix: string,
    capacity: number,
  ) {
    this.lateness = new SampleBuffer(capacity);
  }

  record(req: IncomingMessage, arrivalMs: number): void {
    const key = headerValue(req, 'x-deduplication-key');
    const scheduledMs = Number(headerValue(req, 'x-punctual-scheduled-at'));
    if (key === null || !Number.isFinite(scheduledMs)) {
      this.malformed++;
      return;
    }
    const jobId = headerValue(req, 'x-punctual-job-id') ?? jobIdOfKey(key);
    if (!jobId.startsWith(this.jobIdPrefix)) {
      this.foreign++;
      return;
    }
    this.deliveries++;
    if (this.firstArrivalMs === null) this.firstArrivalMs = arrivalMs;
    this.lastArrivalMs = arrivalMs;
    if (arrivalMs < scheduledMs) this.early++;
    const seen = this.keyCounts.get(key) ?? 0;
    this.keyCounts.set(key, seen + 1);
    if (seen > 0) {
      this.duplicates++;
      return;
    }
    this.jobIds.add(jobId);
    this.lateness.push(arrivalMs - scheduledMs);
  }
}

function headerValue(req: IncomingMessage, name: string): string | null {
  const value = req.headers[name];
  if (typeof value === 'string') return value;
  return Array.isArray(value) && value.length > 0 ? value[0] : null;
}

/** The job id inside a deduplication key `{job_id}:{scheduled_at_ms}` (job ids may contain ':'). */
export function jobIdOfKey(key: string): string {
  const colon = key.lastIndexOf(':');
  return colon < 0 ? key : key.slice(0, colon);
}

export async function startReceiver(options: ReceiverOptions = {}): Promise<CallbackReceiver> {
  const recorder = new Recorder(options.jobIdPrefix ?? '', options.expectedDeliveries ?? 1024);
  const server = createServer({ keepAlive: true, noDelay: true }, (req: IncomingMessage, res: ServerResponse) => {
    const arrivalMs = nowPreciseMs();
    recorder.record(req, arrivalMs);
    // Drain the body so the keep-alive connection stays usable, but answer without waiting for it.
    req.resume();
    res.writeHead(200, { 'content-length': '0' });
    res.end();
  });
  // The dispatcher keeps connections open between bursts; never time them out during a run.
  server.keepAliveTimeout = 120_000;
  server.headersTimeout = 125_000;
  server.requestTimeout = 0;
  await listen(server, options.port ?? 0);
  const port = (server.address() as AddressInfo).port;
  return makeReceiverHandle(server, port, recorder);
}

function listen(server: Server, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: '127.0.0.1', port, backlog: 4096 }, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

function makeReceiverHandle(server: Server, port: number, recorder: Recorder): CallbackReceiver {
  return {
    url: `http://127.0.0.1:${port}/cb`,
    port,
    stats: () => ({
      deliveries: recorder.deliveries,
      uniqueKeys: recorder.keyCounts.size,
      duplicates: recorder.duplicates,
      early: recorder.early,
      malformed: recorder.malformed,
      foreign: recorder.foreign,
      firstArrivalMs: recorder.firstArrivalMs,
      lastArrivalMs: recorder.lastArrivalMs,
      lateness: recorder.lateness,
    }),
    countMissing: (jobIds) => {
      let missing = 0;
      for (const id of jobIds) if (!recorder.jobIds.has(id)) missing++;
      return missing;
    },
    missingIds: (jobIds, limit) => {
      const ids: string[] = [];
      for (const id of jobIds) {
        if (ids.length >= limit) break;
        if (!recorder.jobIds.has(id)) ids.push(id);
      }
      return ids;
    },
    deliveredJobCount: () => recorder.jobIds.size,
    waitForJobs: (count, timeoutMs) => waitUntil(() => recorder.jobIds.size >= count, timeoutMs),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Polls cond every 20 ms; true as soon as it holds, false after timeoutMs. */
export function waitUntil(cond: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadlineMs = nowPreciseMs() + timeoutMs;
  return new Promise((resolve) => {
    const check = (): void => {
      if (cond()) return resolve(true);
      if (nowPreciseMs() >= deadlineMs) return resolve(false);
      setTimeout(check, 20);
    };
    check();
  });
}
