/**
 * The node's Prometheus metrics: one prom-client Registry per node (never the global one), so several nodes in
 * one process (tests, the simulator) keep their own figures. Gauges are collected at scrape time from the
 * sources the node hands in; counters and histograms are updated by the node as things happen.
 */
import { readFileSync } from 'node:fs';
import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { JobState } from '../scheduler/types.js';
import { overviewLimits } from '../core/limits.js';
import { CallbackHistory, type CallbackTotals, type HistorySample } from './history.js';

export interface MetricsSources {
  /** Jobs per stored state, summed over the node's shards. */
  jobCounts(): Record<JobState, number>;
  wheelSize(): number;
  dispatchInFlight(): number;
  /** Per shard group on this node: role, term, commit and applied index (cluster host; absent in tests). */
  shards?(): Array<{ shard: number; role: string; term: number; commit: number; applied: number }>;
  /** The peer transport's counters (absent on a single node). */
  peers?(): { rpcErrors: number; dropped: number; refused: number; badFrames: number } | null;
  /** Every bounded in-memory queue of the node: its depth and its limit (src/core/limits.ts queueLimits). */
  queues?(): Array<{ queue: string; depth: number; limit: number }>;
  /** PENDING occurrences due in each second of the next minute (GET /v1/due-profile), and the measured drain rate. */
  dueProfile?(): { perSecond: number[]; drainRatePerS: number | null };
  /** Size of the database's WAL file in bytes (src/store/checkpointer.ts walFileBytes). */
  walBytes?(): number;
}

const roles = ['follower', 'pre_candidate', 'candidate', 'leader'] as const;

/** NodeMetrics.overview(): the figures of GET /v1/overview (rendered by src/http/ui.ts). */
export interface NodeOverview {
  jobs: Record<JobState, number>;
  callbacks: HistorySample[];
  callbackIntervalMs: number;
  lateness: { buckets: Array<{ leMs: number | null; count: number }>; count: number; sumMs: number };
}

export interface MetricsText {
  contentType: string;
  body: string;
}

const callbackOutcomes = ['succeeded', 'retryable', 'permanent'] as const;
type CallbackOutcome = (typeof callbackOutcomes)[number];

export const latenessBucketsMs = [0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000];
const batchSizeBuckets = [1, 2, 5, 10, 50, 100, 500, 1000, 5000, 20000];
const commitBucketsMs = [0.1, 0.25, 0.5, 1, 2, 5, 10, 25, 50, 100, 250, 1000];
const stallBucketsMs = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 5000];
/** The event loop's delay is sampled at this resolution and summarized once per window. */
const loopResolutionMs = 5;
const loopWindowMs = 1_000;

export class NodeMetrics {
  readonly registry = new Registry();
  readonly callbacks: Counter<'outcome'>;
  readonly fireLatenessMs: Histogram;
  readonly jobsSubmitted: Counter;
  readonly commitBatchSize: Histogram;
  readonly commitDurationMs: Histogram;
  readonly appendDurationMs: Histogram;
  readonly proposals: Counter<'shard'>;
  readonly snapshots: Counter<'kind'>;
  /** Committed entries this node could not decode or apply (skipped on every replica alike, see raft_quarantine). */
  readonly entriesQuarantined: Counter<'shard'>;
  /** 1 while this node's disk is full (writes answered 507). */
  readonly diskFull: Gauge;
  /** Worst event-loop delay of each 1 s window (timers, the firing engine and Raft ticks wait that long). */
  readonly eventLoopStallMs: Histogram;
  private readonly loopDelay: IntervalHistogram;
  private readonly loopTimer: NodeJS.Timeout;
  private loopStallMaxMs = 0;
  /** The last hour of callback attempts (the dashboard's overview); sampled from `callbacks` by historyTimer. */
  private readonly history = new CallbackHistory();
  private readonly historyTimer: NodeJS.Timeout;

  /** Attempts counted by callbackFinished and not handed to `callbacks` yet (its collect does, at every read). */
  private readonly callbacksFinished: Record<CallbackOutcome, number> = { succeeded: 0, retryable: 0, permanent: 0 };

