/**
 * The time rules (policy.ts, docs/api.md "Misfire and overlap") on random histories: the pure state machine and
 * the leader's decision (dueAction) driven by a small simulated leader through outages (a restart, a failover or a
 * long GC pause: nothing fires, nothing applies), pauses and resumes, and slow receivers. Each rule is an
 * invariant checked on every history; the bugs of issue 13 are fixed histories at the end.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { limits } from '../core/limits.js';
import { apply } from './machine.js';
import { MemoryStore } from './memory-store.js';
import { dueAction, misfireThresholdOf } from './policy.js';
import type { JobSpec, MisfirePolicy, OverlapPolicy, TaskRecord } from './types.js';

const T0 = 1_800_000_000_000;

const task: TaskRecord = {
  name: 'hook',
  url: 'http://127.0.0.1:9/hook',
  method: 'POST',
  headers: {},
  timeoutMs: 1000,
  retry: { maxAttempts: 1, initialBackoffMs: 0, maxBackoffMs: 0, multiplier: 1, jitter: false },
  signingSecret: null,
  maxConcurrency: 100,
  createdAtMs: 0,
  updatedAtMs: 0,
};

interface Span {
  atMs: number;
  forMs: number;
}

interface History {
  everyMs: number;
  /** undefined: a job written before the field existed. */
  thresholdMs: number | undefined;
  misfire: MisfirePolicy;
  overlap: OverlapPolicy;
  /** Receiver durations, used in turn. */
  durationsMs: number[];
  /** Offsets from T0: the leader is down (nothing fires or applies). */
  outages: Span[];
  /** Offsets from T0: paused, then resumed. */
  pauses: Span[];
  horizonMs: number;
}

interface Delivery {
  scheduledAtMs: number;
  startedAtMs: number;
  endAtMs: number;
  released: boolean;
}

interface Trace {
  deliveries: Delivery[];
  skipped: Array<{ scheduledAtMs: number; atMs: number; reason: 'misfire' | 'overlap' }>;
  /** The job's threshold as stored. */
  thresholdMs: number;
}

