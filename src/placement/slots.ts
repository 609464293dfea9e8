/**
 * Jobs to slots, slots to groups. A job's slot is fixed forever by its id; groups own contiguous slot ranges, so a
 * group splits (and the group count grows with the cluster) without a job changing identity.
 *
 * The slot of a job, for a cluster made with `--shards L` (L in 1..1024; a new cluster uses L = 1):
 *   h    = fnv1a(job_id)                         (src/core/ids.ts hash32, the hash shardOf uses today)
 *   j    = the smallest j with L x 2^j >= 4096   (placementLimits.slotsMin; so S = L x 2^j slots, 4096..8191)
 *   slot = (h % L) x 2^j + reverse_j(floor(h / L) % 2^j)
 * The high part is today's shard (h % L), so legacy shard g owns exactly the range [g x 2^j, (g + 1) x 2^j): an
 * existing cluster upgrades in place, group g = shard g, with no job moving (slots.test.ts checks it for random ids
 * and every L). The low part is the next j "digits" of the hash with their bits reversed, so halving a range splits
 * it by the next hash bit: each half gets about half the jobs, whatever the ids look like. For L = 8 this is
 * S = 4096, j = 9, shard g = slots [512 g, 512 g + 512).
 */
import { assert } from '../core/assert.js';
import { hash32 } from '../core/ids.js';
import { placementLimits } from '../core/limits.js';
import type { GroupId, SlotRange } from './types.js';

/** The slot space of a cluster, fixed when it is made (or upgraded) and never changed. */
export interface SlotSpace {
  /** The cluster's legacy shard count (its `--shards`; 1 for a cluster made with placement). */
  readonly legacyShards: number;
  /** Slots per legacy shard = 2^bitsPerShard. */
  readonly bitsPerShard: number;
  /** legacyShards x 2^bitsPerShard. */
  readonly slots: number;
}

export function slotSpace(legacyShards: number, slotsMin: number = placementLimits.slotsMin): SlotSpace {
  assert(Number.isInteger(legacyShards) && legacyShards >= 1, `legacy shards must be a positive integer, got ${legacyShards}`);
  let bits = 0;
  while (legacyShards * 2 ** bits < slotsMin) bits++;
  return { legacyShards, bitsPerShard: bits, slots: legacyShards * 2 ** bits };
}

/** The lowest `bits` bits of x, in reverse order. */
export function reverseBits(x: number, bits: number): number {
  let r = 0;
  for (let i = 0; i < bits; i++) r = (r << 1) | ((x >>> i) & 1);
  return r >>> 0;
}

export function slotOfHash(space: SlotSpace, h: number): number {
  const perShard = 2 ** space.bitsPerShard;
  const shard = h % space.legacyShards;
  const low = Math.floor(h / space.legacyShards) % perShard;
  return shard * perShard + reverseBits(low, space.bitsPerShard);
}

export function slotOf(space: SlotSpace, jobId: string): number {
  return slotOfHash(space, hash32(jobId));
}

/** The slots legacy shard `shard` owned: group `shard` of an upgraded cluster owns exactly these. */
export function legacyShardRange(space: SlotSpace, shard: number): SlotRange {
  assert(shard >= 0 && shard < space.legacyShards, `shard ${shard} out of 0..${space.legacyShards - 1}`);
  const perShard = 2 ** space.bitsPerShard;
  return { lo: shard * perShard, hi: (shard + 1) * perShard };
}

export interface SlotEntry {
  readonly range: SlotRange;
  readonly group: GroupId;
}

/** The slot -> group table: ranges sorted by lo, covering [0, slots) without gaps or overlaps. */
export class SlotTable {
  private readonly entries: SlotEntry[];

  constructor(readonly space: SlotSpace, entries: readonly SlotEntry[]) {
    this.entries = [...entries].sort((a, b) => a.range.lo - b.range.lo);
    let next = 0;
    for (const e of this.entries) {
      assert(e.range.lo === next, `slot table: gap or overlap at slot ${next} (group ${e.group} starts at ${e.range.lo})`);
      assert(e.range.hi > e.range.lo, `slot table: group ${e.group} has an empty range`);
      next = e.range.hi;
    }
    assert(next === space.slots, `slot table ends at ${next}, not at ${space.slots}`);
  }

  /** The table of a cluster made by today's code: group g = shard g, owning legacyShardRange(g). */
  static upgrade(space: SlotSpace): SlotTable {
    const entries: SlotEntry[] = [];
    for (let g = 0; g < space.legacyShards; g++) entries.push({ range: legacyShardRange(space, g), group: g as GroupId });
    return new SlotTable(space, entries);
  }

  groupOfSlot(slot: number): GroupId {
    assert(slot >= 0 && slot < this.space.slots, `slot ${slot} out of range`);
    let lo = 0;
    let hi = this.entries.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if (this.entries[mid]!.range.lo <= slot) lo = mid;
      else hi = mid - 1;
    }
    return this.entries[lo]!.group;
  }

  groupOf(jobId: string): GroupId {
    return this.groupOfSlot(slotOf(this.space, jobId));
  }

  rangeOf(group: GroupId): SlotRange | null {
    return this.entries.find((e) => e.group === group)?.range ?? null;
  }

  /** The table after `group` split at `atSlot`: it keeps [lo, atSlot), `newGroup` takes [atSlot, hi). */
  split(group: GroupId, atSlot: number, newGroup: GroupId): SlotTable {
    const range = this.rangeOf(group);
    assert(range !== null, `split: group ${group} owns no slots`);
    assert(atSlot > range.lo && atSlot < range.hi, `split: slot ${atSlot} not strictly inside [${range.lo}, ${range.hi})`);
    assert(this.rangeOf(newGroup) === null, `split: group ${newGroup} exists`);
    const entries = this.entries.filter((e) => e.group !== group);
    entries.push({ range: { lo: range.lo, hi: atSlot }, group }, { range: { lo: atSlot, hi: range.hi }, group: newGroup });
    return new SlotTable(this.space, entries);
  }

  get size(): number {
    return this.entries.length;
  }

  list(): readonly SlotEntry[] {
    return this.entries;
  }
}

/** Where to split a range in two: its middle, which on an aligned range is the next hash bit. */
export function splitPoint(range: SlotRange): number | null {
  if (range.hi - range.lo < 2) return null;
  return range.lo + Math.floor((range.hi - range.lo) / 2);
}
