/**
 * One shard's leadership as the firing side needs it, decided in one place. A node fires a shard from the moment
 * it leads it AND has applied everything before its term (up to the last index it had when it became leader, so
 * its store holds every earlier command's effects), in that term (the fencing token `${shard}.${term}`), until it
 * stops leading or its term changes (deposed and re-elected between two rounds: same role, new term). The
 * replication layer feeds Raft's facts; the answers say when to call NodeCore's leaderStart / leaderStop.
 */
import type { Role } from '../raft/index.js';

/** Raft's view the decisions need right after a round: the node's current term and last log index. */
export interface RaftStatus {
  term: number;
  lastIndex: number;
}

export class ShardLeadership {
  role: Role = 'follower';
  /** The leader this node knows ('' when none). */
  leader = '';
  /** The term this node leads in (when role is leader). */
  term = 0;
  /** Firing starts once everything up to here is applied. */
  fromIndex = 0;
  /** The firing side runs this shard. */
  firing = false;

  /** Raft's soft state changed. Returns true when firing must stop now. */
  softState(role: Role, leader: string, status: RaftStatus): boolean {
    const wasLeader = this.role === 'leader';
    this.role = role;
    this.leader = leader;
    if (wasLeader && role !== 'leader') return this.stop();
    if (!wasLeader && role === 'leader') this.lead(status);
    return false;
  }

  /** A round persisted a hard state with `term`. A leader whose term moved starts over; true when firing must stop. */
  hardTerm(term: number, status: RaftStatus): boolean {
    if (this.role !== 'leader' || term === this.term) return false;
    const stop = this.stop();
    this.lead(status);
    return stop;
  }

  /** Everything up to `applied` is applied on this node: the term to start firing in, or null. */
  caughtUp(applied: number): number | null {
    if (this.role !== 'leader' || this.firing || applied < this.fromIndex) return null;
    this.firing = true;
    return this.term;
  }

  /** Firing ends (lost leadership, a new term, close). True when it was firing. */
  stop(): boolean {
    if (!this.firing) return false;
    this.firing = false;
    return true;
  }

  private lead(status: RaftStatus): void {
    this.term = status.term;
    this.fromIndex = status.lastIndex;
  }
}
