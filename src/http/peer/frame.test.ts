import { Packr } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { makeEntry } from '../../raft/index.js';
import type { LogIndex, Message, NodeId, Term } from '../../raft/index.js';
import { decodeMessages, decodeSnapshotHeader, encodeMessages, encodeSnapshotHeader, FrameError } from './frame.js';

const packr = new Packr({ useRecords: false, mapsAsObjects: true });

const heartbeat = { type: 'heartbeat', group: 1, from: 'n2', to: 'n1', term: 3, commit: 7, sentTick: 4, ctx: '' };
const entry = makeEntry(8 as LogIndex, 3 as Term, 'normal', new Uint8Array([1, 2]));
const append = { type: 'append', group: 0, from: 'n2', to: 'n1', term: 3, prevIndex: 7, prevTerm: 3, entries: [entry], commit: 7 };

/** The frame of one message whose field `key` is `value` (undefined: the field left out). */
function withField(base: Record<string, unknown>, key: string, value: unknown): Uint8Array {
  const m = { ...base };
  if (value === undefined) delete m[key];
  else m[key] = value;
  return packr.pack([m]);
}

describe('decodeMessages', () => {
  it('decodes every message type the Raft core sends, field for field', () => {
    const all: Message[] = [
      { type: 'pre_vote', group: 0, from: 'n1' as NodeId, to: 'n2' as NodeId, term: 2 as Term, lastLogIndex: 5 as LogIndex, lastLogTerm: 1 as Term, transfer: false },
      { type: 'vote_resp', group: 0, from: 'n1' as NodeId, to: 'n2' as NodeId, term: 2 as Term, reject: true },
      append as unknown as Message,
      { type: 'append_resp', group: 3, from: 'n1' as NodeId, to: 'n2' as NodeId, term: 2 as Term, reject: false, index: 9 as LogIndex, rejectHint: 0 as LogIndex, hintTerm: 0 as Term },
      heartbeat as unknown as Message,
      { type: 'heartbeat_resp', group: 1, from: 'n1' as NodeId, to: 'n2' as NodeId, term: 3 as Term, sentTick: 4, ctx: 'r1' },
      { type: 'timeout_now', group: 1, from: 'n1' as NodeId, to: 'n2' as NodeId, term: 3 as Term },
      { type: 'read_index', group: 1, from: 'n1' as NodeId, to: 'n2' as NodeId, term: 3 as Term, ctx: 'r2' },
      { type: 'read_index_resp', group: 1, from: 'n1' as NodeId, to: 'n2' as NodeId, term: 3 as Term, index: 4 as LogIndex, ctx: 'r2' },
      { type: 'transfer_leader', group: 1, from: 'n1' as NodeId, to: 'n2' as NodeId, term: 3 as Term, transferee: 'n3' as NodeId },
    ];
    const got = decodeMessages(encodeMessages(all)).map((m) =>
      m.type === 'append' ? { ...m, entries: m.entries.map((e) => ({ ...e, data: new Uint8Array(e.data) })) } : m);
    expect(got).toEqual(all);
  });

  it('refuses impossible numbers in every term, index and tick field', () => {
    const bad = [1e300, -1, 1.5, Number.MAX_SAFE_INTEGER + 2, NaN, Infinity, '3', null, true, 2n ** 62n];
    for (const [base, keys] of [[heartbeat, ['term', 'commit', 'sentTick', 'group']], [append, ['term', 'prevIndex', 'prevTerm', 'commit']]] as const) {
      for (const key of keys) {
        for (const v of bad) expect(() => decodeMessages(withField(base, key, v)), `${key}=${String(v)}`).toThrow(FrameError);
        expect(() => decodeMessages(withField(base, key, undefined)), `${key} missing`).toThrow(FrameError);
      }
    }
    for (const key of ['index', 'term', 'crc'] as const) {
      for (const v of [1e300, -1, 0.5, 'x']) {
        expect(() => decodeMessages(withField(append, 'entries', [{ ...entry, [key]: v }])), `entry ${key}=${String(v)}`).toThrow(FrameError);
      }
    }
  });

  it('refuses wrong types and shapes', () => {
    const cases: Array<[Record<string, unknown>, string, unknown]> = [
      [heartbeat, 'type', 'heartbeats'], [heartbeat, 'from', 'N1!'], [heartbeat, 'to', 42], [heartbeat, 'ctx', 'x'.repeat(1000)],
      [heartbeat, 'group', 5000], [append, 'entries', 'x'], [append, 'entries', [{ ...entry, data: 'bytes?' }]],
      [append, 'entries', [{ ...entry, type: 'other' }]], [append, 'entries', [null]],
      [{ type: 'vote_resp', group: 0, from: 'n1', to: 'n2', term: 1 }, 'reject', 'no'],
      [{ type: 'transfer_leader', group: 0, from: 'n1', to: 'n2', term: 1 }, 'transferee', ''],
      [{ ...heartbeat, type: 'snapshot' }, 'snapshot', {}],
    ];
    for (const [base, key, v] of cases) expect(() => decodeMessages(withField(base, key, v)), `${String(base.type)}.${key}`).toThrow(FrameError);
    for (const frame of [packr.pack({ a: 1 }), packr.pack([1]), packr.pack([[heartbeat]]), new Uint8Array([0xc1]), new Uint8Array([0xdd, 0xff, 0xff, 0xff, 0xff])]) {
      expect(() => decodeMessages(frame)).toThrow(FrameError);
    }
  });

  it('keeps only the fields of the type: no extra key and no inherited one reaches Raft', () => {
    const [m] = decodeMessages(packr.pack([{ ...heartbeat, extra: 'x', lastLogIndex: 1e300 }]));
    expect(m).toEqual(heartbeat);
    // A `__proto__` key must not supply a missing field.
    const sneaky = new Uint8Array(Buffer.concat([Buffer.from([0x91]), Buffer.from(packr.pack({ ...heartbeat, commit: undefined }))]));
    const proto = packr.pack([JSON.parse(`{"__proto__": {"commit": 5}, ${JSON.stringify(heartbeat).slice(1).replace('"commit":7,', '')}`)]);
    expect(() => decodeMessages(sneaky)).toThrow(FrameError);
    expect(() => decodeMessages(proto)).toThrow(FrameError);
  });
});

