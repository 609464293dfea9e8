import { describe, expect, it } from 'vitest';
import { ShardLeadership } from './leadership.js';

describe('ShardLeadership', () => {
  it('fires only once the new leader applied everything before its term, in that term', () => {
    const l = new ShardLeadership();
    expect(l.softState('leader', 'n1', { term: 3, lastIndex: 10 })).toBe(false);
    expect(l.caughtUp(9)).toBeNull();
    expect(l.firing).toBe(false);
    expect(l.caughtUp(10)).toBe(3);
    expect(l.firing).toBe(true);
    expect(l.caughtUp(11)).toBeNull(); // started once
  });

  it('stops when the role is lost, and a follower never fires', () => {
    const l = new ShardLeadership();
    l.softState('leader', 'n1', { term: 2, lastIndex: 1 });
    l.caughtUp(1);
    expect(l.softState('follower', 'n2', { term: 3, lastIndex: 5 })).toBe(true);
    expect(l.firing).toBe(false);
    expect(l.leader).toBe('n2');
    expect(l.caughtUp(100)).toBeNull();
    expect(l.softState('candidate', '', { term: 4, lastIndex: 5 })).toBe(false); // nothing left to stop
  });

  it('a leader deposed and re-elected between two rounds stops, then fires again in the new term once caught up', () => {
    const l = new ShardLeadership();
    l.softState('leader', 'n1', { term: 2, lastIndex: 5 });
    expect(l.caughtUp(5)).toBe(2);
    expect(l.hardTerm(2, { term: 2, lastIndex: 7 })).toBe(false); // same term: nothing
    expect(l.hardTerm(4, { term: 4, lastIndex: 9 })).toBe(true);
    expect(l.firing).toBe(false);
    expect(l.caughtUp(8)).toBeNull();
    expect(l.caughtUp(9)).toBe(4);
  });

  it('a new term seen by a follower changes nothing; stop() reports whether it was firing', () => {
    const l = new ShardLeadership();
    expect(l.hardTerm(5, { term: 5, lastIndex: 3 })).toBe(false);
    expect(l.term).toBe(0);
    expect(l.stop()).toBe(false);
    l.softState('leader', 'n1', { term: 6, lastIndex: 3 });
    l.caughtUp(3);
    expect(l.stop()).toBe(true);
    expect(l.stop()).toBe(false);
  });
});
