/**
 * The firing engine: the leader's duties for the shards this node leads. The host starts a shard
 * (startShard(shard, term)) once this node leads it and applied everything before its term, and stops it
 * (stopShard) when it loses leadership: its occurrences leave the wheel, in-flight callbacks finish but their
 * outcomes are proposed to a group this node no longer leads, so they are dropped (at-least-once: the new
 * leader fires again with the same deduplication key and a higher fencing token `${shard}.${term}`). Right
 * before each send the shard's lease is checked: without it, the occurrence waits a few ms and is checked again.
 *
 * One TimerWheel holds the near future, one key per occurrence (`${jobId}\n${scheduledAtMs}`) with its attempt
 * and shard kept beside it; ONE host timer is armed at wheel.nextDeadlineMs() (never a 1 ms interval). Node
 * timers may fire early or late by about a millisecond, so the engine wakes a little before the deadline and
 * spins on setImmediate for the last nodeLimits.firingSpinMs; nothing fires before `clock.nowMs() >= dueAtMs`.
 *
 * At fire time each due occurrence is checked against the store (job gone, cancelled or paused -> dropped;
 * execution already final -> dropped), then a regular occurrence of a recurring job goes by the scheduler's
 * decision (src/scheduler/policy.ts dueAction: misfire skip -> `skipped`; overlap skip -> `skipped`, buffer_one ->
 * held until the job's `finished` effect, then fired as released). The engine decides none of it. Then the
 * callback is handed to the dispatcher at once; its `fired` item goes to the proposer when the dispatcher really
 * starts it (past the task's concurrency queue: startedAtMs and lateness say when it was sent), never delaying
 * the send, and the proposer may fold it into the attempt's outcome (proposer.ts).
 * Outcomes come back as `outcomes` items: final, or a retry at now + retryDelayMs(...).
 *
 * The loader keeps the wheel filled with occurrences due within limits.wheelHorizonMs (every
 * limits.loaderIntervalMs and at start); at start the open executions are loaded too: RUNNING ones fire again
 * at once (attempt + 1, same deduplication key), QUEUED ones are armed at their retryAtMs. That is what makes
 * kill -9 safe.
 *
 * Back-pressure (src/core/limits.ts queueLimits; src/node/README.md): an occurrence that is stored is never
 * refused, only held back. The wheel holds at most wheelEntriesMax timers; the loader (and the arm of a new job's
 * regular occurrence, which the loader finds again) fills it only up to wheelLoadedMax, leaving the rest in
 * SQLite for a later run; the headroom takes the arms nothing else would find again (retries, runs, open
 * executions), and one that still finds the wheel full waits in `parked`. At most dueBacklogMax due keys are
 * taken from the wheel (the rest stay in it, due). While the dispatcher's concurrency queues hold
 * dispatchQueuedMax callbacks or the proposer holds proposerEngineItemsMax records, nothing new fires: the due
 * keys wait in the backlog and the engine looks again every holdBackRetryMs.
 */
import type { Clock } from '../core/clock.js';
import type { Logger } from '../core/log.js';
import { assert } from '../core/assert.js';
import { limits, nodeLimits, queueLimits, stallLimits } from '../core/limits.js';
import { retryDelayMs } from '../dispatch/backoff.js';
import type { AttemptOutcome, Delivery } from '../dispatch/dispatcher.js';
import type { CallbackSender, FiringPort } from '../dispatch/firing-port.js';
import type { NodeMetrics } from '../metrics/metrics.js';
import type { Command, Effect, FiredItem, OutcomeItem } from '../scheduler/commands.js';
import { dueAction } from '../scheduler/policy.js';
import type { CallbackSpec, JobRecord, JobState } from '../scheduler/types.js';
import { TimerWheel } from '../timerwheel/wheel.js';
import type { ShardStorage } from './group.js';
import type { Proposer } from './proposer.js';

/** Without a valid lease a due occurrence is looked at again this much later (a heartbeat round renews it). */
const leaseRetryMs = 5;

interface Armed {
  shard: number;
  jobId: string;
  scheduledAtMs: number;
  attempt: number;
  dueAtMs: number;
  /** Armed by an applied command's effect (trusted) rather than by the loader (re-checked against the store). */
  fromEffect: boolean;
  /** The occurrence overlap=buffer_one held, let go because the run before it finished (policy.ts dueAction). */
  released?: boolean;
  /** Firing thread: false = armed at its exact due time, never staged ahead (see stageAhead). */
  stage?: boolean;
}

export interface EngineOptions {
  shards: ShardStorage[];
  proposer: Proposer;
  /** The firing thread's port (stages ahead), or a plain Dispatcher (sends at the due time only). */
  dispatcher: CallbackSender;
  clock: Clock;
  logger: Logger;
  metrics: NodeMetrics;
  /** Random numbers for retry jitter, in [0, 1). */
  rand01?: () => number;
  /** The shard's leader lease holds on this node (checked right before each send). */
  leaseValid(shard: number): boolean;
  /**
   * The clock is a ManualClock (`serve --clock manual`): it moves only when the node advances it, so no timer is
   * armed for a later deadline (it would spin or wait for nothing); the advance kicks the engine (clock-driver.ts).
   */
  manualClock?: boolean;
}