describe('decodeSnapshotHeader', () => {
  const snap = {
    type: 'snapshot', group: 2, from: 'n1', to: 'n2', term: 4,
    snapshot: { metadata: { index: 50, term: 4, confState: { voters: ['n1', 'n2'], learners: [] } }, data: new Uint8Array(0) },
  } as unknown as Extract<Message, { type: 'snapshot' }>;

  it('round-trips a header', () => {
    const h = encodeSnapshotHeader(snap, 123);
    expect(decodeSnapshotHeader(h.subarray(4))).toEqual({ message: snap, dataBytes: 123 });
  });

  it('refuses bad sizes and metadata before any buffer is made', () => {
    const pack = (v: unknown): Uint8Array => packr.pack(v);
    for (const dataBytes of [-1, 1e300, 1.5, '10']) expect(() => decodeSnapshotHeader(pack({ message: snap, dataBytes }))).toThrow(FrameError);
    const meta = (m: Record<string, unknown>): unknown => ({ ...snap, snapshot: { metadata: { ...snap.snapshot.metadata, ...m }, data: new Uint8Array(0) } });
    for (const m of [{ index: -5 }, { term: 1e300 }, { confState: { voters: 'n1', learners: [] } }, { confState: { voters: [7], learners: [] } },
      { confState: { voters: Array.from({ length: 100 }, (_, i) => `n${i}`), learners: [] } }]) {
      expect(() => decodeSnapshotHeader(pack({ message: meta(m), dataBytes: 1 }))).toThrow(FrameError);
    }
    expect(() => decodeSnapshotHeader(pack({ message: { ...heartbeat }, dataBytes: 1 }))).toThrow(FrameError);
    expect(() => decodeSnapshotHeader(pack([1]))).toThrow(FrameError);
  });
});
