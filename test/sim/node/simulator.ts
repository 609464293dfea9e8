/**
 * The whole-node simulator: N nodes (3 or 5), each the production NodeCore behind a simulated shell (host.ts),
 * over a simulated network, disks, clocks and callback receivers, with a client workload; one Prng(seed) behind
 * every decision, events ordered by (true ms, insertion order), so a seed replays exactly. A safety phase injects
 * faults (loss, duplication, delay, partitions, crashes with torn writes, SIGSTOP pauses, wall-clock jumps,
 * leadership transfers); a liveness phase heals everything and must fire every due occurrence within the bound.
 * Raft's invariants (../checker.ts) and the scheduler's (invariants.ts) are checked as events happen.
 */
import { PunctualError } from '../../../src/core/errors.js';
import { shardOf } from '../../../src/core/ids.js';
import { silentLogger } from '../../../src/core/log.js';
import { Prng } from '../../../src/core/prng.js';
import type { NodeCoreDeps } from '../../../src/nodecore/types.js';
import { HostBugs, RaftBugs, resetHostBugs, resetRaftBugs } from '../../../src/raft/bugs.js';
import type { HostBugName, RaftBugName } from '../../../src/raft/bugs.js';
import type { Message, NodeId } from '../../../src/raft/index.js';
import type { Command } from '../../../src/scheduler/commands.js';
import type { CommandResult } from '../../../src/scheduler/machine.js';
import { Checker, SimViolation, fail } from '../checker.js';
import type { SeedResult } from '../simulator.js';
import { Trace } from '../trace.js';
import { NodeClock } from './clock.js';
import { FedCore } from './fed-core.js';
import { EventQueue } from './events.js';
import { SimNode } from './host.js';
import type { NodeWorld } from './host.js';
import { SchedulerChecker } from './invariants.js';
import type { NodeSimOptions, NodeSimParams } from './params.js';
import { deriveNodeParams } from './params.js';
import { SimReceivers } from './receivers.js';
import { Workload, jobPatchOf, jobSpecOf } from './workload.js';
import type { ClientOp, OpRecord } from './workload.js';

/** The simulation's epoch: 2027-01-15T08:00:00Z (true time 0 of a run is this instant). */
const epochMs = Date.UTC(2027, 0, 15, 8, 0, 0);
/** A client gives up on an answer after this long (the outcome is then unknown). */
const clientTimeoutMs = 5_000;

/** `dropped`: what happens instead when the event's node is down when it comes due (a snapshot's sender learns it failed). */
type Ev = { readonly node: SimNode | null; readonly what: string; readonly fn: () => void; readonly dropped?: () => void };

export class NodeSimulator implements NodeWorld {
  readonly rand: Prng;
  readonly params: NodeSimParams;
  readonly stageLeadMs: number;
  readonly raft: Checker;
  readonly scheduler: SchedulerChecker;
  readonly receivers: SimReceivers;
  readonly trace: Trace;
  readonly nodes: SimNode[] = [];
  readonly workload: Workload;
  readonly digestEvery = 64;
  readonly logger = silentLogger;
  readonly makeCore = (deps: NodeCoreDeps): FedCore => new FedCore(deps);
  nowMs = epochMs;
  private readonly queue = new EventQueue<Ev>();
  private readonly netRand: Prng;
  private readonly blocked = new Set<string>();
  private healthy = false;
  private readonly pendingOps = new Map<number, { rec: OpRecord; node: SimNode }>();
  events = 0;
  messages = 0;
  faults = 0;
  private healedAtMs = 0;

  constructor(readonly options: NodeSimOptions) {
    this.rand = new Prng(options.seed);
    this.params = deriveNodeParams(this.rand, options);
    this.stageLeadMs = this.params.stageLeadMs;
    this.netRand = this.rand.fork();
    this.raft = new Checker(options.shards, 1);
    this.scheduler = new SchedulerChecker(options.shards);
    this.receivers = new SimReceivers(this.rand.fork(), this.params.receivers);
    this.workload = new Workload(this.rand.fork(), this.params.receivers);
    this.trace = new Trace(options.trace);
    const ids = Array.from({ length: this.params.nodes }, (_, i) => `n${i + 1}` as NodeId);
    for (const id of ids) {
      const drift = this.params.driftMax * (2 * this.rand.nextFloat() - 1);
      const clock = new NodeClock(this.nowMs, drift, this.rand.int(41) - 20);
      this.nodes.push(new SimNode(id, clock, this.rand.fork(), ids, options.shards, this));
    }
  }

