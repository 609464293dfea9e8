/**
 * Raft bugs the simulator found, each replayed from its seed (pinned options, so later tuning of the defaults
 * does not move them). A test here fails while its bug is present.
 */
import { describe, expect, it } from 'vitest';
import { defaultSimOptions } from './params.js';
import { runSeed } from './simulator.js';

const pinned = { ...defaultSimOptions, nodes: null, groups: 2, steps: 1500, livenessSteps: 1500, bug: null, trace: false };

describe('bugs found by the simulator', () => {
  // Seed 7: 3 nodes, maxInflightMsgs 1, 5% silent loss. A lost append left the leader's window for n2 full in
  // replicate state; heartbeat answers never freed it, so n2 stayed behind forever (liveness violation).
  // What prevents it: a heartbeat answer frees the oldest in-flight append (etcd's FreeFirstOne).
  it('a follower whose whole in-flight window was lost catches up after healing (seed 7)', () => {
    const r = runSeed({ ...pinned, seed: 7 });
    expect(r.violation).toBeNull();
  });

  it('the same stall with 5 nodes and 1% loss (seed 22)', () => {
    const r = runSeed({ ...pinned, seed: 22 });
    expect(r.violation).toBeNull();
  });
});
