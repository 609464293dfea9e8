/**
 * One simulated node: the production `Node` (src/nodecore/node.ts: NodeCore and the replication layer
 * `Replication` composed: every shard's RawNode, monotonic time to ticks with the catch-up after a stall, the
 * round, the applier's queue, waiters, when to fire, and what crosses between the two) driven by a shell that does
 * the simulated IO in
 * place of src/node/raft-host.ts (a SimDisk per shard for the Raft log, apply into a MemoryStore) and of the
 * dispatcher (concurrency per key, due times, withdrawals, timeouts), against simulated clocks, network and
 * receivers. Only IO is restated here; every Raft-side rule is the production one.
 */
import type { Prng } from '../../../src/core/prng.js';
import type { PunctualError } from '../../../src/core/errors.js';
import { clusterLimits, nodeLimits } from '../../../src/core/limits.js';
import type { Logger } from '../../../src/core/log.js';
import type { AttemptOutcome } from '../../../src/dispatch/dispatcher.js';
import { classifyStatus } from '../../../src/dispatch/classify.js';
import { Node } from '../../../src/nodecore/node.js';
import type { NodeReady } from '../../../src/nodecore/node.js';
import type { ReplicaEvent, Replication } from '../../../src/nodecore/replication.js';
import type { DispatchOrder, NodeCoreDeps } from '../../../src/nodecore/types.js';
import type { RawNode } from '../../../src/raft/index.js';
import type { ConfState, Entry, LogIndex, Message, NodeId, Ready, Role } from '../../../src/raft/index.js';
import { CommandDecodeError, decodeCommand } from '../../../src/scheduler/codec.js';
import type { Command } from '../../../src/scheduler/commands.js';
import { apply } from '../../../src/scheduler/machine.js';
import type { SchedulerStore } from '../../../src/scheduler/store.js';
import type { Checker } from '../checker.js';
import { emptyStateHash, fail, nextStateHash } from '../checker.js';
import { SimDisk } from '../disk.js';
import type { NodeClock } from './clock.js';
import { decodeImage, encodeImage } from './image.js';
import type { SchedulerChecker } from './invariants.js';
import { DigestStore } from './digest-store.js';
import { SimStateFile } from './state-file.js';
import type { FedCore } from './fed-core.js';
import type { Answer, SimReceivers } from './receivers.js';

/** What the node needs from the simulation around it. */
export interface NodeWorld {
  readonly nowMs: number;
  readonly raft: Checker;
  readonly scheduler: SchedulerChecker;
  readonly receivers: SimReceivers;
  /** Runs `fn` for this node at true time `atMs` (deferred while the node is paused, dropped once it crashed). */
  at(node: SimNode, atMs: number, what: string, fn: () => void): void;
  send(messages: readonly Message[]): void;
  reply(node: SimNode, opId: number, ok: boolean, result: unknown, error: PunctualError | null): void;
  event(what: string): void;
  /** Replica digests are compared every this many applied entries. */
  readonly digestEvery: number;
  readonly makeCore: (deps: NodeCoreDeps) => FedCore;
  readonly logger: Logger;
  /** The cores' stage lead (NodeCoreDeps.stageLeadMs). */
  readonly stageLeadMs: number;
}

/** One shard on this node: its simulated disk and store (src/node/group.ts ShardGroup); Raft's side is the Replication's. */
class Group {
  rep!: Replication;
  store!: DigestStore;
  /** What the core holds: always the current store (a snapshot install swaps the rows under it, as SQLite's). */
  readonly view: SchedulerStore = forwarder(() => this.store);
  term = 0;
  commit = 0;
  /** Where the store stood when the process started (the Replication counts from here). */
  restoredAt = 0;
  hash = emptyStateHash;
  readonly disk: SimDisk;
  /** The state file: the store as the last batch commit wrote it. */
  readonly state = new SimStateFile();

  constructor(
    readonly shard: number,
    bootstrap: ConfState,
  ) {
    this.disk = new SimDisk(bootstrap, true);
  }

  get raw(): RawNode {
    return this.rep.shards[this.shard]!.raw;
  }

  get role(): Role {
    return this.rep.shards[this.shard]!.role;
  }

  get applied(): number {
    return this.rep.shards[this.shard]!.applied;
  }
}