/** Runs one job through the history as a leader would (src/node/engine.ts does the same with a real clock). */
function simulate(h: History): Trace {
  const store = new MemoryStore();
  apply(store, { type: 'put_task', nowMs: T0, task });
  const spec: JobSpec = {
    id: 'j',
    task: 'hook',
    callback: null,
    payload: new Uint8Array(0),
    payloadEncoding: 'json',
    schedule: { kind: 'every', everyMs: h.everyMs, startAtMs: null },
    endAtMs: null,
    maxRuns: 0,
    misfire: h.misfire,
    overlap: h.overlap,
    metadata: null,
    requestDigest: 'd',
    idempotencyKey: null,
  };
  if (h.thresholdMs !== undefined) spec.misfireThresholdMs = h.thresholdMs;
  apply(store, { type: 'create_jobs', nowMs: T0, shard: 0, jobs: [spec] });
  const job = () => store.getJob('j')!;
  const trace: Trace = { deliveries: [], skipped: [], thresholdMs: misfireThresholdOf(job()) };
  const inFlight: Delivery[] = [];
  const commands = h.pauses.flatMap((p) => [
    { atMs: T0 + p.atMs, type: 'pause_job' as const },
    { atMs: T0 + p.atMs + p.forMs, type: 'resume_job' as const },
  ]);
  const outages = h.outages.map((o) => ({ from: T0 + o.atMs, to: T0 + o.atMs + o.forMs }));
  let buffered: number | null = null;
  let turn = 0;

  const decide = (n: number, t: number, released: boolean) => {
    const action = dueAction(job(), n, t, inFlight.length > 0, released);
    if (action === 'buffer') {
      buffered = n;
    } else if (action === 'fire') {
      const d = { scheduledAtMs: n, startedAtMs: t, endAtMs: t + h.durationsMs[turn++ % h.durationsMs.length]!, released };
      inFlight.push(d);
      trace.deliveries.push(d);
      apply(store, { type: 'fired', nowMs: t, nodeId: 'n1', items: [{ jobId: 'j', scheduledAtMs: n, attempt: 1, startedAtMs: t }] });
    } else {
      const reason = action === 'skip_misfire' ? 'misfire' : 'overlap';
      trace.skipped.push({ scheduledAtMs: n, atMs: t, reason });
      apply(store, { type: 'skipped', nowMs: t, items: [{ jobId: 'j', scheduledAtMs: n, reason }] });
    }
  };

  const step = (t: number) => {
    for (const c of commands.filter((c) => c.atMs <= t)) {
      commands.splice(commands.indexOf(c), 1);
      apply(store, { type: c.type, nowMs: t, id: 'j' });
      buffered = null; // pause disarms; resume arms the pending occurrence again
    }
    inFlight.sort((a, b) => a.endAtMs - b.endAtMs);
    while (inFlight.length > 0 && inFlight[0]!.endAtMs <= t) {
      const d = inFlight.shift()!;
      const item = { jobId: 'j', scheduledAtMs: d.scheduledAtMs, attempt: 1, result: 'succeeded' as const, statusCode: 200, error: null, finishedAtMs: d.endAtMs, retryAtMs: null };
      const { effects } = apply(store, { type: 'outcomes', nowMs: t, items: [item] });
      if (effects.some((e) => e.type === 'finished') && buffered !== null) {
        const b: number = buffered;
        buffered = null;
        if (job().state !== 'PAUSED' && job().nextFireAtMs === b) decide(b, t, true);
      }
    }
    for (let i = 0; i < 10_000; i++) {
      const j = job();
      if (j.state === 'PAUSED' || j.nextFireAtMs === null || j.nextFireAtMs > t || j.nextFireAtMs === buffered) return;
      decide(j.nextFireAtMs, t, false);
    }
    throw new Error('the pending occurrence never moved');
  };

  const endMs = T0 + h.horizonMs;
  let t = T0;
  for (let guard = 0; guard < 100_000; guard++) {
    const j = job();
    const candidates = [endMs, ...inFlight.map((d) => d.endAtMs), ...commands.map((c) => c.atMs)];
    if (j.state !== 'PAUSED' && j.nextFireAtMs !== null && j.nextFireAtMs !== buffered) candidates.push(j.nextFireAtMs);
    let next = Math.max(t, Math.min(...candidates));
    const down = outages.find((o) => next >= o.from && next < o.to);
    if (down !== undefined) next = down.to;
    if (next >= endMs) return trace;
    t = next;
    step(t);
  }
  throw new Error('simulation did not end');
}

const lateness = (d: Delivery) => d.startedAtMs - d.scheduledAtMs;
const isOccurrence = (at: number, h: History) => at >= T0 && (at - T0) % h.everyMs === 0;
const covered = (at: number, spans: Span[]) => spans.some((s) => at >= T0 + s.atMs && at < T0 + s.atMs + s.forMs);

/** Outages and pauses as one list of gaps: an outage right after a pause is one longer gap. */
function mergedGaps(h: History): Span[] {
  const out: Span[] = [];
  for (const g of [...h.outages, ...h.pauses].sort((x, y) => x.atMs - y.atMs)) {
    const last = out[out.length - 1];
    if (last !== undefined && g.atMs <= last.atMs + last.forMs) last.forMs = Math.max(last.forMs, g.atMs + g.forMs - last.atMs);
    else out.push({ ...g });
  }
  return out;
}

/** Spans within [0, horizon), apart from each other. */
const spans = (horizonMs: number, maxCount: number, maxLengthMs: number) =>
  fc
    .array(fc.record({ atMs: fc.integer({ min: 1, max: horizonMs - 1 }), forMs: fc.integer({ min: 1, max: maxLengthMs }) }), { maxLength: maxCount })
    .map((list) => {
      const sorted = [...list].sort((a, b) => a.atMs - b.atMs);
      const out: Span[] = [];
      for (const s of sorted) {
        const last = out[out.length - 1];
        if (last === undefined || s.atMs > last.atMs + last.forMs) out.push(s);
      }
      return out;
    });

