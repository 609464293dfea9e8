/**
 * ClusterOps: what GET /v1/cluster, /readyz and the leadership routes see and do, and the rebalancer.
 *
 * Rebalancing: every clusterLimits.rebalanceIntervalMs, a node hands each shard it leads to the shard's
 * preferred leader (the voters sorted by id, `voters[shard % voters.length]`) when that node is reachable and
 * has every committed entry. So leaders spread evenly over the nodes (all nodes fire), come back to a node
 * that restarts, and stay where they are while the preferred node is down.
 *
 * A transfer this node starts as the shard's leader (the rebalancer's, or an operator's) drains the shard first
 * (src/nodecore: nothing new is ordered, unstarted orders are withdrawn, the records of the callbacks in flight
 * are proposed as they end): Raft refuses new proposals once a transfer is pending, so records proposed after
 * it would never commit and the next leader would send those callbacks again. The drain waits at most
 * clusterLimits.transferDrainMaxMs (past it a callback still in flight may be sent again, at-least-once); a shard
 * still led here transferUndrainAfterMs after the request was not handed over and fires again.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { PunctualError } from '../core/errors.js';
import { clusterAuditLimits, clusterLimits } from '../core/limits.js';
import type { Logger } from '../core/log.js';
import type { NodeId } from '../raft/index.js';
import type { ClusterView } from '../http/scheduler-api.js';
import type { NodeConfig } from './api.js';
import type { ShardGroup } from './group.js';
import type { RaftHost } from './raft-host.js';
import { decodeWire, encodeWire, apiKind } from './router.js';
import { preferredLeader } from '../nodecore/replication.js';

/** The part of PeerTransport this file uses. */
export interface PeerView {
  reachable(peerId: string): boolean;
  /** Why the peer refuses this node (`stranger`: not in its member book), or null while it accepts it. */
  refusedAs(peerId: string): string | null;
  request(to: string, kind: string, body: Uint8Array, timeoutMs: number): Promise<Uint8Array>;
}

/** A shard as GET /v1/cluster shows it: `members` (voters and learners) plus which are learners. */
export type ShardView = ClusterView['shards'][number] & { learners: string[] };

export interface MemberClusterView extends Omit<ClusterView, 'shards'> {
  shards: ShardView[];
}

export interface NodeInfo {
  nodeId: string;
  apiAddr: string;
}

export class ClusterOps {
  private peers: PeerView | null = null;
  /** Peer id -> its API address, as it last told us, and when. */
  private readonly infos = new Map<string, { apiAddr: string; atMs: number }>();
  private rebalancer: NodeJS.Timeout | null = null;
  /** Shards this node drains or hands over (one transfer at a time per shard), until it is over or undrained. */
  private readonly handingOver = new Set<number>();
  private readonly undrainTimers = new Set<NodeJS.Timeout>();
  private stopped = false;
  /** Shard -> the commit index when readiness first saw it not applied, and when (monotonic ms). */
  private readonly lagSince = new Map<number, { commit: number; atMs: number }>();
  /** The other members and their peer addresses (the member book; --peers until it is wired). */
  private members: () => Array<{ id: string; host: string; port: number }>;
  /** Shards this node knows it was removed from (membership.ts). */
  private removedFrom: () => readonly number[] = () => [];
  apiPort = 0;
  peerPort = 0;

  constructor(
    private readonly config: NodeConfig,
    private readonly host: RaftHost,
    private readonly logger: Logger,
  ) {
    this.peerPort = config.peerListenPort;
    this.members = () => config.peers;
  }

  /** Where the current members come from (membership.ts: the member book, which add-node/remove-node change). */
  setMembers(members: () => Array<{ id: string; host: string; port: number }>): void {
    this.members = members;
  }

  setRemovedFrom(removedFrom: () => readonly number[]): void {
    this.removedFrom = removedFrom;
  }

  setPeers(peers: PeerView | null): void {
    this.peers = peers;
  }

  info(): NodeInfo {
    return { nodeId: this.config.nodeId, apiAddr: `${this.config.listenHost}:${this.apiPort}` };
  }

  async view(apiPort: number): Promise<MemberClusterView> {
    this.apiPort = apiPort;
    const c = this.config;
    await this.refreshInfos();
    const nodes = [
      { id: c.nodeId, peerAddr: `${c.peerListenHost}:${this.peerPort}`, apiAddr: `${c.listenHost}:${apiPort}`, reachable: true },
      ...this.members().map((p) => ({
        id: p.id,
        peerAddr: p.host.includes(':') ? `[${p.host}]:${p.port}` : `${p.host}:${p.port}`,
        apiAddr: this.infos.get(p.id)?.apiAddr ?? '',
        reachable: this.peers?.reachable(p.id) ?? false,
      })),
    ];
    const shards = this.host.groups.map((g) => {
      const d = g.describe();
      const learners = [...g.raw.confState().learners];
      return { id: g.shard, leader: g.leader === '' ? null : g.leader, term: d.term, commitIndex: d.commit, appliedIndex: g.applied, members: d.members, learners };
    });
    return { nodeId: c.nodeId, nodes, shards };
  }

