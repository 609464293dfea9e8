/**
 * Node: the node's two pure halves composed, a `Replication` (the Raft side) and a `NodeCore` (firing, group
 * commit), so that neither host wires one to the other. What crosses between them is routed here, synchronously:
 * the core's proposals go into the shard's log (their tickets mapped both ways), the log's answers to them come
 * back as `proposalDone`, leadership start and stop reach the core inside the call that decided them, and an
 * applied command reaches the core before its proposer hears. The core asks its lease and the apply backlog of
 * this Replication. README.md in this folder draws it.
 *
 * Time: the two halves run on different clocks (the scheduler's, which may be a manual one, and the monotonic one
 * Raft ticks on). The routed calls need the time of the moment they happen (a lease is checked right before a
 * send, and a stall between two inputs must show), so the node reads the injected `clocks`, as TigerBeetle's
 * replica reads its injected Time; a simulator passes its simulated clocks.
 */
import { assert } from '../core/assert.js';
import { PunctualError } from '../core/errors.js';
import { quarantineLimits } from '../core/limits.js';
import { encodeCommand } from '../scheduler/codec.js';
import type { Command } from '../scheduler/commands.js';
import { NodeCore } from './core.js';
import { Replication, type ReplicaEvent, type ReplicationDeps } from './replication.js';
import type { Applied, CoreReady, NodeCoreApi, NodeCoreDeps, Proposal } from './types.js';

/** The clocks the routed calls read: the scheduler's (NodeCore's nowMs) and the monotonic one (Replication's). */
export interface NodeClocks {
  nowMs(): number;
  monoMs(): number;
}

export interface NodeDeps {
  /** NodeCore's deps but what this node answers itself (the lease, the apply backlog). */
  core: Omit<NodeCoreDeps, 'leaseValid' | 'applyBacklog'>;
  replication: ReplicationDeps;
  clocks: NodeClocks;
  /** How the NodeCore is made (a simulator may pass a variant); default `new NodeCore(deps)`. */
  makeCore?: (deps: NodeCoreDeps) => NodeCoreApi;
}

/** The shard's disk is full: proposals are refused until a write succeeds again. */
export function diskFull(): PunctualError {
  return new PunctualError('insufficient_storage', `the disk of this node is full; writes are refused until space is freed (retry in ${quarantineLimits.diskFullRetryAfterS} s)`);
}

/** NodeCore's outputs once its proposals went into their logs. */
export interface NodeReady extends CoreReady {
  /** The proposals Raft took (each answered later through the core). */
  inLog: Proposal[];
}

export class Node {
  readonly replication: Replication;
  readonly core: NodeCoreApi;
  /** The Replication's proposal tickets of the core's proposals -> the core's tickets. */
  private readonly tickets = new Map<number, number>();
  /** A write failed on a full disk and none succeeded since (the host says so): the core's proposals are refused. */
  private storageFull = false;

  constructor(private readonly d: NodeDeps) {
    this.replication = new Replication(d.replication);
    const coreDeps: NodeCoreDeps = {
      ...d.core,
      leaseValid: (shard) => this.leaseValid(shard),
      applyBacklog: () => this.replication.applyBacklog(),
    };
    assert(coreDeps.stores.length === d.replication.shards.length, 'one store per shard log');
    this.core = d.makeCore === undefined ? new NodeCore(coreDeps) : d.makeCore(coreDeps);
  }

  // --- inputs that cross from one half to the other ---------------------------------------------------------

  /**
   * A committed entry was applied on this node (inside its write, once that committed): its command (null for an
   * entry without one, or a quarantined one) reaches the core, then its proposer is answered.
   */
  applied(shard: number, index: number, term: number, command: Command | null, applied: Applied | null): void {
    if (command !== null) {
      try {
        this.core.applied(shard, command, applied?.effects ?? [], this.d.clocks.nowMs());
      } catch (err) {
        this.d.core.logger.error('effect handling failed', { shard, type: command.type, err });
      }
    }
    this.replication.answer(shard, index, term, applied);
  }

