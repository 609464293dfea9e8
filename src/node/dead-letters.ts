/**
 * Dead letters across the shards of a node (docs/api.md "Dead letters"): FAILED jobs, listed and grouped from this
 * node's own replicas (like GET /v1/jobs: a follower may be a little behind), and replayed through each shard's
 * leader with a `replay_jobs` command, which replays only the jobs still FAILED when it applies.
 */
import { invalid } from '../core/errors.js';
import { jobIdPattern, shardOf } from '../core/ids.js';
import { retentionLimits } from '../core/limits.js';
import type { Command } from '../scheduler/commands.js';
import type { CommandResult } from '../scheduler/machine.js';
import type { DeadLetter, DeadLetterFilter, DeadLetterGroup } from '../scheduler/types.js';
import { encodeCursor } from './cursor.js';
import type { ShardStorage } from './group.js';

/** Which dead letters a replay takes: these ids, or those matching a filter (at most replayJobsMax). */
export type ReplayRequest = { ids: string[]; dryRun: boolean } | { filter: DeadLetterFilter; dryRun: boolean };

export interface ReplayResult {
  /** Dead letters the request matched (by filter: all of them, also beyond the per-request bound). */
  matched: number;
  /** Jobs that run again now (0 on a dry run). */
  replayed: number;
}

interface Position {
  failedAtMs: number;
  jobId: string;
}

/** Newest failure first: (failed_at, id) descending, as each shard's query orders them. */
function newerFirst(a: DeadLetter, b: DeadLetter): number {
  return b.failedAtMs - a.failedAtMs || (a.jobId < b.jobId ? 1 : a.jobId > b.jobId ? -1 : 0);
}

export function encodeDeadLetterCursor(p: Position): string {
  return encodeCursor(`${p.failedAtMs}:${p.jobId}`);
}

export function decodeDeadLetterCursor(cursor: string | null): Position | null {
  if (cursor === null) return null;
  const text = /^[A-Za-z0-9_-]{1,400}$/.test(cursor) ? Buffer.from(cursor, 'base64url').toString('utf8') : '';
  const m = /^(\d{1,16}):(.+)$/.exec(text);
  if (m === null || !jobIdPattern.test(m[2]!)) throw invalid('cursor', 'not a cursor returned by this API');
  return { failedAtMs: Number(m[1]), jobId: m[2]! };
}

/** One page over every shard: a merge of per-shard pages (each at most limit + 1 rows). */
export function deadLetterPage(
  shards: readonly ShardStorage[],
  filter: DeadLetterFilter,
  limit: number,
  cursor: string | null,
): { deadLetters: DeadLetter[]; nextCursor: string | null } {
  const after = decodeDeadLetterCursor(cursor);
  const all = shards.flatMap((sh) => sh.store.deadLetters(filter, limit + 1, after)).sort(newerFirst);
  const page = all.slice(0, limit);
  const last = page[page.length - 1];
  const nextCursor = all.length > limit && last !== undefined ? encodeDeadLetterCursor({ failedAtMs: last.failedAtMs, jobId: last.jobId }) : null;
  return { deadLetters: page, nextCursor };
}

/** Counts per (task, error class) over every shard, by task then class, at most retentionLimits.groupsMax. */
export function deadLetterGroups(shards: readonly ShardStorage[]): DeadLetterGroup[] {
  const merged = new Map<string, DeadLetterGroup>();
  for (const sh of shards) {
    for (const g of sh.store.deadLetterGroups()) {
      const key = `${g.task ?? ''}\n${g.errorClass}`;
      const have = merged.get(key);
      if (have === undefined) merged.set(key, { ...g });
      else merged.set(key, { ...have, count: have.count + g.count, lastFailedAtMs: Math.max(have.lastFailedAtMs, g.lastFailedAtMs) });
    }
  }
  // Byte order, as SQLite orders each shard's groups (a task-less group, task null, first).
  const byteOrder = (x: string, y: string): number => (x < y ? -1 : x > y ? 1 : 0);
  const order = (a: DeadLetterGroup, b: DeadLetterGroup): number => byteOrder(a.task ?? '', b.task ?? '') || byteOrder(a.errorClass, b.errorClass);
  return [...merged.values()].sort(order).slice(0, retentionLimits.groupsMax);
}

/**
 * Matches the request against this node's replicas, then (unless a dry run) proposes one `replay_jobs` per shard to
 * its leader. `propose` routes to the shard's leader (forwarding when it is another node).
 */
export async function replayDeadLetters(
  shards: readonly ShardStorage[],
  req: ReplayRequest,
  nowMs: number,
  propose: (shard: number, command: Command) => Promise<unknown>,
): Promise<ReplayResult> {
  let matched: number;
  let ids: string[];
  if ('ids' in req) {
    ids = [...new Set(req.ids)].filter((id) => shards[shardOf(id, shards.length)]!.store.getJob(id)?.state === 'FAILED');
    matched = ids.length;
  } else {
    matched = shards.reduce((n, sh) => n + sh.store.countDeadLetters(req.filter), 0);
    ids = deadLetterPage(shards, req.filter, retentionLimits.replayJobsMax, null).deadLetters.map((d) => d.jobId);
  }
  if (req.dryRun || ids.length === 0) return { matched, replayed: 0 };
  const byShard = new Map<number, string[]>();
  for (const id of ids) {
    const shard = shardOf(id, shards.length);
    byShard.set(shard, [...(byShard.get(shard) ?? []), id]);
  }
  const results = await Promise.all([...byShard].map(([shard, list]) => propose(shard, { type: 'replay_jobs', nowMs, ids: list })));
  const replayed = results.reduce((n: number, r) => n + ((r as CommandResult).type === 'replay_jobs' ? (r as { replayed: string[] }).replayed.length : 0), 0);
  return { matched, replayed };
}
