/**
 * The simulated network between nodes (all groups share it, like the real transport shares one session per
 * peer pair). Messages wait in the simulators' agenda (node/events.ts) keyed by (delivery step, send order), so the run is deterministic;
 * random delays reorder them. Faults: loss, duplication, long delays, and blocked links (symmetric partitions
 * are two blocked directions, one-way partitions one).
 */
import type { Prng } from '../../src/core/prng.js';
import type { Message, NodeId } from '../../src/raft/index.js';
import { EventQueue, type Scheduled } from './node/events.js';
import type { SimParams } from './params.js';

/** A message on its way: `atMs` is the step it is delivered at, `event` the message. */
export type InFlight = Scheduled<Message>;

export interface NetworkStats {
  sent: number;
  delivered: number;
  dropped: number;
  duplicated: number;
  delayed: number;
}

export class SimNetwork {
  private readonly queue = new EventQueue<Message>();
  /** Directed links that lose everything: "a>b". */
  private blocked = new Set<string>();
  /** While true (the liveness phase) the network is healthy: no loss, duplication or long delays. */
  healthy = false;
  readonly stats: NetworkStats = { sent: 0, delivered: 0, dropped: 0, duplicated: 0, delayed: 0 };

  constructor(
    private readonly rand: Prng,
    private readonly params: SimParams,
  ) {}

  /**
   * Sends m. 'blocked': the link is down and the sender's transport knows it (a refused connection);
   * 'lost': dropped silently (a full queue somewhere on the way); 'sent': on its way.
   */
  send(m: Message, now: number): 'sent' | 'blocked' | 'lost' {
    this.stats.sent++;
    if (this.isBlocked(m.from, m.to)) {
      this.stats.dropped++;
      return 'blocked';
    }
    if (!this.healthy && this.rand.nextFloat() < this.params.dropRate) {
      this.stats.dropped++;
      return 'lost';
    }
    this.queue.push(now + this.delay(), m);
    if (!this.healthy && this.rand.nextFloat() < this.params.dupRate) {
      this.stats.duplicated++;
      this.queue.push(now + this.delay(), m);
    }
    return 'sent';
  }

  /** Removes and returns the next message due at or before `now`, or null. */
  nextDue(now: number): InFlight | null {
    return this.queue.popDue(now);
  }

  /** Puts a message back for later (its receiver is paused: the bytes wait in the socket). */
  hold(f: InFlight, until: number): void {
    this.queue.push(until, f.event);
  }

  /** A link blocked when the message arrives loses it too (the connection broke while it was in flight). */
  isBlocked(from: NodeId, to: NodeId): boolean {
    return this.blocked.size > 0 && this.blocked.has(`${from}>${to}`);
  }

  block(from: NodeId, to: NodeId): void {
    this.blocked.add(`${from}>${to}`);
  }

  unblockAll(): void {
    this.blocked.clear();
  }

  blockedCount(): number {
    return this.blocked.size;
  }

  pending(): number {
    return this.queue.size;
  }

  private delay(): number {
    const p = this.params;
    if (!this.healthy && this.rand.nextFloat() < p.longDelayRate) {
      this.stats.delayed++;
      return p.delayMinSteps + this.rand.int(p.longDelayMaxSteps);
    }
    return p.delayMinSteps + this.rand.int(p.delayMaxSteps - p.delayMinSteps + 1);
  }
}
