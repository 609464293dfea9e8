/**
 * The boundary between the client API (src/http) and the node (src/node): the HTTP layer parses, validates and
 * normalizes a request into these calls; the node (src/node/service.ts) proposes commands, waits for them to
 * apply, and answers. It lives here, with its caller, so that src/http never imports src/node: the node builds
 * the HTTP server, not the other way round. Every method throws PunctualError (src/core/errors.ts) for an
 * operating error.
 */
import type { PunctualError } from '../core/errors.js';
import type {
  CalendarRecord,
  CallbackSpec,
  ExecutionRecord,
  JobListQuery,
  JobPatch,
  JobSpec,
  JobView,
  Schedule,
  TaskRecord,
} from '../scheduler/types.js';

export type CreateJobResult =
  | { ok: true; job: JobView; created: boolean }
  | { ok: false; id: string | null; error: PunctualError };

/** What PUT /v1/calendars/{name} sets (the node adds the name and the times). */
export type CalendarBody = Pick<CalendarRecord, 'timezone' | 'dates' | 'ranges' | 'description'>;

export interface ClusterView {
  nodeId: string;
  nodes: Array<{ id: string; peerAddr: string; apiAddr: string; reachable: boolean }>;
  shards: Array<{
    id: number;
    leader: string | null;
    term: number;
    commitIndex: number;
    appliedIndex: number;
    members: string[];
  }>;
}

/** The scheduler's clock as GET /v1/clock shows it (docs/api.md "The clock"). */
export interface ClockView {
  mode: 'system' | 'manual';
  nowMs: number;
}

/** What POST /v1/clock:advance answers: where the clock is, the attempts sent, false when a bound stopped it. */
export interface ClockAdvanceResult {
  nowMs: number;
  fired: number;
  complete: boolean;
}

/** GET /v1/overview (the dashboard): this node's figures; see src/metrics NodeMetrics.overview. */
export interface OverviewData {
  jobs: Record<string, number>;
  /** Callback attempts per interval over the last hour, oldest first; the last one is the current, partial. */
  callbacks: Array<{ startMs: number; sent: number; failed: number }>;
  callbackIntervalMs: number;
  /** Fire lateness since start, per bucket (`leMs` null: the bucket above the largest bound). */
  lateness: { buckets: Array<{ leMs: number | null; count: number }>; count: number; sumMs: number };
}

/** GET /v1/due-profile: PENDING occurrences per second from `fromMs`, and the node's measured drain rate. */
export interface DueProfile {
  fromMs: number;
  perSecond: number[];
  drainRatePerS: number | null;
}

/** The admission report of a submission: its hottest instant, when its delivery would spread past the report threshold. */
export interface HotInstantReport {
  atMs: number;
  due: number;
  spreadMs: number;
  drainRatePerS: number;
  /** false: no drain rate measured yet, limits.drainRatePerSAssumed was used. */
  measured: boolean;
}

export interface SchedulerApi {
  /** The due profile (a node; absent in test doubles). */
  dueProfile?(seconds: number): DueProfile;
  /** The hottest of these due instants, when delivering it would take longer than the report threshold; else null. */
  hotInstant?(dueAtMs: readonly number[]): HotInstantReport | null;
  /** Epoch ms now, from the node's clock (the proposer computes every time-dependent value with it). */
  nowMs(): number;
  readonly nodeId: string;

  putTask(name: string, spec: CallbackSpec): Promise<{ task: TaskRecord; created: boolean }>;
  getTask(name: string): Promise<TaskRecord>;
  listTasks(): Promise<TaskRecord[]>;
  deleteTask(name: string): Promise<void>;

  putCalendar(name: string, body: CalendarBody): Promise<{ calendar: CalendarRecord; created: boolean }>;
  getCalendar(name: string): Promise<CalendarRecord>;
  listCalendars(): Promise<CalendarRecord[]>;
  /** Allowed while jobs name it: their later occurrences exclude nothing for it. */
  deleteCalendar(name: string): Promise<void>;

  /** Creates jobs (one or a batch); each succeeds or fails on its own, results in input order. */
  createJobs(specs: JobSpec[]): Promise<CreateJobResult[]>;
  getJob(id: string): Promise<JobView>;
  listJobs(query: JobListQuery): Promise<{ jobs: JobView[]; nextCursor: string | null }>;
  cancelJob(id: string): Promise<JobView>;
  pauseJob(id: string): Promise<JobView>;
  resumeJob(id: string): Promise<JobView>;
  /**
   * Fires one extra run now (an occurrence at the node's current time). `runKey` (the client's Idempotency-Key)
   * makes a repeat answer the first run; without it the node that took the request names the run itself.
   */
  runJob(id: string, runKey?: string | null): Promise<JobView>;
  patchJob(id: string, patch: JobPatch): Promise<JobView>;
  listExecutions(
    id: string,
    page: { limit: number; cursor: string | null },
  ): Promise<{ executions: ExecutionRecord[]; nextCursor: string | null }>;
  /** Next fire times of a schedule after fromMs, past the dates its `exclude` calendars exclude. */
  previewSchedule(schedule: Schedule, fromMs: number, count: number): number[];

  cluster(): Promise<ClusterView>;
  /** /readyz: every shard has a known leader and this node has caught up. */
  readiness(): { ready: boolean; reason: string | null };

  /** GET /v1/overview; absent: 503 (a node without metrics). */
  overview?(): Promise<OverviewData>;

  /** GET /v1/clock; absent: the system clock at nowMs(). */
  clockView?(): ClockView;
  /** POST /v1/clock:advance (`serve --clock manual` only: a conflict on the system clock). */
  advanceClock?(req: { byMs: number } | { toMs: number }): Promise<ClockAdvanceResult>;
}
