/**
 * Seeded fuzzing of peer frames against a real node (`punctual serve`, npm run build first). After a valid
 * cluster-secret handshake (as member n2, which an attacker with the secret or a buggy member could be), several
 * thousand frames made from valid ones (fields replaced by wrong types and impossible numbers, bytes flipped,
 * truncated, lengths inflated, garbage) go to n1's /raft/messages, /raft/snapshot and /raft/request. Each must be
 * answered (no hang) with an expected status; afterwards every node is alive and ready, terms are safe integers,
 * and a job still fires.
 *
 * PUNCTUAL_FUZZ_SEED=<n> replays a run (the seed is printed on failure); PUNCTUAL_FUZZ_CASES=<n> (default 3000).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Packr } from 'msgpackr';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nodeIdHeader } from '../../src/http/peer/auth.js';
import { Prng } from '../../src/core/prng.js';
import { makeEntry, type LogIndex, type Term } from '../../src/raft/index.js';
import { assertBuilt } from '../../src/node/testing/processes.js';
import { startReceiver, waitFor, type Receiver } from '../../src/node/testing/receiver.js';
import { jobFires, PeerSession, peerCounter, ready, secret, startCluster, stopAll, terms, type ServeNode } from './peer-bed.js';

const seed = Number(process.env.PUNCTUAL_FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31));
const cases = Number(process.env.PUNCTUAL_FUZZ_CASES ?? 3_000);
const packr = new Packr({ useRecords: false, mapsAsObjects: true });
const pack = (v: unknown): Uint8Array => new Uint8Array(packr.pack(v));

/** Values that must never pass as a term, index, size or id (0 stays: a stale term 0 is harmless to Raft). */
const junk: unknown[] = [
  -1, -0.5, 0.5, 1.5, 1e300, -1e300, 2 ** 53, 2 ** 64, NaN, Infinity, -Infinity, '0', '', 'n1', null, true, false,
  [], [1, 2], {}, { a: 1 }, new Uint8Array(3), 'x'.repeat(300), -(2 ** 31), 2 ** 32 + 0.25,
];
const keys = ['type', 'group', 'from', 'to', 'term', 'commit', 'sentTick', 'ctx', 'entries', 'prevIndex', 'prevTerm', 'index',
  'reject', 'rejectHint', 'hintTerm', 'lastLogIndex', 'lastLogTerm', 'transfer', 'transferee', '__proto__', 'constructor', 'zz'];
const types = ['pre_vote', 'vote', 'pre_vote_resp', 'vote_resp', 'append', 'append_resp', 'heartbeat', 'heartbeat_resp',
  'snapshot', 'timeout_now', 'read_index', 'read_index_resp', 'transfer_leader'];

/** Valid messages from n2 to n1 at term 0: stale for the running cluster, so Raft ignores them even when valid. */
function baseMessage(r: Prng): Record<string, unknown> {
  const common = { group: r.int(2), from: 'n2', to: 'n1', term: 0 };
  // Entries carry a wrong crc: even a mutation that made the message current could not put them in a log.
  const entry = { ...makeEntry(1 as LogIndex, 0 as Term, 'normal', new Uint8Array(r.int(64))), crc: 0 };
  switch (r.int(8)) {
    case 0: return { ...common, type: 'heartbeat', commit: 0, sentTick: r.int(100), ctx: '' };
    case 1: return { ...common, type: 'heartbeat_resp', sentTick: r.int(100), ctx: 'r1' };
    case 2: return { ...common, type: 'append', prevIndex: 0, prevTerm: 0, entries: r.int(2) === 0 ? [] : [entry], commit: 0 };
    case 3: return { ...common, type: 'append_resp', reject: true, index: 0, rejectHint: 0, hintTerm: 0 };
    case 4: return { ...common, type: r.int(2) === 0 ? 'vote' : 'pre_vote', lastLogIndex: 0, lastLogTerm: 0, transfer: false };
    case 5: return { ...common, type: 'vote_resp', reject: true };
    case 6: return { ...common, type: 'read_index_resp', index: 0, ctx: 'x' };
    default: return { ...common, type: 'timeout_now' };
  }
}

/** One of `xs`, copied: a mutation must never make a shared junk value contain itself. */
function pick<T>(r: Prng, xs: readonly T[]): T {
  return structuredClone(xs[r.int(xs.length)]!);
}