function decrement(counts: Map<string, number>, key: string): void {
  const n = (counts.get(key) ?? 1) - 1;
  if (n > 0) counts.set(key, n);
  else counts.delete(key);
}

export function occurrenceKey(jobId: string, scheduledAtMs: number): string {
  return `${jobId}\n${scheduledAtMs}`;
}

const finalExecution = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);

export class FiringEngine {
  private readonly wheel: TimerWheel<string>;
  private readonly armed = new Map<string, Armed>();
  private readonly armedByJob = new Map<string, Set<string>>();
  /** Occurrence key -> attempt being sent. */
  private readonly inFlight = new Map<string, number>();
  private readonly inFlightByJob = new Map<string, number>();
  /** Attempts handed to the network (past the dispatcher's concurrency queue): the RUNNING overlay. */
  private readonly started = new Set<string>();
  private readonly startedByJob = new Map<string, number>();
  /**
   * Fired items of attempts still in the dispatcher's concurrency queue (key -> item): proposed when the
   * attempt starts (startedAtMs = when it was really sent) or, if it never starts, with its outcome.
   */
  private readonly firedPending = new Map<string, { shard: number; item: FiredItem; hold: boolean }>();
  /** Keys fired or skipped whose command is not applied yet (key -> shard): the loader must not arm them again. */
  private readonly awaitingApply = new Map<string, number>();
  /** The shards this node fires: shard -> the term it leads in (the fencing token). */
  private readonly firing = new Map<number, number>();
  /** overlap=buffer_one: jobId -> the occurrence waiting for the running one to finish. */
  private readonly buffered = new Map<string, Armed>();
  private readonly outcomesPending = new Set<Promise<void>>();
  private timer: NodeJS.Timeout | null = null;
  private timerAtMs: number | null = null;
  private spin: NodeJS.Immediate | null = null;
  /** Due keys taken from the wheel and not looked at yet (a hot instant is fired in batches). */
  private dueBacklog: string[] = [];
  private dueHead = 0;
  private loaderTimer: NodeJS.Timeout | null = null;
  private loading: Promise<void> | null = null;
  /** The end of the window the last complete loader run covered (null before the first). */
  private loadedUntilMs: number | null = null;
  private loaderRuns = 0;
  /** The loader (or a skipped arm) left due occurrences in SQLite for want of room: the next run reads everything. */
  private loadIncomplete = false;
  /** Arms that found the wheel at wheelEntriesMax (retries, runs, open executions): moved in as room frees. */
  private parked: Armed[] = [];
  /** The last wake stopped on a full dispatcher queue or proposer: the next one is a poll, not a spin. */
  private heldBack = false;
  private stopped = false;
  private readonly rand01: () => number;
  /** Callback attempts handed to the dispatcher since start (the manual clock's advance counts them). */
  sentTotal = 0;
  /** The firing thread's port when the sender can stage ahead (never with a manual clock). */
  private readonly stager: FiringPort | null;
  /** jobId -> occurrence keys staged in the firing thread and not started yet (withdrawn on cancel or pause). */
  private readonly stagedByJob = new Map<string, Set<string>>();

  constructor(private readonly o: EngineOptions) {
    this.wheel = new TimerWheel<string>(o.clock.nowMs());
    this.rand01 = o.rand01 ?? Math.random;
    const sender = o.dispatcher as Partial<FiringPort>;
    this.stager = o.manualClock !== true && typeof sender.stage === 'function' ? (o.dispatcher as FiringPort) : null;
  }

  get wheelSize(): number {
    return this.wheel.size;
  }

  inFlightCount(): number {
    return this.inFlight.size;
  }

  /** Depths of the engine's queues, for the queue-depth metrics. */
  queueDepths(): { dueBacklog: number; wheel: number; parked: number; dispatchQueued: number } {
    return { dueBacklog: this.dueBacklog.length - this.dueHead, wheel: this.wheel.size, parked: this.parked.length, dispatchQueued: this.o.dispatcher.queued() };
  }

  /** The wheel is below the loader's limit: a client `run` is accepted (else it is refused 429, wheel_full). */
  hasRoom(): boolean {
    return this.wheel.size < queueLimits.wheelLoadedMax;
  }

  /** Keeps loading every loaderIntervalMs for the shards started (startShard loads a shard's past at once). */
  async start(): Promise<void> {
    this.loaderTimer = setInterval(() => void this.runLoader(), limits.loaderIntervalMs);
    this.loaderTimer.unref();
    if (this.firing.size > 0) await this.runLoader();
  }

