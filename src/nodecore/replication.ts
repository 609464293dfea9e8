/**
 * Replication: the Raft side of a node, every shard's RawNode and what the node waits for on it, as a synchronous,
 * deterministic object (README.md in this folder draws it beside NodeCore). It decides; the host persists, syncs,
 * sends and applies. Inputs are method calls with the monotonic time where time matters; outputs are data: a
 * `ReplicaRound` (what to persist, what to send before and after the sync, which committed entries to apply and
 * whether Raft's advance must wait for the applier) and the events taken with `take()` (leadership start and stop,
 * proposal and read answers with their precise failure reasons, snapshot and compaction requests, conf changes,
 * the catch-up of ticks after a stall).
 *
 * A round, for every shard at once (the Ready contract of src/raft):
 *   ready() -> persist the round's snapshots (calling snapshotInstalled), entries and hard states in one write,
 *   applying `inline` rounds' committed entries at once, with the round -> persisted(round) gives the messages to send
 *   before the sync and after it -> sync -> send -> sent(round) queues the committed entries for the applier ->
 *   (a conf change: wait until applyBacklog() is 0) -> advance(round).
 * The applier: nextApply() / beginApply(shard, entry) in a write, then answer(...) per entry and afterApply(shard)
 * once it committed. A write that failed is taken back with applyMark()/rewindApply() and rewind(shard, applied).
 */
import { PunctualError } from '../core/errors.js';
import type { FailureReason } from '../core/errors.js';
import { assert } from '../core/assert.js';
import { clusterAuditLimits, clusterLimits, stallLimits } from '../core/limits.js';
import type { Rand } from '../core/prng.js';
import { HostBugs } from '../raft/bugs.js';
import { RawNode } from '../raft/index.js';
import type { ConfChange, ConfState, Entry, LogIndex, LogStorage, Message, NodeId, Ready, Role } from '../raft/index.js';
import { ShardLeadership } from './leadership.js';
import type { Applied } from './types.js';

/** What an entry costs in the log beyond its data (index, term, type, crc and the row's own overhead). */
const entryOverheadBytes = 32;

/** One shard's log as the replication layer is built with it. */
export interface ReplicaShardInit {
  storage: LogStorage;
  /** What the state machine's store holds (its applied index). */
  applied: number;
}

export interface ReplicationDeps {
  nodeId: string;
  shards: readonly ReplicaShardInit[];
  /** Election timeouts: a seeded Prng in a simulator. */
  rand: Rand;
  /**
   * Log compaction: keep at most keepEntries below the applied index, and (when keepBytes is set) no more than
   * about keepBytes of them, judged by the size of the entries applied since the last look; looked at every
   * everyEntries applied entries, or once keepBytes / 4 were applied since the last one.
   */
  compaction: { keepEntries: number; everyEntries: number; keepBytes?: number };
  /** Raft's per-message and in-flight byte bounds (default clusterLimits). */
  maxInflightBytes?: number;
  maxMsgBytes?: number;
  /** The transport reaches `peer` (leaders probe, rather than stream to, the others). */
  reachable(peer: string): boolean;
}

export interface PendingProposal {
  ticket: number;
  term: number;
  deadlineMonoMs: number;
}

export interface PendingRead {
  ticket: number;
  ctx: string;
  /** The commit index the leader confirmed for this read (-1 until its ReadState arrives). */
  index: number;
  deadlineMonoMs: number;
}

/** One shard on this node: its Raft node, when it fires, what is applied, who waits. */
export class ReplicaShard {
  /** When this node fires the shard (leadership.ts decides). */
  readonly lead = new ShardLeadership();
  appliedSinceCompact = 0;
  appliedBytesSinceCompact = 0;
  /** Log index -> the proposal waiting for it. */
  readonly proposals = new Map<number, PendingProposal>();
  reads: PendingRead[] = [];
  /** Snapshots received and stepped: answered once the round that installs them is persisted. */
  snapshotInstalls: number[] = [];

  constructor(
    readonly shard: number,
    readonly raw: RawNode,
    readonly storage: LogStorage,
    public applied: number,
  ) {}

  get role(): Role {
    return this.lead.role;
  }
}

export interface RoundShard {
  shard: number;
  ready: Ready;
}