interface OrderState {
  readonly order: DispatchOrder;
  started: boolean;
  queued: boolean;
  /** Ordered ahead of its due time and not handed to the dispatcher yet (FiringCore's near-horizon wheel). */
  staged: boolean;
}

export class SimNode {
  readonly groups: Group[] = [];
  core!: FedCore;
  down = false;
  pausedUntil = 0;
  /** Bumped at every start: events of an earlier process are dropped. */
  incarnation = 0;
  /** The node's pure side; `rep` and `core` are its halves. */
  node!: Node;
  rep!: Replication;
  private timerGen = 0;
  private timerAtMs: number | null = null;
  private flushGen = 0;
  private flushAtMs: number | null = null;
  private readonly orders = new Map<string, OrderState>();
  /** Orders the core withdrew that may still wait for a slot (NodeShell.withdrawn). */
  private readonly withdrawn = new Set<string>();
  private readonly running = new Map<string, number>();
  private readonly waiting = new Map<string, string[]>();
  private settling = false;
  /** Shards this process drains or hands over (transferLeader). */
  private readonly handingOver = new Set<number>();
  roundsRun = 0;

  constructor(
    readonly id: NodeId,
    readonly clock: NodeClock,
    private readonly rand: Prng,
    voters: readonly NodeId[],
    shards: number,
    private readonly w: NodeWorld,
  ) {
    const bootstrap = { voters: [...voters], learners: [] };
    for (let s = 0; s < shards; s++) this.groups.push(new Group(s, bootstrap));
  }

  get wallMs(): number {
    return this.clock.wallMs(this.w.nowMs);
  }

  private get monoMs(): number {
    return this.clock.monoMs(this.w.nowMs);
  }

  // ------------------------------------------------------------------ process life

  /** Starts (or restarts) the process from its disks: stores from snapshots, a fresh NodeCore, ticking. */
  start(): void {
    this.down = false;
    this.pausedUntil = 0;
    this.incarnation++;
    this.orders.clear();
    this.running.clear();
    this.waiting.clear();
    this.handingOver.clear();
    this.timerAtMs = null;
    this.flushAtMs = null;
    for (const g of this.groups) this.openGroup(g);
    this.node = new Node({
      replication: {
        nodeId: this.id,
        shards: this.groups.map((g) => ({ storage: g.disk, applied: g.restoredAt })),
        rand: this.rand.fork(),
        compaction: { keepEntries: 50, everyEntries: 200 },
        maxInflightBytes: 0,
        maxMsgBytes: 64 * 1024,
        reachable: () => true,
      },
      core: {
        nodeId: this.id,
        stores: this.groups.map((g) => g.view),
        startMs: this.wallMs,
        rand01: () => this.rand.nextFloat(),
        mergeCreates: true,
        stageLeadMs: this.w.stageLeadMs,
        logger: this.w.logger,
      },
      clocks: { nowMs: () => this.wallMs, monoMs: () => this.monoMs },
      makeCore: this.w.makeCore,
    });
    this.rep = this.node.replication;
    this.core = this.node.core as FedCore;
    for (const g of this.groups) g.rep = this.rep;
    this.rep.start(this.monoMs);
    this.scheduleInterval();
    this.scheduleBatch();
    this.core.load(this.wallMs);
    this.settle();
  }

  /**
   * The store as the state file holds it; or, when the file is behind the log's first entry (a follower crashed
   * between installing a snapshot into its log and committing its rows), the log's copy of that snapshot, which is
   * never a compaction marker: compaction stops at the state file's durable applied index.
   */
  private openGroup(g: Group): void {
    const snap = g.disk.storedSnapshot();
    const st = g.state.current();
    let data: Uint8Array;
    if (st !== null && st.applied >= snap.metadata.index) {
      data = st.image;
      g.restoredAt = st.applied;
    } else {
      if (snap.metadata.index > 1 && snap.data.length === 0) {
        fail('state_behind_compaction', `${this.id} s${g.shard}: the state file holds ${st?.applied ?? 0}, the log was compacted through a marker at ${snap.metadata.index}`);
      }
      data = snap.data;
      g.restoredAt = snap.metadata.index;
    }
    const { store, hash } = decodeImage(data, emptyStateHash);
    g.store = store;
    g.hash = hash;
    let hs = g.disk.initialState().hardState;
    // A commit-only hard state is not fsynced (Raft's mustSync), so the state file may hold more than the log's
    // durable commit index: what was applied was committed, and its entries are durable (RaftHost: openShardLogs).
    if (g.restoredAt > hs.commit) {
      if (g.restoredAt > g.disk.lastIndex()) fail('state_behind_compaction', `${this.id} s${g.shard}: the state file holds ${g.restoredAt}, past the log's last entry ${g.disk.lastIndex()}`);
      hs = { ...hs, commit: g.restoredAt as LogIndex };
      g.disk.setHardState(hs);
    }
    g.term = hs.term;
    g.commit = hs.commit;
  }