  /** This node leads `shard` in `term`: load its open executions and everything due within the horizon. */
  startShard(shard: number, term: number): void {
    if (this.stopped) return;
    this.firing.set(shard, term);
    this.loadOpenExecutions([shard]);
    // A full load: the incremental window of the other shards says nothing about this one.
    void this.loadShards([shard], this.o.clock.nowMs() + limits.wheelHorizonMs, null);
  }

  /** This node no longer leads `shard`: forget its armed and buffered occurrences (in-flight ones finish). */
  stopShard(shard: number): void {
    if (!this.firing.delete(shard)) return;
    // The firing thread drops what it holds for the shard; those stage() calls resolve null (onNotSent).
    this.stager?.revokeShard(shard);
    for (const [key, a] of this.armed) {
      if (a.shard !== shard) continue;
      this.wheel.cancel(key);
      this.unarm(key, a.jobId);
    }
    for (const [jobId, b] of this.buffered) if (b.shard === shard) this.buffered.delete(jobId);
    this.parked = this.parked.filter((p) => p.shard !== shard);
    for (const [key, sh] of this.awaitingApply) if (sh === shard) this.awaitingApply.delete(key);
    this.reschedule();
  }

  /** The shards this node fires, with their terms. */
  firingShards(): ReadonlyMap<number, number> {
    return this.firing;
  }

  /** Stops firing and loading; in-flight callbacks continue (see drain). */
  stop(): void {
    this.stopped = true;
    if (this.loaderTimer !== null) clearInterval(this.loaderTimer);
    this.loaderTimer = null;
    this.clearTimers();
  }

  /** Resolves once every in-flight callback's outcome has been handed to the proposer. */
  async drain(): Promise<void> {
    while (this.outcomesPending.size > 0) await Promise.all([...this.outcomesPending]);
    if (this.loading !== null) await this.loading;
  }

  /**
   * The state the API shows: RUNNING while a callback is on the wire; QUEUED while in the wheel, buffered, or
   * waiting in the dispatcher's concurrency queue.
   */
  overlayState(job: JobRecord): JobState {
    if (job.state !== 'PENDING' && job.state !== 'RUNNING') return job.state;
    if ((this.startedByJob.get(job.id) ?? 0) > 0) return 'RUNNING';
    if (this.inFlightByJob.has(job.id) || this.armedByJob.has(job.id) || this.buffered.has(job.id)) return 'QUEUED';
    return job.state;
  }

  /** A callback of this job is being sent or waits in the dispatcher's queue (this node leads its shard). */
  hasInFlight(jobId: string): boolean {
    return this.inFlightByJob.has(jobId);
  }

  /**
   * An occurrence is due now or within the spin window (the host timer is spinning, or due): long work on the
   * event loop (the applier's slices) should yield now. Cheap: it reads the timer state, not the wheel.
   */
  fireDue(): boolean {
    if (this.spin !== null) return true;
    return this.timerAtMs !== null && this.timerAtMs - nodeLimits.firingSpinMs <= this.o.clock.nowMs();
  }

  /** Callbacks per second the sender delivers when saturated (the firing thread measures it); null until measured. */
  drainRatePerS(): number | null {
    return this.stager?.drainRatePerS() ?? null;
  }

  /** The dispatcher's onStart: the attempt left its concurrency queue and is being sent. */
  onDispatchStart(d: Delivery, startedAtMs: number = this.o.clock.nowMs()): void {
    const key = occurrenceKey(d.jobId, d.scheduledAtMs);
    this.unstage(key, d.jobId);
    this.proposeFired(key, startedAtMs);
    if (!this.inFlight.has(key) || this.started.has(key)) return;
    this.started.add(key);
    this.startedByJob.set(d.jobId, (this.startedByJob.get(d.jobId) ?? 0) + 1);
  }

  // --- the manual clock (clock-driver.ts steps it from deadline to deadline) -----------------------------

  /**
   * The earliest instant after the clock's now at which something may come due, up to untilMs: an armed or parked
   * attempt, or a PENDING job of a shard this node fires that the loader has not armed yet. A lower bound
   * (a wheel bucket's key), never later than the real next occurrence; null when nothing comes due by untilMs.
   */
  nextDeadlineAfterNow(untilMs: number): number | null {
    const nowMs = this.o.clock.nowMs();
    let next: number | null = null;
    const consider = (ms: number | null | undefined): void => {
      if (ms != null && ms > nowMs && ms <= untilMs && (next === null || ms < next)) next = ms;
    };
    consider(this.wheel.nextDeadlineMs());
    for (const p of this.parked) consider(p.dueAtMs);
    for (const shard of this.firing.keys()) {
      // The cursor skips the jobs due at or before now (ids are never empty): those are the loader's already.
      const [job] = this.o.shards[shard].store.dueJobs(untilMs, 1, { atMs: nowMs + 1, id: '' });
      consider(job?.nextFireAtMs);
    }
    return next;
  }

