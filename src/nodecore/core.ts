/**
 * NodeCore: the node's decisions as one synchronous object (README.md: how a host drives it). It joins the
 * firing side (firing.ts: one record per occurrence, every firing rule through rules.ts) and the group commit
 * (batcher.ts), checks what comes in, and gathers what goes out for `ready()`.
 */
import { assert } from '../core/assert.js';
import { provesNotApplied, type PunctualError } from '../core/errors.js';
import { nodeLimits } from '../core/limits.js';
import type { AttemptOutcome } from '../dispatch/dispatcher.js';
import type { Command, Effect } from '../scheduler/commands.js';
import type { JobRecord, JobState } from '../scheduler/types.js';
import { Batcher } from './batcher.js';
import { Firing } from './firing.js';
import type {
  CoreQueueDepths,
  CoreReady,
  DispatchOrder,
  NodeCoreApi,
  NodeCoreDeps,
  OccurrenceKey,
  Proposal,
  ProposalResult,
  Reply,
  Withdrawal,
} from './types.js';

function checkShard(shard: number, shards: number): void {
  assert(Number.isInteger(shard), 'shard must be an integer');
  assert(shard >= 0 && shard < shards, `shard ${shard} out of range (${shards} shards)`);
}

function checkTime(ms: number, name: string): void {
  assert(Number.isFinite(ms), `${name} must be a finite number`);
}

export class NodeCore implements NodeCoreApi {
  private readonly batcher: Batcher;
  private readonly firing: Firing;
  private propose_: Proposal[] = [];
  private readonly outbox: { dispatch: DispatchOrder[]; withdraw: Withdrawal[] } = { dispatch: [], withdraw: [] };
  private replies_: Reply[] = [];
  /** Orders handed out by ready() and not finished or taken back (outputs are checked against it). */
  private readonly outKeys = new Set<OccurrenceKey>();
  private readonly opsOpen = new Set<number>();
  /** The term in which each firing record out to Raft was proposed (by ticket): a refused one is retried only then. */
  private readonly recordTerms = new Map<number, number>();
  private nowMs: number;
  /** How long before its due time an order may be handed out (staged); 0 with a manual clock. */
  private readonly stageLeadMs: number;
  /**
   * The deadlines of the last ready() while no input came since (every input clears it): the core is synchronous
   * and its time moves only through inputs, so the next ready() is empty with these deadlines. A host asks for
   * ready() after each of its events, most of which fed the core nothing (a Raft round, the second ready() of a pump).
   */
  private lastDeadlines: Pick<CoreReady, 'nextDeadlineMs' | 'nextFireAtMs' | 'flushAtMs'> | null = null;

  constructor(private readonly d: NodeCoreDeps) {
    assert(d.stores.length >= 1, 'NodeCore needs at least one shard');
    checkTime(d.startMs, 'startMs');
    const lead = d.stageLeadMs ?? 0;
    assert(Number.isInteger(lead) && lead >= 0, 'stageLeadMs must be a non-negative integer');
    this.stageLeadMs = d.manualClock === true ? 0 : lead;
    this.nowMs = d.startMs;
    this.batcher = new Batcher(d.nodeId, d.mergeCreates);
    this.firing = new Firing(
      {
        stores: d.stores,
        startMs: d.startMs,
        rand01: d.rand01,
        leaseValid: (s) => d.leaseValid(s),
        manualClock: d.manualClock === true,
        stageLeadMs: this.stageLeadMs,
        logger: d.logger,
      },
      this.batcher,
      this.outbox,
    );
  }

  // --- inputs ---------------------------------------------------------------------------------------------

  tick(nowMs: number): void {
    this.lastDeadlines = null;
    this.see(nowMs);
    this.firing.tick(nowMs);
  }

  flush(nowMs: number): void {
    this.lastDeadlines = null;
    this.see(nowMs);
    this.batcher.flush(nowMs, false, this.propose_);
  }

  leaderStart(shard: number, term: number, nowMs: number): void {
    this.lastDeadlines = null;
    checkShard(shard, this.d.stores.length);
    assert(Number.isInteger(term) && term >= 1, 'term must be a positive integer');
    this.see(nowMs);
    this.firing.endDrain(shard);
    this.firing.leaderStart(shard, term, nowMs);
  }

