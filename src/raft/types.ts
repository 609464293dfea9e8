/**
 * The vocabulary of the Raft core: branded numbers, entries, snapshots, messages, the Ready value and the config.
 * Pure: no node:* imports. Everything here crosses the boundary to the host (src/node) and the transport
 * (src/http/peer), so keep it plain data (msgpackr-friendly: numbers, strings, booleans, Uint8Array, arrays).
 */
import type { Brand, NodeId } from '../core/ids.js';
import type { Rand } from '../core/prng.js';

export type { NodeId } from '../core/ids.js';

/** A Raft term. 0 means "no term yet". */
export type Term = Brand<number, 'Term'>;
/** A position in the log, 1-based. 0 means "before the first entry". */
export type LogIndex = Brand<number, 'LogIndex'>;
/** Which Raft group (shard group) a message belongs to; many groups share one process and one transport. */
export type GroupId = number;

export const noNode = '' as NodeId;

export type EntryType = 'normal' | 'conf_change';

export interface Entry {
  readonly term: Term;
  readonly index: LogIndex;
  readonly type: EntryType;
  /** For 'conf_change': encodeConfChange(change). For the no-op entry of a new leader: empty. */
  readonly data: Uint8Array;
  /** crc32 over index, term, type and data (see entryCrc in crc32.ts); checked on receipt and on read. */
  readonly crc: number;
}

/** Persistent state: written before any message that depends on it leaves the node. */
export interface HardState {
  readonly term: Term;
  /** Who this node voted for in `term` (noNode if nobody). */
  readonly vote: NodeId;
  readonly commit: LogIndex;
}

/** Membership. Single-server changes only: at most one change in flight, learners separate from voters. */
export interface ConfState {
  readonly voters: readonly NodeId[];
  readonly learners: readonly NodeId[];
}

/**
 * One membership change. `add_voter` of an existing learner promotes it (allowed only once it has caught up);
 * `add_voter` of a node that is not yet a learner is refused: add it as a learner first.
 */
export type ConfChange =
  | { readonly type: 'add_learner'; readonly node: NodeId }
  | { readonly type: 'add_voter'; readonly node: NodeId }
  | { readonly type: 'remove'; readonly node: NodeId };

export interface SnapshotMetadata {
  readonly index: LogIndex;
  readonly term: Term;
  readonly confState: ConfState;
}

/** A state-machine image at `metadata.index`. `data` is opaque to Raft (the host's consistent copy). */
export interface Snapshot {
  readonly metadata: SnapshotMetadata;
  readonly data: Uint8Array;
}

export type Role = 'follower' | 'pre_candidate' | 'candidate' | 'leader';

/** Volatile state, reported by Ready only when it changes. */
export interface SoftState {
  readonly leader: NodeId;
  readonly role: Role;
}

/** A confirmed read: once the host has applied through `index`, a linearizable read tagged `ctx` may be served. */
export interface ReadState {
  readonly index: LogIndex;
  readonly ctx: string;
}

interface MessageBase {
  readonly group: GroupId;
  readonly from: NodeId;
  readonly to: NodeId;
  /** The sender's term (for pre_vote: the term it would campaign in). */
  readonly term: Term;
}

export interface VoteRequest extends MessageBase {
  readonly type: 'pre_vote' | 'vote';
  readonly lastLogIndex: LogIndex;
  readonly lastLogTerm: Term;
  /** Set when the campaign follows a leadership transfer: voters skip their leader-lease check. */
  readonly transfer: boolean;
}

export interface VoteResponse extends MessageBase {
  readonly type: 'pre_vote_resp' | 'vote_resp';
  readonly reject: boolean;
}

export interface AppendRequest extends MessageBase {
  readonly type: 'append';
  readonly prevIndex: LogIndex;
  readonly prevTerm: Term;
  readonly entries: readonly Entry[];
  readonly commit: LogIndex;
}

export interface AppendResponse extends MessageBase {
  readonly type: 'append_resp';
  readonly reject: boolean;
  /** Accepted: the last index now known to match. Rejected: the prevIndex that did not match. */
  readonly index: LogIndex;
  /** Rejected: a guess at the follower's last index whose term is <= hintTerm (fast backtracking). */
  readonly rejectHint: LogIndex;
  readonly hintTerm: Term;
}

