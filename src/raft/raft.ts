/**
 * The Raft state machine (etcd's raft.go, written afresh in TypeScript). Synchronous and deterministic: input
 * arrives by tick() and step(), output accumulates in `msgs`, `readStates` and the log's unstable part, which
 * RawNode turns into Ready. Time is counted in ticks; randomness comes from config.rand.
 */
import { assert } from '../core/assert.js';
import { RaftBugs } from './bugs.js';
import { applyToConfState, decodeConfChange, encodeConfChange } from './confchange.js';
import { entryCrcOk, makeEntry } from './crc32.js';
import { RaftLog } from './log.js';
import { Progress, quorumMin, quorumSize } from './progress.js';
import type { LogStorage } from './storage.js';
import { StorageCompactedError } from './storage.js';
import type {
  AppendRequest,
  AppendResponse,
  ConfChange,
  ConfState,
  Config,
  Entry,
  Heartbeat,
  HeartbeatResponse,
  LogIndex,
  Message,
  NodeId,
  ReadState,
  Role,
  SnapshotMessage,
  Term,
  VoteRequest,
  VoteResponse,
} from './types.js';
import { noNode } from './types.js';

export type ProposeRejection =
  | 'not_leader'
  | 'transferring'
  | 'conf_change_pending'
  | 'not_caught_up'
  | 'invalid_change';

/** Where a proposal landed: it succeeded once the entry at `index` with `term` is applied. */
export type ProposeResult =
  | { readonly ok: true; readonly index: LogIndex; readonly term: Term }
  | { readonly ok: false; readonly reason: ProposeRejection };

type Outgoing = Message extends infer M ? (M extends Message ? Omit<M, 'group' | 'from' | 'term'> & { term?: Term } : never) : never;

interface PendingRead {
  readonly index: LogIndex;
  readonly from: NodeId;
  readonly acks: Set<NodeId>;
}

export function validateConfig(c: Config): void {
  assert(c.electionTicks > c.heartbeatTicks, 'electionTicks must exceed heartbeatTicks');
  assert(c.heartbeatTicks >= 1, 'heartbeatTicks must be >= 1');
  assert(c.bootCampaignDelayTicks === undefined || (Number.isInteger(c.bootCampaignDelayTicks) && c.bootCampaignDelayTicks >= 0), 'bootCampaignDelayTicks must be a non-negative integer');
  assert(c.leaseTicks < c.electionTicks, 'leaseTicks must be < electionTicks (the lease must end before a new election)');
  assert(c.leaseTicks >= 0, 'leaseTicks must be >= 0');
  assert(c.maxInflightMsgs >= 1, 'maxInflightMsgs must be >= 1');
  assert(c.maxInflightBytes >= 0, 'maxInflightBytes must be >= 0');
  assert(c.maxMsgBytes >= 1, 'maxMsgBytes must be >= 1');
  assert(c.id !== noNode, 'config.id must not be empty');
}

export class Raft {
  readonly id: NodeId;
  readonly log: RaftLog;
  term = 0 as Term;
  vote = noNode;
  lead = noNode;
  role: Role = 'follower';
  msgs: Message[] = [];
  readStates: ReadState[] = [];
  /** Set when a follower needs a snapshot that storage cannot give; RawNode reports it in Ready once. */
  snapshotRequested = false;
  /** Append messages dropped because an entry failed its crc (a corrupted frame). */
  corruptMessages = 0;

  voters = new Set<NodeId>();
  learners = new Set<NodeId>();
  progress = new Map<NodeId, Progress>();
  private votes = new Map<NodeId, boolean>();

  leadTransferee = noNode;
  /** The index of the latest conf change proposed by this leader; no new one until it is applied. */
  pendingConfIndex = 0 as LogIndex;
  /** Monotone tick counter of this incarnation: heartbeat rounds and the lease are measured against it. */
  tickCount = 0;
  /** Once this leader has sent timeout_now, its lease is void for the rest of its term. */
  private leaseVoid = false;
  /** Restarted with a term: it may have acked a lease before the crash, so it sits out one election timeout. */
  private readonly bootLease: boolean;
  private electionElapsed = 0;
  private heartbeatElapsed = 0;
  private randomizedElectionTimeout = 0;
  private pendingReads = new Map<string, PendingRead>();
  private readQueue: string[] = [];
  /** Reads that arrived before this leader committed an entry of its term (index unknown until then). */
  private readsBeforeCommit: { ctx: string; from: NodeId }[] = [];

