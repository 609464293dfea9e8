/**
 * Job search by metadata (GET /v1/jobs?metadata.KEY=VALUE): which (key, value) pairs of a job's metadata are
 * indexed, so the SQLite index (src/store/metadata-index.ts) and the in-memory store answer the same. Only
 * top-level scalars are indexed: a string as itself, a number or boolean as its JSON text; objects, arrays, null
 * and pairs over searchLimits' sizes are not searchable. Pure.
 */
import { searchLimits } from '../core/limits.js';

/** A job list's search filters beyond state and task (all given ones must hold). */
export interface JobSearch {
  /** Every pair must be in the job's indexed metadata (AND). */
  metadata: ReadonlyArray<readonly [key: string, value: string]>;
  /** next_fire_at >= this (inclusive); jobs without a next fire time never match a range. */
  nextFireAfterMs: number | null;
  /** next_fire_at < this (exclusive). */
  nextFireBeforeMs: number | null;
}

export const noSearch: JobSearch = { metadata: [], nextFireAfterMs: null, nextFireBeforeMs: null };

export function isNoSearch(s: JobSearch | undefined): boolean {
  return s === undefined || (s.metadata.length === 0 && s.nextFireAfterMs === null && s.nextFireBeforeMs === null);
}

const encoder = new TextEncoder();

export function utf8Bytes(s: string): number {
  return encoder.encode(s).byteLength;
}

/** The value a metadata entry is indexed (and searched) by, or null when it is not searchable. */
export function indexedValue(value: unknown): string | null {
  let text: string;
  if (typeof value === 'string') text = value;
  else if (typeof value === 'number' && Number.isFinite(value)) text = JSON.stringify(value);
  else if (typeof value === 'boolean') text = value ? 'true' : 'false';
  else return null;
  return utf8Bytes(text) <= searchLimits.metadataValueBytesMax ? text : null;
}

/** The (key, value) pairs a job's metadata is found by. */
export function indexedMetadata(metadata: Record<string, unknown> | null): Array<[string, string]> {
  if (metadata === null) return [];
  const pairs: Array<[string, string]> = [];
  for (const key of Object.keys(metadata)) {
    if (utf8Bytes(key) > searchLimits.metadataKeyBytesMax) continue;
    const value = indexedValue(metadata[key]);
    if (value !== null) pairs.push([key, value]);
  }
  return pairs;
}

/** The search's test on one job (the in-memory store; SQLite answers the same through its index). */
export function matchesSearch(job: { metadata: Record<string, unknown> | null; nextFireAtMs: number | null }, s: JobSearch): boolean {
  const at = job.nextFireAtMs;
  if (s.nextFireAfterMs !== null && (at === null || at < s.nextFireAfterMs)) return false;
  if (s.nextFireBeforeMs !== null && (at === null || at >= s.nextFireBeforeMs)) return false;
  if (s.metadata.length === 0) return true;
  const have = indexedMetadata(job.metadata);
  return s.metadata.every(([k, v]) => have.some(([hk, hv]) => hk === k && hv === v));
}
