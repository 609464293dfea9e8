/**
 * Who may talk to this node. Every peer request carries two headers:
 * - `x-punctual-node-id`: the sender's node id; an id that is not in --peers is a stranger (403).
 * - `x-punctual-cluster-secret`: hex HMAC-SHA256(secret, "punctual-peer-v1:" + sender id), not the secret
 *   itself, so a sniffer on the cleartext link never learns the secret (it can replay the header for that id:
 *   run peer links on a private network). Compared in constant time. A node without a secret accepts any header.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { Logger } from '../../core/log.js';

export const nodeIdHeader = 'x-punctual-node-id';
export const secretHeader = 'x-punctual-cluster-secret';
/** The sender's --shards: nodes that disagree would route one job id to two different shard groups. */
export const shardsHeader = 'x-punctual-shards';
/** On a 403: why (a Refusal), so the refused side can say what to fix. */
export const refusalHeader = 'x-punctual-refusal';

export function secretProof(secret: string, nodeId: string): string {
  return createHmac('sha256', secret).update(`punctual-peer-v1:${nodeId}`).digest('hex');
}

export type Refusal = 'stranger' | 'missing_secret' | 'wrong_secret' | 'shards_mismatch';

/** What the refused side should check, per refusal. */
export const refusalHints: Record<Refusal, string> = {
  stranger: 'this node is not a member in that peer\'s member book (add it with cluster add-node; a removed node stays out)',
  missing_secret: 'that peer requires --cluster-secret and this node sends none',
  wrong_secret: 'this node\'s --cluster-secret differs from that peer\'s',
  shards_mismatch: 'this node\'s --shards differs from that peer\'s (a data directory keeps the count of its first start)',
};

export class PeerAuth {
  /** `peerIds` is live: PeerTransport adds and removes members while running (cluster add-node / remove-node). */
  constructor(
    private readonly peerIds: ReadonlySet<string>,
    private readonly secret: string | null,
    /** This node's shard count; null = not checked. A sender that states none (an older node) is not refused. */
    private readonly shards: number | null = null,
  ) {}

  /** null when the sender may talk to us, else why not. */
  check(nodeId: unknown, proof: unknown, shards?: unknown): Refusal | null {
    if (typeof nodeId !== 'string' || !this.peerIds.has(nodeId)) return 'stranger';
    if (this.shards !== null && typeof shards === 'string' && shards !== String(this.shards)) return 'shards_mismatch';
    if (this.secret === null) return null;
    if (typeof proof !== 'string' || proof.length === 0) return 'missing_secret';
    const want = Buffer.from(secretProof(this.secret, nodeId));
    const got = Buffer.from(proof);
    if (got.length !== want.length || !timingSafeEqual(got, want)) return 'wrong_secret';
    return null;
  }
}

/** Logs a repeated complaint at most once per interval per key, with the count of the ones held back. */
export class RateLimitedLog {
  private readonly last = new Map<string, { atMs: number; suppressed: number }>();

  constructor(
    private readonly logger: Logger,
    private readonly intervalMs: number,
    private readonly nowMs: () => number = () => Date.now(),
  ) {}

  warn(key: string, msg: string, fields: Record<string, unknown>): void {
    const now = this.nowMs();
    const seen = this.last.get(key);
    if (seen && now - seen.atMs < this.intervalMs) {
      seen.suppressed++;
      return;
    }
    // Bounded: a flood of distinct keys (addresses) resets the table instead of growing it.
    if (this.last.size >= 1024) this.last.clear();
    this.last.set(key, { atMs: now, suppressed: 0 });
    this.logger.warn(msg, seen && seen.suppressed > 0 ? { ...fields, suppressed: seen.suppressed } : fields);
  }
}
