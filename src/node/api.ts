/** What `punctual serve` hands the node: its configuration, read from flags and env and already validated. */
import type { LogLevel } from '../core/log.js';

/** Everything `punctual serve` reads from flags and env (docs/cli.md), already validated. */
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
  /** Test-only: offset this node's wall clock (jepsen-lite, through PUNCTUAL_TEST_CLOCK_OFFSET_MS). 0 unless set. */
  clockOffsetMs: number;
  /**
   * `--clock manual`: the scheduler runs on a virtual clock that moves only with POST /v1/clock:advance (never
   * with peers); it starts at clockStartMs (`--clock-start`), else at the real time of the start. Absent = system.
   */
  clock?: 'system' | 'manual';
  clockStartMs?: number | null;
  /**
   * `--join`: this node joins a running cluster (named by --peers) instead of bootstrapping its shard groups; the
   * members add it with `punctual cluster add-node` (docs/cluster.md). Absent = false.
   */
  join?: boolean;
  /**
   * The SSRF guard's explicit rules (`--callback-allow`, `--callback-deny`): CIDR ranges or single addresses,
   * validated. Absent = none (the built-in denies and this node's own listeners still apply).
   */
  callbackAllow?: string[];
  callbackDeny?: string[];
  /** `--payload-ref-max-bytes`: the largest body a job's payload_ref may fetch. Absent = payloadRefLimits.bytesMaxDefault. */
  payloadRefBytesMax?: number;
  /**
   * Mutual TLS for the peer transport (--peer-tls-cert-file, --peer-tls-key-file, --peer-tls-ca-file, PEM; the
   * certificate names the node as SAN URI:punctual:node:<node id>). Absent or null = no peer TLS.
   */
  peerTls?: { certFile: string; keyFile: string; caFile: string } | null;
  /** `--insecure-peers`: a node with peers may run with neither peer TLS nor a cluster secret. Absent = false. */
  insecurePeers?: boolean;

  // --- the client API's trust boundary (docs/security.md); absent = null
  /** --tls-cert-file, --tls-key-file: serve the client API over HTTPS (PEM files, both or neither; re-read on reload). */
  tlsCertFile?: string | null;
  tlsKeyFile?: string | null;
  /** --auth-tokens-file: named tokens with scopes, `NAME SCOPE TOKEN` per line (src/http/tokens.ts), re-read on reload. */
  authTokensFile?: string | null;
  /** Test only: the client API's whole-request deadline (default httpLimits.requestTimeoutMs). */
  httpRequestTimeoutMs?: number;
  /**
   * `--retention`: finished jobs and their executions are deleted this long after they finish (a task's
   * retention_ms overrides it); null: kept (only tasks with their own retention expire). Default 7 days.
   */
  retentionMs?: number | null;
  /** `--retention-executions`: a job keeps its newest this many executions (default 100). */
  retentionExecutions?: number;
  /**
   * `--firing-thread on|off`: callbacks leave from the firing thread (on) or from the main event loop (off). Absent =
   * on (docs/cli.md says what each costs); a manual clock always runs them on the main loop.
   */
  firingThread?: boolean;
  /**
   * `--stage-lead-ms`: a callback may be decided and handed to the sender up to this long before its due time
   * (staged: prepared, sent at its due ms, taken back by a cancel, pause or new schedule until it starts). 0: at its
   * due time. Absent = limits.firingStageLeadMs; a manual clock never stages.
   */
  stageLeadMs?: number;
}