  /** kill -9 / power loss: unsynced writes go (maybe a torn prefix stays); requests on the wire still arrive. */
  crash(tornRate: number): number {
    this.down = true;
    let lost = 0;
    for (const g of this.groups) {
      lost += g.disk.crash(this.rand, tornRate);
      if (g.state.crash(this.rand, tornRate)) lost++;
    }
    return lost;
  }

  /**
   * The state batch (RaftHost's StateBatch): every stateBatchIntervalMs the shards whose store moved are committed
   * to their state files, and each commit's fsync answers a little later.
   */
  private scheduleBatch(): void {
    const inc = this.incarnation;
    this.w.at(this, this.w.nowMs + nodeLimits.stateBatchIntervalMs, 'state-batch', () => {
      if (inc !== this.incarnation) return;
      this.commitState();
      this.scheduleBatch();
    });
  }

  private commitState(only: Group | null = null): void {
    const inc = this.incarnation;
    for (const g of only === null ? this.groups : [only]) {
      if (g.applied <= (g.state.current()?.applied ?? 0)) continue;
      g.state.commit(g.applied, encodeImage(g.store, g.hash));
      const state = g.state;
      const committed = state.current();
      this.w.at(this, this.w.nowMs + 1 + this.rand.int(5), 'state-fsync', () => {
        // A crash in between took the commit back (or kept it): only this process's own commit is synced.
        if (inc === this.incarnation && state.current() === committed) state.sync();
      });
    }
  }

  // ------------------------------------------------------------------ time (Replication.tick / catchUp)

  private scheduleInterval(): void {
    const inc = this.incarnation;
    const next = this.clock.trueTimeOfMono(this.monoMs + clusterLimits.tickMs, this.w.nowMs + 1);
    this.w.at(this, next, 'interval', () => {
      if (inc !== this.incarnation) return;
      this.rep.tick(this.monoMs);
      this.carryOut();
      this.scheduleInterval();
      this.settle();
    });
  }

  /** The dispatcher's check right before a send (NodeShell.admit, as the core asks it of the node). */
  private leaseValid(shard: number): boolean {
    const valid = this.node.leaseValid(shard);
    this.carryOut();
    return valid;
  }

  /** The lease as the checker sees it: held only if the node could act on it now (no stale ticks). */
  holdsLease(shard: number): boolean {
    if (this.down || this.w.nowMs < this.pausedUntil) return false;
    const g = this.groups[shard]!;
    return this.rep.ticksCurrent(this.monoMs) && g.role === 'leader' && g.raw.leaseValid();
  }

  /**
   * Carries out the node's events in order (RaftHost.handle, with simulated IO); leadership and the answers to the
   * core's proposals reached the core inside take().
   */
  private carryOut(): void {
    if (!this.rep.hasEvents()) return;
    for (const ev of this.node.take()) this.handle(ev);
  }

  private handle(ev: ReplicaEvent): void {
    switch (ev.kind) {
      case 'snapshot':
      case 'compact':
        return this.compact(this.groups[ev.shard]!, ev.kind === 'compact' ? ev.upTo : null);
      case 'catch_up': {
        // After the messages that waited in the sockets were stepped: an event queued behind them.
        const inc = this.incarnation;
        this.w.at(this, this.w.nowMs, 'catch-up', () => {
          if (inc !== this.incarnation) return;
          this.rep.catchUp(this.monoMs);
          this.carryOut();
          this.settle();
        });
        return;
      }
      case 'leader_start':
      case 'leader_stop':
      case 'proposal':
      case 'leading':
      case 'read':
      case 'snapshot_installed':
      case 'conf_change':
        return;
    }
  }