/** One to three structural changes: a field replaced, removed or added, a type swapped, a message replaced. */
function mutateStructure(r: Prng, batch: unknown[]): unknown {
  for (let n = 1 + r.int(3); n > 0; n--) {
    const i = r.int(batch.length);
    const m = batch[i] as Record<string, unknown>;
    switch (r.int(5)) {
      // defineProperty: an own key even for `__proto__` (as the decoder of the wire would see it).
      case 0: if (typeof m === 'object' && m !== null) Object.defineProperty(m, pick(r, keys), { value: pick(r, junk), enumerable: true, configurable: true, writable: true }); break;
      case 1: if (typeof m === 'object' && m !== null) delete m[pick(r, keys)]; break;
      case 2: if (typeof m === 'object' && m !== null) m.type = pick(r, types); break;
      case 3: batch[i] = pick(r, junk); break;
      default: if (typeof m !== 'object' || m === null) break; if (Array.isArray(m.entries)) (m.entries as unknown[]).push(pick(r, junk)); else m.entries = pick(r, junk);
    }
  }
  return r.int(20) === 0 ? { batch } : batch;
}

/** Byte-level damage to an encoded frame: flips, truncation, insertion, inflated lengths, or garbage. */
function mutateBytes(r: Prng, bytes: Uint8Array): Uint8Array {
  const b = Buffer.from(bytes);
  switch (r.int(6)) {
    case 0: {
      for (let n = 1 + r.int(4); n > 0; n--) { const at = r.int(b.length); b[at] = b[at]! ^ (1 << r.int(8)); }
      return b;
    }
    case 1: return b.subarray(0, r.int(b.length));
    case 2: { const at = r.int(b.length + 1); return Buffer.concat([b.subarray(0, at), randomBytes(r, 1 + r.int(16)), b.subarray(at)]); }
    // An array / map / str / bin header that declares far more than follows.
    case 3: return Buffer.concat([Buffer.from([pick(r, [0xdd, 0xdf, 0xdb, 0xc6])]), Buffer.from([0xff, 0xff, 0xff, r.int(256)]), b.subarray(0, r.int(b.length))]);
    case 4: return randomBytes(r, r.int(4096));
    default: return Buffer.concat([Buffer.from([0xdc, 0xff, 0xff]), ...Array.from({ length: 1 + r.int(8) }, () => b)]);
  }
}

function randomBytes(r: Prng, n: number): Buffer {
  const out = Buffer.alloc(n);
  for (let i = 0; i < n; i++) out[i] = r.int(256);
  return out;
}

/** A snapshot stream for group 7 (no such shard: a well-formed one is refused after decoding, never installed). */
function snapshotFrame(r: Prng): Uint8Array {
  const message = {
    type: 'snapshot', group: 7, from: 'n2', to: 'n1', term: 0,
    snapshot: { metadata: { index: 5, term: 0, confState: { voters: ['n1', 'n2', 'n3'], learners: [] } }, data: new Uint8Array(0) },
  } as Record<string, unknown>;
  const data = randomBytes(r, r.int(512));
  const header: Record<string, unknown> = { message, dataBytes: data.length };
  switch (r.int(6)) {
    case 0: header.dataBytes = pick(r, junk.filter((v) => v !== 0)); break;
    case 1: header.dataBytes = data.length + 1 + r.int(10); break;
    case 2: message[pick(r, ['term', 'group', 'from', 'to', 'type'])] = pick(r, junk.filter((v) => v !== 0)); break;
    case 3: (message.snapshot as Record<string, unknown>).metadata = pick(r, junk); break;
    case 4: header.dataBytes = 2 ** 40; break;
    default: break;
  }
  const h = pack(header);
  const len = Buffer.alloc(4);
  const lenChoice = r.int(5);
  len.writeUInt32BE(lenChoice === 0 ? 0xffffffff : lenChoice === 1 ? r.int(h.length + 1) : h.length);
  const frame = Buffer.concat([len, h, data]);
  return r.int(4) === 0 ? frame.subarray(0, r.int(frame.length)) : frame;
}

interface Case {
  path: string;
  headers: Record<string, string>;
  body: Uint8Array;
  /** Statuses a correct node may answer; 'reset' = the stream was reset after an early refusal. */
  ok: ReadonlySet<number | 'reset'>;
}

