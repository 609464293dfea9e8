import { limits } from '../core/limits.js';

/**
 * The drain rate: callbacks started per second in the one-second windows where some start waited (a backlog),
 * i.e. what the node delivers when it has more due than it can send at once. An average over such windows
 * (0.7 old, 0.3 new); null until one was seen. The admission report divides a hot instant's count by it.
 */
export class DrainRate {
  private windowStartMs = 0;
  private starts = 0;
  private saturated = false;
  private rate: number | null = null;

  perS(): number | null {
    return this.rate;
  }

  /** A callback started at `startedAtMs` that could have started at `couldStartMs` (its due time). */
  noteStart(couldStartMs: number, startedAtMs: number): void {
    if (startedAtMs - this.windowStartMs >= 1000) {
      if (this.saturated && this.starts > 0) {
        const rate = (this.starts * 1000) / Math.max(1000, startedAtMs - this.windowStartMs);
        this.rate = this.rate === null ? rate : Math.round(0.7 * this.rate + 0.3 * rate);
      }
      this.windowStartMs = startedAtMs;
      this.starts = 0;
      this.saturated = false;
    }
    this.starts++;
    if (startedAtMs - couldStartMs > limits.drainBacklogLateMs) this.saturated = true;
  }
}
