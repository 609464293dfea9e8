/**
 * One Raft group on one simulated node: the RawNode (null while the node is down), its simulated disk, and the
 * state machine, which is a rolling hash of the applied entries (enough to compare states across nodes; its
 * snapshot is those 4 bytes). The state machine is volatile: a restart rebuilds it from the disk's snapshot and
 * the core re-delivers the committed entries after it.
 */
import type { Prng } from '../../src/core/prng.js';
import { RawNode } from '../../src/raft/index.js';
import type { ConfState, Config, LogIndex, NodeId, Role, Snapshot } from '../../src/raft/index.js';
import { emptyStateHash } from './checker.js';
import { SimDisk } from './disk.js';
import type { SimParams } from './params.js';

/** The Raft timing every simulated node uses: a lease shorter than the election timeout, as the core requires. */
export const simRaftTiming = { electionTicks: 10, heartbeatTicks: 2, leaseTicks: 8 } as const;

export class Replica {
  raw: RawNode | null = null;
  readonly disk: SimDisk;
  smIndex = 0;
  smHash = emptyStateHash;
  /** As last reported by Ready (the checker's view of this process). */
  role: Role = 'follower';
  lead: NodeId = '' as NodeId;
  term = 0;
  commit = 0;
  /** Bumped on every restart: a proposal is acknowledged only by the incarnation that accepted it. */
  incarnation = 0;

  constructor(
    readonly node: NodeId,
    readonly group: number,
    bootstrap: ConfState,
  ) {
    this.disk = new SimDisk(bootstrap);
  }

  /** Starts (or restarts) the process from what the disk holds. */
  start(params: SimParams, rand: Prng): void {
    const snap = this.disk.snapshot()!;
    this.smIndex = snap.metadata.index;
    this.smHash = decodeState(snap);
    const { hardState } = this.disk.initialState();
    this.term = hardState.term;
    this.commit = Math.max(hardState.commit, snap.metadata.index);
    this.role = 'follower';
    this.lead = '' as NodeId;
    this.incarnation++;
    const config: Config = {
      id: this.node,
      group: this.group,
      ...simRaftTiming,
      preVote: true,
      checkQuorum: true,
      maxInflightMsgs: params.maxInflightMsgs,
      maxInflightBytes: 0,
      maxMsgBytes: params.maxMsgBytes,
      rand,
    };
    this.raw = new RawNode(config, this.disk);
  }

  /** Power loss: the process is gone, the disk keeps what was synced (and maybe a torn tail). */
  crash(rand: Prng, tornRate: number): number {
    this.raw = null;
    return this.disk.crash(rand, tornRate);
  }

  /** Snapshots the state machine at its applied index and compacts the log, keeping `keep` entries. */
  compact(keep: number): void {
    const raw = this.raw!;
    const snapIndex = this.disk.snapshot()!.metadata.index;
    if (this.smIndex <= snapIndex) return;
    this.disk.createSnapshot(this.smIndex as LogIndex, raw.confState(), encodeState(this.smHash));
    const upTo = this.smIndex - keep;
    if (upTo >= this.disk.firstIndex()) this.disk.compact(upTo as LogIndex);
  }
}

export function encodeState(hash: number): Uint8Array {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, hash);
  return b;
}

/** The bootstrap snapshot has no data: the empty state. */
export function decodeState(s: Snapshot): number {
  if (s.data.length === 0) return emptyStateHash;
  return new DataView(s.data.buffer, s.data.byteOffset, s.data.byteLength).getUint32(0);
}
