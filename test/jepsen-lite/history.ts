/**
 * The Jepsen-style history: every client operation is an invoke followed by exactly one completion, ok, fail
 * (definitely did not happen: a 4xx answer) or info (outcome unknown: a 5xx, a timeout, a connection error).
 * Times are on the harness clock (harnessNowMs). Deliveries are what the callback receiver saw.
 */

export type OpType = 'invoke' | 'ok' | 'fail' | 'info';
export type OpF = 'create' | 'cancel' | 'pause' | 'resume' | 'read';

/** What the harness knows about a job it asked to create (the checker derives expected occurrences from it). */
export type JobPlan =
  | { kind: 'once'; atMs: number }
  | { kind: 'delay'; delayMs: number }
  | { kind: 'every'; everyMs: number; startAtMs: number; endAtMs: number; misfire: Misfire }
  | { kind: 'cron'; periodMs: number; expr: string; endAtMs: number; misfire: Misfire }
  | { kind: 'invalid'; reason: string };

export type Misfire = 'fire_once' | 'skip' | 'fire_all';

/** One client operation with its completion (the invoke/complete pair folded into one record). */
export interface Op {
  index: number;
  /** The client (Jepsen "process") that ran it; ops of one process never overlap. */
  process: number;
  f: OpF;
  /** The job id. */
  key: string;
  node: string;
  invokeMs: number;
  /** Absent while in flight; info ops keep the time the client gave up. */
  completeMs?: number;
  type: Exclude<OpType, 'invoke'> | 'invoke';
  /** ok: the job state the answer showed (reads, cancel/pause/resume); 'absent' for a read that got 404. */
  state?: ObservedState;
  /** fail: the problem+json code (conflict, not_found, ...); info: the reason. */
  error?: string;
  status?: number;
  /** Set for the items of one POST /v1/jobs:batch. */
  batch?: number;
}

/** A job state as the API shows it, folded to what the model distinguishes (QUEUED shows as pending). */
export type ObservedState = 'absent' | 'pending' | 'running' | 'done' | 'paused' | 'cancelled';

export function observe(apiState: unknown): ObservedState {
  switch (apiState) {
    case 'PENDING':
    case 'QUEUED':
      return 'pending';
    case 'RUNNING':
      return 'running';
    case 'SUCCEEDED':
    case 'FAILED':
      return 'done';
    case 'PAUSED':
      return 'paused';
    case 'CANCELLED':
      return 'cancelled';
    default:
      throw new Error(`unknown job state ${JSON.stringify(apiState)}`);
  }
}

export interface Delivery {
  key: string;
  jobId: string;
  scheduledAtMs: number;
  attempt: number;
  fencingToken: string;
  arrivalMs: number;
}

/** A fault the nemesis injected: [startMs, healMs), then recoveredMs when every node answered /readyz again. */
export interface FaultWindow {
  kind: string;
  detail: string;
  startMs: number;
  healMs: number;
  recoveredMs: number | null;
}

export interface JobInfo {
  id: string;
  plan: JobPlan;
}

/** Everything a run produced that the checker reads; also what the unit tests build by hand. */
export interface RunHistory {
  ops: Op[];
  deliveries: Delivery[];
  jobs: JobInfo[];
  faults: FaultWindow[];
  /** The largest positive clock offset any node ran with (an early delivery within it is allowed). */
  clockToleranceMs: number;
  /** The largest negative clock offset, as a positive number (a delay_ms job may be scheduled that much earlier). */
  clockBehindMs: number;
  /** The product's misfire threshold (limits.misfireThresholdMs). */
  misfireThresholdMs: number;
  startMs: number;
  endMs: number;
}

/** Records ops as they happen; the harness clock is the only time source. */
export class HistoryRecorder {
  readonly ops: Op[] = [];
  constructor(private readonly nowMs: () => number) {}

  invoke(process: number, f: OpF, key: string, node: string, batch?: number): Op {
    const op: Op = { index: this.ops.length, process, f, key, node, invokeMs: this.nowMs(), type: 'invoke' };
    if (batch !== undefined) op.batch = batch;
    this.ops.push(op);
    return op;
  }

  complete(op: Op, type: 'ok' | 'fail' | 'info', fields: Partial<Pick<Op, 'state' | 'error' | 'status'>> = {}): Op {
    op.type = type;
    op.completeMs = this.nowMs();
    Object.assign(op, fields);
    return op;
  }
}

/** The harness clock: the same system clock the nodes read (Date.now), so arrival and fire times compare. */
export function harnessNowMs(): number {
  return Date.now();
}

export function sleepMs(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}
