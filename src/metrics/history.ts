/**
 * The last hour of callback attempts, per 10-second interval, for the dashboard's overview (GET /v1/overview).
 * A bounded ring buffer of counter deltas: the node's Prometheus counter stays the one source of the figures,
 * and this only remembers how it moved, so nothing else in the node has to count twice.
 */
import { overviewLimits } from '../core/limits.js';

/** Attempts sent and failed (retryable or permanent) during one interval that starts at `startMs`. */
export interface HistorySample {
  startMs: number;
  sent: number;
  failed: number;
}

export interface CallbackTotals {
  sent: number;
  failed: number;
}

/**
 * Fed the counter's running totals (`observe`), it keeps one sample per interval, aligned on multiples of the
 * interval so every node's samples line up. An interval with no observation (a stalled process) is recorded as
 * empty: its attempts are counted in the next one observed.
 */
export class CallbackHistory {
  private readonly samples: HistorySample[] = [];
  private base: CallbackTotals | null = null;
  private currentStartMs = 0;

  constructor(
    private readonly intervalMs: number = overviewLimits.historyIntervalMs,
    private readonly intervalsMax: number = overviewLimits.historyIntervalsMax,
  ) {}

  /** Closes every interval that ended by `nowMs`, given the counter's totals now. */
  observe(totals: CallbackTotals, nowMs: number): void {
    const startMs = nowMs - (nowMs % this.intervalMs);
    if (this.base === null) {
      this.base = { ...totals };
      this.currentStartMs = startMs;
      return;
    }
    if (startMs <= this.currentStartMs) return;
    this.push({ startMs: this.currentStartMs, sent: totals.sent - this.base.sent, failed: totals.failed - this.base.failed });
    // Intervals skipped entirely (no observation in them) are shown as empty, at most one hour of them.
    const firstGapMs = Math.max(this.currentStartMs + this.intervalMs, startMs - this.intervalMs * this.intervalsMax);
    for (let t = firstGapMs; t < startMs; t += this.intervalMs) this.push({ startMs: t, sent: 0, failed: 0 });
    this.base = { ...totals };
    this.currentStartMs = startMs;
  }

  /** Completed intervals, oldest first, then the current one so far (partial). */
  snapshot(totals: CallbackTotals, nowMs: number): HistorySample[] {
    this.observe(totals, nowMs);
    const base = this.base ?? totals;
    return [...this.samples, { startMs: this.currentStartMs, sent: totals.sent - base.sent, failed: totals.failed - base.failed }];
  }

  private push(sample: HistorySample): void {
    this.samples.push(sample);
    if (this.samples.length > this.intervalsMax - 1) this.samples.shift(); // the current interval is the last of the hour
  }
}
