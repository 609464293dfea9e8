import { limits } from '../core/limits.js';

/**
 * The drain rate: callbacks started per second while starts waited behind each other (a backlog), i.e. what the
 * node delivers when it has more due than it can send at once. The admission report divides a hot instant's count
 * by it.
 *
 * A start waited when it was due at least limits.drainWaitedMs before the start before it, and came within
 * limits.drainGapMaxMs of it: a hot instant's starts after its first millisecond, not a lone overdue job after an
 * idle hour (due long before, but nothing went out just before it) nor a steady rate kept on time. A backlog gives
 * a sample (its starts over the time from the start it began behind to its last) once it ends, and every second
 * while it lasts; samples with fewer than limits.drainSampleStartsMin starts or a shorter span than
 * limits.drainSampleSpanMinMs are dropped (a few stragglers say nothing of a rate). The rate is an average of
 * samples (0.7 old, 0.3 new), the open backlog's counted as one; null until a sample was taken.
 */
export class DrainRate {
  private lastStartMs = Number.NEGATIVE_INFINITY;
  /** The open backlog: the start it began behind, the starts since, the last of them. */
  private runFromMs = 0;
  private runStarts = 0;
  private runLastMs = 0;
  private rate: number | null = null;

  perS(): number | null {
    const open = this.runRate();
    return open === null ? this.rate : this.blend(open);
  }

  /**
   * A callback started at `startedAtMs`; `dueAtMs` is when it could have started (its due time), null for a retry:
   * a retry neither begins nor ends a backlog, it only counts in one.
   */
  noteStart(dueAtMs: number | null, startedAtMs: number): void {
    const close = startedAtMs - this.lastStartMs <= limits.drainGapMaxMs;
    if (dueAtMs !== null && close && dueAtMs <= this.lastStartMs - limits.drainWaitedMs) {
      if (this.runStarts === 0) this.runFromMs = this.lastStartMs;
      this.count(startedAtMs);
      if (startedAtMs - this.runFromMs >= 1000) this.sample();
    } else if (this.runStarts > 0) {
      if (dueAtMs === null && close) this.count(startedAtMs);
      else this.sample();
    }
    if (startedAtMs > this.lastStartMs) this.lastStartMs = startedAtMs;
  }

  private count(startedAtMs: number): void {
    this.runStarts++;
    if (startedAtMs > this.runLastMs) this.runLastMs = startedAtMs;
  }

  /** The open backlog's rate, or null while it is too small to say one. */
  private runRate(): number | null {
    const spanMs = this.runLastMs - this.runFromMs;
    if (this.runStarts < limits.drainSampleStartsMin || spanMs < limits.drainSampleSpanMinMs) return null;
    return (this.runStarts * 1000) / spanMs;
  }

  /** Takes the open backlog's sample (if it says a rate); a backlog still going on goes on from its last start. */
  private sample(): void {
    const r = this.runRate();
    if (r !== null) this.rate = this.blend(r);
    this.runStarts = 0;
  }

  private blend(sampleRate: number): number {
    return this.rate === null ? Math.round(sampleRate) : Math.round(0.7 * this.rate + 0.3 * sampleRate);
  }
}
