/**
 * The simulated network between nodes (all groups share it, like the real transport shares one session per
 * peer pair). Messages wait in a min-heap keyed by (delivery step, send order), so the run is deterministic;
 * random delays reorder them. Faults: loss, duplication, long delays, and blocked links (symmetric partitions
 * are two blocked directions, one-way partitions one).
 */
import type { Prng } from '../../src/core/prng.js';
import type { Message, NodeId } from '../../src/raft/index.js';
import type { SimParams } from './params.js';

export interface InFlight {
  readonly deliverAt: number;
  readonly seq: number;
  readonly msg: Message;
}

export interface NetworkStats {
  sent: number;
  delivered: number;
  dropped: number;
  duplicated: number;
  delayed: number;
}

export class SimNetwork {
  private heap: InFlight[] = [];
  private seq = 0;
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
    this.push(m, now + this.delay());
    if (!this.healthy && this.rand.nextFloat() < this.params.dupRate) {
      this.stats.duplicated++;
      this.push(m, now + this.delay());
    }
    return 'sent';
  }

  /** Removes and returns the next message due at or before `now`, or null. */
  nextDue(now: number): InFlight | null {
    const top = this.heap[0];
    if (!top || top.deliverAt > now) return null;
    return this.pop();
  }

  /** Puts a message back for later (its receiver is paused: the bytes wait in the socket). */
  hold(f: InFlight, until: number): void {
    this.push(f.msg, until);
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
    return this.heap.length;
  }

  private delay(): number {
    const p = this.params;
    if (!this.healthy && this.rand.nextFloat() < p.longDelayRate) {
      this.stats.delayed++;
      return p.delayMinSteps + this.rand.int(p.longDelayMaxSteps);
    }
    return p.delayMinSteps + this.rand.int(p.delayMaxSteps - p.delayMinSteps + 1);
  }

  private push(msg: Message, deliverAt: number): void {
    const h = this.heap;
    h.push({ deliverAt, seq: this.seq++, msg });
    let i = h.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(h[i]!, h[parent]!)) break;
      [h[i], h[parent]] = [h[parent]!, h[i]!];
      i = parent;
    }
  }

  private pop(): InFlight {
    const h = this.heap;
    const top = h[0]!;
    const last = h.pop()!;
    if (h.length > 0) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && before(h[l]!, h[m]!)) m = l;
        if (r < h.length && before(h[r]!, h[m]!)) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m]!, h[i]!];
        i = m;
      }
    }
    return top;
  }
}

function before(a: InFlight, b: InFlight): boolean {
  return a.deliverAt < b.deliverAt || (a.deliverAt === b.deliverAt && a.seq < b.seq);
}