function makeCase(r: Prng): Case {
  const h = { [nodeIdHeader]: 'n2' };
  const messages = new Set<number | 'reset'>([204, 400, 413, 'reset']);
  const roll = r.int(100);
  if (roll < 40) {
    const batch = Array.from({ length: 1 + r.int(3) }, () => baseMessage(r));
    return { path: '/raft/messages', headers: h, body: pack(mutateStructure(r, batch)), ok: messages };
  }
  if (roll < 80) {
    const batch = Array.from({ length: 1 + r.int(3) }, () => baseMessage(r));
    return { path: '/raft/messages', headers: h, body: mutateBytes(r, pack(batch)), ok: messages };
  }
  if (roll < 95) return { path: '/raft/snapshot', headers: h, body: snapshotFrame(r), ok: new Set([400, 413, 500, 'reset']) };
  // The request envelope: kinds nobody serves (the content of real kinds is the API's to validate).
  return { path: '/raft/request', headers: { ...h, 'x-punctual-kind': `fuzz-${r.int(1000)}` }, body: randomBytes(r, r.int(256)), ok: new Set([500]) };
}

let dir = '';
let rx: Receiver;
let nodes: ServeNode[] = [];
beforeAll(async () => {
  assertBuilt();
  dir = mkdtempSync(join(tmpdir(), 'punctual-peer-fuzz-'));
  rx = await startReceiver();
  nodes = await startCluster(dir, () => ['--cluster-secret', secret]);
}, 60_000);
afterAll(async () => {
  await stopAll(nodes);
  await rx?.close();
  if (dir !== '') rmSync(dir, { recursive: true, force: true });
});

describe(`peer frame fuzzing (PUNCTUAL_FUZZ_SEED=${seed}, ${cases} cases)`, () => {
  it('a real node answers every mutated frame, stays up, and its cluster still fires jobs', async () => {
    const n1 = nodes[0]!;
    const r = new Prng(seed);
    let session = new PeerSession(n1.peerPort);
    const connect = async (): Promise<void> => {
      session.close();
      session = new PeerSession(n1.peerPort);
      const { auth } = await session.handshake('n2', 'n1', secret);
      if (auth.status !== 200) throw new Error(`handshake refused: ${auth.status}`);
    };
    await connect();
    const seen: Record<string, number> = {};
    try {
      for (let i = 0; i < cases; i++) {
        const c = makeCase(r);
        let outcome: number | 'reset';
        try {
          outcome = (await session.post(c.path, c.headers, c.body, 5_000)).status;
        } catch (err) {
          if (/no answer/.test((err as Error).message)) throw new Error(`case ${i}: ${c.path} not answered within 5 s (a hang)`);
          outcome = 'reset';
          if (session.session.destroyed || session.session.closed) await connect();
        }
        seen[`${c.path} ${outcome}`] = (seen[`${c.path} ${outcome}`] ?? 0) + 1;
        if (!c.ok.has(outcome)) throw new Error(`case ${i}: ${c.path} answered ${outcome}; body ${Buffer.from(c.body.subarray(0, 64)).toString('hex')}`);
        if (n1.child.proc.exitCode !== null) throw new Error(`case ${i}: the node exited (${n1.child.proc.exitCode}): ${n1.child.stderr().slice(-2000)}`);
      }
      session.close();
      // Healthy after: alive, ready, sane terms, and a job fires (the callback path through Raft still works).
      for (const n of nodes) expect(n.child.proc.exitCode, n.id).toBeNull();
      await waitFor('every node ready again', async () => (await Promise.all(nodes.map(ready))).every(Boolean), 20_000);
      for (const t of await terms(n1)) expect(Number.isSafeInteger(t) && t >= 1).toBe(true);
      expect(await peerCounter(n1, 'bad_frames')).toBeGreaterThan(cases / 4);
      await jobFires(nodes[1]!, rx, `after-fuzz-${seed}`);
      expect(n1.child.stderr()).not.toMatch(/"level":"error".*(onMessages threw|peer stream handler failed)/);
    } catch (err) {
      console.error(`peer fuzz failed: replay with PUNCTUAL_FUZZ_SEED=${seed} PUNCTUAL_FUZZ_CASES=${cases}; outcomes so far ${JSON.stringify(seen)}`);
      throw err;
    }
  }, 300_000);
});
