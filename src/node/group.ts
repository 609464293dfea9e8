/**
 * One shard group on this node: its RawNode, its Raft log (SqliteRaftStorage, same SQLite file), its
 * state-machine store, the applied index, and what the host waits for on it (proposals by log index,
 * linearizable reads by ReadIndex context).
 */
import type { Entry, RawNode, Role } from '../raft/index.js';
import type { SqliteRaftStorage } from '../store/raft-storage.js';
import type { SqliteShardStore } from '../store/shard-store.js';
import { ShardLeadership, type Applied } from '../nodecore/index.js';

/** What a proposer waits for: its entry applied in the term it was proposed in. */
export interface Waiter {
  resolve(applied: Applied): void;
  reject(err: unknown): void;
}

export interface PendingProposal extends Waiter {
  term: number;
  deadlineMs: number;
}

export interface PendingRead {
  ctx: string;
  /** The commit index the leader confirmed for this read (-1 until its ReadState arrives). */
  index: number;
  deadlineMs: number;
  resolve(): void;
  reject(err: unknown): void;
}

/** The minimal view of a shard that the engine and the service need. */
export interface ShardStorage {
  readonly shard: number;
  readonly store: SqliteShardStore;
}

export class ShardGroup implements ShardStorage {
  /** When this node fires the shard (src/nodecore/leadership.ts decides). */
  readonly lead = new ShardLeadership();
  applied: number;
  appliedSinceCompact = 0;
  /** Log index -> the proposer waiting for it. */
  readonly proposals = new Map<number, PendingProposal>();
  readonly reads: PendingRead[] = [];
  /** Snapshots received and stepped: resolved once the round that installs them is persisted. */
  snapshotInstalls: Array<() => void> = [];

  constructor(
    readonly shard: number,
    readonly store: SqliteShardStore,
    readonly storage: SqliteRaftStorage,
    readonly raw: RawNode,
    applied: number,
  ) {
    this.applied = applied;
  }

  get role(): Role {
    return this.lead.role;
  }

  /** The leader this node knows ('' when none). */
  get leader(): string {
    return this.lead.leader;
  }

  /** The term this node leads in (when role is leader): the fencing token's term. */
  get leaderTerm(): number {
    return this.lead.term;
  }

  /** NodeCore fires this shard here (leader, caught up). */
  get firing(): boolean {
    return this.lead.firing;
  }

  /** The leader's term, commit and membership as this node sees them (GET /v1/cluster, metrics). */
  describe(): { term: number; commit: number; members: string[]; lastIndex: number } {
    const s = this.raw.status();
    return { term: s.term, commit: s.commit, lastIndex: s.lastIndex, members: [...s.confState.voters, ...s.confState.learners] };
  }
}

/** The last entry of a list (or null). */
export function lastOf(entries: readonly Entry[]): Entry | null {
  return entries.length === 0 ? null : entries[entries.length - 1]!;
}
