/**
 * Time enters Punctual only through these interfaces, so the pure folders (raft, timerwheel, scheduler)
 * can be driven by a simulator and any failure replayed from its seed.
 */

/** Wall-clock time in epoch milliseconds (may jump; used for fire times that users see). */
export interface Clock {
  nowMs(): number;
}

/** The real clock, optionally offset (the jepsen-lite harness skews a node's clock with a test-only flag). */
export function systemClock(offsetMs = 0): Clock {
  if (offsetMs === 0) return { nowMs: () => Date.now() };
  return { nowMs: () => Date.now() + offsetMs };
}

/** A clock the caller moves by hand: tests and the simulator. */
export class ManualClock implements Clock {
  constructor(private currentMs: number) {}
  nowMs(): number {
    return this.currentMs;
  }
  set(ms: number): void {
    this.currentMs = ms;
  }
  advance(ms: number): void {
    this.currentMs += ms;
  }
}
