/**
 * The boundary of NodeCore: what a host feeds in, what it gets back, and what the core is built with.
 * README.md in this folder tells how a host drives it.
 *
 * Everything here is data: no promises, no callbacks that reach back into the host. The host calls an input
 * method, then takes the outputs with `ready()`, carries them out (in the order `CoreReady` states), and arms
 * one timer for `nextDeadlineMs`.
 */
import type { PunctualError } from '../core/errors.js';
import type { Logger } from '../core/log.js';
import type { AttemptOutcome, Delivery } from '../dispatch/dispatcher.js';
import type { Command, Effect } from '../scheduler/commands.js';
import type { SchedulerStore } from '../scheduler/store.js';
import type { JobRecord, JobState } from '../scheduler/types.js';

/** An occurrence: `${jobId}\n${scheduledAtMs}`; also what a dispatch, its start, outcome and withdrawal name. */
export type OccurrenceKey = string;

/** What NodeCore is built with. Nothing here does IO on the core's behalf except the injected store. */
export interface NodeCoreDeps {
  nodeId: string;
  /**
   * The state machine's synchronous store of each shard, indexed by shard: SQLite (src/store shard-store) in the
   * node, a MemoryStore in a simulator. The core reads it (jobs, executions, tasks, the loader's due jobs) when
   * it decides; the replication layer writes it when it applies.
   */
  stores: readonly SchedulerStore[];
  /** The scheduler's time when the core is made (the wheel starts there). */
  startMs: number;
  /** Random numbers in [0, 1) for retry jitter: a seeded Prng in a simulator. */
  rand01: () => number;
  /**
   * Concurrent `create_jobs` proposals of one shard may be merged into one command (false with --fsync always,
   * where every proposal is its own transaction).
   */
  mergeCreates: boolean;
  /** The shard's leader lease holds on this node now (asked right before each dispatch). */
  leaseValid(shard: number): boolean;
  /** Committed entries the replication layer has not applied yet (client writes are refused at the limit). */
  applyBacklog(): number;
  /**
   * The scheduler's clock moves only when the host says so (`serve --clock manual`): a due occurrence without a
   * lease waits for its own time instead of being moved, and the core asks for no timer later than now.
   */
  manualClock?: boolean;
  /**
   * An attempt may be ordered up to this long before its due time (staged: decided now, sent by the host at
   * `dueAtMs`, withdrawable until it starts). 0 or absent: ordered at its due time. Ignored with a manual clock.
   */
  stageLeadMs?: number;
  logger: Logger;
}

/** A callback to send: everything the dispatcher needs, and when it is due (it may be handed over early). */
export interface DispatchOrder {
  key: OccurrenceKey;
  shard: number;
  jobId: string;
  scheduledAtMs: number;
  attempt: number;
  /** `${shard}.${term}`: grows with every leadership change of the shard. */
  fencingToken: string;
  /**
   * Never sent before this instant (the scheduler's clock). It may be up to the stage lead after the order is
   * handed out: the host sends it then (asking the shard's lease at that moment), and until it starts the core
   * may withdraw it.
   */
  dueAtMs: number;
  delivery: Delivery;
}

/**
 * A dispatch the core no longer wants (the job was cancelled or paused, or this node lost the shard) before the
 * host reported its start. Best effort: the host answers `dispatchWithdrawn(key)` if it took the order back,
 * else the order's start and outcome arrive as usual.
 */
export interface Withdrawal {
  key: OccurrenceKey;
  shard: number;
  reason: 'disarmed' | 'leadership_lost' | 'draining';
}

/** A command for the shard's log. `ticket` comes back in `proposalDone`. */
export interface Proposal {
  ticket: number;
  shard: number;
  command: Command;
}

/** What an applied proposal answers (the state machine's result and effects). */
export interface Applied {
  result: unknown;
  effects: Effect[];
}

export type ProposalResult = { ok: true; applied: Applied } | { ok: false; error: PunctualError };

/** The answer to a client operation (`propose`), by the host's opId. */
export type Reply = { opId: number; ok: true; applied: Applied } | { opId: number; ok: false; error: PunctualError };

/**
 * The outputs gathered since the last `ready()`. Order of effects for the host:
 *  1. `propose`: hand each proposal to its shard's log (the answer comes back as `proposalDone`);
 *  2. `withdraw`, then `dispatch`: a withdrawal always names an order of an earlier `ready()`;
 *  3. `replies`: answer the clients;
 *  4. arm one timer for `nextDeadlineMs` (null: nothing is waiting on time; a value at or before now: call
 *     `tick` on the next turn of the event loop). `nextFireAtMs` is the part of it that is a callback's due time:
 *     the host may wake a little before it and spin, the rest (loader pages and runs, polls, the stage times of
 *     attempts ordered ahead of their due time) needs no precision.
 *     It is never more than `nodeLimits.wallClockRecheckMs` after the last input's time (except with a manual
 *     clock): the host's timer waits on the monotonic clock, and a wall clock stepped forward must be seen soon.
 *  5. arm one timer for `flushAtMs` and call `flush` when it expires (at or before now: on the next turn). It
 *     is a separate timer because it measures a wait (how long records wait for company), which the host
 *     counts on real time even when the scheduler's clock is a manual one.
 */
