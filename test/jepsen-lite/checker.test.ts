/** The checker on hand-made runs: each check passes the good history and fails the bad one. */
import { describe, expect, test } from 'vitest';
import { checkRun, percentiles, type CheckReport } from './checker.js';
import type { Delivery, FaultWindow, JobPlan, Op, RunHistory } from './history.js';

class Builder {
  private readonly h: RunHistory = {
    ops: [], deliveries: [], jobs: [], faults: [], clockToleranceMs: 0, clockBehindMs: 0,
    misfireThresholdMs: 5_000, startMs: 0, endMs: 100_000,
  };

  job(id: string, plan: JobPlan): this {
    this.h.jobs.push({ id, plan });
    return this;
  }

  op(key: string, f: Op['f'], type: Op['type'], invokeMs: number, completeMs: number, extra: Partial<Op> = {}): this {
    this.h.ops.push({ index: this.h.ops.length, process: 0, f, key, node: 'n1', invokeMs, completeMs, type, ...extra });
    return this;
  }

  deliver(jobId: string, scheduledAtMs: number, arrivalMs: number, fencingToken = '0.1', attempt = 1): this {
    const d: Delivery = { key: `${jobId}:${scheduledAtMs}`, jobId, scheduledAtMs, attempt, fencingToken, arrivalMs };
    this.h.deliveries.push(d);
    return this;
  }

  fault(w: FaultWindow): this {
    this.h.faults.push(w);
    return this;
  }

  set(fields: Partial<RunHistory>): this {
    Object.assign(this.h, fields);
    return this;
  }

  check(): CheckReport {
    return checkRun(this.h);
  }
}

const named = (r: CheckReport, name: string) => {
  const c = r.checks.find((x) => x.name === name);
  if (!c) throw new Error(`no check ${name}`);
  return c;
};

describe('acked-jobs-fire', () => {
  const base = () => new Builder().job('a', { kind: 'once', atMs: 1_000 }).op('a', 'create', 'ok', 0, 10);
  test('an acknowledged job that fired passes', () => {
    const r = base().deliver('a', 1_000, 1_002).check();
    expect(named(r, 'acked-jobs-fire').ok).toBe(true);
    expect(r.valid).toBe(true);
  });
  test('an acknowledged job that never fired fails', () => {
    const c = named(base().check(), 'acked-jobs-fire');
    expect(c.ok).toBe(false);
    expect(c.counts.violations).toBe(1);
  });
  test('a job with an acknowledged or unknown cancel is exempt, a refused cancel is not', () => {
    expect(named(base().op('a', 'cancel', 'ok', 500, 510, { state: 'cancelled' }).check(), 'acked-jobs-fire').ok).toBe(true);
    expect(named(base().op('a', 'cancel', 'info', 500, 2_500).check(), 'acked-jobs-fire').ok).toBe(true);
    expect(named(base().op('a', 'cancel', 'fail', 500, 510, { error: 'conflict' }).check(), 'acked-jobs-fire').ok).toBe(false);
  });
  test('paused and never resumed is exempt; paused then resumed must fire', () => {
    const paused = base().op('a', 'pause', 'ok', 500, 510, { state: 'paused' });
    expect(named(paused.check(), 'acked-jobs-fire').ok).toBe(true);
    expect(named(paused.op('a', 'resume', 'ok', 600, 610, { state: 'pending' }).check(), 'acked-jobs-fire').ok).toBe(false);
  });
  test('an info create that a read showed counts as acknowledged', () => {
    const b = new Builder().job('a', { kind: 'once', atMs: 1_000 }).op('a', 'create', 'info', 0, 2_000);
    expect(named(b.check(), 'acked-jobs-fire').ok).toBe(true);
    expect(named(b.op('a', 'read', 'ok', 3_000, 3_001, { state: 'done' }).check(), 'acked-jobs-fire').ok).toBe(false);
  });
});