  // ------------------------------------------------------------------ inputs

  step(m: Message): void {
    this.rep.step([m]);
    this.settle();
  }

  reportUnreachable(m: Message): void {
    this.rep.reportUnreachablePeer(m.group, m.to);
    if (m.type === 'snapshot') this.rep.reportSnapshot(m.group, m.to, false);
  }

  reportSnapshot(m: Message, ok: boolean): void {
    this.rep.reportSnapshot(m.group, m.to, ok);
  }

  /** A client operation; refused at once or answered later through NodeWorld.reply. */
  clientOp(opId: number, shard: number, command: Command): void {
    const refused = this.core.propose(opId, shard, command, this.wallMs);
    if (refused) this.w.reply(this, opId, false, null, refused);
    this.settle();
  }

  /**
   * An operator's transfer-leader (or the rebalancer's) on this node's group, as src/node/cluster-ops.ts does it: a
   * shard it fires is drained first (looked at every transferDrainPollMs, at most transferDrainMaxMs), then Raft is
   * asked; a shard still led in the same term transferUndrainAfterMs later fires again. One transfer per shard.
   */
  transferLeader(shard: number, to: NodeId): boolean {
    const g = this.groups[shard]!;
    if (g.role !== 'leader' || this.handingOver.has(shard)) return false;
    const lead = this.rep.shards[shard]!.lead;
    if (!lead.firing) {
      this.rep.transferLeader(shard, to);
      this.settle();
      return true;
    }
    const inc = this.incarnation;
    const term = lead.term;
    const leads = (): boolean => inc === this.incarnation && !this.down && lead.role === 'leader' && lead.term === term;
    const startMs = this.w.nowMs;
    this.handingOver.add(shard);
    this.core.drainShard(shard, this.wallMs);
    this.settle();
    const look = (): void => {
      if (inc !== this.incarnation) return;
      if (!leads()) {
        this.handingOver.delete(shard);
        this.core.undrainShard(shard);
        this.settle();
        return;
      }
      const drained = this.core.shardDrained(shard);
      if (!drained && this.w.nowMs - startMs < clusterLimits.transferDrainMaxMs) {
        this.w.at(this, this.w.nowMs + clusterLimits.transferDrainPollMs, 'drain-look', look);
        return;
      }
      this.w.event(`${this.id} s${shard} transfer to ${to} after a drain of ${this.w.nowMs - startMs} ms${drained ? '' : ' (not drained)'}`);
      this.rep.transferLeader(shard, to);
      this.settle();
      this.w.at(this, this.w.nowMs + clusterLimits.transferUndrainAfterMs, 'undrain', () => {
        if (inc !== this.incarnation) return;
        this.handingOver.delete(shard);
        if (!leads()) return;
        this.core.undrainShard(shard);
        this.settle();
      });
    };
    look();
    return true;
  }

  isLeader(shard: number): boolean {
    return !this.down && this.groups[shard]!.role === 'leader';
  }

  // ------------------------------------------------------------------ the loop: Ready rounds and the core's outputs

  /** Runs Ready rounds and core outputs until neither has work (raft-host.ts round, CoreShell pump). */
  settle(): void {
    if (this.settling || this.down) return;
    this.settling = true;
    try {
      for (let i = 0; i < 1000; i++) {
        // Events the node left outside a round (a lease check that found missed ticks), as RaftHost.schedule.
        this.carryOut();
        const a = this.round();
        const b = this.pump();
        if (!a && !b) return;
      }
      fail('node_exception', `${this.id}: the shell did not settle in 1000 rounds`);
    } finally {
      this.settling = false;
    }
  }

