/**
 * The leader's duties for the shards this node fires, as decisions: one record per occurrence in flight
 * (`Occurrence`: its armed attempt, its order out, whether its record is being applied), one TimerWheel keyed by
 * occurrence, the due backlog, the parked arms, the buffered occurrences and the loader's window.
 *
 * A shard is fired from `leaderStart(shard, term)` (fencing token `${shard}.${term}`) to `leaderStop(shard)`:
 * then its armed attempts are forgotten and its orders not started yet are withdrawn; those already sent finish
 * and their records are proposed to a group this node no longer leads, so they are dropped (at-least-once: the
 * new leader fires again with the same deduplication key and a higher fencing token). Right before each order
 * the shard's lease is asked: without it, the attempt waits a few ms and is looked at again.
 *
 * At fire time rules.ts `decideDue` takes the stored job and execution and asks the scheduler's policy; an order
 * then leaves at once. An attempt armed by an applied command holds the records that command wrote (`Held`): the
 * fire reads from the store only what it does not hold, and every later command that names the job (or may change
 * jobs it does not name: the shard's epoch) drops what is held, so what the fire decides on is what the store
 * holds. Its `fired` record goes to the batcher when the host reports the start (startedAtMs says when it was
 * really sent), or with the outcome if it never started, and may be folded into the outcome.
 *
 * The loader keeps the wheel filled with occurrences due within limits.wheelHorizonMs (every
 * limits.loaderIntervalMs, one page per tick); when a shard starts, its open executions are loaded: RUNNING ones
 * fire again at once (attempt + 1, same deduplication key), QUEUED ones at their retryAtMs.
 *
 * Back-pressure (queueLimits): a stored occurrence is never refused, only held back. The loader (and the arm of
 * a regular first attempt, which the loader finds again) fills the wheel only up to wheelLoadedMax; the headroom
 * takes the arms nothing else would find again, and one that still finds the wheel full waits in `parked`. At
 * most dueBacklogMax due keys are taken from the wheel. While dispatchQueuedMax orders wait to start or the
 * batcher holds proposerEngineItemsMax records, nothing new fires; the core looks again holdBackRetryMs later.
 */
import { assert } from '../core/assert.js';
import { limits, nodeLimits, queueLimits, stallLimits } from '../core/limits.js';
import type { Logger } from '../core/log.js';
import type { AttemptOutcome } from '../dispatch/dispatcher.js';
import type { Command, Effect, FiredItem } from '../scheduler/commands.js';
import type { DueJob, SchedulerStore } from '../scheduler/store.js';
import type { CallbackSpec, ExecutionRecord, JobRecord, JobState } from '../scheduler/types.js';
import { TimerWheel } from '../timerwheel/wheel.js';
import type { Batcher } from './batcher.js';
import { decideDue, isFinal, missingTaskOutcome, occurrenceKey, outcomeOf, stagedEarlyHolds, type Attempt, type Held } from './rules.js';
import type { DispatchOrder, OccurrenceKey, Withdrawal } from './types.js';

/** Without a valid lease a due occurrence is looked at again this much later (a heartbeat round renews it). */
const leaseRetryMs = nodeLimits.leaseRetryMs;

/**
 * Where an armed attempt waits: the wheel, the due backlog, `parked` (wheel full), buffered (overlap), due
 * but waiting for the shard's lease (looked at again on the next tick, which the host runs leaseRetryMs later),
 * `behind` an earlier attempt of the same occurrence this node still has out (armed again when it ends), or
 * waiting for the `outcome` record of that attempt to apply (then decided against the store), or due while its
 * shard drains before a leadership transfer (`drain`: looked at again when the drain ends without one).
 */
type Where = 'wheel' | 'due' | 'parked' | 'buffered' | 'lease' | 'behind' | 'outcome' | 'drain';

interface Armed extends Attempt {
  where: Where;
}

/** The attempt ordered out: handed to the host, not finished. */
interface Out {
  attempt: number;
  /** The term of the shard's leadership it was ordered in (its fencing token's). */
  term: number;
  spec: CallbackSpec;
  /** The host reported its start (past the dispatcher's concurrency queue): the RUNNING overlay. */
  started: boolean;
  /** The fired record, until it goes to the batcher (at the start, or with the outcome). */
  fired: FiredItem | null;
  /** A one-off's first attempt: its fired record may wait in the batcher for the outcome. */
  hold: boolean;
  /**
   * The fired record left and its proposal failed (leadership lost, refused, timed out): the outcome carries it
   * again (folded, `startedAtMs`), or the outcome would apply to an execution that was never recorded.
   */
  firedLost: FiredItem | null;
  /** The attempt, when it was ordered before its due time (staged): a pause takes the order back and re-arms it. */
  staged: Attempt | null;
}

/** Everything this node knows about one occurrence in flight. Gone once nothing of it is pending. */
interface Occurrence {
  key: OccurrenceKey;
  shard: number;
  jobId: string;
  scheduledAtMs: number;
  armed: Armed | null;
  out: Out | null;
  /** A fired or skipped record of it is proposed and not applied yet: the loader must not arm it again. */
  recording: boolean;
  /** The attempt whose outcome record an armed attempt waits for (`outcome`), else null. */
  awaitedAttempt: number | null;
}

interface Load {
  shard: number;
  untilMs: number;
  after: { atMs: number; id: string } | null;
  /** Part of a periodic loader run (the window it covers is recorded once all its loads are done). */
  periodic: boolean;
}

export interface FiringOutbox {
  dispatch: DispatchOrder[];
  withdraw: Withdrawal[];
}

export interface FiringDeps {
  stores: readonly SchedulerStore[];
  startMs: number;
  rand01: () => number;
  leaseValid(shard: number): boolean;
  manualClock: boolean;
  /** How long before its due time an attempt may be ordered (staged); 0: at its due time. */
  stageLeadMs: number;
  logger: Logger;
}

