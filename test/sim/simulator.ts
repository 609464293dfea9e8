/**
 * The seeded whole-cluster simulator: N nodes x G Raft groups, one Prng(seed) behind every decision (network,
 * disks, clocks, faults, workload), so a seed replays exactly. A safety phase injects faults; a liveness phase
 * heals everything and must commit every proposal made after healing. Invariants: checker.ts.
 */
import { Prng } from '../../src/core/prng.js';
import { RaftBugs, resetRaftBugs } from '../../src/raft/index.js';
import type { Entry, LogIndex, Message, NodeId, Ready, Term } from '../../src/raft/index.js';
import { Checker, SimViolation, fail, nextStateHash } from './checker.js';
import type { ViolationKind } from './checker.js';
import { SimNetwork } from './network.js';
import type { SimOptions, SimParams } from './params.js';
import { deriveParams, ticksPerStep } from './params.js';
import { Replica, decodeState } from './replica.js';
import { Trace } from './trace.js';

export interface SeedResult {
  readonly seed: number;
  readonly nodes: number;
  readonly groups: number;
  readonly steps: number;
  readonly messages: number;
  readonly faults: number;
  readonly elections: number;
  readonly commits: number;
  readonly acked: number;
  readonly violation: { readonly kind: ViolationKind; readonly message: string; readonly step: number } | null;
  /** A hash of the event trace: equal for equal seeds and options. */
  readonly traceHash: string;
  readonly trace: readonly string[];
}

interface SimNode {
  readonly id: NodeId;
  readonly index: number;
  /** Ticks per step (drift around ticksPerStep). */
  readonly rate: number;
  phase: number;
  down: boolean;
  /** Step at which a down node restarts or a paused one resumes. */
  downUntil: number;
  pausedUntil: number;
  readonly replicas: Replica[];
}

interface Pending {
  readonly id: string;
  readonly node: NodeId;
  readonly incarnation: number;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

export class Simulator {
  readonly rand: Prng;
  readonly params: SimParams;
  readonly net: SimNetwork;
  readonly checker: Checker;
  readonly trace: Trace;
  readonly nodes: SimNode[] = [];
  step = 0;
  faults = 0;
  private proposalSeq = 0;
  /** Per group: proposals accepted by a leader, by "index:term", until the proposer applies that slot. */
  private readonly pending: Map<string, Pending>[] = [];
  /** Ids acknowledged to the client (the proposer applied them). */
  readonly acked = new Set<string>();
  private readonly knownLeader: (NodeId | null)[] = [];
  private partitionUntil = -1;
  /** Nodes that reboot at the start of the next step (they just granted a vote). */
  private readonly rebootNext: SimNode[] = [];

  constructor(readonly options: SimOptions) {
    this.rand = new Prng(options.seed);
    this.params = deriveParams(this.rand, options);
    this.net = new SimNetwork(this.rand.fork(), this.params);
    this.checker = new Checker(options.groups, 1);
    this.trace = new Trace(options.trace);
    const ids = Array.from({ length: this.params.nodes }, (_, i) => `n${i + 1}` as NodeId);
    const bootstrap = { voters: ids, learners: [] };
    for (let g = 0; g < options.groups; g++) {
      this.pending.push(new Map());
      this.knownLeader.push(null);
    }
    ids.forEach((id, index) => {
      const drift = this.params.driftMax * (2 * this.rand.nextFloat() - 1);
      const replicas = Array.from({ length: options.groups }, (_, g) => new Replica(id, g, bootstrap));
      const node: SimNode = { id, index, rate: ticksPerStep * (1 + drift), phase: 0, down: false, downUntil: 0, pausedUntil: 0, replicas };
      for (const r of replicas) r.start(this.params, this.rand.fork());
      this.nodes.push(node);
    });
  }

  /** Runs both phases; returns the result (with the first violation, if any). */
  run(): SeedResult {
    let violation: SeedResult['violation'] = null;
    if (this.options.bug) RaftBugs[this.options.bug] = true;
    try {
      for (; this.step < this.options.steps; this.step++) this.safetyStep();
      this.liveness();
    } catch (err) {
      violation = toViolation(err, this.step);
      this.trace.event(`violation ${violation.kind}: ${violation.message}`, 99, this.step);
    } finally {
      if (this.options.bug) resetRaftBugs();
    }
    return this.result(violation);
  }

