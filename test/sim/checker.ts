/**
 * The invariants, checked as events happen (so "after every step" costs O(1) per event, not a scan of every log):
 *  - election safety: at most one leader per term (per group);
 *  - log matching: an entry (index, term) has one content and one predecessor term wherever it is logged; by
 *    induction, two logs that share an (index, term) share the whole prefix before it;
 *  - leader completeness: a new leader's log holds every entry any node has applied;
 *  - commit never decreases within a process incarnation;
 *  - a leader advances its commit index only to an entry of its own term (paper 5.4.2: counting replicas of
 *    an older entry is what Figure 8 shows to be unsafe);
 *  - state machine safety: every node applies the same entry at each index, in order, and its state (a rolling
 *    hash of the applied prefix) equals everyone else's at that index, including after a snapshot restore;
 *  - leases: at most one node of a group holds a valid lease at any step;
 *  - acknowledged proposals: the entry a proposer acknowledged is the one everyone applies at that index.
 * The first violation throws a SimViolation; the simulator turns it into the failing result.
 */
import type { Entry, LogIndex, NodeId, Term } from '../../src/raft/index.js';

export type ViolationKind =
  | 'two_leaders_in_term'
  | 'log_matching'
  | 'leader_completeness'
  | 'commit_decreased'
  | 'commit_previous_term'
  | 'applied_mismatch'
  | 'apply_gap'
  | 'state_behind_compaction'
  | 'two_lease_holders'
  | 'acked_proposal_lost'
  | 'liveness'
  | 'raft_exception'
  // The whole-node simulator's scheduler invariants (node/invariants.ts).
  | 'acked_job_lost'
  | 'acked_cancel_lost'
  | 'fired_early'
  | 'fired_after_cancel'
  | 'fencing_token_decreased'
  | 'dedup_key_changed'
  | 'unknown_occurrence'
  | 'replicas_diverge'
  | 'not_fired_in_time'
  | 'node_exception';

export class SimViolation extends Error {
  override name = 'SimViolation';
  constructor(
    readonly kind: ViolationKind,
    message: string,
  ) {
    super(`${kind}: ${message}`);
  }
}

/** The state of an empty state machine (at the bootstrap snapshot). */
export const emptyStateHash = 0x811c9dc5;

export function nextStateHash(h: number, term: number, crc: number): number {
  let x = Math.imul(h ^ term, 0x01000193) >>> 0;
  x = Math.imul(x ^ crc, 0x01000193) >>> 0;
  return Math.imul(x ^ (x >>> 15), 0x2c1b3c6d) >>> 0;
}

/** What the checker knows about one group. */
class GroupFacts {
  readonly leaderByTerm = new Map<number, NodeId>();
  /** "index:term" -> "prevTerm:crc" */
  readonly logged = new Map<string, string>();
  /** Per index applied anywhere: term, crc and the state hash after it. Index 0 unused. */
  readonly appliedTerm: number[] = [];
  readonly appliedCrc: number[] = [];
  readonly hashAt: number[] = [];
  /** Per index: the lowest term in which some node knew it committed (its leader's term then). */
  readonly commitTermAt: number[] = [];
  elections = 0;

  constructor(bootstrapIndex: number) {
    this.hashAt[bootstrapIndex] = emptyStateHash;
  }

  maxApplied(): number {
    return this.appliedTerm.length - 1;
  }
}

export class Checker {
  private readonly groups: GroupFacts[] = [];
  /** Entries first applied anywhere (the "commits" of the summary). */
  commits = 0;

  constructor(groups: number, bootstrapIndex: number) {
    for (let g = 0; g < groups; g++) this.groups.push(new GroupFacts(bootstrapIndex));
  }

  elections(): number {
    let n = 0;
    for (const g of this.groups) n += g.elections;
    return n;
  }

  leaderElected(group: number, term: Term, id: NodeId): boolean {
    const f = this.groups[group]!;
    const known = f.leaderByTerm.get(term);
    if (known === id) return false;
    if (known !== undefined) fail('two_leaders_in_term', `group ${group} term ${term}: ${known} and ${id}`);
    f.leaderByTerm.set(term, id);
    f.elections++;
    return true;
  }