export class Firing {
  private readonly wheel: TimerWheel<OccurrenceKey>;
  private readonly occ = new Map<OccurrenceKey, Occurrence>();
  private readonly byJob = new Map<string, Set<OccurrenceKey>>();
  /** The shards this node fires: shard -> the term it leads in (the fencing token). */
  private readonly firing = new Map<number, number>();
  /** Due keys taken from the wheel and not looked at yet (a hot instant is fired in batches). */
  private dueBacklog: OccurrenceKey[] = [];
  private dueHead = 0;
  /** Keys whose arm found the wheel at wheelEntriesMax, oldest first (moved in as room frees). */
  private parked: OccurrenceKey[] = [];
  /** Set when the last tick stopped on a full queue downstream: the next look is a poll, not a spin. */
  private heldBackAtMs: number | null = null;
  /**
   * Due attempts whose shard had no valid lease, and since when. They keep their due time and are looked at again
   * on every tick: a poll the host times on real time, so a lease that lapsed for a moment (a stall) cannot strand
   * them behind a scheduler clock that does not move.
   */
  private leaseWaiting: OccurrenceKey[] = [];
  private leaseWaitAtMs: number | null = null;
  /** Lease waiters put back into the backlog by this tick (they may exceed its limit by that much). */
  private leaseRetried = 0;
  private outCount = 0;
  private startedCount = 0;
  /** Orders out that were ordered before their due time and have not started (bounded by limits.firingStagedMax). */
  private stagedCount = 0;
  /** Attempts in the wheel at their due time itself (`unstaged`): the core's next deadline then needs precision. */
  private unstagedInWheel = 0;
  /** Shards drained before a leadership transfer (drain): nothing new is ordered for them. */
  private readonly draining = new Set<number>();
  /** Due attempts of draining shards, in the order they came due. */
  private drainWaiting: OccurrenceKey[] = [];
  /** Per draining shard, its occurrences whose order was out when the drain began (no new order comes meanwhile). */
  private readonly drainOut = new Map<number, Set<OccurrenceKey>>();
  private loads: Load[] = [];
  private periodicUntilMs: number | null = null;
  private periodicArmed = 0;
  private nextLoaderAtMs: number;
  /** The end of the window the last complete loader run covered (null before the first). */
  private loadedUntilMs: number | null = null;
  private loaderRuns = 0;
  /** The loader (or a skipped arm) left due occurrences in the store for want of room: the next run reads everything. */
  private loadIncomplete = false;
  /** Per shard: bumped by whatever may change the shard's records without naming the jobs (Held.epoch). */
  private readonly epochs: number[];
  private nowMs: number;
  stopped = false;
  /** Orders handed out since start. */
  dispatched = 0;

  constructor(
    private readonly d: FiringDeps,
    private readonly batcher: Batcher,
    private readonly outbox: FiringOutbox,
  ) {
    this.wheel = new TimerWheel<OccurrenceKey>(d.startMs);
    this.epochs = d.stores.map(() => 0);
    this.nowMs = d.startMs;
    this.nextLoaderAtMs = d.startMs + limits.loaderIntervalMs;
  }

  // --- leadership -----------------------------------------------------------------------------------------

  leaderStart(shard: number, term: number, nowMs: number): void {
    if (this.stopped) return;
    this.see(nowMs);
    this.epochs[shard]!++;
    this.firing.set(shard, term);
    this.loadOpenExecutions(shard);
    // A full load: the incremental window of the other shards says nothing about this one. Its first page now.
    const load: Load = { shard, untilMs: nowMs + limits.wheelHorizonMs, after: null, periodic: false };
    if (!this.loadPage(load)) this.loads.push(load);
    this.unpark();
  }

  leaderStop(shard: number): void {
    if (!this.firing.delete(shard)) return;
    this.epochs[shard]!++;
    for (const rec of [...this.occ.values()]) {
      if (rec.shard !== shard) continue;
      this.unarm(rec);
      rec.recording = false;
      this.withdraw(rec, 'leadership_lost');
      this.forgetIfDone(rec);
    }
    this.parked = this.parked.filter((k) => this.occ.get(k)?.armed?.where === 'parked');
    this.unpark();
  }

  firingShards(): ReadonlyMap<number, number> {
    return this.firing;
  }

  // --- draining before a leadership transfer --------------------------------------------------------------

  /**
   * A planned leadership transfer drains the shard first, so that its next leader finds every callback this node
   * sent recorded and sends none of them again: nothing new is ordered for it (a due attempt waits, `drain`), its
   * orders not started yet are withdrawn (their attempts wait the same way once the host took them back), and the
   * fired records of its orders out are not held for their outcomes any more (the batcher's hold).
   */
  drain(shard: number, nowMs: number): void {
    this.see(nowMs);
    if (!this.firing.has(shard) || this.draining.has(shard)) return;
    this.draining.add(shard);
    const out = new Set<OccurrenceKey>();
    this.drainOut.set(shard, out);
    for (const rec of [...this.occ.values()]) {
      if (rec.shard !== shard || rec.out === null) continue;
      out.add(rec.key);
      rec.out.hold = false;
      if (rec.out.started || rec.out.fired === null) continue;
      // Decided to send already: when it goes after all, the misfire rule does not count the drain's wait.
      const back: Attempt = { shard, jobId: rec.jobId, scheduledAtMs: rec.scheduledAtMs, attempt: rec.out.attempt, dueAtMs: rec.out.fired.startedAtMs, fromEffect: false, released: true };
      this.takeBack(rec, back, 'draining');
    }
    this.batcher.releaseHeld(shard, null, nowMs);
  }

  /** The drain ended without a transfer: the attempts that waited go back to the wheel, due at once. */
  undrain(shard: number): void {
    if (!this.draining.delete(shard)) return;
    this.drainOut.delete(shard);
    const stay: OccurrenceKey[] = [];
    for (const key of this.drainWaiting) {
      const rec = this.occ.get(key);
      if (rec?.armed?.where !== 'drain') continue;
      if (rec.shard === shard) this.arm(rec.armed);
      else stay.push(key);
    }
    this.drainWaiting = stay;
  }