  /** Asks reachable peers whose API address is unknown or stale (bounded wait, failures ignored). */
  private async refreshInfos(): Promise<void> {
    const peers = this.peers;
    if (peers === null) return;
    const nowMs = Date.now();
    const stale = this.members().filter((p) => {
      const i = this.infos.get(p.id);
      return peers.reachable(p.id) && (i === undefined || nowMs - i.atMs > clusterLimits.peerInfoTtlMs);
    });
    await Promise.all(
      stale.map(async (p) => {
        try {
          const bytes = await peers.request(p.id, apiKind, encodeWire({ op: 'info' }), 500);
          const answer = decodeWire<{ ok: boolean; value?: NodeInfo }>(bytes);
          if (answer.ok && answer.value !== undefined) this.infos.set(p.id, { apiAddr: answer.value.apiAddr, atMs: nowMs });
        } catch {
          // shown as unknown ('') until it answers
        }
      }),
    );
  }

  /** Ready: every shard has a known leader and this node applied everything it knows to be committed. */
  readiness(): { ready: boolean; reason: string | null } {
    // First: a removed node's view of a shard it led stays stale (leaderless, or a leader it still believes in),
    // and a node removed while it was down learns it only from its peers refusing it as a stranger.
    let removed = this.removedFrom();
    if (removed.length === 0 && this.strangerToAll()) removed = this.host.groups.filter((g) => g.raw.confState().voters.length > 0).map((g) => g.shard);
    if (removed.length > 0) return notMemberOf(removed);
    const leaderless = this.host.groups.filter((g) => g.leader === '').map((g) => g.shard);
    if (leaderless.length > 0) return { ready: false, reason: `no known leader for shard(s) ${leaderless.slice(0, 10).join(', ')}` };
    // A removed node keeps its last view (leaders known, all applied) but every peer refuses it: not ready.
    const outside = this.host.groups.filter((g) => !isMember(g, this.config.nodeId)).map((g) => g.shard);
    if (outside.length > 0) return notMemberOf(outside);
    const nowMs = performance.now();
    const behind = this.host.groups.filter((g) => this.behind(g, nowMs)).map((g) => g.shard);
    if (behind.length > 0) return { ready: false, reason: `catching up on shard(s) ${behind.slice(0, 10).join(', ')}` };
    return { ready: true, reason: null };
  }

  /** Every other member refuses this node as not a member of its book. */
  private strangerToAll(): boolean {
    const peers = this.peers;
    const members = this.members();
    return peers !== null && members.length > 0 && members.every((p) => peers.refusedAs(p.id) === 'stranger');
  }

  /**
   * Behind: more than readyLagEntriesMax committed entries not applied yet, or some not applied for longer than
   * readyLagMs (what was committed when the lag was first seen is still not applied). Under load the applier
   * always trails the commit index by a slice or two; counting any lag made /readyz answer 503 to about one
   * probe in five on a healthy node, so a load balancer would drop it at random.
   */
  private behind(g: ShardGroup, nowMs: number): boolean {
    const commit = g.raw.status().commit;
    if (g.applied >= commit) {
      this.lagSince.delete(g.shard);
      return false;
    }
    if (commit - g.applied > clusterAuditLimits.readyLagEntriesMax) return true;
    const seen = this.lagSince.get(g.shard);
    if (seen === undefined || g.applied >= seen.commit) {
      this.lagSince.set(g.shard, { commit, atMs: nowMs });
      return false;
    }
    return nowMs - seen.atMs > clusterAuditLimits.readyLagMs;
  }

  /** Asks the shard's leader (this node, or forwarded by Raft itself) to hand leadership to `to`. */
  async transferLeader(shard: number, to: string): Promise<void> {
    const g = this.host.groups[shard];
    if (g === undefined) throw new PunctualError('not_found', `shard ${shard} not found (this cluster has ${this.host.groups.length})`);
    const voters = g.raw.status().confState.voters as readonly string[];
    if (!voters.includes(to)) throw new PunctualError('invalid_argument', `${to} is not a voter of shard ${shard}`, [{ field: 'to', message: 'not a voter of this shard' }]);
    if (g.leader === to) return;
    if (g.leader === '') throw new PunctualError('unavailable', `shard ${shard} has no leader right now`);
    // Raft voids the leader's lease when it sends TimeoutNow and keeps it void for the rest of its term: a
    // transfer to a dead or frozen node would stop the shard firing until the leader gives up on it and steps
    // down (an election timeout) and a new election ends. Only a target this leader hears from is worth it.
    if (g.role === 'leader' && !(this.peers?.reachable(to) ?? false)) {
      throw new PunctualError('unavailable', `${to} is not reachable from ${this.config.nodeId}, the leader of shard ${shard}: leadership stays here`);
    }
    if (this.handingOver.has(shard)) {
      throw new PunctualError('unavailable', `a leadership transfer of shard ${shard} is under way; ask again once it is over`);
    }
    if (g.role === 'leader' && g.firing) return this.handOver(g, to);
    g.raw.transferLeader(to as NodeId);
    this.host.schedule();
    this.logger.info('leadership transfer requested', { shard, from: g.leader, to });
  }

