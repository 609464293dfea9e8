/**
 * Simulated callback receivers. Each one has a behaviour (fast, slow, failing with 5xx, never answering, refusing
 * connections) and records every request that reaches it: deduplication key, attempt, fencing token, which node
 * sent it and when (true time). The whole-node checker reads these records; the simulator turns `answer` into a
 * dispatch outcome for the sending node.
 */
import type { Prng } from '../../../src/core/prng.js';

export type ReceiverBehaviour = 'ok' | 'slow' | 'failing' | 'timeout' | 'refusing';

export const receiverBehaviours: readonly ReceiverBehaviour[] = ['ok', 'slow', 'failing', 'timeout', 'refusing'];

/** One request as the receiver saw it (the headers a real receiver deduplicates and fences with). */
export interface Arrival {
  readonly receiver: number;
  readonly dedupKey: string;
  readonly attempt: number;
  readonly fencingToken: string;
  readonly node: string;
  /** True time the sending node started the request. */
  readonly sentMs: number;
  readonly arrivedMs: number;
}

/** What the sender learns, and when (true time). `timeout`: nothing comes back; the sender's own deadline ends it. */
export type Answer =
  | { readonly kind: 'response'; readonly status: number; readonly atMs: number }
  | { readonly kind: 'refused'; readonly atMs: number }
  | { readonly kind: 'timeout' };

export interface ReceiverRequest {
  readonly url: string;
  readonly dedupKey: string;
  readonly attempt: number;
  readonly fencingToken: string;
  readonly node: string;
  readonly sentMs: number;
}

export class SimReceivers {
  readonly behaviours: ReceiverBehaviour[];
  readonly arrivals: Arrival[] = [];
  /** Requests refused at connect (they never arrived): counted, not recorded as arrivals. */
  refused = 0;
  /** While true (the liveness phase) every receiver answers 200 quickly. */
  healthy = false;

  constructor(
    private readonly rand: Prng,
    count: number,
  ) {
    // Receiver 0 is always well behaved so every run has jobs whose callbacks succeed.
    this.behaviours = Array.from({ length: count }, (_, i) => (i === 0 ? 'ok' : receiverBehaviours[rand.int(receiverBehaviours.length)]!));
  }

  static url(receiver: number): string {
    return `http://r${receiver}.sim.invalid/hook`;
  }

  static receiverOf(url: string): number {
    const m = /^http:\/\/r(\d+)\.sim\.invalid\//.exec(url);
    if (!m) throw new Error(`not a simulated receiver: ${url}`);
    return Number(m[1]);
  }

  /** A request leaves the node at req.sentMs; the receiver records it (unless refused) and decides the answer. */
  request(req: ReceiverRequest, onArrival?: (a: Arrival) => void): Answer {
    const r = SimReceivers.receiverOf(req.url);
    const behaviour = this.healthy ? 'ok' : this.behaviours[r]!;
    const netMs = 1 + this.rand.int(5);
    if (behaviour === 'refusing') {
      this.refused++;
      return { kind: 'refused', atMs: req.sentMs + 2 * netMs };
    }
    const arrival: Arrival = { receiver: r, dedupKey: req.dedupKey, attempt: req.attempt, fencingToken: req.fencingToken, node: req.node, sentMs: req.sentMs, arrivedMs: req.sentMs + netMs };
    this.arrivals.push(arrival);
    onArrival?.(arrival);
    switch (behaviour) {
      case 'ok':
        return { kind: 'response', status: 200, atMs: arrival.arrivedMs + this.rand.int(20) + netMs };
      case 'slow':
        return { kind: 'response', status: 200, atMs: arrival.arrivedMs + 200 + this.rand.int(4000) + netMs };
      case 'failing':
        return this.rand.nextFloat() < 0.6
          ? { kind: 'response', status: 500 + this.rand.int(4), atMs: arrival.arrivedMs + this.rand.int(50) + netMs }
          : { kind: 'response', status: 200, atMs: arrival.arrivedMs + this.rand.int(50) + netMs };
      case 'timeout':
        return { kind: 'timeout' };
    }
  }
}