  constructor(
    readonly config: Config,
    storage: LogStorage,
  ) {
    validateConfig(config);
    this.id = config.id;
    this.log = new RaftLog(storage);
    const { hardState, confState } = storage.initialState();
    this.setConf(confState);
    this.bootLease = hardState.term > 0;
    if (hardState.term > 0 || hardState.commit > 0) {
      this.term = hardState.term;
      this.vote = hardState.vote;
      this.log.commitTo(hardState.commit);
    }
    const applied = config.applied ?? this.log.applied;
    this.replayConfChanges(applied, storage);
    this.becomeFollower(this.term, noNode);
  }

  /** Restart: conf changes logged after the snapshot and already applied by the host are not replayed by it. */
  private replayConfChanges(applied: LogIndex, storage: LogStorage): void {
    assert(applied <= this.log.committed, `applied ${applied} past commit ${this.log.committed}`);
    if (applied > this.log.applied) {
      const lo = (this.log.applied + 1) as LogIndex;
      const hi = (applied + 1) as LogIndex;
      // Every entry here is in storage (nothing is unstable at construction): a storage that can pick out the conf
      // changes spares reading the whole range (up to the kept log of every group at each start).
      const entries = storage.confChanges?.(lo, hi) ?? this.log.slice(lo, hi, Infinity);
      for (const e of entries) {
        if (e.type === 'conf_change') this.applyConfChange(decodeConfChange(e.data));
      }
      this.log.appliedTo(applied);
    }
  }

  // ---------------------------------------------------------------- membership

  confState(): ConfState {
    return { voters: [...this.voters].sort(), learners: [...this.learners].sort() };
  }

  setConf(cs: ConfState): void {
    this.voters = new Set(cs.voters);
    this.learners = new Set(cs.learners);
    const old = this.progress;
    this.progress = new Map();
    const next = (this.log.lastIndex() + 1) as LogIndex;
    for (const id of [...cs.voters, ...cs.learners]) {
      const pr = old.get(id) ?? this.newProgress(id, next);
      pr.isLearner = this.learners.has(id);
      this.progress.set(id, pr);
    }
  }

  private newProgress(id: NodeId, next: LogIndex): Progress {
    const c = this.config;
    return new Progress(id, next, c.maxInflightMsgs, c.maxInflightBytes, false);
  }

  promotable(): boolean {
    return this.voters.has(this.id);
  }

  /** Called when a conf_change entry is applied (RawNode.advance, or replay at restart). */
  applyConfChange(cc: ConfChange): void {
    const added = !this.progress.has(cc.node) && cc.type !== 'remove';
    this.setConf(applyToConfState(this.confState(), cc));
    const pr = this.progress.get(cc.node);
    if (added && pr) {
      // A new member: probe from our last index, and count it as active so CheckQuorum gives it time.
      pr.next = this.log.lastIndex();
      pr.recentActive = true;
    }
    if (this.role !== 'leader') return;
    if (!this.voters.has(this.id)) {
      // This leader was removed: step down so the remaining voters elect a leader among themselves.
      this.becomeFollower(this.term, noNode);
      return;
    }
    if (this.leadTransferee !== noNode && !this.voters.has(this.leadTransferee)) this.leadTransferee = noNode;
    if (this.maybeCommit()) this.bcastAppend();
    else if (added) this.sendAppend(cc.node);
  }

  // ---------------------------------------------------------------- roles

  private reset(term: Term): void {
    if (this.term !== term) {
      this.term = term;
      this.vote = noNode;
    }
    this.lead = noNode;
    this.electionElapsed = 0;
    this.heartbeatElapsed = 0;
    this.resetRandomizedElectionTimeout();
    this.leadTransferee = noNode;
    this.leaseVoid = false;
    this.votes.clear();
    this.pendingReads.clear();
    this.readQueue = [];
    this.readsBeforeCommit = [];
    const last = this.log.lastIndex();
    for (const pr of this.progress.values()) {
      const learner = pr.isLearner;
      const fresh = this.newProgress(pr.id, (last + 1) as LogIndex);
      fresh.isLearner = learner;
      if (pr.id === this.id) fresh.match = this.log.stableIndex();
      this.progress.set(pr.id, fresh);
    }
    this.pendingConfIndex = 0 as LogIndex;
  }

