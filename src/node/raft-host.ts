/**
 * RaftHost: the IO around the node's replication layer (src/nodecore/replication.ts `Replication`: every shard's
 * RawNode, when to fire, the waiters, the conversion of monotonic time to ticks, and what each round asks). This
 * file decides nothing about Raft; it carries out what Replication says:
 *  1. take the round (every shard with a Ready at once);
 *  2. ONE transaction of the log's file (raft-log.db): append entries, write hard states, install snapshots (their
 *     rows go into the state batch, which commits once the round's fsync answered);
 *  3. send the early messages (heartbeats, a leader's appends), fsync per --fsync (batch: the WAL on the thread
 *     pool; always: inside the commit; off: none), send the rest; an `inline` round (few and small committed
 *     entries) applies them into the state batch, before the fsync when every one of them is already durable in
 *     the log (ShardGroup.synced), else after it;
 *  4. hand the other committed entries to the applier (a conf change: wait until it applied them), advance; then
 *     carry out the events: answers, compaction (never past the state's durable applied index) and requested
 *     snapshots.
 * The applier applies queued entries in log order in transactions of at most stallLimits.applySliceMs /
 * applySliceEntriesMax (src/scheduler apply, each entry in a savepoint of the state batch; applied_index once per batch),
 * yielding to the event loop between slices: a large batch of creates or a hot instant's fired records never
 * holds timers, the firing engine, Raft ticks or heartbeat answers for more than one slice (a start's catch-up,
 * until the node is ready, has longer slices: catchingUpAtStart). After each slice it
 * hands each applied entry to the node (src/nodecore/node.ts `Node`: its command reaches NodeCore, then its
 * proposer is answered; committed entries are durable on a quorum already: the leader counts its own copy only
 * after its fsync). Rounds go on while the applier works, so Raft traffic never waits for applies.
 * The node's events that concern firing (leadership start and stop, the answers to NodeCore's proposals) reach
 * NodeCore inside the Node; this host carries out the rest, then asks the shell (src/node/shell.ts), which it
 * builds at construction, to carry out what the core decided.
 * A round runs on setImmediate after any tick, step or proposal (the shell asks for one, `schedule`, once
 * NodeCore's proposals went into the logs); a new round never starts before the previous one advanced. Ticks: one interval for all groups (clusterLimits.tickMs), counted on performance.now.
 *
 * A single node without --peers is the same thing with one voter per group: it campaigns at once and leads
 * every shard after its first round.
 */
import { PunctualError } from '../core/errors.js';
import { clusterLimits, quarantineLimits, stallLimits } from '../core/limits.js';
import type { Logger } from '../core/log.js';
import type { NodeMetrics } from '../metrics/metrics.js';
import type { ConfChange, ConfState, Entry, LogIndex, Message, NodeId, Snapshot } from '../raft/index.js';
import { CommandDecodeError, decodeCommand } from '../scheduler/codec.js';
import { apply } from '../scheduler/machine.js';
import type { Command } from '../scheduler/commands.js';
import { isDiskFullError, isStorageError, type Db, type FsyncMode, type NodeDbs } from '../store/db.js';
import { QuarantineTable, type QuarantinedEntry } from '../store/quarantine.js';
import { bootstrapGroup, SqliteRaftStorage } from '../store/raft-storage.js';
import { AppliedIndexes, encodeShardImage, restoreShardImage } from '../store/shard-snapshot.js';
import { SqliteShardStore } from '../store/shard-store.js';
import { StateBatch } from '../store/state-batch.js';
import type { WalSyncer } from '../store/wal-sync.js';
import { nodeLimits } from '../core/limits.js';
import { ShardGroup, type Waiter } from './group.js';
import { replayCommitted } from './replay.js';
import type { NodeShell, RoundLoop } from './shell.js';
import { diskFull, notLeader, proposalFailed, type Applied, type Node, type ReadAnswer, type ReplicaEvent, type ReplicaRound, type Replication } from '../nodecore/index.js';

export { diskFull, notLeader };

/** The part of PeerTransport the host uses (null for a single node). */
export interface MessageSender {
  send(messages: readonly Message[]): void;
  /** Connected to the peer and heard from it recently. */
  reachable(peerId: string): boolean;
}

/** Every shard's Raft log in SQLite and what its rows hold as applied: what the node's Replication is built with. */
export interface ShardLogs {
  storages: SqliteRaftStorage[];
  /** The state machine's store of each shard (one instance per shard: the applier writes it, NodeCore reads it). */
  stores: SqliteShardStore[];
  applied: number[];
  /** The committed entries applied at open (replay.ts), before Raft runs, and how long that took. */
  replay: { entries: number; ms: number };
}

/**
 * Opens the Raft log of every shard (bootstrapped with `voters` when a group has no Raft state; empty for a node
 * that joins a running cluster: its groups wait for a snapshot from their leaders), and applies the committed
 * entries the state file is missing (replay.ts).
 */
