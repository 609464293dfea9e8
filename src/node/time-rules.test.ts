/**
 * The time rules of docs/api.md ("Misfire and overlap") on a real node with a real receiver: the misfire policies
 * after a restart (a node closed, its clock moved 20 s on, opened again on the same directory), and buffer_one
 * with a receiver slower than the schedule.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../core/clock.js';
import { parseJob } from '../http/parse-job.js';
import type { ExecutionRecord, JobSpec } from '../scheduler/types.js';
import type { OpenNode } from './host.js';
import { callbackSpec, jobSpec, nodeConfig } from './testing/fixtures.js';
import { useNodeBed } from './testing/bed.js';
import { waitFor } from './testing/receiver.js';

const bed = useNodeBed('punctual-time-', { closeGraceMs: 2_000 });

async function create(core: OpenNode, specs: JobSpec[]): Promise<void> {
  for (const r of await core.service.createJobs(specs)) if (!r.ok) throw r.error;
}

const scheduledAt = (id: string): number[] => bed.rx.of(id).map((r) => Number(r.headers['x-punctual-scheduled-at']));

describe('first runs', () => {
  it('every_ms without start_at runs first at creation even when the clock moves between parsing and stamping', async () => {
    const t = Date.now();
    const clock = new ManualClock(t);
    const core = await bed.startCore(nodeConfig(bed.dir), { clock });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const specs = Array.from({ length: 6 }, (_, i) =>
      parseJob({ id: `e${i}`, task: 'hook', schedule: { every_ms: 3_600_000 } }, '', { nowMs: clock.nowMs(), idempotencyKey: null, batchIndex: null }),
    );
    clock.advance(1); // the request was parsed; its command is stamped a millisecond later
    const results = await core.service.createJobs(specs);
    for (const r of results) {
      if (!r.ok) throw r.error;
      expect(r.job.createdAtMs).toBe(t + 1);
      expect(r.job.nextFireAtMs).toBe(t + 1);
    }
    await waitFor('all six ran at creation', () => specs.every((s) => scheduledAt(s.id).length === 1));
    for (const s of specs) expect(scheduledAt(s.id)).toEqual([t + 1]);
  });
});

describe('misfire after a restart', () => {
  it('20 s down: fire_once sends one catch-up, skip none, fire_all each; a job whose threshold covers the stop runs each, late', async () => {
    const t = Date.now();
    const clock = new ManualClock(t);
    const config = nodeConfig(bed.dir);
    let core = await bed.startCore(config, { clock });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const every = { kind: 'every' as const, everyMs: 1_000, startAtMs: t + 1_000 };
    await create(core, [
      jobSpec('once', every, { misfire: 'fire_once' }),
      jobSpec('skip', every, { misfire: 'skip' }),
      jobSpec('all', every, { misfire: 'fire_all' }),
      jobSpec('patient', every, { misfire: 'fire_once', misfireThresholdMs: 30_000 }),
    ]);
    await bed.stop(core);

    // Down while the occurrences of t+1 s .. t+20 s came due; back at t+20.5 s.
    clock.set(t + 20_500);
    core = await bed.startCore(config, { clock });
    const upTo20 = Array.from({ length: 20 }, (_, k) => t + 1_000 * (k + 1));
    await waitFor('fire_all replayed, patient caught up', () => bed.rx.of('all').length === 20 && bed.rx.of('patient').length === 20);
    await waitFor('every job moved on to the next future occurrence', async () => {
      const jobs = await Promise.all(['once', 'skip', 'all', 'patient'].map((id) => core.service.getJob(id)));
      return jobs.every((j) => j.nextFireAtMs === t + 21_000);
    });
    expect(scheduledAt('once')).toEqual([t + 1_000]);
    expect(scheduledAt('skip')).toEqual([]);
    expect(scheduledAt('all')).toEqual(upTo20);
    expect(scheduledAt('patient')).toEqual(upTo20);
    expect((await core.service.getJob('patient')).misfireThresholdMs).toBe(30_000);
  });
});

describe('overlap buffer_one with a slow receiver', () => {
  it('holds one occurrence while a run is in flight, drops the rest, and continues from the next future one', async () => {
    const core = await bed.startCore(nodeConfig(bed.dir));
    bed.rx.respond = () => ({ status: 200, delayMs: 700 });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/slow')));
    const now = core.service.nowMs();
    await create(core, [jobSpec('buf', { kind: 'every', everyMs: 250, startAtMs: now + 100 }, { overlap: 'buffer_one' })]);
    const finished = async (): Promise<ExecutionRecord[]> =>
      (await core.service.listExecutions('buf', { limit: 100, cursor: null })).executions.filter((e) => e.state === 'SUCCEEDED');
    await waitFor('five runs finished', async () => (await finished()).length >= 5, 15_000);
    await core.service.cancelJob('buf');
    const runs = (await finished()).sort((a, b) => a.scheduledAtMs - b.scheduledAtMs);
    for (let k = 1; k < runs.length; k++) {
      const prev = runs[k - 1]!;
      const run = runs[k]!;
      // One run at a time: each starts once the one before it finished.
      expect(run.startedAtMs!).toBeGreaterThanOrEqual(prev.finishedAtMs!);
      // No replay of what came due meanwhile: the next run is an occurrence due after the previous one started.
      expect(run.scheduledAtMs).toBeGreaterThan(prev.startedAtMs!);
    }
  });
});