  constructor(private readonly sources: MetricsSources) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    if (sources.dueProfile !== undefined) {
      const profile = sources.dueProfile;
      let last: { perSecond: number[]; drainRatePerS: number | null } | null = null;
      new Gauge({
        name: 'punctual_due_next_minute',
        help: 'PENDING occurrences due in second N from now (0..59): the next minute as the node stores it',
        labelNames: ['second'],
        registers,
        collect() {
          last = profile();
          last.perSecond.forEach((n, i) => this.set({ second: String(i) }, n));
        },
      });
      new Gauge({
        name: 'punctual_drain_rate_per_second',
        help: 'Callbacks per second this node delivered while it had a backlog (measured); absent until measured',
        registers,
        collect() {
          const rate = (last ?? profile()).drainRatePerS;
          if (rate !== null) this.set(rate);
        },
      });
    }
    new Gauge({
      name: 'punctual_jobs',
      help: 'Jobs by stored state',
      labelNames: ['state'],
      registers,
      collect() {
        for (const [state, n] of Object.entries(sources.jobCounts())) this.set({ state }, n);
      },
    });
    new Gauge({
      name: 'punctual_timer_wheel_size',
      help: 'Occurrence attempts armed in the timing wheel',
      registers,
      collect() {
        this.set(sources.wheelSize());
      },
    });
    new Gauge({
      name: 'punctual_dispatch_in_flight',
      help: 'Callbacks in flight',
      registers,
      collect() {
        this.set(sources.dispatchInFlight());
      },
    });
    const finished = this.callbacksFinished;
    this.callbacks = new Counter({
      name: 'punctual_callbacks_total',
      help: 'Callback attempts by outcome (succeeded, retryable, permanent)',
      labelNames: ['outcome'],
      registers,
      collect() {
        for (const outcome of callbackOutcomes) {
          if (finished[outcome] === 0) continue;
          this.inc({ outcome }, finished[outcome]);
          finished[outcome] = 0;
        }
      },
    });
    this.fireLatenessMs = new Histogram({
      name: 'punctual_fire_lateness_ms',
      help: 'Start of the first attempt minus the scheduled time, in ms',
      buckets: latenessBucketsMs,
      registers,
    });
    this.jobsSubmitted = new Counter({ name: 'punctual_jobs_submitted_total', help: 'Jobs created', registers });
    this.commitBatchSize = new Histogram({
      name: 'punctual_commit_batch_size',
      help: 'Log entries applied per commit of the state file (its write batch)',
      buckets: batchSizeBuckets,
      registers,
    });
    this.commitDurationMs = new Histogram({
      name: 'punctual_commit_duration_ms',
      help: 'Duration of the COMMIT of one state-file write batch, in ms',
      buckets: commitBucketsMs,
      registers,
    });
    this.appendDurationMs = new Histogram({
      name: 'punctual_raft_append_duration_ms',
      help: 'Duration of one Ready round transaction of the log file (Raft entries and hard states of every group), in ms',
      buckets: commitBucketsMs,
      registers,
    });
    this.proposals = new Counter({ name: 'punctual_raft_proposals_total', help: 'Entries proposed by this node as leader, per shard', labelNames: ['shard'], registers });
    this.snapshots = new Counter({ name: 'punctual_raft_snapshots_total', help: 'Raft snapshots by kind (created, installed)', labelNames: ['kind'], registers });
    this.entriesQuarantined = new Counter({
      name: 'punctual_raft_entries_quarantined_total',
      help: 'Committed entries quarantined (not decodable or not applicable), per shard',
      labelNames: ['shard'],
      registers,
    });
    this.diskFull = new Gauge({ name: 'punctual_disk_full', help: '1 while the disk is full and writes are refused (507)', registers });
    if (sources.walBytes !== undefined) {
      const walBytes = sources.walBytes.bind(sources);
      new Gauge({
        name: 'punctual_wal_bytes',
        help: 'Size of the WAL files (punctual.db-wal and raft-log.db-wal) in bytes: bounded by TRUNCATE checkpoints past walBytesSoftMax',
        registers,
        collect() {
          this.set(walBytes());
        },
      });
    }
    new Gauge({
      name: 'punctual_process_write_bytes',
      help: 'Bytes this process caused to be written to storage since it started (Linux /proc/self/io write_bytes; 0 elsewhere)',
      registers,
      collect() {
        this.set(processWriteBytes());
      },
    });
    this.registerClusterGauges(sources, registers);
    this.registerQueueGauges(sources, registers);
    this.eventLoopStallMs = new Histogram({
      name: 'punctual_event_loop_stall_ms',
      help: 'Worst event-loop delay of each second (perf_hooks.monitorEventLoopDelay), in ms',
      buckets: stallBucketsMs,
      registers,
    });
    const self = this;
    new Gauge({
      name: 'punctual_event_loop_stall_max_ms',
      help: 'Worst event-loop delay since the node started, in ms',
      registers,
      collect() {
        this.set(self.loopStallMaxMs);
      },
    });
    this.loopDelay = monitorEventLoopDelay({ resolution: loopResolutionMs });
    this.loopDelay.enable();
    this.loopTimer = setInterval(() => this.sampleLoop(), loopWindowMs);
    this.loopTimer.unref();
    // Several observations per interval, so a late timer never pushes one interval's attempts into the next.
    this.historyTimer = setInterval(() => void this.observeHistory(), overviewLimits.historyIntervalMs / 5);
    this.historyTimer.unref();
    void this.observeHistory();
  }

  private async callbackTotals(): Promise<CallbackTotals> {
    const totals = { sent: 0, failed: 0 };
    for (const v of (await this.callbacks.get()).values) {
      totals.sent += v.value;
      if (v.labels.outcome !== 'succeeded') totals.failed += v.value;
    }
    return totals;
  }

  private async observeHistory(): Promise<void> {
    this.history.observe(await this.callbackTotals(), Date.now());
  }

  /**
   * What GET /v1/overview shows of this node: jobs per stored state, the last hour of callback attempts, and the
   * fire-lateness histogram since start (per bucket, not cumulative; the last bucket has no upper bound).
   */
  async overview(): Promise<NodeOverview> {
    const callbacks = this.history.snapshot(await this.callbackTotals(), Date.now());
    const cumulative = new Map<number, number>();
    let count = 0;
    let sumMs = 0;
    for (const v of (await this.fireLatenessMs.get()).values) {
      if (v.metricName?.endsWith('_bucket') === true) cumulative.set(v.labels.le === '+Inf' ? Infinity : Number(v.labels.le), v.value);
      else if (v.metricName?.endsWith('_count') === true) count = v.value;
      else if (v.metricName?.endsWith('_sum') === true) sumMs = v.value;
    }
    let below = 0;
    const lateness = [...latenessBucketsMs, Infinity].map((le) => {
      const upTo = cumulative.get(le) ?? below;
      const bucket = { leMs: Number.isFinite(le) ? le : null, count: upTo - below };
      below = upTo;
      return bucket;
    });
    return {
      jobs: this.sources.jobCounts(),
      callbacks,
      callbackIntervalMs: overviewLimits.historyIntervalMs,
      lateness: { buckets: lateness, count, sumMs },
    };
  }

  /** One window: its worst delay beyond the sampling resolution goes to the histogram. */
  private sampleLoop(): void {
    if (this.loopDelay.count === 0) return;
    const worstMs = Math.max(0, this.loopDelay.max / 1e6 - loopResolutionMs);
    this.loopDelay.reset();
    this.eventLoopStallMs.observe(worstMs);
    if (worstMs > this.loopStallMaxMs) this.loopStallMaxMs = worstMs;
  }

  /** punctual_queue_depth and punctual_queue_limit, one series per queue (the queue's name is the label). */
  private registerQueueGauges(sources: MetricsSources, registers: Registry[]): void {
    if (sources.queues === undefined) return;
    const queues = sources.queues.bind(sources);
    new Gauge({
      name: 'punctual_queue_depth',
      help: 'Entries waiting in a bounded in-memory queue of the node',
      labelNames: ['queue'],
      registers,
      collect() {
        for (const q of queues()) this.set({ queue: q.queue }, q.depth);
      },
    });
    new Gauge({
      name: 'punctual_queue_limit',
      help: 'The limit of a bounded in-memory queue of the node (at it, writes get 429 or firing is held back)',
      labelNames: ['queue'],
      registers,
      collect() {
        for (const q of queues()) this.set({ queue: q.queue }, q.limit);
      },
    });
  }

  private registerClusterGauges(sources: MetricsSources, registers: Registry[]): void {
    const perShard = (name: string, help: string, pick: (s: { term: number; commit: number; applied: number }) => number): void => {
      new Gauge({
        name, help, labelNames: ['shard'], registers,
        collect() {
          for (const s of sources.shards?.() ?? []) this.set({ shard: String(s.shard) }, pick(s));
        },
      });
    };
    new Gauge({
      name: 'punctual_raft_role',
      help: '1 for the role this node has in the shard group (follower, pre_candidate, candidate, leader), else 0',
      labelNames: ['shard', 'role'],
      registers,
      collect() {
        for (const s of sources.shards?.() ?? []) for (const r of roles) this.set({ shard: String(s.shard), role: r }, s.role === r ? 1 : 0);
      },
    });
    perShard('punctual_raft_term', 'Current Raft term of the shard group', (s) => s.term);
    perShard('punctual_raft_commit_index', 'Commit index of the shard group', (s) => s.commit);
    perShard('punctual_raft_applied_index', 'Applied index of the shard group', (s) => s.applied);
    new Gauge({
      name: 'punctual_peer_rpc_errors',
      help: 'Peer transport counters since start: failed outgoing requests, dropped messages, refused and bad incoming frames',
      labelNames: ['kind'],
      registers,
      collect() {
        const p = sources.peers?.();
        if (p === null || p === undefined) return;
        this.set({ kind: 'rpc_errors' }, p.rpcErrors);
        this.set({ kind: 'dropped' }, p.dropped);
        this.set({ kind: 'refused' }, p.refused);
        this.set({ kind: 'bad_frames' }, p.badFrames);
      },
    });
  }

  /** The text /metrics serves. */
  /**
   * One callback attempt finished: the node's per-callback count. A plain number here, added to
   * punctual_callbacks_total when the counter is read (a labelled inc hashes its labels on every call).
   */
  callbackFinished(outcome: CallbackOutcome): void {
    this.callbacksFinished[outcome]++;
  }

  async scrape(): Promise<MetricsText> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }

  close(): void {
    clearInterval(this.loopTimer);
    clearInterval(this.historyTimer);
    this.loopDelay.disable();
    this.registry.clear();
  }
}

/** write_bytes of /proc/self/io: what the process sent to the storage layer (its page-cache writes included). */
function processWriteBytes(): number {
  try {
    const m = /^write_bytes: (\d+)$/m.exec(readFileSync('/proc/self/io', 'utf8'));
    return m === null ? 0 : Number(m[1]);
  } catch {
    return 0;
  }
}
