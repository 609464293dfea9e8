/**
 * The log's encoding of a Command: msgpackr with plain maps (useRecords false: an entry must decode alone, with
 * no shared structures, on any replica and after any restart). Byte fields (payloads) come back as plain
 * Uint8Array, not Node Buffers, so a decoded command equals the one encoded.
 */
import { Packr } from 'msgpackr';
import { assert } from '../core/assert.js';
import type { Command } from './commands.js';

const packr = new Packr({ useRecords: false, mapsAsObjects: true });

const commandTypes = new Set<string>([
  'put_task',
  'delete_task',
  'create_jobs',
  'cancel_job',
  'pause_job',
  'resume_job',
  'run_job',
  'patch_job',
  'fired',
  'outcomes',
  'skipped',
  'noop',
]);

export function encodeCommand(c: Command): Uint8Array {
  // A copy: msgpackr packs into a shared scratch buffer, and callers keep entries around.
  return new Uint8Array(packr.pack(c));
}

/** Throws on bytes that are not an encoded Command (a corrupt entry is a programmer or disk error). */
export function decodeCommand(b: Uint8Array): Command {
  const value: unknown = packr.unpack(b);
  assert(typeof value === 'object' && value !== null, 'decodeCommand: not a map');
  const type = (value as { type?: unknown }).type;
  assert(typeof type === 'string' && commandTypes.has(type), `decodeCommand: unknown type ${String(type)}`);
  const c = value as Command;
  if (c.type === 'create_jobs') {
    for (const job of c.jobs) job.payload = plainBytes(job.payload);
  } else if (c.type === 'patch_job' && c.patch.payload !== undefined) {
    c.patch.payload = plainBytes(c.patch.payload);
  }
  return c;
}

function plainBytes(b: Uint8Array): Uint8Array {
  assert(b instanceof Uint8Array, 'decodeCommand: payload is not bytes');
  return b.constructor === Uint8Array ? b : new Uint8Array(b);
}
