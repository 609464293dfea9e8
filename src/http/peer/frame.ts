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
import { nodeIdPattern } from '../../core/ids.js';
import { cliLimits, peerLimits } from '../../core/limits.js';
import type { Entry, LogIndex, Message, MessageType, NodeId, SnapshotMessage, Term } from '../../raft/index.js';

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

/**
 * Decodes a batch frame; throws FrameError unless it is an array of well-formed messages. Every message is
 * rebuilt field by field from what was checked, so nothing the sender added (extra keys, a `__proto__`) reaches
 * the Raft core.
 */
export function decodeMessages(frame: Uint8Array): Message[] {
  const value = unpackOrThrow(frame);
  if (!Array.isArray(value)) throw new FrameError('message frame is not an array');
  if (value.length > peerLimits.messagesPerFrameMax) throw new FrameError(`message frame holds over ${peerLimits.messagesPerFrameMax} messages`);
  return value.map((m) => checkMessage(m, false));
}

function unpackOrThrow(frame: Uint8Array): unknown {
  try {
    return packr.unpack(frame);
  } catch (err) {
    throw new FrameError(`undecodable frame: ${(err as Error).message}`);
  }
}

/** A field of a map checked by record(): its prototype is Object.prototype, so a read finds only its own keys. */
function field(r: object, key: string): unknown {
  return (r as Record<string, unknown>)[key];
}

/**
 * A decoded msgpack map: a plain object. A map whose `__proto__` key gave it another prototype (which could
 * supply fields it does not hold) is refused.
 */
function record(v: unknown, what: string): object {
  if (typeof v !== 'object' || v === null || Object.getPrototypeOf(v) !== Object.prototype) throw new FrameError(`${what} is not a map`);
  return v;
}

/** Terms, indexes, ticks, groups: safe non-negative integers (never 1e300, -1, 1.5, a string or a bigint). */
function count<T extends number = number>(r: object, key: string): T {
  const v = field(r, key);
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw new FrameError(`${key} is not a non-negative safe integer`);
  return v as T;
}

function node(r: object, key: string, allowEmpty = false): NodeId {
  const v = field(r, key);
  if (typeof v !== 'string' || !((allowEmpty && v === '') || nodeIdPattern.test(v))) throw new FrameError(`${key} is not a node id`);
  return v as NodeId;
}

function bool(r: object, key: string): boolean {
  const v = field(r, key);
  if (typeof v !== 'boolean') throw new FrameError(`${key} is not a boolean`);
  return v;
}

function ctxOf(r: object): string {
  const v = field(r, 'ctx');
  if (typeof v !== 'string' || v.length > peerLimits.readCtxCharsMax) throw new FrameError('ctx is not a short string');
  return v;
}

/**
 * Shape and range checks per message type, enough that the Raft core's step() never sees a field of the wrong
 * type or an impossible number (it checks entry crcs itself). Returns a fresh message holding only its fields.
 */