  /** Leadership started or stopped: the shard's drain (if any) is over (a leaderStop then forgets what waited). */
  endDrain(shard: number): void {
    if (this.draining.has(shard)) this.undrain(shard);
  }

  /**
   * No order of the draining shard is out (their outcomes went to the batcher, which says whether they applied).
   * Only the orders out when the drain began are looked at: fire() orders nothing for a draining shard.
   */
  drained(shard: number): boolean {
    const out = this.drainOut.get(shard);
    if (out === undefined) return false;
    for (const key of out) {
      if (this.occ.get(key)?.out != null) return false;
      out.delete(key);
    }
    return true;
  }

  isDraining(shard: number): boolean {
    return this.draining.has(shard);
  }

  private drainWait(rec: Occurrence, a: Armed): void {
    rec.armed = { ...a, where: 'drain' };
    this.drainWaiting.push(rec.key);
  }

  stop(): void {
    this.stopped = true;
    this.loads = [];
    this.periodicUntilMs = null;
  }

  // --- applied commands -----------------------------------------------------------------------------------

  applied(shard: number, command: Command, effects: Effect[], nowMs: number): void {
    this.see(nowMs);
    // First: what the command changed is no longer held (recorded() may arm again an attempt that waited for it).
    this.forget(shard, command);
    this.recorded(command);
    if (this.stopped || !this.firing.has(shard)) return;
    const horizonMs = nowMs + limits.wheelHorizonMs;
    for (const e of effects) {
      if (e.type === 'arm') {
        // A first attempt beyond the horizon is left to the loader, so memory stays bounded.
        if (e.attempt === 1 && e.dueAtMs > horizonMs) continue;
        const a: Attempt = { shard, jobId: e.jobId, scheduledAtMs: e.scheduledAtMs, attempt: e.attempt, dueAtMs: e.dueAtMs, fromEffect: true, released: false, held: this.hold(shard, e.job, e.execution) };
        if (!this.hasRoom() && this.loaderFinds(a)) {
          // Left in the store: the next loader run reads everything and arms it when there is room.
          this.loadIncomplete = true;
          continue;
        }
        this.arm(a);
      } else if (e.type === 'disarm') {
        this.disarm(e.jobId);
      } else {
        this.release(e.jobId, nowMs);
      }
    }
    this.unpark();
  }

  /**
   * The records an arm effect carries are kept for its fire while the wheel is under armedRecordsHeldMax and the
   * payload within armedRecordPayloadBytesMax (else the fire reads them, so what is held stays bounded).
   */
  private hold(shard: number, job: JobRecord | undefined, execution: ExecutionRecord | null | undefined): Held | undefined {
    if (job === undefined || this.wheel.size >= queueLimits.armedRecordsHeldMax) return undefined;
    if (job.payload.length > queueLimits.armedRecordPayloadBytesMax) return undefined;
    return { job, execution, epoch: this.epochs[shard]! };
  }

  /**
   * An applied command changes the stored records of the jobs it names: what the attempts of those jobs hold is
   * dropped (their fire reads the store). When in doubt the whole shard's: retention deletes what the store picks.
   * Runs on every node for every shard, firing or not, before the command's effects arm anything.
   */
  private forget(shard: number, command: Command): void {
    switch (command.type) {
      case 'create_jobs':
        for (const spec of command.jobs) this.forgetJob(spec.id);
        return;
      case 'cancel_job':
      case 'pause_job':
      case 'resume_job':
      case 'run_job':
      case 'patch_job':
        return this.forgetJob(command.id);
      case 'fired':
      case 'outcomes':
      case 'skipped':
        for (const it of command.items) this.forgetJob(it.jobId);
        return;
      case 'replay_jobs':
        for (const id of command.ids) this.forgetJob(id);
        return;
      case 'put_task':
      case 'delete_task':
      case 'put_calendar':
      case 'delete_calendar':
      case 'noop':
        return; // they write no job and no execution (a task is read at every fire anyway)
      default:
        this.epochs[shard]!++;
    }
  }

  private forgetJob(jobId: string): void {
    const keys = this.byJob.get(jobId);
    if (keys === undefined) return;
    for (const key of keys) {
      const armed = this.occ.get(key)!.armed;
      if (armed !== null) armed.held = undefined;
    }
  }

  /**
   * The firing records of a command whose proposal failed (or was given up). A fired item of an order still out
   * is kept for its outcome; then the occurrence is left to the loader, as for an applied record.
   */
  lost(command: Command): void {
    if (command.type === 'fired') {
      for (const it of command.items) {
        const out = this.occ.get(occurrenceKey(it.jobId, it.scheduledAtMs))?.out;
        if (out != null && out.attempt === it.attempt && out.fired === null) out.firedLost = it;
      }
    }
    this.recorded(command);
  }

  /** The records of a command were applied, or lost with their proposal: the loader may arm the occurrence again. */
  recorded(command: Command): void {
    if (command.type === 'fired' || command.type === 'skipped') {
      for (const it of command.items) this.unrecord(occurrenceKey(it.jobId, it.scheduledAtMs));
    } else if (command.type === 'outcomes') {
      for (const it of command.items) {
        const key = occurrenceKey(it.jobId, it.scheduledAtMs);
        this.outcomeRecorded(key, it.attempt);
        // An outcome with its fired item folded in (the batcher's folding) is that fired item's apply too.
        if (it.startedAtMs !== undefined) this.unrecord(key);
      }
    }
  }

  /**
   * The outcome record of an attempt this node ran applied (or was lost): an attempt of the same occurrence that
   * came due while it was out is armed again, and at its turn the store says whether it still goes. Applying the
   * outcome's own effects after this (a retry) re-arms it in place.
   */
  private outcomeRecorded(key: OccurrenceKey, attempt: number): void {
    const rec = this.occ.get(key);
    if (rec?.armed?.where !== 'outcome' || rec.awaitedAttempt !== attempt) return;
    rec.awaitedAttempt = null;
    this.arm(rec.armed);
  }

  private unrecord(key: OccurrenceKey): void {
    const rec = this.occ.get(key);
    if (rec === undefined) return;
    rec.recording = false;
    this.forgetIfDone(rec);
  }