  private resetRandomizedElectionTimeout(): void {
    const n = this.config.electionTicks;
    // What is left of the boot delay: right after a start, the group's preferred leader campaigns before the others.
    const boot = Math.max(0, (this.config.bootCampaignDelayTicks ?? 0) - this.tickCount);
    this.randomizedElectionTimeout = n + this.config.rand.int(n) + boot;
  }

  becomeFollower(term: Term, lead: NodeId): void {
    this.reset(term);
    this.lead = lead;
    this.role = 'follower';
  }

  private becomePreCandidate(): void {
    assert(this.role !== 'leader', 'leader cannot become pre-candidate');
    // Term and vote stay: a pre-vote round changes nothing durable.
    this.votes.clear();
    this.lead = noNode;
    this.role = 'pre_candidate';
  }

  private becomeCandidate(): void {
    assert(this.role !== 'leader', 'leader cannot become candidate');
    this.reset((this.term + 1) as Term);
    this.vote = this.id;
    this.role = 'candidate';
  }

  private becomeLeader(): void {
    assert(this.role === 'candidate', `becomeLeader from ${this.role}`);
    this.reset(this.term);
    this.lead = this.id;
    this.role = 'leader';
    const self = this.progress.get(this.id);
    if (self) self.becomeReplicate();
    // Conservative: a conf change may sit in the uncommitted tail, so wait for everything to apply first.
    this.pendingConfIndex = this.log.lastIndex();
    // The no-op: committing it commits every earlier entry (the leader only counts current-term entries).
    this.appendEntries([{ type: 'normal', data: new Uint8Array(0) }]);
  }

  // ---------------------------------------------------------------- ticks

  tick(): void {
    this.tickCount++;
    if (this.role === 'leader') this.tickHeartbeat();
    else this.tickElection();
  }

  private tickElection(): void {
    this.electionElapsed++;
    if (this.promotable() && this.electionElapsed >= this.randomizedElectionTimeout) {
      this.electionElapsed = 0;
      this.hup(false);
    }
  }

  private tickHeartbeat(): void {
    this.heartbeatElapsed++;
    this.electionElapsed++;
    if (this.electionElapsed >= this.config.electionTicks) {
      this.electionElapsed = 0;
      if (this.config.checkQuorum && !this.quorumActive()) {
        this.becomeFollower(this.term, noNode);
        return;
      }
      if (this.leadTransferee !== noNode && this.leaseVoid && !RaftBugs.keepLeadingAfterAbandonedTransfer) {
        // An abandoned transfer whose timeout_now went out: the transferee may still act on it (its campaign
        // bypasses the voters' lease checks), so this leader's lease stays void for the term and it could never
        // fire or serve lease reads again. Step down: the next election (which it may win) starts a term with
        // a lease.
        this.becomeFollower(this.term, noNode);
        return;
      }
      this.leadTransferee = noNode; // a transfer not done within an election timeout is abandoned
    }
    if (this.heartbeatElapsed >= this.config.heartbeatTicks) {
      this.heartbeatElapsed = 0;
      this.bcastHeartbeat(this.readQueue.length > 0 ? this.readQueue[this.readQueue.length - 1]! : '');
    }
  }

  /** CheckQuorum: did a quorum of voters (counting us) talk to us during the last election timeout? */
  private quorumActive(): boolean {
    let active = 0;
    for (const id of this.voters) {
      const pr = this.progress.get(id)!;
      if (id === this.id || pr.recentActive) active++;
      pr.recentActive = false;
    }
    return active >= quorumSize(this.voters.size);
  }

  // ---------------------------------------------------------------- elections

  /** Starts an election (or pre-election) if this node may. `transfer`: ordered by the old leader. */
  hup(transfer: boolean): void {
    if (this.role === 'leader' || !this.promotable()) return;
    if (this.hasUnappliedConfChange()) return; // the membership we would lead with is not final yet
    if (this.config.preVote && !transfer) this.campaign('pre_vote', false);
    else this.campaign('vote', transfer);
  }

