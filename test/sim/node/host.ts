/**
 * One simulated node: the production NodeCore (src/nodecore) driven by a shell that mirrors the real node's
 * (src/node): the replication layer of src/node/raft-host.ts (a RawNode per shard over a SimDisk, apply into a
 * MemoryStore, when to fire through NodeCore's own ShardLeadership, proposals and their answers, wall time to ticks
 * with the catch-up after a stall) and the dispatcher (concurrency per key, due times, withdrawals, timeouts), against simulated clocks,
 * network and receivers. raft-host.ts does IO (SQLite, timers, performance.now) and cannot run here, so this file
 * restates its rules; each one names the method it mirrors.
 */
import type { Prng } from '../../../src/core/prng.js';
import { PunctualError } from '../../../src/core/errors.js';
import type { FailureReason } from '../../../src/core/errors.js';
import { clusterLimits, nodeLimits, stallLimits } from '../../../src/core/limits.js';
import type { Logger } from '../../../src/core/log.js';
import type { AttemptOutcome } from '../../../src/dispatch/dispatcher.js';
import { classifyStatus } from '../../../src/dispatch/classify.js';
import { ShardLeadership } from '../../../src/nodecore/leadership.js';
import type { CoreReady, DispatchOrder, NodeCoreApi, NodeCoreDeps, ProposalResult } from '../../../src/nodecore/types.js';
import { HostBugs } from '../../../src/raft/bugs.js';
import { RawNode } from '../../../src/raft/index.js';
import type { ConfState, Entry, LogIndex, Message, NodeId, Ready, Role } from '../../../src/raft/index.js';
import { CommandDecodeError, decodeCommand, encodeCommand } from '../../../src/scheduler/codec.js';
import type { Command } from '../../../src/scheduler/commands.js';
import { apply } from '../../../src/scheduler/machine.js';
import type { SchedulerStore } from '../../../src/scheduler/store.js';
import type { Checker } from '../checker.js';
import { emptyStateHash, fail, nextStateHash } from '../checker.js';
import { SimDisk } from '../disk.js';
import type { NodeClock } from './clock.js';
import { decodeImage, encodeImage } from './image.js';
import type { SchedulerChecker } from './invariants.js';
import type { DigestStore } from './digest-store.js';
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
  readonly makeCore: (deps: NodeCoreDeps) => NodeCoreApi;
  readonly logger: Logger;
}

interface PendingProposal {
  ticket: number;
  term: number;
  deadlineMono: number;
}

/** One shard on this node (src/node/group.ts ShardGroup). */
class Group {
  raw!: RawNode;
  store!: DigestStore;
  /** What the core holds: always the current store (a snapshot install swaps the rows under it, as SQLite's). */
  readonly view: SchedulerStore = new Proxy({} as SchedulerStore, {
    get: (_, k) => {
      const s = this.store as unknown as Record<string | symbol, unknown>;
      const v = s[k];
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(s) : v;
    },
  });
  /** When this node fires the shard: NodeCore's ShardLeadership, as the Raft host uses it. */
  lead = new ShardLeadership();
  term = 0;
  commit = 0;
  applied = 0;
  hash = emptyStateHash;
  readonly proposals = new Map<number, PendingProposal>();
  readonly disk: SimDisk;

  constructor(
    readonly shard: number,
    bootstrap: ConfState,
  ) {
    this.disk = new SimDisk(bootstrap);
  }

  get role(): Role {
    return this.lead.role;
  }
}

interface OrderState {
  readonly order: DispatchOrder;
  started: boolean;
  queued: boolean;
}