  run(): SeedResult {
    let violation: SeedResult['violation'] = null;
    setBug(this.options.bug, true);
    try {
      for (const n of this.nodes) n.start();
      this.scheduleFaults();
      this.scheduleOps(epochMs + this.options.safetyMs + this.options.livenessMs - this.options.boundMs);
      this.runUntil(epochMs + this.options.safetyMs);
      this.heal();
      this.runUntil(this.healedAtMs + this.options.livenessMs);
      this.finish();
    } catch (err) {
      violation = toViolation(err, this.nowMs - epochMs);
      this.trace.text(`violation ${violation.kind}: ${violation.message}`, this.nowMs - epochMs);
    } finally {
      setBug(this.options.bug, false);
    }
    return {
      seed: this.options.seed,
      nodes: this.params.nodes,
      groups: this.options.shards,
      steps: this.events,
      messages: this.messages,
      faults: this.faults,
      elections: this.raft.elections(),
      commits: this.raft.commits,
      acked: this.workload.ops.filter((o) => o.outcome === 'ok').length,
      violation,
      traceHash: this.trace.hash(),
      trace: this.trace.lines,
    };
  }

  // ------------------------------------------------------------------ the event loop (NodeWorld)

  at(node: SimNode | null, atMs: number, what: string, fn: () => void): void {
    this.queue.push(Math.max(atMs, this.nowMs), { node, what, fn });
  }

  private runUntil(endMs: number): void {
    for (;;) {
      const next = this.queue.peekMs();
      if (next === null || next > endMs) break;
      const item = this.queue.popDue(next)!;
      this.nowMs = item.atMs;
      const n = item.event.node;
      if (n !== null && n.down) {
        item.event.dropped?.();
        continue;
      }
      if (n !== null && this.nowMs < n.pausedUntil) {
        // SIGSTOP: nothing of the process runs; what was due waits for SIGCONT, in its order.
        this.queue.push(n.pausedUntil, item.event);
        continue;
      }
      this.events++;
      item.event.fn();
      if (this.options.leaseInvariant) this.checkLeases();
    }
    this.nowMs = endMs;
  }

  /** At most one node of a shard may act on a lease; only leaders hold one, so shards with one leader are skipped. */
  private checkLeases(): void {
    for (let s = 0; s < this.options.shards; s++) {
      let leaders = 0;
      for (const n of this.nodes) if (!n.down && n.groups[s]!.role === 'leader') leaders++;
      if (leaders < 2) continue;
      // Two leaders are common (a deposed one that has not heard yet): count first, name them only to fail.
      let holders = 0;
      for (const n of this.nodes) if (n.holdsLease(s)) holders++;
      if (holders > 1) this.raft.leases(s, this.nodes.filter((n) => n.holdsLease(s)).map((n) => n.id));
    }
  }

  event(what: string): void {
    this.trace.text(what, this.nowMs - epochMs);
  }

  // ------------------------------------------------------------------ network