  /** Fires what is due at the clock's now at once (the manual clock just moved). */
  kick(): void {
    if (this.stopped) return;
    this.clearTimers();
    this.wake();
  }

  /**
   * Nothing is due at the clock's now, nothing is being sent, no outcome or fired item waits for its command to
   * apply, and no buffered occurrence waits for a run to finish: the manual clock may step on.
   */
  settled(): boolean {
    if (this.dueHead < this.dueBacklog.length || this.inFlight.size > 0 || this.outcomesPending.size > 0) return false;
    if (this.awaitingApply.size > 0 || this.buffered.size > 0 || this.loading !== null) return false;
    const next = this.wheel.nextDeadlineMs();
    return next === null || next > this.o.clock.nowMs();
  }

  get isStopped(): boolean {
    return this.stopped;
  }

  // --- effects of applied commands ------------------------------------------------------------------------

  onApplied(shard: number, command: Command, effects: Effect[]): void {
    if (command.type === 'fired' || command.type === 'skipped') {
      for (const it of command.items) this.awaitingApply.delete(occurrenceKey(it.jobId, it.scheduledAtMs));
    } else if (command.type === 'outcomes') {
      // An outcome with its fired item folded in (the proposer's folding) is that fired item's apply too.
      for (const it of command.items) if (it.startedAtMs !== undefined) this.awaitingApply.delete(occurrenceKey(it.jobId, it.scheduledAtMs));
    }
    if (this.stopped || !this.firing.has(shard)) return;
    const horizonMs = this.o.clock.nowMs() + limits.wheelHorizonMs;
    for (const e of effects) {
      if (e.type === 'arm') {
        // A first attempt beyond the horizon is left to the loader, so memory stays bounded.
        if (e.attempt === 1 && e.dueAtMs > horizonMs) continue;
        const a: Armed = { shard, jobId: e.jobId, scheduledAtMs: e.scheduledAtMs, attempt: e.attempt, dueAtMs: e.dueAtMs, fromEffect: true };
        if (!this.hasRoom() && this.loaderFinds(a)) {
          // Left in SQLite: the next loader run reads everything and arms it when there is room.
          this.loadIncomplete = true;
          continue;
        }
        this.arm(a);
      } else if (e.type === 'disarm') {
        this.disarm(e.jobId);
      } else {
        const b = this.buffered.get(e.jobId);
        if (b !== undefined) {
          this.buffered.delete(e.jobId);
          // Held back: back to the wheel, due now, so it waits its turn like every other due occurrence.
          if (this.firingHeld()) this.arm({ ...b, dueAtMs: this.o.clock.nowMs(), released: true });
          else this.fire({ ...b, released: true });
        }
      }
    }
    this.reschedule();
  }

  /** A regular first attempt of a PENDING job: the loader arms it again from SQLite, so it may wait there. */
  private loaderFinds(a: Armed): boolean {
    if (a.attempt !== 1) return false;
    const job = this.o.shards[a.shard].store.getJob(a.jobId);
    return job !== null && job.state === 'PENDING' && job.nextFireAtMs === a.scheduledAtMs && this.o.shards[a.shard].store.getExecution(a.jobId, a.scheduledAtMs) === null;
  }

  /** Into the wheel, or `parked` when the wheel is at its ceiling (only arms the loader cannot find again get here). */
  private arm(a: Armed): void {
    const key = occurrenceKey(a.jobId, a.scheduledAtMs);
    if (this.wheel.full && !this.wheel.has(key)) {
      this.parked.push(a);
      return;
    }
    this.armed.set(key, a);
    let keys = this.armedByJob.get(a.jobId);
    if (keys === undefined) {
      keys = new Set();
      this.armedByJob.set(a.jobId, keys);
    }
    keys.add(key);
    // Firing thread: woken firingStageLeadMs early to stage it (fire -> stageAhead).
    this.wheel.add(key, this.stager !== null && a.stage !== false ? a.dueAtMs - limits.firingStageLeadMs : a.dueAtMs);
  }

  private unarm(key: string, jobId: string): void {
    this.armed.delete(key);
    const keys = this.armedByJob.get(jobId);
    if (keys === undefined) return;
    keys.delete(key);
    if (keys.size === 0) this.armedByJob.delete(jobId);
  }

  private disarm(jobId: string): void {
    void this.withdrawStaged(jobId);
    const keys = this.armedByJob.get(jobId);
    if (keys !== undefined) {
      for (const key of keys) {
        this.wheel.cancel(key);
        this.armed.delete(key);
      }
      this.armedByJob.delete(jobId);
    }
    this.buffered.delete(jobId);
    if (this.parked.length > 0) this.parked = this.parked.filter((p) => p.jobId !== jobId);
  }

  // --- the host timer ---------------------------------------------------------------------------------------

  private clearTimers(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    if (this.spin !== null) clearImmediate(this.spin);
    this.timer = null;
    this.timerAtMs = null;
    this.spin = null;
  }

