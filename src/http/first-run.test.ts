/**
 * First runs (docs/api.md, "First runs"): a request is parsed at one clock reading and its command stamped at
 * another (later, or earlier after a clock step). The first occurrence is computed from the stamped instant only:
 * `every_ms` alone runs first at creation, a `start_at` at or after it is the first run exactly, a cron's first run
 * is its first match at or after it.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { apply } from '../scheduler/machine.js';
import { MemoryStore } from '../scheduler/memory-store.js';
import type { JobRecord } from '../scheduler/types.js';
import { parseJob, parsePatch } from './parse-job.js';
import { renderTime } from './time.js';

const base = Date.UTC(2027, 0, 4, 9, 0, 0);

/** Parses `body` at parsedAtMs, applies its create_jobs stamped at stampedAtMs; the stored job. */
function createAcross(body: Record<string, unknown>, parsedAtMs: number, stampedAtMs: number): JobRecord {
  const spec = parseJob({ callback: { url: 'http://127.0.0.1:9/hook' }, ...body }, '', { nowMs: parsedAtMs, idempotencyKey: null, batchIndex: null });
  const store = new MemoryStore();
  const { result } = apply(store, { type: 'create_jobs', nowMs: stampedAtMs, shard: 0, jobs: [spec] });
  if (result.type !== 'create_jobs' || !result.items[0]!.ok) throw new Error(`create failed: ${JSON.stringify(result)}`);
  return store.getJob(spec.id)!;
}

const instants = fc.record({
  parsedAtMs: fc.integer({ min: base, max: base + 86_400_000 }),
  /** The clock between parsing and stamping: usually forward a few ms, sometimes a step either way. */
  stepMs: fc.oneof(fc.integer({ min: 0, max: 5 }), fc.integer({ min: -60_000, max: 60_000 })),
});

describe('the first occurrence is computed from the instant the command is stamped with', () => {
  it('every_ms without start_at: the first run is the creation instant, always', () => {
    fc.assert(
      fc.property(instants, fc.integer({ min: 10, max: 3_600_000 }), ({ parsedAtMs, stepMs }, everyMs) => {
        const stampedAtMs = parsedAtMs + stepMs;
        const job = createAcross({ schedule: { every_ms: everyMs } }, parsedAtMs, stampedAtMs);
        expect(job.nextFireAtMs).toBe(stampedAtMs);
        expect(job.createdAtMs).toBe(stampedAtMs);
        expect(job.schedule).toEqual({ kind: 'every', everyMs, startAtMs: stampedAtMs });
      }),
      { numRuns: 300 },
    );
  });

  it('every_ms with a start_at at or after the stamped instant: exactly start_at', () => {
    fc.assert(
      fc.property(instants, fc.integer({ min: 0, max: 86_400_000 }), ({ parsedAtMs, stepMs }, aheadMs) => {
        const stampedAtMs = parsedAtMs + stepMs;
        const startAtMs = stampedAtMs + aheadMs;
        const job = createAcross({ schedule: { every_ms: 5000, start_at: renderTime(startAtMs) } }, parsedAtMs, stampedAtMs);
        expect(job.nextFireAtMs).toBe(startAtMs);
      }),
      { numRuns: 200 },
    );
  });

  it('every_ms with a start_at in the past: the first occurrence of its grid at or after the stamped instant', () => {
    fc.assert(
      fc.property(instants, fc.integer({ min: 1, max: 86_400_000 }), ({ parsedAtMs, stepMs }, agoMs) => {
        const stampedAtMs = parsedAtMs + stepMs;
        const startAtMs = stampedAtMs - agoMs;
        const job = createAcross({ schedule: { every_ms: 7000, start_at: renderTime(startAtMs) } }, parsedAtMs, stampedAtMs);
        expect(job.nextFireAtMs).toBe(startAtMs + Math.ceil(agoMs / 7000) * 7000);
      }),
      { numRuns: 200 },
    );
  });

  it('cron: the first match at or after the stamped instant (a match at that very instant counts)', () => {
    const grids: Array<[string, number]> = [['*/5 * * * * *', 5000], ['* * * * *', 60_000], ['0 * * * *', 3_600_000]];
    fc.assert(
      fc.property(instants, fc.constantFrom(...grids), fc.boolean(), ({ parsedAtMs, stepMs }, [cron, gridMs], onMatch) => {
        const raw = parsedAtMs + stepMs;
        const stampedAtMs = onMatch ? raw - (raw % gridMs) : raw;
        const job = createAcross({ schedule: { cron } }, parsedAtMs, stampedAtMs);
        expect(job.nextFireAtMs).toBe(Math.ceil(stampedAtMs / gridMs) * gridMs);
      }),
      { numRuns: 200 },
    );
  });

  it('PATCH to every_ms without start_at: runs first at the patch instant', () => {
    const parsedAtMs = base;
    const store = new MemoryStore();
    const spec = parseJob({ id: 'p', callback: { url: 'http://127.0.0.1:9/hook' }, schedule: { every_ms: 60_000 } }, '', { nowMs: parsedAtMs, idempotencyKey: null, batchIndex: null });
    apply(store, { type: 'create_jobs', nowMs: parsedAtMs, shard: 0, jobs: [spec] });
    const patch = parsePatch({ schedule: { every_ms: 30_000 } }, parsedAtMs + 1000);
    apply(store, { type: 'patch_job', nowMs: parsedAtMs + 1001, id: 'p', patch });
    expect(store.getJob('p')).toMatchObject({ nextFireAtMs: parsedAtMs + 1001, schedule: { startAtMs: parsedAtMs + 1001 } });
  });

  it('one millisecond between parsing and stamping no longer moves the first run by a whole interval', () => {
    const job = createAcross({ schedule: { every_ms: 3_600_000 } }, base, base + 1);
    expect(job.nextFireAtMs).toBe(base + 1);
  });
});