  send(messages: readonly Message[]): void {
    for (const m of messages) {
      this.messages++;
      const from = this.node(m.from);
      if (this.isBlocked(m)) {
        from.reportUnreachable(m);
        continue;
      }
      const r = this.netRand;
      const p = this.params;
      if (!this.healthy && r.nextFloat() < p.dropRate) {
        // Lost silently, except a snapshot: the real transport streams it in a request whose failure the sender
        // sees (PeerTransport reports it), and the leader then probes that follower again.
        if (m.type === 'snapshot') this.at(from, this.nowMs + p.delayMaxMs, 'snapshot-failed', () => from.reportSnapshot(m, false));
        continue;
      }
      const copies = !this.healthy && r.nextFloat() < p.dupRate ? 2 : 1;
      for (let c = 0; c < copies; c++) {
        const long = !this.healthy && r.nextFloat() < p.longDelayRate;
        const delay = 1 + r.int(long ? p.longDelayMaxMs : p.delayMaxMs);
        // A snapshot that reaches a node that is down fails at the sender, as the real transport's stream does (the
        // connection refused or reset): without the report the leader would wait for it for ever.
        const dropped = m.type === 'snapshot' ? () => this.at(from, this.nowMs, 'snapshot-failed', () => from.reportSnapshot(m, false)) : undefined;
        this.queue.push(this.nowMs + delay, { node: this.node(m.to), what: 'deliver', fn: () => this.deliver(m), dropped });
      }
    }
  }

  private deliver(m: Message): void {
    const from = this.node(m.from);
    if (this.isBlocked(m)) {
      if (!from.down) from.reportUnreachable(m);
      return;
    }
    this.trace.message(m, this.nowMs - epochMs);
    this.node(m.to).step(m);
    if (m.type === 'snapshot' && !from.down) from.reportSnapshot(m, true);
  }

  /** The message's link is cut (no partition: no link name to build). */
  private isBlocked(m: Message): boolean {
    return this.blocked.size > 0 && this.blocked.has(`${m.from}>${m.to}`);
  }

  private node(id: string): SimNode {
    return this.nodes[Number(id.slice(1)) - 1]!;
  }

  // ------------------------------------------------------------------ clients

  private scheduleOps(untilMs: number): void {
    const next = this.nowMs + 1 + this.rand.int(2 * this.params.opEveryMs);
    if (next > untilMs) return;
    this.at(null, next, 'client', () => {
      this.clientOp();
      this.scheduleOps(untilMs);
    });
  }

  private clientOp(): void {
    const op = this.workload.next(this.nowMs);
    const shard = shardOf(op.jobId, this.options.shards);
    const leader = this.nodes.find((n) => n.isLeader(shard));
    const node = leader && this.rand.nextFloat() < 0.85 ? leader : this.nodes[this.rand.int(this.nodes.length)]!;
    const rec = this.workload.record(op, node.id, this.nowMs);
    if (op.kind === 'create') this.scheduler.submittedJob(op.jobId);
    this.scheduler.opIssued(rec, clientTimeoutMs);
    this.pendingOps.set(rec.seq, { rec, node });
    this.at(null, this.nowMs + clientTimeoutMs, 'client-timeout', () => {
      if (rec.outcome === 'pending') rec.outcome = 'unknown';
      this.pendingOps.delete(rec.seq);
    });
    this.event(`op ${rec.seq} ${op.kind} ${op.jobId} via ${node.id}`);
    if (node.down) return;
    this.at(node, this.nowMs + 1, 'op', () => {
      if (rec.outcome !== 'pending') return;
      node.clientOp(rec.seq, shard, this.command(op, shard, node.wallMs));
    });
  }

  private command(op: ClientOp, shard: number, nowMs: number): Command {
    switch (op.kind) {
      case 'create':
        return { type: 'create_jobs', nowMs, shard, jobs: [jobSpecOf(op, nowMs)] };
      case 'cancel':
        return { type: 'cancel_job', nowMs, id: op.jobId };
      case 'pause':
        return { type: 'pause_job', nowMs, id: op.jobId };
      case 'resume':
        return { type: 'resume_job', nowMs, id: op.jobId };
      case 'run':
        return { type: 'run_job', nowMs, id: op.jobId, runKey: op.runKey };
      case 'patch':
        return { type: 'patch_job', nowMs, id: op.jobId, patch: jobPatchOf(op, nowMs), afterFired: true };
    }
  }

