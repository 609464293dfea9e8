/** The scheduler checker on its own: each invariant fires on a hand-made violation and stays quiet otherwise. */
import { describe, expect, it } from 'vitest';
import { MemoryStore } from '../../../src/scheduler/memory-store.js';
import { apply } from '../../../src/scheduler/machine.js';
import { SimViolation } from '../checker.js';
import type { DispatchStart } from './invariants.js';
import { DigestStore } from './digest-store.js';
import { decodeImage, encodeImage } from './image.js';
import { SchedulerChecker, allJobs, storeDigest } from './invariants.js';
import type { OpRecord } from './workload.js';
import { jobSpecOf } from './workload.js';

function kindOf(f: () => void): string | null {
  try {
    f();
    return null;
  } catch (err) {
    return err instanceof SimViolation ? err.kind : `other: ${String(err)}`;
  }
}

const t0 = 1_800_000_000_000;

function start(over: Partial<DispatchStart> = {}): DispatchStart {
  const jobId = over.jobId ?? 'j1';
  const scheduledAtMs = over.scheduledAtMs ?? t0;
  return {
    node: 'n1', shard: 0, key: `${jobId}\n${scheduledAtMs}`, jobId, scheduledAtMs, attempt: 1, fencingToken: '0.3',
    dueAtMs: scheduledAtMs, dedupKey: `${jobId}:${scheduledAtMs}`, nodeWallMs: scheduledAtMs, trueMs: scheduledAtMs, ...over,
  };
}

function acked(kind: 'create' | 'cancel', jobId: string, ackMs: number): OpRecord {
  const op = kind === 'create'
    ? { kind, jobId, schedule: { kind: 'now' as const }, receiver: 0, timeoutMs: 1000, maxAttempts: 1, maxRuns: 0, misfire: 'skip' as const, overlap: 'allow' as const }
    : { kind, jobId };
  return { seq: 0, op, node: 'n1', issuedMs: ackMs - 5, outcome: 'ok', ackMs };
}

/** An acknowledged job 'j1' every second from t0 + 1 s with overlap=buffer_one, and a checker that knows it. */
function bufferOneJob(over: { maxAttempts?: number; timeoutMs?: number }): { store: MemoryStore; c: SchedulerChecker } {
  const store = new MemoryStore();
  const op = { ...(acked('create', 'j1', t0).op as Parameters<typeof jobSpecOf>[0]), ...over };
  const spec = { ...jobSpecOf(op, t0), schedule: { kind: 'every' as const, everyMs: 1000, startAtMs: t0 + 1000 }, overlap: 'buffer_one' as const };
  apply(store, { type: 'create_jobs', nowMs: t0, shard: 0, jobs: [spec] });
  const c = new SchedulerChecker(1);
  c.submittedJob('j1');
  c.acknowledged(acked('create', 'j1', t0));
  return { store, c };
}

