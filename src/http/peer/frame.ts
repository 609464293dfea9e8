/**
 * Wire frames of the peer transport (msgpackr). A frame that fails to decode or to look like what it claims is
 * a FrameError: the receiver drops it with a log line and keeps serving.
 *
 * - message batch (POST /raft/messages): msgpack array of Raft Messages, any groups mixed.
 * - snapshot (POST /raft/snapshot): u32 big-endian header length, msgpack SnapshotHeader, then exactly
 *   `dataBytes` raw bytes of snapshot data (streamed in chunks).
 * - request / response (POST /raft/request): raw bytes, the kind in a header.
 */
import { Packr } from 'msgpackr';
import type { Message, MessageType, SnapshotMessage } from '../../raft/index.js';

const packr = new Packr({ useRecords: false, mapsAsObjects: true });

export class FrameError extends Error {
  override name = 'FrameError';
}

const messageTypes: ReadonlySet<MessageType> = new Set<MessageType>([
  'pre_vote', 'vote', 'pre_vote_resp', 'vote_resp', 'append', 'append_resp', 'heartbeat', 'heartbeat_resp',
  'snapshot', 'timeout_now', 'read_index', 'read_index_resp', 'transfer_leader',
]);

export function encodeMessages(messages: readonly Message[]): Uint8Array {
  return packr.pack(messages);
}

/** Decodes a batch frame; throws FrameError unless it is an array of well-formed messages. */
export function decodeMessages(frame: Uint8Array): Message[] {
  const value = unpackOrThrow(frame);
  if (!Array.isArray(value)) throw new FrameError('message frame is not an array');
  for (const m of value) checkMessage(m);
  return value as Message[];
}

function unpackOrThrow(frame: Uint8Array): unknown {
  try {
    return packr.unpack(frame);
  } catch (err) {
    throw new FrameError(`undecodable frame: ${(err as Error).message}`);
  }
}

/** Shape checks: enough that the Raft core's step() never trips on a missing field (it checks entry crcs itself). */
function checkMessage(m: unknown): void {
  if (typeof m !== 'object' || m === null) throw new FrameError('message is not an object');
  const r = m as Record<string, unknown>;
  if (!messageTypes.has(r.type as MessageType)) throw new FrameError(`unknown message type ${String(r.type)}`);
  if (!Number.isSafeInteger(r.group) || (r.group as number) < 0) throw new FrameError('message group is not an index');
  if (typeof r.from !== 'string' || typeof r.to !== 'string') throw new FrameError('message from/to are not strings');
  if (typeof r.term !== 'number') throw new FrameError('message term is not a number');
  if (r.type === 'append') checkEntries(r.entries);
  if (r.type === 'snapshot') throw new FrameError('snapshot messages travel on the snapshot stream');
}

function checkEntries(entries: unknown): void {
  if (!Array.isArray(entries)) throw new FrameError('append entries is not an array');
  for (const e of entries as Array<Record<string, unknown> | null>) {
    if (typeof e !== 'object' || e === null) throw new FrameError('entry is not an object');
    if (!(e.data instanceof Uint8Array)) throw new FrameError('entry data is not bytes');
    if (typeof e.index !== 'number' || typeof e.term !== 'number' || typeof e.crc !== 'number') {
      throw new FrameError('entry index/term/crc are not numbers');
    }
  }
}

/** Queue accounting: a cheap upper-ish estimate of a message's encoded size. */
export function estimateBytes(m: Message): number {
  let n = 64 + m.from.length + m.to.length;
  if (m.type === 'append') for (const e of m.entries) n += 32 + e.data.length;
  return n;
}

export interface SnapshotHeader {
  /** The snapshot message with empty snapshot data: the data follows the header. */
  readonly message: SnapshotMessage;
  readonly dataBytes: number;
}

export function encodeSnapshotHeader(message: SnapshotMessage, dataBytes: number): Uint8Array {
  const bare: SnapshotMessage = { ...message, snapshot: { metadata: message.snapshot.metadata, data: new Uint8Array(0) } };
  const body = packr.pack({ message: bare, dataBytes } satisfies SnapshotHeader);
  const out = new Uint8Array(4 + body.length);
  new DataView(out.buffer).setUint32(0, body.length);
  out.set(body, 4);
  return out;
}

export function decodeSnapshotHeader(bytes: Uint8Array): SnapshotHeader {
  const value = unpackOrThrow(bytes) as Partial<SnapshotHeader> | null;
  if (typeof value !== 'object' || value === null) throw new FrameError('snapshot header is not an object');
  if (!Number.isSafeInteger(value.dataBytes) || value.dataBytes! < 0) throw new FrameError('snapshot size is not a count');
  const m = value.message as unknown as Record<string, unknown> | undefined;
  if (typeof m !== 'object' || m === null || m.type !== 'snapshot') throw new FrameError('snapshot header carries no snapshot message');
  const snap = m.snapshot as Record<string, unknown> | undefined;
  if (typeof snap !== 'object' || snap === null || typeof snap.metadata !== 'object' || snap.metadata === null) {
    throw new FrameError('snapshot message has no metadata');
  }
  checkMessage({ ...m, type: 'timeout_now' }); // the common fields
  return value as SnapshotHeader;
}