  private hasUnappliedConfChange(): boolean {
    if (this.log.committed <= this.log.applied) return false;
    const ents = this.log.slice((this.log.applied + 1) as LogIndex, (this.log.committed + 1) as LogIndex, Infinity);
    return ents.some((e) => e.type === 'conf_change');
  }

  private campaign(kind: 'pre_vote' | 'vote', transfer: boolean): void {
    let term: Term;
    if (kind === 'pre_vote') {
      this.becomePreCandidate();
      term = (this.term + 1) as Term;
    } else {
      this.becomeCandidate();
      term = this.term;
    }
    if (this.poll(this.id, true) === 'won') {
      if (kind === 'pre_vote') this.campaign('vote', transfer);
      else this.becomeLeader();
      return;
    }
    const lastLogIndex = this.log.lastIndex();
    const lastLogTerm = this.log.lastTerm();
    for (const id of [...this.voters].sort()) {
      if (id === this.id) continue;
      this.send({ type: kind, to: id, term, lastLogIndex, lastLogTerm, transfer });
    }
  }

  private poll(id: NodeId, granted: boolean): 'won' | 'lost' | 'pending' {
    if (!this.votes.has(id)) this.votes.set(id, granted);
    let yes = 0;
    let no = 0;
    for (const v of this.voters) {
      const g = this.votes.get(v);
      if (g === true) yes++;
      else if (g === false) no++;
    }
    const q = quorumSize(this.voters.size);
    if (yes >= q) return 'won';
    if (no > this.voters.size - q) return 'lost';
    return 'pending';
  }

  // ---------------------------------------------------------------- step

  step(m: Message): void {
    assert(m.group === this.config.group, `message for group ${m.group} stepped into group ${this.config.group}`);
    assert(m.to === this.id, `message to ${m.to} stepped into ${this.id}`);
    if (m.term > this.term) {
      if (!this.stepHigherTerm(m)) return;
    } else if (m.term < this.term) {
      this.stepLowerTerm(m);
      return;
    }
    if (m.type === 'pre_vote' || m.type === 'vote') {
      this.stepVoteRequest(m);
      return;
    }
    if (this.role === 'leader') this.stepLeader(m);
    else if (this.role === 'follower') this.stepFollower(m);
    else this.stepCandidate(m);
  }

  /** True when this node is within a leader's lease (or just started), so it refuses to help elect another. */
  private inLease(): boolean {
    if (!this.config.checkQuorum) return false;
    if (this.bootLease && this.tickCount < this.config.electionTicks) return true;
    return this.lead !== noNode && this.electionElapsed < this.config.electionTicks;
  }

  /** Returns whether processing continues. */
  private stepHigherTerm(m: Message): boolean {
    if (m.type === 'pre_vote' || m.type === 'vote') {
      // Leader stickiness: a node that hears from a live leader ignores campaigns (this also makes leases safe).
      if (!m.transfer && this.inLease()) return false;
      if (m.type === 'pre_vote') return true; // a pre-vote never changes our term
    } else if (m.type === 'pre_vote_resp' && !m.reject) {
      return true; // a granted pre-vote carries the future term we asked for
    }
    const fromLeader = m.type === 'append' || m.type === 'heartbeat' || m.type === 'snapshot';
    this.becomeFollower(m.term, fromLeader ? m.from : noNode);
    return true;
  }

  private stepLowerTerm(m: Message): void {
    if ((this.config.checkQuorum || this.config.preVote) && (m.type === 'append' || m.type === 'heartbeat')) {
      // A stale leader (maybe cut off, then healed): tell it our term so it steps down. Under PreVote it
      // cannot learn it from a vote request, since partitioned nodes no longer inflate their terms.
      this.sendAppendResponse(m.from, false, 0 as LogIndex);
    } else if (m.type === 'pre_vote') {
      this.send({ type: 'pre_vote_resp', to: m.from, reject: true });
    }
  }

