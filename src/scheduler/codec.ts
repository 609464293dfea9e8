/**
 * The log's encoding of a Command: msgpackr with plain maps (useRecords false: an entry must decode alone, with
 * no shared structures, on any replica and after any restart). Byte fields (payloads) come back as plain
 * Uint8Array, not Node Buffers, so a decoded command equals the one encoded.
 */
import { Packr } from 'msgpackr';
import { checkCommand, ShapeError } from './check.js';
import type { Command } from './commands.js';

const packr = new Packr({ useRecords: false, mapsAsObjects: true });

export function encodeCommand(c: Command): Uint8Array {
  // A copy: msgpackr packs into a shared scratch buffer, and callers keep entries around.
  return new Uint8Array(packr.pack(c));
}

/**
 * Bytes that are not an encoded Command: not msgpack, or a value without the Command's shape (checkCommand). A
 * replica that meets one in its log quarantines the entry (every replica decodes the same bytes the same way).
 */
export class CommandDecodeError extends Error {
  override name = 'CommandDecodeError';
}

/** Decodes and checks an entry's command (types, sizes, counts within limits); throws CommandDecodeError. */
export function decodeCommand(b: Uint8Array): Command {
  let value: unknown;
  try {
    value = packr.unpack(b);
  } catch (err) {
    throw new CommandDecodeError(`not msgpack: ${(err as Error).message}`);
  }
  try {
    checkCommand(value);
  } catch (err) {
    if (err instanceof ShapeError) throw new CommandDecodeError(`not a command: ${err.message}`);
    throw err;
  }
  const c = value as Command;
  if (c.type === 'create_jobs') {
    for (const job of c.jobs) job.payload = plainBytes(job.payload);
  } else if (c.type === 'patch_job' && c.patch.payload !== undefined) {
    c.patch.payload = plainBytes(c.patch.payload);
  }
  return c;
}

function plainBytes(b: Uint8Array): Uint8Array {
  return b.constructor === Uint8Array ? b : new Uint8Array(b);
}
