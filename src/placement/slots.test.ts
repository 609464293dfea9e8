import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { hash32, shardOf } from '../core/ids.js';
import { placementLimits } from '../core/limits.js';
import { legacyShardRange, reverseBits, SlotTable, slotOf, slotOfHash, slotSpace, splitPoint } from './slots.js';
import type { GroupId } from './types.js';

const jobId = fc.stringMatching(/^[A-Za-z0-9._:-]{1,40}$/);

describe('slot space', () => {
  it('has at least slotsMin slots for every legacy shard count, a whole power of two per shard', () => {
    for (let shards = 1; shards <= 1024; shards++) {
      const s = slotSpace(shards);
      expect(s.slots).toBeGreaterThanOrEqual(placementLimits.slotsMin);
      expect(s.slots).toBeLessThan(2 * placementLimits.slotsMin);
      expect(s.slots).toBe(shards * 2 ** s.bitsPerShard);
    }
    expect(slotSpace(8)).toEqual({ legacyShards: 8, bitsPerShard: 9, slots: 4096 });
    expect(slotSpace(1).slots).toBe(4096);
  });

  it('upgrades today\'s layout in place: group g of the upgraded table is shardOf(id, L) for every id and L', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 1024 }), fc.array(jobId, { minLength: 1, maxLength: 50 }), (shards, ids) => {
        const table = SlotTable.upgrade(slotSpace(shards));
        for (const id of ids) expect(table.groupOf(id)).toBe(shardOf(id, shards));
      }),
      { numRuns: 300 },
    );
  });

  it('gives 8 legacy shards the ranges [512 g, 512 g + 512)', () => {
    const space = slotSpace(8);
    expect(legacyShardRange(space, 0)).toEqual({ lo: 0, hi: 512 });
    expect(legacyShardRange(space, 7)).toEqual({ lo: 3584, hi: 4096 });
    expect(slotOfHash(space, 8 * 1 + 3)).toBe(3 * 512 + 256); // the low digit 1 reversed over 9 bits is 256
  });

  it('halves a legacy range by the next hash bit: each half holds about half of the ids', () => {
    const space = slotSpace(8);
    const table = SlotTable.upgrade(space).split(0 as GroupId, 256, 8 as GroupId);
    let left = 0;
    let right = 0;
    for (let i = 0; i < 80_000; i++) {
      const g = table.groupOf(`job-${i}`);
      if (g === 0) left++;
      if (g === 8) right++;
    }
    expect(left + right).toBeGreaterThan(9_000);
    expect(Math.abs(left - right) / (left + right)).toBeLessThan(0.05);
  });

  it('never changes a job\'s slot when groups split', () => {
    const space = slotSpace(8);
    let table = SlotTable.upgrade(space);
    const before = new Map<string, number>();
    for (let i = 0; i < 1000; i++) before.set(`j${i}`, slotOf(space, `j${i}`));
    table = table.split(3 as GroupId, splitPoint(table.rangeOf(3 as GroupId)!)!, 8 as GroupId);
    for (const [id, slot] of before) {
      expect(slotOf(space, id)).toBe(slot);
      const g = table.groupOf(id);
      const r = table.rangeOf(g)!;
      expect(slot >= r.lo && slot < r.hi).toBe(true);
    }
    expect(table.size).toBe(9);
  });

  it('refuses a table with a gap, and a split outside the range', () => {
    const space = slotSpace(1);
    expect(() => new SlotTable(space, [{ range: { lo: 0, hi: 100 }, group: 0 as GroupId }])).toThrow(/ends at 100/);
    const t = SlotTable.upgrade(space);
    expect(() => t.split(0 as GroupId, 0, 1 as GroupId)).toThrow(/not strictly inside/);
    expect(splitPoint({ lo: 5, hi: 6 })).toBeNull();
  });

  it('reverses bits', () => {
    expect(reverseBits(1, 3)).toBe(4);
    expect(reverseBits(0b110, 3)).toBe(0b011);
    expect(reverseBits(hash32('x') & 1, 1)).toBe(hash32('x') & 1);
  });
});