  /** Arms the one host timer for the wheel's next deadline (or a setImmediate spin when it is this close). */
  private reschedule(): void {
    if (this.stopped) return;
    // Whatever freed room in the wheel (a fire, a cancel, a lost shard), parked arms take it first.
    this.unpark();
    if (this.heldBack) {
      // A full queue downstream: poll for room instead of spinning on the due keys.
      if (this.spin !== null || this.timer !== null) return;
      this.timerAtMs = this.o.clock.nowMs() + queueLimits.holdBackRetryMs;
      this.timer = setTimeout(() => this.wake(), queueLimits.holdBackRetryMs);
      return;
    }
    const next = this.dueHead < this.dueBacklog.length ? this.o.clock.nowMs() : this.wheel.nextDeadlineMs();
    if (next === null) {
      this.clearTimers();
      return;
    }
    if (this.spin !== null) return;
    const delayMs = this.dueHead < this.dueBacklog.length ? 0 : next - this.o.clock.nowMs();
    if (this.o.manualClock === true && delayMs > 0) {
      // A manual clock reaches the deadline only through an advance, which kicks the engine.
      this.clearTimers();
      return;
    }
    if (delayMs <= nodeLimits.firingSpinMs) {
      if (this.timer !== null) clearTimeout(this.timer);
      this.timer = null;
      this.timerAtMs = null;
      this.spin = setImmediate(() => this.wake());
      return;
    }
    if (this.timer !== null && this.timerAtMs === next) return;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timerAtMs = next;
    this.timer = setTimeout(() => this.wake(), delayMs - nodeLimits.firingSpinMs);
  }

  /**
   * Fires what is due, at most stallLimits.fireBatchMax occurrences per macrotask: the rest of a hot instant
   * waits in `dueBacklog` (still armed: stopShard and disarm still reach it) for the next setImmediate, so the
   * sockets, the Raft loop and the appliers run in between and the first callbacks leave at once.
   */
  private wake(): void {
    this.timer = null;
    this.timerAtMs = null;
    this.spin = null;
    if (this.stopped) return;
    const room = queueLimits.dueBacklogMax - (this.dueBacklog.length - this.dueHead);
    if (room > 0) for (const key of this.wheel.advanceTo(this.o.clock.nowMs(), room)) this.dueBacklog.push(key);
    assert(this.dueBacklog.length - this.dueHead <= queueLimits.dueBacklogMax, 'due backlog over its limit');
    this.heldBack = false;
    let n = 0;
    while (this.dueHead < this.dueBacklog.length && n < stallLimits.fireBatchMax) {
      if (this.firingHeld()) {
        this.heldBack = true;
        break;
      }
      const key = this.dueBacklog[this.dueHead++]!;
      const a = this.armed.get(key);
      if (a === undefined) continue;
      n++;
      this.unarm(key, a.jobId);
      this.fire(a);
    }
    if (this.dueHead >= this.dueBacklog.length) {
      this.dueBacklog = [];
      this.dueHead = 0;
    } else if (this.dueHead >= stallLimits.fireBatchMax * 16) {
      this.dueBacklog = this.dueBacklog.slice(this.dueHead);
      this.dueHead = 0;
    }
    if (this.loadIncomplete && this.wheel.size <= queueLimits.wheelLoadedMax / 2) void this.runLoader();
    this.reschedule();
  }

  /** A queue downstream is full: the dispatcher's waiting callbacks, or the records waiting to be proposed. */
  private firingHeld(): boolean {
    return this.o.dispatcher.queued() >= queueLimits.dispatchQueuedMax || this.o.proposer.engineItemsCount() >= queueLimits.proposerEngineItemsMax;
  }

  /** Parked arms go into the wheel as it has room, oldest first. */
  private unpark(): void {
    if (this.parked.length === 0) return;
    let i = 0;
    while (i < this.parked.length && !this.wheel.full) this.arm(this.parked[i++]!);
    this.parked.splice(0, i);
  }

  // --- firing -------------------------------------------------------------------------------------------