  /** The job's `finished` effect: its buffered occurrence (overlap=buffer_one) goes now. */
  private release(jobId: string, nowMs: number): void {
    const rec = this.bufferedOf(jobId);
    if (rec === null) return;
    const b = rec.armed!;
    rec.armed = null;
    // Decided on the store: this runs while an applied command is delivered, and the host may have applied the next
    // ones of the same write already (their delivery, which would drop what is held, comes after).
    const c = { ...b, released: true, held: undefined };
    // Held back: back to the wheel, due at once (its own due time, past: not nowMs, which a wall clock stepping back
    // would make a future time), so it waits its turn like every other due occurrence.
    if (this.firingHeld()) this.arm(c);
    else this.fire(rec, c, nowMs);
    this.forgetIfDone(rec);
  }

  /** A regular first attempt of a PENDING job: the loader arms it again from the store, so it may wait there. */
  private loaderFinds(a: Attempt): boolean {
    if (a.attempt !== 1) return false;
    const store = this.d.stores[a.shard]!;
    const job = store.getJob(a.jobId);
    return job !== null && job.state === 'PENDING' && job.nextFireAtMs === a.scheduledAtMs && store.getExecution(a.jobId, a.scheduledAtMs) === null;
  }

  // --- orders -----------------------------------------------------------------------------------------------

  started(key: OccurrenceKey, startedAtMs: number): void {
    const rec = this.occ.get(key);
    if (rec === undefined || rec.out === null) return;
    this.handFired(rec, startedAtMs, startedAtMs);
    if (rec.out.started) return;
    rec.out.started = true;
    this.startedCount++;
    if (rec.out.staged !== null) this.stagedCount--;
  }

  outcome(key: OccurrenceKey, o: AttemptOutcome): void {
    const rec = this.occ.get(key);
    assert(rec !== undefined, 'an outcome for an occurrence that has no order out');
    assert(rec.out !== null, 'an outcome for an occurrence whose order is not out');
    this.handFired(rec, null, o.finishedAtMs);
    const out = rec.out;
    this.endOrder(rec, true);
    const a = { jobId: rec.jobId, scheduledAtMs: rec.scheduledAtMs, attempt: out.attempt };
    const item = outcomeOf(a, out.spec, o, this.d.rand01);
    if (out.firedLost !== null) item.startedAtMs = out.firedLost.startedAtMs;
    this.batcher.addOutcome(rec.shard, item, o.finishedAtMs);
    this.forgetIfDone(rec);
  }

  /**
   * The host took an order back (withdrawn, or its shard lost before it got a slot): it was never sent, so
   * nothing of it is recorded. If its fired record already left (ahead of a pause, recordOrdersOf), the stored
   * attempt stays RUNNING and the shard's next leader fires it again, as after a crash.
   */
  withdrawn(key: OccurrenceKey): void {
    const rec = this.occ.get(key);
    if (rec === undefined || rec.out === null) return;
    assert(!rec.out.started, 'a started order cannot be withdrawn');
    this.endOrder(rec, false);
    rec.recording = false;
    this.forgetIfDone(rec);
  }

  /**
   * A pause of a one-off job is refused by the state machine while its execution is RUNNING: the fired records
   * of its orders out go into the next flush now, ahead of the pause, so the machine sees what this node sent.
   */
  recordOrdersOf(shard: number, jobId: string, nowMs: number): void {
    for (const key of this.byJob.get(jobId) ?? []) {
      const rec = this.occ.get(key)!;
      if (rec.out === null) continue;
      if (!rec.out.started && rec.out.staged !== null && rec.out.fired !== null) {
        // Staged ahead of its due time: taken back and decided at the due time, after the pause if it applied by
        // then (a pause is not refused because its job was staged a moment before it).
        this.takeBack(rec, { ...rec.out.staged, unstaged: true }, 'disarmed');
        continue;
      }
      rec.out.hold = false;
      this.handFired(rec, null, nowMs);
    }
    this.batcher.releaseHeld(shard, jobId, nowMs);
  }

  /**
   * Withdraws an order not started and arms its attempt `a` again once the host took it back (it waits `behind`
   * the order: endOrder arms it; an outcome instead, the order having started meanwhile, makes it wait for that
   * record and be decided against the store). Unless another attempt of the occurrence is armed already.
   */
  private takeBack(rec: Occurrence, a: Attempt, reason: Withdrawal['reason']): void {
    if (rec.armed === null) rec.armed = { ...a, where: 'behind' };
    this.withdraw(rec, reason);
  }

  /** The order is no longer out; `outcomeComing` when its outcome record goes to the batcher. */
  private endOrder(rec: Occurrence, outcomeComing: boolean): void {
    const attempt = rec.out!.attempt;
    if (rec.out!.started) this.startedCount--;
    else if (rec.out!.staged !== null) this.stagedCount--;
    rec.out = null;
    this.outCount--;
    if (rec.armed?.where !== 'behind') return;
    if (outcomeComing && rec.armed.attempt <= attempt + 1) {
      // The same attempt again (a resume, a new term's load) or the next one: the outcome about to be recorded
      // decides it (final, a retry it arms, or an execution it finds missing), so it waits for that record.
      rec.armed.where = 'outcome';
      rec.awaitedAttempt = attempt;
      return;
    }
    // A later attempt another leader recorded (or one whose order was taken back unsent): its turn now, or the
    // end of its shard's drain.
    if (this.draining.has(rec.shard)) this.drainWait(rec, rec.armed);
    else this.arm(rec.armed);
  }

  /** Hands the order's fired record to the batcher (once: at its start, or with its outcome). */
  private handFired(rec: Occurrence, startedAtMs: number | null, nowMs: number): void {
    const out = rec.out!;
    if (out.fired === null) return;
    if (startedAtMs !== null) out.fired.startedAtMs = startedAtMs;
    this.batcher.addFired(rec.shard, out.fired, out.hold, nowMs);
    out.fired = null;
  }

