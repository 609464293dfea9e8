/**
 * The manual clock of `punctual serve --clock manual` (docs/api.md "The clock"): the scheduler's time (the
 * engine, the dispatcher's start and finish times, the proposer's command stamps, the API's "now") is a
 * ManualClock that moves only through advance(). Raft keeps real time: leases and elections need it.
 *
 * An advance never jumps past an occurrence: it steps the clock to the next deadline at or before the target
 * (an occurrence, a retry, a job the loader has not armed yet), lets the engine fire everything due, waits until
 * the callbacks' outcomes and the commands they cause are applied (which arms the next occurrences and the
 * retries, on the virtual clock), and repeats; then it steps to the target. A callback takes no virtual time.
 */
import { performance } from 'node:perf_hooks';
import type { ManualClock } from '../core/clock.js';
import { PunctualError, invalid } from '../core/errors.js';
import { clockLimits } from '../core/limits.js';
import type { NodeShell } from './shell.js';

export interface AdvanceResult {
  /** The clock after the advance: the target, or the last instant completed when a bound stopped it. */
  nowMs: number;
  /** Callback attempts sent during the advance (retries included). */
  fired: number;
  /** False when clockLimits stopped the advance before the target. */
  complete: boolean;
}

export type AdvanceRequest = { byMs: number } | { toMs: number };

export class ClockDriver {
  /** Advances run one after another: a second request waits for the first and starts from where it ended. */
  private chain: Promise<unknown> = Promise.resolve();

  constructor(
    readonly clock: ManualClock,
    private readonly engine: NodeShell,
    /** Lower bounds for tests (default clockLimits). */
    private readonly bounds: { advanceAttemptsMax: number; advanceRealMsMax: number } = clockLimits,
  ) {}

  advance(req: AdvanceRequest): Promise<AdvanceResult> {
    const run = this.chain.then(() => this.advanceNow(req));
    this.chain = run.catch(() => undefined);
    return run;
  }

  private async advanceNow(req: AdvanceRequest): Promise<AdvanceResult> {
    if (this.engine.isStopped) throw new PunctualError('unavailable', 'node is shutting down', [], 'shutting_down');
    const fromMs = this.clock.nowMs();
    const targetMs = 'byMs' in req ? fromMs + req.byMs : req.toMs;
    if (targetMs < fromMs) throw invalid('to', `must not be before the node's now (${new Date(fromMs).toISOString()})`);
    if (targetMs - fromMs > clockLimits.advanceByMsMax) throw invalid('to', `at most ${clockLimits.advanceByMsMax} ms ahead of the node's now`);
    const sentBefore = this.engine.sentTotal;
    const startedMs = performance.now();
    for (;;) {
      // A macrotask per step: Raft's ticks (the lease), sockets and other requests run between steps.
      await new Promise<void>((resolve) => setImmediate(resolve));
      await this.settle(startedMs + this.bounds.advanceRealMsMax);
      const nowMs = this.clock.nowMs();
      const fired = this.engine.sentTotal - sentBefore;
      if (nowMs >= targetMs) return { nowMs, fired, complete: true };
      if (fired >= this.bounds.advanceAttemptsMax || performance.now() - startedMs >= this.bounds.advanceRealMsMax || this.engine.isStopped) {
        return { nowMs, fired, complete: false };
      }
      // Nothing comes due before the next deadline, and the loader's window after the step covers it.
      this.clock.set(this.engine.nextDeadlineAfterNow(targetMs) ?? targetMs);
    }
  }

  /**
   * Fires everything due at the clock's now and waits until its outcomes are applied (and what they armed fired),
   * or until the advance's real-time budget (`untilPerfMs`) is spent: an instant that never settles must not
   * hold the request forever.
   */
  private async settle(untilPerfMs: number): Promise<void> {
    for (let rounds = 0; ; rounds++) {
      // What came due by the step is loaded once; what the applied outcomes arm comes by their effects.
      if (rounds === 0) await this.engine.runLoader();
      this.engine.kick();
      // Engine items wait a few ms for company before a flush: with nothing in flight there is none to wait for.
      if (this.engine.inFlightCount() === 0) this.engine.flushAll();
      if (this.engine.settled() && this.engine.idle()) return;
      if (this.engine.isStopped || performance.now() >= untilPerfMs) return;
      // Callbacks take real time: poll at once first, then every millisecond.
      await new Promise<void>((resolve) => (rounds < 100 ? setImmediate(resolve) : setTimeout(resolve, 1)));
    }
  }
}