export function openShardLogs(dbs: NodeDbs, shards: number, voters: readonly string[], fsync: FsyncMode): ShardLogs {
  const appliedIndexes = new AppliedIndexes(dbs.state);
  const storages: SqliteRaftStorage[] = [];
  for (let shard = 0; shard < shards; shard++) {
    if (voters.length > 0) bootstrapGroup(dbs.log, shard, [...voters].sort() as NodeId[]);
    const storage = new SqliteRaftStorage(dbs.log, shard, { markerSnapshots: true });
    restoreFromLog(dbs.state, appliedIndexes, shard, storage);
    commitThroughApplied(storage, storedApplied(appliedIndexes, shard, storage));
    storages.push(storage);
  }
  const replay = storages.map((storage, shard) => ({ storage, store: new SqliteShardStore(dbs.state, shard), applied: storedApplied(appliedIndexes, shard, storage) }));
  const start = performance.now();
  const entries = replayCommitted(dbs.state, appliedIndexes, replay, { file: dbs.log.name, fsync });
  const ms = Math.round(performance.now() - start);
  return { storages, stores: replay.map((r) => r.store), applied: replay.map((r) => r.applied), replay: { entries, ms } };
}

/**
 * Raft persists a hard state whose only change is the commit index without an fsync (etcd's MustSync), and the host
 * writes it only with the next write of the log (RaftHost.persist), so after a crash the state file may hold
 * entries applied past the log's durable commit index. They were applied only
 * once committed, and only once their append was on stable storage: the commit index is raised to them.
 */
function commitThroughApplied(storage: SqliteRaftStorage, applied: number): void {
  const hs = storage.initialState().hardState;
  if (applied <= hs.commit) return;
  if (applied > storage.lastIndex()) {
    throw new Error(`shard ${storage.group}: the state file holds entries through ${applied}, past the log's last entry ${storage.lastIndex()}: the two files do not belong together`);
  }
  try {
    storage.setHardState({ ...hs, commit: applied as LogIndex });
  } catch (err) {
    // A full disk must not stop the start (the node waits, alive, for space): the raise is kept in memory.
    if (!isDiskFullError(err)) throw err;
    storage.raiseCommitInMemory(applied as LogIndex);
  }
}

/**
 * The two files are committed apart: a crash right after a follower installed a snapshot into its log, before the
 * state batch that restored the rows committed, leaves the state behind the log's first entry. The log still holds
 * the snapshot's rows (an installed snapshot keeps its data): restored here. (A compaction marker carries no rows,
 * but compaction never passes the state's durable applied index, so the state is never behind one.)
 */
function restoreFromLog(state: Db, indexes: AppliedIndexes, shard: number, storage: SqliteRaftStorage): void {
  const base = storage.firstIndex() - 1;
  if (base <= 1 || indexes.of(shard) >= base) return;
  const data = storage.snapshotData();
  state.transaction(() => {
    restoreShardImage(state, shard, data);
    indexes.write(shard, base);
  })();
}

/** What SQLite holds as applied for the shard (its rows are at least its snapshot's). */
function storedApplied(indexes: AppliedIndexes, shard: number, storage: SqliteRaftStorage): number {
  return Math.max(indexes.of(shard), storage.firstIndex() - 1);
}