  reply(node: SimNode, opId: number, ok: boolean, result: unknown, error: PunctualError | null): void {
    const p = this.pendingOps.get(opId);
    if (!p || p.node !== node || p.rec.outcome !== 'pending') return;
    this.pendingOps.delete(opId);
    const rec = p.rec;
    rec.ackMs = this.nowMs;
    if (!ok) {
      rec.outcome = error !== null && error.reason === null ? 'refused' : 'unknown';
      rec.reason = error?.reason ?? error?.code ?? 'error';
      return;
    }
    const r = result as CommandResult;
    const accepted = r.type === 'create_jobs' ? r.items[0]?.ok === true : 'result' in r && (r.result as { ok: boolean }).ok;
    rec.outcome = accepted ? 'ok' : 'refused';
    if (accepted && r.type === 'run_job' && r.result.ok) rec.runAtMs = r.result.runAtMs;
    if (accepted) this.scheduler.acknowledged(rec);
    this.event(`ack ${rec.op.kind} ${rec.op.jobId} via ${node.id}: ${rec.outcome}`);
  }

  // ------------------------------------------------------------------ faults

  private every(mean: number | null, what: string, fn: () => void): void {
    if (mean === null) return;
    const next = this.nowMs + 1 + this.rand.int(2 * mean);
    if (next >= epochMs + this.options.safetyMs) return;
    this.at(null, next, what, () => {
      if (this.healthy) return;
      fn();
      this.every(mean, what, fn);
    });
  }

  private scheduleFaults(): void {
    const p = this.params;
    this.every(p.crashEveryMs, 'crash', () => this.crash());
    this.every(p.pauseEveryMs, 'pause', () => this.pause());
    this.every(p.partitionEveryMs, 'partition', () => this.partition());
    this.every(p.jumpEveryMs, 'jump', () => this.jump());
    if (this.options.transfers) this.every(p.transferEveryMs, 'transfer', () => this.transfer());
  }

  private fault(what: string): void {
    this.faults++;
    this.event(what);
  }

  /** A node to hit: a leader of some shard with probability leaderBias, else any running node. */
  private victim(): SimNode | null {
    const up = this.nodes.filter((n) => !n.down && this.nowMs >= n.pausedUntil);
    if (up.length === 0) return null;
    const leaders = up.filter((n) => n.groups.some((g) => g.role === 'leader'));
    if (leaders.length > 0 && this.rand.nextFloat() < this.params.leaderBias) return leaders[this.rand.int(leaders.length)]!;
    return up[this.rand.int(up.length)]!;
  }

  private crash(): void {
    const n = this.victim();
    if (!n) return;
    const lost = n.crash(this.params.tornRate);
    const downMs = 1 + this.rand.int(this.params.downMaxMs);
    this.fault(`crash ${n.id} (lost ${lost} unsynced writes) for ${downMs} ms`);
    this.at(null, this.nowMs + downMs, 'restart', () => {
      if (!n.down) return;
      this.event(`restart ${n.id}`);
      n.start();
    });
  }

  private pause(): void {
    const n = this.victim();
    if (!n) return;
    const ms = 1 + this.rand.int(this.params.pauseMaxMs);
    n.pausedUntil = this.nowMs + ms;
    this.fault(`SIGSTOP ${n.id} for ${ms} ms`);
  }

  private partition(): void {
    const r = this.rand;
    const ids = this.nodes.map((n) => n.id);
    const kind = r.int(3);
    if (kind === 0) {
      const side = new Set(ids.filter(() => r.nextFloat() < 0.5));
      if (side.size === 0 || side.size === ids.length) side.add(ids[r.int(ids.length)]!);
      for (const a of ids) for (const b of ids) if (side.has(a) !== side.has(b)) this.blocked.add(`${a}>${b}`);
    } else if (kind === 1) {
      const from = ids[r.int(ids.length)]!;
      for (const to of ids) if (to !== from && r.nextFloat() < 0.7) this.blocked.add(r.int(2) === 0 ? `${from}>${to}` : `${to}>${from}`);
    } else {
      const v = this.victim()?.id ?? ids[0]!;
      for (const b of ids) if (b !== v) (this.blocked.add(`${v}>${b}`), this.blocked.add(`${b}>${v}`));
    }
    const ms = 1 + r.int(this.params.partitionMaxMs);
    const links = [...this.blocked];
    this.fault(`partition kind ${kind}: ${links.join(' ')} for ${ms} ms`);
    this.at(null, this.nowMs + ms, 'heal-partition', () => {
      for (const l of links) this.blocked.delete(l);
      this.event('partition healed');
    });
  }