  private stepVoteRequest(m: VoteRequest): void {
    const canVote =
      this.vote === m.from ||
      (this.vote === noNode && this.lead === noNode) ||
      (m.type === 'pre_vote' && m.term > this.term);
    const respType = m.type === 'vote' ? 'vote_resp' : 'pre_vote_resp';
    if (canVote && this.log.isUpToDate(m.lastLogIndex, m.lastLogTerm)) {
      // Answer a pre-vote in the term it asked about, so the pre-candidate can count it.
      this.send({ type: respType, to: m.from, term: m.term, reject: false });
      if (m.type === 'vote') {
        this.electionElapsed = 0;
        this.vote = m.from;
      }
    } else {
      this.send({ type: respType, to: m.from, reject: true });
    }
  }

  private stepCandidate(m: Message): void {
    const myResp = this.role === 'pre_candidate' ? 'pre_vote_resp' : 'vote_resp';
    switch (m.type) {
      case 'append':
      case 'heartbeat':
      case 'snapshot':
        this.becomeFollower(m.term, m.from);
        this.stepFollower(m);
        return;
      case 'pre_vote_resp':
      case 'vote_resp': {
        if (m.type !== myResp) return;
        const r = this.poll(m.from, !m.reject);
        if (r === 'won') {
          if (this.role === 'pre_candidate') this.campaign('vote', false);
          else {
            this.becomeLeader();
            this.bcastAppend();
          }
        } else if (r === 'lost') {
          this.becomeFollower(this.term, noNode);
        }
        return;
      }
      default:
        return; // no leader to forward to
    }
  }

  private stepFollower(m: Message): void {
    switch (m.type) {
      case 'append':
        this.electionElapsed = 0;
        this.lead = m.from;
        this.handleAppend(m);
        return;
      case 'heartbeat':
        this.electionElapsed = 0;
        this.lead = m.from;
        this.handleHeartbeat(m);
        return;
      case 'snapshot':
        this.electionElapsed = 0;
        this.lead = m.from;
        this.handleSnapshot(m);
        return;
      case 'timeout_now':
        // Leadership transfer: campaign at once, skipping pre-vote, and voters skip their lease check.
        this.hup(true);
        return;
      case 'transfer_leader':
        if (this.lead !== noNode) this.send({ type: 'transfer_leader', to: this.lead, transferee: m.transferee });
        return;
      case 'read_index_resp':
        this.readStates.push({ index: m.index, ctx: m.ctx });
        return;
      default:
        return;
    }
  }

  // ---------------------------------------------------------------- follower handlers

  private handleAppend(m: AppendRequest): void {
    for (const e of m.entries) {
      if (!entryCrcOk(e)) {
        this.corruptMessages++; // a corrupted frame: drop it without an answer; the leader will resend
        return;
      }
    }
    if (m.prevIndex < this.log.committed) {
      this.sendAppendResponse(m.from, false, this.log.committed);
      return;
    }
    const lastNew = this.log.maybeAppend(m.prevIndex, m.prevTerm, m.commit, m.entries);
    if (lastNew !== null) {
      this.sendAppendResponse(m.from, false, lastNew);
      return;
    }
    const hint = Math.min(m.prevIndex, this.log.lastIndex()) as LogIndex;
    const [hintIndex, hintTerm] = this.log.findConflictByTerm(hint, m.prevTerm);
    this.sendAppendResponse(m.from, true, m.prevIndex, hintIndex, hintTerm);
  }

  private handleHeartbeat(m: Heartbeat): void {
    this.log.commitTo(Math.min(m.commit, this.log.lastIndex()) as LogIndex);
    this.send({ type: 'heartbeat_resp', to: m.from, sentTick: m.sentTick, ctx: m.ctx });
  }

  private handleSnapshot(m: SnapshotMessage): void {
    const s = m.snapshot.metadata;
    if (s.index <= this.log.committed) {
      this.sendAppendResponse(m.from, false, this.log.committed);
      return;
    }
    if (this.log.matchTerm(s.index, s.term)) {
      // We already hold the snapshot's last entry: just move commit forward, keep the log.
      this.log.commitTo(s.index);
      this.sendAppendResponse(m.from, false, this.log.lastIndex());
      return;
    }
    this.log.restore(m.snapshot);
    this.setConf(s.confState);
    this.sendAppendResponse(m.from, false, this.log.lastIndex());
  }

  // ---------------------------------------------------------------- leader