  /**
   * An order not started (its fired record still here) is asked back. One the host has not taken yet (still in
   * the outbox) is simply dropped: a withdrawal always names an order of an earlier ready(). `closed`: the job was
   * cancelled, so even an order whose fired record already left goes back (that record starts nothing now).
   */
  private withdraw(rec: Occurrence, reason: Withdrawal['reason'], closed = false): void {
    if (rec.out === null || rec.out.started || (rec.out.fired === null && !closed)) return;
    const at = this.outbox.dispatch.findIndex((o) => o.key === rec.key);
    if (at < 0) {
      this.outbox.withdraw.push({ key: rec.key, shard: rec.shard, reason });
      return;
    }
    this.outbox.dispatch.splice(at, 1);
    this.endOrder(rec, false);
    rec.recording = false;
  }

  // --- time -------------------------------------------------------------------------------------------------

  /** Fires what is due (at most stallLimits.fireBatchMax per tick: the rest waits in the backlog, still armed). */
  tick(nowMs: number): void {
    this.see(nowMs);
    if (this.stopped) return;
    const room = queueLimits.dueBacklogMax - (this.dueBacklog.length - this.dueHead);
    if (room > 0) {
      for (const key of this.wheel.advanceTo(nowMs, room)) {
        const rec = this.occ.get(key);
        if (rec?.armed?.where !== 'wheel') continue;
        if (rec.armed.unstaged === true) this.unstagedInWheel--;
        rec.armed.where = 'due';
        this.dueBacklog.push(key);
      }
    }
    this.retryLeaseWaiting();
    assert(this.dueBacklog.length - this.dueHead <= queueLimits.dueBacklogMax + this.leaseRetried, 'due backlog over its limit');
    this.heldBackAtMs = null;
    let n = 0;
    while (this.dueHead < this.dueBacklog.length && n < stallLimits.fireBatchMax) {
      if (this.firingHeld()) {
        this.heldBackAtMs = nowMs;
        break;
      }
      const rec = this.occ.get(this.dueBacklog[this.dueHead++]!);
      if (rec?.armed?.where !== 'due') continue;
      n++;
      const a = rec.armed;
      rec.armed = null;
      this.fire(rec, a, nowMs);
      this.forgetIfDone(rec);
    }
    this.compactBacklog();
    this.loaderTick(nowMs);
    this.unpark();
  }

  /** The attempts that waited for a lease go back to the due backlog, to be looked at in this tick. */
  private retryLeaseWaiting(): void {
    this.leaseRetried = 0;
    if (this.leaseWaiting.length === 0) return;
    for (const key of this.leaseWaiting) {
      const rec = this.occ.get(key);
      if (rec?.armed?.where !== 'lease') continue;
      rec.armed.where = 'due';
      this.dueBacklog.push(key);
      this.leaseRetried++;
    }
    this.leaseWaiting = [];
    this.leaseWaitAtMs = null;
  }

  private compactBacklog(): void {
    if (this.dueHead >= this.dueBacklog.length) {
      this.dueBacklog = [];
      this.dueHead = 0;
    } else if (this.dueHead >= stallLimits.fireBatchMax * 16) {
      this.dueBacklog = this.dueBacklog.slice(this.dueHead);
      this.dueHead = 0;
    }
  }

  /**
   * When the next attempt is looked at (or the held-back poll); null when nothing waits on time. With a stage lead
   * the wheel's deadlines are stage times, which need no precision: `precise()` says whether one may be a due time.
   */
  nextFireAtMs(): number | null {
    if (this.stopped) return null;
    if (this.heldBackAtMs !== null) return this.heldBackAtMs + queueLimits.holdBackRetryMs;
    if (this.dueHead < this.dueBacklog.length) return this.nowMs;
    let next = this.wheel.nextDeadlineMs();
    // A manual clock reaches a later deadline only through an advance, which ticks the core.
    if (next !== null && this.d.manualClock && next > this.nowMs) next = null;
    if (this.leaseWaitAtMs !== null) next = Math.min(next ?? Infinity, this.leaseWaitAtMs + leaseRetryMs);
    return next;
  }

  /** The next deadline may be a callback's due time (nothing is staged, or an attempt waits in the wheel unstaged). */
  precise(): boolean {
    return this.d.stageLeadMs === 0 || this.unstagedInWheel > 0 || this.dueHead < this.dueBacklog.length || this.leaseWaitAtMs !== null;
  }

  /** When the loader wants a tick: now while pages are left, else its next periodic run. */
  nextLoadAtMs(): number | null {
    if (this.stopped) return null;
    if (this.loads.length > 0) return this.nowMs;
    if (this.d.manualClock && this.nextLoaderAtMs > this.nowMs) return null;
    return this.nextLoaderAtMs;
  }

  /** A queue downstream is full: the orders waiting to start, or the records waiting to be proposed. */
  private firingHeld(): boolean {
    return this.outCount - this.startedCount >= queueLimits.dispatchQueuedMax || this.batcher.engineItems >= queueLimits.proposerEngineItemsMax;
  }

  private see(nowMs: number): void {
    assert(Number.isFinite(nowMs), 'nowMs must be a finite number');
    this.nowMs = nowMs;
  }

  // --- firing -------------------------------------------------------------------------------------------