export interface RaftHostOptions {
  nodeId: string;
  /** The state file (the scheduler's rows, written in batches). */
  db: Db;
  /** The Raft log's file (every round commits here). */
  logDb: Db;
  /** The node's pure side; its Replication was built over `logs`. */
  node: Node;
  logs: ShardLogs;
  /** Builds the shell of the node's NodeCore, which this host wakes (`pump`) and which wakes this host's rounds. */
  shell(rounds: RoundLoop): NodeShell;
  fsync: FsyncMode;
  /** fsyncs the log's WAL after each round (--fsync batch). */
  walSync: WalSyncer | null;
  /** fsyncs the state file's WAL after each batch commit (--fsync batch). */
  stateSync: WalSyncer | null;
  /** The state batch's bounds (tests); nodeLimits' by default. */
  stateBatch?: { intervalMs: number; entriesMax: number };
  logger: Logger;
  metrics: NodeMetrics;
  onFatal(err: unknown): void;
  /** The membership of `shard` changed on this node (a conf change applied, or a snapshot installed). */
  onConfChange?(shard: number, conf: ConfState): void;
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

export class RaftHost implements RoundLoop {
  readonly groups: ShardGroup[] = [];
  /** The decisions (pure): this file carries them out. */
  readonly replication: Replication;
  /** The shell of the node's NodeCore: carries out what the core decided once the node's events reached it. */
  readonly shell: NodeShell;
  private sender: MessageSender | null = null;
  private readonly appliedIndexes: AppliedIndexes;
  /** Entries this node could not decode or apply (raft_quarantine). */
  readonly quarantined: QuarantineTable;
  /** Who waits for a ticket of the replication layer (proposals, reads, snapshot installs). */
  private readonly proposers = new Map<number, Waiter>();
  private readonly readers = new Map<number, { resolve(): void; reject(err: unknown): void }>();
  private readonly installs = new Map<number, () => void>();
  private scheduled: NodeJS.Immediate | null = null;
  private running: Promise<void> | null = null;
  /** From the start of a round's turn until it ended (`running` is set only once its synchronous part ran). */
  private inRound = false;
  private ticker: NodeJS.Timeout | null = null;
  /** Ticks missed by a stall, counted after the poll phase (a `catch_up` event). */
  private catchUp: NodeJS.Immediate | null = null;
  private closed = false;
  private failed = false;
  /** A storage error: nothing more is written. */
  private fatal = false;
  private applying: Promise<void> | null = null;
  /**
   * A full disk (SQLITE_FULL): the round whose transaction failed, kept as it is and persisted again later. Its
   * transaction rolled back, so Raft was not advanced and nothing of it was sent or acknowledged: a follower does
   * not answer an append it could not write, a leader does not count its own copy. Proposals are refused (507)
   * while the round or the applier is stuck; both retry every quarantineLimits.diskFullRetryMs until a write
   * succeeds, then the node goes on by itself.
   */
  private stuck: ReplicaRound | null = null;
  private roundFull = false;
  private applierFull = false;
  /** The state batch's commit failed on a full disk and is retried by the batch itself. */
  private stateFull = false;
  private fullRetry: NodeJS.Timeout | null = null;
  /**
   * Runs fn in a transaction, or in a savepoint inside one. Made once: better-sqlite3 builds a new wrapper for
   * every `db.transaction(fn)`, which cost more than the savepoint itself for every entry applied.
   */
  private readonly inTransaction: <T>(fn: () => T) => T;
  /** The same for the log's file: a round's writes in one transaction. */
  private readonly inLogTransaction: <T>(fn: () => T) => T;
  /** The state file's write batch: applies go into it, it commits every stateBatchIntervalMs. */
  readonly batch: StateBatch;
  /** While above zero (a backup copies the files), no log is compacted. */
  private compactionHolds = 0;
  /** Until the node answered ready (catchingUpAtStart). */
  private starting = true;

  constructor(private readonly o: RaftHostOptions) {
    this.inTransaction = o.db.transaction((fn: () => unknown) => fn()) as <T>(fn: () => T) => T;
    this.inLogTransaction = o.logDb.transaction((fn: () => unknown) => fn()) as <T>(fn: () => T) => T;
    // The instance the state batch flushes before each COMMIT.
    this.appliedIndexes = AppliedIndexes.of(o.db);
    this.quarantined = new QuarantineTable(o.db);
    this.replication = o.node.replication;
    o.logs.storages.forEach((storage, shard) => {
      this.groups.push(new ShardGroup(shard, o.logs.stores[shard]!, storage, this.replication.shards[shard]!));
    });
    this.shell = o.shell(this);
    const stateSync = o.stateSync;
    this.batch = new StateBatch(o.db, {
      intervalMs: o.stateBatch?.intervalMs ?? nodeLimits.stateBatchIntervalMs,
      entriesMax: o.stateBatch?.entriesMax ?? nodeLimits.stateBatchEntriesMax,
      retryMs: quarantineLimits.diskFullRetryMs,
      sync: stateSync === null ? null : () => stateSync.sync(),
      applied: () => this.groups.map((g) => g.applied),
      onFatal: (err) => this.fail(err),
      onFull: (err, lost) => this.batchFull(err, lost),
      onSpace: () => this.spaceBack('batch'),
      onCommit: (ms, entries) => {
        this.o.metrics.commitDurationMs.observe(ms);
        this.o.metrics.commitBatchSize.observe(entries);
      },
    });
    for (const q of this.quarantined.list()) {
      o.logger.error('log entry quarantined earlier (its effects were skipped on every replica)', {
        shard: q.shard, index: q.index, term: q.term, digest: q.digest, err: q.error,
      });
    }
  }

  /** What SQLite holds as applied for the shard (its rows are at least its snapshot's). */
  private storedApplied(shard: number, storage: SqliteRaftStorage): number {
    return storedApplied(this.appliedIndexes, shard, storage);
  }

  /** The transport reaches `peer` (the node's Replication asks; true before any transport is set). */
  reachable(peer: string): boolean {
    return this.sender === null || this.sender.reachable(peer);
  }

  /** The peer transport opened after start (a single node that grows into a cluster). */
  setSender(sender: MessageSender): void {
    this.sender = sender;
    this.schedule();
  }

  /** Starts ticking; a group whose only voter is this node campaigns at once (no election timeout). */
  start(sender: MessageSender | null): void {
    this.sender = sender;
    this.replication.start(performance.now());
    this.ticker = setInterval(() => {
      this.flushHardStates();
      this.replication.tick(performance.now());
      this.carryOut();
      this.schedule();
    }, clusterLimits.tickMs);
    this.schedule();
  }

  // --- events -------------------------------------------------------------------------------------------

