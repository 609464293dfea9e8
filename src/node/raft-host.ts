/**
 * RaftHost: one Raft group per shard on this node, and the Ready loop that drives them all.
 *
 * One loop round (Ready contract of src/raft, for every group at once):
 *  1. collect the Ready of every group that has one;
 *  2. ONE SQLite transaction: install snapshots (Raft storage + the shard's rows), append entries, write hard
 *     states; and, only when the round's committed entries are few and small (inlineApply), their applies;
 *  3. fsync per --fsync (batch: the WAL on the thread pool; always: inside the commit; off: none);
 *  4. send every message; queue the committed entries for the applier; advance every group; then compaction
 *     and requested snapshots.
 * The applier applies queued entries in log order in transactions of at most stallLimits.applySliceMs /
 * applySliceEntriesMax (src/scheduler apply, each entry in a savepoint, applied_index in the same transaction),
 * yielding to the event loop between slices: a large batch of creates or a hot instant's fired records never
 * holds timers, the firing engine, Raft ticks or heartbeat answers for more than one slice. After each slice it
 * hands applied commands to the engine and answers their proposers (committed entries are durable on a quorum
 * already: the leader counts its own copy only after its fsync). Rounds go on while the applier works, so Raft
 * traffic never waits for applies; Raft's own applied index runs ahead of the host's (g.applied, what is in
 * SQLite), except across a conf change: a Ready that commits one waits for the applier to drain before its
 * advance (Raft applies the change at advance, and a snapshot's membership must match its rows).
 * A round runs on setImmediate after any tick, step or proposal; a new round never starts before the previous
 * one advanced. Ticks: one interval for all groups (clusterLimits.tickMs).
 *
 * A single node without --peers is the same thing with one voter per group: it campaigns at once and leads
 * every shard after its first round.
 */
import { PunctualError, type FailureReason } from '../core/errors.js';
import { clusterAuditLimits, clusterLimits, nodeLimits, quarantineLimits, stallLimits } from '../core/limits.js';
import type { Clock } from '../core/clock.js';
import type { Logger } from '../core/log.js';
import type { Rand } from '../core/prng.js';
import type { NodeMetrics } from '../metrics/metrics.js';
import { RawNode, type ConfChange, type ConfState, type Entry, type LogIndex, type Message, type NodeId, type Ready, type SoftState } from '../raft/index.js';
import { CommandDecodeError, decodeCommand } from '../scheduler/codec.js';
import { apply } from '../scheduler/machine.js';
import type { Command, Effect } from '../scheduler/commands.js';
import { isDiskFullError, isStorageError, type Db, type FsyncMode } from '../store/db.js';
import { QuarantineTable, type QuarantinedEntry } from '../store/quarantine.js';
import { bootstrapGroup, SqliteRaftStorage } from '../store/raft-storage.js';
import { AppliedIndexes, encodeShardImage, restoreShardImage } from '../store/shard-snapshot.js';
import { SqliteShardStore } from '../store/shard-store.js';
import type { WalSyncer } from '../store/wal-sync.js';
import { ShardGroup, type Waiter } from './group.js';
import type { Applied } from '../nodecore/index.js';

/** The part of PeerTransport the host uses (null for a single node). */
export interface MessageSender {
  send(messages: readonly Message[]): void;
  /** Connected to the peer and heard from it recently. */
  reachable(peerId: string): boolean;
}

export interface RaftHostOptions {
  nodeId: string;
  db: Db;
  shards: number;
  /**
   * The founding voters of every group (this node and --peers), used only when a group has no Raft state.
   * Empty for a node that joins a running cluster: its groups wait for a snapshot from their leaders.
   */
  voters: string[];
  fsync: FsyncMode;
  walSync: WalSyncer | null;
  clock: Clock;
  rand: Rand;
  logger: Logger;
  metrics: NodeMetrics;
  /** Every applied command, in log order, on every node (the engine ignores shards it does not fire). */
  onApplied(shard: number, command: Command, effects: Effect[]): void;
  /** This node leads `shard` in `term` and has applied everything before: start firing it. */
  onLeaderStart(shard: number, term: number): void;
  /** This node no longer leads `shard` (or its term changed): stop firing it. */
  onLeaderStop(shard: number): void;
  onFatal(err: unknown): void;
  /**
   * True when the firing engine has an occurrence due now (or within its spin window): an apply slice ends
   * early so the fire is not held behind it (firing precision before apply throughput).
   */
  fireDue?(): boolean;
  /** The membership of `shard` changed on this node (a conf change applied, or a snapshot installed). */
  onConfChange?(shard: number, conf: ConfState): void;
  /** Log compaction (default nodeLimits.logKeepEntries / logCompactEveryEntries); tests lower them. */
  compaction?: { keepEntries: number; everyEntries: number };
}