  private result(violation: SeedResult['violation']): SeedResult {
    return {
      seed: this.options.seed,
      nodes: this.params.nodes,
      groups: this.options.groups,
      steps: this.step,
      messages: this.net.stats.sent,
      faults: this.faults + this.net.stats.dropped + this.net.stats.duplicated + this.net.stats.delayed,
      elections: this.checker.elections(),
      commits: this.checker.commits,
      acked: this.acked.size,
      violation,
      traceHash: this.trace.hash(),
      trace: this.trace.lines,
    };
  }

  private safetyStep(): void {
    this.injectFaults();
    this.endFaults();
    this.workload();
    this.advance();
  }

  /** Clocks, deliveries, Readies, then the per-step checks. */
  advance(): void {
    this.tickClocks();
    this.deliver();
    this.processReadies();
    this.checkLeases();
  }

  // ------------------------------------------------------------------ faults

  private injectFaults(): void {
    const p = this.params;
    const r = this.rand;
    for (const n of this.rebootNext.splice(0)) this.crashSome(1 + r.int(3), n);
    if (r.nextFloat() < p.crashRate) this.crashSome(1 + r.int(p.downMaxSteps));
    if (r.nextFloat() < p.rebootRate) this.crashSome(1 + r.int(3));
    if (r.nextFloat() < p.pauseRate) {
      const n = this.pickUp();
      if (n) {
        n.pausedUntil = this.step + 1 + r.int(p.pauseMaxSteps);
        this.fault(`pause ${n.id} until ${n.pausedUntil}`, 1, n.index);
      }
    }
    if (this.partitionUntil < 0 && r.nextFloat() < p.partitionRate) this.partition();
  }

  private crashSome(downSteps: number, victim?: SimNode): void {
    const leader = this.someLeader();
    const n = victim ?? (leader && this.rand.nextFloat() < this.params.leaderCrashBias ? this.nodes[nodeIndex(leader)]! : this.pickUp());
    if (!n || n.down) return;
    let lost = 0;
    for (const rep of n.replicas) lost += rep.crash(this.rand, this.params.tornRate);
    n.down = true;
    n.downUntil = this.step + downSteps;
    this.fault(`crash ${n.id} (lost ${lost} unsynced writes) until ${n.downUntil}`, 2, n.index);
  }

  private partition(): void {
    const r = this.rand;
    const until = this.step + 1 + r.int(this.params.partitionMaxSteps);
    const kind = r.int(3);
    const ids = this.nodes.map((n) => n.id);
    if (kind === 0) {
      // Symmetric split: a random non-empty minority or majority on one side.
      const side = new Set(ids.filter(() => r.nextFloat() < 0.5));
      if (side.size === 0 || side.size === ids.length) side.add(ids[r.int(ids.length)]!);
      for (const a of ids) for (const b of ids) if (side.has(a) !== side.has(b)) this.net.block(a, b);
    } else if (kind === 1) {
      // One-way: some links lose messages in one direction only.
      const from = ids[r.int(ids.length)]!;
      for (const to of ids) if (to !== from && r.nextFloat() < 0.7) this.net.block(r.int(2) === 0 ? from : to, r.int(2) === 0 ? to : from);
    } else {
      const leader = this.someLeader() ?? ids[r.int(ids.length)]!;
      for (const b of ids) if (b !== leader) (this.net.block(leader, b), this.net.block(b, leader));
    }
    if (this.net.blockedCount() === 0) return;
    this.partitionUntil = until;
    this.fault(`partition kind ${kind}, ${this.net.blockedCount()} links, until ${until}`, 3, kind);
  }

  private endFaults(): void {
    if (this.partitionUntil >= 0 && this.step >= this.partitionUntil) {
      this.net.unblockAll();
      this.partitionUntil = -1;
      this.trace.event('heal partition', 4, this.step);
    }
    for (const n of this.nodes) if (n.down && this.step >= n.downUntil) this.restart(n);
  }

