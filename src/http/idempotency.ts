/**
 * Request digests and job id derivation. A repeated `POST /v1/jobs` with the same `id` (or the same
 * `Idempotency-Key`) is recognised by the scheduler through `requestDigest`: same digest -> 200 with the existing
 * job, another digest -> 409.
 */
import { hash, randomUUID } from 'node:crypto';

/** JSON with object keys sorted at every depth, so two bodies that differ only in key order digest the same. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  // Built by appending (no intermediate arrays): it runs on every submitted job.
  if (Array.isArray(value)) {
    let out = '[';
    for (let i = 0; i < value.length; i++) out += (i === 0 ? '' : ',') + canonicalJson(value[i]);
    return out + ']';
  }
  const obj = value as Record<string, unknown>;
  const keys = Object.keys(obj).sort();
  let out = '{';
  for (const k of keys) {
    const v = obj[k];
    if (v === undefined) continue;
    out += (out.length === 1 ? '' : ',') + JSON.stringify(k) + ':' + canonicalJson(v);
  }
  return out + '}';
}

export function sha256Hex(text: string): string {
  return hash('sha256', text, 'hex');
}

/** sha256 hex of the canonical JSON of a (parsed) request body. */
export function requestDigest(body: unknown): string {
  return sha256Hex(canonicalJson(body));
}

/**
 * The id of a job created without an `id`: `ik-` + 32 hex chars of sha256(key) when an Idempotency-Key is given
 * (so a retried request lands on the same id and shard), a random UUID otherwise. In a batch, item i of a request
 * with key K uses the key `K#i`, so a retried batch is idempotent item by item.
 */
export function deriveJobId(idempotencyKey: string | null, batchIndex: number | null = null): string {
  if (idempotencyKey === null) return randomUUID();
  const key = batchIndex === null ? idempotencyKey : `${idempotencyKey}#${batchIndex}`;
  return 'ik-' + sha256Hex(key).slice(0, 32);
}