  /** Decides what to do with a due occurrence attempt, then sends it. */
  private fire(a: Armed): void {
    const nowMs = this.o.clock.nowMs();
    if (nowMs < a.dueAtMs) {
      // Woken early to stage it in the firing thread; else never early (a clock that stepped back): wait again.
      if (this.stager !== null && a.stage !== false) this.stageAhead(a);
      else this.arm(a);
      return;
    }
    if (!this.firing.has(a.shard)) return;
    if (!this.o.leaseValid(a.shard)) {
      // The lease is renewed on real time: a manual clock must not move the occurrence, only wait for it.
      this.arm({ ...a, dueAtMs: this.o.manualClock === true ? a.dueAtMs : nowMs + leaseRetryMs });
      return;
    }
    const key = occurrenceKey(a.jobId, a.scheduledAtMs);
    if (this.inFlight.has(key)) return;
    const store = this.o.shards[a.shard].store;
    const job = store.getJob(a.jobId);
    if (job === null || job.state === 'CANCELLED') return;
    const exec = store.getExecution(a.jobId, a.scheduledAtMs);
    if (exec !== null && finalExecution.has(exec.state)) return;
    // A paused job fires nothing regular; an open execution (run_job, a retry armed before) may still start.
    if (job.state === 'PAUSED' && exec === null) return;
    const regular = exec === null && job.nextFireAtMs === a.scheduledAtMs;
    if (exec === null && (this.awaitingApply.has(key) || (!regular && !a.fromEffect))) return;
    if (regular && a.attempt === 1 && job.schedule.kind !== 'once' && this.holdBack(a, job, nowMs)) return;
    this.send(a, job, nowMs, regular && a.attempt === 1 && job.schedule.kind === 'once');
  }

  /** Does what the scheduler decided for a regular occurrence of a recurring job (policy.ts); true when not sent now. */
  private holdBack(a: Armed, job: JobRecord, nowMs: number): boolean {
    const runInFlight = job.overlap !== 'allow' && this.hasOtherOpen(a);
    const action = dueAction(job, a.scheduledAtMs, nowMs, runInFlight, a.released === true);
    if (action === 'fire') return false;
    if (action === 'buffer') {
      this.buffered.set(a.jobId, a);
      return true;
    }
    this.awaitingApply.set(occurrenceKey(a.jobId, a.scheduledAtMs), a.shard);
    const reason = action === 'skip_misfire' ? 'misfire' : 'overlap';
    this.o.proposer.addSkipped(a.shard, { jobId: a.jobId, scheduledAtMs: a.scheduledAtMs, reason });
    return true;
  }

  private hasOtherOpen(a: Armed): boolean {
    if ((this.inFlightByJob.get(a.jobId) ?? 0) > 0) return true;
    const open = this.o.shards[a.shard].store.openExecutions(a.jobId);
    return open.some((e) => e.scheduledAtMs !== a.scheduledAtMs);
  }

  /** `firstOfOnce`: the first attempt of a one-off job, whose fired item the proposer may hold for its outcome. */
  private send(a: Armed, job: JobRecord, nowMs: number, firstOfOnce: boolean, staged = false): void {
    const sh = this.o.shards[a.shard];
    const spec: CallbackSpec | null = job.callback ?? (job.task === null ? null : sh.store.getTask(job.task));
    const key = occurrenceKey(a.jobId, a.scheduledAtMs);
    const fired: FiredItem = { jobId: a.jobId, scheduledAtMs: a.scheduledAtMs, attempt: a.attempt, startedAtMs: nowMs };
    this.awaitingApply.set(key, a.shard);
    if (spec === null) {
      this.o.proposer.addFired(a.shard, fired);
      this.o.proposer.addOutcome(a.shard, this.outcomeItem(a, 'failed', null, `task ${job.task} not found`, nowMs, null));
      return;
    }
    this.firedPending.set(key, { shard: a.shard, item: fired, hold: firstOfOnce });
    const delivery: Delivery = {
      jobId: a.jobId,
      scheduledAtMs: a.scheduledAtMs,
      attempt: a.attempt,
      fencingToken: `${a.shard}.${this.firing.get(a.shard) ?? 0}`,
      spec,
      body: job.payload,
      bodyEncoding: job.payloadEncoding,
      concurrencyKey: job.task ?? `job:${job.id}`,
    };
    this.sentTotal++;
    this.inFlight.set(key, a.attempt);
    this.inFlightByJob.set(a.jobId, (this.inFlightByJob.get(a.jobId) ?? 0) + 1);
    if (staged && this.stager !== null) {
      let keys = this.stagedByJob.get(a.jobId);
      if (keys === undefined) this.stagedByJob.set(a.jobId, (keys = new Set()));
      keys.add(key);
      const p: Promise<void> = this.stager.stage(delivery, a.dueAtMs).then((outcome) => {
        this.outcomesPending.delete(p);
        if (outcome === null) this.onNotSent(a);
        else this.onOutcome(a, spec, outcome);
      });
      this.outcomesPending.add(p);
      return;
    }
    const p: Promise<void> = this.o.dispatcher.send(delivery).then((outcome) => {
      this.outcomesPending.delete(p);
      this.onOutcome(a, spec, outcome);
    });
    this.outcomesPending.add(p);
  }

  // --- staging in the firing thread (src/dispatch/firing-port.ts) ------------------------------------------
  // The NodeCore port keeps this shape: stage = a dispatch output with dueAtMs; withdraw/revoke = a withdraw output.