  /**
   * Carries out what the replication layer decided since the last call, in order (the node fed NodeCore its part
   * inside take()), then what the core decided on it.
   */
  private carryOut(): void {
    for (const ev of this.o.node.take()) this.handle(ev);
    this.shell.pump();
  }

  /** The events the node leaves to its host (leadership start and stop went to NodeCore inside the node). */
  private handle(ev: ReplicaEvent): void {
    switch (ev.kind) {
      case 'leading':
        return this.o.logger.info('leading shard', { shard: ev.shard, term: ev.term });
      case 'proposal': {
        const w = this.proposers.get(ev.ticket);
        if (w === undefined) return;
        this.proposers.delete(ev.ticket);
        return ev.ok ? w.resolve(ev.applied) : w.reject(ev.error);
      }
      case 'read': {
        const r = this.readers.get(ev.ticket);
        if (r === undefined) return;
        this.readers.delete(ev.ticket);
        return ev.error === null ? r.resolve() : r.reject(ev.error);
      }
      case 'snapshot_installed': {
        const done = this.installs.get(ev.ticket);
        this.installs.delete(ev.ticket);
        return done?.();
      }
      case 'snapshot': {
        const g = this.groups[ev.shard]!;
        return this.chore('snapshot', g, () => this.createSnapshot(g));
      }
      case 'compact': {
        const g = this.groups[ev.shard]!;
        return this.chore('compaction', g, () => this.compact(g, ev.upTo));
      }
      case 'conf_change':
        return this.o.onConfChange?.(ev.shard, ev.conf);
      case 'catch_up':
        // The messages that arrived during the stall are still in the sockets: count the missed ticks only after
        // the poll phase has stepped them (setImmediate runs after it). Two immediates: the second runs after one
        // full poll phase even when the stall was itself in a poll callback.
        if (this.catchUp !== null || this.closed) return;
        this.catchUp = setImmediate(() => {
          this.catchUp = setImmediate(() => {
            this.catchUp = null;
            this.replication.catchUp(performance.now());
            this.carryOut();
            this.schedule();
          });
        });
        return;
    }
  }

  // --- input ------------------------------------------------------------------------------------------

  /** Messages from a peer (any groups). Never throws: a bad message is logged and dropped. */
  step(messages: readonly Message[]): void {
    for (const { message: m, err } of this.replication.step(messages)) {
      this.o.logger.warn('raft message dropped', { group: m.group, type: m.type, from: m.from, err });
    }
    this.schedule();
  }

  /** A whole snapshot from the leader: resolves once the round that installs it is persisted. */
  installSnapshot(message: Message): Promise<void> {
    const g = this.groups[message.group];
    if (g === undefined || message.type !== 'snapshot') return Promise.reject(new Error('not a snapshot of a known group'));
    return new Promise<void>((resolve) => {
      const ticket = this.replication.installSnapshot(message);
      this.schedule();
      // Raft ignores a snapshot at or behind what this node holds: no round will install it, so answer now.
      if (ticket === null) resolve();
      else this.installs.set(ticket, resolve);
    });
  }

  /** Appends `data` to the shard's log if this node leads it; the waiter hears once it is applied (or lost). */
  propose(shard: number, data: Uint8Array, waiter: Waiter): void {
    if (this.closed) return waiter.reject(proposalFailed('shutting_down', 'node is shutting down'));
    if (this.diskFull()) return waiter.reject(diskFull());
    const r = this.replication.propose(shard, data, performance.now());
    if (!r.ok) return waiter.reject(r.error);
    this.proposers.set(r.ticket, waiter);
    this.o.metrics.proposals.inc({ shard: String(shard) });
    this.schedule();
  }

  /**
   * Appends a membership change to the shard's log if this node leads it (one at a time per group). It took
   * effect once the group's confState shows it; the caller watches that. Refusals are PunctualErrors.
   */
  proposeConfChange(shard: number, change: ConfChange): { index: number; term: number } {
    if (this.closed) throw new PunctualError('unavailable', 'node is shutting down');
    if (this.diskFull()) throw diskFull();
    const r = this.replication.proposeConfChange(shard, change);
    this.schedule();
    return r;
  }

  /**
   * Resolves when a linearizable read of the shard may be served from this node's store: at once while the
   * leader's lease holds (and it applied its own term's no-op), else after a ReadIndex round.
   */
  readBarrier(shard: number): Promise<void> {
    return this.read(this.replication.readBarrier(shard, performance.now()));
  }

  /**
   * readBarrier on a leader; on a follower, Raft's ReadIndex forwarded to the leader: resolves once this node has
   * applied everything the leader had committed when it answered (a backup of a follower holds every acknowledged
   * write). Rejected when no leader is known, on a leader change, or after clusterLimits.readIndexTimeoutMs.
   */
  appliedBarrier(shard: number): Promise<void> {
    return this.read(this.replication.readBarrier(shard, performance.now(), true));
  }