  leaderStop(shard: number): void {
    this.lastDeadlines = null;
    checkShard(shard, this.d.stores.length);
    this.firing.endDrain(shard);
    for (const command of this.batcher.dropRetries(shard)) this.firing.lost(command);
    this.firing.leaderStop(shard);
  }

  applied(shard: number, command: Command, effects: Effect[], nowMs: number): void {
    this.lastDeadlines = null;
    checkShard(shard, this.d.stores.length);
    this.see(nowMs);
    this.firing.applied(shard, command, effects, nowMs);
  }

  propose(opId: number, shard: number, command: Command, nowMs: number): PunctualError | null {
    this.lastDeadlines = null;
    checkShard(shard, this.d.stores.length);
    assert(!this.opsOpen.has(opId), `client op ${opId} is already open`);
    this.see(nowMs);
    const refused = this.batcher.admit({ opId, shard, command }, this.d.applyBacklog());
    if (refused !== null) return refused;
    this.opsOpen.add(opId);
    if (command.type === 'pause_job') this.firing.recordOrdersOf(shard, command.id, nowMs);
    return null;
  }

  proposalDone(ticket: number, result: ProposalResult): void {
    this.lastDeadlines = null;
    const lost = this.batcher.answer(ticket, result, this.replies_);
    const term = this.recordTerms.get(ticket);
    this.recordTerms.delete(ticket);
    if (lost === null) return;
    // Refused in a way that proves it never applied (a leadership transfer in progress) while this node still
    // fires the shard in the same term: nothing else would record it until the next leadership change, so again.
    const sameTerm = term !== undefined && this.firing.firingShards().get(lost.shard) === term;
    if (!result.ok && provesNotApplied(result.error) && sameTerm && !this.firing.stopped) {
      this.batcher.retry(lost.shard, lost.command, this.nowMs + nodeLimits.recordRetryMs);
      return;
    }
    // The firing side's records were not applied (not the leader any more, lost): the loader may arm them again.
    this.firing.lost(lost.command);
  }

  dispatchStarted(key: OccurrenceKey, startedAtMs: number): void {
    this.lastDeadlines = null;
    checkTime(startedAtMs, 'startedAtMs');
    this.firing.started(key, startedAtMs);
  }

  dispatchOutcome(key: OccurrenceKey, outcome: AttemptOutcome): void {
    this.lastDeadlines = null;
    assert(this.outKeys.delete(key), 'an outcome for an order that is not out');
    checkTime(outcome.finishedAtMs, 'finishedAtMs');
    this.firing.outcome(key, outcome);
  }

  dispatchWithdrawn(key: OccurrenceKey): void {
    this.lastDeadlines = null;
    assert(this.outKeys.delete(key), 'a withdrawal of an order that is not out');
    this.firing.withdrawn(key);
  }

  load(nowMs: number): void {
    this.lastDeadlines = null;
    this.see(nowMs);
    this.firing.load(nowMs);
  }

  stop(): void {
    this.lastDeadlines = null;
    this.firing.stop();
  }

  closeProposals(): void {
    this.lastDeadlines = null;
    this.batcher.close();
  }

  flushAll(nowMs: number): void {
    this.lastDeadlines = null;
    this.see(nowMs);
    while (this.batcher.hasWork()) this.batcher.flush(nowMs, true, this.propose_);
  }

  drainShard(shard: number, nowMs: number): void {
    this.lastDeadlines = null;
    checkShard(shard, this.d.stores.length);
    this.see(nowMs);
    this.firing.drain(shard, nowMs);
  }

  undrainShard(shard: number): void {
    this.lastDeadlines = null;
    checkShard(shard, this.d.stores.length);
    this.firing.undrain(shard);
  }

  // --- outputs --------------------------------------------------------------------------------------------

