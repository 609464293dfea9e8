/**
 * One shard group on this node as the IO side sees it: its Raft log (SqliteRaftStorage, same SQLite file), its
 * state-machine store, and the pure side's shard (src/nodecore/replication.ts ReplicaShard: the RawNode, when it
 * fires, the applied index, the proposals and reads waiting on it).
 */
import type { HardState, RawNode, Role } from '../raft/index.js';
import type { SqliteRaftStorage } from '../store/raft-storage.js';
import type { SqliteShardStore } from '../store/shard-store.js';
import type { Applied, PendingProposal, ReplicaShard, ShardLeadership } from '../nodecore/index.js';

/** What a proposer waits for: its entry applied in the term it was proposed in. */
export interface Waiter {
  resolve(applied: Applied): void;
  reject(err: unknown): void;
}

/** The minimal view of a shard that the engine and the service need. */
export interface ShardStorage {
  readonly shard: number;
  readonly store: SqliteShardStore;
}

export class ShardGroup implements ShardStorage {
  /**
   * The last log index known to be on stable storage (--fsync batch): the state batch applies only entries at or
   * below it, so a state commit never holds an entry that a power loss could take from the log.
   */
  synced: number;
  /** A hard state Raft gave that the log does not hold yet (only its commit index changed): see RaftHost.persist. */
  pendingHard: HardState | null = null;

  constructor(
    readonly shard: number,
    readonly store: SqliteShardStore,
    readonly storage: SqliteRaftStorage,
    private readonly replica: ReplicaShard,
  ) {
    this.synced = storage.lastIndex();
  }

  get raw(): RawNode {
    return this.replica.raw;
  }

  /** When this node fires the shard (src/nodecore/leadership.ts decides). */
  get lead(): ShardLeadership {
    return this.replica.lead;
  }

  /** What the shard's rows hold (the applied_index in SQLite once its write committed). */
  get applied(): number {
    return this.replica.applied;
  }

  /** Log index -> the proposal waiting for it. */
  get proposals(): ReadonlyMap<number, PendingProposal> {
    return this.replica.proposals;
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