  private read(a: ReadAnswer): Promise<void> {
    this.carryOut();
    this.schedule();
    if (a.kind === 'now') return Promise.resolve();
    if (a.kind === 'refused') return Promise.reject(a.error);
    return new Promise<void>((resolve, reject) => this.readers.set(a.ticket, { resolve, reject }));
  }

  /** The transport's outcome of a snapshot stream to `peer`. */
  reportSnapshot(shard: number, peer: string, ok: boolean): void {
    this.replication.reportSnapshot(shard, peer, ok);
    this.schedule();
  }

  leaderOf(shard: number): string | null {
    const g = this.groups[shard];
    return g === undefined || g.leader === '' ? null : g.leader;
  }

  isLeader(shard: number): boolean {
    return this.groups[shard]?.role === 'leader';
  }

  /** True while this node fires the shard and holds its lease (NodeCore asks the same of the node before each send). */
  leaseValid(shard: number): boolean {
    const valid = this.o.node.leaseValid(shard);
    this.carryOut();
    if (this.replication.hasReady()) this.schedule();
    return valid;
  }

  // --- the Ready loop -----------------------------------------------------------------------------------

  /** True while a write failed on a full disk and has not succeeded since: proposals are refused (507). */
  diskFull(): boolean {
    return this.roundFull || this.applierFull || this.stateFull;
  }

  schedule(): void {
    if (this.scheduled !== null || this.inRound || this.failed || this.fullRetry !== null) return;
    this.scheduled = setImmediate(() => {
      this.scheduled = null;
      // Set before anything of the round runs: what it carries out wakes this loop again only once it is over.
      this.inRound = true;
      // Events the node left outside a round (a lease check that found missed ticks) first.
      this.carryOut();
      this.running = this.round().finally(() => {
        this.running = null;
        this.inRound = false;
        if (this.o.node.hostWork()) this.schedule();
      });
    });
  }

  private async round(): Promise<void> {
    const rd = this.stuck ?? this.replication.ready();
    this.stuck = null;
    if (rd === null) return;
    let lastIndexes: number[];
    try {
      lastIndexes = this.persist(rd);
    } catch (err) {
      if (!isDiskFullError(err)) return this.fail(err);
      // Rolled back: the storages' cached state goes back to what SQLite holds (nothing was applied).
      for (const { shard } of rd.shards) this.rewind(this.groups[shard]!);
      this.stuck = rd;
      this.carryOut();
      return this.diskFilled('round', err);
    }
    if (this.roundFull) this.spaceBack('round');
    // A follower's installed snapshot: its rows into the state batch, which commits once the log's fsync answered
    // (never durable before the log holds the snapshot; openShardLogs repairs a crash between the two from the
    // log's copy of the snapshot).
    let unblock: (() => void) | null = null;
    if (rd.shards.some(({ ready }) => ready.snapshot !== null)) {
      unblock = this.batch.block();
      try {
        this.batch.begin();
        this.inTransaction(() => {
          for (const { shard, ready } of rd.shards) if (ready.snapshot !== null) this.installRows(this.groups[shard]!, ready.snapshot);
        });
      } catch (err) {
        // The log already holds the snapshot: a restart restores the rows from it.
        unblock();
        return this.fail(err);
      }
    }
    const { early, late } = this.replication.persisted(rd);
    this.carryOut();
    // Entries whose append may not be on stable storage yet wait for this round's fsync (the state batch may
    // commit before the log's next fsync).
    const syncFirst = rd.inline && this.o.walSync !== null && rd.shards.some(({ shard, ready }) => (ready.committedEntries.at(-1)?.index ?? 0) > this.groups[shard]!.synced);
    if (rd.inline && !syncFirst) this.applyInline(rd);
    if (early.length > 0) this.sendOut(early);
    if (this.o.walSync !== null && rd.mustSync) {
      try {
        await this.o.walSync.sync();
      } catch (err) {
        this.fail(err);
        return;
      }
    }
    for (const { shard } of rd.shards) this.groups[shard]!.synced = Math.max(this.groups[shard]!.synced, lastIndexes[shard]!);
    // The snapshot's rows commit now (a full disk leaves them to the batch's retries, written again from the log).
    if (unblock !== null) {
      unblock();
      this.batch.commit();
    }
    if (syncFirst) this.applyInline(rd);
    if (late.length > 0) this.sendOut(late);
    this.replication.sent(rd);
    this.startApplier();
    // Raft applies a conf change at advance: the host must have applied everything up to it first.
    if (rd.confChange) await this.drainApplies();
    if (this.fatal) return;
    this.replication.advance(rd);
    this.carryOut();
  }

  /** After a rolled-back transaction: the group's cached Raft storage and applied index as SQLite holds them. */
  private rewind(g: ShardGroup): void {
    g.storage.reload();
    this.replication.rewind(g.shard, this.storedApplied(g.shard, g.storage));
  }