  private stepLeader(m: Message): void {
    switch (m.type) {
      case 'append_resp':
        this.handleAppendResponse(m);
        return;
      case 'heartbeat_resp':
        this.handleHeartbeatResponse(m);
        return;
      case 'read_index':
        this.readIndex(m.ctx, m.from);
        return;
      case 'transfer_leader':
        this.transferLeader(m.transferee);
        return;
      default:
        return;
    }
  }

  private handleAppendResponse(m: AppendResponse): void {
    const pr = this.progress.get(m.from);
    if (!pr) return;
    pr.recentActive = true;
    if (m.reject) {
      let next = m.rejectHint;
      if (m.hintTerm > 0) next = this.log.findConflictByTerm(m.rejectHint, m.hintTerm)[0];
      if (pr.maybeDecrTo(m.index, next)) {
        if (pr.state === 'replicate') pr.becomeProbe();
        this.sendAppend(m.from);
      }
      return;
    }
    const wasPaused = pr.isPaused();
    if (pr.maybeUpdate(m.index)) {
      if (pr.state === 'probe') pr.becomeReplicate();
      else if (pr.state === 'snapshot' && pr.match + 1 >= this.log.firstIndex()) {
        pr.becomeProbe();
        pr.becomeReplicate();
      } else if (pr.state === 'replicate') pr.inflights.freeLE(m.index);
      if (this.maybeCommit()) this.bcastAppend();
      else if (wasPaused) this.sendAppend(m.from);
      while (this.maybeSendAppend(m.from, false)) {
        // keep the pipe full while the in-flight limits allow
      }
      if (m.from === this.leadTransferee && pr.match === this.log.lastIndex()) this.sendTimeoutNow(m.from);
    }
  }

  private handleHeartbeatResponse(m: HeartbeatResponse): void {
    const pr = this.progress.get(m.from);
    if (!pr) return;
    pr.recentActive = true;
    pr.probeSent = false;
    if (m.sentTick > pr.leaseAckTick) pr.leaseAckTick = m.sentTick;
    // A live follower with a full window lost some appends (silently): free a slot so the pipe restarts.
    if (pr.state === 'replicate' && pr.inflights.full()) pr.inflights.freeFirstOne();
    if (pr.match < this.log.lastIndex()) this.sendAppend(m.from);
    if (m.ctx !== '') this.ackRead(m.ctx, m.from);
  }

  /** Commits the largest index a quorum holds, but only if it is from this term (paper 5.4.2, Figure 8). */
  maybeCommit(): boolean {
    const matches: number[] = [];
    for (const id of this.voters) matches.push(this.progress.get(id)!.match);
    if (matches.length === 0) return false;
    const mci = quorumMin(matches) as LogIndex;
    if (mci <= this.log.committed) return false;
    if (!RaftBugs.commitPreviousTermByCount && this.log.term(mci) !== this.term) return false;
    this.log.commitTo(mci);
    if (this.log.term(mci) === this.term) this.releaseReadsBeforeCommit();
    return true;
  }

  /** The host persisted the log through `index` (RawNode.advance): the leader counts its own copy now. */
  selfPersisted(): void {
    if (this.role !== 'leader') return;
    const self = this.progress.get(this.id);
    if (self && self.maybeUpdate(this.log.stableIndex()) && this.maybeCommit()) this.bcastAppend();
  }

  appendEntries(ents: { type: Entry['type']; data: Uint8Array }[]): LogIndex {
    let index = this.log.lastIndex();
    const full: Entry[] = ents.map((e) => makeEntry((++index) as LogIndex, this.term, e.type, e.data));
    return this.log.append(full);
  }

  bcastAppend(): void {
    for (const id of this.progress.keys()) if (id !== this.id) this.sendAppend(id);
  }

  sendAppend(to: NodeId): void {
    this.maybeSendAppend(to, true);
  }

  /** Sends the next append to `to` if its progress allows. Falls back to a snapshot if the entries are gone. */
  private maybeSendAppend(to: NodeId, sendIfEmpty: boolean): boolean {
    const pr = this.progress.get(to);
    if (!pr || pr.isPaused()) return false;
    const prevIndex = (pr.next - 1) as LogIndex;
    const prevTerm = this.log.term(prevIndex);
    let entries: Entry[];
    try {
      entries = prevTerm === null ? [] : this.log.entriesFrom(pr.next, this.config.maxMsgBytes);
    } catch (err) {
      if (!(err instanceof StorageCompactedError)) throw err;
      return this.sendSnapshot(pr);
    }
    if (prevTerm === null) return this.sendSnapshot(pr);
    if (entries.length === 0 && !sendIfEmpty) return false;
    let bytes = 0;
    for (const e of entries) bytes += e.data.length;
    this.send({ type: 'append', to, prevIndex, prevTerm, entries, commit: this.log.committed });
    pr.sentEntries(entries.length, bytes);
    return true;
  }

