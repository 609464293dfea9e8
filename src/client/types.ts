/**
 * The JSON of the HTTP API (docs/api.md) as TypeScript types: field names exactly as on the wire (snake_case),
 * times as RFC 3339 strings on output. Input types accept what the API accepts (a time may also be epoch ms).
 */

/** RFC 3339 with any offset, or an integer of epoch milliseconds (input); RFC 3339 UTC with ms (output). */
export type TimeInput = string | number;

export type JobState = 'PENDING' | 'QUEUED' | 'RUNNING' | 'SUCCEEDED' | 'FAILED' | 'PAUSED' | 'CANCELLED';
export type ExecutionState = 'QUEUED' | 'RUNNING' | 'SUCCEEDED' | 'FAILED' | 'CANCELLED';
export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
export type Misfire = 'fire_once' | 'skip' | 'fire_all';
export type Overlap = 'allow' | 'skip' | 'buffer_one';

export interface DstPolicy {
  gap?: 'shift_forward' | 'skip';
  repeat?: 'first' | 'last' | 'both';
}

/** One of the schedule forms of docs/api.md (Schedules); absent or `{}` means now. */
export type ScheduleInput =
  | Record<string, never>
  | { at: TimeInput }
  | { delay_ms: number }
  | { cron: string; timezone?: string; start_at?: TimeInput; dst?: DstPolicy; spread_ms?: number; exclude?: string[] }
  | { every_ms: number; start_at?: TimeInput; spread_ms?: number; exclude?: string[] };

/** A schedule as answered: always absolute (`delay_ms` reads back as `at`). */
export type Schedule =
  | { at: string }
  | {
      cron: string;
      timezone: string;
      start_at?: string;
      dst?: Required<DstPolicy>;
      spread_ms?: number;
      spread_offset_ms?: number;
      exclude?: string[];
    }
  | { every_ms: number; start_at: string; spread_ms?: number; spread_offset_ms?: number; exclude?: string[] };

export interface RetryPolicy {
  max_attempts: number;
  initial_backoff_ms: number;
  max_backoff_ms: number;
  multiplier: number;
  jitter: boolean;
}

/** The body of PUT /v1/tasks/{name}, also a job's inline `callback`. */
export interface CallbackInput {
  url: string;
  method?: HttpMethod | Lowercase<HttpMethod>;
  headers?: Record<string, string>;
  timeout_ms?: number;
  retry?: Partial<RetryPolicy>;
  signing_secret?: string;
  signing_secret_next?: string;
  max_concurrency?: number;
}

/** A callback as answered: defaults filled in, secrets shown as `"***"`. */
export interface Callback {
  url: string;
  method: HttpMethod;
  headers: Record<string, string>;
  timeout_ms: number;
  retry: RetryPolicy;
  signing_secret?: '***';
  signing_secret_next?: '***';
  max_concurrency: number;
}

export type TaskInput = CallbackInput;

export interface Task extends Callback {
  name: string;
  created_at: string;
  updated_at: string;
}

export interface CalendarInput {
  timezone?: string;
  dates?: string[];
  ranges?: Array<{ from: string; to: string }>;
  description?: string | null;
}

export interface Calendar {
  name: string;
  timezone: string;
  dates: string[];
  ranges: Array<{ from: string; to: string }>;
  description: string | null;
  created_at: string;
  updated_at: string;
}

/** The body of POST /v1/jobs (and one item of a batch). Exactly one of `task` and `callback`. */
export interface JobInput {
  id?: string;
  task?: string;
  callback?: CallbackInput;
  payload?: unknown;
  payload_base64?: string;
  schedule?: ScheduleInput | null;
  end_at?: TimeInput | null;
  max_runs?: number;
  misfire?: Misfire;
  misfire_threshold_ms?: number;
  overlap?: Overlap;
  metadata?: Record<string, unknown> | null;
}

/** The body of PATCH /v1/jobs/{id}; `metadata: null` clears it. */
export interface JobPatch {
  schedule?: ScheduleInput;
  payload?: unknown;
  payload_base64?: string;
  metadata?: Record<string, unknown> | null;
  misfire_threshold_ms?: number;
}

export interface Execution {
  /** `{job_id}:{scheduled_at_ms}`: the callback's X-Deduplication-Key. */
  id: string;
  scheduled_at: string;
  attempt: number;
  state: ExecutionState;
  started_at: string | null;
  finished_at: string | null;
  status_code: number | null;
  error: string | null;
  lateness_ms: number | null;
  node_id: string | null;
}

export interface Job {
  id: string;
  task: string | null;
  schedule: Schedule;
  state: JobState;
  next_fire_at: string | null;
  created_at: string;
  updated_at: string;
  runs: number;
  shard: number;
  last_execution: Execution | null;
  payload?: unknown;
  payload_base64?: string;
  callback?: Callback;
  end_at: string | null;
  max_runs: number;
  misfire: Misfire;
  misfire_threshold_ms: number;
  overlap: Overlap;
  metadata: Record<string, unknown> | null;
}

export interface JobPage {
  jobs: Job[];
  next_cursor: string | null;
}

export interface ExecutionPage {
  executions: Execution[];
  next_cursor: string | null;
}

/** One item of a batch answer: `status` is what the item would have got alone. */
export interface BatchResult {
  id: string | null;
  status: number;
  error?: Problem;
}

export interface PreviewInput {
  schedule?: ScheduleInput;
  from?: TimeInput;
  count?: number;
  id?: string;
}

export interface ClusterNode {
  id: string;
  peer_addr: string;
  api_addr: string | null;
  reachable: boolean;
}

export interface ClusterShard {
  id: number;
  leader: string | null;
  term: number;
  commit_index: number;
  applied_index: number;
  members: string[];
  learners?: string[];
}

export interface ClusterStatus {
  node_id: string;
  nodes: ClusterNode[];
  shards: ClusterShard[];
}

export interface MembershipChange {
  id: string;
  peer_addr?: string;
  shards: Array<{ id: number; voters: string[]; learners: string[] }>;
}

export interface ClockStatus {
  mode: 'system' | 'manual';
  now: string;
}

export interface ClockAdvance {
  now: string;
  fired: number;
  complete: boolean;
}

/** An RFC 9457 problem as the API answers it (docs/api.md, Errors). */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  code?: string;
  errors?: Array<{ field: string; message: string }>;
  /** What a 503 or 429 proves about a write (docs/api.md, "503 and 429"). */
  reason?: string;
  [extension: string]: unknown;
}
