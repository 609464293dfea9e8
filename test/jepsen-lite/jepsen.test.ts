/**
 * The CI run of jepsen-lite: about two minutes of real `punctual serve` processes under a mixed nemesis with a
 * fixed seed, then every check must pass. Three nodes when this build really forms a cluster from --peers
 * (probed by starting three and asking GET /v1/cluster), else one node. Needs `npm run build` (npm test does it).
 * A failing run keeps test/jepsen-lite/results/<run>/ with the report, the history and the nodes' logs.
 */
import { existsSync, rmSync } from 'node:fs';
import { expect, test } from 'vitest';
import { silentLogger } from '../../src/core/log.js';
import { defaultEntry } from './nodes.js';
import { clusterSupported, runJepsen } from './run.js';

test('a short seeded run under the mixed nemesis passes every check', async () => {
  expect(existsSync(defaultEntry()), `${defaultEntry()} missing: run npm run build`).toBe(true);
  const nodes = (await clusterSupported(3)) ? 3 : 1;
  const { report, dir } = await runJepsen({
    nodes, durationS: 90, nemesis: 'all', seed: 20261130, logger: silentLogger,
  });
  const failed = report.checks.filter((c) => !c.ok).map((c) => ({ name: c.name, counts: c.counts, examples: c.examples.slice(0, 3) }));
  expect(failed, `seed 20261130, nodes ${nodes}, report in ${dir}`).toEqual([]);
  expect(report.valid).toBe(true);
  // The run did real work: faults were injected and acknowledged jobs fired.
  expect(report.faults.length).toBeGreaterThan(0);
  const fired = report.checks.find((c) => c.name === 'acked-jobs-fire')!;
  expect(fired.counts.required).toBeGreaterThan(100);
  expect(fired.counts.fired).toBe(fired.counts.required);
  // A passing run leaves nothing behind; a failing one keeps its folder (report, history, nodes' logs).
  rmSync(dir, { recursive: true, force: true });
}, 300_000);