  private sendSnapshot(pr: Progress): boolean {
    if (!pr.recentActive) return false; // do not ship a snapshot to a node that may be down
    const snap = this.log.snapshot();
    if (!snap || snap.metadata.index < this.log.firstIndex() - 1 || snap.metadata.index === 0) {
      this.snapshotRequested = true;
      return false;
    }
    pr.becomeSnapshot(snap.metadata.index);
    this.send({ type: 'snapshot', to: pr.id, snapshot: snap });
    return true;
  }

  private bcastHeartbeat(ctx: string): void {
    for (const pr of this.progress.values()) {
      if (pr.id === this.id) continue;
      // Never tell a follower to commit past what it is known to hold.
      const commit = Math.min(pr.match, this.log.committed) as LogIndex;
      this.send({ type: 'heartbeat', to: pr.id, commit, sentTick: this.tickCount, ctx });
    }
  }

  /** Valid while a quorum answered a heartbeat round sent less than leaseTicks ago (see README, "Lease"). */
  leaseValid(): boolean {
    return this.leaseTicksLeft() > 0;
  }

  /**
   * Ticks the lease holds for from now if no tick renews it: valid until the tick counter has advanced this many
   * more times (0: not valid now). Lets a holder outside this loop trust it until a deadline it cannot ask again.
   */
  leaseTicksLeft(): number {
    if (this.role !== 'leader' || this.leaseVoid || this.leadTransferee !== noNode) return 0;
    if (!this.config.checkQuorum) return 0; // the lease relies on followers' stickiness (CheckQuorum)
    const acks: number[] = [];
    for (const id of this.voters) acks.push(id === this.id ? this.tickCount : this.progress.get(id)!.leaseAckTick);
    if (acks.length === 0) return 0;
    return Math.max(0, quorumMin(acks) + this.config.leaseTicks - this.tickCount);
  }

  // ---------------------------------------------------------------- proposals

  propose(data: Uint8Array): ProposeResult {
    if (this.role !== 'leader') return { ok: false, reason: 'not_leader' };
    if (this.leadTransferee !== noNode) return { ok: false, reason: 'transferring' };
    const index = this.appendEntries([{ type: 'normal', data }]);
    this.bcastAppend();
    return { ok: true, index, term: this.term };
  }

  proposeConfChange(cc: ConfChange): ProposeResult {
    if (this.role !== 'leader') return { ok: false, reason: 'not_leader' };
    if (this.leadTransferee !== noNode) return { ok: false, reason: 'transferring' };
    if (this.pendingConfIndex > this.log.applied) return { ok: false, reason: 'conf_change_pending' };
    const rejection = this.checkConfChange(cc);
    if (rejection) return { ok: false, reason: rejection };
    const index = this.appendEntries([{ type: 'conf_change', data: encodeConfChange(cc) }]);
    this.pendingConfIndex = index;
    this.bcastAppend();
    return { ok: true, index, term: this.term };
  }

  private checkConfChange(cc: ConfChange): ProposeRejection | null {
    const isVoter = this.voters.has(cc.node);
    const isLearner = this.learners.has(cc.node);
    if (cc.node === noNode) return 'invalid_change';
    switch (cc.type) {
      case 'add_learner':
        return isVoter || isLearner ? 'invalid_change' : null;
      case 'add_voter': {
        if (!isLearner) return 'invalid_change'; // add as a learner first, let it catch up, then promote
        const pr = this.progress.get(cc.node)!;
        return pr.match >= this.log.committed ? null : 'not_caught_up';
      }
      case 'remove':
        if (!isVoter && !isLearner) return 'invalid_change';
        return isVoter && this.voters.size === 1 ? 'invalid_change' : null;
    }
  }