  private restart(n: SimNode): void {
    n.down = false;
    n.phase = 0;
    n.pausedUntil = 0;
    for (const rep of n.replicas) rep.start(this.params, this.rand.fork());
    this.trace.event(`restart ${n.id}`, 5, n.index);
  }

  private fault(what: string, code: number, arg: number): void {
    this.faults++;
    this.trace.event(what, code, arg);
  }

  private pickUp(): SimNode | null {
    const up = this.nodes.filter((n) => !n.down);
    return up.length > 0 ? up[this.rand.int(up.length)]! : null;
  }

  private someLeader(): NodeId | null {
    for (const n of this.nodes) for (const rep of n.replicas) if (!n.down && rep.role === 'leader') return n.id;
    return null;
  }

  // ------------------------------------------------------------------ clocks and network

  private tickClocks(): void {
    for (const n of this.nodes) {
      if (n.down) continue;
      n.phase += n.rate;
      // A paused process gets no ticks; on resume its host catches up the ticks its clock says it missed.
      if (this.step < n.pausedUntil) continue;
      while (n.phase >= 1) {
        n.phase -= 1;
        for (const rep of n.replicas) rep.raw!.tick();
      }
    }
  }

  private deliver(): void {
    for (let f = this.net.nextDue(this.step); f; f = this.net.nextDue(this.step)) {
      const m = f.event;
      const to = this.nodes[nodeIndex(m.to)]!;
      if (to.down || this.net.isBlocked(m.from, m.to)) {
        this.net.stats.dropped++;
        this.report(m, 'blocked');
        continue;
      }
      if (this.step < to.pausedUntil) {
        this.net.hold(f, to.pausedUntil);
        continue;
      }
      this.net.stats.delivered++;
      this.trace.message(m, this.step);
      to.replicas[m.group]!.raw!.step(m);
      if (m.type === 'snapshot') this.report(m, 'sent');
    }
  }

  private send(msgs: readonly Message[]): void {
    for (const m of msgs) {
      const outcome = this.net.send(m, this.step);
      if (outcome !== 'sent') this.report(m, outcome);
    }
  }

  /**
   * What the transport tells the sender's Raft: a broken link is reported unreachable (a refused connection
   * is visible), a silent loss is not; a snapshot stream always learns whether it finished.
   */
  private report(m: Message, outcome: 'sent' | 'blocked' | 'lost'): void {
    const from = this.nodes[nodeIndex(m.from)]!;
    if (from.down) return;
    const raw = from.replicas[m.group]!.raw!;
    if (outcome === 'blocked') raw.reportUnreachable(m.to);
    if (m.type === 'snapshot') raw.reportSnapshot(m.to, outcome === 'sent');
  }

  // ------------------------------------------------------------------ the host: Ready

  private processReadies(): void {
    for (const n of this.nodes) {
      if (n.down || this.step < n.pausedUntil) continue;
      for (const rep of n.replicas) {
        for (let i = 0; i < 16 && rep.raw!.hasReady(); i++) this.handleReady(rep);
        if (this.rand.nextFloat() < this.params.compactRate) rep.compact(this.params.compactKeep);
      }
    }
  }