/** What one round asks of the host. */
export interface ReplicaRound {
  readonly id: number;
  readonly shards: readonly RoundShard[];
  /** Some shard's entries, snapshot, term or vote must be durable before the late messages leave. */
  readonly mustSync: boolean;
  /** Its committed entries are few and small and nothing waits for the applier: apply them with the round, not through the applier's queue. */
  readonly inline: boolean;
  /** A conf change commits: Raft applies it at advance, so advance waits until the applier has applied everything. */
  readonly confChange: boolean;
}

export type ReplicaEvent =
  | { kind: 'leader_start'; shard: number; term: number }
  | { kind: 'leader_stop'; shard: number }
  /** This node became the shard's leader (it fires once it applied its term's first entry: leader_start). */
  | { kind: 'leading'; shard: number; term: number }
  | { kind: 'proposal'; ticket: number; shard: number; ok: true; applied: Applied }
  | { kind: 'proposal'; ticket: number; shard: number; ok: false; error: PunctualError }
  | { kind: 'read'; ticket: number; shard: number; error: PunctualError | null }
  | { kind: 'snapshot_installed'; ticket: number }
  /** A follower needs a snapshot with the shard's rows at `index` (the applied index). */
  | { kind: 'snapshot'; shard: number; index: number; conf: ConfState }
  /** Compact the log up to `upTo` (a marker snapshot at `index` first when the storage's snapshot is older). */
  | { kind: 'compact'; shard: number; index: number; upTo: number; conf: ConfState }
  | { kind: 'conf_change'; shard: number; conf: ConfState }
  /** Ticks were missed (a stall): call catchUp(monoMs) once the messages that waited meanwhile were stepped. */
  | { kind: 'catch_up' };

export type ProposeAnswer = { ok: true; ticket: number; index: number; term: number } | { ok: false; error: PunctualError };

export type ReadAnswer = { kind: 'now' } | { kind: 'wait'; ticket: number } | { kind: 'refused'; error: PunctualError };

export function notLeader(shard: number): PunctualError {
  return new PunctualError('unavailable', `this node does not lead shard ${shard}`, [], 'not_leader');
}

/** A proposal's failure, with what it proves (src/core/errors.ts FailureReason). */
export function proposalFailed(reason: FailureReason, message: string): PunctualError {
  return new PunctualError('unavailable', message, [], reason);
}

/**
 * The node that should lead `shard` when it is up: the voters sorted by id, `voters[shard % voters.length]`, so
 * leaderships spread evenly over the nodes. Null for a group of one voter (nothing to choose).
 */
export function preferredLeader(shard: number, voters: readonly string[]): string | null {
  if (voters.length < 2) return null;
  return [...voters].sort()[shard % voters.length]!;
}

/** Every this many ticks waiters past their deadline are failed and unreachable peers reported. */
const chorePeriodTicks = 20;

export class Replication {
  readonly shards: ReplicaShard[] = [];
  private readonly events: ReplicaEvent[] = [];
  private ticks = 0;
  /** Monotonic time up to which ticks have been counted. */
  private tickedToMono = 0;
  /** The latest monotonic time an input carried (waiters' deadlines are checked against it). */
  private monoMs = 0;
  private catchUpAsked = false;
  private seq = 0;
  private roundSeq = 0;
  private round: ReplicaRound | null = null;
  private closed = false;
  /** Committed entries waiting for the applier, in log order across shards (from applyHead on). */
  private applyQueue: Array<{ shard: number; entry: Entry }> = [];
  private applyHead = 0;

  constructor(private readonly d: ReplicationDeps) {
    d.shards.forEach((s, shard) => {
      const preferred = preferredLeader(shard, s.storage.initialState().confState.voters);
      const raw = new RawNode(
        {
          id: d.nodeId as NodeId,
          group: shard,
          electionTicks: clusterLimits.electionTicks,
          heartbeatTicks: clusterLimits.heartbeatTicks,
          preVote: true,
          checkQuorum: true,
          maxInflightMsgs: clusterLimits.maxInflightMsgs,
          maxInflightBytes: d.maxInflightBytes ?? clusterLimits.maxInflightBytes,
          maxMsgBytes: d.maxMsgBytes ?? clusterAuditLimits.appendBytesMax,
          leaseTicks: clusterLimits.leaseTicks,
          rand: d.rand,
          applied: s.applied as LogIndex,
          bootCampaignDelayTicks: preferred !== null && preferred !== d.nodeId ? clusterLimits.bootCampaignDelayTicks : 0,
        },
        s.storage,
      );
      this.shards.push(new ReplicaShard(shard, raw, s.storage, s.applied));
    });
  }