  /**
   * The state batch's commit failed on a full disk. Rolled back (`lost`), the state file is behind what the node
   * applied and answered: every shard's entries since the file's applied index are applied again from the log
   * into a new batch, silently (NodeCore and the proposers heard them already; apply is deterministic), and the
   * batch's retries commit it once space returns.
   */
  private batchFull(err: unknown, lost: boolean): void {
    if (lost) {
      try {
        this.rewriteFromLog();
      } catch (e) {
        return this.fail(e);
      }
    }
    this.diskFilled('batch', err);
  }

  private rewriteFromLog(): void {
    this.batch.begin();
    this.inTransaction(() => {
      for (const g of this.groups) {
        let from = this.appliedIndexes.of(g.shard);
        const to = g.applied;
        if (to <= from) continue;
        // A snapshot installed in the lost batch: its rows again, from the log's copy.
        if (from < g.storage.firstIndex() - 1) {
          restoreShardImage(this.o.db, g.shard, g.storage.snapshotData());
          from = g.storage.firstIndex() - 1;
        }
        for (let lo = from + 1; lo <= to; ) {
          const entries = g.storage.entries(lo as LogIndex, (to + 1) as LogIndex, 16 * 1024 * 1024);
          // Silently: the entries' effects and answers were delivered when they first applied.
          for (const e of entries) this.applyCommand(g, e);
          lo += entries.length;
        }
        this.appliedIndexes.write(g.shard, to);
      }
    });
  }