interface AppliedOut {
  g: ShardGroup;
  index: number;
  term: number;
  command: Command | null;
  applied: Applied | null;
  error: unknown;
  /** Set when the entry was quarantined: reported (metric, log) once its transaction committed. */
  quarantined?: { entry: QuarantinedEntry; type: string | null };
}

export function diskFull(): PunctualError {
  return new PunctualError('insufficient_storage', `the disk of this node is full; writes are refused until space is freed (retry in ${quarantineLimits.diskFullRetryAfterS} s)`);
}

export function notLeader(shard: number): PunctualError {
  return new PunctualError('unavailable', `this node does not lead shard ${shard}`, [], 'not_leader');
}

/** A proposal's failure, with what it proves (src/core/errors.ts FailureReason). */
function proposalFailed(reason: FailureReason, message: string): PunctualError {
  return new PunctualError('unavailable', message, [], reason);
}

export class RaftHost {
  readonly groups: ShardGroup[] = [];
  private sender: MessageSender | null = null;
  private readonly appliedIndexes: AppliedIndexes;
  /** Entries this node could not decode or apply (raft_quarantine). */
  readonly quarantined: QuarantineTable;
  private scheduled: NodeJS.Immediate | null = null;
  private running: Promise<void> | null = null;
  private ticker: NodeJS.Timeout | null = null;
  /** Ticks missed by a stall, counted after the poll phase (catchUpTicks). */
  private catchUp: NodeJS.Immediate | null = null;
  private ticks = 0;
  /** Monotonic time (performance.now) up to which ticks have been counted. */
  private tickedToMono = 0;
  private readSeq = 0;
  private closed = false;
  private failed = false;
  /** A storage error: nothing more is written. */
  private fatal = false;
  /** Committed entries waiting for the applier, in log order across groups (from applyHead on). */
  private applyQueue: Array<{ g: ShardGroup; e: Entry }> = [];
  private applyHead = 0;
  private applying: Promise<void> | null = null;
  /**
   * A full disk (SQLITE_FULL): the round whose transaction failed, kept as it is and persisted again later. Its
   * transaction rolled back, so Raft was not advanced and nothing of it was sent or acknowledged: a follower does
   * not answer an append it could not write, a leader does not count its own copy. Proposals are refused (507)
   * while the round or the applier is stuck; both retry every quarantineLimits.diskFullRetryMs until a write
   * succeeds, then the node goes on by itself.
   */
  private stuck: Array<[ShardGroup, Ready]> | null = null;
  private roundFull = false;
  private applierFull = false;
  private fullRetry: NodeJS.Timeout | null = null;

  constructor(private readonly o: RaftHostOptions) {
    this.appliedIndexes = new AppliedIndexes(o.db);
    this.quarantined = new QuarantineTable(o.db);
    for (let shard = 0; shard < o.shards; shard++) this.groups.push(this.openGroup(shard));
    for (const q of this.quarantined.list()) {
      o.logger.error('log entry quarantined earlier (its effects were skipped on every replica)', {
        shard: q.shard, index: q.index, term: q.term, digest: q.digest, err: q.error,
      });
    }
  }

  private openGroup(shard: number): ShardGroup {
    const { db } = this.o;
    if (this.o.voters.length > 0) bootstrapGroup(db, shard, [...this.o.voters].sort() as NodeId[]);
    const storage = new SqliteRaftStorage(db, shard, { markerSnapshots: true });
    const applied = Math.max(this.appliedIndexes.of(shard), storage.firstIndex() - 1);
    const raw = new RawNode(
      {
        id: this.o.nodeId as NodeId,
        group: shard,
        electionTicks: clusterLimits.electionTicks,
        heartbeatTicks: clusterLimits.heartbeatTicks,
        preVote: true,
        checkQuorum: true,
        maxInflightMsgs: clusterLimits.maxInflightMsgs,
        maxInflightBytes: clusterLimits.maxInflightBytes,
        maxMsgBytes: clusterAuditLimits.appendBytesMax,
        leaseTicks: clusterLimits.leaseTicks,
        rand: this.o.rand,
        applied: applied as LogIndex,
      },
      storage,
    );
    return new ShardGroup(shard, new SqliteShardStore(db, shard), storage, raw, applied);
  }

  /** The peer transport opened after start (a single node that grows into a cluster). */
  setSender(sender: MessageSender): void {
    this.sender = sender;
    this.schedule();
  }

  /** Starts ticking; a group whose only voter is this node campaigns at once (no election timeout). */
  start(sender: MessageSender | null): void {
    this.sender = sender;
    for (const g of this.groups) {
      const voters = g.raw.status().confState.voters;
      if (voters.length === 1 && voters[0] === this.o.nodeId) g.raw.campaign();
    }
    this.tickedToMono = performance.now();
    this.ticker = setInterval(() => this.catchUpTicks(), clusterLimits.tickMs);
    this.schedule();
  }