describe('SchedulerChecker', () => {
  it('an attempt for a job no client submitted', () => {
    const c = new SchedulerChecker(1);
    expect(kindOf(() => c.dispatchStarted(start()))).toBe('unknown_occurrence');
    c.submittedJob('j1');
    expect(kindOf(() => c.dispatchStarted(start()))).toBeNull();
  });

  it('ordered before its time: beyond the stage lead of its due time, or a first attempt before its scheduled time', () => {
    const c = new SchedulerChecker(1);
    c.submittedJob('j1');
    const o = { node: 'n1', key: `j1\n${t0}`, jobId: 'j1', scheduledAtMs: t0, attempt: 1, dueAtMs: t0 };
    expect(kindOf(() => c.ordered({ ...o, nodeWallMs: t0 - 1 }, 0))).toBe('fired_early');
    expect(kindOf(() => c.ordered({ ...o, nodeWallMs: t0 }, 0))).toBeNull();
    // Staged: handed out up to the lead before its due time, never further.
    expect(kindOf(() => c.ordered({ ...o, nodeWallMs: t0 - 100 }, 100))).toBeNull();
    expect(kindOf(() => c.ordered({ ...o, nodeWallMs: t0 - 101 }, 100))).toBe('fired_early');
    expect(kindOf(() => c.ordered({ ...o, dueAtMs: t0 - 50, nodeWallMs: t0 - 150 }, 100))).toBe('fired_early');
    c.dispatchStarted(start());
    // A later attempt on a node whose clock is behind: held to its own due time only.
    expect(kindOf(() => c.ordered({ ...o, attempt: 2, dueAtMs: t0 - 500, nodeWallMs: t0 - 400 }, 0))).toBeNull();
    expect(kindOf(() => c.ordered({ ...o, attempt: 2, dueAtMs: t0 + 500, nodeWallMs: t0 + 400 }, 0))).toBe('fired_early');
  });

  it('handed to the dispatcher before its time: before its due time, or a first attempt before its scheduled time', () => {
    const c = new SchedulerChecker(1);
    c.submittedJob('j1');
    const o = { node: 'n1', key: `j1\n${t0}`, jobId: 'j1', scheduledAtMs: t0, attempt: 1, dueAtMs: t0 };
    expect(kindOf(() => c.sendable({ ...o, nodeWallMs: t0 - 1 }))).toBe('fired_early');
    expect(kindOf(() => c.sendable({ ...o, dueAtMs: t0 - 10, nodeWallMs: t0 - 5 }))).toBe('fired_early');
    expect(kindOf(() => c.sendable({ ...o, nodeWallMs: t0 }))).toBeNull();
    c.dispatchStarted(start());
    // A later attempt follows the first one's start: held to its own due time, even on a clock behind.
    expect(kindOf(() => c.sendable({ ...o, attempt: 2, dueAtMs: t0 - 500, nodeWallMs: t0 - 400 }))).toBeNull();
    expect(kindOf(() => c.sendable({ ...o, attempt: 3, dueAtMs: t0 + 500, nodeWallMs: t0 + 400 }))).toBe('fired_early');
  });

  it('an attempt started after an acknowledged cancel (one started before it is fine)', () => {
    const c = new SchedulerChecker(1);
    c.submittedJob('j1');
    c.acknowledged(acked('cancel', 'j1', t0 + 100));
    expect(kindOf(() => c.dispatchStarted(start({ trueMs: t0 + 99 })))).toBeNull();
    expect(kindOf(() => c.dispatchStarted(start({ attempt: 2, trueMs: t0 + 101 })))).toBe('fired_after_cancel');
  });

  it('fencing tokens of one occurrence never go down; other occurrences are independent', () => {
    const c = new SchedulerChecker(1);
    c.submittedJob('j1');
    c.dispatchStarted(start({ fencingToken: '0.5' }));
    c.dispatchStarted(start({ attempt: 2, fencingToken: '0.5' }));
    c.dispatchStarted(start({ scheduledAtMs: t0 + 1000, fencingToken: '0.4' }));
    expect(kindOf(() => c.dispatchStarted(start({ attempt: 3, fencingToken: '0.4' })))).toBe('fencing_token_decreased');
    expect(kindOf(() => c.dispatchStarted(start({ attempt: 3, fencingToken: '1.9' })))).toBe('fencing_token_decreased');
  });

  it('one deduplication key for every attempt of an occurrence', () => {
    const c = new SchedulerChecker(1);
    c.submittedJob('j1');
    c.dispatchStarted(start());
    expect(kindOf(() => c.dispatchStarted(start({ attempt: 2, dedupKey: `j1:${t0 + 1}` })))).toBe('dedup_key_changed');
  });

  it('replicas at the same applied index with another state', () => {
    const c = new SchedulerChecker(2);
    c.appliedState(0, 'n1', 64, 'aa');
    c.appliedState(0, 'n2', 64, 'aa');
    c.appliedState(1, 'n2', 64, 'bb');
    expect(kindOf(() => c.appliedState(0, 'n3', 64, 'ab'))).toBe('replicas_diverge');
  });

  it('final checks: acknowledged job and cancel lost, replicas differ, an occurrence left overdue', () => {
    const create = (store: MemoryStore, id: string, atMs: number): void => {
      const op = acked('create', id, atMs).op as Parameters<typeof jobSpecOf>[0];
      apply(store, { type: 'create_jobs', nowMs: atMs, shard: 0, jobs: [{ ...jobSpecOf(op, atMs), schedule: { kind: 'once', atMs } }] });
    };
    const a = new MemoryStore();
    const b = new MemoryStore();
    create(a, 'j1', t0);
    create(b, 'j1', t0);
    const c = new SchedulerChecker(1);
    c.acknowledged(acked('create', 'j1', t0));
    c.acknowledged(acked('create', 'j2', t0));
    const nodes = [{ id: 'n1', stores: [a] }, { id: 'n2', stores: [b] }];
    expect(kindOf(() => c.checkFinal(nodes, t0 + 1000, 5000, t0))).toBe('acked_job_lost');
    create(a, 'j2', t0 + 10_000);
    expect(kindOf(() => c.checkFinal(nodes, t0 + 20_000, 5000, t0))).toBe('replicas_diverge');
    create(b, 'j2', t0 + 10_000);
    // j1 (due at t0) and j2 (due at t0 + 10 s) never fired: overdue 20 s later.
    expect(kindOf(() => c.checkFinal(nodes, t0 + 20_000, 5000, t0))).toBe('not_fired_in_time');
    apply(a, { type: 'cancel_job', nowMs: t0 + 1, id: 'j1' });
    apply(b, { type: 'cancel_job', nowMs: t0 + 1, id: 'j1' });
    c.acknowledged(acked('cancel', 'j1', t0 + 2));
    // Within the bound: j2 is due 4 s before the end, the bound is 5 s.
    expect(kindOf(() => c.checkFinal(nodes, t0 + 14_000, 5000, t0))).toBeNull();
    c.acknowledged(acked('cancel', 'j2', t0 + 3));
    expect(kindOf(() => c.checkFinal(nodes, t0 + 14_000, 5000, t0))).toBe('acked_cancel_lost');
  });

  it("lateness counts from the resume when a client's pause held the occurrence, not from a pause that came late", () => {
    const late = (pauseAtMs: number): string | null => {
      const store = new MemoryStore();
      const op = acked('create', 'j1', t0).op as Parameters<typeof jobSpecOf>[0];
      apply(store, { type: 'create_jobs', nowMs: t0, shard: 0, jobs: [{ ...jobSpecOf(op, t0), schedule: { kind: 'once', atMs: t0 + 1000 } }] });
      const firstMs = t0 + 9010;
      apply(store, { type: 'fired', nowMs: firstMs, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: t0 + 1000, attempt: 1, startedAtMs: firstMs }] });
      const c = new SchedulerChecker(1);
      c.submittedJob('j1');
      c.acknowledged(acked('create', 'j1', t0));
      const pause: OpRecord = { seq: 1, op: { kind: 'pause', jobId: 'j1' }, node: 'n1', issuedMs: pauseAtMs, outcome: 'ok', ackMs: pauseAtMs + 3 };
      const resume: OpRecord = { seq: 2, op: { kind: 'resume', jobId: 'j1' }, node: 'n1', issuedMs: t0 + 8995, outcome: 'ok', ackMs: t0 + 9000 };
      c.opIssued(pause, 5000);
      c.opIssued(resume, 5000);
      c.dispatchStarted(start({ scheduledAtMs: t0 + 1000, dueAtMs: t0 + 1000, nodeWallMs: firstMs, trueMs: firstMs }));
      return kindOf(() => c.checkFinal([{ id: 'n1', stores: [store] }], t0 + 15_000, 5000, t0 - 1));
    };
    // Paused before its time and resumed at t0 + 9 s: fired 10 ms after the resume, on time.
    expect(late(t0 + 500)).toBeNull();
    // A pause sent once the occurrence was already late (due t0 + 1 s, bound 5 s) excuses nothing.
    expect(late(t0 + 7000)).toBe('not_fired_in_time');
  });

  it('overlap=buffer_one: lateness counts from the end of the run before, capped by its true start plus the timeout', () => {
    const late = (finishedAtMs: number, nextStartMs: number): string | null => {
      const { store, c } = bufferOneJob({ maxAttempts: 2 });
      const a = t0 + 1000;
      const b = t0 + 2000;
      // The run at a fails once, its retry starts at t0 + 8 s and ends at finishedAtMs (its node's clock).
      apply(store, { type: 'fired', nowMs: a, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: a, attempt: 1, startedAtMs: a }] });
      c.dispatchStarted(start({ scheduledAtMs: a }));
      apply(store, { type: 'outcomes', nowMs: a + 10, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: a, attempt: 1, result: 'retry', statusCode: 503, error: 'HTTP 503', finishedAtMs: a + 10, retryAtMs: t0 + 8000 }] });
      apply(store, { type: 'fired', nowMs: t0 + 8000, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: a, attempt: 2, startedAtMs: t0 + 8000 }] });
      c.dispatchStarted(start({ scheduledAtMs: a, attempt: 2, dueAtMs: t0 + 8000, nodeWallMs: t0 + 8000, trueMs: t0 + 8000 }));
      apply(store, { type: 'outcomes', nowMs: finishedAtMs, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: a, attempt: 2, result: 'succeeded', statusCode: 200, error: null, finishedAtMs, retryAtMs: null }] });
      // The occurrence at b waited (buffered) for that run.
      apply(store, { type: 'fired', nowMs: nextStartMs, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: b, attempt: 1, startedAtMs: nextStartMs }] });
      c.dispatchStarted(start({ scheduledAtMs: b, nodeWallMs: nextStartMs, trueMs: nextStartMs }));
      return kindOf(() => c.checkFinal([{ id: 'n1', stores: [store] }], nextStartMs + 100, 5000, t0 - 1));
    };
    // Released 10 ms after the run before ended: on time, though 6 s after its own time.
    expect(late(t0 + 8020, t0 + 8030)).toBeNull();
    // A finish its node's clock (jumped ahead) put at t0 + 16 s excuses only up to the retry's start plus its
    // timeout (t0 + 9 s): 7 s late.
    expect(late(t0 + 16_000, t0 + 16_010)).toBe('not_fired_in_time');
  });

  it('overlap=buffer_one: a run scheduled after the occurrence (a clock ahead) but started before it was late also holds it', () => {
    const late = (runStartMs: number, runEndMs: number): string | null => {
      const { store, c } = bufferOneJob({ timeoutMs: 10_000 });
      // A manual run through a node whose wall clock is 20 s ahead: its time is after the occurrence at b.
      const r = t0 + 20_000 + runStartMs - t0;
      apply(store, { type: 'run_job', nowMs: r, id: 'j1' });
      apply(store, { type: 'fired', nowMs: r, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: r, attempt: 1, startedAtMs: r }] });
      c.dispatchStarted(start({ scheduledAtMs: r, nodeWallMs: r, trueMs: runStartMs }));
      apply(store, { type: 'outcomes', nowMs: r + runEndMs - runStartMs, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: r, attempt: 1, result: 'succeeded', statusCode: 200, error: null, finishedAtMs: runEndMs, retryAtMs: null }] });
      // The occurrence at b (due t0 + 1 s) waited (buffered) for that run and went 10 ms after it ended.
      const b = t0 + 1000;
      apply(store, { type: 'fired', nowMs: runEndMs + 10, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: b, attempt: 1, startedAtMs: runEndMs + 10 }] });
      c.dispatchStarted(start({ scheduledAtMs: b, nodeWallMs: runEndMs + 10, trueMs: runEndMs + 10 }));
      return kindOf(() => c.checkFinal([{ id: 'n1', stores: [store] }], runEndMs + 100, 5000, t0 - 1));
    };
    // The run started at t0 + 0.5 s, before b was due, and ran 8 s (within its 10 s timeout): b on time.
    expect(late(t0 + 500, t0 + 8500)).toBeNull();
    // A run started after b should already have gone (due + bound = t0 + 6 s) excuses nothing.
    expect(late(t0 + 6500, t0 + 14_500)).toBe('not_fired_in_time');
  });

  it('overlap=buffer_one: an occurrence still pending behind a run whose retry a clock ahead timed late is held until that run ends', () => {
    const { store, c } = bufferOneJob({ maxAttempts: 2 });
    const a = t0 + 1000;
    const b = t0 + 2000;
    const final = (endWallMs: number): string | null => kindOf(() => c.checkFinal([{ id: 'n1', stores: [store] }], endWallMs, 5000, t0 - 1));
    // The run at a fails once; its node's wall clock, 18 s ahead, timed the retry at t0 + 20 s. b waits behind it.
    apply(store, { type: 'fired', nowMs: a, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: a, attempt: 1, startedAtMs: a }] });
    c.dispatchStarted(start({ scheduledAtMs: a }));
    apply(store, { type: 'outcomes', nowMs: a + 10, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: a, attempt: 1, result: 'retry', statusCode: 503, error: 'HTTP 503', finishedAtMs: a + 10, retryAtMs: t0 + 20_000 }] });
    expect(store.getJob('j1')!.nextFireAtMs).toBe(b);
    // 13 s past b, but the run before it is open and its retry not due yet: held, not late.
    expect(final(t0 + 15_000)).toBeNull();
    // The retry itself overdue is still a violation.
    expect(final(t0 + 26_000)).toBe('not_fired_in_time');
    // The retry ran at t0 + 20 s and ended: b counts from that end.
    apply(store, { type: 'fired', nowMs: t0 + 20_000, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: a, attempt: 2, startedAtMs: t0 + 20_000 }] });
    c.dispatchStarted(start({ scheduledAtMs: a, attempt: 2, dueAtMs: t0 + 20_000, nodeWallMs: t0 + 20_000, trueMs: t0 + 20_000 }));
    apply(store, { type: 'outcomes', nowMs: t0 + 20_010, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: a, attempt: 2, result: 'succeeded', statusCode: 200, error: null, finishedAtMs: t0 + 20_010, retryAtMs: null }] });
    expect(final(t0 + 24_000)).toBeNull();
    expect(final(t0 + 26_000)).toBe('not_fired_in_time');
  });

  it('overlap=buffer_one: a run still open holds a pending occurrence only if it started before the occurrence was late', () => {
    const pending = (runStartMs: number): string | null => {
      const { store, c } = bufferOneJob({ timeoutMs: 10_000 });
      // A manual run (its time after the occurrence at t0 + 1 s, due by t0 + 6 s), still out at the end.
      apply(store, { type: 'run_job', nowMs: runStartMs, id: 'j1' });
      apply(store, { type: 'fired', nowMs: runStartMs, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: runStartMs, attempt: 1, startedAtMs: runStartMs }] });
      c.dispatchStarted(start({ scheduledAtMs: runStartMs, nodeWallMs: runStartMs, trueMs: runStartMs }));
      return kindOf(() => c.checkFinal([{ id: 'n1', stores: [store] }], t0 + 12_000, 5000, t0 - 1));
    };
    expect(pending(t0 + 3000)).toBeNull();
    expect(pending(t0 + 6500)).toBe('not_fired_in_time');
  });

  it('storeDigest sees every record', () => {
    const a = new MemoryStore();
    const h0 = storeDigest(a);
    const op = acked('create', 'j1', t0).op as Parameters<typeof jobSpecOf>[0];
    apply(a, { type: 'create_jobs', nowMs: t0, shard: 0, jobs: [jobSpecOf(op, t0)] });
    const h1 = storeDigest(a);
    expect(h1).not.toBe(h0);
    apply(a, { type: 'run_job', nowMs: t0 + 5, id: 'j1' });
    expect(storeDigest(a)).not.toBe(h1);
  });

  it('a DigestStore keeps the digest storeDigest reads, through writes, overwrites and deletions', () => {
    const d = new DigestStore();
    const seen = new Set([d.digest()]);
    const same = (): void => {
      expect(d.digest()).toBe(storeDigest(d));
      seen.add(d.digest());
    };
    same();
    for (const id of ['j1', 'j2']) {
      const op = { ...(acked('create', id, t0).op as Parameters<typeof jobSpecOf>[0]), schedule: { kind: 'every' as const, everyMs: 1000 } };
      apply(d, { type: 'create_jobs', nowMs: t0, shard: 0, jobs: [jobSpecOf(op, t0)] });
      same();
    }
    for (let i = 0; i < 4; i++) {
      const at = d.getJob('j1')!.nextFireAtMs!;
      apply(d, { type: 'fired', nowMs: at, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: at, attempt: 1, startedAtMs: at }] });
      same();
      apply(d, { type: 'outcomes', nowMs: at + 5, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: at, attempt: 1, result: 'succeeded', statusCode: 200, error: null, finishedAtMs: at + 5, retryAtMs: null }] });
      same();
    }
    expect(d.trimExecutions('j1', 1, 10)).toBeGreaterThan(0);
    same();
    apply(d, { type: 'cancel_job', nowMs: t0 + 10_000, id: 'j2' });
    same();
    expect(d.deleteJob('j2', 100).deleted).toBe(true);
    same();
    // Every state on the way had its own digest (none collided with an earlier one).
    expect(seen.size).toBe(14);
    // A store rebuilt from the same records has the same digest.
    const copy = new DigestStore();
    for (const job of allJobs(d)) {
      copy.putJob(job);
      for (const e of d.listExecutions(job.id, 1000, null)) copy.putExecution(e);
    }
    expect(copy.digest()).toBe(d.digest());
  });
  it('a DigestStore digest taken after many writes, overwrites and deletions equals the full read', () => {
    const d = new DigestStore();
    const before = d.digest();
    for (const id of ['j1', 'j2', 'j3']) {
      const op = { ...(acked('create', id, t0).op as Parameters<typeof jobSpecOf>[0]), schedule: { kind: 'every' as const, everyMs: 1000 } };
      apply(d, { type: 'create_jobs', nowMs: t0, shard: 0, jobs: [jobSpecOf(op, t0)] });
    }
    // Every record below is written, then replaced or deleted, with no digest in between.
    for (let i = 0; i < 3; i++) {
      const at = d.getJob('j1')!.nextFireAtMs!;
      apply(d, { type: 'fired', nowMs: at, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: at, attempt: 1, startedAtMs: at }] });
      apply(d, { type: 'outcomes', nowMs: at + 5, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: at, attempt: 1, result: 'succeeded', statusCode: 200, error: null, finishedAtMs: at + 5, retryAtMs: null }] });
    }
    apply(d, { type: 'cancel_job', nowMs: t0 + 10_000, id: 'j2' });
    expect(d.deleteJob('j2', 100).deleted).toBe(true);
    expect(d.trimExecutions('j1', 1, 10)).toBeGreaterThan(0);
    const after = d.digest();
    expect(after).not.toBe(before);
    expect(after).toBe(storeDigest(d));
    apply(d, { type: 'cancel_job', nowMs: t0 + 11_000, id: 'j3' });
    expect(d.deleteJob('j3', 100).deleted).toBe(true);
    expect(d.digest()).toBe(storeDigest(d));
  });

  it('a snapshot image restores the store as it was when taken, whatever was written after', () => {
    const d = new DigestStore();
    const op = { ...(acked('create', 'j1', t0).op as Parameters<typeof jobSpecOf>[0]), schedule: { kind: 'every' as const, everyMs: 1000 } };
    apply(d, { type: 'create_jobs', nowMs: t0, shard: 0, jobs: [jobSpecOf(op, t0)] });
    const at = d.getJob('j1')!.nextFireAtMs!;
    apply(d, { type: 'fired', nowMs: at, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: at, attempt: 1, startedAtMs: at }] });
    const digest = d.digest();
    const bytes = encodeImage(d, 7);
    apply(d, { type: 'outcomes', nowMs: at + 5, nodeId: 'n1', items: [{ jobId: 'j1', scheduledAtMs: at, attempt: 1, result: 'succeeded', statusCode: 200, error: null, finishedAtMs: at + 5, retryAtMs: null }] });
    apply(d, { type: 'pause_job', nowMs: at + 10, id: 'j1' });
    expect(d.digest()).not.toBe(digest);
    const restored = decodeImage(bytes, 0);
    expect(restored.hash).toBe(7);
    expect(restored.store.digest()).toBe(digest);
    expect(storeDigest(restored.store)).toBe(digest);
    expect(restored.store.getJob('j1')!.state).toBe('PENDING');
    // The restored store has records of its own: writing to it leaves the image as it was.
    apply(restored.store, { type: 'cancel_job', nowMs: at + 20, id: 'j1' });
    expect(decodeImage(bytes, 0).store.digest()).toBe(digest);
    expect(() => decodeImage(new Uint8Array(4), 0)).toThrow(/no encodeImage made/);
  });
});
