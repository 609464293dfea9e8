/**
 * RawNode: the host's handle on one Raft group (etcd's RawNode). Feed it tick(), step(), propose(); take
 * ready(), do what it says in the documented order (types.ts, Ready), then advance().
 */
import { assert } from '../core/assert.js';
import { RaftBugs } from './bugs.js';
import { decodeConfChange } from './confchange.js';
import type { ProposeResult } from './raft.js';
import { Raft } from './raft.js';
import type { LogStorage } from './storage.js';
import type {
  ConfChange,
  ConfState,
  Config,
  Entry,
  HardState,
  LogIndex,
  Message,
  NodeId,
  Ready,
  Role,
  SoftState,
  Term,
} from './types.js';
import { noNode } from './types.js';

export interface ProgressStatus {
  readonly match: LogIndex;
  readonly next: LogIndex;
  readonly state: 'probe' | 'replicate' | 'snapshot';
  readonly isLearner: boolean;
  readonly inflight: number;
  readonly inflightBytes: number;
}

export interface Status {
  readonly id: NodeId;
  readonly group: number;
  readonly term: Term;
  readonly vote: NodeId;
  readonly lead: NodeId;
  readonly role: Role;
  readonly commit: LogIndex;
  readonly applied: LogIndex;
  readonly lastIndex: LogIndex;
  readonly leaseValid: boolean;
  readonly confState: ConfState;
  readonly corruptMessages: number;
  /** Leader only: each member's replication progress. */
  readonly progress: ReadonlyMap<NodeId, ProgressStatus>;
}

export interface BasicStatus {
  readonly role: Role;
  readonly term: Term;
  readonly lastIndex: LogIndex;
}

interface InFlightReady {
  readonly lastEntry: Entry | null;
  readonly snapshotIndex: LogIndex | null;
  readonly committed: readonly Entry[];
}

export class RawNode {
  private readonly raft: Raft;
  private prevSoft: SoftState;
  private prevHard: HardState;
  private inFlight: InFlightReady | null = null;

  constructor(config: Config, storage: LogStorage) {
    this.raft = new Raft(config, storage);
    this.prevSoft = this.softState();
    this.prevHard = this.hardState();
  }

  /** Advances logical time by one tick (elections, heartbeats, CheckQuorum, lease expiry). */
  tick(): void {
    this.raft.tick();
  }

  /** Starts an election now (tests, and a host that knows it is the only member). */
  campaign(): void {
    this.raft.hup(false);
  }

  /** Feeds a message received from a peer of this group. */
  step(m: Message): void {
    this.raft.step(m);
  }

  /** Appends `data` to the log if this node leads. Success is the entry (index, term) being applied. */
  propose(data: Uint8Array): ProposeResult {
    return this.raft.propose(data);
  }

  /** One single-server membership change at a time; see ConfChange for the learner-first rule. */
  proposeConfChange(change: ConfChange): ProposeResult {
    return this.raft.proposeConfChange(change);
  }

  /** Asks the leader (this node or, forwarded, the current one) to hand leadership to `to`. */
  transferLeader(to: NodeId): void {
    this.raft.transferLeader(to);
  }

  /**
   * Starts a linearizable read tagged `ctx` (unique per request). A ReadState with the same ctx appears in a
   * later Ready; serve the read once applied >= its index. Returns false if dropped (no known leader).
   */
  readIndex(ctx: string): boolean {
    assert(ctx !== '', 'readIndex ctx must not be empty');
    return this.raft.readIndex(ctx);
  }

  /** The transport could not reach `id`: stop streaming to it optimistically. */
  reportUnreachable(id: NodeId): void {
    this.raft.reportUnreachable(id);
  }

  /** The transport finished (ok) or abandoned (!ok) streaming a snapshot to `id`. */
  reportSnapshot(id: NodeId, ok: boolean): void {
    this.raft.reportSnapshot(id, ok);
  }

  /**
   * True while this node leads with a quorum-confirmed lease: a quorum answered a heartbeat round sent less
   * than leaseTicks ago, and no transfer is under way. No other node can become leader before it expires
   * (followers ignore campaigns for electionTicks after hearing from the leader; leaseTicks < electionTicks).
   */
  leaseValid(): boolean {
    return this.raft.leaseValid();
  }

  /** Ticks the lease holds for if none renews it (0: not valid now); see Raft.leaseTicksLeft. */
  leaseTicksLeft(): number {
    return this.raft.leaseTicksLeft();
  }

  /** A snapshot step() accepted that is not yet persisted (a stale snapshot is ignored and leaves none). */
  hasPendingSnapshot(): boolean {
    return this.raft.log.hasPendingSnapshot();
  }