  /**
   * Ticks once per clusterLimits.tickMs of MONOTONIC time elapsed, however late the interval runs. After a stall
   * (SIGSTOP, a long GC or a slow transaction) the missed ticks run before anything relies on the lease, so a
   * deposed leader that wakes up sees its lease expired instead of firing for its old term (found by
   * jepsen-lite: a leader frozen 3.7 s fired for term 10 after term 11 had acknowledged a cancel). Raft counts
   * time in ticks; this is where wall time becomes ticks.
   */
  private catchUpTicks(): boolean {
    const due = Math.floor((performance.now() - this.tickedToMono) / clusterLimits.tickMs);
    if (due <= 1) {
      if (due === 1) this.runTicks(1);
      return true;
    }
    // A stall: the messages that arrived meanwhile are still in the sockets. Count the missed ticks only after
    // the poll phase has stepped them (setImmediate runs after it), so a leader whose followers did answer is
    // not deposed by CheckQuorum, and a follower that did hear its leader does not campaign. Until then the
    // lease counts as lapsed (leaseValid, readBarrier): never valid on stale ticks.
    // Two immediates: the second runs after one full poll phase even when the stall was itself in a poll callback.
    if (this.catchUp === null) {
      this.catchUp = setImmediate(() => {
        this.catchUp = setImmediate(() => {
          this.catchUp = null;
          const late = Math.floor((performance.now() - this.tickedToMono) / clusterLimits.tickMs);
          if (late > 0) this.runTicks(late);
        });
      });
    }
    return false;
  }

  /**
   * `due` ticks of elapsed time: a group this node leads gets them all (up to catchUpTicksMax: its lease must
   * expire); any other group at most stallLimits.followerCatchUpTicksMax, so a stalled follower that heard its
   * leader does not campaign on time it spent frozen (it only votes and campaigns later: liveness, not safety).
   */
  private runTicks(due: number): void {
    this.tickedToMono += due * clusterLimits.tickMs;
    const ticks = Math.min(due, clusterLimits.catchUpTicksMax);
    if (ticks === 1) return this.tick();
    for (const g of this.groups) {
      const n = g.raw.status().role === 'leader' ? ticks : Math.min(ticks, stallLimits.followerCatchUpTicksMax);
      for (let i = 0; i < n; i++) g.raw.tick();
    }
    for (let i = 0; i < ticks; i++) this.countTick();
    this.schedule();
  }

  private tick(): void {
    for (const g of this.groups) g.raw.tick();
    this.countTick();
    this.schedule();
  }

  private countTick(): void {
    if (++this.ticks % 20 === 0) {
      this.expireWaiters();
      this.reportUnreachable();
    }
  }

  // --- input ------------------------------------------------------------------------------------------

  /** Messages from a peer (any groups). Never throws: a bad message is logged and dropped. */
  step(messages: readonly Message[]): void {
    for (const m of messages) {
      const g = this.groups[m.group];
      if (g === undefined) continue;
      try {
        g.raw.step(m);
      } catch (err) {
        this.o.logger.warn('raft message dropped', { group: m.group, type: m.type, from: m.from, err });
      }
    }
    this.schedule();
  }

  /** A whole snapshot from the leader: resolves once the round that installs it is persisted. */
  installSnapshot(message: Message): Promise<void> {
    const g = this.groups[message.group];
    if (g === undefined || message.type !== 'snapshot') return Promise.reject(new Error('not a snapshot of a known group'));
    return new Promise<void>((resolve) => {
      this.step([message]);
      // Raft ignores a snapshot at or behind what this node holds: no round will install it, so answer now.
      if (g.raw.hasPendingSnapshot()) g.snapshotInstalls.push(resolve);
      else resolve();
    });
  }

  /** Appends `data` to the shard's log if this node leads it; the waiter hears once it is applied (or lost). */
  propose(shard: number, data: Uint8Array, waiter: Waiter): void {
    const g = this.groups[shard]!;
    if (this.closed) return waiter.reject(proposalFailed('shutting_down', 'node is shutting down'));
    if (this.diskFull()) return waiter.reject(diskFull());
    const r = g.raw.propose(data);
    if (!r.ok) return waiter.reject(r.reason === 'not_leader' ? notLeader(shard) : proposalFailed('proposal_refused', `shard ${shard}: ${r.reason}`));
    g.proposals.set(r.index, { ...waiter, term: r.term, deadlineMs: this.o.clock.nowMs() + clusterLimits.proposalTimeoutMs });
    this.o.metrics.proposals.inc({ shard: String(shard) });
    this.schedule();
  }