  /**
   * An occurrence due within limits.firingStageLeadMs: the same checks as fire() except the lease (the thread
   * obeys the shard's lease deadline at the due ms), then staged in the firing thread, which sends it at dueAtMs.
   * What the fire time could still change is not staged but armed again at its due time: a recurring job's
   * overlap rule (it depends on the run in flight then), and anything past the thread's staged limit.
   */
  private stageAhead(a: Armed): void {
    const exact = (): void => this.arm({ ...a, stage: false });
    if (!this.firing.has(a.shard)) return;
    const key = occurrenceKey(a.jobId, a.scheduledAtMs);
    if (this.inFlight.has(key)) return;
    const store = this.o.shards[a.shard].store;
    const job = store.getJob(a.jobId);
    if (job === null || job.state === 'CANCELLED') return;
    const exec = store.getExecution(a.jobId, a.scheduledAtMs);
    if (exec !== null && finalExecution.has(exec.state)) return;
    if (job.state === 'PAUSED' && exec === null) return;
    const regular = exec === null && job.nextFireAtMs === a.scheduledAtMs;
    if (exec === null && (this.awaitingApply.has(key) || (!regular && !a.fromEffect))) return;
    if (this.stager!.stagedCount() >= limits.firingStagedMax || this.firingHeld()) return exact();
    // A missing task fails at once (send): only at its due time, never ahead.
    if (job.callback === null && (job.task === null || store.getTask(job.task) === null)) return exact();
    const firstOfOnce = regular && a.attempt === 1 && job.schedule.kind === 'once';
    if (regular && a.attempt === 1 && job.schedule.kind !== 'once') {
      if (job.overlap !== 'allow' || a.released === true) return exact();
      if (dueAction(job, a.scheduledAtMs, a.dueAtMs, false, false) !== 'fire') return exact();
    }
    this.send(a, job, a.dueAtMs, firstOfOnce, true);
  }

  private unstage(key: string, jobId: string): void {
    const keys = this.stagedByJob.get(jobId);
    if (keys === undefined || !keys.delete(key)) return;
    if (keys.size === 0) this.stagedByJob.delete(jobId);
  }

  /**
   * Takes back what the firing thread holds for this job and has not sent; resolves once the thread answered.
   * Cancel and pause wait for it before they answer, so nothing fires after an acknowledged cancel.
   */
  async withdrawStaged(jobId: string): Promise<void> {
    const keys = this.stagedByJob.get(jobId);
    if (keys === undefined || this.stager === null) return;
    await this.stager.withdraw([...keys]);
  }

  /**
   * A staged delivery the thread did not send (withdrawn, its shard revoked, the node closing): nothing was
   * proposed for it. It goes back to the wheel at its due time; fire() decides again (a cancelled job is dropped).
   */
  private onNotSent(a: Armed): void {
    const key = occurrenceKey(a.jobId, a.scheduledAtMs);
    this.unstage(key, a.jobId);
    this.firedPending.delete(key);
    this.awaitingApply.delete(key);
    this.inFlight.delete(key);
    decrement(this.inFlightByJob, a.jobId);
    this.sentTotal--;
    if (this.stopped || !this.firing.has(a.shard)) return;
    this.arm({ ...a, stage: false });
    this.reschedule();
  }

  /** Hands the attempt's fired item to the proposer (once: at its start, or with its outcome if it never started). */
  private proposeFired(key: string, startedAtMs: number | null): void {
    const f = this.firedPending.get(key);
    if (f === undefined) return;
    this.firedPending.delete(key);
    if (startedAtMs !== null) f.item.startedAtMs = startedAtMs;
    this.o.proposer.addFired(f.shard, f.item, f.hold);
  }

  private onOutcome(a: Armed, spec: CallbackSpec, o: AttemptOutcome): void {
    const key = occurrenceKey(a.jobId, a.scheduledAtMs);
    this.unstage(key, a.jobId);
    this.proposeFired(key, null);
    this.inFlight.delete(key);
    decrement(this.inFlightByJob, a.jobId);
    if (this.started.delete(key)) decrement(this.startedByJob, a.jobId);
    this.o.metrics.callbacks.inc({ outcome: o.kind });
    let item: OutcomeItem;
    if (o.kind === 'succeeded') {
      item = this.outcomeItem(a, 'succeeded', o.statusCode, o.error, o.finishedAtMs, null);
    } else if (o.kind === 'retryable' && a.attempt < spec.retry.maxAttempts) {
      const delayMs = retryDelayMs(spec.retry, a.attempt, o.retryAfterMs, this.rand01());
      item = this.outcomeItem(a, 'retry', o.statusCode, o.error, o.finishedAtMs, o.finishedAtMs + delayMs);
    } else {
      item = this.outcomeItem(a, 'failed', o.statusCode, o.error, o.finishedAtMs, null);
    }
    this.o.proposer.addOutcome(a.shard, item);
  }

  private outcomeItem(
    a: Armed,
    result: OutcomeItem['result'],
    statusCode: number | null,
    error: string | null,
    finishedAtMs: number,
    retryAtMs: number | null,
  ): OutcomeItem {
    return { jobId: a.jobId, scheduledAtMs: a.scheduledAtMs, attempt: a.attempt, result, statusCode, error, finishedAtMs, retryAtMs };
  }