  hasReady(): boolean {
    if (this.inFlight) return false;
    const r = this.raft;
    const hard = this.prevHard;
    const soft = this.prevSoft;
    // Compared field by field: a host asks this after every input, and most inputs change nothing.
    return (
      r.msgs.length > 0 ||
      r.readStates.length > 0 ||
      r.snapshotRequested ||
      r.log.unstable.entries.length > 0 ||
      r.log.hasPendingSnapshot() ||
      r.log.hasNextCommittedEntries() ||
      r.term !== hard.term ||
      r.vote !== hard.vote ||
      r.log.committed !== hard.commit ||
      r.lead !== soft.leader ||
      r.role !== soft.role
    );
  }

  /** What to persist, send and apply now (see Ready for the order). Call advance() when done. */
  ready(): Ready {
    assert(this.inFlight === null, 'ready() called again before advance()');
    const r = this.raft;
    const soft = this.softState();
    const hard = this.hardState();
    const entries = r.log.unstable.entries.slice();
    const snapshot = r.log.unstable.snapshot;
    const committedEntries = r.log.nextCommittedEntries(Infinity);
    const hardChanged = !sameHard(hard, this.prevHard);
    const rd: Ready = {
      softState: sameSoft(soft, this.prevSoft) ? null : soft,
      hardState: hardChanged ? this.persistedHard(hard) : null,
      snapshot,
      entries,
      messages: r.msgs,
      committedEntries,
      readStates: r.readStates,
      snapshotRequested: r.snapshotRequested,
      mustSync: entries.length > 0 || snapshot !== null || hard.term !== this.prevHard.term || hard.vote !== this.prevHard.vote,
    };
    r.msgs = [];
    r.readStates = [];
    r.snapshotRequested = false;
    this.prevSoft = soft;
    this.prevHard = hard;
    this.inFlight = {
      lastEntry: entries.length > 0 ? entries[entries.length - 1]! : null,
      snapshotIndex: snapshot ? snapshot.metadata.index : null,
      committed: committedEntries,
    };
    return rd;
  }

  /** The host has persisted, sent and applied the last Ready. */
  advance(): void {
    const done = this.inFlight;
    assert(done !== null, 'advance() without ready()');
    this.inFlight = null;
    const r = this.raft;
    if (done.snapshotIndex !== null) {
      r.log.unstable.stableSnapTo(done.snapshotIndex);
      r.log.appliedTo(done.snapshotIndex);
    }
    if (done.lastEntry) r.log.unstable.stableTo(done.lastEntry.index, done.lastEntry.term);
    for (const e of done.committed) {
      if (e.type === 'conf_change') r.applyConfChange(decodeConfChange(e.data));
    }
    if (done.committed.length > 0) r.log.appliedTo(done.committed[done.committed.length - 1]!.index);
    r.selfPersisted();
  }

  /** The membership as of the applied index (what a snapshot made now must record). */
  confState(): ConfState {
    return this.raft.confState();
  }

  /** The node's role, term and last log index without the rest of status() (no copies: cheap on every tick). */
  basicStatus(): BasicStatus {
    const r = this.raft;
    return { role: r.role, term: r.term, lastIndex: r.log.lastIndex() };
  }

  status(): Status {
    const r = this.raft;
    const progress = new Map<NodeId, ProgressStatus>();
    if (r.role === 'leader') {
      for (const [id, pr] of r.progress) {
        progress.set(id, {
          match: pr.match,
          next: pr.next,
          state: pr.state,
          isLearner: pr.isLearner,
          inflight: pr.inflights.count,
          inflightBytes: pr.inflights.bytes,
        });
      }
    }
    return {
      id: r.id,
      group: r.config.group,
      term: r.term,
      vote: r.vote,
      lead: r.lead,
      role: r.role,
      commit: r.log.committed,
      applied: r.log.applied,
      lastIndex: r.log.lastIndex(),
      leaseValid: r.leaseValid(),
      confState: r.confState(),
      corruptMessages: r.corruptMessages,
      progress,
    };
  }

  private softState(): SoftState {
    return { leader: this.raft.lead, role: this.raft.role };
  }

  private hardState(): HardState {
    const r = this.raft;
    return { term: r.term, vote: r.vote, commit: r.log.committed };
  }

  /** The hard state Ready asks to persist (RaftBugs.voteWithoutPersist drops a new vote in the same term). */
  private persistedHard(hard: HardState): HardState {
    if (!RaftBugs.voteWithoutPersist) return hard;
    const vote = hard.term === this.prevHard.term ? this.prevHard.vote : noNode;
    return { ...hard, vote };
  }
}

function sameHard(a: HardState, b: HardState): boolean {
  return a.term === b.term && a.vote === b.vote && a.commit === b.commit;
}

function sameSoft(a: SoftState, b: SoftState): boolean {
  return a.leader === b.leader && a.role === b.role;
}