  entryLogged(group: number, node: NodeId, e: Entry, prevTerm: number): void {
    const f = this.groups[group]!;
    const key = `${e.index}:${e.term}`;
    const value = `${prevTerm}:${e.crc}`;
    const known = f.logged.get(key);
    if (known === undefined) f.logged.set(key, value);
    else if (known !== value) {
      fail('log_matching', `group ${group} ${node} logged (${key}) as prevTerm:crc ${value}, elsewhere ${known}`);
    }
  }

  /** `node`, in `term`, moved its commit index from `before` to `after`. */
  commitKnown(group: number, before: number, after: number, term: number): void {
    const c = this.groups[group]!.commitTermAt;
    for (let i = before + 1; i <= after; i++) if (!(c[i]! <= term)) c[i] = term;
  }

  /**
   * Leader completeness (paper 5.4): an entry known committed in a term below `term` is in the log of the
   * leader of `term`. Checked against applied entries (their content is known); `termAt` reads the new
   * leader's log and returns null for compacted indexes (those are inside its snapshot, all applied).
   */
  leaderComplete(group: number, node: NodeId, term: number, lastIndex: number, termAt: (i: LogIndex) => number | null): void {
    const f = this.groups[group]!;
    for (let i = f.maxApplied(); i >= 1; i--) {
      const want = f.appliedTerm[i];
      if (want === undefined || !(f.commitTermAt[i]! < term)) continue;
      if (i > lastIndex) fail('leader_completeness', `group ${group} leader ${node} of term ${term} lacks ${i} (last ${lastIndex})`);
      const t = termAt(i as LogIndex);
      if (t === null) break;
      if (t !== want) {
        fail('leader_completeness', `group ${group} leader ${node} of term ${term} has term ${t} at ${i}, committed term ${want}`);
      }
    }
  }

  commitMoved(group: number, node: NodeId, before: number, after: number, where: string): void {
    if (after < before) fail('commit_decreased', `group ${group} ${node} ${where} commit ${before} -> ${after}`);
  }

  /** A leader of `term` moved its commit index to an entry of `entryTerm`. */
  leaderCommitted(group: number, node: NodeId, term: number, commit: number, entryTerm: number | null): void {
    if (entryTerm !== null && entryTerm !== term) {
      fail('commit_previous_term', `group ${group} leader ${node} of term ${term} committed ${commit} of term ${entryTerm} by counting`);
    }
  }

  /** `hash` is the node's state after applying e. */
  applied(group: number, node: NodeId, e: Entry, hash: number): void {
    const f = this.groups[group]!;
    const i = e.index;
    const t = f.appliedTerm[i];
    if (t === undefined) {
      f.appliedTerm[i] = e.term;
      f.appliedCrc[i] = e.crc;
      f.hashAt[i] = hash;
      this.commits++;
      return;
    }
    if (t !== e.term || f.appliedCrc[i] !== e.crc) {
      fail('applied_mismatch', `group ${group} ${node} applied (${i}, term ${e.term}) where another node applied term ${t}`);
    }
    if (f.hashAt[i] !== hash) fail('applied_mismatch', `group ${group} ${node} state differs after index ${i}`);
  }

  /** A node's state machine was replaced by a snapshot at `index` with state `hash`. */
  restored(group: number, node: NodeId, index: number, hash: number): void {
    const f = this.groups[group]!;
    const want = f.hashAt[index];
    if (want === undefined) fail('applied_mismatch', `group ${group} ${node} restored a snapshot at ${index} nobody applied`);
    if (want !== hash) fail('applied_mismatch', `group ${group} ${node} restored a snapshot at ${index} with another state`);
  }

  appliedEntry(group: number, index: number): { term: number; crc: number } | null {
    const f = this.groups[group]!;
    const term = f.appliedTerm[index];
    return term === undefined ? null : { term, crc: f.appliedCrc[index]! };
  }

  maxApplied(group: number): number {
    return this.groups[group]!.maxApplied();
  }

  leases(group: number, holders: readonly NodeId[]): void {
    if (holders.length > 1) fail('two_lease_holders', `group ${group}: ${holders.join(', ')} hold a lease at once`);
  }
}

export function fail(kind: ViolationKind, message: string): never {
  throw new SimViolation(kind, message);
}