  /**
   * Decides what to do with an attempt due now, or due within the stage lead (rules.ts), then orders it: an order
   * before its due time is staged (the host sends it at dueAtMs, still asking the lease then) and stays
   * withdrawable until it starts, so a cancel, pause, new schedule or lost leadership takes it back as it would an
   * order waiting for its concurrency slot.
   */
  private fire(rec: Occurrence, a: Armed, nowMs: number): void {
    // Never early, on this node's clock: not before the attempt's due time (a clock that stepped back), nor before
    // the occurrence's own time, which another node's clock may have set ahead of this one (a re-fire of an
    // attempt it recorded as started is otherwise due at once).
    const notBeforeMs = Math.max(a.dueAtMs, a.scheduledAtMs);
    const early = nowMs < notBeforeMs;
    if (early && (a.unstaged === true || nowMs < notBeforeMs - this.d.stageLeadMs)) {
      this.arm(notBeforeMs === a.dueAtMs ? a : { ...a, dueAtMs: notBeforeMs });
      return;
    }
    if (early && this.stagedCount >= limits.firingStagedMax) {
      this.arm({ ...a, dueAtMs: notBeforeMs, unstaged: true });
      return;
    }
    if (!this.firing.has(a.shard)) return;
    if (this.draining.has(a.shard)) return this.drainWait(rec, a);
    if (!this.d.leaseValid(a.shard)) {
      rec.armed = { ...a, where: 'lease' };
      this.leaseWaiting.push(rec.key);
      this.leaseWaitAtMs ??= nowMs;
      return;
    }
    if (rec.out !== null) {
      // One order per occurrence out: it waits for ours to end (endOrder). Dropping it is not safe even for our
      // own attempt again or the next one: a pause applied before our fired record (so the record was ignored)
      // and the resume re-armed it, and our outcome then applies to no execution, leaving nobody to fire it.
      rec.armed = { ...a, where: 'behind' };
      return;
    }
    const store = this.d.stores[a.shard]!;
    // What the arming command left stored, while nothing changed it since; else the store's (Held).
    const held = a.held !== undefined && a.held.epoch === this.epochs[a.shard] ? a.held : undefined;
    const job = held !== undefined ? held.job : store.getJob(a.jobId);
    const known = held?.execution;
    const exec = job === null ? null : known !== undefined ? known : store.getExecution(a.jobId, a.scheduledAtMs);
    if (early && (job === null || !stagedEarlyHolds(a, job, exec))) {
      this.arm({ ...a, dueAtMs: notBeforeMs, unstaged: true });
      return;
    }
    const d = decideDue(a, job, exec, nowMs, { recording: rec.recording, otherOpen: () => this.hasOtherOpen(a) });
    if (early && d.kind !== 'send') {
      // Only a send is staged: whatever else the store says now is looked at again at the due time.
      this.arm({ ...a, dueAtMs: notBeforeMs, unstaged: true });
      return;
    }
    if (d.kind === 'drop') return;
    if (d.kind === 'buffer') {
      this.buffer(rec, a);
    } else if (d.kind === 'skip') {
      rec.recording = true;
      this.batcher.addSkipped(a.shard, { jobId: a.jobId, scheduledAtMs: a.scheduledAtMs, reason: d.reason }, nowMs);
    } else {
      this.order(rec, early ? { ...a, dueAtMs: notBeforeMs } : a, d.job, nowMs, d.firstOfOnce, early);
    }
  }

  /** overlap=buffer_one keeps one occurrence per job waiting for the run before it. */
  private buffer(rec: Occurrence, a: Armed): void {
    const other = this.bufferedOf(a.jobId);
    if (other !== null && other !== rec) {
      other.armed = null;
      this.forgetIfDone(other);
    }
    rec.armed = { ...a, where: 'buffered' };
  }

  /**
   * Another run of the job is in flight: an order of ours out, or an open execution in the store. An order out
   * whose execution is already closed (another leader's later attempt finished it) is no run: its outcome will be
   * ignored, so no `finished` effect would ever let go of an occurrence buffered behind it.
   */
  private hasOtherOpen(a: Attempt): boolean {
    const store = this.d.stores[a.shard]!;
    for (const key of this.byJob.get(a.jobId) ?? []) {
      const rec = this.occ.get(key)!;
      if (rec.out !== null && !isFinal(store.getExecution(rec.jobId, rec.scheduledAtMs))) return true;
    }
    return store.openExecutions(a.jobId).some((e) => e.scheduledAtMs !== a.scheduledAtMs);
  }

  private order(rec: Occurrence, a: Armed, job: JobRecord, nowMs: number, firstOfOnce: boolean, staged: boolean): void {
    const spec: CallbackSpec | null = job.callback ?? (job.task === null ? null : this.d.stores[a.shard]!.getTask(job.task));
    if (spec === null && staged) {
      // Its failure is recorded at the due time, not before.
      this.arm({ ...a, unstaged: true });
      return;
    }
    // A staged order's start is reported when it is sent; until then its record says its due time, never earlier.
    const fired: FiredItem = { jobId: a.jobId, scheduledAtMs: a.scheduledAtMs, attempt: a.attempt, startedAtMs: Math.max(nowMs, a.dueAtMs) };
    rec.recording = true;
    if (spec === null) {
      this.batcher.addFired(a.shard, fired, false, nowMs);
      this.batcher.addOutcome(a.shard, missingTaskOutcome(a, job.task, nowMs), nowMs);
      return;
    }
    const term = this.firing.get(a.shard)!;
    rec.out = { attempt: a.attempt, term, spec, started: false, fired, hold: firstOfOnce, firedLost: null, staged: staged ? a : null };
    this.outCount++;
    if (staged) this.stagedCount++;
    this.dispatched++;
    const fencingToken = `${a.shard}.${term}`;
    this.outbox.dispatch.push({
      key: rec.key,
      shard: a.shard,
      jobId: a.jobId,
      scheduledAtMs: a.scheduledAtMs,
      attempt: a.attempt,
      fencingToken,
      dueAtMs: a.dueAtMs,
      delivery: {
        jobId: a.jobId,
        scheduledAtMs: a.scheduledAtMs,
        attempt: a.attempt,
        fencingToken,
        spec,
        body: job.payload,
        bodyEncoding: job.payloadEncoding,
        concurrencyKey: job.task ?? `job:${job.id}`,
        payloadRef: job.payloadRef ?? null,
      },
    });
  }

  // --- the records --------------------------------------------------------------------------------------

  private recordOf(a: Attempt): Occurrence {
    const key = occurrenceKey(a.jobId, a.scheduledAtMs);
    let rec = this.occ.get(key);
    if (rec === undefined) {
      rec = { key, shard: a.shard, jobId: a.jobId, scheduledAtMs: a.scheduledAtMs, armed: null, out: null, recording: false, awaitedAttempt: null };
      this.occ.set(key, rec);
      let keys = this.byJob.get(a.jobId);
      if (keys === undefined) {
        keys = new Set();
        this.byJob.set(a.jobId, keys);
      }
      keys.add(key);
    }
    return rec;
  }