  /**
   * Appends a membership change to the shard's log if this node leads it (one at a time per group). It took
   * effect once the group's confState shows it; the caller watches that. Refusals are PunctualErrors.
   */
  proposeConfChange(shard: number, change: ConfChange): { index: number; term: number } {
    const g = this.groups[shard]!;
    if (this.closed) throw new PunctualError('unavailable', 'node is shutting down');
    if (this.diskFull()) throw diskFull();
    const r = g.raw.proposeConfChange(change);
    if (r.ok) {
      this.schedule();
      return { index: r.index, term: r.term };
    }
    if (r.reason === 'not_leader') throw notLeader(shard);
    if (r.reason === 'invalid_change') throw new PunctualError('conflict', `shard ${shard}: ${change.type} ${change.node} does not fit the membership`);
    throw new PunctualError('conflict', `shard ${shard}: ${r.reason}`);
  }

  /**
   * Resolves when a linearizable read of the shard may be served from this node's store: at once while the
   * leader's lease holds (and it applied its own term's no-op), else after a ReadIndex round.
   */
  readBarrier(shard: number): Promise<void> {
    const g = this.groups[shard]!;
    if (g.role !== 'leader') return Promise.reject(notLeader(shard));
    if (this.catchUpTicks() && g.firing && g.raw.leaseValid()) return Promise.resolve();
    const ctx = `r${++this.readSeq}`;
    if (!g.raw.readIndex(ctx)) return Promise.reject(notLeader(shard));
    return new Promise<void>((resolve, reject) => {
      g.reads.push({ ctx, index: -1, deadlineMs: this.o.clock.nowMs() + clusterLimits.readIndexTimeoutMs, resolve, reject });
      this.schedule();
    });
  }

  /**
   * readBarrier on a leader; on a follower, Raft's ReadIndex forwarded to the leader: resolves once this node has
   * applied everything the leader had committed when it answered (a backup of a follower holds every acknowledged
   * write). Rejected when no leader is known, on a leader change, or after clusterLimits.readIndexTimeoutMs.
   */
  appliedBarrier(shard: number): Promise<void> {
    const g = this.groups[shard]!;
    if (g.role === 'leader') return this.readBarrier(shard);
    const ctx = `r${++this.readSeq}`;
    if (!g.raw.readIndex(ctx)) return Promise.reject(notLeader(shard));
    return new Promise<void>((resolve, reject) => {
      g.reads.push({ ctx, index: -1, deadlineMs: this.o.clock.nowMs() + clusterLimits.readIndexTimeoutMs, resolve, reject });
      this.schedule();
    });
  }

  /** The transport's outcome of a snapshot stream to `peer`. */
  reportSnapshot(shard: number, peer: string, ok: boolean): void {
    const g = this.groups[shard];
    if (g === undefined) return;
    g.raw.reportSnapshot(peer as NodeId, ok);
    this.schedule();
  }

  leaderOf(shard: number): string | null {
    const g = this.groups[shard];
    return g === undefined || g.leader === '' ? null : g.leader;
  }

  isLeader(shard: number): boolean {
    return this.groups[shard]?.role === 'leader';
  }

  /** True while this node fires the shard and holds its lease: the engine checks it before each send. */
  leaseValid(shard: number): boolean {
    const g = this.groups[shard]!;
    return this.catchUpTicks() && g.firing && g.raw.leaseValid();
  }

  // --- the Ready loop -----------------------------------------------------------------------------------

  /** True while a write failed on a full disk and has not succeeded since: proposals are refused (507). */
  diskFull(): boolean {
    return this.roundFull || this.applierFull;
  }

  schedule(): void {
    if (this.scheduled !== null || this.running !== null || this.failed || this.fullRetry !== null) return;
    this.scheduled = setImmediate(() => {
      this.scheduled = null;
      this.running = this.round().finally(() => {
        this.running = null;
        if (this.groups.some((g) => g.raw.hasReady())) this.schedule();
      });
    });
  }

  private async round(): Promise<void> {
    const batch: Array<[ShardGroup, Ready]> = this.stuck ?? [];
    this.stuck = null;
    if (batch.length === 0) for (const g of this.groups) if (g.raw.hasReady()) batch.push([g, g.raw.ready()]);
    if (batch.length === 0) return;
    const inline = this.inlineApply(batch);
    const out: AppliedOut[] = [];
    const touched = new Set<ShardGroup>();
    try {
      this.persist(batch, inline ? { out, touched } : null);
    } catch (err) {
      if (!isDiskFullError(err)) return this.fail(err);
      // Rolled back: the storages' cached state and the applied indexes go back to what SQLite holds.
      for (const [g] of batch) this.rewind(g);
      this.stuck = batch;
      return this.diskFilled('round', err);
    }
    if (this.roundFull) this.spaceBack('round');
    for (const [g, rd] of batch) if (rd.softState !== null) this.onSoftState(g, rd.softState);
    if (inline) {
      this.deliver(out);
      for (const g of touched) {
        this.maybeStartFiring(g);
        this.serveReads(g);
      }
    }
    const later = this.sendEarly(batch);
    if (this.o.walSync !== null && batch.some(([, rd]) => rd.mustSync)) {
      try {
        await this.o.walSync.sync();
      } catch (err) {
        this.fail(err);
        return;
      }
    }
    if (later.length > 0) this.sender?.send(later);
    let confChange = false;
    for (const [g, rd] of inline ? [] : batch) {
      for (const e of rd.committedEntries) {
        this.applyQueue.push({ g, e });
        if (e.type === 'conf_change') confChange = true;
      }
    }
    this.startApplier();
    // Raft applies a conf change at advance: the host must have applied everything up to it first.
    if (confChange) await this.drainApplies();
    if (this.fatal) return;
    for (const [g, rd] of batch) {
      g.raw.advance();
      this.afterAdvance(g, rd);
    }
  }