export interface CoreReady {
  propose: Proposal[];
  withdraw: Withdrawal[];
  dispatch: DispatchOrder[];
  replies: Reply[];
  nextDeadlineMs: number | null;
  nextFireAtMs: number | null;
  flushAtMs: number | null;
}

/** Depths of the core's bounded queues (punctual_queue_depth). */
export interface CoreQueueDepths {
  /** Client writes waiting for the next group commit. */
  proposer: number;
  /** Fired, skipped and outcome records waiting for a group commit. */
  engineItems: number;
  dueBacklog: number;
  wheel: number;
  parked: number;
  /** Dispatch orders handed out whose start was not reported yet. */
  dispatchQueued: number;
}

/**
 * The inputs of NodeCore. Every method is synchronous, decides, and leaves its outputs for `ready()`; none does
 * IO. `nowMs` is the scheduler's clock as the host read it.
 */
export interface NodeCoreInputs {
  /** Time passed: fire what is due, run the loader's next page or run. */
  tick(nowMs: number): void;
  /** The flush timer expired (`flushAtMs`): one group commit of what waits (held records once their hold ended). */
  flush(nowMs: number): void;
  /** This node leads `shard` in `term` and applied everything before its term: start firing it. */
  leaderStart(shard: number, term: number, nowMs: number): void;
  /** This node no longer leads `shard`: stop firing it (in-flight callbacks finish; withdrawals go out). */
  leaderStop(shard: number): void;
  /** A command was applied on this node's copy of `shard`, in log order (every node, leader or not). */
  applied(shard: number, command: Command, effects: Effect[], nowMs: number): void;
  /**
   * A client operation for `shard`'s log. Refused at once (returned) when a queue is full or the core is
   * closing; else its answer comes as a `Reply` with this opId.
   */
  propose(opId: number, shard: number, command: Command, nowMs: number): PunctualError | null;
  /** The log's answer to a `Proposal` of an earlier `ready()`. */
  proposalDone(ticket: number, result: ProposalResult): void;
  /** The host really started sending the order (past the dispatcher's concurrency queue). */
  dispatchStarted(key: OccurrenceKey, startedAtMs: number): void;
  /** The attempt of an order finished. */
  dispatchOutcome(key: OccurrenceKey, outcome: AttemptOutcome): void;
  /** The host took an order back after a `Withdrawal`: it was never sent. */
  dispatchWithdrawn(key: OccurrenceKey): void;
  /** Arms now what the loader finds due within the horizon (at start; the manual clock's advance). */
  load(nowMs: number): void;
  /** Fires and loads nothing more (close); outcomes of orders out are still taken and recorded. */
  stop(): void;
  /** Refuses client operations from now on (close). */
  closeProposals(): void;
  /** Proposes everything waiting now, held fired records too (close, the manual clock's advance). */
  flushAll(nowMs: number): void;
  /**
   * A leadership transfer of `shard` is planned: order nothing new for it (due attempts wait), withdraw its orders
   * not started yet, propose its held fired records at once. Ends with `undrainShard`, leaderStop or leaderStart.
   */
  drainShard(shard: number, nowMs: number): void;
  /** The transfer did not happen: the shard fires again, the attempts that waited first. */
  undrainShard(shard: number): void;
}

/** Read-only questions the host (API views, metrics, the manual clock) asks between inputs. */
export interface NodeCoreQueries {
  /** The state the API shows: RUNNING while a callback is on the wire, QUEUED while armed, buffered or queued. */
  overlayState(job: JobRecord): JobState;
  /** The wheel is below the loader's limit: a client `run` is accepted (else 429 wheel_full). */
  hasRoom(): boolean;
  queueDepths(): CoreQueueDepths;
  /** Shards fired, with their terms. */
  firingShards(): ReadonlyMap<number, number>;
  /** A callback is due now or within the spin window: long work on the host's loop should yield. */
  fireDue(nowMs: number): boolean;
  /** The earliest instant in (nowMs, untilMs] at which something may come due (the manual clock's step). */
  nextDeadlineAfter(nowMs: number, untilMs: number): number | null;
  /** Nothing due at nowMs, nothing out, nothing waiting for its record to apply: the manual clock may step on. */
  settled(nowMs: number): boolean;
  /** Nothing waits to be proposed and every proposal was answered. */
  idle(): boolean;
  /** The loader has pages left (the host ticks again at once). */
  loading(): boolean;
  /** Dispatch orders handed out whose outcome did not come back yet. */
  ordersOut(): number;
  readonly isStopped: boolean;
  /** Callback attempts ordered since start; fired records folded into their outcomes since start. */
  readonly counters: { dispatched: number; folded: number };
  /** Fired records held for their outcomes (tests). */
  heldCount(): number;
  /**
   * The shard drains (drainShard) and nothing of it is left to record: no order out, no firing record waiting to
   * be proposed or for its proposal to apply. Its next leader then finds every callback this node sent recorded.
   */
  shardDrained(shard: number): boolean;
}

/** NodeCore = inputs + `ready()` + queries. */
export interface NodeCoreApi extends NodeCoreInputs, NodeCoreQueries {
  ready(): CoreReady;
}