  private jump(): void {
    const n = this.nodes[this.rand.int(this.nodes.length)]!;
    const delta = (this.rand.nextFloat() < 0.5 ? -1 : 1) * (1 + this.rand.int(this.params.jumpMaxMs));
    n.clock.jump(delta);
    this.fault(`wall clock of ${n.id} jumps ${delta} ms`);
  }

  /** transfer-leader to another voter; half the time the target's links drop for a while (timeout_now may be lost). */
  private transfer(): void {
    const shard = this.rand.int(this.options.shards);
    const leader = this.nodes.find((n) => n.isLeader(shard) && this.nowMs >= n.pausedUntil);
    if (!leader) return;
    const others = this.nodes.filter((n) => n !== leader);
    const to = others[this.rand.int(others.length)]!;
    const cut = this.rand.nextFloat() < 0.5;
    this.fault(`transfer shard ${shard} ${leader.id} -> ${to.id}${cut ? ' (target cut off)' : ''}`);
    if (cut) {
      const links = [`${leader.id}>${to.id}`, `${to.id}>${leader.id}`].filter((l) => !this.blocked.has(l));
      for (const l of links) this.blocked.add(l);
      this.at(null, this.nowMs + 500 + this.rand.int(1500), 'heal-cut', () => {
        for (const l of links) this.blocked.delete(l);
      });
    }
    leader.transferLeader(shard, to.id);
  }

  // ------------------------------------------------------------------ liveness

  private heal(): void {
    this.healthy = true;
    this.blocked.clear();
    this.receivers.healthy = true;
    for (const n of this.nodes) {
      n.clock.resync(this.rand.int(21) - 10);
      if (n.down) n.start();
      n.pausedUntil = 0;
    }
    this.healedAtMs = this.nowMs;
    this.event('heal all');
  }

  /** Every shard applied to the same index everywhere (given time), then the final checks. */
  private finish(): void {
    const capMs = this.nowMs + 20_000;
    while (!this.converged()) {
      if (this.nowMs >= capMs) {
        const applied = this.nodes.map((n) => `${n.id}:${n.groups.map((g) => g.applied).join('/')}`).join(' ');
        fail('liveness', `replicas did not converge 20 s after the liveness phase: applied ${applied}`);
      }
      this.runUntil(this.nowMs + 500);
    }
    const stores = this.nodes.map((n) => ({ id: n.id, stores: n.groups.map((g) => g.store) }));
    this.scheduler.checkFinal(stores, this.nowMs - 10, this.options.boundMs, this.healedAtMs);
  }

  private converged(): boolean {
    for (let s = 0; s < this.options.shards; s++) {
      const a = this.nodes[0]!.groups[s]!.applied;
      if (this.nodes.some((n) => n.groups[s]!.applied !== a)) return false;
      if (!this.nodes.some((n) => n.isLeader(s))) return false;
    }
    return true;
  }
}

export function runNodeSeed(options: NodeSimOptions): SeedResult {
  return new NodeSimulator(options).run();
}

function setBug(bug: string | null, on: boolean): void {
  if (bug === null) return;
  if (!on) {
    resetRaftBugs();
    resetHostBugs();
    return;
  }
  if (bug in RaftBugs) RaftBugs[bug as RaftBugName] = true;
  else if (bug in HostBugs) HostBugs[bug as HostBugName] = true;
  else throw new Error(`no such bug switch: ${bug}`);
}

function toViolation(err: unknown, atMs: number): NonNullable<SeedResult['violation']> {
  if (err instanceof SimViolation) return { kind: err.kind, message: err.message, step: atMs };
  const e = err instanceof Error ? err : new Error(String(err));
  return { kind: 'node_exception', message: `${e.name}: ${e.message} ${e.stack?.split('\n').slice(1, 4).join(' ') ?? ''}`, step: atMs };
}
