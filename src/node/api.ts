/**
 * The boundary between the client API (src/http) and the node (src/node): the HTTP layer parses, validates and
 * normalizes a request into these calls; the node proposes commands, waits for them to apply, and answers.
 * Every method throws PunctualError (src/core/errors.ts) for an operating error.
 */
import type { LogLevel } from '../core/log.js';
import type {
  CallbackSpec,
  ExecutionRecord,
  JobListQuery,
  JobPatch,
  JobSpec,
  JobView,
  Schedule,
  TaskRecord,
} from '../scheduler/types.js';
import type { PunctualError } from '../core/errors.js';

export type CreateJobResult =
  | { ok: true; job: JobView; created: boolean }
  | { ok: false; id: string | null; error: PunctualError };

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

export interface SchedulerApi {
  /** Epoch ms now, from the node's clock (the proposer computes every time-dependent value with it). */
  nowMs(): number;
  readonly nodeId: string;

  putTask(name: string, spec: CallbackSpec): Promise<{ task: TaskRecord; created: boolean }>;
  getTask(name: string): Promise<TaskRecord>;
  listTasks(): Promise<TaskRecord[]>;
  deleteTask(name: string): Promise<void>;

  /** Creates jobs (one or a batch); each succeeds or fails on its own, results in input order. */
  createJobs(specs: JobSpec[]): Promise<CreateJobResult[]>;
  getJob(id: string): Promise<JobView>;
  listJobs(query: JobListQuery): Promise<{ jobs: JobView[]; nextCursor: string | null }>;
  cancelJob(id: string): Promise<JobView>;
  pauseJob(id: string): Promise<JobView>;
  resumeJob(id: string): Promise<JobView>;
  /** Fires one extra run now (an occurrence at the node's current time). */
  runJob(id: string): Promise<JobView>;
  patchJob(id: string, patch: JobPatch): Promise<JobView>;
  listExecutions(
    id: string,
    page: { limit: number; cursor: string | null },
  ): Promise<{ executions: ExecutionRecord[]; nextCursor: string | null }>;
  /** Next fire times of a schedule after fromMs (pure computation, no state). */
  previewSchedule(schedule: Schedule, fromMs: number, count: number): number[];

  cluster(): Promise<ClusterView>;
  /** /readyz: every shard has a known leader and this node has caught up. */
  readiness(): { ready: boolean; reason: string | null };
}

/** Everything `punctual serve` reads from flags and env (API.md section 1), already validated. */
export interface NodeConfig {
  listenHost: string;
  listenPort: number;
  dataDir: string;
  nodeId: string;
  peerListenHost: string;
  peerListenPort: number;
  /** The other members: id -> host:port of their peer listener. */
  peers: Array<{ id: string; host: string; port: number }>;
  shards: number;
  authToken: string | null;
  clusterSecret: string | null;
  fsync: 'always' | 'batch' | 'off';
  logLevel: LogLevel;
  logFormat: 'json' | 'pretty';
  /** Require the auth token on /metrics too (--metrics-auth). */
  metricsAuth: boolean;
  /** Test-only: offset this node's wall clock (jepsen-lite). 0 unless set. */
  clockOffsetMs: number;
  /**
   * `--join`: this node joins a running cluster (named by --peers) instead of bootstrapping its shard groups; the
   * members add it with `punctual cluster add-node` (docs/cluster.md). Absent = false.
   */
  join?: boolean;

  // --- the client API's trust boundary (docs/security.md); absent = null
  /** --tls-cert-file, --tls-key-file: serve the client API over HTTPS (PEM files, both or neither; re-read on reload). */
  tlsCertFile?: string | null;
  tlsKeyFile?: string | null;
  /** --auth-tokens-file: named tokens with scopes, `NAME SCOPE TOKEN` per line (src/http/tokens.ts), re-read on reload. */
  authTokensFile?: string | null;
  /** Test only: the client API's whole-request deadline (default httpLimits.requestTimeoutMs). */
  httpRequestTimeoutMs?: number;
}