  /** Takes the outputs gathered since the last call (see CoreReady for the order of their effects). */
  ready(): CoreReady {
    const q = this.lastDeadlines;
    if (q !== null) return { propose: [], withdraw: [], dispatch: [], replies: [], nextDeadlineMs: q.nextDeadlineMs, nextFireAtMs: q.nextFireAtMs, flushAtMs: q.flushAtMs };
    const rd: CoreReady = {
      propose: this.propose_,
      withdraw: this.outbox.withdraw.splice(0),
      dispatch: this.outbox.dispatch.splice(0),
      replies: this.replies_,
      nextDeadlineMs: this.capDeadline(minOf(this.firing.nextFireAtMs(), this.firing.nextLoadAtMs())),
      nextFireAtMs: this.preciseFireAtMs(),
      flushAtMs: this.batcher.flushAtMs(this.nowMs),
    };
    for (const p of rd.propose) {
      const t = p.command.type;
      if (t === 'fired' || t === 'skipped' || t === 'outcomes') this.recordTerms.set(p.ticket, this.firing.firingShards().get(p.shard) ?? 0);
    }
    this.propose_ = [];
    this.replies_ = [];
    this.checkReady(rd);
    this.lastDeadlines = { nextDeadlineMs: rd.nextDeadlineMs, nextFireAtMs: rd.nextFireAtMs, flushAtMs: rd.flushAtMs };
    return rd;
  }

  /** The outputs keep the promises of CoreReady: one order per occurrence out, never before it is due. */
  private checkReady(rd: CoreReady): void {
    for (const w of rd.withdraw) assert(this.outKeys.has(w.key), 'a withdrawal of an order that is not out');
    for (const o of rd.dispatch) {
      assert(!this.outKeys.has(o.key), 'a second order for an occurrence already out');
      assert(o.dueAtMs <= this.nowMs + this.stageLeadMs, 'an order before its stage lead');
      assert(o.attempt >= 1, 'an order with attempt below 1');
      this.outKeys.add(o.key);
    }
    for (const r of rd.replies) assert(this.opsOpen.delete(r.opId), `a reply to client op ${r.opId}, which is not open`);
  }

  /** True when ready() has outputs to carry out. */
  hasReady(): boolean {
    return this.propose_.length + this.outbox.withdraw.length + this.outbox.dispatch.length + this.replies_.length > 0;
  }

  /**
   * The host sleeps until a deadline on its monotonic clock, measured when it armed the timer; a wall clock
   * stepped forward meanwhile would leave everything due in the step late by the whole wait. So the core asks
   * to be ticked at least every wallClockRecheckMs (a manual clock moves only through an advance, which ticks it).
   */
  private capDeadline(atMs: number | null): number | null {
    if (atMs === null || this.d.manualClock === true) return atMs;
    return Math.min(atMs, this.nowMs + nodeLimits.wallClockRecheckMs);
  }

  private see(nowMs: number): void {
    checkTime(nowMs, 'nowMs');
    this.nowMs = nowMs;
  }

  // --- queries --------------------------------------------------------------------------------------------

  overlayState(job: JobRecord): JobState {
    return this.firing.overlayState(job);
  }

  hasRoom(): boolean {
    return this.firing.hasRoom();
  }

  queueDepths(): CoreQueueDepths {
    return { proposer: this.batcher.queuedCount(), engineItems: this.batcher.engineItems, ...this.firing.depths() };
  }

  firingShards(): ReadonlyMap<number, number> {
    return this.firing.firingShards();
  }

  fireDue(nowMs: number): boolean {
    const at = this.preciseFireAtMs();
    return at !== null && at - nodeLimits.firingSpinMs <= nowMs;
  }

  /** The next deadline when it may be a callback's due time (a stage time needs no precision). */
  private preciseFireAtMs(): number | null {
    return this.firing.precise() ? this.firing.nextFireAtMs() : null;
  }

  nextDeadlineAfter(nowMs: number, untilMs: number): number | null {
    return this.firing.nextDeadlineAfter(nowMs, untilMs);
  }

  settled(nowMs: number): boolean {
    return this.firing.settled(nowMs);
  }

  idle(): boolean {
    return this.batcher.idle();
  }

  loading(): boolean {
    return this.firing.loading();
  }

  ordersOut(): number {
    return this.firing.ordersOut();
  }

  get isStopped(): boolean {
    return this.firing.stopped;
  }

  get counters(): { dispatched: number; folded: number } {
    return { dispatched: this.firing.dispatched, folded: this.batcher.folded };
  }

  heldCount(): number {
    return this.batcher.heldCount();
  }

  shardDrained(shard: number): boolean {
    checkShard(shard, this.d.stores.length);
    return this.firing.isDraining(shard) && this.firing.drained(shard) && this.batcher.recordsSettled(shard);
  }
}

function minOf(a: number | null, b: number | null): number | null {
  if (a === null) return b;
  if (b === null) return a;
  return Math.min(a, b);
}