describe('no-early-delivery', () => {
  const base = () => new Builder().job('a', { kind: 'once', atMs: 1_000 }).op('a', 'create', 'ok', 0, 10);
  test('a delivery before its time fails, unless within the clock offset tolerance', () => {
    expect(named(base().deliver('a', 1_000, 999).check(), 'no-early-delivery').ok).toBe(false);
    expect(named(base().deliver('a', 1_000, 999).set({ clockToleranceMs: 5 }).check(), 'no-early-delivery').ok).toBe(true);
  });
  test('a delivery for a time the schedule never produces fails', () => {
    expect(named(base().deliver('a', 1_001, 1_005).check(), 'no-early-delivery').ok).toBe(false);
    const every = new Builder().job('e', { kind: 'every', everyMs: 500, startAtMs: 1_000, endAtMs: 3_000, misfire: 'fire_once' })
      .op('e', 'create', 'ok', 0, 10);
    expect(named(every.deliver('e', 1_500, 1_501).check(), 'no-early-delivery').ok).toBe(true);
    expect(named(every.deliver('e', 1_700, 1_701).check(), 'no-early-delivery').ok).toBe(false);
  });
  test('a delivery of a job nobody created fails', () => {
    expect(named(new Builder().deliver('ghost', 1_000, 1_001).check(), 'no-early-delivery').ok).toBe(false);
  });
  test('delay_ms jobs: the node clock (behind) decides the time', () => {
    const b = () => new Builder().job('d', { kind: 'delay', delayMs: 1_000 }).op('d', 'create', 'ok', 0, 10);
    expect(named(b().deliver('d', 1_005, 1_006).check(), 'no-early-delivery').ok).toBe(true);
    expect(named(b().deliver('d', 400, 401).check(), 'no-early-delivery').ok).toBe(false);
    expect(named(b().deliver('d', 400, 401).set({ clockBehindMs: 700 }).check(), 'no-early-delivery').ok).toBe(true);
  });
});

describe('no-fire-after-cancel', () => {
  const base = () => new Builder().job('e', { kind: 'every', everyMs: 1_000, startAtMs: 1_000, endAtMs: 10_000, misfire: 'fire_all' })
    .op('e', 'create', 'ok', 0, 10);
  test('an occurrence scheduled after the cancel was acknowledged must not arrive', () => {
    const cancelled = () => base().op('e', 'cancel', 'ok', 2_300, 2_400, { state: 'cancelled' }).deliver('e', 1_000, 1_001).deliver('e', 2_000, 2_001);
    expect(named(cancelled().check(), 'no-fire-after-cancel').ok).toBe(true);
    expect(named(cancelled().deliver('e', 3_000, 3_001).check(), 'no-fire-after-cancel').ok).toBe(false);
  });
  test('an occurrence scheduled after an acknowledged pause must not arrive before a resume', () => {
    const paused = () => base().op('e', 'pause', 'ok', 1_300, 1_400, { state: 'paused' }).op('e', 'resume', 'ok', 5_000, 5_010, { state: 'pending' });
    expect(named(paused().deliver('e', 3_000, 5_020).check(), 'no-fire-after-cancel').ok).toBe(true);
    expect(named(paused().deliver('e', 3_000, 3_001).check(), 'no-fire-after-cancel').ok).toBe(false);
  });
});

describe('refused-never-fire', () => {
  test('a job whose every create got a 4xx must never fire; an info create may', () => {
    const refused = new Builder().job('x', { kind: 'invalid', reason: 'unknown task' }).op('x', 'create', 'fail', 0, 5, { error: 'not_found' });
    expect(named(refused.check(), 'refused-never-fire').ok).toBe(true);
    expect(named(refused.deliver('x', 500, 501).check(), 'refused-never-fire').ok).toBe(false);
    const unknown = new Builder().job('y', { kind: 'once', atMs: 500 }).op('y', 'create', 'info', 0, 2_000).deliver('y', 500, 501);
    expect(named(unknown.check(), 'refused-never-fire').ok).toBe(true);
  });
});

describe('linearizable-job-reads', () => {
  test('a read that forgets an acknowledged create fails the run', () => {
    const b = new Builder().job('a', { kind: 'once', atMs: 50_000 }).op('a', 'create', 'ok', 0, 10);
    expect(named(b.op('a', 'read', 'ok', 20, 30, { state: 'pending' }).check(), 'linearizable-job-reads').ok).toBe(true);
    expect(named(b.op('a', 'read', 'ok', 40, 50, { state: 'absent' }).check(), 'linearizable-job-reads').ok).toBe(false);
  });
});