export class SimNode {
  readonly groups: Group[] = [];
  core!: NodeCoreApi;
  down = false;
  pausedUntil = 0;
  /** Bumped at every start: events of an earlier process are dropped. */
  incarnation = 0;
  private tickedToMono = 0;
  private catchUpPending = false;
  private ticks = 0;
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
    this.timerAtMs = null;
    this.flushAtMs = null;
    this.catchUpPending = false;
    for (const g of this.groups) this.openGroup(g);
    this.core = this.w.makeCore({
      nodeId: this.id,
      stores: this.groups.map((g) => g.view),
      startMs: this.wallMs,
      rand01: () => this.rand.nextFloat(),
      mergeCreates: true,
      leaseValid: (shard) => this.leaseValid(shard),
      applyBacklog: () => 0,
      logger: this.w.logger,
    });
    this.tickedToMono = this.monoMs;
    this.scheduleInterval();
    this.core.load(this.wallMs);
    this.settle();
  }

  private openGroup(g: Group): void {
    const snap = g.disk.snapshot()!;
    const { store, hash } = decodeImage(snap.data, emptyStateHash);
    g.store = store;
    g.hash = hash;
    g.applied = snap.metadata.index;
    const hs = g.disk.initialState().hardState;
    g.term = hs.term;
    g.commit = Math.max(hs.commit, snap.metadata.index);
    g.lead = new ShardLeadership();
    g.proposals.clear();
    g.raw = new RawNode(
      {
        id: this.id,
        group: g.shard,
        electionTicks: clusterLimits.electionTicks,
        heartbeatTicks: clusterLimits.heartbeatTicks,
        preVote: true,
        checkQuorum: true,
        maxInflightMsgs: clusterLimits.maxInflightMsgs,
        maxInflightBytes: 0,
        maxMsgBytes: 64 * 1024,
        leaseTicks: clusterLimits.leaseTicks,
        rand: this.rand.fork(),
        applied: g.applied as LogIndex,
      },
      g.disk,
    );
  }

  /** kill -9 / power loss: unsynced writes go (maybe a torn prefix stays); requests on the wire still arrive. */
  crash(tornRate: number): number {
    this.down = true;
    let lost = 0;
    for (const g of this.groups) lost += g.disk.crash(this.rand, tornRate);
    return lost;
  }

  // ------------------------------------------------------------------ time (raft-host.ts catchUpTicks / runTicks)

  private scheduleInterval(): void {
    const inc = this.incarnation;
    const next = this.clock.trueTimeOfMono(this.monoMs + clusterLimits.tickMs, this.w.nowMs + 1);
    this.w.at(this, next, 'interval', () => {
      if (inc !== this.incarnation) return;
      this.catchUpTicks();
      this.scheduleInterval();
      this.settle();
    });
  }

  /**
   * raft-host.ts catchUpTicks: one tick per tickMs of monotonic time. After a stall (more than one tick due) the
   * lease counts as lapsed until the missed ticks run, which happens after the messages that waited in the
   * sockets were stepped (an event queued behind them). HostBugs.leaseOnStaleTicks restores the old rule: one
   * tick per interval, however long the stall, and the lease taken as Raft last saw it.
   */
  private catchUpTicks(): boolean {
    const due = Math.floor((this.monoMs - this.tickedToMono) / clusterLimits.tickMs);
    if (HostBugs.leaseOnStaleTicks) {
      if (due >= 1) this.runTicks(1, due);
      return true;
    }
    if (due <= 1) {
      if (due === 1) this.runTicks(1, 1);
      return true;
    }
    if (!this.catchUpPending) {
      this.catchUpPending = true;
      const inc = this.incarnation;
      this.w.at(this, this.w.nowMs, 'catch-up', () => {
        if (inc !== this.incarnation) return;
        this.catchUpPending = false;
        const late = Math.floor((this.monoMs - this.tickedToMono) / clusterLimits.tickMs);
        if (late > 0) this.runTicks(late, late);
        this.settle();
      });
    }
    return false;
  }

  private runTicks(ticks: number, due: number): void {
    this.tickedToMono += due * clusterLimits.tickMs;
    const n = Math.min(ticks, clusterLimits.catchUpTicksMax);
    for (const g of this.groups) {
      const k = n === 1 || g.role === 'leader' ? n : Math.min(n, stallLimits.followerCatchUpTicksMax);
      for (let i = 0; i < k; i++) g.raw.tick();
    }
    for (let i = 0; i < n; i++) if (++this.ticks % 20 === 0) this.expireProposals();
  }

  /** raft-host.ts leaseValid: the engine's check right before each send. */
  private leaseValid(shard: number): boolean {
    const g = this.groups[shard]!;
    return this.catchUpTicks() && g.lead.firing && g.raw.leaseValid();
  }

  /** The lease as the checker sees it: held only if the node could act on it now (no stale ticks). */
  holdsLease(shard: number): boolean {
    if (this.down || this.w.nowMs < this.pausedUntil) return false;
    const g = this.groups[shard]!;
    const stale = Math.floor((this.monoMs - this.tickedToMono) / clusterLimits.tickMs) > 1;
    return (HostBugs.leaseOnStaleTicks || !stale) && g.role === 'leader' && g.raw.leaseValid();
  }

  // ------------------------------------------------------------------ inputs

  step(m: Message): void {
    this.groups[m.group]!.raw.step(m);
    this.settle();
  }

  reportUnreachable(m: Message): void {
    const g = this.groups[m.group]!;
    g.raw.reportUnreachable(m.to);
    if (m.type === 'snapshot') g.raw.reportSnapshot(m.to, false);
  }

  reportSnapshot(m: Message, ok: boolean): void {
    this.groups[m.group]!.raw.reportSnapshot(m.to, ok);
  }

  /** A client operation; refused at once or answered later through NodeWorld.reply. */
  clientOp(opId: number, shard: number, command: Command): void {
    const refused = this.core.propose(opId, shard, command, this.wallMs);
    if (refused) this.w.reply(this, opId, false, null, refused);
    this.settle();
  }

  /** An operator's transfer-leader (or the rebalancer's) on this node's group. */
  transferLeader(shard: number, to: NodeId): boolean {
    const g = this.groups[shard]!;
    if (g.role !== 'leader') return false;
    g.raw.transferLeader(to);
    this.settle();
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
        const a = this.round();
        const b = this.pump();
        if (!a && !b) return;
      }
      fail('node_exception', `${this.id}: the shell did not settle in 1000 rounds`);
    } finally {
      this.settling = false;
    }
  }

  private round(): boolean {
    let worked = false;
    for (const g of this.groups) {
      for (let i = 0; i < 64 && g.raw.hasReady(); i++) {
        this.handleReady(g, g.raw.ready());
        worked = true;
      }
    }
    if (worked) this.roundsRun++;
    return worked;
  }

  /** The Ready contract of src/raft: persist, sync, send, apply, advance. */
  private handleReady(g: Group, rd: Ready): void {
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
    if (rd.mustSync) g.disk.sync();
    if (rd.softState) this.softState(g, rd);
    this.w.send(rd.messages);
    for (const e of rd.committedEntries) this.applyEntry(g, e);
    g.raw.advance();
    this.afterAdvance(g, rd);
  }

  private installSnapshot(g: Group, rd: Ready): void {
    const snap = rd.snapshot!;
    g.disk.applySnapshot(snap);
    const { store, hash } = decodeImage(snap.data, emptyStateHash);
    g.store = store;
    g.hash = hash;
    g.applied = snap.metadata.index;
    this.w.raft.restored(g.shard, this.id, g.applied, g.hash);
    for (const [index, p] of g.proposals) {
      if (index > g.applied) continue;
      g.proposals.delete(index);
      this.proposalFailed(p.ticket, 'snapshot_overtook');
    }
    this.w.event(`${this.id} s${g.shard} installs snapshot at ${g.applied}`);
  }

  /** raft-host.ts onSoftState. */
  private softState(g: Group, rd: Ready): void {
    const soft = rd.softState!;
    const wasLeader = g.role === 'leader';
    const status = g.raw.status();
    if (g.lead.softState(soft.role, soft.leader, status)) this.core.leaderStop(g.shard);
    if (!wasLeader && soft.role === 'leader' && this.w.raft.leaderElected(g.shard, status.term, this.id)) {
      this.w.raft.leaderComplete(g.shard, this.id, status.term, g.disk.lastIndex(), (i) => termOrNull(g, i));
    }
    this.w.event(`${this.id} s${g.shard} ${soft.role} term ${status.term} lead ${soft.leader}`);
  }

  /** raft-host.ts afterAdvance: a new term while leading, firing start, compaction and requested snapshots. */
  private afterAdvance(g: Group, rd: Ready): void {
    if (rd.hardState !== null && g.lead.hardTerm(rd.hardState.term, g.raw.status())) this.core.leaderStop(g.shard);
    const term = g.lead.caughtUp(g.applied);
    if (term !== null) this.core.leaderStart(g.shard, term, this.wallMs);
    if (rd.snapshotRequested || g.applied - g.disk.snapshot()!.metadata.index > 200) this.compact(g);
  }

  /** raft-host.ts applyEntry + deliver: apply, hand the command to the core, answer its proposer. */
  private applyEntry(g: Group, e: Entry): void {
    if (e.index <= g.applied) return;
    if (e.index !== g.applied + 1) fail('apply_gap', `shard ${g.shard} ${this.id} applied ${e.index} after ${g.applied}`);
    g.applied = e.index;
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
    if (command !== null && result !== null) this.core.applied(g.shard, command, result.effects, this.wallMs);
    const p = g.proposals.get(e.index);
    if (p === undefined) return;
    g.proposals.delete(e.index);
    if (p.term !== e.term) return this.proposalFailed(p.ticket, 'proposal_lost');
    if (result === null) return this.proposalFailed(p.ticket, 'proposal_refused');
    this.core.proposalDone(p.ticket, { ok: true, applied: { result: result.result, effects: result.effects } });
  }

  private proposalFailed(ticket: number, reason: FailureReason): void {
    this.w.event(`${this.id} proposal ${ticket} failed: ${reason}`);
    const result: ProposalResult = { ok: false, error: new PunctualError('unavailable', `proposal failed: ${reason}`, [], reason) };
    this.core.proposalDone(ticket, result);
  }

  private expireProposals(): void {
    const mono = this.monoMs;
    for (const g of this.groups) {
      for (const [index, p] of g.proposals) {
        if (p.deadlineMono > mono) continue;
        g.proposals.delete(index);
        this.proposalFailed(p.ticket, 'proposal_timeout');
      }
    }
  }

  private compact(g: Group): void {
    const snapIndex = g.disk.snapshot()!.metadata.index;
    if (g.applied <= snapIndex) return;
    g.disk.createSnapshot(g.applied as LogIndex, g.raw.confState(), encodeImage(g.store, g.hash));
    const upTo = g.applied - 50;
    if (upTo >= g.disk.firstIndex()) g.disk.compact(upTo as LogIndex);
  }

  /** Carries out one core.ready() (CoreShell pump). Returns whether it had any work. */
  private pump(): boolean {
    const rd: CoreReady = this.core.ready();
    let worked = false;
    for (const p of rd.propose) {
      worked = true;
      this.w.event(`${this.id} proposes ${p.ticket} ${p.command.type} to s${p.shard}`);
      const g = this.groups[p.shard]!;
      const r = g.raw.propose(encodeCommand(p.command));
      if (!r.ok) this.proposalFailed(p.ticket, r.reason === 'not_leader' ? 'not_leader' : 'proposal_refused');
      else g.proposals.set(r.index, { ticket: p.ticket, term: r.term, deadlineMono: this.monoMs + clusterLimits.proposalTimeoutMs });
    }
    // NodeShell: an order still waiting for its slot is refused when it gets it (admit); a started one reports as usual.
    for (const w of rd.withdraw) {
      worked = true;
      this.withdrawn.add(w.key);
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

  /** NodeShell.send: the order goes to the dispatcher at once, which starts it when its concurrency key has room. */
  private order(o: DispatchOrder): void {
    const st: OrderState = { order: o, started: false, queued: false };
    this.orders.set(o.key, st);
    this.w.scheduler.ordered({ node: this.id, key: o.key, jobId: o.jobId, scheduledAtMs: o.scheduledAtMs, attempt: o.attempt, dueAtMs: o.dueAtMs, nodeWallMs: this.wallMs });
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
  for (const x of Object.values(v)) deepFreeze(x);
  return Object.freeze(v);
}

function termOrNull(g: Group, i: LogIndex): number | null {
  if (i < g.disk.firstIndex() - 1 || i > g.disk.lastIndex()) return null;
  return g.disk.term(i);
}