  // --- loading ------------------------------------------------------------------------------------------

  /**
   * When a shard starts (a restart, or this node became its leader): RUNNING executions fire again now
   * (attempt + 1, same deduplication key), QUEUED ones are armed at their retryAtMs.
   */
  loadOpenExecutions(shards: number[]): void {
    const nowMs = this.o.clock.nowMs();
    let refired = 0;
    let requeued = 0;
    for (const shard of shards) {
      const sh = this.o.shards[shard];
      let after: { jobId: string; scheduledAtMs: number } | null = null;
      for (;;) {
        const page = sh.store.allOpenExecutions(nodeLimits.openExecutionsPageMax, after);
        for (const e of page) {
          const running = e.state === 'RUNNING';
          // Retries of a paused job wait for resume (which re-arms them); one in flight at the crash fires again.
          if (!running && sh.store.getJob(e.jobId)?.state === 'PAUSED') continue;
          const dueAtMs = running ? nowMs : Math.max(e.retryAtMs ?? nowMs, e.scheduledAtMs);
          this.arm({ shard: sh.shard, jobId: e.jobId, scheduledAtMs: e.scheduledAtMs, attempt: e.attempt + 1, dueAtMs, fromEffect: true });
          if (running) refired++;
          else requeued++;
        }
        if (page.length < nodeLimits.openExecutionsPageMax) break;
        const last = page[page.length - 1];
        after = { jobId: last.jobId, scheduledAtMs: last.scheduledAtMs };
      }
    }
    if (refired + requeued > 0) this.o.logger.info('open executions loaded', { shards, refired, requeued });
    this.reschedule();
  }

  /** Arms every PENDING job due within the horizon that is not armed yet. One run at a time. */
  runLoader(): Promise<void> {
    if (this.loading !== null || this.stopped) return this.loading ?? Promise.resolve();
    this.loading = this.loadAll().finally(() => {
      this.loading = null;
    });
    return this.loading;
  }

  /**
   * One loader run. Runs read only the window (previous run's end, now + horizon]: whatever came due before
   * it was armed by its effect or by an earlier run. Every nodeLimits.loaderFullScanEveryRuns runs (and the first)
   * the whole range up to now + horizon is read again, which heals any gap (a clock that stepped back).
   */
  private async loadAll(): Promise<void> {
    const untilMs = this.o.clock.nowMs() + limits.wheelHorizonMs;
    const full = this.loadedUntilMs === null || this.loadIncomplete || this.loaderRuns % nodeLimits.loaderFullScanEveryRuns === 0;
    if (full) this.loadIncomplete = false;
    const from = full ? null : { atMs: this.loadedUntilMs as number, id: '' };
    this.loaderRuns++;
    const armed = await this.loadShards([...this.firing.keys()], untilMs, from);
    if (this.stopped) return;
    this.loadedUntilMs = Math.max(this.loadedUntilMs ?? untilMs, untilMs);
    if (armed > 0) this.o.logger.debug('loader armed occurrences', { armed, full });
  }

  /** Arms the PENDING jobs of `shards` due in (from, untilMs]; returns how many were armed. */
  private async loadShards(shards: number[], untilMs: number, from: { atMs: number; id: string } | null): Promise<number> {
    let armed = 0;
    for (const shard of shards) {
      const sh = this.o.shards[shard];
      let after: { atMs: number; id: string } | null = from;
      for (;;) {
        if (this.stopped || !this.firing.has(shard)) break;
        if (!this.hasRoom()) {
          // The rest stays in SQLite: a later run (a full one) arms it once firing made room.
          this.loadIncomplete = true;
          break;
        }
        const want = Math.min(limits.loaderBatchMax, queueLimits.wheelLoadedMax - this.wheel.size);
        const page = sh.store.dueJobs(untilMs, want, after);
        for (const job of page) if (this.armLoaded(sh.shard, job)) armed++;
        this.reschedule();
        if (page.length < want) break;
        const last = page[page.length - 1];
        after = { atMs: last.nextFireAtMs ?? 0, id: last.id };
        // Let timers and requests run between pages of a large load.
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
    }
    return armed;
  }

  private armLoaded(shard: number, job: JobRecord): boolean {
    if (job.nextFireAtMs === null) return false;
    const key = occurrenceKey(job.id, job.nextFireAtMs);
    if (this.armed.has(key) || this.inFlight.has(key) || this.awaitingApply.has(key)) return false;
    const b = this.buffered.get(job.id);
    if (b !== undefined && b.scheduledAtMs === job.nextFireAtMs) return false;
    this.arm({ shard, jobId: job.id, scheduledAtMs: job.nextFireAtMs, attempt: 1, dueAtMs: job.nextFireAtMs, fromEffect: false });
    return true;
  }
}