  /**
   * Sends, before the WAL fsync, what needs nothing durable from this node: heartbeats and their answers, and a
   * leader's appends (etcd sends those in parallel with its own write: the leader counts its own copy only after
   * its fsync, and its term and vote were made durable when it campaigned). So a slow fsync delays neither the
   * leader's lease nor its replication. Returns the rest (votes, append answers: only after the fsync).
   */
  private sendEarly(batch: Array<[ShardGroup, Ready]>): Message[] {
    const early: Message[] = [];
    const later: Message[] = [];
    for (const [g, rd] of batch) {
      for (const m of rd.messages) {
        const now = m.type === 'heartbeat' || m.type === 'heartbeat_resp' || (m.type === 'append' && g.role === 'leader');
        (now ? early : later).push(m);
      }
    }
    if (early.length > 0) this.sender?.send(early);
    return later;
  }

  /** After a rolled-back transaction: the group's cached Raft storage and applied index as SQLite holds them. */
  private rewind(g: ShardGroup): void {
    g.storage.reload();
    g.applied = Math.max(this.appliedIndexes.of(g.shard), g.storage.firstIndex() - 1);
  }

  private diskFilled(which: 'round' | 'applier', err: unknown): void {
    const first = !this.diskFull();
    if (which === 'round') this.roundFull = true;
    else this.applierFull = true;
    if (first) {
      this.o.metrics.diskFull.set(1);
      this.o.logger.error('disk full: writes refused (507) until space is freed; nothing was acknowledged from the failed write, retrying', {
        code: (err as { code?: unknown }).code,
        err: (err as Error).message,
      });
    }
    if (this.fullRetry !== null || this.closed) return;
    this.fullRetry = setTimeout(() => {
      this.fullRetry = null;
      this.schedule();
      this.startApplier();
    }, quarantineLimits.diskFullRetryMs);
  }

  private spaceBack(which: 'round' | 'applier'): void {
    if (which === 'round') this.roundFull = false;
    else this.applierFull = false;
    if (this.diskFull()) return;
    this.o.metrics.diskFull.set(0);
    this.o.logger.warn('disk space available again: writes accepted', {});
  }

  private fail(err: unknown): void {
    if (this.fatal) return;
    this.fatal = true;
    this.failed = true;
    if (this.ticker !== null) clearInterval(this.ticker);
    this.o.logger.error('raft persistence failed', { err });
    this.o.onFatal(err);
  }

  /** Step 2: the log side of every Ready in one transaction (one fsync with --fsync always). */
  private persist(batch: Array<[ShardGroup, Ready]>, inline: { out: AppliedOut[]; touched: Set<ShardGroup> } | null): void {
    const startNs = process.hrtime.bigint();
    this.o.db.transaction(() => {
      for (const [g, rd] of batch) {
        if (rd.snapshot !== null) this.installRows(g, rd);
        g.storage.append(rd.entries);
        if (rd.hardState !== null) g.storage.setHardState(rd.hardState);
        if (inline === null || rd.committedEntries.length === 0) continue;
        for (const e of rd.committedEntries) this.applyEntry(g, e, inline.out);
        inline.touched.add(g);
        this.appliedIndexes.write(g.shard, g.applied);
      }
    })();
    const ms = Number(process.hrtime.bigint() - startNs) / 1e6;
    this.o.metrics.appendDurationMs.observe(ms);
    if (inline === null || inline.out.length === 0) return;
    this.o.metrics.commitDurationMs.observe(ms);
    this.o.metrics.commitBatchSize.observe(inline.out.length);
  }

  // --- the applier --------------------------------------------------------------------------------------

  /**
   * A round whose committed entries are few and small (and nothing waits in the applier's queue) applies them
   * in its own transaction, as before the applier existed: one commit per round is what a light, steady load
   * needs (every extra COMMIT costs WAL pages). Anything larger goes to the applier, in slices.
   */
  private inlineApply(batch: Array<[ShardGroup, Ready]>): boolean {
    if (this.applying !== null || this.applyHead < this.applyQueue.length) return false;
    let entries = 0;
    let bytes = 0;
    for (const [, rd] of batch) {
      for (const e of rd.committedEntries) {
        if (e.type === 'conf_change') return false;
        entries++;
        bytes += e.data.length;
      }
    }
    return entries <= stallLimits.applySliceEntriesMax && bytes <= stallLimits.inlineApplyBytesMax;
  }