  /** The events since the last take(), in the order they happened. */
  take(): ReplicaEvent[] {
    return this.events.splice(0);
  }

  // --- time -----------------------------------------------------------------------------------------------

  /** Ticks count from `monoMs`; a group whose only voter is this node campaigns at once. */
  start(monoMs: number): void {
    this.monoMs = monoMs;
    this.tickedToMono = monoMs;
    for (const s of this.shards) {
      const voters = s.raw.status().confState.voters;
      if (voters.length === 1 && voters[0] === this.d.nodeId) s.raw.campaign();
    }
  }

  /**
   * One tick per clusterLimits.tickMs of MONOTONIC time elapsed, however late the host's interval runs. After a
   * stall (SIGSTOP, a long GC, a slow write) the missed ticks run before anything relies on the lease, so a
   * deposed leader that wakes up sees its lease expired instead of firing for its old term. Returns false while
   * ticks are missing: the host then gets one `catch_up` event and calls catchUp once the messages that arrived
   * meanwhile were stepped (a leader whose followers did answer is not deposed by CheckQuorum; a follower that
   * heard its leader does not campaign). Until then the lease counts as lapsed.
   */
  tick(monoMs: number): boolean {
    this.monoMs = Math.max(this.monoMs, monoMs);
    const due = Math.floor((monoMs - this.tickedToMono) / clusterLimits.tickMs);
    if (HostBugs.leaseOnStaleTicks) {
      // The old rule, for the simulator's mutation check: one tick whatever the stall, the lease as Raft saw it.
      if (due >= 1) this.runTicks(1, due);
      return true;
    }
    if (due <= 1) {
      if (due === 1) this.runTicks(1, 1);
      return true;
    }
    if (!this.catchUpAsked) {
      this.catchUpAsked = true;
      this.events.push({ kind: 'catch_up' });
    }
    return false;
  }

  /** The missed ticks of a stall (after a `catch_up` event). */
  catchUp(monoMs: number): void {
    this.monoMs = Math.max(this.monoMs, monoMs);
    this.catchUpAsked = false;
    const late = Math.floor((monoMs - this.tickedToMono) / clusterLimits.tickMs);
    if (late > 0) this.runTicks(late, late);
  }

  /** True when no tick is missing at `monoMs` (the lease may be trusted); reads only. */
  ticksCurrent(monoMs: number): boolean {
    return HostBugs.leaseOnStaleTicks || Math.floor((monoMs - this.tickedToMono) / clusterLimits.tickMs) <= 1;
  }

  /**
   * `due` ticks of elapsed time: a group this node leads gets them all (up to catchUpTicksMax: its lease must
   * expire); any other group at most stallLimits.followerCatchUpTicksMax, so a stalled follower that heard its
   * leader does not campaign on time it spent frozen (it only votes and campaigns later: liveness, not safety).
   */
  private runTicks(ticks: number, due: number): void {
    this.tickedToMono += due * clusterLimits.tickMs;
    const n = Math.min(ticks, clusterLimits.catchUpTicksMax);
    for (const s of this.shards) {
      const k = n === 1 || s.raw.basicStatus().role === 'leader' ? n : Math.min(n, stallLimits.followerCatchUpTicksMax);
      for (let i = 0; i < k; i++) s.raw.tick();
    }
    for (let i = 0; i < n; i++) {
      if (++this.ticks % chorePeriodTicks !== 0) continue;
      this.expireWaiters();
      this.reportUnreachable();
    }
  }

  /** True while this node fires the shard and holds its lease (asked right before each send). */
  leaseValid(shard: number, monoMs: number): boolean {
    const s = this.shard(shard);
    return this.tick(monoMs) && s.lead.firing && s.raw.leaseValid();
  }

  /**
   * The monotonic time at which this node's lease of the shard ends unless a heartbeat round renews it (-Infinity:
   * not valid at `monoMs`): the time the tick that ends it is due, tickedToMono plus the ticks left. For a sender
   * that cannot ask at the moment it sends (the firing thread); what the node learns before then (a transfer, a lost
   * term) it tells that sender itself. Unlike `leaseValid` it needs no catch-up after a stall: the ticks not yet
   * counted are as far behind tickedToMono as the tick count is behind, so the time is the same once they are.
   */
  leaseUntilMono(shard: number, monoMs: number): number {
    const s = this.shard(shard);
    this.tick(monoMs);
    if (!s.lead.firing) return Number.NEGATIVE_INFINITY;
    const untilMono = this.tickedToMono + s.raw.leaseTicksLeft() * clusterLimits.tickMs;
    return untilMono > monoMs ? untilMono : Number.NEGATIVE_INFINITY;
  }