  /** Persist, sync, send, apply, advance: the order the Ready contract gives (src/raft/types.ts). */
  private handleReady(rep: Replica): void {
    const raw = rep.raw!;
    const rd = raw.ready();
    if (rd.snapshot) this.installSnapshot(rep, rd);
    this.persistEntries(rep, rd.entries);
    if (rd.hardState) {
      const h = rd.hardState;
      if (rep.role === 'leader' && rd.softState === null && h.term === rep.term && h.commit > rep.commit) {
        this.checker.leaderCommitted(rep.group, rep.node, h.term, h.commit, termOrNull(rep, h.commit));
      }
      this.checker.commitMoved(rep.group, rep.node, rep.commit, rd.hardState.commit, 'ready');
      this.checker.commitKnown(rep.group, rep.commit, rd.hardState.commit, rd.hardState.term);
      rep.commit = rd.hardState.commit;
      rep.term = rd.hardState.term;
      rep.disk.setHardState(rd.hardState);
    }
    if (rd.mustSync || this.rand.nextFloat() < this.params.lazySyncRate) rep.disk.sync();
    if (rd.softState) this.roleChanged(rep, rd);
    if (rep.role === 'leader' && this.checker.leaderElected(rep.group, rep.term as Term, rep.node)) this.newLeader(rep);
    this.send(rd.messages);
    if (!this.net.healthy && this.params.voteCrashRate > 0 && grantsVote(rd) && this.rand.nextFloat() < this.params.voteCrashRate) {
      this.rebootNext.push(this.nodes[nodeIndex(rep.node)]!);
    }
    for (const e of rd.committedEntries) this.apply(rep, e);
    raw.advance();
    if (rd.snapshotRequested) rep.compact(this.params.compactKeep);
  }

  private installSnapshot(rep: Replica, rd: Ready): void {
    const s = rd.snapshot!;
    rep.disk.applySnapshot(s);
    rep.smIndex = s.metadata.index;
    rep.smHash = decodeState(s);
    this.checker.restored(rep.group, rep.node, rep.smIndex, rep.smHash);
    this.trace.event(`${rep.node} g${rep.group} installs snapshot at ${rep.smIndex}`, 6, rep.smIndex);
  }

  /** Log matching: each entry registers its content and its predecessor's term before it is written. */
  private persistEntries(rep: Replica, entries: readonly Entry[]): void {
    if (entries.length === 0) return;
    let prevTerm = termOrNull(rep, (entries[0]!.index - 1) as LogIndex);
    for (const e of entries) {
      if (prevTerm !== null) this.checker.entryLogged(rep.group, rep.node, e, prevTerm);
      prevTerm = e.term;
    }
    rep.disk.append(entries);
  }

  private roleChanged(rep: Replica, rd: Ready): void {
    rep.role = rd.softState!.role;
    rep.lead = rd.softState!.leader;
    if (rep.lead !== '') this.knownLeader[rep.group] = rep.lead;
    this.trace.event(`${rep.node} g${rep.group} ${rep.role} term ${rep.term} lead ${rep.lead}`, 7, rep.term);
  }

  private newLeader(rep: Replica): void {
    this.checker.leaderComplete(rep.group, rep.node, rep.term, rep.disk.lastIndex(), (i) => termOrNull(rep, i));
  }

  private apply(rep: Replica, e: Entry): void {
    if (e.index !== rep.smIndex + 1) fail('apply_gap', `group ${rep.group} ${rep.node} applied ${e.index} after ${rep.smIndex}`);
    rep.smIndex = e.index;
    rep.smHash = nextStateHash(rep.smHash, e.term, e.crc);
    this.checker.applied(rep.group, rep.node, e, rep.smHash);
    this.trace.apply(rep.group, e);
    const slot = `${e.index}:${e.term}`;
    const p = this.pending[rep.group]!.get(slot);
    if (!p || p.node !== rep.node || p.incarnation !== rep.incarnation) return;
    this.pending[rep.group]!.delete(slot);
    const data = dec.decode(e.data);
    if (data !== p.id) fail('acked_proposal_lost', `group ${rep.group}: proposal ${p.id} accepted at ${slot}, applied ${data || 'a no-op'}`);
    this.acked.add(p.id);
  }

  private checkLeases(): void {
    for (let g = 0; g < this.options.groups; g++) {
      const holders: NodeId[] = [];
      for (const n of this.nodes) {
        // A paused process cannot act on its lease; it catches up its ticks before doing anything else.
        if (n.down || this.step < n.pausedUntil) continue;
        const rep = n.replicas[g]!;
        if (rep.role === 'leader' && rep.raw!.leaseValid()) holders.push(n.id);
      }
      this.checker.leases(g, holders);
    }
  }

  // ------------------------------------------------------------------ workload