  private startApplier(): void {
    if (this.applying !== null || this.fatal || this.fullRetry !== null || this.applyHead >= this.applyQueue.length) return;
    this.applying = this.runApplier().finally(() => {
      this.applying = null;
    });
  }

  /** Resolves once every queued entry is applied (or storage failed). */
  private async drainApplies(): Promise<void> {
    while (!this.fatal && this.applyHead < this.applyQueue.length) {
      // Closing on a full disk: what is left is committed in the Raft log and applied again at the next start.
      if (this.closed && this.applierFull) return;
      this.startApplier();
      if (this.applying !== null) await this.applying;
      else await new Promise<void>((resolve) => setTimeout(resolve, quarantineLimits.diskFullRetryMs));
    }
  }

  /** Applies the queue slice by slice, letting the event loop run between slices. */
  private async runApplier(): Promise<void> {
    while (!this.fatal && this.applyHead < this.applyQueue.length) {
      const out: AppliedOut[] = [];
      const touched = new Set<ShardGroup>();
      const head = this.applyHead;
      try {
        this.applySlice(out, touched);
      } catch (err) {
        if (!isDiskFullError(err)) return this.fail(err);
        // The slice rolled back: apply it again once space returns (nothing of it was delivered).
        this.applyHead = head;
        for (const g of this.groups) g.applied = Math.max(this.appliedIndexes.of(g.shard), g.storage.firstIndex() - 1);
        return this.diskFilled('applier', err);
      }
      if (this.applierFull) this.spaceBack('applier');
      this.deliver(out);
      for (const g of touched) this.afterApply(g);
      if (this.applyHead < this.applyQueue.length) await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }

  /** One transaction: queued entries until the slice's time or entry bound, with each touched applied_index. */
  private applySlice(out: AppliedOut[], touched: Set<ShardGroup>): void {
    const start = performance.now();
    this.o.db.transaction(() => {
      let n = 0;
      while (this.applyHead < this.applyQueue.length && n < stallLimits.applySliceEntriesMax) {
        const { g, e } = this.applyQueue[this.applyHead++]!;
        n++;
        if (e.index <= g.applied) continue;
        this.applyEntry(g, e, out);
        touched.add(g);
        if (performance.now() - start >= stallLimits.applySliceMs || this.o.fireDue?.() === true) break;
      }
      for (const g of touched) this.appliedIndexes.write(g.shard, g.applied);
    })();
    if (this.applyHead >= this.applyQueue.length) {
      this.applyQueue = [];
      this.applyHead = 0;
    } else if (this.applyHead > 4096) {
      this.applyQueue = this.applyQueue.slice(this.applyHead);
      this.applyHead = 0;
    }
    this.o.metrics.commitDurationMs.observe(performance.now() - start);
    this.o.metrics.commitBatchSize.observe(out.length);
  }

  /** After entries of `g` were applied: firing start, reads, compaction. */
  private afterApply(g: ShardGroup): void {
    this.maybeStartFiring(g);
    this.serveReads(g);
    if (g.appliedSinceCompact >= (this.o.compaction?.everyEntries ?? nodeLimits.logCompactEveryEntries)) this.chore('compaction', g, () => this.compact(g));
  }

  private maybeStartFiring(g: ShardGroup): void {
    const term = g.lead.caughtUp(g.applied);
    if (term !== null) this.o.onLeaderStart(g.shard, term);
  }

  private installRows(g: ShardGroup, rd: Ready): void {
    const snap = rd.snapshot!;
    g.storage.applySnapshot(snap);
    restoreShardImage(this.o.db, g.shard, snap.data);
    g.applied = snap.metadata.index;
    g.appliedSinceCompact = 0;
    this.appliedIndexes.write(g.shard, g.applied);
    this.o.metrics.snapshots.inc({ kind: 'installed' });
    this.o.logger.info('snapshot installed', { shard: g.shard, index: snap.metadata.index, bytes: snap.data.length });
    for (const [index, p] of g.proposals) {
      if (index > g.applied) continue;
      g.proposals.delete(index);
      p.reject(proposalFailed('snapshot_overtook', `shard ${g.shard}: proposal overtaken by a snapshot (it may have applied)`));
    }
  }

  /**
   * Applies one committed entry inside a savepoint. An entry whose command cannot be decoded or applied is
   * quarantined: its savepoint is rolled back (no effect at all) and it is recorded with its index, term and error.
   * Apply is deterministic, so every replica quarantines the same entry and the replicas stay identical. Storage
   * errors (I/O, corruption, a full disk) are not the command's fault: they propagate and fail the transaction.
   */
  private applyEntry(g: ShardGroup, e: Entry, out: AppliedOut[]): void {
    if (e.index <= g.applied) return;
    g.applied = e.index;
    g.appliedSinceCompact++;
    if (e.type !== 'normal' || e.data.length === 0) {
      out.push({ g, index: e.index, term: e.term, command: null, applied: null, error: null });
      return;
    }
    let command: Command;
    try {
      command = decodeCommand(e.data);
    } catch (err) {
      if (!(err instanceof CommandDecodeError)) throw err;
      out.push({ g, index: e.index, term: e.term, command: null, applied: null, error: err, quarantined: this.quarantine(g, e, null, err) });
      return;
    }
    let applied: Applied | null = null;
    try {
      this.o.db.transaction(() => {
        applied = apply(g.store, command, e.term);
      })();
    } catch (err) {
      if (isStorageError(err)) throw err;
      out.push({ g, index: e.index, term: e.term, command: null, applied: null, error: err, quarantined: this.quarantine(g, e, command.type, err) });
      return;
    }
    out.push({ g, index: e.index, term: e.term, command, applied, error: null });
  }

  /** Records the entry in raft_quarantine, inside the applying transaction. */
  private quarantine(g: ShardGroup, e: Entry, type: string | null, err: unknown): { entry: QuarantinedEntry; type: string | null } {
    const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    return { entry: this.quarantined.record(g.shard, e.index, e.term, message, e.data), type };
  }

  /** After the transaction that quarantined an entry committed: the metric and the error line. */
  private reportQuarantined(q: { entry: QuarantinedEntry; type: string | null }): void {
    const { entry, type } = q;
    this.o.metrics.entriesQuarantined.inc({ shard: String(entry.shard) });
    this.o.logger.error('log entry quarantined: its command could not be decoded or applied; skipped on every replica', {
      shard: entry.shard,
      index: entry.index,
      term: entry.term,
      type,
      digest: entry.digest,
      bytes: entry.bytes,
      err: entry.error,
    });
  }

  /** Step 3: effects to the engine, then answers (so a created job is armed before the API answers). */
  private deliver(out: AppliedOut[]): void {
    for (const a of out) {
      if (a.quarantined !== undefined) this.reportQuarantined(a.quarantined);
      if (a.command !== null) {
        try {
          this.o.onApplied(a.g.shard, a.command, a.applied?.effects ?? []);
        } catch (err) {
          this.o.logger.error('effect handling failed', { shard: a.g.shard, type: a.command.type, err });
        }
      }
      const p = a.g.proposals.get(a.index);
      if (p === undefined) continue;
      a.g.proposals.delete(a.index);
      // Another term's entry committed at the proposal's index: the proposal can never commit (log matching).
      if (p.term !== a.term) p.reject(proposalFailed('proposal_lost', `shard ${a.g.shard}: leadership changed, proposal lost`));
      else if (a.applied !== null) p.resolve(a.applied);
      else p.reject(new PunctualError('internal', `shard ${a.g.shard}: the command of entry ${a.index} could not be applied; it was quarantined`));
    }
  }

  private onSoftState(g: ShardGroup, soft: SoftState): void {
    const wasLeader = g.role === 'leader';
    if (g.lead.softState(soft.role, soft.leader, g.raw.status())) this.o.onLeaderStop(g.shard);
    if (!wasLeader && soft.role === 'leader') this.o.logger.info('leading shard', { shard: g.shard, term: g.leaderTerm });
    if (soft.role !== 'leader') {
      for (const r of g.reads.splice(0)) r.reject(notLeader(g.shard));
    }
  }

  private stopFiring(g: ShardGroup): void {
    if (g.lead.stop()) this.o.onLeaderStop(g.shard);
  }

  /** Step 5 follow-ups: term change while leading, firing start, reads, compaction, requested snapshots. */
  private afterAdvance(g: ShardGroup, rd: Ready): void {
    // Deposed and re-elected between two rounds: same soft state, new term (new fencing token).
    if (rd.hardState !== null && g.lead.hardTerm(rd.hardState.term, g.raw.status())) this.o.onLeaderStop(g.shard);
    this.maybeStartFiring(g);
    for (const rs of rd.readStates) {
      const r = g.reads.find((x) => x.ctx === rs.ctx);
      if (r !== undefined) r.index = rs.index;
    }
    this.serveReads(g);
    if (rd.snapshot !== null) for (const done of g.snapshotInstalls.splice(0)) done();
    if (rd.snapshotRequested) this.chore('snapshot', g, () => this.createSnapshot(g));
    if (rd.snapshot !== null || rd.committedEntries.some((e) => e.type === 'conf_change')) this.o.onConfChange?.(g.shard, g.raw.confState());
    if (g.appliedSinceCompact >= (this.o.compaction?.everyEntries ?? nodeLimits.logCompactEveryEntries)) this.chore('compaction', g, () => this.compact(g));
  }

  private serveReads(g: ShardGroup): void {
    if (g.reads.length === 0) return;
    const keep = g.reads.filter((r) => {
      if (r.index < 0 || g.applied < r.index) return true;
      r.resolve();
      return false;
    });
    g.reads.length = 0;
    g.reads.push(...keep);
  }

  /** Compaction and snapshots are chores: on a full disk they wait for their next turn (Raft asks again). */
  private chore(what: string, g: ShardGroup, run: () => void): void {
    try {
      run();
    } catch (err) {
      if (!isDiskFullError(err)) throw err;
      this.o.logger.warn(`${what} deferred: disk full`, { shard: g.shard });
    }
  }

  /** A follower needs a snapshot: a consistent copy of the shard's rows at the applied index. */
  private createSnapshot(g: ShardGroup): void {
    if (g.applied <= g.storage.snapshotIndex() && g.storage.snapshot() !== null) return;
    const data = encodeShardImage(this.o.db, g.shard);
    g.storage.createSnapshot(g.applied as LogIndex, g.raw.confState(), data);
    this.o.metrics.snapshots.inc({ kind: 'created' });
    this.o.logger.info('snapshot created', { shard: g.shard, index: g.applied, bytes: data.length });
  }

  /**
   * Keeps nodeLimits.logKeepEntries below the applied index. The snapshot recorded for it is a marker (no data):
   * copying the shard's rows happens only when a follower actually needs them.
   */
  private compact(g: ShardGroup): void {
    g.appliedSinceCompact = 0;
    const upTo = g.applied - (this.o.compaction?.keepEntries ?? nodeLimits.logKeepEntries);
    if (upTo < g.storage.firstIndex()) return;
    if (g.storage.snapshotIndex() < upTo) g.storage.createSnapshot(g.applied as LogIndex, g.raw.confState(), new Uint8Array(0));
    g.storage.compact(upTo as LogIndex);
  }

  private expireWaiters(): void {
    const nowMs = this.o.clock.nowMs();
    for (const g of this.groups) {
      for (const [index, p] of g.proposals) {
        if (p.deadlineMs > nowMs) continue;
        g.proposals.delete(index);
        p.reject(proposalFailed('proposal_timeout', `shard ${g.shard}: proposal not applied within ${clusterLimits.proposalTimeoutMs} ms (it may still apply)`));
      }
      const late = g.reads.filter((r) => r.deadlineMs <= nowMs);
      if (late.length === 0) continue;
      for (const r of late) r.reject(proposalFailed('read_timeout', `shard ${g.shard}: read not confirmed in time`));
      const keep = g.reads.filter((r) => r.deadlineMs > nowMs);
      g.reads.length = 0;
      g.reads.push(...keep);
    }
  }

  /** Leaders stop streaming appends optimistically to peers the transport cannot reach (probe instead). */
  private reportUnreachable(): void {
    const sender = this.sender;
    if (sender === null) return;
    for (const g of this.groups) {
      if (g.role !== 'leader') continue;
      const c = g.raw.confState();
      for (const id of [...c.voters, ...c.learners]) if (id !== this.o.nodeId && !sender.reachable(id)) g.raw.reportUnreachable(id);
    }
  }

  /** Committed entries waiting for the applier (the proposer refuses client writes above stallLimits.applyQueueEntriesMax). */
  applyBacklog(): number {
    return this.applyQueue.length - this.applyHead;
  }

  /** True when no proposal of any group waits for its entry. */
  idle(): boolean {
    return this.groups.every((g) => g.proposals.size === 0);
  }

  /** Stops ticking, lets the running round finish, and fails whatever still waits. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.ticker !== null) clearInterval(this.ticker);
    this.ticker = null;
    if (this.catchUp !== null) clearImmediate(this.catchUp);
    this.catchUp = null;
    if (this.scheduled !== null) clearImmediate(this.scheduled);
    this.scheduled = null;
    if (this.fullRetry !== null) clearTimeout(this.fullRetry);
    this.fullRetry = null;
    if (this.running !== null) await this.running;
    this.failed = true; // no new round
    await this.drainApplies();
    for (const g of this.groups) {
      for (const p of g.proposals.values()) p.reject(proposalFailed('interrupted', 'node is shutting down (the write may have applied)'));
      g.proposals.clear();
      for (const r of g.reads.splice(0)) r.reject(proposalFailed('shutting_down', 'node is shutting down'));
      if (g.firing) this.stopFiring(g);
    }
  }

  /** Runs rounds until every group is idle or `ms` passed (close, tests). */
  async settle(ms: number): Promise<void> {
    const until = Date.now() + ms;
    while (Date.now() < until && !this.failed) {
      if (this.running !== null) await this.running;
      if (!this.groups.some((g) => g.raw.hasReady()) && this.idle() && this.applyHead >= this.applyQueue.length) return;
      this.schedule();
      await new Promise<void>((r) => setTimeout(r, 1));
    }
  }
}