  transferLeader(to: NodeId): void {
    if (this.role !== 'leader') {
      if (this.lead !== noNode && this.lead !== this.id) {
        this.send({ type: 'transfer_leader', to: this.lead, transferee: to });
      }
      return;
    }
    if (to === this.id || !this.voters.has(to) || this.leadTransferee === to) return;
    this.leadTransferee = to;
    this.electionElapsed = 0; // the transfer must finish within one election timeout or is abandoned
    const pr = this.progress.get(to)!;
    if (pr.match === this.log.lastIndex()) this.sendTimeoutNow(to);
    else this.sendAppend(to);
  }

  private sendTimeoutNow(to: NodeId): void {
    this.leaseVoid = true; // the transferee's campaign bypasses the voters' lease checks
    this.send({ type: 'timeout_now', to });
  }

  // ---------------------------------------------------------------- ReadIndex

  /** Starts a linearizable read; `from` is this node or the follower that forwarded it. Returns false if dropped. */
  readIndex(ctx: string, from: NodeId = this.id): boolean {
    if (this.role !== 'leader') {
      if (this.lead === noNode || from !== this.id) return false;
      this.send({ type: 'read_index', to: this.lead, ctx });
      return true;
    }
    if (this.voters.size === 1) {
      this.answerRead(ctx, from, this.log.committed);
      return true;
    }
    if (this.log.term(this.log.committed) !== this.term) {
      // Until this leader commits in its term it does not know the true commit index.
      this.readsBeforeCommit.push({ ctx, from });
      return true;
    }
    this.startReadRound(ctx, from);
    return true;
  }

  private startReadRound(ctx: string, from: NodeId): void {
    if (this.pendingReads.has(ctx)) return;
    this.pendingReads.set(ctx, { index: this.log.committed, from, acks: new Set([this.id]) });
    this.readQueue.push(ctx);
    this.bcastHeartbeat(ctx);
  }

  private releaseReadsBeforeCommit(): void {
    const waiting = this.readsBeforeCommit;
    this.readsBeforeCommit = [];
    for (const r of waiting) this.startReadRound(r.ctx, r.from);
  }

  private ackRead(ctx: string, from: NodeId): void {
    const pending = this.pendingReads.get(ctx);
    if (!pending || !this.voters.has(from)) return;
    pending.acks.add(from);
    let n = 0;
    for (const id of pending.acks) if (this.voters.has(id)) n++;
    if (n < quorumSize(this.voters.size)) return;
    // A quorum confirmed leadership as of this round, so every earlier queued read is confirmed too.
    const at = this.readQueue.indexOf(ctx);
    const done = this.readQueue.splice(0, at + 1);
    for (const c of done) {
      const r = this.pendingReads.get(c)!;
      this.pendingReads.delete(c);
      this.answerRead(c, r.from, r.index);
    }
  }

  private answerRead(ctx: string, from: NodeId, index: LogIndex): void {
    if (from === this.id) this.readStates.push({ index, ctx });
    else this.send({ type: 'read_index_resp', to: from, index, ctx });
  }

  // ---------------------------------------------------------------- snapshots and output

  reportSnapshot(to: NodeId, ok: boolean): void {
    const pr = this.progress.get(to);
    if (this.role !== 'leader' || !pr || pr.state !== 'snapshot') return;
    if (!ok) pr.pendingSnapshot = 0 as LogIndex;
    pr.becomeProbe();
    pr.probeSent = true; // wait for a heartbeat answer before probing again
  }

  reportUnreachable(to: NodeId): void {
    const pr = this.progress.get(to);
    if (this.role === 'leader' && pr && pr.state === 'replicate') pr.becomeProbe();
  }

  /** Completes a fresh message literal in place (no spread: this is the hot path of replication). */
  private send(m: Outgoing): void {
    const full = m as { group?: number; from?: NodeId; term?: Term };
    full.group = this.config.group;
    full.from = this.id;
    if (full.term === undefined) full.term = this.term;
    this.msgs.push(m as unknown as Message);
  }

  private sendAppendResponse(to: NodeId, reject: boolean, index: LogIndex, rejectHint = 0 as LogIndex, hintTerm = 0 as Term): void {
    this.send({ type: 'append_resp', to, reject, index, rejectHint, hintTerm });
  }
}
