/**
 * Quarantined log entries: committed entries whose command could not be decoded or applied. Apply is
 * deterministic, so every replica quarantines the same entry the same way; the entry's effects are skipped (its
 * savepoint rolled back) and this table keeps the evidence (index, term, error, a SHA-256 digest and the first
 * quarantineLimits.keepBytesMax bytes) for whoever investigates. Diagnostics only: not part of a shard image.
 */
import { createHash } from 'node:crypto';
import { quarantineLimits } from '../core/limits.js';
import { isStorageError, type Db } from './db.js';
import { CountBook } from './job-keys.js';

export interface QuarantinedEntry {
  shard: number;
  index: number;
  term: number;
  error: string;
  /** SHA-256 of the whole entry, hex. */
  digest: string;
  /** The entry's size; `data` holds at most quarantineLimits.keepBytesMax of it. */
  bytes: number;
  data: Uint8Array;
}

export class QuarantineTable {
  private readonly insert;
  private readonly select;
  private readonly counts;

  constructor(private readonly db: Db) {
    this.insert = db.prepare(
      'INSERT OR REPLACE INTO raft_quarantine (shard, idx, term, error, digest, bytes, data) VALUES (?, ?, ?, ?, ?, ?, ?)',
    );
    this.select = db.prepare('SELECT shard, idx, term, error, digest, bytes, data FROM raft_quarantine ORDER BY shard, idx LIMIT ?');
    this.counts = db.prepare('SELECT shard, COUNT(*) AS n FROM raft_quarantine GROUP BY shard');
  }

  /** Records entry (shard, index); runs inside the caller's apply transaction. */
  record(shard: number, index: number, term: number, error: string, data: Uint8Array): QuarantinedEntry {
    const entry: QuarantinedEntry = {
      shard,
      index,
      term,
      error: error.slice(0, quarantineLimits.errorLengthMax),
      digest: createHash('sha256').update(data).digest('hex'),
      bytes: data.byteLength,
      data: data.subarray(0, quarantineLimits.keepBytesMax),
    };
    try {
      this.insert.run(shard, index, term, entry.error, entry.digest, entry.bytes, Buffer.from(entry.data));
    } catch (err) {
      // The node rolls the batch's slice back with it: job counts summed for the batch cannot be trusted.
      if (isStorageError(err)) CountBook.of(this.db).storageFailed();
      throw err;
    }
    return entry;
  }

  /** The quarantined entries, by shard and index (at most `limit`). */
  list(limit = quarantineLimits.listMax): QuarantinedEntry[] {
    const rows = this.select.all(limit) as Array<{ shard: number; idx: number; term: number; error: string; digest: string; bytes: number; data: Buffer }>;
    return rows.map((r) => ({ shard: r.shard, index: r.idx, term: r.term, error: r.error, digest: r.digest, bytes: r.bytes, data: new Uint8Array(r.data) }));
  }

  /** Shard -> how many of its entries are quarantined. */
  countByShard(): Map<number, number> {
    const rows = this.counts.all() as Array<{ shard: number; n: number }>;
    return new Map(rows.map((r) => [r.shard, r.n]));
  }
}
