/**
 * The firing port against a real firing thread (firing-thread.ts bundled by esbuild, as the build would run it)
 * and, for the same behaviours, the core on the main loop; real node:http receivers on 127.0.0.1.
 * Assertions are about what arrived and in which order relative to the due time, never about how long it took.
 */
import diagnostics from 'node:diagnostics_channel';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { systemClock } from '../core/clock.js';
import { nodeLimits } from '../core/limits.js';
import { silentLogger } from '../core/log.js';
import type { CallbackSpec } from '../scheduler/types.js';
import { callbackSpec } from './testing/spec.js';
import type { AttemptOutcome, Delivery } from './dispatcher.js';
import { monoEpochMs, sleepUntil } from './firing-core.js';
import { FiringPort, type FiringPortOptions } from './firing-port.js';
import { verifySignatureV2, verifyStandardWebhook } from './signature.js';
import { TargetPolicy, parseCidr, type Cidr } from './target-policy.js';
import { useFiringThreadBundle } from './testing/thread-bundle.js';

const threadEntry = useFiringThreadBundle();

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

interface Arrival {
  key: string;
  arrivedAtMs: number;
  headers: IncomingMessage['headers'];
  body: string;
  url: string;
  method: string;
}

async function receiver(handler?: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ url: string; arrivals: Arrival[]; connections: () => number }> {
  const arrivals: Arrival[] = [];
  let connections = 0;
  const server = createServer((req, res) => {
    const arrivedAtMs = Date.now();
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      arrivals.push({ key: String(req.headers['x-deduplication-key']), arrivedAtMs, headers: req.headers, body: Buffer.concat(chunks).toString(), url: req.url ?? '', method: req.method ?? '' });
      if (handler !== undefined) return handler(req, res);
      res.writeHead(200, { 'content-length': '0' });
      res.end();
    });
  });
  server.on('connection', () => connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}/cb`, arrivals, connections: () => connections };
}

const spec = callbackSpec;

let jobCounter = 0;
function delivery(s: CallbackSpec, overrides: Partial<Delivery> = {}): Delivery {
  jobCounter++;
  return {
    jobId: `job-${jobCounter}`,
    scheduledAtMs: 1_700_000_000_000 + jobCounter,
    attempt: 1,
    fencingToken: '0.1',
    spec: s,
    body: new TextEncoder().encode(`{"n":${jobCounter}}`),
    concurrencyKey: 'task-a',
    ...overrides,
  };
}

function keyOf(d: Delivery): string {
  return `${d.jobId}:${d.scheduledAtMs}`;
}

const modes = ['thread', 'in-process'] as const;

function port(mode: (typeof modes)[number], options: Partial<FiringPortOptions> = {}): FiringPort {
  const p = new FiringPort({ clock: systemClock(), logger: silentLogger, mode, threadEntry: mode === 'thread' ? threadEntry() : undefined, ...options });
  cleanups.push(() => p.close(0));
  return p;
}

async function until(cond: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met');
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** A receiver that answers only when told (`release`, one per request in order) and a port on shard 0's lease, term 2. */
async function slotBed(mode: (typeof modes)[number]) {
  const release: Array<() => void> = [];
  const r = await receiver((_req, res) => {
    release.push(() => {
      res.writeHead(200, { 'content-length': '0' });
      res.end();
    });
  });
  const leases = new Map<number, { term: number; untilMs: number }>([[0, { term: 2, untilMs: Number.POSITIVE_INFINITY }]]);
  const p = port(mode, { lease: (shard) => leases.get(shard) ?? { term: -1, untilMs: Number.NEGATIVE_INFINITY } });
  return { r, release, leases, p };
}

describe.each(modes)('FiringPort (%s)', (mode) => {
  it('sends now: the signed request arrives, onStart runs before the outcome', async () => {
    const r = await receiver();
    const order: string[] = [];
    const p = port(mode, { onStart: (d) => order.push(`start ${d.jobId}`) });
    expect(p.mode).toBe(mode);
    const s = spec(r.url, { signingSecret: 'whsec_' + Buffer.from('0123456789abcdef0123456789abcdef').toString('base64') });
    const d = delivery(s);
    const outcome = await p.send(d);
    order.push(`outcome ${d.jobId}`);
    expect(outcome.kind).toBe('succeeded');
    expect(outcome.statusCode).toBe(200);
    expect(order).toEqual([`start ${d.jobId}`, `outcome ${d.jobId}`]);
    expect(r.arrivals).toHaveLength(1);
    const a = r.arrivals[0]!;
    expect(a.key).toBe(keyOf(d));
    expect(a.headers['x-punctual-fencing-token']).toBe('0.1');
    const body = new TextEncoder().encode(a.body);
    expect(verifyStandardWebhook(s.signingSecret!, { id: keyOf(d), timestamp: String(a.headers['webhook-timestamp']), signature: String(a.headers['webhook-signature']) }, body, 300, Date.now())).toBe(true);
    expect(verifySignatureV2(s.signingSecret!, String(a.headers['x-punctual-signature']), { method: 'POST', url: r.url, dedupKey: keyOf(d), body }, 300_000, Date.now())).toBe(true);
    expect(p.inFlight()).toBe(0);
    expect(p.queued()).toBe(0);
  });

  it('stages: nothing arrives before the due time, the signature is made with the due time', async () => {
    const r = await receiver();
    const p = port(mode);
    const s = spec(r.url, { signingSecret: 'plain-secret' });
    const dueAtMs = Date.now() + 1_500;
    const ds = [delivery(s), delivery(s), delivery(s)];
    const outcomes = await Promise.all(ds.map((d) => p.stage(d, dueAtMs)));
    for (const o of outcomes) expect(o?.kind).toBe('succeeded');
    expect(r.arrivals).toHaveLength(3);
    for (const a of r.arrivals) {
      expect(a.arrivedAtMs).toBeGreaterThanOrEqual(dueAtMs);
      expect(String(a.headers['x-punctual-signature'])).toMatch(new RegExp(`^t=${dueAtMs},`));
      expect(verifySignatureV2(s.signingSecret!, String(a.headers['x-punctual-signature']), { method: 'POST', url: r.url, dedupKey: a.key, body: new TextEncoder().encode(a.body) }, 300_000, Date.now())).toBe(true);
    }
    for (const o of outcomes) expect(o!.startedAtMs).toBeGreaterThanOrEqual(dueAtMs);
  });

  it('a stream staged one due ms after another (a steady rate): each leaves at its ms, none before it', async () => {
    const r = await receiver();
    const p = port(mode);
    const s = spec(r.url);
    const firstMs = Date.now() + 300;
    const ds = Array.from({ length: 100 }, () => delivery(s));
    const outcomes = await Promise.all(ds.map((d, i) => p.stage(d, firstMs + i)));
    expect(r.arrivals).toHaveLength(100);
    outcomes.forEach((o, i) => {
      expect(o?.kind).toBe('succeeded');
      expect(o!.startedAtMs).toBeGreaterThanOrEqual(firstMs + i);
    });
    for (const a of r.arrivals) expect(a.arrivedAtMs).toBeGreaterThanOrEqual(firstMs);
  });

  it('opens connections ahead for deliveries staged for one instant', async () => {
    const r = await receiver();
    const p = port(mode);
    const s = spec(r.url);
    const dueAtMs = Date.now() + 1_500;
    const staged = Array.from({ length: 8 }, () => p.stage(delivery(s), dueAtMs));
    // Before the due time, without any request sent, the receiver already holds the warm connections.
    await until(() => r.connections() >= 8);
    expect(r.arrivals).toHaveLength(0);
    const outcomes = await Promise.all(staged);
    for (const o of outcomes) expect(o?.kind).toBe('succeeded');
    expect(r.connections()).toBe(8);
  });

  it('warms a URL again at once when a later batch stages more for one instant than the last warm asked for', async () => {
    const r = await receiver();
    const p = port(mode);
    const s = spec(r.url);
    const firstMs = Date.now() + 1_500;
    const staged = Array.from({ length: 2 }, () => p.stage(delivery(s), firstMs));
    await until(() => r.connections() >= 2);
    // A second instant with more: not held back by the first warm of this URL a moment ago.
    staged.push(...Array.from({ length: 6 }, () => p.stage(delivery(s), firstMs + 1)));
    await until(() => r.connections() >= 6);
    expect(r.arrivals).toHaveLength(0);
    for (const o of await Promise.all(staged)) expect(o?.kind).toBe('succeeded');
    expect(r.arrivals).toHaveLength(8);
  });

  it('withdraws: a withdrawn delivery is never sent; one already sent answers "sent"', async () => {
    const r = await receiver();
    const p = port(mode);
    const s = spec(r.url);
    const later = delivery(s);
    const staged = p.stage(later, Date.now() + 1_500);
    const now = delivery(s);
    await p.send(now);
    const results = await p.withdraw([`${later.jobId}\n${later.scheduledAtMs}`, `${now.jobId}\n${now.scheduledAtMs}`]);
    expect(results).toEqual(['withdrawn', 'sent']);
    expect(await staged).toBeNull();
    expect(p.stagedCount()).toBe(0);
    await new Promise((resolve) => setTimeout(resolve, 1_700));
    expect(r.arrivals.map((a) => a.key)).toEqual([keyOf(now)]);
  });

  it('obeys the lease deadline: held while it has passed, sent once renewed, dropped on revoke', async () => {
    const r = await receiver();
    const deadlines = new Map<number, number>([[0, Number.NEGATIVE_INFINITY], [1, Number.NEGATIVE_INFINITY]]);
    const p = port(mode, { lease: (shard) => ({ term: 4, untilMs: deadlines.get(shard)! }) });
    const s = spec(r.url);
    const held = delivery(s, { fencingToken: '0.4' });
    const revoked = delivery(s, { fencingToken: '1.4' });
    const heldOutcome = p.stage(held, Date.now() + 20);
    const revokedOutcome = p.stage(revoked, Date.now() + 20);
    await new Promise((resolve) => setTimeout(resolve, 150));
    expect(r.arrivals).toHaveLength(0);
    p.revokeShard(1, 4);
    expect(await revokedOutcome).toBeNull();
    deadlines.set(0, performance.timeOrigin + performance.now() + 60_000);
    expect((await heldOutcome)?.kind).toBe('succeeded');
    expect(r.arrivals.map((a) => a.key)).toEqual([keyOf(held)]);
  });

  it('a lease renewed at its source reaches a held delivery after deliveries of another shard started and settled', async () => {
    const r = await receiver();
    const deadlines = new Map<number, number>([[0, Number.POSITIVE_INFINITY], [1, Number.NEGATIVE_INFINITY]]);
    const p = port(mode, { lease: (shard) => ({ term: 4, untilMs: deadlines.get(shard)! }) });
    const s = spec(r.url);
    const sent = [delivery(s, { fencingToken: '0.4' }), delivery(s, { fencingToken: '0.4' })];
    const held = delivery(s, { fencingToken: '1.4' });
    const heldOutcome = p.send(held);
    expect((await Promise.all(sent.map((d) => p.send(d)))).map((o) => o.kind)).toEqual(['succeeded', 'succeeded']);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(r.arrivals.map((a) => a.key).sort()).toEqual(sent.map(keyOf).sort());
    // Renewed where the node keeps it, told nothing: the port's refresh (on the main loop, the core's next look) carries it.
    deadlines.set(1, performance.timeOrigin + performance.now() + 60_000);
    expect((await heldOutcome).kind).toBe('succeeded');
    expect(r.arrivals.map((a) => a.key).sort()).toEqual([...sent, held].map(keyOf).sort());
  });

  it('a delivery waiting for its concurrency slot: withdrawn, it is never sent; its lease lapsed, it waits; its term over, it is dropped', async () => {
    const { r, release, leases, p } = await slotBed(mode);
    const s = spec(r.url, { maxConcurrency: 1 });
    const first = delivery(s, { fencingToken: '0.2' });
    const [withdrawn, held, stale] = [delivery(s, { fencingToken: '0.2' }), delivery(s, { fencingToken: '0.2' }), delivery(s, { fencingToken: '0.2' })];
    const settled = new Map<string, AttemptOutcome | null>();
    const done = (o: AttemptOutcome | null, d: Delivery): void => void settled.set(d.jobId, o);
    for (const d of [first, withdrawn, held]) p.sendTo(d, done, d);
    await until(() => r.arrivals.length === 1 && p.queued() === 2);
    expect(await p.withdraw([`${withdrawn.jobId}\n${withdrawn.scheduledAtMs}`])).toEqual(['withdrawn']);
    expect(settled.get(withdrawn.jobId)).toBeNull();
    // The lease lapses while the other one waits; the first one's slot comes free: nothing more is sent.
    leases.set(0, { term: 2, untilMs: Number.NEGATIVE_INFINITY });
    p.setLease(0, leases.get(0)!);
    await new Promise((resolve) => setTimeout(resolve, 20)); // the thread has the new deadline
    release.shift()!();
    await until(() => settled.get(first.jobId)?.kind === 'succeeded');
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(r.arrivals.map((a) => a.key)).toEqual([keyOf(first)]);
    // The lease is back: the held one goes.
    leases.set(0, { term: 2, untilMs: Number.POSITIVE_INFINITY });
    p.setLease(0, leases.get(0)!);
    await until(() => r.arrivals.length === 2);
    // One more of term 2 waits for the slot; a newer term fires the shard meanwhile: it is dropped, never sent.
    p.sendTo(stale, done, stale);
    await until(() => p.queued() === 1);
    leases.set(0, { term: 3, untilMs: Number.POSITIVE_INFINITY });
    p.setLease(0, leases.get(0)!);
    await new Promise((resolve) => setTimeout(resolve, 20)); // the thread has the new term
    release.shift()!();
    await until(() => settled.has(held.jobId) && settled.has(stale.jobId));
    expect(settled.get(held.jobId)?.kind).toBe('succeeded');
    expect(settled.get(stale.jobId)).toBeNull();
    expect(r.arrivals.map((a) => a.key)).toEqual([keyOf(first), keyOf(held)]);
    expect(p.queued()).toBe(0);
    release.length = 0;
  });

  it('a fence (a leadership transfer): once it resolved, a delivery waiting for its slot is not sent on the old lease', async () => {
    const { r, release, leases, p } = await slotBed(mode);
    const s = spec(r.url, { maxConcurrency: 1 });
    const [first, waiting] = [delivery(s, { fencingToken: '0.2' }), delivery(s, { fencingToken: '0.2' })];
    const settled = new Map<string, AttemptOutcome | null>();
    const done = (o: AttemptOutcome | null, d: Delivery): void => void settled.set(d.jobId, o);
    for (const d of [first, waiting]) p.sendTo(d, done, d);
    await until(() => r.arrivals.length === 1 && p.queued() === 1);
    // The transfer voided the lease: the fence hands that to the thread, then the slot comes free at once.
    leases.set(0, { term: 2, untilMs: Number.NEGATIVE_INFINITY });
    await p.fence(0, leases.get(0)!);
    release.shift()!();
    await until(() => settled.get(first.jobId)?.kind === 'succeeded');
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(r.arrivals.map((a) => a.key)).toEqual([keyOf(first)]);
    // The transfer was abandoned and the lease is back: it goes.
    leases.set(0, { term: 2, untilMs: Number.POSITIVE_INFINITY });
    p.setLease(0, leases.get(0)!);
    await until(() => r.arrivals.length === 2);
    release.shift()!();
    await until(() => settled.get(waiting.jobId)?.kind === 'succeeded');
  });

  it('applies the target policy in the thread: a denied address is refused, nothing sent', async () => {
    const deny: Cidr[] = [parseCidr('127.0.0.0/8') as Cidr];
    const r = await receiver();
    const p = port(mode, { targetPolicy: new TargetPolicy({ deny }) });
    const outcome = (await p.send(delivery(spec(r.url)))) as AttemptOutcome;
    expect(outcome.kind).toBe('permanent');
    expect(outcome.error).toMatch(/refused by policy \(--callback-deny 127\.0\.0\.0\/8\)/);
    const link = await p.send(delivery(spec('http://169.254.169.254/latest')));
    expect(link.kind).toBe('permanent');
    expect(link.error).toMatch(/link-local/);
    expect(r.arrivals).toHaveLength(0);
  });

  it('a hot instant goes out in chunks: the first requests arrive before the last delivery is handed to the network', async () => {
    const r = await receiver();
    const s = spec(r.url, { maxConcurrency: 1_000 });
    const ds = Array.from({ length: 20 * nodeLimits.firingSendChunkMax }, () => delivery(s));
    const last = ds[ds.length - 1]!;
    let arrivedAtLastStart = -1;
    const p = port(mode, { onStart: (d) => d === last && (arrivedAtLastStart = r.arrivals.length) });
    const outcomes = await Promise.all(ds.map((d) => p.send(d)));
    for (const o of outcomes) expect(o.kind).toBe('succeeded');
    expect(r.arrivals.map((a) => a.key).sort()).toEqual(ds.map(keyOf).sort());
    // All at once (one synchronous go) nothing could be written, let alone received, before the last start.
    expect(arrivedAtLastStart).toBeGreaterThan(0);
  });

  it('orders handed over in batches the thread takes over several turns: each arrives once, with its own fields; a withdrawal between them takes back only its own', async () => {
    const r = await receiver();
    const p = port(mode);
    const signed = spec(r.url, { signingSecret: 'plain-secret', maxConcurrency: 1_000 });
    const plain = spec(r.url, { headers: { 'x-tenant': 'b' }, maxConcurrency: 1_000 });
    const perTurn = nodeLimits.firingThreadOpsPerTurnMax;
    const expected = new Map<string, { d: Delivery; body: string }>();
    const settled = new Map<string, Array<AttemptOutcome | null>>();
    const done = (o: AttemptOutcome | null, key: string): void => void settled.set(key, [...(settled.get(key) ?? []), o]);
    const withdrawn: string[] = [];
    const results: Array<Promise<unknown>> = [];
    let n = 0;
    // Sent now, staged soon, or staged well ahead (held on the main side), mixed so that every kind meets the
    // boundaries of the thread's turns.
    const kindOf = (i: number): 'now' | 'soon' | 'far' => ['now', 'now', 'soon', 'soon', 'far'][(i * 7) % 5] as 'now' | 'soon' | 'far';
    // One macrotask: orders of every kind; then a withdrawal;
    // then more of each, so a batch holds runs of orders on both sides of another op and is longer than a turn.
    const hand = (count: number): void => {
      const nowMs = Date.now();
      for (let i = 0; i < count; i++, n++) {
        // Bodies of different lengths (some empty), a concurrency key with a character of two UTF-16 units.
        const body = n % 5 === 0 ? '' : `{"n":${n},"pad":"${'x'.repeat(n % 37)}"}`;
        const d = delivery(n % 2 === 0 ? signed : plain, {
          jobId: `job-batch-${n}`,
          attempt: 1 + (n % 4),
          fencingToken: `${n % 3}.${1 + (n % 2)}`,
          body: new TextEncoder().encode(body),
          bodyEncoding: n % 7 === 0 ? 'base64' : 'json',
          concurrencyKey: `tâche-\u{1D11E}-${n % 3}`,
        });
        const key = keyOf(d);
        expected.set(key, { d, body });
        if (kindOf(n) === 'now') p.sendTo(d, done, key);
        else p.stageTo(d, nowMs + (kindOf(n) === 'soon' ? 30 : 400), done, key);
      }
    };
    hand(2 * perTurn + 7);
    const back = [...expected.values()].filter((_, i) => kindOf(i) === 'far' && i % 2 === 0).map(({ d }) => d);
    for (const d of back) withdrawn.push(keyOf(d));
    results.push(p.withdraw(back.map((d) => `${d.jobId}\n${d.scheduledAtMs}`)));
    hand(3 * perTurn + 5);
    // A second batch while the thread is still taking the first.
    await new Promise((resolve) => setImmediate(resolve));
    hand(2 * perTurn + 3);
    expect(await results[0]).toEqual(back.map(() => 'withdrawn'));
    await until(() => settled.size === expected.size);
    await new Promise((resolve) => setTimeout(resolve, 50));
    for (const [key, outcomes] of settled) {
      expect(outcomes, key).toHaveLength(1);
      expect(outcomes[0]?.kind ?? 'withdrawn', key).toBe(withdrawn.includes(key) ? 'withdrawn' : 'succeeded');
    }
    const arrived = r.arrivals.map((a) => a.key);
    expect(new Set(arrived).size).toBe(arrived.length);
    expect(arrived.sort()).toEqual([...expected.keys()].filter((k) => !withdrawn.includes(k)).sort());
    for (const a of r.arrivals) {
      const { d, body } = expected.get(a.key)!;
      expect(a.headers['x-punctual-job-id']).toBe(d.jobId);
      expect(a.headers['x-punctual-attempt']).toBe(String(d.attempt));
      expect(a.headers['x-punctual-fencing-token']).toBe(d.fencingToken);
      expect(a.headers['x-punctual-scheduled-at']).toBe(String(d.scheduledAtMs));
      expect(a.body).toBe(body);
      expect(a.headers['content-type']).toBe(body === '' ? undefined : d.bodyEncoding === 'base64' ? 'application/octet-stream' : 'application/json');
      expect(a.headers['x-tenant']).toBe(d.spec === plain ? 'b' : undefined);
      expect(a.headers['x-punctual-signature'] !== undefined).toBe(d.spec === signed);
    }
  });

  it('learns listeners added after start (the API port bound later)', async () => {
    const first = await receiver();
    const r = await receiver();
    const policy = new TargetPolicy();
    const p = port(mode, { targetPolicy: policy });
    expect((await p.send(delivery(spec(first.url)))).kind).toBe('succeeded');
    policy.addListener('127.0.0.1', Number(new URL(r.url).port), 'API listener');
    const refused = await p.send(delivery(spec(r.url)));
    expect(refused.kind).toBe('permanent');
    expect(refused.error).toMatch(/this node's API listener/);
  });
});

describe('sleepUntil (the firing thread\'s last millisecond)', () => {
  it('returns once the monotonic clock reached the time, and never blocks longer than its bound', () => {
    const t = monoEpochMs() + 0.7;
    sleepUntil(t);
    expect(monoEpochMs()).toBeGreaterThanOrEqual(t);
    const far = monoEpochMs();
    sleepUntil(far + 60_000);
    // Bounded by firingSpinMs and a fraction: a far time is looked at again by the caller, not slept through.
    expect(monoEpochMs() - far).toBeLessThan(1_000);
    expect(monoEpochMs() - far).toBeGreaterThanOrEqual(nodeLimits.firingSpinMs);
  });
});

describe('FiringPort on the main loop', () => {
  it('reports the starts of a burst after its requests were written on reused keep-alive connections', async () => {
    const r = await receiver();
    const order: string[] = [];
    const p = port('in-process', { onStart: (d) => order.push(`start ${d.jobId}`) });
    const s = spec(r.url);
    // The first burst opens the connections; the second reuses them, and undici writes on a reused connection
    // only after a setImmediate of its own (it first reads what the idle connection may hold).
    const burst = async (): Promise<Delivery[]> => {
      const ds = Array.from({ length: 5 }, () => delivery(s));
      for (const o of await Promise.all(ds.map((d) => p.send(d)))) expect(o.kind).toBe('succeeded');
      return ds;
    };
    await burst();
    const written = (m: unknown): void => {
      const id = /x-punctual-job-id: ?([^\r\n]+)/i.exec(String((m as { headers: unknown }).headers))?.[1];
      if (id !== undefined) order.push(`written ${id}`);
    };
    diagnostics.subscribe('undici:client:sendHeaders', written);
    try {
      order.length = 0;
      const ds = await burst();
      expect(order.filter((e) => e.startsWith('written')).sort()).toEqual(ds.map((d) => `written ${d.jobId}`).sort());
      expect(order.findIndex((e) => e.startsWith('start'))).toBe(ds.length);
    } finally {
      diagnostics.unsubscribe('undici:client:sendHeaders', written);
    }
  });
});

describe('FiringPort thread crash', () => {
  it('hands what was staged to a new thread; what had started settles retryable; the node side goes on', async () => {
    let release: (() => void) | null = null;
    const r = await receiver((_req, res) => {
      // The first request hangs until the test lets it go; the rest answer at once.
      if (release === null) {
        release = () => {
          res.writeHead(200, { 'content-length': '0' });
          res.end();
        };
        return;
      }
      res.writeHead(200, { 'content-length': '0' });
      res.end();
    });
    const p = port('thread');
    const s = spec(r.url);
    const hanging = delivery(s);
    const started: string[] = [];
    const p2 = new FiringPort({ clock: systemClock(), logger: silentLogger, mode: 'thread', threadEntry: threadEntry(), onStart: (d) => started.push(d.jobId) });
    cleanups.push(() => p2.close(0));
    void p;
    const hangingOutcome = p2.send(hanging);
    await until(() => r.arrivals.length === 1 && started.length === 1);
    const stagedD = delivery(s);
    const stagedOutcome = p2.stage(stagedD, Date.now() + 1_000);
    await new Promise((resolve) => setTimeout(resolve, 20));
    p2.crashThreadForTest();
    const o = await hangingOutcome;
    expect(o.kind).toBe('retryable');
    expect(o.error).toBe('firing thread exited');
    expect((await stagedOutcome)?.kind).toBe('succeeded');
    expect(r.arrivals.map((a) => a.key)).toEqual([keyOf(hanging), keyOf(stagedD)]);
    expect(r.arrivals[1]!.arrivedAtMs).toBeGreaterThanOrEqual(stagedD.scheduledAtMs);
    (release as (() => void) | null)?.();
    // The port still sends after the crash.
    expect((await p2.send(delivery(s))).kind).toBe('succeeded');
  });
});