  // --- inputs -----------------------------------------------------------------------------------------------

  /** Messages from a peer (any groups). A message Raft refuses is returned with its error; the rest are stepped. */
  step(messages: readonly Message[]): Array<{ message: Message; err: unknown }> {
    const dropped: Array<{ message: Message; err: unknown }> = [];
    for (const m of messages) {
      const s = this.shards[m.group];
      if (s === undefined) continue;
      try {
        s.raw.step(m);
      } catch (err) {
        dropped.push({ message: m, err });
      }
    }
    return dropped;
  }

  /**
   * A whole snapshot from the leader: a ticket answered (`snapshot_installed`) once the round that installs it
   * is persisted, or null when Raft ignores it (at or behind what this node holds: no round will install it).
   */
  installSnapshot(message: Message): number | null {
    const s = this.shard(message.group);
    assert(message.type === 'snapshot', 'installSnapshot takes a snapshot message');
    this.step([message]);
    if (!s.raw.hasPendingSnapshot()) return null;
    const ticket = ++this.seq;
    s.snapshotInstalls.push(ticket);
    return ticket;
  }

  /** Appends `data` to the shard's log if this node leads it; the ticket is answered once applied (or lost). */
  propose(shard: number, data: Uint8Array, monoMs: number): ProposeAnswer {
    const s = this.shard(shard);
    this.monoMs = Math.max(this.monoMs, monoMs);
    if (this.closed) return { ok: false, error: proposalFailed('shutting_down', 'node is shutting down') };
    const r = s.raw.propose(data);
    if (!r.ok) return { ok: false, error: r.reason === 'not_leader' ? notLeader(shard) : proposalFailed('proposal_refused', `shard ${shard}: ${r.reason}`) };
    const ticket = ++this.seq;
    s.proposals.set(r.index, { ticket, term: r.term, deadlineMonoMs: monoMs + clusterLimits.proposalTimeoutMs });
    return { ok: true, ticket, index: r.index, term: r.term };
  }

  /** A membership change (one at a time per group); it took effect once the group's confState shows it. */
  proposeConfChange(shard: number, change: ConfChange): { index: number; term: number } {
    if (this.closed) throw new PunctualError('unavailable', 'node is shutting down');
    const r = this.shard(shard).raw.proposeConfChange(change);
    if (r.ok) return { index: r.index, term: r.term };
    if (r.reason === 'not_leader') throw notLeader(shard);
    // Leadership moving, like not_leader: whoever changes membership waits it out and follows the new leader.
    if (r.reason === 'transferring') throw new PunctualError('unavailable', `shard ${shard}: a leadership transfer is under way`);
    if (r.reason === 'invalid_change') throw new PunctualError('conflict', `shard ${shard}: ${change.type} ${change.node} does not fit the membership`);
    throw new PunctualError('conflict', `shard ${shard}: ${r.reason}`);
  }

  /**
   * A linearizable read of the shard from this node's store: now while the leader's lease holds (and it applied
   * its own term's first entry), else after a ReadIndex round (`read` event). On a follower only when `follower`:
   * Raft's ReadIndex forwarded to the leader, answered once this node applied what the leader had committed.
   */
  readBarrier(shard: number, monoMs: number, follower = false): ReadAnswer {
    const s = this.shard(shard);
    if (s.role !== 'leader') {
      if (!follower) return { kind: 'refused', error: notLeader(shard) };
    } else if (this.leaseValid(shard, monoMs)) return { kind: 'now' };
    const ticket = ++this.seq;
    if (!s.raw.readIndex(`r${ticket}`)) return { kind: 'refused', error: notLeader(shard) };
    s.reads.push({ ticket, ctx: `r${ticket}`, index: -1, deadlineMonoMs: monoMs + clusterLimits.readIndexTimeoutMs });
    return { kind: 'wait', ticket };
  }

  reportSnapshot(shard: number, peer: string, ok: boolean): void {
    this.shards[shard]?.raw.reportSnapshot(peer as NodeId, ok);
  }

  reportUnreachablePeer(shard: number, peer: string): void {
    this.shards[shard]?.raw.reportUnreachable(peer as NodeId);
  }