  private diskFilled(which: 'round' | 'applier' | 'batch', err: unknown): void {
    const first = !this.diskFull();
    if (which === 'round') this.roundFull = true;
    else if (which === 'batch') this.stateFull = true;
    else this.applierFull = true;
    this.o.node.setStorageFull(true);
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

  private spaceBack(which: 'round' | 'applier' | 'batch'): void {
    if (which === 'round') this.roundFull = false;
    else if (which === 'batch') this.stateFull = false;
    else this.applierFull = false;
    if (this.diskFull()) return;
    this.o.node.setStorageFull(false);
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

  /**
   * A transfer's `timeout_now` waits until the shell fenced the shard's firing thread (its lease void there): the
   * target may lead a few ms after it, sooner than the thread would stop trusting the lease on its own.
   */
  private sendOut(messages: Message[]): void {
    if (this.sender === null) return;
    // Every round sends: the common case looks once and allocates nothing.
    if (!messages.some((m) => m.type === 'timeout_now')) return this.sender.send(messages);
    this.sender.send(messages.filter((m) => m.type !== 'timeout_now'));
    const held = messages.filter((m) => m.type === 'timeout_now');
    void this.shell.fence(new Set(held.map((m) => m.group))).then(() => this.sender?.send(held));
  }

  /**
   * Step 2: the log side of the round in one transaction of the log's file (one fsync with --fsync always).
   * Answers each shard's last log index after it (by shard; the others' entries are undefined).
   */
  private persist(rd: ReplicaRound): number[] {
    const last: number[] = [];
    for (const { shard, ready } of rd.shards) {
      const g = this.groups[shard]!;
      if (ready.hardState !== null) g.pendingHard = ready.hardState;
      last[shard] = g.storage.lastIndex();
    }
    // Nothing to make durable (no entries, snapshot, term or vote): a new commit index waits for the next write.
    if (!rd.mustSync) return last;
    const startNs = process.hrtime.bigint();
    this.inLogTransaction(() => {
      for (const { shard, ready } of rd.shards) {
        const g = this.groups[shard]!;
        if (ready.snapshot !== null) g.storage.applySnapshot(ready.snapshot);
        // What this round rewrites is not on stable storage until its fsync, whatever was there before.
        if (ready.entries.length > 0) g.synced = Math.min(g.synced, ready.entries[0]!.index - 1);
        if (ready.snapshot !== null) g.synced = Math.min(g.synced, ready.snapshot.metadata.index);
        g.storage.append(ready.entries);
        last[shard] = g.storage.lastIndex();
      }
      this.writeHardStates();
    });
    this.wroteHardStates();
    this.o.metrics.appendDurationMs.observe(Number(process.hrtime.bigint() - startNs) / 1e6);
    return last;
  }

  /**
   * Inside a transaction of the log: every group's hard state not written yet. A hard state whose only change is
   * the commit index waits for the next write of the log instead of a transaction of its own (Raft's commit
   * index is volatile state; etcd writes it without an fsync): a crash may leave the log's commit index behind the
   * entries committed, which Raft commits again after the restart (openShardLogs raises it to what the state file
   * applied). The ticker writes what waits longer than a tick.
   */
  private writeHardStates(): void {
    for (const g of this.groups) if (g.pendingHard !== null) g.storage.setHardState(g.pendingHard);
  }

  /** The transaction that wrote them committed. */
  private wroteHardStates(): void {
    for (const g of this.groups) g.pendingHard = null;
  }

  /** The commit indexes that waited a tick without a round writing them (none while a round runs: it writes them). */
  private flushHardStates(): void {
    if (this.inRound || this.fatal || !this.groups.some((g) => g.pendingHard !== null)) return;
    try {
      this.inLogTransaction(() => this.writeHardStates());
    } catch (err) {
      // A full disk: they wait for the next write (the round's own retries report the full disk).
      if (!isDiskFullError(err)) return this.fail(err);
      for (const g of this.groups) g.storage.reload();
      return;
    }
    this.wroteHardStates();
  }

  /** The committed entries of an `inline` round (few and small), applied into the state batch. */
  private applyInline(rd: ReplicaRound): void {
    const out: AppliedOut[] = [];
    const touched = new Set<ShardGroup>();
    const mark = this.replication.applyMark();
    try {
      this.batch.begin();
      this.inTransaction(() => {
        for (const { shard, ready } of rd.shards) {
          if (ready.committedEntries.length === 0) continue;
          const g = this.groups[shard]!;
          for (const e of ready.committedEntries) this.applyEntry(g, e, out);
          touched.add(g);
        }
        // After every command of the savepoint: inside the batch the index only waits in memory for the COMMIT,
        // and one that rolls back must not have moved it.
        for (const g of touched) this.appliedIndexes.write(g.shard, g.applied);
      });
    } catch (err) {
      if (!isDiskFullError(err)) return this.fail(err);
      // The savepoint rolled back: the entries go to the applier, which retries once space returns.
      this.replication.rewindApply(mark);
      for (const g of touched) this.replication.rewind(g.shard, this.storedApplied(g.shard, g.storage));
      this.replication.deferInline(rd);
      return this.diskFilled('applier', err);
    }
    this.batch.added(out.length);
    this.deliver(out);
    for (const g of touched) this.replication.afterApply(g.shard, false);
    this.carryOut();
  }

  // --- the applier --------------------------------------------------------------------------------------

  private startApplier(): void {
    if (this.applying !== null || this.fatal || this.fullRetry !== null || this.replication.applyBacklog() === 0) return;
    this.applying = this.runApplier().finally(() => {
      this.applying = null;
    });
  }

  /** Resolves once every queued entry is applied (or storage failed). */
  private async drainApplies(): Promise<void> {
    while (!this.fatal && this.replication.applyBacklog() > 0) {
      // Closing on a full disk: what is left is committed in the Raft log and applied again at the next start.
      if (this.closed && this.applierFull) return;
      this.startApplier();
      if (this.applying !== null) await this.applying;
      else await new Promise<void>((resolve) => setTimeout(resolve, quarantineLimits.diskFullRetryMs));
    }
  }

  /** Applies the queue slice by slice, letting the event loop run between slices. */
  private async runApplier(): Promise<void> {
    while (!this.fatal && this.replication.applyBacklog() > 0) {
      const out: AppliedOut[] = [];
      const touched = new Set<ShardGroup>();
      const mark = this.replication.applyMark();
      try {
        this.applySlice(out, touched);
      } catch (err) {
        if (!isDiskFullError(err)) return this.fail(err);
        // The slice rolled back: apply it again once space returns (nothing of it was delivered).
        this.replication.rewindApply(mark);
        for (const g of this.groups) this.replication.rewind(g.shard, this.storedApplied(g.shard, g.storage));
        return this.diskFilled('applier', err);
      }
      if (this.applierFull) this.spaceBack('applier');
      this.deliver(out);
      for (const g of touched) this.replication.afterApply(g.shard);
      this.carryOut();
      if (this.replication.applyBacklog() > 0) await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }

  /** One savepoint in the state batch: queued entries until the slice's time or entry bound, with each touched applied_index. */
  private applySlice(out: AppliedOut[], touched: Set<ShardGroup>): void {
    const start = performance.now();
    this.batch.begin();
    this.inTransaction(() => this.applyQueued(out, touched, start));
    this.batch.added(out.length);
  }

  /** Inside a transaction: queued entries until the slice's time (from `start`) or entry bound, and their applied_index. */
  private applyQueued(out: AppliedOut[], touched: Set<ShardGroup>, start: number): void {
    const catchUp = this.catchingUpAtStart();
    const sliceMs = catchUp ? stallLimits.applyStartSliceMs : stallLimits.applySliceMs;
    let n = 0;
    for (let next = this.replication.nextApply(); next !== null; next = n < stallLimits.applySliceEntriesMax ? this.replication.nextApply() : null) {
      const g = this.groups[next.shard]!;
      const e = next.entry;
      n++;
      if (e.index <= g.applied) continue;
      this.applyEntry(g, e, out);
      touched.add(g);
      const ms = performance.now() - start;
      if (ms >= sliceMs || (!catchUp && ms >= stallLimits.applySliceFireDueMs && (this.o.node.fireDue() || this.shell.sendDue()))) break;
    }
    for (const g of touched) this.appliedIndexes.write(g.shard, g.applied);
  }

  /**
   * Until the node is ready, while a shard it leads has not caught up (its entries through its election applied),
   * a slice runs up to stallLimits.applyStartSliceMs and does not end early for a due callback. After a kill under
   * load, the shards that caught up first fire everything that fell due while the node was down, tens of ms per
   * turn of the loop; each slice ending for that held the others' catch-up (and their own due callbacks) a turn.
   */
  private catchingUpAtStart(): boolean {
    return this.starting && this.groups.some((g) => g.role === 'leader' && !g.firing);
  }

  /** The node answered ready: slices keep to stallLimits.applySliceMs from now on. */
  started(): void {
    this.starting = false;
  }

  /** The state side of an installed snapshot (its log side went into the round's log transaction). */
  private installRows(g: ShardGroup, snap: Snapshot): void {
    restoreShardImage(this.o.db, g.shard, snap.data);
    this.replication.snapshotInstalled(g.shard, snap.metadata.index);
    this.appliedIndexes.write(g.shard, g.applied);
    this.o.metrics.snapshots.inc({ kind: 'installed' });
    this.o.logger.info('snapshot installed', { shard: g.shard, index: snap.metadata.index, bytes: snap.data.length });
  }

  /**
   * Applies one committed entry inside a savepoint. An entry whose command cannot be decoded or applied is
   * quarantined: its savepoint is rolled back (no effect at all) and it is recorded with its index, term and error.
   * Apply is deterministic, so every replica quarantines the same entry and the replicas stay identical. Storage
   * errors (I/O, corruption, a full disk) are not the command's fault: they propagate and fail the transaction.
   */
  private applyEntry(g: ShardGroup, e: Entry, out: AppliedOut[]): void {
    if (!this.replication.beginApply(g.shard, e)) return;
    out.push({ g, index: e.index, term: e.term, ...this.applyCommand(g, e) });
  }

  /** The state-machine side of applyEntry (also what rewriteFromLog applies again): decode, apply or quarantine. */
  private applyCommand(g: ShardGroup, e: Entry): Pick<AppliedOut, 'command' | 'applied' | 'error' | 'quarantined'> {
    if (e.type !== 'normal' || e.data.length === 0) return { command: null, applied: null, error: null };
    let command: Command;
    try {
      command = decodeCommand(e.data);
    } catch (err) {
      if (!(err instanceof CommandDecodeError)) throw err;
      return { command: null, applied: null, error: err, quarantined: this.quarantine(g, e, null, err) };
    }
    try {
      return { command, applied: this.inTransaction(() => apply(g.store, command, e.term)), error: null };
    } catch (err) {
      if (isStorageError(err)) throw err;
      return { command: null, applied: null, error: err, quarantined: this.quarantine(g, e, command.type, err) };
    }
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

  /**
   * Step 3: each entry to the node: its effects to NodeCore, then its answer (a created job is armed before the API
   * answers). The caller carries out what they decided once, after the whole slice: a carryOut per entry took the
   * node's events and pumped the shell (two ready() of the core, the timers) for every entry of a round.
   */
  private deliver(out: AppliedOut[]): void {
    for (const a of out) {
      if (a.quarantined !== undefined) this.reportQuarantined(a.quarantined);
      this.o.node.applied(a.g.shard, a.index, a.term, a.command, a.applied);
    }
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
   * Compacts the log up to `upTo` (Replication decides when). The snapshot recorded for it is a marker (no data):
   * copying the shard's rows happens only when a follower actually needs them.
   */
  private compact(g: ShardGroup, upTo: number): void {
    if (this.compactionHolds > 0) return;
    // Never past what the state file holds durably: a crash replays the log from there.
    const to = Math.min(upTo, this.batch.durableApplied(g.shard));
    if (to <= g.storage.firstIndex() - 1) return;
    this.inLogTransaction(() => {
      if (g.storage.snapshotIndex() < to) g.storage.createSnapshot(to as LogIndex, g.raw.confState(), new Uint8Array(0));
      g.storage.compact(to as LogIndex);
    });
  }

  /** Until the returned release is called no log is compacted and the state batch commits every turn (a backup). */
  holdForCopy(): () => void {
    this.compactionHolds++;
    const releaseBatch = this.batch.hold();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.compactionHolds--;
      releaseBatch();
    };
  }

  /** Committed entries waiting for the applier (the proposer refuses client writes above stallLimits.applyQueueEntriesMax). */
  applyBacklog(): number {
    return this.replication.applyBacklog();
  }

  /** True when no proposal of any group waits for its entry. */
  idle(): boolean {
    return this.replication.idle();
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
    this.flushHardStates();
    this.failed = true; // no new round
    await this.drainApplies();
    await this.batch.close();
    this.replication.close();
    this.carryOut();
  }

  /** Runs rounds until every group is idle or `ms` passed (close, tests). */
  async settle(ms: number): Promise<void> {
    const until = Date.now() + ms;
    while (Date.now() < until && !this.failed) {
      if (this.running !== null) await this.running;
      if (!this.replication.hasReady() && this.idle() && this.replication.applyBacklog() === 0) return;
      this.schedule();
      await new Promise<void>((r) => setTimeout(r, 1));
    }
  }
}