  private workload(): void {
    for (let g = 0; g < this.options.groups; g++) {
      if (this.rand.nextFloat() < this.params.proposeRate) this.propose(g, `p${g}.${++this.proposalSeq}`);
    }
  }

  /** A client sends `id` to the node it believes leads the group (or any node). True if a leader took it. */
  propose(group: number, id: string): boolean {
    const guess = this.knownLeader[group];
    const pick = guess && this.rand.nextFloat() < 0.8 ? nodeIndex(guess) : this.rand.int(this.nodes.length);
    const n = this.nodes[pick]!;
    if (n.down || this.step < n.pausedUntil) return false;
    const rep = n.replicas[group]!;
    const res = rep.raw!.propose(enc.encode(id));
    if (!res.ok) return false;
    this.pending[group]!.set(`${res.index}:${res.term}`, { id, node: n.id, incarnation: rep.incarnation });
    return true;
  }

  // ------------------------------------------------------------------ liveness

  /** Heals everything, proposes a few entries per group, and requires all of them committed and applied everywhere. */
  private liveness(): void {
    this.heal();
    const want: { group: number; id: string; lastTry: number }[] = [];
    for (let g = 0; g < this.options.groups; g++) {
      for (let k = 0; k < 3; k++) want.push({ group: g, id: `live${g}.${k}`, lastTry: -1e9 });
    }
    // The budget is livenessSteps without progress (a slow config may have a long backlog to replicate).
    let idleSince = this.step;
    let progress = this.appliedSum();
    const cap = this.step + 20 * this.options.livenessSteps;
    for (; this.step - idleSince < this.options.livenessSteps && this.step < cap; this.step++) {
      for (const w of want) {
        // A client retries with the same id when no answer came in time (a deposed leader may drop it).
        if (this.acked.has(w.id) || this.step - w.lastTry < 40) continue;
        if (this.propose(w.group, w.id)) w.lastTry = this.step;
      }
      this.advance();
      if (want.every((w) => this.acked.has(w.id)) && this.converged()) return;
      const now = this.appliedSum();
      if (now !== progress) (progress = now), (idleSince = this.step);
    }
    const missing = want.filter((w) => !this.acked.has(w.id)).map((w) => w.id);
    const applied = this.nodes.map((n) => `${n.id}:${n.replicas.map((r) => r.smIndex).join('/')}`).join(' ');
    fail('liveness', `no progress for ${this.options.livenessSteps} healed steps: unacknowledged [${missing.join(', ')}], applied ${applied}`);
  }

  private heal(): void {
    this.net.unblockAll();
    this.net.healthy = true;
    this.partitionUntil = -1;
    for (const n of this.nodes) {
      if (n.down) this.restart(n);
      n.pausedUntil = 0;
    }
    this.trace.event('heal all', 8, this.step);
  }

  private appliedSum(): number {
    let s = 0;
    for (const n of this.nodes) for (const r of n.replicas) s += r.smIndex;
    return s;
  }

  /** Every node of every group has applied the same prefix, as far as anything was applied. */
  private converged(): boolean {
    for (let g = 0; g < this.options.groups; g++) {
      const max = this.checker.maxApplied(g);
      for (const n of this.nodes) if (n.replicas[g]!.smIndex !== max) return false;
    }
    return true;
  }
}

export function runSeed(options: SimOptions): SeedResult {
  return new Simulator(options).run();
}

function toViolation(err: unknown, step: number): NonNullable<SeedResult['violation']> {
  if (err instanceof SimViolation) return { kind: err.kind, message: err.message, step };
  const e = err instanceof Error ? err : new Error(String(err));
  return { kind: 'raft_exception', message: `${e.name}: ${e.message}`, step };
}

function grantsVote(rd: Ready): boolean {
  return rd.messages.some((m) => m.type === 'vote_resp' && !m.reject);
}

function nodeIndex(id: NodeId): number {
  return Number(id.slice(1)) - 1;
}

function termOrNull(rep: Replica, i: LogIndex): number | null {
  if (i < rep.disk.firstIndex() - 1 || i > rep.disk.lastIndex()) return null;
  return rep.disk.term(i);
}