  /**
   * Drains the shard (bounded by transferDrainMaxMs), then asks Raft for the transfer; resolves once asked. A
   * shard still led in the same term transferUndrainAfterMs later was not handed over (Raft abandoned the transfer
   * or ignored it) and fires again; a leadership lost or changed meanwhile ended the drain in the core already.
   */
  private async handOver(g: ShardGroup, to: string): Promise<void> {
    const shard = g.shard;
    const term = g.leaderTerm;
    const shell = this.host.shell;
    const leads = (): boolean => !this.stopped && g.role === 'leader' && g.leaderTerm === term;
    this.handingOver.add(shard);
    try {
      const startMs = performance.now();
      shell.drainShard(shard);
      while (leads() && !shell.shardDrained(shard) && performance.now() - startMs < clusterLimits.transferDrainMaxMs) {
        await sleep(clusterLimits.transferDrainPollMs);
      }
      if (!leads()) {
        // Its leaderStop ended the drain already.
        throw new PunctualError('unavailable', `${this.config.nodeId} no longer leads shard ${shard} in term ${term} (an election, or the node closes): nothing was transferred`);
      }
      const drained = shell.shardDrained(shard);
      const drainMs = Math.round(performance.now() - startMs);
      g.raw.transferLeader(to as NodeId);
      this.host.schedule();
      if (drained) this.logger.info('leadership transfer requested', { shard, from: this.config.nodeId, to, drainMs });
      else this.logger.warn('leadership transfer requested before the shard drained: callbacks still in flight may be sent again by the next leader', { shard, to, drainMs });
    } catch (err) {
      this.handingOver.delete(shard);
      if (leads()) shell.undrainShard(shard);
      throw err;
    }
    const timer = setTimeout(() => {
      this.undrainTimers.delete(timer);
      this.handingOver.delete(shard);
      if (!leads()) return;
      shell.undrainShard(shard);
      this.logger.warn('leadership transfer did not happen: the shard fires here again', { shard, to });
    }, clusterLimits.transferUndrainAfterMs);
    timer.unref();
    this.undrainTimers.add(timer);
  }

  /** Starts the rebalancer (not without peers, not when intervalMs <= 0, not twice). */
  startRebalancer(intervalMs: number): void {
    this.stopped = false;
    if (this.peers === null || intervalMs <= 0 || this.rebalancer !== null) return;
    this.rebalancer = setInterval(() => this.rebalance(), intervalMs);
    this.rebalancer.unref();
  }

  /** Stops the rebalancer, and the drains and transfers under way (the node closes). */
  stopRebalancer(): void {
    if (this.rebalancer !== null) clearInterval(this.rebalancer);
    this.rebalancer = null;
    this.stopped = true;
    for (const timer of this.undrainTimers) clearTimeout(timer);
    this.undrainTimers.clear();
  }

  /** One round: hand at most rebalanceTransfersMax led shards to their reachable, caught-up preferred leaders. */
  rebalance(): number {
    let moved = 0;
    for (const g of this.host.groups) {
      if (moved >= clusterLimits.rebalanceTransfersMax) break;
      if (this.handingOver.has(g.shard)) continue;
      const to = this.preferredTarget(g);
      if (to === null) continue;
      moved++;
      this.logger.info('rebalancing: leadership transfer', { shard: g.shard, to });
      this.handOver(g, to).catch((err: unknown) => this.logger.warn('rebalancing: leadership transfer failed', { shard: g.shard, to, err }));
    }
    return moved;
  }

  private preferredTarget(g: ShardGroup): string | null {
    if (g.role !== 'leader' || !g.firing) return null;
    const s = g.raw.status();
    const preferred = preferredLeader(g.shard, s.confState.voters);
    if (preferred === null || preferred === this.config.nodeId || !(this.peers?.reachable(preferred) ?? false)) return null;
    const pr = s.progress.get(preferred as NodeId);
    return pr !== undefined && pr.match >= s.commit ? preferred : null;
  }
}

function isMember(g: ShardGroup, nodeId: string): boolean {
  const c = g.raw.confState();
  return (c.voters as readonly string[]).includes(nodeId) || (c.learners as readonly string[]).includes(nodeId);
}

function notMemberOf(shards: readonly number[]): { ready: false; reason: string } {
  return { ready: false, reason: `this node is not a member of shard(s) ${shards.slice(0, 10).join(', ')} (removed with cluster remove-node?)` };
}