  transferLeader(shard: number, to: string): void {
    this.shard(shard).raw.transferLeader(to as NodeId);
  }

  /** Refuses what comes next, fails every waiter and stops firing every shard. */
  close(): void {
    this.closed = true;
    for (const s of this.shards) {
      for (const p of s.proposals.values()) this.fail(s, p.ticket, proposalFailed('interrupted', 'node is shutting down (the write may have applied)'));
      s.proposals.clear();
      for (const r of s.reads.splice(0)) this.events.push({ kind: 'read', ticket: r.ticket, shard: s.shard, error: proposalFailed('shutting_down', 'node is shutting down') });
      if (s.lead.stop()) this.events.push({ kind: 'leader_stop', shard: s.shard });
    }
  }

  // --- the round --------------------------------------------------------------------------------------------

  /** True when a round would have work (and none is in flight). */
  hasReady(): boolean {
    return this.round === null && this.shards.some((s) => s.raw.hasReady());
  }

  /** The next round, or null while one is in flight (not advanced) or no shard has anything. */
  ready(): ReplicaRound | null {
    if (this.round !== null) return null;
    // Asked after every input, most of which leave nothing to do: nothing is allocated until a shard has work.
    let shards: RoundShard[] | null = null;
    for (const s of this.shards) if (s.raw.hasReady()) (shards ??= []).push({ shard: s.shard, ready: s.raw.ready() });
    if (shards === null) return null;
    let confChange = false;
    let mustSync = false;
    for (const { ready } of shards) {
      if (ready.mustSync) mustSync = true;
      for (const e of ready.committedEntries) if (e.type === 'conf_change') confChange = true;
    }
    this.round = { id: ++this.roundSeq, shards, mustSync, inline: !confChange && this.inline(shards), confChange };
    return this.round;
  }

  /**
   * A round whose committed entries are few and small (and nothing waits for the applier) is applied with its
   * round: no turn of the applier per round is what a light, steady load needs. Anything larger goes to the applier.
   */
  private inline(shards: readonly RoundShard[]): boolean {
    if (this.applyBacklog() > 0) return false;
    let entries = 0;
    let bytes = 0;
    for (const { ready } of shards) {
      for (const e of ready.committedEntries) {
        entries++;
        bytes += e.data.length;
      }
    }
    return entries <= stallLimits.applySliceEntriesMax && bytes <= stallLimits.inlineApplyBytesMax;
  }

  /** In the round that installs it: the shard's rows are now the snapshot's. Proposals it covers can no longer be told apart. */
  snapshotInstalled(shard: number, index: number): void {
    const s = this.shard(shard);
    s.applied = index;
    s.appliedSinceCompact = 0;
    s.appliedBytesSinceCompact = 0;
    for (const [i, p] of s.proposals) {
      if (i > index) continue;
      s.proposals.delete(i);
      this.fail(s, p.ticket, proposalFailed('snapshot_overtook', `shard ${shard}: proposal overtaken by a snapshot (it may have applied)`));
    }
  }

  /**
   * The round's write committed: leadership follows Raft's soft state, and the messages split into those that
   * need nothing durable from this node (heartbeats and their answers, a leader's appends: the leader counts its
   * own copy only after its sync, as etcd does) and the rest (votes, append answers: only after the sync).
   */
  persisted(round: ReplicaRound): { early: Message[]; late: Message[] } {
    assert(this.round === round, 'persisted() names the round in flight');
    for (const { shard, ready } of round.shards) {
      if (ready.softState === null) continue;
      const s = this.shard(shard);
      const role = ready.softState.role;
      const wasLeader = s.role === 'leader';
      if (s.lead.softState(role, ready.softState.leader, s.raw.basicStatus())) this.events.push({ kind: 'leader_stop', shard });
      if (!wasLeader && role === 'leader') this.events.push({ kind: 'leading', shard, term: s.lead.term });
      if (role !== 'leader') {
        for (const r of s.reads.splice(0)) this.events.push({ kind: 'read', ticket: r.ticket, shard, error: notLeader(shard) });
      }
    }
    const early: Message[] = [];
    const late: Message[] = [];
    for (const { shard, ready } of round.shards) {
      const leader = this.shard(shard).role === 'leader';
      for (const m of ready.messages) {
        const now = m.type === 'heartbeat' || m.type === 'heartbeat_resp' || (m.type === 'append' && leader);
        (now ? early : late).push(m);
      }
    }
    return { early, late };
  }

