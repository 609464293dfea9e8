/**
 * Who may talk to this node. A peer session is authenticated once, when it opens, in one of three modes:
 *
 * - `tls` (--peer-tls-*): mutual TLS. Both certificates must chain to the --peer-tls-ca-file CA, and name the
 *   node id they speak for as a SAN `URI:punctual:node:<id>`; a request's `x-punctual-node-id` must be an id
 *   the client certificate names. The client checks that the server certificate names the id it meant to reach.
 * - `secret` (--cluster-secret, no peer TLS): a challenge-response bound to the HTTP/2 session. The client sends
 *   `POST /peer/hello` with its id and a nonce; the server answers with its own nonce (one per session); the
 *   client proves the secret with `POST /peer/auth` = HMAC over both nonces, both ids and the address it dialled
 *   (`:authority`); the server answers with its own proof over the same values (other label), which the client
 *   checks. Until then every stream of the session is refused. A proof is worthless on any other session (the
 *   server nonce is fresh per session); the secret never crosses the wire.
 * - `insecure` (--insecure-peers): the `x-punctual-node-id` header is believed. Opt-in, warned at every start.
 *
 * Refusals before authentication never say which node ids exist; after it, they say what to fix.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { PeerCertificate } from 'node:tls';
import type { Logger } from '../../core/log.js';

export const nodeIdHeader = 'x-punctual-node-id';
/** Sent by nodes of peer protocol 1 (a fixed, replayable proof): its presence names an older node. */
export const secretHeader = 'x-punctual-cluster-secret';
/** The sender's --shards: nodes that disagree would route one job id to two different shard groups. */
export const shardsHeader = 'x-punctual-shards';
/** On a 403: why (a Refusal), so the refused side can say what to fix. */
export const refusalHeader = 'x-punctual-refusal';
/** The peer protocol version of the sender, on the handshake's hello. */
export const protocolHeader = 'x-punctual-peer-protocol';
export const nonceHeader = 'x-punctual-nonce';
export const proofHeader = 'x-punctual-proof';
/** On the hello: the node id the client meant to reach (so a secret-holder that dialled the wrong node is told). */
export const targetNodeHeader = 'x-punctual-target-node';
export const peerProtocol = '2';
export const helloPath = '/peer/hello';
export const authPath = '/peer/auth';
/** The SAN of a node certificate: `URI:punctual:node:<node id>`. */
export const certNodeUriPrefix = 'punctual:node:';

export type PeerMode = 'tls' | 'secret' | 'insecure';

export type Refusal =
  | 'unauthenticated'
  | 'wrong_secret'
  | 'wrong_node'
  | 'protocol_version'
  | 'peer_mode'
  | 'stranger'
  | 'shards_mismatch';

/** What the refused side should check, per refusal. */
export const refusalHints: Record<Refusal, string> = {
  unauthenticated: 'this node has not authenticated on this connection (the peers differ in --cluster-secret / peer TLS settings, or in version)',
  wrong_secret: 'this node\'s --cluster-secret differs from that peer\'s',
  wrong_node: 'the address this node dials for that peer reaches another node: check --peers and the member book (an address reused or swapped)',
  protocol_version: 'that peer speaks another peer protocol version: run the same Punctual version on every node',
  peer_mode: 'that peer runs with --insecure-peers while this node authenticates (or the reverse): give every node the same --cluster-secret / peer TLS settings',
  stranger: 'this node is not a member in that peer\'s member book (add it with cluster add-node; a removed node stays out)',
  shards_mismatch: 'this node\'s --shards differs from that peer\'s (a data directory keeps the count of its first start)',
};

/** The values a handshake proof covers: both nonces, both ids, and the address the client dialled. */
export interface ProofInput {
  serverNonce: string;
  clientNonce: string;
  clientId: string;
  serverId: string;
  /** The `:authority` of the client's requests (host:port it dialled; a TCP proxy in between keeps it). */
  target: string;
}

function proof(secret: string, label: string, p: ProofInput): string {
  // Length-prefixed fields: no two different inputs give the same MAC input.
  const h = createHmac('sha256', secret).update(`punctual-peer-v2:${label}`);
  for (const v of [p.serverNonce, p.clientNonce, p.clientId, p.serverId, p.target]) h.update(`\n${v.length}:${v}`);
  return h.digest('hex');
}

/** What the client sends on /peer/auth. */
export function clientProof(secret: string, p: ProofInput): string {
  return proof(secret, 'client', p);
}

/** What the server answers on /peer/auth: it knows the secret too (the client checks it). */
export function serverProof(secret: string, p: ProofInput): string {
  return proof(secret, 'server', p);
}

export function newNonce(): string {
  return randomBytes(32).toString('hex');
}

/** Constant-time comparison of two hex proofs; false for anything that is not a string. */
export function proofEquals(got: unknown, want: string): boolean {
  if (typeof got !== 'string') return false;
  const a = Buffer.from(got);
  const b = Buffer.from(want);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** A nonce as the wire carries it: 64 hex characters. */
export function isNonce(v: unknown): v is string {
  return typeof v === 'string' && /^[0-9a-f]{64}$/.test(v);
}

/** The node ids a certificate speaks for: its `URI:punctual:node:<id>` SAN entries. */
export function certNodeIds(cert: PeerCertificate | null | undefined): Set<string> {
  const out = new Set<string>();
  const san = cert?.subjectaltname;
  if (typeof san !== 'string') return out;
  for (const entry of san.split(', ')) {
    if (entry.startsWith(`URI:${certNodeUriPrefix}`)) out.add(entry.slice(4 + certNodeUriPrefix.length));
  }
  return out;
}

export class PeerAuth {
  /** `peerIds` is live: PeerTransport adds and removes members while running (cluster add-node / remove-node). */
  constructor(
    private readonly peerIds: ReadonlySet<string>,
    /** This node's shard count; null = not checked. A sender that states none (an older node) is not refused. */
    private readonly shards: number | null = null,
  ) {}

  /** After authentication: null when the sender may talk to us, else why not. */
  check(nodeId: unknown, shards?: unknown): Refusal | null {
    if (typeof nodeId !== 'string' || !this.peerIds.has(nodeId)) return 'stranger';
    if (this.shards !== null && typeof shards === 'string' && shards !== String(this.shards)) return 'shards_mismatch';
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
