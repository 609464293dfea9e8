/**
 * One node's clocks against the simulation's true time (ms).
 *  - The monotonic clock (performance.now) runs at 1 + drift and never jumps: Raft counts its ticks on it, and
 *    the drift bound (5%) is what the lease relies on (leaseTicks 8 < electionTicks 10).
 *  - The wall clock (Date.now, the scheduler's clock) is true time plus an offset that jumps forward or back (an
 *    NTP step, an operator's `date -s`); NTP keeps its rate true, so it does not drift between jumps.
 * A paused process (SIGSTOP) keeps both running: it just does not look at them, so on waking it sees all the
 * time it missed at once, which is what the SIGSTOP bug got wrong.
 */
export class NodeClock {
  private offsetMs: number;

  constructor(
    private readonly trueStartMs: number,
    /** Relative drift of the monotonic clock: it advances (1 + drift) ms per true ms. */
    readonly drift: number,
    /** The wall clock's error at start (ms). */
    initialOffsetMs: number,
  ) {
    this.offsetMs = initialOffsetMs;
  }

  /** performance.now() as the node reads it at true time `t`. */
  monoMs(t: number): number {
    return (t - this.trueStartMs) * (1 + this.drift);
  }

  /** Date.now() as the node reads it at true time `t`. */
  wallMs(t: number): number {
    return Math.floor(t + this.offsetMs);
  }

  get wallErrorMs(): number {
    return this.offsetMs;
  }

  /** Steps the wall clock by `deltaMs` (negative: back); the monotonic clock does not move. */
  jump(deltaMs: number): void {
    this.offsetMs += deltaMs;
  }

  /** NTP on a healed network: the wall clock is stepped to within `errorMs` of true time. */
  resync(errorMs: number): void {
    this.offsetMs = errorMs;
  }

  /** The earliest true time >= `notBefore` at which the wall clock reads at least `wall`. */
  trueTimeOfWall(wall: number, notBefore: number): number {
    return Math.max(notBefore, Math.ceil(wall - this.offsetMs));
  }

  /** The earliest true time >= `notBefore` at which the monotonic clock reads at least `mono`. */
  trueTimeOfMono(mono: number, notBefore: number): number {
    return Math.max(notBefore, Math.ceil(this.trueStartMs + mono / (1 + this.drift)));
  }
}