  /** The round's messages left: its committed entries go to the applier (unless they were applied inline). */
  sent(round: ReplicaRound): void {
    assert(this.round === round, 'sent() names the round in flight');
    if (round.inline) return;
    for (const { shard, ready } of round.shards) for (const entry of ready.committedEntries) this.applyQueue.push({ shard, entry });
  }

  /** An inline round whose applies rolled back (a full disk): its committed entries go to the applier after all. */
  deferInline(round: ReplicaRound): void {
    assert(this.round === round && round.inline, 'deferInline() names the inline round in flight');
    for (const { shard, ready } of round.shards) for (const entry of ready.committedEntries) this.applyQueue.push({ shard, entry });
  }

  /** Raft takes the round as done; then term changes, firing start, reads, snapshot and compaction requests. */
  advance(round: ReplicaRound): void {
    assert(this.round === round, 'advance() names the round in flight');
    assert(!round.confChange || this.applyBacklog() === 0, 'a conf change advances only once everything before it is applied');
    this.round = null;
    for (const { shard, ready } of round.shards) {
      const s = this.shard(shard);
      s.raw.advance();
      // Deposed and re-elected between two rounds: same soft state, new term (new fencing token).
      if (ready.hardState !== null && s.lead.hardTerm(ready.hardState.term, s.raw.basicStatus())) this.events.push({ kind: 'leader_stop', shard });
      this.maybeStartFiring(s);
      for (const rs of ready.readStates) {
        const r = s.reads.find((x) => x.ctx === rs.ctx);
        if (r !== undefined) r.index = rs.index;
      }
      this.serveReads(s);
      if (ready.snapshot !== null) for (const ticket of s.snapshotInstalls.splice(0)) this.events.push({ kind: 'snapshot_installed', ticket });
      if (ready.snapshotRequested) this.events.push({ kind: 'snapshot', shard, index: s.applied, conf: s.raw.confState() });
      if (ready.snapshot !== null || ready.committedEntries.some((e) => e.type === 'conf_change')) this.events.push({ kind: 'conf_change', shard, conf: s.raw.confState() });
      this.maybeCompact(s);
    }
  }

  // --- the applier ------------------------------------------------------------------------------------------

  /** Committed entries waiting for the applier. */
  applyBacklog(): number {
    return this.applyQueue.length - this.applyHead;
  }

  /**
   * Where the applier stands before a write (rewindApply takes a failed write back to it). Entries applied
   * before the mark are dropped from the queue here, so call it before each write.
   */
  applyMark(): number {
    if (this.applyHead >= this.applyQueue.length) {
      this.applyQueue = [];
      this.applyHead = 0;
    } else if (this.applyHead > 4096) {
      this.applyQueue = this.applyQueue.slice(this.applyHead);
      this.applyHead = 0;
    }
    return this.applyHead;
  }

  /** The next committed entry to apply, in log order across shards. */
  nextApply(): { shard: number; entry: Entry } | null {
    return this.applyHead < this.applyQueue.length ? this.applyQueue[this.applyHead++]! : null;
  }

  /** The applier's write rolled back: its entries are applied again later. */
  rewindApply(mark: number): void {
    this.applyHead = mark;
  }

  /** A write rolled back: the shard's applied index is what the store holds again. */
  rewind(shard: number, applied: number): void {
    this.shard(shard).applied = applied;
  }

  /** Inside an apply write: whether `entry` is still to apply; if so it counts as applied from here on. */
  beginApply(shard: number, entry: Entry): boolean {
    const s = this.shard(shard);
    if (entry.index <= s.applied) return false;
    s.applied = entry.index;
    s.appliedSinceCompact++;
    const bytes = entry.data.length + entryOverheadBytes;
    s.appliedBytesSinceCompact += bytes;
    return true;
  }

  /**
   * The write that applied the entry committed: its proposer hears. `applied` is null when the entry had no
   * command or its command was quarantined.
   */
  answer(shard: number, index: number, term: number, applied: Applied | null): void {
    const s = this.shard(shard);
    const p = s.proposals.get(index);
    if (p === undefined) return;
    s.proposals.delete(index);
    // Another term's entry committed at the proposal's index: the proposal can never commit (log matching).
    if (p.term !== term) this.fail(s, p.ticket, proposalFailed('proposal_lost', `shard ${shard}: leadership changed, proposal lost`));
    else if (applied !== null) this.events.push({ kind: 'proposal', ticket: p.ticket, shard, ok: true, applied });
    else this.fail(s, p.ticket, new PunctualError('internal', `shard ${shard}: the command of entry ${index} could not be applied; it was quarantined`));
  }