  /** One round of the Replication (RaftHost.round, with a SimDisk per shard and the applier run at once). */
  private round(): boolean {
    const rd = this.rep.ready();
    if (rd === null) return false;
    this.roundsRun++;
    // Roles before persisted() moves them, for the checker's view of an election (only rounds with a soft state).
    let wasLeader: boolean[] | null = null;
    let inline: Array<{ g: Group; e: Entry }> | null = null;
    for (const { shard, ready } of rd.shards) {
      const g = this.groups[shard]!;
      if (ready.softState !== null) (wasLeader ??= [])[shard] = g.role === 'leader';
      this.persist(g, ready);
      if (rd.inline) for (const e of ready.committedEntries) (inline ??= []).push({ g, e });
    }
    for (const { shard, ready } of rd.shards) if (ready.mustSync) this.groups[shard]!.disk.sync();
    // An installed snapshot's rows are committed once the log holds it durably (RaftHost: after the round's fsync).
    for (const { shard, ready } of rd.shards) if (ready.snapshot !== null) this.commitState(this.groups[shard]!);
    const { early, late } = this.rep.persisted(rd);
    if (wasLeader !== null) for (const { shard, ready } of rd.shards) if (ready.softState !== null) this.softState(this.groups[shard]!, ready, wasLeader[shard]!);
    this.carryOut();
    this.w.send(early);
    this.w.send(late);
    if (inline !== null) {
      const touched = new Set<number>();
      for (const { g, e } of inline) if (this.applyEntry(g, e)) touched.add(g.shard);
      for (const shard of touched) this.rep.afterApply(shard, false);
    }
    this.carryOut();
    this.rep.sent(rd);
    this.applyQueued();
    this.rep.advance(rd);
    this.carryOut();
    return true;
  }

  /** The log side of one shard's Ready on its SimDisk, with the Raft checker's hooks. */
  private persist(g: Group, rd: Ready): void {
    const raft = this.w.raft;
    if (rd.snapshot) this.installSnapshot(g, rd);
    if (rd.entries.length > 0) {
      let prevTerm = termOrNull(g, (rd.entries[0]!.index - 1) as LogIndex);
      for (const e of rd.entries) {
        if (prevTerm !== null) raft.entryLogged(g.shard, this.id, e, prevTerm);
        prevTerm = e.term;
      }
      g.disk.append(rd.entries);
    }
    if (rd.hardState) {
      const h = rd.hardState;
      if (g.role === 'leader' && rd.softState === null && h.term === g.term && h.commit > g.commit) {
        raft.leaderCommitted(g.shard, this.id, h.term, h.commit, termOrNull(g, h.commit));
      }
      raft.commitMoved(g.shard, this.id, g.commit, h.commit, 'ready');
      raft.commitKnown(g.shard, g.commit, h.commit, h.term);
      g.commit = h.commit;
      g.term = h.term;
      g.disk.setHardState(h);
    }
  }

  /** The applier, all at once: the simulated store has no slices to yield between. */
  private applyQueued(): void {
    if (this.rep.applyBacklog() === 0) return this.carryOut();
    this.rep.applyMark();
    const touched = new Set<number>();
    for (let n = this.rep.nextApply(); n !== null; n = this.rep.nextApply()) {
      if (this.applyEntry(this.groups[n.shard]!, n.entry)) touched.add(n.shard);
    }
    for (const shard of touched) this.rep.afterApply(shard);
    this.carryOut();
  }

  private installSnapshot(g: Group, rd: Ready): void {
    const snap = rd.snapshot!;
    g.disk.applySnapshot(snap);
    const { store, hash } = decodeImage(snap.data, emptyStateHash);
    g.store = store;
    g.hash = hash;
    this.rep.snapshotInstalled(g.shard, snap.metadata.index);
    this.w.raft.restored(g.shard, this.id, g.applied, g.hash);
    this.w.event(`${this.id} s${g.shard} installs snapshot at ${g.applied}`);
  }

  /** The checker's view of an election (leadership itself is the Replication's). */
  private softState(g: Group, rd: Ready, wasLeader: boolean): void {
    const soft = rd.softState!;
    const status = g.raw.status();
    if (!wasLeader && soft.role === 'leader' && this.w.raft.leaderElected(g.shard, status.term, this.id)) {
      this.w.raft.leaderComplete(g.shard, this.id, status.term, g.disk.lastIndex(), (i) => termOrNull(g, i));
    }
    this.w.event(`${this.id} s${g.shard} ${soft.role} term ${status.term} lead ${soft.leader}`);
  }

