/**
 * The node's Prometheus metrics: one prom-client Registry per node (never the global one), so several nodes in
 * one process (tests, the simulator) keep their own figures. Gauges are collected at scrape time from the
 * sources the node hands in; counters and histograms are updated by the node as things happen.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { JobState } from '../scheduler/types.js';

export interface MetricsSources {
  /** Jobs per stored state, summed over the node's shards. */
  jobCounts(): Record<JobState, number>;
  wheelSize(): number;
  dispatchInFlight(): number;
}

export interface MetricsText {
  contentType: string;
  body: string;
}

export const latenessBucketsMs = [0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000];
const batchSizeBuckets = [1, 2, 5, 10, 50, 100, 500, 1000, 5000, 20000];
const commitBucketsMs = [0.1, 0.25, 0.5, 1, 2, 5, 10, 25, 50, 100, 250, 1000];

export class NodeMetrics {
  readonly registry = new Registry();
  readonly callbacks: Counter<'outcome'>;
  readonly fireLatenessMs: Histogram;
  readonly jobsSubmitted: Counter;
  readonly commitBatchSize: Histogram;
  readonly commitDurationMs: Histogram;

  constructor(sources: MetricsSources) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
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
    this.callbacks = new Counter({
      name: 'punctual_callbacks_total',
      help: 'Callback attempts by outcome (succeeded, retryable, permanent)',
      labelNames: ['outcome'],
      registers,
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
      help: 'Commands per group commit',
      buckets: batchSizeBuckets,
      registers,
    });
    this.commitDurationMs = new Histogram({
      name: 'punctual_commit_duration_ms',
      help: 'Duration of one group commit (append, apply, fsync), in ms',
      buckets: commitBucketsMs,
      registers,
    });
  }

  /** The text /metrics serves. */
  async scrape(): Promise<MetricsText> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }

  close(): void {
    this.registry.clear();
  }
}