  /**
   * After entries of the shard were applied and answered: firing start, reads, and (`compact`: the applier's
   * writes; an inline round's applies leave it to the round's advance) compaction.
   */
  afterApply(shard: number, compact = true): void {
    const s = this.shard(shard);
    this.maybeStartFiring(s);
    this.serveReads(s);
    if (compact) this.maybeCompact(s);
  }

  // --- queries ----------------------------------------------------------------------------------------------

  /** Events wait for take(). */
  hasEvents(): boolean {
    return this.events.length > 0;
  }

  /** True when no proposal of any shard waits for its entry. */
  idle(): boolean {
    return this.shards.every((s) => s.proposals.size === 0);
  }

  inFlight(): ReplicaRound | null {
    return this.round;
  }

  // --- rules ------------------------------------------------------------------------------------------------

  private shard(shard: number): ReplicaShard {
    const s = this.shards[shard];
    assert(s !== undefined, `shard ${shard} out of range`);
    return s;
  }

  private fail(s: ReplicaShard, ticket: number, error: PunctualError): void {
    this.events.push({ kind: 'proposal', ticket, shard: s.shard, ok: false, error });
  }

  /** A leader fires only once it applied everything before its term (leadership.ts). */
  private maybeStartFiring(s: ReplicaShard): void {
    const term = s.lead.caughtUp(s.applied);
    if (term !== null) this.events.push({ kind: 'leader_start', shard: s.shard, term });
  }

  private serveReads(s: ReplicaShard): void {
    if (s.reads.length === 0) return;
    s.reads = s.reads.filter((r) => {
      if (r.index < 0 || s.applied < r.index) return true;
      this.events.push({ kind: 'read', ticket: r.ticket, shard: s.shard, error: null });
      return false;
    });
  }

  /**
   * Keeps compaction.keepEntries below the applied index (fewer when they would pass keepBytes): a count alone lets
   * the log's size follow how many commands each entry carries, which grows under load.
   */
  private maybeCompact(s: ReplicaShard): void {
    const { keepEntries, everyEntries, keepBytes } = this.d.compaction;
    const byBytes = keepBytes !== undefined && s.appliedBytesSinceCompact >= keepBytes / 4;
    if (s.appliedSinceCompact < everyEntries && !byBytes) return;
    // The entries applied since the last look tell how large entries are now.
    const entryBytes = s.appliedBytesSinceCompact / Math.max(1, s.appliedSinceCompact);
    s.appliedSinceCompact = 0;
    s.appliedBytesSinceCompact = 0;
    const keep = keepBytes === undefined ? keepEntries : Math.max(1, Math.min(keepEntries, Math.floor(keepBytes / entryBytes)));
    const upTo = s.applied - keep;
    if (upTo < s.storage.firstIndex()) return;
    this.events.push({ kind: 'compact', shard: s.shard, index: s.applied, upTo, conf: s.raw.confState() });
  }

  private expireWaiters(): void {
    const now = this.monoMs;
    for (const s of this.shards) {
      for (const [index, p] of s.proposals) {
        if (p.deadlineMonoMs > now) continue;
        s.proposals.delete(index);
        this.fail(s, p.ticket, proposalFailed('proposal_timeout', `shard ${s.shard}: proposal not applied within ${clusterLimits.proposalTimeoutMs} ms (it may still apply)`));
      }
      if (!s.reads.some((r) => r.deadlineMonoMs <= now)) continue;
      s.reads = s.reads.filter((r) => {
        if (r.deadlineMonoMs > now) return true;
        this.events.push({ kind: 'read', ticket: r.ticket, shard: s.shard, error: proposalFailed('read_timeout', `shard ${s.shard}: read not confirmed in time`) });
        return false;
      });
    }
  }

  /** Leaders stop streaming appends optimistically to peers the transport cannot reach (probe instead). */
  private reportUnreachable(): void {
    for (const s of this.shards) {
      if (s.role !== 'leader') continue;
      const c = s.raw.confState();
      for (const id of [...c.voters, ...c.learners]) if (id !== this.d.nodeId && !this.d.reachable(id)) s.raw.reportUnreachable(id);
    }
  }
}