  /** Applies one committed entry into the MemoryStore, hands its command to the core and answers its proposer. */
  private applyEntry(g: Group, e: Entry): boolean {
    if (e.index <= g.applied) return false;
    if (e.index !== g.applied + 1) fail('apply_gap', `shard ${g.shard} ${this.id} applied ${e.index} after ${g.applied}`);
    this.rep.beginApply(g.shard, e);
    g.hash = nextStateHash(g.hash, e.term, e.crc);
    this.w.raft.applied(g.shard, this.id, e, g.hash);
    let command: Command | null = null;
    let result: ReturnType<typeof apply> | null = null;
    if (e.type === 'normal' && e.data.length > 0) {
      try {
        command = decoded(e.data);
        result = apply(g.store, command);
      } catch (err) {
        if (!(err instanceof CommandDecodeError)) throw err;
      }
    }
    if (e.index % this.w.digestEvery === 0) this.w.scheduler.appliedState(g.shard, this.id, e.index, g.store.digest());
    const applied = result === null ? null : { result: result.result, effects: result.effects };
    this.node.applied(g.shard, e.index, e.term, result === null ? null : command, applied);
    this.carryOut();
    return true;
  }

  /**
   * A snapshot the Replication asked for (a follower needs one), or a compaction up to `upTo`: the simulated
   * disk's snapshots always carry the store's image (a restart reads it), so both write one at the applied index.
   */
  private compact(g: Group, upTo: number | null): void {
    const snapIndex = g.disk.storedSnapshot().metadata.index;
    if (upTo === null) {
      if (g.applied > snapIndex || g.disk.snapshot() === null) g.disk.createSnapshot(g.applied as LogIndex, g.raw.confState(), encodeImage(g.store, g.hash));
      return;
    }
    // Never past what the state file holds durably; the snapshot for it is a marker (RaftHost.compact).
    const to = Math.min(upTo, g.state.durableApplied());
    if (to < g.disk.firstIndex()) return;
    if (to > snapIndex) g.disk.createSnapshot(to as LogIndex, g.raw.confState(), new Uint8Array(0));
    g.disk.compact(to as LogIndex);
  }

  /** Carries out one node.ready() (NodeShell pump; the core's proposals are in their logs). Returns whether it had any work. */
  private pump(): boolean {
    // Nothing came in since the last, empty, answer: it would be given again, and its deadlines are armed.
    if (this.core.quiet) return false;
    const rd: NodeReady = this.node.ready();
    let worked = false;
    for (const p of rd.propose) {
      worked = true;
      this.w.event(`${this.id} proposes ${p.ticket} ${p.command.type} to s${p.shard}`);
    }
    // NodeShell: an order still waiting for its slot is refused when it gets it (admit); a started one reports as usual.
    for (const w of rd.withdraw) {
      worked = true;
      const st = this.orders.get(w.key);
      // FiringPort.withdraw: a staged order is taken back at once (answered on a later turn, as a promise is).
      if (st?.staged === true) this.takeBackStaged(st);
      else this.withdrawn.add(w.key);
    }
    for (const o of rd.dispatch) {
      worked = true;
      this.withdrawn.delete(o.key);
      this.order(o);
    }
    for (const r of rd.replies) {
      worked = true;
      this.w.reply(this, r.opId, r.ok, r.ok ? r.applied.result : null, r.ok ? null : r.error);
    }
    this.armTimer(rd.nextDeadlineMs);
    this.armFlush(rd.flushAtMs);
    return worked;
  }

  /** The group commit's timer (the shell's second timer): a wait measured on the node's clock. */
  private armFlush(atMs: number | null): void {
    if (atMs === null || atMs === this.flushAtMs) return;
    this.flushAtMs = atMs;
    const gen = ++this.flushGen;
    const inc = this.incarnation;
    this.w.at(this, this.clock.trueTimeOfWall(atMs, this.w.nowMs), 'flush', () => {
      if (inc !== this.incarnation || gen !== this.flushGen) return;
      this.flushAtMs = null;
      this.core.flush(this.wallMs);
      this.settle();
    });
  }

  private armTimer(deadlineMs: number | null): void {
    if (deadlineMs === null || deadlineMs === this.timerAtMs) return;
    this.timerAtMs = deadlineMs;
    const gen = ++this.timerGen;
    const inc = this.incarnation;
    const at = this.clock.trueTimeOfWall(deadlineMs, this.w.nowMs);
    this.w.at(this, at, 'timer', () => {
      if (inc !== this.incarnation || gen !== this.timerGen) return;
      this.timerAtMs = null;
      this.core.tick(this.wallMs);
      this.settle();
    });
  }

