/**
 * The CI run of jepsen-lite: about two minutes of three real `punctual serve` processes (one cluster from
 * --peers, every peer link through the fault proxy) under a mixed nemesis with a fixed seed, then every check
 * must pass. Seed 20261130 pauses a leader with SIGSTOP long enough to be deposed, the case where a woken
 * leader must not fire for its old term (README, Findings).
 * Needs `npm run build` (npm test does it). A failing run keeps test/jepsen-lite/results/<run>/ with the
 * report, the history and the nodes' logs.
 */
import { existsSync, rmSync } from 'node:fs';
import { expect, test } from 'vitest';
import { silentLogger } from '../../src/core/log.js';
import { defaultEntry } from './nodes.js';
import { runJepsen } from './run.js';

test('a short seeded run under the mixed nemesis passes every check', async () => {
  expect(existsSync(defaultEntry()), `${defaultEntry()} missing: run npm run build`).toBe(true);
  const nodes = 3;
  const { report, dir } = await runJepsen({
    nodes, durationS: 90, nemesis: 'all', seed: 20261130, logger: silentLogger,
  });
  const failed = report.checks.filter((c) => !c.ok).map((c) => ({ name: c.name, counts: c.counts, examples: c.examples.slice(0, 3) }));
  expect(failed, `seed 20261130, nodes ${nodes}, report in ${dir}`).toEqual([]);
  expect(report.valid).toBe(true);
  // The run did real work: faults were injected (network faults too), leaders changed, acknowledged jobs fired.
  expect(report.faults.length).toBeGreaterThan(0);
  expect(report.faults.some((f) => f.kind.startsWith('partition') || f.kind.startsWith('net-'))).toBe(true);
  expect(report.meta.leaderChanges).toBeGreaterThan(0);
  const fired = report.checks.find((c) => c.name === 'acked-jobs-fire')!;
  expect(fired.counts.required).toBeGreaterThan(100);
  expect(fired.counts.fired).toBe(fired.counts.required);
  const l = report.stats.lateness;
  console.info(`jepsen-lite CI: ${report.faults.length} faults, ${report.meta.leaderChanges} leader changes, ` +
    `${report.stats.duplicates} duplicates, lateness under faults p99 ${l.underFaults.p99} ms max ${l.underFaults.max} ms, quiet p99 ${l.quiet.p99} ms`);
  // A passing run leaves nothing behind; a failing one keeps its folder (report, history, nodes' logs).
  rmSync(dir, { recursive: true, force: true });
}, 300_000);
