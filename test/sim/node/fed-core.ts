/**
 * The production NodeCore with one shortcut for the simulated shell, which asks for `ready()` after every event
 * of its node (most of them Raft messages that feed the core nothing): without an input since the last, empty,
 * `ready()`, the core's outputs are empty and its deadlines unchanged (it is synchronous and deterministic, and
 * its time moves only through inputs), so that answer is given again instead of being computed.
 */
import type { AttemptOutcome } from '../../../src/dispatch/dispatcher.js';
import type { PunctualError } from '../../../src/core/errors.js';
import { NodeCore } from '../../../src/nodecore/index.js';
import type { CoreReady, OccurrenceKey, ProposalResult } from '../../../src/nodecore/types.js';
import type { Command, Effect } from '../../../src/scheduler/commands.js';

export class FedCore extends NodeCore {
  /** The last ready() when it was empty and no input came since; null: compute the next one. */
  private idle_: CoreReady | null = null;

  /** No input came since the last, empty, ready(): the next one would be that one again (nothing to carry out). */
  get quiet(): boolean {
    return this.idle_ !== null;
  }

  override ready(): CoreReady {
    if (this.idle_ !== null) return { ...this.idle_, propose: [], withdraw: [], dispatch: [], replies: [] };
    const rd = super.ready();
    const empty = rd.propose.length + rd.withdraw.length + rd.dispatch.length + rd.replies.length === 0;
    this.idle_ = empty ? rd : null;
    return rd;
  }

  override tick(nowMs: number): void {
    this.idle_ = null;
    super.tick(nowMs);
  }

  override flush(nowMs: number): void {
    this.idle_ = null;
    super.flush(nowMs);
  }

  override leaderStart(shard: number, term: number, nowMs: number): void {
    this.idle_ = null;
    super.leaderStart(shard, term, nowMs);
  }

  override leaderStop(shard: number): void {
    this.idle_ = null;
    super.leaderStop(shard);
  }

  override applied(shard: number, command: Command, effects: Effect[], nowMs: number): void {
    this.idle_ = null;
    super.applied(shard, command, effects, nowMs);
  }

  override propose(opId: number, shard: number, command: Command, nowMs: number): PunctualError | null {
    this.idle_ = null;
    return super.propose(opId, shard, command, nowMs);
  }

  override proposalDone(ticket: number, result: ProposalResult): void {
    this.idle_ = null;
    super.proposalDone(ticket, result);
  }

  override dispatchStarted(key: OccurrenceKey, startedAtMs: number): void {
    this.idle_ = null;
    super.dispatchStarted(key, startedAtMs);
  }

  override dispatchOutcome(key: OccurrenceKey, outcome: AttemptOutcome): void {
    this.idle_ = null;
    super.dispatchOutcome(key, outcome);
  }

  override dispatchWithdrawn(key: OccurrenceKey): void {
    this.idle_ = null;
    super.dispatchWithdrawn(key);
  }

  override load(nowMs: number): void {
    this.idle_ = null;
    super.load(nowMs);
  }

  override stop(): void {
    this.idle_ = null;
    super.stop();
  }

  override closeProposals(): void {
    this.idle_ = null;
    super.closeProposals();
  }

  override flushAll(nowMs: number): void {
    this.idle_ = null;
    super.flushAll(nowMs);
  }

  override drainShard(shard: number, nowMs: number): void {
    this.idle_ = null;
    super.drainShard(shard, nowMs);
  }

  override undrainShard(shard: number): void {
    this.idle_ = null;
    super.undrainShard(shard);
  }
}
