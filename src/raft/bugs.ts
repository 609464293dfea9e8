/**
 * TEST-ONLY mutation switches. The simulator's mutation check flips one of these, runs, and must report an
 * invariant violation; that proves the simulator can catch that class of bug. Every switch defaults to false
 * and nothing in production code may set one. They are plain module state (no env reading: pure folder).
 */
export const RaftBugs = {
  /**
   * Ready reports a vote change without the new vote in its hard state: the vote response leaves the node
   * but a crash forgets the vote, so after a restart the node may vote twice in one term (two leaders).
   */
  voteWithoutPersist: false,
  /**
   * The leader commits any index a majority has, whatever its term (breaks Figure 8 of the Raft paper: an entry
   * of a previous term committed by count can later be overwritten).
   */
  commitPreviousTermByCount: false,
  /**
   * A leader that abandons a transfer after its timeout_now went out keeps leading: its lease stays void for the
   * rest of the term, so it never fires (nor serves lease reads) again while it leads.
   */
  keepLeadingAfterAbandonedTransfer: false,
};

export type RaftBugName = keyof typeof RaftBugs;

/** Turns every switch off (tests call it in afterEach). */
export function resetRaftBugs(): void {
  for (const k of Object.keys(RaftBugs) as RaftBugName[]) RaftBugs[k] = false;
}

/**
 * TEST-ONLY switches for rules of the node's replication layer (src/nodecore/replication.ts), which the node and
 * the whole-node simulator both run. Same contract as RaftBugs.
 */
export const HostBugs = {
  /**
   * A process that wakes from a stall (SIGSTOP) ticks once per interval however long it slept, and takes its
   * lease as Raft last saw it: a deposed leader fires (and serves lease reads) for its old term before it has
   * counted the time it missed.
   */
  leaseOnStaleTicks: false,
};

export type HostBugName = keyof typeof HostBugs;

export function resetHostBugs(): void {
  for (const k of Object.keys(HostBugs) as HostBugName[]) HostBugs[k] = false;
}