  private forgetIfDone(rec: Occurrence): void {
    if (rec.armed !== null || rec.out !== null || rec.recording) return;
    this.occ.delete(rec.key);
    const keys = this.byJob.get(rec.jobId);
    if (keys === undefined) return;
    keys.delete(rec.key);
    if (keys.size === 0) this.byJob.delete(rec.jobId);
  }

  private bufferedOf(jobId: string): Occurrence | null {
    for (const key of this.byJob.get(jobId) ?? []) {
      const rec = this.occ.get(key)!;
      if (rec.armed?.where === 'buffered') return rec;
    }
    return null;
  }

  /**
   * Into the wheel, or `parked` when the wheel is at its ceiling (only arms the loader cannot find again get here).
   * The wheel holds each attempt at the moment it is looked at: the stage lead before its due time, or its due
   * time itself when it is not staged.
   */
  private arm(a: Attempt): void {
    const rec = this.recordOf(a);
    if (rec.armed?.where === 'wheel' && rec.armed.unstaged === true) this.unstagedInWheel--;
    if (this.wheel.full && !this.wheel.has(rec.key)) {
      if (rec.armed?.where !== 'parked') this.parked.push(rec.key);
      rec.armed = { ...a, where: 'parked' };
      return;
    }
    rec.armed = { ...a, where: 'wheel' };
    this.intoWheel(rec.key, a);
  }

  private intoWheel(key: OccurrenceKey, a: Attempt): void {
    if (a.unstaged === true) this.unstagedInWheel++;
    this.wheel.add(key, this.lookAtMs(a));
  }

  private lookAtMs(a: Attempt): number {
    return a.unstaged === true ? a.dueAtMs : a.dueAtMs - this.d.stageLeadMs;
  }

  private unarm(rec: Occurrence): void {
    if (rec.armed?.where === 'wheel') {
      this.wheel.cancel(rec.key);
      if (rec.armed.unstaged === true) this.unstagedInWheel--;
    }
    rec.armed = null;
    rec.awaitedAttempt = null;
  }

  /**
   * Cancel, pause or a new schedule: the job's armed attempts go, orders not started are withdrawn. An attempt
   * (armed or ordered) that fires a RUNNING execution again (a new term's load, or one behind this node's order)
   * stays: nothing in the store would arm it again (resume and a new schedule re-arm QUEUED retries only), and a
   * pause leaves an attempt in flight to finish, as the load does. A cancel has closed the execution, so it goes.
   */
  private disarm(jobId: string): void {
    const keys = this.byJob.get(jobId);
    if (keys === undefined) return;
    let parked = false;
    for (const key of [...keys]) {
      const rec = this.occ.get(key)!;
      const store = this.d.stores[rec.shard]!;
      if (store.getExecution(rec.jobId, rec.scheduledAtMs)?.state === 'RUNNING') continue;
      // A cancelled job's fired records start nothing (the state machine ignores them): every order not started goes.
      const cancelled = (store.getJob(jobId)?.state ?? 'CANCELLED') === 'CANCELLED';
      parked ||= rec.armed?.where === 'parked';
      this.unarm(rec);
      this.withdraw(rec, 'disarmed', cancelled);
      this.forgetIfDone(rec);
    }
    if (parked) this.parked = this.parked.filter((k) => this.occ.get(k)?.armed?.where === 'parked');
  }

  /** Parked arms go into the wheel as it has room, oldest first. */
  private unpark(): void {
    if (this.parked.length === 0) return;
    let i = 0;
    while (i < this.parked.length && !this.wheel.full) {
      const rec = this.occ.get(this.parked[i++]!);
      if (rec?.armed?.where !== 'parked') continue;
      rec.armed.where = 'wheel';
      this.intoWheel(rec.key, rec.armed);
    }
    this.parked.splice(0, i);
  }

  // --- loading ------------------------------------------------------------------------------------------

  /** RUNNING executions fire again now (attempt + 1, same deduplication key); QUEUED ones at their retryAtMs. */
  private loadOpenExecutions(shard: number): void {
    const store = this.d.stores[shard]!;
    let refired = 0;
    let requeued = 0;
    let after: { jobId: string; scheduledAtMs: number } | null = null;
    for (;;) {
      const page = store.allOpenExecutions(nodeLimits.openExecutionsPageMax, after);
      for (const e of page) {
        const running = e.state === 'RUNNING';
        // Retries of a paused job wait for resume (which re-arms them); one in flight at the crash fires again.
        if (!running && store.getJob(e.jobId)?.state === 'PAUSED') continue;
        // "At once" is due at the occurrence's own time, not at this node's now: a now read off a wall clock that
        // jumped ahead would, once the clock steps back, hold the attempt until the clock reads it again (fire()).
        const dueAtMs = running ? e.scheduledAtMs : Math.max(e.retryAtMs ?? e.scheduledAtMs, e.scheduledAtMs);
        this.arm({ shard, jobId: e.jobId, scheduledAtMs: e.scheduledAtMs, attempt: e.attempt + 1, dueAtMs, fromEffect: true, released: false });
        if (running) refired++;
        else requeued++;
      }
      if (page.length < nodeLimits.openExecutionsPageMax) break;
      const last = page[page.length - 1]!;
      after = { jobId: last.jobId, scheduledAtMs: last.scheduledAtMs };
    }
    if (refired + requeued > 0) this.d.logger.info('open executions loaded', { shards: [shard], refired, requeued });
  }