function checkMessage(m: unknown, snapshotAllowed: boolean): Message {
  const r = record(m, 'message');
  const type = field(r, 'type');
  if (typeof type !== 'string' || !messageTypes.has(type as MessageType)) throw new FrameError(`unknown message type ${String(type).slice(0, 32)}`);
  const group = count(r, 'group');
  const from = node(r, 'from');
  const to = node(r, 'to');
  const term = count<Term>(r, 'term');
  if (group >= cliLimits.shardsMax) throw new FrameError('group is not a shard');
  // Object literals with every field written out (no spread): this runs for every message of every batch.
  switch (type as MessageType) {
    case 'pre_vote':
    case 'vote':
      return { group, from, to, term, type: type as 'vote', lastLogIndex: count<LogIndex>(r, 'lastLogIndex'), lastLogTerm: count<Term>(r, 'lastLogTerm'), transfer: bool(r, 'transfer') };
    case 'pre_vote_resp':
    case 'vote_resp':
      return { group, from, to, term, type: type as 'vote_resp', reject: bool(r, 'reject') };
    case 'append':
      return {
        group, from, to, term, type: 'append', prevIndex: count<LogIndex>(r, 'prevIndex'), prevTerm: count<Term>(r, 'prevTerm'),
        entries: checkEntries(field(r, 'entries')), commit: count<LogIndex>(r, 'commit'),
      };
    case 'append_resp':
      return {
        group, from, to, term, type: 'append_resp', reject: bool(r, 'reject'), index: count<LogIndex>(r, 'index'),
        rejectHint: count<LogIndex>(r, 'rejectHint'), hintTerm: count<Term>(r, 'hintTerm'),
      };
    case 'heartbeat':
      return { group, from, to, term, type: 'heartbeat', commit: count<LogIndex>(r, 'commit'), sentTick: count(r, 'sentTick'), ctx: ctxOf(r) };
    case 'heartbeat_resp':
      return { group, from, to, term, type: 'heartbeat_resp', sentTick: count(r, 'sentTick'), ctx: ctxOf(r) };
    case 'timeout_now':
      return { group, from, to, term, type: 'timeout_now' };
    case 'read_index':
      return { group, from, to, term, type: 'read_index', ctx: ctxOf(r) };
    case 'read_index_resp':
      return { group, from, to, term, type: 'read_index_resp', index: count<LogIndex>(r, 'index'), ctx: ctxOf(r) };
    case 'transfer_leader':
      return { group, from, to, term, type: 'transfer_leader', transferee: node(r, 'transferee') };
    case 'snapshot': {
      if (!snapshotAllowed) throw new FrameError('snapshot messages travel on the snapshot stream');
      const snap = record(field(r, 'snapshot'), 'snapshot');
      const meta = record(field(snap, 'metadata'), 'snapshot metadata');
      const conf = record(field(meta, 'confState'), 'snapshot confState');
      const metadata = { index: count<LogIndex>(meta, 'index'), term: count<Term>(meta, 'term'), confState: { voters: nodeList(conf, 'voters'), learners: nodeList(conf, 'learners') } };
      return { group, from, to, term, type: 'snapshot', snapshot: { metadata, data: new Uint8Array(0) } };
    }
  }
}

function nodeList(r: object, key: string): NodeId[] {
  const v = field(r, key);
  if (!Array.isArray(v) || v.length > peerLimits.confMembersMax) throw new FrameError(`${key} is not a list of node ids`);
  return v.map((id) => node({ id }, 'id'));
}

function checkEntries(entries: unknown): Entry[] {
  if (!Array.isArray(entries)) throw new FrameError('append entries is not an array');
  // A plain loop with the checks inline: an append may carry thousands of entries, on the hot path of replication.
  const out: Entry[] = new Array<Entry>(entries.length);
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i] as Record<string, unknown>;
    if (typeof e !== 'object' || e === null || Object.getPrototypeOf(e) !== Object.prototype) throw new FrameError('entry is not a map');
    const { index, term, type, data, crc } = e;
    if (typeof index !== 'number' || !Number.isSafeInteger(index) || index < 0) throw new FrameError('entry index is not a non-negative safe integer');
    if (typeof term !== 'number' || !Number.isSafeInteger(term) || term < 0) throw new FrameError('entry term is not a non-negative safe integer');
    if (type !== 'normal' && type !== 'conf_change') throw new FrameError('entry type is not normal or conf_change');
    if (!(data instanceof Uint8Array)) throw new FrameError('entry data is not bytes');
    if (typeof crc !== 'number' || !Number.isInteger(crc) || crc < 0 || crc > 0xffffffff) throw new FrameError('entry crc is not a u32');
    out[i] = { index: index as LogIndex, term: term as Term, type, data, crc };
  }
  return out;
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
  const value = record(unpackOrThrow(bytes), 'snapshot header');
  const dataBytes = count(value, 'dataBytes');
  const message = checkMessage(field(value, 'message'), true);
  if (message.type !== 'snapshot') throw new FrameError('snapshot header carries no snapshot message');
  return { message, dataBytes };
}