const horizonMs = 120_000;
const history = (over: { outages?: boolean; pauses?: boolean; overlap?: OverlapPolicy[]; misfire?: MisfirePolicy[]; gapMaxMs?: number } = {}) =>
  fc.record({
    everyMs: fc.constantFrom(500, 1000, 1500, 3000),
    thresholdMs: fc.option(fc.constantFrom(1000, 2000, 5000, 12_000), { nil: undefined }),
    misfire: fc.constantFrom(...(over.misfire ?? (['fire_once', 'skip', 'fire_all'] as const))),
    overlap: fc.constantFrom(...(over.overlap ?? (['allow', 'skip', 'buffer_one'] as const))),
    durationsMs: fc.array(fc.integer({ min: 1, max: 4000 }), { minLength: 1, maxLength: 8 }),
    outages: over.outages === false ? fc.constant<Span[]>([]) : spans(horizonMs, 4, over.gapMaxMs ?? 30_000),
    pauses: over.pauses === false ? fc.constant<Span[]>([]) : spans(horizonMs, 3, over.gapMaxMs ?? 20_000),
    horizonMs: fc.constant(horizonMs),
  });

const runs = { numRuns: 150 };

describe('every history: the rules that hold for every policy', () => {
  it('occurrences run in order, once, never early; no run overlaps another unless overlap is allow', () => {
    fc.assert(
      fc.property(history(), (h) => {
        const { deliveries } = simulate(h);
        for (const [i, d] of deliveries.entries()) {
          expect(isOccurrence(d.scheduledAtMs, h)).toBe(true);
          expect(lateness(d)).toBeGreaterThanOrEqual(0);
          const prev = deliveries[i - 1];
          if (prev === undefined) continue;
          expect(d.scheduledAtMs).toBeGreaterThan(prev.scheduledAtMs);
          if (h.overlap !== 'allow') expect(d.startedAtMs).toBeGreaterThanOrEqual(prev.endAtMs);
        }
      }),
      runs,
    );
  });

  it('the first run is at creation: every_ms without start_at', () => {
    fc.assert(
      fc.property(history({ outages: false, pauses: false }), (h) => {
        expect(simulate(h).deliveries[0]).toMatchObject({ scheduledAtMs: T0, startedAtMs: T0 });
      }),
      runs,
    );
  });
});

