/**
 * The whole bench pipeline (task, load loops, receiver, drain, figures, targets) against the fixture node of
 * bench/fixture-node.ts, whose faults give known answers: the figures must count them exactly.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startFixtureNode, type FixtureNode } from './fixture-node.js';
import { defaultParams, runScenario, type ScenarioParams } from './scenarios.js';
import { silentLogger } from '../src/core/log.js';

let fixture: FixtureNode | null = null;
afterEach(async () => {
  await fixture?.close();
  fixture = null;
});

type Scenario = 'submit' | 'steady' | 'hot-instant' | 'burst';

function params(overrides: Partial<ScenarioParams>, scenario: Scenario): ScenarioParams {
  return { ...defaultParams(scenario), drainTimeoutS: 1, taskMaxConcurrency: 10, ...overrides };
}

/** One scenario against the fixture (or `servers`), no token, the receiver on a free port. */
function run(scenario: Scenario, overrides: Partial<ScenarioParams>, more: Partial<Parameters<typeof runScenario>[0]> = {}) {
  return runScenario({
    scenario,
    params: params(overrides, scenario),
    servers: [fixture!.url],
    nodes: 1,
    token: null,
    receiverPort: 0,
    logger: silentLogger,
    ...more,
  });
}

describe('runScenario against the fixture node', () => {
  it.each([false, true])('hot-instant: counts rejected, lost, duplicate and early exactly (receiver in process: %s)', async (inProcess) => {
    fixture = await startFixtureNode({ rejectEvery: 30, loseEvery: 50, duplicateEvery: 60, earlyEvery: 70 });
    const result = await run('hot-instant', { count: 300, batchSize: 50, concurrency: 2, leadMs: 1_000 }, { receiverInProcess: inProcess });
    const f = result.figures;
    expect(fixture.routes['PUT /v1/tasks/{name}']).toBe(1);
    expect(fixture.routes['POST /v1/jobs:batch']).toBe(6);
    expect(f.submitted).toBe(300);
    expect(f.requests).toBe(6);
    expect(f.requestLatency.count).toBe(6);
    expect(f.rejected).toBe(10);
    expect(f.submitErrors).toEqual({ rate_limited: 10 });
    expect(f.accepted).toBe(290);
    expect(f.lost).toBe(5); // accepted #50, #100, ... #250
    expect(f.drainOutcome).toBe('idle');
    expect(f.delivered).toBe(285);
    expect(f.duplicates).toBe(4); // #60, #120, #180, #240
    expect(f.early).toBe(4); // #70, #140, #210, #280
    expect(f.lateness.count).toBe(285);
    expect(f.ackedAfterDue).toBe(0);
    expect(f.deliveredWithinMs).not.toBeNull();
    expect(f.nodePeakRssBytes).toBeNull();
    expect(result.servers).toEqual({ mode: 'external', urls: [fixture.url] });
    expect(result.parameters.receiver).toBe(inProcess ? 'in-process' : 'thread');
    const byFigure = Object.fromEntries(result.targets.map((t) => [t.figure, t.pass]));
    expect(byFigure).toEqual({ deliveredWithinMs: true, early: false, lost: false });
    expect(result.pass).toBe(false);
  });

  it('steady: sends rate x duration jobs in small batches, each due delayMs later, all delivered', async () => {
    fixture = await startFixtureNode();
    const result = await run('steady', { ratePerS: 400, durationS: 1, batchSize: 10, delayMs: 300 }, { token: 'tok-1' });
    const f = result.figures;
    expect(fixture.lastAuthorization).toBe('Bearer tok-1');
    expect(f.accepted).toBe(400);
    expect(f.delivered).toBe(400);
    expect(f.lost).toBe(0);
    expect(f.drainOutcome).toBe('all delivered');
    expect(f.early).toBe(0);
    expect(f.duplicates).toBe(0);
    expect(f.backlogMax).not.toBeNull();
    expect(f.lateness.minMs).toBeGreaterThanOrEqual(1); // the fixture fires 2 ms after the due time
    expect(f.deliveredWithinMs).toBeNull();
    // 400/s: the tier up to 1,000/s.
    expect(result.targets.map((t) => t.figure)).toEqual(['latenessP99Ms', 'latenessP999Ms', 'early', 'lost']);
  });

  it('steady with a warm-up: its jobs go first and count as foreign, never in the figures of the run', async () => {
    fixture = await startFixtureNode();
    const result = await run('steady', { ratePerS: 400, durationS: 1, batchSize: 10, delayMs: 300, warmUpS: 1 });
    const f = result.figures;
    // The warm-up: 400 jobs one per request (the run's batches of 10 send a lone job when only one is owed).
    expect(fixture.routes['POST /v1/jobs']).toBeGreaterThanOrEqual(400);
    expect(f.accepted).toBe(400);
    expect(f.delivered).toBe(400);
    expect(f.lateness.count).toBe(400);
    expect(f.foreign).toBe(400);
    expect(f.lost).toBe(0);
    expect(result.parameters.warmUpS).toBe(1);
  });

  it('burst: a second burst on the same node (the warm case) with its own figures; safety counts both', async () => {
    fixture = await startFixtureNode({ duplicateEvery: 15 });
    const result = await run('burst', { count: 10, leadMs: 600, warmLeadMs: 400 });
    const f = result.figures;
    expect(fixture.routes['POST /v1/jobs:batch']).toBe(2);
    expect(f.accepted).toBe(10);
    expect(f.delivered).toBe(10);
    expect(f.deliveredWithinMs).not.toBeNull();
    const w = f.warm!;
    expect(w.accepted).toBe(10);
    expect(w.delivered).toBe(10);
    expect(w.lost).toBe(0);
    expect(w.early).toBe(0);
    expect(w.drainOutcome).toBe('all delivered');
    expect(w.lateness.count).toBe(10);
    // The fixture fires 2 ms after the due time.
    expect(w.firstWithinMs).toBeGreaterThanOrEqual(1);
    expect(w.deliveredWithinMs).toBeGreaterThanOrEqual(w.firstWithinMs!);
    // The fixture's 15th callback (the warm burst's 5th) is sent twice: counted once, in both the warm and the total.
    expect(w.duplicates).toBe(1);
    expect(f.duplicates).toBe(1);
    expect(f.lost).toBe(0);
    expect(result.targets.map((t) => t.figure)).toEqual(['deliveredWithinMs', 'warmDeliveredWithinMs', 'early', 'lost']);
  });

  it('burst with --warm-lead-ms 0: one burst, no warm figures or target', async () => {
    fixture = await startFixtureNode();
    const result = await run('burst', { count: 5, leadMs: 500, warmLeadMs: 0 });
    expect(result.figures.delivered).toBe(5);
    expect(result.figures.warm ?? null).toBeNull();
    expect(result.targets.map((t) => t.figure)).toEqual(['deliveredWithinMs', 'early', 'lost']);
  });

  it('counts jobs acknowledged after their due time (they cannot be on time)', async () => {
    fixture = await startFixtureNode();
    const result = await run('submit', { count: 20, concurrency: 2, leadMs: 0 });
    expect(result.figures.accepted).toBe(20);
    expect(result.figures.ackedAfterDue).toBe(20);
    expect(result.figures.delivered).toBe(20);
  });

  it('waits for callbacks that start only after a long submit phase (idle counts from its end)', async () => {
    fixture = await startFixtureNode({ answerDelayMs: 250, fireDelayMs: 1_800 });
    const result = await run('submit', { count: 5, concurrency: 1, leadMs: 0 });
    expect(result.figures.submitDurationMs).toBeGreaterThan(1_000); // longer than the 1 s idle timeout
    expect(result.figures.lost).toBe(0);
    expect(result.figures.delivered).toBe(5);
    expect(result.figures.drainOutcome).toBe('all delivered');
  });

  it('submit: one POST /v1/jobs per job over keep-alive connections, spread over every server', async () => {
    fixture = await startFixtureNode();
    const second = await startFixtureNode();
    try {
      const result = await run('submit', { count: 120, concurrency: 8, leadMs: 400 }, { servers: [fixture.url, second.url] });
      // Each fixture only knows the task if it received the PUT; the bench puts it through one server, so
      // jobs sent to the other are refused: exactly half, which proves the round-robin spread.
      const sentA = fixture.routes['POST /v1/jobs'] ?? 0;
      const sentB = second.routes['POST /v1/jobs'] ?? 0;
      expect(sentA + sentB).toBe(120);
      expect(sentA).toBe(60);
      expect(result.figures.accepted).toBe(60);
      expect(result.figures.submitErrors).toEqual({ not_found: 60 });
      expect(result.figures.delivered).toBe(60);
      expect(result.figures.lost).toBe(0);
      expect(result.parameters.nodes).toBe(2);
    } finally {
      await second.close();
    }
  });
});