describe('recurring-no-skip', () => {
  const every = (misfire: 'fire_once' | 'skip' | 'fire_all') =>
    new Builder().job('e', { kind: 'every', everyMs: 1_000, startAtMs: 1_000, endAtMs: 4_000, misfire }).op('e', 'create', 'ok', 0, 10)
      .deliver('e', 1_000, 1_001).deliver('e', 2_000, 2_001).deliver('e', 4_000, 4_001);
  test('every occurrence delivered passes', () => {
    const r = every('fire_all').deliver('e', 3_000, 3_001).check();
    expect(named(r, 'recurring-no-skip').ok).toBe(true);
    expect(named(r, 'recurring-no-skip').counts.delivered).toBe(4);
  });
  test('a skipped occurrence with no fault fails, whatever the policy', () => {
    for (const m of ['fire_once', 'skip', 'fire_all'] as const) expect(named(every(m).check(), 'recurring-no-skip').ok).toBe(false);
  });
  test('a fault explains a skip under skip only; fire_once needs its catch-up run, fire_all never skips', () => {
    const w: FaultWindow = { kind: 'kill', detail: 'n1', startMs: 2_500, healMs: 3_200, recoveredMs: 3_600 };
    expect(named(every('skip').fault(w).check(), 'recurring-no-skip').ok).toBe(true);
    expect(named(every('fire_once').fault(w).check(), 'recurring-no-skip').ok).toBe(false);
    expect(named(every('fire_all').fault(w).check(), 'recurring-no-skip').ok).toBe(false);
  });
  test('fire_once: a run fired past the threshold explains the runs it jumped over', () => {
    const b = () => new Builder().job('e', { kind: 'every', everyMs: 1_000, startAtMs: 1_000, endAtMs: 12_000, misfire: 'fire_once' })
      .op('e', 'create', 'ok', 0, 10).deliver('e', 1_000, 1_001);
    // 2 000 fired at 8 500 (the catch-up, more than 5 s late): every occurrence due by then (3 000 .. 8 000) is
    // jumped over; 9 000 on, on time.
    const ok = b().deliver('e', 2_000, 8_500);
    for (let s = 9_000; s <= 12_000; s += 1_000) ok.deliver('e', s, s + 1);
    expect(named(ok.check(), 'recurring-no-skip').ok).toBe(true);
    expect(named(ok.check(), 'recurring-no-skip').counts.excused_misfire).toBe(6);
    // The catch-up run itself missing: the first missed run must still fire under fire_once.
    const noCatchUp = b();
    for (let s = 4_000; s <= 12_000; s += 1_000) noCatchUp.deliver('e', s, Math.max(s + 1, 8_501));
    expect(named(noCatchUp.check(), 'recurring-no-skip').ok).toBe(false);
    // Runs due after the catch-up started jumped over: not the policy.
    const tooMany = b().deliver('e', 2_000, 8_500);
    for (let s = 11_000; s <= 12_000; s += 1_000) tooMany.deliver('e', s, s + 1);
    expect(named(tooMany.check(), 'recurring-no-skip').ok).toBe(false);
    // A run less than the threshold late is no catch-up: what follows it is owed.
    const notLate = b().deliver('e', 2_000, 6_500);
    for (let s = 9_000; s <= 12_000; s += 1_000) notLate.deliver('e', s, s + 1);
    expect(named(notLate.check(), 'recurring-no-skip').ok).toBe(false);
  });
  test('fire_once: a deposed leader\'s unrecorded on-time fire does not hide the late catch-up that replaced it', () => {
    // Seed 20261130, 5 nodes (cron every second, fire_once): the term-13 leader fired 896 000 on time, but the fire
    // never committed (net-reset); the term-14 leader fired 896 000 again as attempt 1 at 904 487, the catch-up,
    // jumped over 897 000 .. 899 000 (more than 5 s before), and fired 900 000 and 901 000 late.
    const b = () => new Builder().job('c', { kind: 'cron', expr: '* * * * * *', periodMs: 1_000, endAtMs: 901_028, misfire: 'fire_once' })
      .op('c', 'create', 'ok', 892_801, 892_833)
      .deliver('c', 893_000, 893_004, '0.13').deliver('c', 894_000, 894_016, '0.13').deliver('c', 895_000, 895_001, '0.13')
      .deliver('c', 896_000, 896_042, '0.13');
    const ok = b().deliver('c', 896_000, 904_487, '0.14').deliver('c', 900_000, 904_518, '0.14').deliver('c', 901_000, 904_546, '0.14');
    expect(named(ok.check(), 'recurring-no-skip').ok).toBe(true);
    expect(named(ok.check(), 'recurring-no-skip').counts.excused_misfire).toBe(3);
    // Without the replacing first attempt (the new leader skipped them outright): still a violation.
    const noCatchUp = b().deliver('c', 900_000, 904_518, '0.14').deliver('c', 901_000, 904_546, '0.14');
    expect(named(noCatchUp.check(), 'recurring-no-skip').counts.violations).toBe(3);
    // A late retry (attempt 2) of an on-time fire is not a catch-up: the jump was decided at the first fire.
    const retry = b().deliver('c', 896_000, 904_487, '0.14', 2).deliver('c', 900_000, 904_518, '0.14').deliver('c', 901_000, 904_546, '0.14');
    expect(named(retry.check(), 'recurring-no-skip').counts.violations).toBe(3);
  });
  test('occurrences inside a pause are not required', () => {
    const b = every('fire_all').set({ misfireThresholdMs: 100 })
      .op('e', 'pause', 'ok', 2_500, 2_510, { state: 'paused' }).op('e', 'resume', 'ok', 3_500, 3_510, { state: 'pending' });
    expect(named(b.check(), 'recurring-no-skip').ok).toBe(true);
  });
});

