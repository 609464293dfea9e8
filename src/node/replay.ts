/**
 * The replay of a start (docs/design.md, Storage: "A crash replays the log"): the committed entries past the
 * applied index the state file holds are applied at open, in one transaction of the state file, before Raft,
 * the API listener and the firing core run. Left to the applier, they went slice by slice between rounds, client
 * requests and the firing of the shards already caught up, and readiness waited for the last shard: 0.5 to 1.5 s
 * of a restart at 5,000 jobs/s for a few hundred entries.
 *
 * Only what would apply the same way later is applied here; the applier takes the rest as before:
 *  - a conf change ends a shard's replay (Raft replays the conf changes up to the applied index it is built with,
 *    and the membership hears of a change from the applier);
 *  - an entry that does not decode or apply ends it too, its savepoint rolled back (the applier quarantines it,
 *    with its metric and log line);
 *  - a storage error rolls the whole replay back (the applier meets it again and handles it: a full disk waits).
 * Durability (unless --fsync off): the log's WAL is fsynced first (a kill -9 leaves writes the OS may not have put on
 * disk yet; the state must never hold an entry a power loss could take from the log), and the replay's commit is
 * fsynced before the node goes on (the state batch counts what the file holds at open as durable, and log
 * compaction never passes that).
 */
import { closeSync, existsSync, fsyncSync, openSync } from 'node:fs';
import type { Entry, LogIndex } from '../raft/index.js';
import { decodeCommand } from '../scheduler/codec.js';
import { apply } from '../scheduler/machine.js';
import { nodeLimits } from '../core/limits.js';
import { isStorageError, type Db, type FsyncMode } from '../store/db.js';
import type { SqliteRaftStorage } from '../store/raft-storage.js';
import type { AppliedIndexes } from '../store/shard-snapshot.js';
import type { SqliteShardStore } from '../store/shard-store.js';

export interface ReplayShard {
  storage: SqliteRaftStorage;
  store: SqliteShardStore;
  /** What the state file holds as applied; the replay moves it. */
  applied: number;
}

/** Replays every shard's committed entries into the state file; answers how many it applied (0 when rolled back). */
export function replayCommitted(db: Db, indexes: AppliedIndexes, shards: ReplayShard[], log: { file: string; fsync: FsyncMode }): number {
  const { fsync } = log;
  if (!shards.some((s) => s.applied < s.storage.initialState().hardState.commit)) return 0;
  if (fsync !== 'off') syncFile(`${log.file}-wal`);
  const before = shards.map((s) => s.applied);
  const synchronous = db.pragma('synchronous', { simple: true }) as number;
  // FULL in WAL mode: this one commit fsyncs the WAL (the batch mode's commits leave that to the WalSyncer).
  if (fsync !== 'off') db.pragma('synchronous = FULL');
  // One wrapper for every entry's savepoint: better-sqlite3 builds a new one for each db.transaction(fn).
  const inSavepoint = db.transaction((fn: () => unknown) => fn()) as Savepoint;
  try {
    return db.transaction(() => {
      let budget = nodeLimits.startReplayEntriesMax;
      let applied = 0;
      for (const [shard, s] of shards.entries()) {
        const n = replayShard(inSavepoint, s, budget);
        if (n > 0) indexes.write(shard, s.applied);
        budget -= n;
        applied += n;
      }
      return applied;
    })();
  } catch (err) {
    if (!isStorageError(err)) throw err;
    shards.forEach((s, i) => (s.applied = before[i]!));
    return 0;
  } finally {
    db.pragma(`synchronous = ${synchronous}`);
  }
}

type Savepoint = <T>(fn: () => T) => T;

/** One shard: entries after its applied index through its commit index, each in a savepoint; answers how many. */
function replayShard(inSavepoint: Savepoint, s: ReplayShard, budget: number): number {
  const commit = s.storage.initialState().hardState.commit;
  let n = 0;
  while (s.applied < commit && n < budget) {
    const hi = Math.min(commit, s.applied + budget - n) + 1;
    const entries = s.storage.entries((s.applied + 1) as LogIndex, hi as LogIndex, nodeLimits.startReplayReadBytesMax);
    for (const e of entries) {
      if (!applyOne(inSavepoint, s.store, e)) return n;
      s.applied = e.index;
      n++;
    }
  }
  return n;
}

/** Applies a normal entry in a savepoint; false (nothing written) when it is the applier's to take. */
function applyOne(inSavepoint: Savepoint, store: SqliteShardStore, e: Entry): boolean {
  if (e.type !== 'normal') return false;
  if (e.data.length === 0) return true;
  try {
    const command = decodeCommand(e.data);
    inSavepoint(() => apply(store, command, e.term));
    return true;
  } catch (err) {
    if (isStorageError(err)) throw err;
    return false;
  }
}

function syncFile(path: string): void {
  if (!existsSync(path)) return;
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