describe('misfire rules on random outages and pauses', () => {
  it('an occurrence within the threshold is not missed: with no gap longer than the threshold and overlap allow, every occurrence runs', () => {
    fc.assert(
      fc.property(history({ overlap: ['allow'], gapMaxMs: 6_000 }), (h) => {
        const trace = simulate(h);
        const short = mergedGaps(h).every((s) => s.forMs < trace.thresholdMs);
        fc.pre(short);
        const delivered = new Set(trace.deliveries.map((d) => d.scheduledAtMs));
        const last = trace.deliveries[trace.deliveries.length - 1]?.scheduledAtMs ?? T0;
        for (let at = T0; at <= last; at += h.everyMs) expect(delivered.has(at)).toBe(true);
      }),
      runs,
    );
  });

  it('fire_once and skip: once a missed occurrence is handled, nothing due by then runs afterwards', () => {
    fc.assert(
      fc.property(history({ misfire: ['fire_once', 'skip'] }), (h) => {
        const trace = simulate(h);
        const handled = [
          ...trace.deliveries.filter((d) => lateness(d) > trace.thresholdMs).map((d) => ({ atMs: d.startedAtMs, scheduledAtMs: d.scheduledAtMs })),
          ...trace.skipped.filter((s) => s.reason === 'misfire').map((s) => ({ atMs: s.atMs, scheduledAtMs: s.scheduledAtMs })),
        ];
        for (const m of handled) {
          for (const d of trace.deliveries) if (d.scheduledAtMs > m.scheduledAtMs) expect(d.scheduledAtMs).toBeGreaterThan(m.atMs);
        }
      }),
      runs,
    );
  });

  it('skip: no occurrence runs more than the threshold late (unless buffer_one held it behind a run)', () => {
    fc.assert(
      fc.property(history({ misfire: ['skip'] }), (h) => {
        const trace = simulate(h);
        for (const d of trace.deliveries) if (!d.released) expect(lateness(d)).toBeLessThanOrEqual(trace.thresholdMs);
      }),
      runs,
    );
  });

  it('fire_once: one catch-up run per outage or pause at most', () => {
    fc.assert(
      fc.property(history({ misfire: ['fire_once'], overlap: ['allow', 'skip'] }), (h) => {
        const trace = simulate(h);
        const catchUps = trace.deliveries.filter((d) => lateness(d) > trace.thresholdMs);
        expect(catchUps.length).toBeLessThanOrEqual(h.outages.length + h.pauses.length);
      }),
      runs,
    );
  });

  it('fire_all with overlap allow: every occurrence runs, none dropped (backlogs here are below the cap)', () => {
    fc.assert(
      fc.property(history({ misfire: ['fire_all'], overlap: ['allow'] }), (h) => {
        const { deliveries } = simulate(h);
        const last = deliveries[deliveries.length - 1]?.scheduledAtMs ?? T0;
        expect(deliveries.map((d) => d.scheduledAtMs)).toEqual(Array.from({ length: (last - T0) / h.everyMs + 1 }, (_, k) => T0 + k * h.everyMs));
        expect((last - T0) / h.everyMs + 1).toBeLessThan(limits.misfireFireAllMax);
      }),
      runs,
    );
  });

  it('a pause or an outage that misses nothing changes nothing: on-time runs outside gaps', () => {
    fc.assert(
      fc.property(history({ overlap: ['allow'] }), (h) => {
        const trace = simulate(h);
        for (const d of trace.deliveries) {
          if (!covered(d.scheduledAtMs, [...h.outages, ...h.pauses]) && lateness(d) > 0) {
            // Late only behind a gap: a replay (fire_all, or within the threshold) started right when it ended.
            expect([...h.outages, ...h.pauses].some((s) => T0 + s.atMs + s.forMs === d.startedAtMs)).toBe(true);
          }
        }
      }),
      runs,
    );
  });
});

describe('overlap rules on slow receivers', () => {
  const slow = (overlap: OverlapPolicy) => history({ outages: false, pauses: false, overlap: [overlap] });

  it('buffer_one: lateness never accumulates (at most the run it waited for); only occurrences due during a run are dropped', () => {
    fc.assert(
      fc.property(slow('buffer_one'), (h) => {
        const trace = simulate(h);
        const longestMs = Math.max(...h.durationsMs);
        for (const d of trace.deliveries) expect(lateness(d)).toBeLessThanOrEqual(longestMs);
        const delivered = new Set(trace.deliveries.map((d) => d.scheduledAtMs));
        const lastStart = trace.deliveries[trace.deliveries.length - 1]!.startedAtMs;
        for (let at = T0; at <= lastStart; at += h.everyMs) {
          if (delivered.has(at)) continue;
          // Dropped: it came due while a run was in flight, and was not the one buffered.
          expect(trace.deliveries.some((d) => d.startedAtMs < at && at <= d.endAtMs)).toBe(true);
        }
      }),
      runs,
    );
  });

  it('skip: occurrences due while a run is in flight are skipped, the others run on time', () => {
    fc.assert(
      fc.property(slow('skip'), (h) => {
        const trace = simulate(h);
        for (const d of trace.deliveries) expect(lateness(d)).toBe(0);
        for (const s of trace.skipped) {
          expect(s.reason).toBe('overlap');
          expect(trace.deliveries.some((d) => d.startedAtMs < s.scheduledAtMs && s.scheduledAtMs < d.endAtMs)).toBe(true);
        }
      }),
      runs,
    );
  });

  it('allow: every occurrence runs on time, whatever the receiver', () => {
    fc.assert(
      fc.property(slow('allow'), (h) => {
        const { deliveries } = simulate(h);
        deliveries.forEach((d, k) => expect(d).toMatchObject({ scheduledAtMs: T0 + k * h.everyMs, startedAtMs: T0 + k * h.everyMs }));
      }),
      runs,
    );
  });
});