  // ------------------------------------------------------------------ the dispatcher (src/dispatch)

  /**
   * NodeShell.send: the order goes to the dispatcher at once, which starts it when its concurrency key has room; one
   * ordered ahead of its due time (stageTo) waits in the firing core until its due ms on this node's clock.
   */
  private order(o: DispatchOrder): void {
    const st: OrderState = { order: o, started: false, queued: false, staged: false };
    this.orders.set(o.key, st);
    this.w.scheduler.ordered({ node: this.id, key: o.key, jobId: o.jobId, scheduledAtMs: o.scheduledAtMs, attempt: o.attempt, dueAtMs: o.dueAtMs, nodeWallMs: this.wallMs }, this.w.stageLeadMs);
    if (o.dueAtMs > this.wallMs) return this.stage(st);
    this.toDispatcher(st);
  }

  private stage(st: OrderState): void {
    st.staged = true;
    const inc = this.incarnation;
    const wake = (): void => {
      if (inc !== this.incarnation || this.orders.get(st.order.key) !== st || !st.staged) return;
      // The node's clock may have stepped back since: FiringCore sends at its due ms on the clock as it reads now.
      if (this.wallMs < st.order.dueAtMs) {
        this.w.at(this, this.clock.trueTimeOfWall(st.order.dueAtMs, this.w.nowMs), 'staged', wake);
        return;
      }
      st.staged = false;
      this.toDispatcher(st);
      this.settle();
    };
    this.w.at(this, this.clock.trueTimeOfWall(st.order.dueAtMs, this.w.nowMs), 'staged', wake);
  }

  private takeBackStaged(st: OrderState): void {
    st.staged = false;
    this.orders.delete(st.order.key);
    const inc = this.incarnation;
    this.w.at(this, this.w.nowMs, 'withdrawn', () => {
      if (inc !== this.incarnation) return;
      this.core.dispatchWithdrawn(st.order.key);
      this.settle();
    });
  }

  private toDispatcher(st: OrderState): void {
    const o = st.order;
    this.w.scheduler.sendable({ node: this.id, key: o.key, jobId: o.jobId, scheduledAtMs: o.scheduledAtMs, attempt: o.attempt, dueAtMs: o.dueAtMs, nodeWallMs: this.wallMs });
    const ck = o.delivery.concurrencyKey;
    if ((this.running.get(ck) ?? 0) < o.delivery.spec.maxConcurrency) return this.startAttempt(st);
    st.queued = true;
    const q = this.waiting.get(ck) ?? [];
    q.push(o.key);
    this.waiting.set(ck, q);
  }

  /** NodeShell.admit: the order still stands when it gets its slot, or it is not sent (or looked at again). */
  private admitted(st: OrderState): boolean {
    const o = st.order;
    const term = Number(o.delivery.fencingToken.slice(o.delivery.fencingToken.indexOf('.') + 1));
    if (this.withdrawn.has(o.key) || this.core.firingShards().get(o.shard) !== term) {
      this.withdrawn.delete(o.key);
      this.orders.delete(o.key);
      this.core.dispatchWithdrawn(o.key);
      return false;
    }
    if (this.leaseValid(o.shard)) return true;
    const inc = this.incarnation;
    this.w.at(this, this.w.nowMs + nodeLimits.leaseRetryMs, 'lease-retry', () => {
      if (inc !== this.incarnation || this.orders.get(o.key) !== st) return;
      this.startAttempt(st);
      this.settle();
    });
    return false;
  }