  /** The host's writes fail on a full disk (true) or succeed again (false). */
  setStorageFull(full: boolean): void {
    this.storageFull = full;
  }

  /** The shard's lease holds on this node now and it fires the shard (asked right before each send). */
  leaseValid(shard: number): boolean {
    return this.replication.leaseValid(shard, this.d.clocks.monoMs());
  }

  /** How many ms from now the shard's lease holds unless renewed (-Infinity: not valid now; see Replication.leaseUntilMono). */
  leaseLeftMs(shard: number): number {
    const monoMs = this.d.clocks.monoMs();
    return this.replication.leaseUntilMono(shard, monoMs) - monoMs;
  }

  /** A callback is due now or within the spin window: long work on the host's loop should yield. */
  fireDue(): boolean {
    return this.core.fireDue(this.d.clocks.nowMs());
  }

  /** The Replication has a round or events for the host: it should run its loop. */
  hostWork(): boolean {
    return this.replication.hasEvents() || this.replication.hasReady();
  }

  // --- outputs ----------------------------------------------------------------------------------------------

  /**
   * The Replication's events for the host, in order. Those that belong to the core (leadership start and stop,
   * the answers to its proposals) are fed to it here instead, inside this call; the rest are the host's (its own
   * proposals and reads, snapshot and compaction requests, conf changes, the catch-up of ticks).
   */
  take(): ReplicaEvent[] {
    const out: ReplicaEvent[] = [];
    for (let evs = this.replication.take(); evs.length > 0; evs = this.replication.take()) {
      for (const ev of evs) if (!this.route(ev)) out.push(ev);
    }
    return out;
  }

  private route(ev: ReplicaEvent): boolean {
    switch (ev.kind) {
      case 'leader_start':
        this.core.leaderStart(ev.shard, ev.term, this.d.clocks.nowMs());
        return true;
      case 'leader_stop':
        this.core.leaderStop(ev.shard);
        return true;
      case 'proposal': {
        const ticket = this.tickets.get(ev.ticket);
        if (ticket === undefined) return false;
        this.tickets.delete(ev.ticket);
        if (ev.ok) this.core.proposalDone(ticket, { ok: true, applied: ev.applied });
        else this.core.proposalDone(ticket, { ok: false, error: ev.error });
        return true;
      }
      default:
        return false;
    }
  }

  /**
   * NodeCore's outputs (CoreReady's order of effects). Its proposals are already in their shards' logs when this
   * returns (`inLog` lists those Raft took, for the host's metrics); one refused at once was answered to the core,
   * whose consequences come with the next call. The host calls it until it returns nothing (`emptyReady`).
   */
  ready(): NodeReady {
    const rd = this.core.ready();
    const inLog: Proposal[] = [];
    for (const p of rd.propose) if (this.toLog(p)) inLog.push(p);
    return {
      propose: rd.propose,
      withdraw: rd.withdraw,
      dispatch: rd.dispatch,
      replies: rd.replies,
      nextDeadlineMs: rd.nextDeadlineMs,
      nextFireAtMs: rd.nextFireAtMs,
      flushAtMs: rd.flushAtMs,
      inLog,
    };
  }

  private toLog(p: Proposal): boolean {
    const refused = this.storageFull ? diskFull() : null;
    const r = refused === null ? this.replication.propose(p.shard, encodeCommand(p.command), this.d.clocks.monoMs()) : { ok: false as const, error: refused };
    if (r.ok) {
      this.tickets.set(r.ticket, p.ticket);
      return true;
    }
    if (p.command.type === 'fired' || p.command.type === 'skipped' || p.command.type === 'outcomes') {
      this.d.core.logger.debug('engine items not recorded', { shard: p.shard, type: p.command.type, err: r.error.message });
    }
    this.core.proposalDone(p.ticket, { ok: false, error: r.error });
    return false;
  }
}

/** True when a CoreReady has nothing to carry out (its deadlines still count). */
export function emptyReady(rd: CoreReady): boolean {
  return rd.propose.length === 0 && rd.withdraw.length === 0 && rd.dispatch.length === 0 && rd.replies.length === 0;
}