  /**
   * Starts a loader run (unless one runs). A run reads only the window (previous run's end, now + horizon]:
   * whatever came due before it was armed by its effect or by an earlier run. Every
   * nodeLimits.loaderFullScanEveryRuns runs (and the first) the whole range up to now + horizon is read again,
   * which heals any gap (a clock that stepped back).
   */
  load(nowMs: number): void {
    this.see(nowMs);
    if (this.periodicUntilMs !== null || this.stopped) return;
    this.nextLoaderAtMs = nowMs + limits.loaderIntervalMs;
    const untilMs = nowMs + limits.wheelHorizonMs;
    const full = this.loadedUntilMs === null || this.loadIncomplete || this.loaderRuns % nodeLimits.loaderFullScanEveryRuns === 0;
    if (full) this.loadIncomplete = false;
    const after = full ? null : { atMs: this.loadedUntilMs!, id: '' };
    this.loaderRuns++;
    this.periodicUntilMs = untilMs;
    this.periodicArmed = 0;
    for (const shard of this.firing.keys()) this.loads.push({ shard, untilMs, after, periodic: true });
    this.loadNext();
  }

  /** Loading work of a tick: one page, or a periodic run when its time came (or when room came back). */
  private loaderTick(nowMs: number): void {
    if (this.loads.length > 0) return this.loadNext();
    if (nowMs >= this.nextLoaderAtMs) return this.load(nowMs);
    if (this.loadIncomplete && this.wheel.size <= queueLimits.wheelLoadedMax / 2) this.load(nowMs);
  }

  /** One page of the first load waiting; a periodic run ends when its last load does. */
  private loadNext(): void {
    const load = this.loads[0];
    if (load !== undefined && this.loadPage(load)) this.loads.shift();
    if (this.periodicUntilMs === null || this.loads.some((l) => l.periodic)) return;
    this.loadedUntilMs = Math.max(this.loadedUntilMs ?? this.periodicUntilMs, this.periodicUntilMs);
    if (this.periodicArmed > 0) this.d.logger.debug('loader armed occurrences', { armed: this.periodicArmed });
    this.periodicUntilMs = null;
  }

  /** Arms one page of the load's PENDING jobs; true when the load is done. */
  private loadPage(load: Load): boolean {
    if (this.stopped || !this.firing.has(load.shard)) return true;
    if (!this.hasRoom()) {
      // The rest stays in the store: a later run (a full one) arms it once firing made room.
      this.loadIncomplete = true;
      return true;
    }
    const want = Math.min(limits.loaderBatchMax, queueLimits.wheelLoadedMax - this.wheel.size);
    const page = this.d.stores[load.shard]!.dueJobs(load.untilMs, want, load.after);
    for (const job of page) if (this.armLoaded(load.shard, job) && load.periodic) this.periodicArmed++;
    if (page.length < want) return true;
    const last = page[page.length - 1]!;
    load.after = { atMs: last.nextFireAtMs, id: last.id };
    return false;
  }

  private armLoaded(shard: number, job: DueJob): boolean {
    const rec = this.occ.get(occurrenceKey(job.id, job.nextFireAtMs));
    // Armed (or buffered), out in this term, or recorded and not applied yet: nothing to arm. An order of an
    // earlier term is no answer: withdrawn with that leadership and not taken back yet (it waits for a concurrency
    // slot), it ends unsent and nothing else would arm the occurrence; the new arm waits behind it (fire).
    if (rec !== undefined && (rec.armed !== null || rec.recording || (rec.out !== null && rec.out.term === this.firing.get(shard)))) return false;
    this.arm({ shard, jobId: job.id, scheduledAtMs: job.nextFireAtMs, attempt: 1, dueAtMs: job.nextFireAtMs, fromEffect: false, released: false });
    return true;
  }

  // --- queries ------------------------------------------------------------------------------------------

  hasRoom(): boolean {
    return this.wheel.size < queueLimits.wheelLoadedMax;
  }

  overlayState(job: JobRecord): JobState {
    if (job.state !== 'PENDING' && job.state !== 'RUNNING') return job.state;
    let queued = false;
    for (const key of this.byJob.get(job.id) ?? []) {
      const rec = this.occ.get(key)!;
      if (rec.out?.started === true) return 'RUNNING';
      if (rec.out !== null || (rec.armed !== null && rec.armed.where !== 'parked')) queued = true;
    }
    return queued ? 'QUEUED' : job.state;
  }

  depths(): { dueBacklog: number; wheel: number; parked: number; dispatchQueued: number } {
    return { dueBacklog: this.dueBacklog.length - this.dueHead, wheel: this.wheel.size, parked: this.parked.length, dispatchQueued: this.outCount - this.startedCount };
  }

  ordersOut(): number {
    return this.outCount;
  }

  loading(): boolean {
    return this.loads.length > 0;
  }

  /**
   * The earliest instant in (nowMs, untilMs] at which something may come due: an armed or parked attempt, or a
   * PENDING job of a shard fired here that the loader has not armed yet. A lower bound, never later than the
   * real next occurrence.
   */
  nextDeadlineAfter(nowMs: number, untilMs: number): number | null {
    let next: number | null = null;
    const consider = (ms: number | null | undefined): void => {
      if (ms != null && ms > nowMs && ms <= untilMs && (next === null || ms < next)) next = ms;
    };
    consider(this.wheel.nextDeadlineMs());
    for (const key of this.parked) {
      const a = this.occ.get(key)?.armed;
      if (a != null) consider(this.lookAtMs(a));
    }
    for (const shard of this.firing.keys()) {
      // The cursor skips the jobs due at or before now (ids are never empty): those are the loader's already.
      const [job] = this.d.stores[shard]!.dueJobs(untilMs, 1, { atMs: nowMs + 1, id: '' });
      consider(job?.nextFireAtMs);
    }
    return next;
  }

  /** Nothing due at nowMs, nothing out, no record waiting to apply, nothing buffered, no load running. */
  settled(nowMs: number): boolean {
    if (this.dueHead < this.dueBacklog.length || this.outCount > 0 || this.loads.length > 0 || this.leaseWaiting.length > 0) return false;
    if (this.drainWaiting.length > 0) return false;
    for (const rec of this.occ.values()) if (rec.recording || rec.armed?.where === 'buffered' || rec.armed?.where === 'outcome') return false;
    const next = this.wheel.nextDeadlineMs();
    return next === null || next > nowMs;
  }
}
