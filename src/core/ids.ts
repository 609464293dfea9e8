/** Branded ids and the shard function. Pure: no node:* imports (the pure folders import this file). */

export type Brand<T, B extends string> = T & { readonly __brand: B };
export type NodeId = Brand<string, 'NodeId'>;
export type ShardId = Brand<number, 'ShardId'>;

export const nodeIdPattern = /^[a-z0-9-]{1,32}$/;
export const jobIdPattern = /^[A-Za-z0-9._:-]{1,128}$/;
export const taskNamePattern = /^[A-Za-z0-9._-]{1,128}$/;

/** FNV-1a over the UTF-16 code units: stable across nodes and versions (it decides where a job lives). */
export function hash32(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** shard = hash(job_id) % shards: routing never depends on the fire time, so a hot instant spreads out. */
export function shardOf(jobId: string, shards: number): ShardId {
  return (hash32(jobId) % shards) as ShardId;
}