describe('reported figures', () => {
  test('duplicates, lateness and stale fencing tokens are counted', () => {
    const r = new Builder().job('a', { kind: 'once', atMs: 1_000 }).op('a', 'create', 'ok', 0, 10)
      .deliver('a', 1_000, 1_010, '0.2').deliver('a', 1_000, 1_500, '0.1').check();
    expect(r.stats.duplicates).toBe(1);
    expect(r.stats.duplicateRate).toBe(1);
    expect(r.stats.lateness.all.max).toBe(10);
    expect(r.stats.staleFencing).toBe(1);
    expect(r.valid).toBe(true);
  });
  test('a paused job is counted after pause, not under faults, even inside a fault window', () => {
    const w: FaultWindow = { kind: 'kill', detail: 'n1', startMs: 500, healMs: 1_200, recoveredMs: 1_500 };
    const r = new Builder().job('a', { kind: 'once', atMs: 1_000 }).job('b', { kind: 'once', atMs: 1_000 })
      .op('a', 'create', 'ok', 0, 10).op('b', 'create', 'ok', 0, 10)
      .op('a', 'pause', 'ok', 600, 610, { state: 'paused' }).op('a', 'resume', 'ok', 30_000, 30_010, { state: 'pending' })
      .deliver('a', 1_000, 30_020).deliver('b', 1_000, 1_700).fault(w).check();
    expect(r.stats.lateness.afterPause.max).toBe(29_020);
    expect(r.stats.lateness.underFaults.max).toBe(700);
    expect(r.stats.lateness.underFaults.count).toBe(1);
  });
  test('recovery: the first ok op after a heal counts workload ops only, not the final reads', () => {
    const early: FaultWindow = { kind: 'kill', detail: 'n1', startMs: 1_000, healMs: 2_000, recoveredMs: 2_300 };
    const late: FaultWindow = { kind: 'kill', detail: 'n2', startMs: 9_000, healMs: 9_800, recoveredMs: 9_900 };
    const r = new Builder().set({ endMs: 10_000 }).job('a', { kind: 'once', atMs: 500 })
      .op('a', 'create', 'ok', 0, 10).op('a', 'read', 'ok', 2_100, 2_150, { state: 'done' })
      .op('a', 'read', 'ok', 20_000, 20_010, { state: 'done' }).deliver('a', 500, 501).fault(early).fault(late).check();
    expect(r.stats.recovery.map((x) => x.firstOkAfterHealMs)).toEqual([150, null]);
  });
  test('percentiles', () => {
    const p = percentiles(Array.from({ length: 100 }, (_, i) => i + 1));
    expect([p.p50, p.p90, p.p99, p.max]).toEqual([51, 91, 100, 100]);
  });
});
