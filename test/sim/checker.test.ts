/** The checker and the simulated disk on their own: each invariant fires on a hand-made violation. */
import { describe, expect, it } from 'vitest';
import { Prng } from '../../src/core/prng.js';
import { makeEntry } from '../../src/raft/index.js';
import type { LogIndex, NodeId, Term } from '../../src/raft/index.js';
import { Checker, SimViolation, emptyStateHash, nextStateHash } from './checker.js';
import { SimDisk } from './disk.js';

const n1 = 'n1' as NodeId;
const n2 = 'n2' as NodeId;
const entry = (i: number, t: number, data: string) => makeEntry(i as LogIndex, t as Term, 'normal', new TextEncoder().encode(data));

function kindOf(f: () => void): string | null {
  try {
    f();
    return null;
  } catch (err) {
    return err instanceof SimViolation ? err.kind : 'other';
  }
}

describe('Checker', () => {
  it('two leaders in one term', () => {
    const c = new Checker(1, 1);
    expect(c.leaderElected(0, 3 as Term, n1)).toBe(true);
    expect(c.leaderElected(0, 3 as Term, n1)).toBe(false);
    expect(kindOf(() => c.leaderElected(0, 3 as Term, n2))).toBe('two_leaders_in_term');
  });

  it('log matching: one (index, term), two contents or two predecessors', () => {
    const c = new Checker(1, 1);
    c.entryLogged(0, n1, entry(2, 1, 'a'), 0);
    c.entryLogged(0, n2, entry(2, 1, 'a'), 0);
    expect(kindOf(() => c.entryLogged(0, n2, entry(2, 1, 'b'), 0))).toBe('log_matching');
    expect(kindOf(() => c.entryLogged(0, n2, entry(2, 1, 'a'), 1))).toBe('log_matching');
  });

  it('applied prefixes: another entry or another state at the same index', () => {
    const c = new Checker(1, 1);
    const e = entry(2, 1, 'a');
    const h = nextStateHash(emptyStateHash, 1, e.crc);
    c.applied(0, n1, e, h);
    c.applied(0, n2, e, h);
    expect(kindOf(() => c.applied(0, n2, entry(2, 2, 'b'), h))).toBe('applied_mismatch');
    expect(kindOf(() => c.applied(0, n2, e, h + 1))).toBe('applied_mismatch');
    expect(kindOf(() => c.restored(0, n2, 2, h + 1))).toBe('applied_mismatch');
    expect(c.commits).toBe(1);
  });

  it('leader completeness, commit rules and leases', () => {
    const c = new Checker(1, 1);
    c.applied(0, n1, entry(2, 1, 'a'), 1);
    c.commitKnown(0, 1, 2, 1);
    expect(kindOf(() => c.leaderComplete(0, n2, 2, 2, () => 1))).toBeNull();
    expect(kindOf(() => c.leaderComplete(0, n2, 2, 2, () => 2))).toBe('leader_completeness');
    expect(kindOf(() => c.leaderComplete(0, n2, 2, 1, () => 1))).toBe('leader_completeness');
    // A leader of the committing term itself may lack it (it was elected before the commit was known).
    expect(kindOf(() => c.leaderComplete(0, n2, 1, 1, () => 1))).toBeNull();
    expect(kindOf(() => c.commitMoved(0, n1, 5, 4, 'ready'))).toBe('commit_decreased');
    expect(kindOf(() => c.leaderCommitted(0, n1, 3, 5, 2))).toBe('commit_previous_term');
    expect(kindOf(() => c.leases(0, [n1, n2]))).toBe('two_lease_holders');
    expect(kindOf(() => c.leases(0, [n1]))).toBeNull();
  });
});

describe('SimDisk', () => {
  const boot = { voters: [n1, n2], learners: [] };

  it('a crash keeps synced writes and loses the others', () => {
    const d = new SimDisk(boot);
    d.append([entry(2, 1, 'a')]);
    d.setHardState({ term: 1 as Term, vote: n1, commit: 2 as LogIndex });
    d.sync();
    d.append([entry(3, 1, 'b')]);
    d.setHardState({ term: 1 as Term, vote: n1, commit: 3 as LogIndex });
    expect(d.lastIndex()).toBe(3);
    expect(d.crash(new Prng(1), 0)).toBe(2);
    expect(d.lastIndex()).toBe(2);
    expect(d.initialState().hardState.commit).toBe(2);
  });

  it('a torn crash keeps a prefix of the unsynced writes, in order', () => {
    for (let seed = 1; seed <= 20; seed++) {
      const d = new SimDisk(boot);
      d.append([entry(2, 1, 'a')]);
      d.append([entry(3, 1, 'b')]);
      d.append([entry(4, 1, 'c')]);
      const lost = d.crash(new Prng(seed), 1);
      expect(d.lastIndex()).toBe(4 - lost);
    }
  });

  it('a snapshot and compaction survive a restart once synced', () => {
    const d = new SimDisk(boot);
    d.append([entry(2, 1, 'a'), entry(3, 1, 'b')]);
    d.createSnapshot(3 as LogIndex, boot, new Uint8Array([1, 2, 3, 4]));
    d.compact(2 as LogIndex);
    d.sync();
    d.crash(new Prng(1), 0);
    expect(d.snapshot()!.metadata.index).toBe(3);
    expect(d.lastIndex()).toBe(3);
  });
});
