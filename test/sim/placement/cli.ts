/**
 * npm run sim:placement -- [--scenario NAME|all] [--seed N] [--out DIR]
 * Runs the placement scenarios (scenarios.ts) against the real driver (src/placement) on a virtual clock, prints
 * each target with its figure, and writes the results to DIR/placement-<ISO time>.json and DIR/latest-placement.json
 * (DIR: bench/results). Exit 1 when a target is missed.
 */
import { copyFile, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { execFileSync } from 'node:child_process';
import type { ScenarioName, ScenarioResult } from './scenarios.js';
import { runScenario, scenarioNames } from './scenarios.js';

function commit(): string {
  try {
    return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
  } catch {
    return 'unknown';
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { scenario: { type: 'string', default: 'all' }, seed: { type: 'string', default: '1' }, out: { type: 'string', default: 'bench/results' } } });
  const seed = Number(values.seed);
  if (!Number.isInteger(seed)) throw new Error('--seed must be an integer');
  const names: ScenarioName[] = values.scenario === 'all' ? [...scenarioNames] : [values.scenario as ScenarioName];
  for (const n of names) if (!scenarioNames.includes(n)) throw new Error(`--scenario must be one of all, ${scenarioNames.join(', ')}`);
  const results: ScenarioResult[] = [];
  for (const name of names) {
    const r = runScenario(name, seed, () => performance.now());
    results.push(r);
    process.stdout.write(`${name} (seed ${seed}): ${r.wallMs} ms wall, ${r.plans} plans in ${r.planMs} ms\n`);
    for (const t of r.targets) process.stdout.write(`  ${t.pass ? 'MET   ' : 'MISSED'} ${t.name}: ${t.measured} (target ${t.target})\n`);
  }
  const at = new Date().toISOString().replace(/[:.]/g, '-');
  await mkdir(values.out, { recursive: true });
  const file = join(values.out, `placement-${at}.json`);
  await writeFile(file, JSON.stringify({ commit: commit(), at, seed, results }, null, 2) + '\n');
  await copyFile(file, join(values.out, 'latest-placement.json'));
  process.stdout.write(`results: ${file}\n`);
  if (results.some((r) => r.targets.some((t) => !t.pass))) process.exitCode = 1;
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 1;
});
