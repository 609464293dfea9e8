/**
 * The seeded client workload of the whole-node simulator: creates (one-off now / at / after, every_ms, cron),
 * cancels, pauses, resumes, runs and patches, each sent to some node and remembered with the true time it was
 * acknowledged (or not). Operations are in a neutral form; `jobSpecOf` builds the scheduler's JobSpec the way the
 * HTTP layer would, with the receiving node's wall clock for "now" and "after".
 */
import type { Prng } from '../../../src/core/prng.js';
import type { JobPatch, JobSpec, MisfirePolicy, OverlapPolicy, ScheduleSpec } from '../../../src/scheduler/types.js';
import { SimReceivers } from './receivers.js';

export type ScheduleOp =
  | { readonly kind: 'now' }
  /** Absolute time, from the client's clock (true time) when the op was made. */
  | { readonly kind: 'at'; readonly atMs: number }
  | { readonly kind: 'after'; readonly delayMs: number }
  | { readonly kind: 'every'; readonly everyMs: number }
  | { readonly kind: 'cron'; readonly cron: string };

export interface CreateOp {
  readonly kind: 'create';
  readonly jobId: string;
  readonly schedule: ScheduleOp;
  readonly receiver: number;
  readonly timeoutMs: number;
  readonly maxAttempts: number;
  readonly maxRuns: number;
  readonly misfire: MisfirePolicy;
  readonly overlap: OverlapPolicy;
}

export type ClientOp =
  | CreateOp
  | { readonly kind: 'cancel' | 'pause' | 'resume'; readonly jobId: string }
  | { readonly kind: 'run'; readonly jobId: string; readonly runKey: string }
  | { readonly kind: 'patch'; readonly jobId: string; readonly schedule: ScheduleOp };

export type OpOutcome = 'ok' | 'refused' | 'unknown';

/** One operation as the client lived it. */
export interface OpRecord {
  readonly seq: number;
  readonly op: ClientOp;
  readonly node: string;
  readonly issuedMs: number;
  /** Pending until the node answers or the client gives up (unknown). */
  outcome: OpOutcome | 'pending';
  ackMs: number | null;
  /** run: the runAtMs the node answered. */
  runAtMs?: number;
  /** The reason of a refusal (an error code), for the trace. */
  reason?: string;
}

export class Workload {
  readonly ops: OpRecord[] = [];
  private jobSeq = 0;
  private runSeq = 0;
  /** Job ids created (whatever the outcome): targets of the other operations. */
  private readonly jobs: string[] = [];

  constructor(
    private readonly rand: Prng,
    private readonly receivers: number,
  ) {}

  /** The next operation, made at true time `nowMs`. */
  next(nowMs: number): ClientOp {
    const r = this.rand;
    const roll = r.nextFloat();
    if (this.jobs.length === 0 || roll < 0.45) return this.create(nowMs);
    const jobId = this.jobs[this.jobs.length - 1 - r.int(Math.min(this.jobs.length, 12))]!;
    if (roll < 0.6) return { kind: 'cancel', jobId };
    if (roll < 0.7) return { kind: 'pause', jobId };
    if (roll < 0.8) return { kind: 'resume', jobId };
    if (roll < 0.9) return { kind: 'run', jobId, runKey: `rk${++this.runSeq}` };
    return { kind: 'patch', jobId, schedule: this.schedule(nowMs) };
  }

  record(op: ClientOp, node: string, issuedMs: number): OpRecord {
    const rec: OpRecord = { seq: this.ops.length, op, node, issuedMs, outcome: 'pending', ackMs: null };
    this.ops.push(rec);
    return rec;
  }

  private create(nowMs: number): CreateOp {
    const r = this.rand;
    const jobId = `j${++this.jobSeq}`;
    this.jobs.push(jobId);
    const schedule = this.schedule(nowMs);
    const recurring = schedule.kind === 'every' || schedule.kind === 'cron';
    return {
      kind: 'create',
      jobId,
      schedule,
      receiver: r.int(this.receivers),
      timeoutMs: 500 + r.int(2500),
      maxAttempts: 1 + r.int(4),
      maxRuns: recurring && r.nextFloat() < 0.5 ? 2 + r.int(8) : 0,
      misfire: (['fire_once', 'skip', 'fire_all'] as const)[r.int(3)]!,
      overlap: (['allow', 'skip', 'buffer_one'] as const)[r.int(3)]!,
    };
  }

  private schedule(nowMs: number): ScheduleOp {
    const r = this.rand;
    switch (r.int(5)) {
      case 0:
        return { kind: 'now' };
      case 1:
        return { kind: 'at', atMs: nowMs + r.int(15_000) - 1_000 };
      case 2:
        return { kind: 'after', delayMs: r.int(10_000) };
      case 3:
        return { kind: 'every', everyMs: 300 + r.int(4_000) };
      default:
        return { kind: 'cron', cron: ['*/2 * * * * *', '*/5 * * * * *', '* * * * * *', '0,30 * * * * *'][r.int(4)]! };
    }
  }
}

const enc = new TextEncoder();

/** The schedule as a command carries it; `nodeNowMs` is the receiving node's wall clock (what "now" means there). */
export function scheduleSpecOf(s: ScheduleOp, nodeNowMs: number): ScheduleSpec {
  switch (s.kind) {
    case 'now':
      return { kind: 'once', atMs: nodeNowMs };
    case 'at':
      return { kind: 'once', atMs: s.atMs };
    case 'after':
      return { kind: 'once', atMs: nodeNowMs + s.delayMs };
    case 'every':
      return { kind: 'every', everyMs: s.everyMs, startAtMs: null };
    case 'cron':
      return { kind: 'cron', cron: s.cron, timezone: 'UTC', startAtMs: null };
  }
}

/** The JobSpec the HTTP layer would build for `op` on a node whose wall clock reads `nodeNowMs`. */
export function jobSpecOf(op: CreateOp, nodeNowMs: number): JobSpec {
  return {
    id: op.jobId,
    task: null,
    callback: {
      url: SimReceivers.url(op.receiver),
      method: 'POST',
      headers: {},
      timeoutMs: op.timeoutMs,
      retry: { maxAttempts: op.maxAttempts, initialBackoffMs: 200, maxBackoffMs: 2_000, multiplier: 2, jitter: false },
      signingSecret: null,
      maxConcurrency: 4,
    },
    payload: enc.encode('{}'),
    payloadEncoding: 'json',
    schedule: scheduleSpecOf(op.schedule, nodeNowMs),
    endAtMs: null,
    maxRuns: op.maxRuns,
    misfire: op.misfire,
    misfireThresholdMs: 5_000,
    overlap: op.overlap,
    metadata: null,
    requestDigest: `digest-${op.jobId}`,
    idempotencyKey: null,
  };
}

export function jobPatchOf(op: Extract<ClientOp, { kind: 'patch' }>, nodeNowMs: number): JobPatch {
  return { schedule: scheduleSpecOf(op.schedule, nodeNowMs) };
}