describe('the histories of issue 13', () => {
  const base: History = {
    everyMs: 1000,
    thresholdMs: undefined,
    misfire: 'fire_once',
    overlap: 'allow',
    durationsMs: [10],
    outages: [],
    pauses: [],
    horizonMs: 40_000,
  };
  const within = (trace: Trace, fromMs: number, toMs: number) =>
    trace.deliveries.filter((d) => d.startedAtMs >= T0 + fromMs && d.startedAtMs < T0 + toMs);

  it('fire_once after a 20 s stop: one catch-up, then the next future occurrence', () => {
    const trace = simulate({ ...base, outages: [{ atMs: 5_500, forMs: 20_000 }] });
    const atRestart = within(trace, 25_500, 25_501);
    expect(atRestart.map((d) => d.scheduledAtMs)).toEqual([T0 + 6_000]);
    expect(within(trace, 25_501, 27_000).map((d) => d.scheduledAtMs)).toEqual([T0 + 26_000]);
  });

  it('skip after a 20 s stop: none of the occurrences due during the stop run', () => {
    const trace = simulate({ ...base, misfire: 'skip', outages: [{ atMs: 5_500, forMs: 20_000 }] });
    expect(trace.deliveries.filter((d) => d.scheduledAtMs > T0 + 5_500 && d.scheduledAtMs <= T0 + 25_500)).toEqual([]);
    expect(within(trace, 25_500, 27_000).map((d) => d.scheduledAtMs)).toEqual([T0 + 26_000]);
  });

  it('resume after a 5.5 s pause (fire_once): one catch-up run, no burst', () => {
    const trace = simulate({ ...base, pauses: [{ atMs: 999, forMs: 5_500 }] });
    expect(within(trace, 6_499, 6_500).map((d) => d.scheduledAtMs)).toEqual([T0 + 1_000]);
    expect(within(trace, 6_500, 7_500).map((d) => d.scheduledAtMs)).toEqual([T0 + 7_000]);
  });

  it('buffer_one, every 1 s, receiver taking 2.5 s: lateness stays at most 2.5 s', () => {
    const trace = simulate({ ...base, overlap: 'buffer_one', durationsMs: [2_500] });
    expect(trace.deliveries.length).toBeGreaterThan(10);
    for (const d of trace.deliveries) expect(lateness(d)).toBeLessThanOrEqual(2_500);
  });

  it('PATCH changes the threshold of a stored job', () => {
    const store = new MemoryStore();
    apply(store, { type: 'put_task', nowMs: T0, task });
    const spec: JobSpec = {
      id: 'p', task: 'hook', callback: null, payload: new Uint8Array(0), payloadEncoding: 'json',
      schedule: { kind: 'every', everyMs: 1000, startAtMs: null }, endAtMs: null, maxRuns: 0, misfire: 'skip',
      overlap: 'allow', metadata: null, requestDigest: 'd', idempotencyKey: null,
    }; // prettier-ignore
    apply(store, { type: 'create_jobs', nowMs: T0, shard: 0, jobs: [spec] });
    expect(misfireThresholdOf(store.getJob('p')!)).toBe(5_000);
    expect(dueAction(store.getJob('p')!, T0, T0 + 8_000, false)).toBe('skip_misfire');
    apply(store, { type: 'patch_job', nowMs: T0 + 1, id: 'p', patch: { misfireThresholdMs: 10_000 } });
    expect(store.getJob('p')!.misfireThresholdMs).toBe(10_000);
    expect(dueAction(store.getJob('p')!, T0, T0 + 8_000, false)).toBe('fire');
  });

  it('the threshold is the job\'s: a 10 s outage is within 12 s, missed with 2 s', () => {
    const outage = [{ atMs: 5_500, forMs: 10_000 }];
    const lenient = simulate({ ...base, thresholdMs: 12_000, outages: outage });
    expect(within(lenient, 15_500, 15_501)).toHaveLength(10); // 6 s .. 15 s, late but not missed
    const strict = simulate({ ...base, thresholdMs: 2_000, outages: outage });
    expect(within(strict, 15_500, 15_501)).toHaveLength(1);
  });
});
