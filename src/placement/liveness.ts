/**
 * Node liveness, CockroachDB store-liveness style: support is given per node pair, one heartbeat per pair per
 * interval, and every group's leader lease rests on the support its node gets from the group's voters. No group
 * sends anything of its own while idle (no per-group heartbeat, nothing to tick), so a node's idle message count
 * depends on its peers, never on its groups. These are the rules and the counts; the transport that sends the
 * heartbeats is not built yet.
 */
import type { NodeId } from '../core/ids.js';
import type { PlacementConfig } from './config.js';
import type { ClusterModel, GroupInfo, NodeInfo, NodeLiveness } from './types.js';

export function livenessOf(node: NodeInfo, nowMs: number, config: PlacementConfig): NodeLiveness {
  const silentMs = nowMs - node.lastHeartbeatMs;
  if (silentMs >= config.deadAfterMs) return 'dead';
  if (node.admin === 'decommissioning') return 'decommissioning';
  if (silentMs >= config.suspectAfterMs) return 'suspect';
  if (node.admin === 'draining') return 'draining';
  return 'live';
}

/** May take new replicas and leaderships. */
export function isPlaceable(liveness: NodeLiveness): boolean {
  return liveness === 'live';
}

/** Its replicas count toward a quorum (it is heard; draining and decommissioning nodes still serve). */
export function isUp(liveness: NodeLiveness): boolean {
  return liveness === 'live' || liveness === 'draining' || liveness === 'decommissioning';
}

/** The peers `node` heartbeats: every other member, or (supportScope 'shared') those it shares a group with. */
export function supportPeers(node: NodeId, model: ClusterModel, config: PlacementConfig): NodeId[] {
  if (config.supportScope === 'members') return model.nodes.filter((n) => n.id !== node).map((n) => n.id);
  const peers = new Set<NodeId>();
  for (const g of model.groups) {
    if (!g.replicas.some((r) => r.node === node)) continue;
    for (const r of g.replicas) if (r.node !== node) peers.add(r.node);
  }
  return [...peers].sort();
}

/** Every node's peer count under `config.supportScope`, in one pass over the groups (the shared scope at 30k groups). */
export function supportPeerCounts(model: ClusterModel, config: PlacementConfig): Map<NodeId, number> {
  const counts = new Map<NodeId, number>();
  if (config.supportScope === 'members') {
    for (const n of model.nodes) counts.set(n.id, model.nodes.length - 1);
    return counts;
  }
  const peers = new Map<NodeId, Set<NodeId>>(model.nodes.map((n) => [n.id, new Set<NodeId>()]));
  for (const g of model.groups) {
    for (const a of g.replicas) for (const b of g.replicas) if (a.node !== b.node) peers.get(a.node)?.add(b.node);
  }
  for (const [id, set] of peers) counts.set(id, set.size);
  return counts;
}

/**
 * Messages an idle node sends per second: to each peer, a heartbeat and the answer to the peer's heartbeat, once
 * per interval. Groups add nothing while idle (their leaders are fortified by this support).
 */
export function idleMessagesPerS(peerCount: number, config: PlacementConfig): number {
  return (2 * peerCount * 1000) / config.livenessHeartbeatMs;
}

/**
 * What today's per-group heartbeats cost the same node (for the comparison; src/raft heartbeats every
 * heartbeatTicks x tickMs per group): a leader sends one per follower, each follower answers.
 */
export function perGroupHeartbeatMessagesPerS(node: NodeId, groups: readonly GroupInfo[], heartbeatMs: number): number {
  let perRound = 0;
  for (const g of groups) {
    if (g.leader === node) perRound += g.replicas.length - 1;
    else if (g.replicas.some((r) => r.node === node)) perRound += 1;
  }
  return (perRound * 1000) / heartbeatMs;
}

/**
 * A fortified leader's lease: the time until which a quorum of the group's voters supports its node (the leader's
 * own support of itself is unbounded). `supportUntil(from, to)` is when `from`'s support for `to` expires (-Infinity
 * when it gives none). The lease rests on node-level support only, so it holds while the group sends nothing.
 */
export function leaseExpiryMs(group: GroupInfo, supportUntil: (from: NodeId, to: NodeId) => number): number {
  const leader = group.leader;
  if (leader === null) return -Infinity;
  const voters = group.replicas.filter((r) => r.role === 'voter');
  if (!voters.some((v) => v.node === leader)) return -Infinity;
  const expiries = voters.map((v) => (v.node === leader ? Infinity : supportUntil(v.node, leader))).sort((a, b) => b - a);
  const quorum = Math.floor(voters.length / 2) + 1;
  return expiries[quorum - 1]!;
}
