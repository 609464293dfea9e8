import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { placementConfig } from '../../../src/placement/index.js';
import { realisticDurations, SimCluster, spread } from './cluster.js';
import { grow, growThreeToSix, idleMessages, killOneOfSix, leadersOnOneNode, scale } from './scenarios.js';

const clock = (): number => 0;
const minute = 60_000;

describe('placement scenarios (the issue\'s targets, at CI sizes where the full ones are slow)', () => {
  it.each([
    ['leaders-3x8', () => leadersOnOneNode(1, clock)],
    ['grow-3-6', () => growThreeToSix(1, clock)],
    ['grow-3-6, another seed', () => growThreeToSix(7, clock)],
    ['kill-1-of-6', () => killOneOfSix(1, clock)],
    ['idle-messages, 20 nodes', () => idleMessages(1, clock, 20, 1_000)],
    ['scale, 30 nodes x 300 groups', () => scale(1, clock, { nodes: 30, groups: 300, durationMs: 40 * minute })],
    ['grow 3 -> 24, 240 groups (30 replicas per node, as the full run)', () => grow(1, clock, { groups: 240, waves: [6, 12, 24], waveEveryMs: 5 * minute, settleMs: 75 * minute })],
  ])('%s meets every target', (_name, run) => {
    const r = run();
    for (const t of r.targets) expect({ name: t.name, measured: t.measured, pass: t.pass }).toEqual({ name: t.name, measured: t.measured, pass: true });
  });
});

/**
 * A seed-driven cluster and random events (nodes join, die, drain, are decommissioned) with the real driver: every
 * operator it plans must be safe when planned (each step, in order, refused by nothing: no quorum planned away, no
 * node twice, no leader removed), and it never reverses a rebalance within the hour.
 */
describe('placement driver properties', () => {
  it('keeps its invariants under random clusters and events', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 1 << 30 }),
        fc.integer({ min: 3, max: 9 }),
        fc.integer({ min: 4, max: 40 }),
        fc.array(fc.record({ atMin: fc.integer({ min: 0, max: 30 }), kind: fc.constantFrom('join', 'kill', 'drain', 'decommission') }), { maxLength: 6 }),
        (seed, nodeCount, groupCount, events) => {
          let unsafe: string | null = null;
          const config = placementConfig({ deadAfterMs: 2 * minute });
          const sim = new SimCluster({ seed, config, durations: realisticDurations, tickMs: 100, driverIntervalMs: 1_000, hot: null }, 3, () => 0, (model, ops) => {
            unsafe ??= SimCluster.unsafeOperator(model, ops, config);
          });
          const nodes = Array.from({ length: nodeCount }, (_, i) => sim.addNode(`n${i}`));
          for (let g = 0; g < groupCount; g++) {
            const on = [0, 1, 2].map((k) => nodes[(g * 7 + k) % nodeCount]!);
            sim.addGroup({ id: g as never, epoch: { confVer: 1, slotVer: 0 }, slots: { lo: g, hi: g + 1 }, replicas: on.map((node) => ({ node, role: 'voter' })), leader: on[0]!, sizeBytes: (g % 5) * 16 * 1024 * 1024, firesPerS: 0, busyUntilMs: 0 });
          }
          let joined = nodeCount;
          for (const e of [...events].sort((a, b) => a.atMin - b.atMin)) {
            sim.runUntil(e.atMin * minute, (c) => void (c.nowMs % 1_000 === 0 && expect(c.checkInvariants()).toBeNull()));
            const alive = [...sim.nodes.values()].filter((x) => x.alive && x.info.admin === 'active').map((x) => x.info.id);
            const victim = alive[seed % Math.max(1, alive.length)];
            if (e.kind === 'join') sim.addNode(`n${joined++}`);
            else if (victim !== undefined && alive.length > 3) {
              if (e.kind === 'kill') sim.kill(victim);
              else sim.setAdmin(victim, e.kind === 'drain' ? 'draining' : 'decommissioning');
            }
          }
          sim.runUntil(35 * minute, (c) => void (c.nowMs % 1_000 === 0 && expect(c.checkInvariants()).toBeNull()));
          expect(unsafe).toBeNull();
          expect(sim.reversals.filter((r) => !r.kind.includes('repair'))).toEqual([]);
          expect(spread(sim.counts('replicas')).nodes).toBeGreaterThan(0);
        },
      ),
      { numRuns: 12 },
    );
  });
});