export interface Heartbeat extends MessageBase {
  readonly type: 'heartbeat';
  readonly commit: LogIndex;
  /** The leader's tick counter when the heartbeat round was sent: echoed back, it starts the lease. */
  readonly sentTick: number;
  /** ReadIndex round context, '' if none. */
  readonly ctx: string;
}

export interface HeartbeatResponse extends MessageBase {
  readonly type: 'heartbeat_resp';
  readonly sentTick: number;
  readonly ctx: string;
}

export interface SnapshotMessage extends MessageBase {
  readonly type: 'snapshot';
  /** The transport may stream `snapshot.data` in chunks on a separate stream; the receiver sees it whole. */
  readonly snapshot: Snapshot;
}

export interface TimeoutNow extends MessageBase {
  readonly type: 'timeout_now';
}

/** A follower forwards ReadIndex and leadership-transfer requests to its leader. */
export interface ReadIndexRequest extends MessageBase {
  readonly type: 'read_index';
  readonly ctx: string;
}

export interface ReadIndexResponse extends MessageBase {
  readonly type: 'read_index_resp';
  readonly index: LogIndex;
  readonly ctx: string;
}

export interface TransferLeaderRequest extends MessageBase {
  readonly type: 'transfer_leader';
  readonly transferee: NodeId;
}

export type Message =
  | VoteRequest
  | VoteResponse
  | AppendRequest
  | AppendResponse
  | Heartbeat
  | HeartbeatResponse
  | SnapshotMessage
  | TimeoutNow
  | ReadIndexRequest
  | ReadIndexResponse
  | TransferLeaderRequest;

export type MessageType = Message['type'];

/**
 * What the host must do, in this order (etcd's Ready contract, synchronous version):
 *  1. Persist: if `snapshot`, install it (storage.applySnapshot and restore the state machine from its data);
 *     append `entries` (storage.append, which truncates any conflicting suffix); write `hardState`
 *     (storage.setHardState). Make all of it durable (fsync) when `mustSync`. An fsync error is fatal.
 *  2. Send `messages`, only after step 1 is durable: votes and acknowledgements promise what was persisted.
 *  3. Apply `committedEntries` in order (they may include entries from `entries`, now persisted).
 *  4. Call `advance()`. Do not call ready() again before advance().
 */
export interface Ready {
  readonly softState: SoftState | null;
  readonly hardState: HardState | null;
  readonly snapshot: Snapshot | null;
  readonly entries: readonly Entry[];
  readonly messages: readonly Message[];
  readonly committedEntries: readonly Entry[];
  readonly readStates: readonly ReadState[];
  /**
   * The leader needs a snapshot to catch a follower up and storage has none recent enough: the host should
   * make one at its applied index (storage.createSnapshot) when it can; the core retries by itself.
   */
  readonly snapshotRequested: boolean;
  readonly mustSync: boolean;
}

export interface Config {
  readonly id: NodeId;
  readonly group: GroupId;
  /** Followers wait at least this many ticks without a leader before campaigning (randomized in [n, 2n)). */
  readonly electionTicks: number;
  readonly heartbeatTicks: number;
  readonly preVote: boolean;
  readonly checkQuorum: boolean;
  /** Append messages in flight per follower (count). */
  readonly maxInflightMsgs: number;
  /** Payload bytes in flight per follower; 0 means no byte limit. */
  readonly maxInflightBytes: number;
  /** Soft limit on entry payload bytes per append message (at least one entry is always sent). */
  readonly maxMsgBytes: number;
  /** A leader's lease lasts this many ticks from the send of a heartbeat round a quorum answered. < electionTicks. */
  readonly leaseTicks: number;
  /** Election timeouts come from here: the simulator passes a seeded Prng. */
  readonly rand: Rand;
  /** Applied index to restart from (the host's state machine), default: the storage's snapshot index. */
  readonly applied?: LogIndex;
  /**
   * Ticks added to the election timeout during the first ticks after a start (what is left of them at each reset;
   * default 0). A host gives it to every node but a group's preferred leader, so that node wins the group's first
   * election when it is up, and leaderships are spread as soon as a cluster starts.
   */
  readonly bootCampaignDelayTicks?: number;
}