  private startAttempt(st: OrderState): void {
    const o = st.order;
    const d = o.delivery;
    if (!this.admitted(st)) return this.nextWaiting(d.concurrencyKey);
    st.started = true;
    st.queued = false;
    const ck = d.concurrencyKey;
    this.running.set(ck, (this.running.get(ck) ?? 0) + 1);
    const startedAtMs = this.wallMs;
    const dedupKey = `${d.jobId}:${d.scheduledAtMs}`;
    this.w.scheduler.dispatchStarted({
      node: this.id, shard: o.shard, key: o.key, jobId: o.jobId, scheduledAtMs: o.scheduledAtMs, attempt: d.attempt,
      fencingToken: d.fencingToken, dueAtMs: o.dueAtMs, dedupKey, nodeWallMs: startedAtMs, trueMs: this.w.nowMs,
    });
    this.w.event(`${this.id} sends ${o.key.replace('\n', '@')} attempt ${d.attempt} token ${d.fencingToken}`);
    this.core.dispatchStarted(o.key, startedAtMs);
    const answer: Answer = this.w.receivers.request({
      url: d.spec.url, dedupKey, attempt: d.attempt, fencingToken: d.fencingToken, node: this.id, sentMs: this.w.nowMs,
    });
    const timeoutAt = this.w.nowMs + d.spec.timeoutMs;
    const at = answer.kind === 'timeout' ? timeoutAt : Math.min(answer.atMs, timeoutAt);
    const inc = this.incarnation;
    this.w.at(this, at, 'answer', () => {
      if (inc !== this.incarnation) return;
      this.orders.delete(o.key);
      this.running.set(ck, this.running.get(ck)! - 1);
      this.core.dispatchOutcome(o.key, outcomeOf(answer, at >= timeoutAt, d.spec.timeoutMs, startedAtMs, this.wallMs));
      this.nextWaiting(ck);
      this.settle();
    });
  }

  /** A slot of the key is free: the next order waiting for it tries to start. */
  private nextWaiting(ck: string): void {
    const next = this.waiting.get(ck)?.shift();
    if (next !== undefined) this.startAttempt(this.orders.get(next)!);
  }
}

function outcomeOf(a: Answer, timedOut: boolean, timeoutMs: number, startedAtMs: number, finishedAtMs: number): AttemptOutcome {
  const base = { retryAfterMs: null, startedAtMs, finishedAtMs };
  if (timedOut || a.kind === 'timeout') return { ...base, kind: 'retryable', statusCode: null, error: `timeout after ${timeoutMs} ms` };
  if (a.kind === 'refused') return { ...base, kind: 'retryable', statusCode: null, error: 'ECONNREFUSED' };
  const kind = classifyStatus(a.status);
  return { ...base, kind, statusCode: a.status, error: kind === 'succeeded' ? null : `HTTP ${a.status}` };
}

/**
 * Every node decodes the same entry bytes (one object, passed by reference through the simulated network), so the
 * command is decoded once and shared, frozen: a node that changed it would throw instead of changing the others'.
 */
const decodedEntries = new WeakMap<Uint8Array, Command | CommandDecodeError>();

function decoded(data: Uint8Array): Command {
  let c = decodedEntries.get(data);
  if (c === undefined) {
    try {
      c = deepFreeze(decodeCommand(data));
    } catch (err) {
      if (!(err instanceof CommandDecodeError)) throw err;
      c = err;
    }
    decodedEntries.set(data, c);
  }
  if (c instanceof CommandDecodeError) throw c;
  return c;
}

function deepFreeze<T>(v: T): T {
  if (typeof v !== 'object' || v === null || ArrayBuffer.isView(v)) return v;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) deepFreeze(v[i]);
  } else {
    const o = v as Record<string, unknown>;
    for (const k in o) deepFreeze(o[k]);
  }
  return Object.freeze(v);
}

/**
 * An object whose every store method calls that method of the store `current()` returns at the time of the call
 * (built once: a Proxy would look the method up and bind it on every read).
 */
function forwarder(current: () => DigestStore): SchedulerStore {
  const view: Record<string, (...args: unknown[]) => unknown> = {};
  for (let p: object = DigestStore.prototype; p !== Object.prototype; p = Object.getPrototypeOf(p) as object) {
    for (const k of Object.getOwnPropertyNames(p)) {
      if (k === 'constructor' || k in view) continue;
      view[k] = (...args) => (current() as unknown as Record<string, (...a: unknown[]) => unknown>)[k]!(...args);
    }
  }
  return view as unknown as SchedulerStore;
}

function termOrNull(g: Group, i: LogIndex): number | null {
  if (i < g.disk.firstIndex() - 1 || i > g.disk.lastIndex()) return null;
  return g.disk.term(i);
}
