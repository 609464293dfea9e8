/**
 * The simulator's stand-in for a node's state file (src/store/state-batch.ts): the scheduler's state as the last
 * batch commit wrote it, with its applied index. A commit is durable only once its fsync ran (`sync`); a crash
 * keeps the durable one, or, torn, the committed one that had reached the platter. Between commits the store
 * lives in memory only, as the open batch does: a crash loses it and the restart replays the log from here.
 */
import type { Prng } from '../../../src/core/prng.js';

export interface StateImage {
  readonly applied: number;
  readonly image: Uint8Array;
}

export class SimStateFile {
  private committed: StateImage | null = null;
  private durable: StateImage | null = null;
  commits = 0;

  /** What a process starting now reads (null: nothing was ever committed). */
  current(): StateImage | null {
    return this.committed;
  }

  /** The applied index a power loss cannot take back (log compaction stops there). */
  durableApplied(): number {
    return this.durable?.applied ?? 0;
  }

  commit(applied: number, image: Uint8Array): void {
    this.committed = { applied, image };
    this.commits++;
  }

  /** The commit's fsync answered. */
  sync(): void {
    this.durable = this.committed;
  }

  /** Power loss: an unsynced commit survives only when the crash is torn and its pages reached the disk. */
  crash(rand: Prng, tornRate: number): boolean {
    if (this.committed === this.durable) return false;
    if (rand.nextFloat() < tornRate && rand.nextFloat() < 0.5) {
      this.durable = this.committed;
      return false;
    }
    this.committed = this.durable;
    return true;
  }
}
