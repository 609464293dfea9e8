/**
 * npm run sim -- [--seed N | --seeds N [--start-seed S]] [--nodes 3|5] [--shards G] [--safety-ms MS]
 *                [--liveness-ms MS] [--no-transfers] [--no-lease-invariant] [--bug NAME [--first-catch]] [--json]
 *                [--workers W] [--trace]
 * npm run sim -- --raft-only [--seed N | --seeds N ...] [--groups G] [--steps N] [--bug NAME] ...
 * Runs the seeded simulator and prints a summary; any violation prints the line that replays it. Exit 1 on a
 * violation. The default mode is the whole-node simulator (node/simulator.ts: NodeCore, scheduler invariants);
 * --raft-only runs the Raft-only simulator (simulator.ts). --workers splits --seeds across W child processes.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { HostBugs, RaftBugs } from '../../src/raft/bugs.js';
import type { RaftBugName } from '../../src/raft/index.js';
import type { NodeSimOptions, SimBugName } from './node/params.js';
import { defaultNodeSimOptions } from './node/params.js';
import { runNodeSeed } from './node/simulator.js';
import type { SimOptions } from './params.js';
import { defaultSimOptions } from './params.js';
import type { Summary } from './runner.js';
import { firstCatch, mergeSummaries, runNodeSeeds, runSeeds } from './runner.js';
import type { SeedResult } from './simulator.js';
import { runSeed } from './simulator.js';

type Mode = { readonly raftOnly: true; readonly base: Omit<SimOptions, 'seed'> } | { readonly raftOnly: false; readonly base: Omit<NodeSimOptions, 'seed'> };

interface CliArgs {
  readonly mode: Mode;
  readonly seed: number | null;
  readonly seeds: number;
  readonly startSeed: number;
  readonly json: boolean;
  readonly workers: number;
  readonly firstCatch: boolean;
}

function parse(argv: string[]): CliArgs {
  const { values } = parseArgs({
    args: argv,
    options: {
      'raft-only': { type: 'boolean', default: false },
      seed: { type: 'string' },
      seeds: { type: 'string' },
      'start-seed': { type: 'string' },
      nodes: { type: 'string' },
      groups: { type: 'string' },
      shards: { type: 'string' },
      steps: { type: 'string' },
      'safety-ms': { type: 'string' },
      'liveness-ms': { type: 'string' },
      'no-transfers': { type: 'boolean', default: false },
      'no-lease-invariant': { type: 'boolean', default: false },
      bug: { type: 'string' },
      json: { type: 'boolean', default: false },
      workers: { type: 'string' },
      trace: { type: 'boolean', default: false },
      'first-catch': { type: 'boolean', default: false },
    },
  });
  const int = (v: string | undefined, d: number, name: string): number => {
    if (v === undefined) return d;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) throw new Error(`--${name} must be a non-negative integer`);
    return n;
  };
  const nodes = values.nodes === undefined ? null : int(values.nodes, 3, 'nodes');
  if (nodes !== null && nodes !== 3 && nodes !== 5) throw new Error('--nodes must be 3 or 5');
  const bug = values.bug ?? null;
  const raftOnly = values['raft-only'];
  const bugs = raftOnly ? Object.keys(RaftBugs) : [...Object.keys(RaftBugs), ...Object.keys(HostBugs)];
  if (bug !== null && !bugs.includes(bug)) throw new Error(`--bug must be one of ${bugs.join(', ')}`);
  if (values['first-catch'] && (bug === null || raftOnly)) throw new Error('--first-catch needs --bug (whole-node mode)');
  const mode: Mode = raftOnly
    ? {
        raftOnly,
        base: {
          nodes: nodes as 3 | 5 | null,
          groups: int(values.groups, defaultSimOptions.groups, 'groups'),
          steps: int(values.steps, defaultSimOptions.steps, 'steps'),
          livenessSteps: defaultSimOptions.livenessSteps,
          bug: bug as RaftBugName | null,
          trace: values.trace,
        },
      }
    : {
        raftOnly,
        base: {
          ...defaultNodeSimOptions,
          nodes: nodes as 3 | 5 | null,
          shards: int(values.shards, defaultNodeSimOptions.shards, 'shards'),
          safetyMs: int(values['safety-ms'], defaultNodeSimOptions.safetyMs, 'safety-ms'),
          livenessMs: int(values['liveness-ms'], defaultNodeSimOptions.livenessMs, 'liveness-ms'),
          transfers: !values['no-transfers'],
          leaseInvariant: !values['no-lease-invariant'],
          bug: bug as SimBugName | null,
          trace: values.trace,
        },
      };
  return {
    mode,
    seed: values.seed === undefined ? null : int(values.seed, 1, 'seed'),
    seeds: int(values.seeds, 100, 'seeds'),
    startSeed: int(values['start-seed'], 1, 'start-seed'),
    json: values.json,
    workers: int(values.workers, 1, 'workers'),
    firstCatch: values['first-catch'],
  };
}

/** The command that replays `seed` with the same options. */
export function reproduceLine(seed: number, mode: Mode): string {
  let s = `npm run sim -- --seed ${seed}`;
  if (mode.raftOnly) {
    const b = mode.base;
    s += ' --raft-only';
    if (b.nodes !== null) s += ` --nodes ${b.nodes}`;
    if (b.groups !== defaultSimOptions.groups) s += ` --groups ${b.groups}`;
    if (b.steps !== defaultSimOptions.steps) s += ` --steps ${b.steps}`;
    if (b.bug !== null) s += ` --bug ${b.bug}`;
    return s;
  }
  const b = mode.base;
  if (b.nodes !== null) s += ` --nodes ${b.nodes}`;
  if (b.shards !== defaultNodeSimOptions.shards) s += ` --shards ${b.shards}`;
  if (b.safetyMs !== defaultNodeSimOptions.safetyMs) s += ` --safety-ms ${b.safetyMs}`;
  if (b.livenessMs !== defaultNodeSimOptions.livenessMs) s += ` --liveness-ms ${b.livenessMs}`;
  if (!b.transfers) s += ' --no-transfers';
  if (!b.leaseInvariant) s += ' --no-lease-invariant';
  if (b.bug !== null) s += ` --bug ${b.bug}`;
  return s;
}

function out(line: string): void {
  process.stdout.write(line + '\n');
}

function runOne(mode: Mode, seed: number): SeedResult {
  return mode.raftOnly ? runSeed({ ...mode.base, seed }) : runNodeSeed({ ...mode.base, seed });
}

function one(a: CliArgs): number {
  const r = runOne(a.mode, a.seed!);
  if (a.json) out(JSON.stringify(r));
  else {
    for (const line of r.trace) out(line);
    const unit = a.mode.raftOnly ? 'steps' : 'events';
    out(`seed ${r.seed}: ${r.nodes} nodes x ${r.groups} groups, ${r.steps} ${unit}, ${r.messages} messages, ${r.faults} faults, ` +
      `${r.elections} elections, ${r.commits} commits, ${r.acked} acknowledged, trace ${r.traceHash}`);
    if (r.violation) out(`VIOLATION at ${a.mode.raftOnly ? 'step' : 'ms'} ${r.violation.step}: ${r.violation.message}`);
  }
  if (r.violation) out(`reproduce with: ${reproduceLine(r.seed, a.mode)}`);
  return r.violation ? 1 : 0;
}

function printSummary(a: CliArgs, s: Summary, elapsedMs: number): void {
  if (a.json) {
    out(JSON.stringify({ ...s, elapsedMs: Math.round(elapsedMs) }));
    return;
  }
  const unit = a.mode.raftOnly ? 'steps' : 'events';
  out(`seeds ${s.seeds} (from ${a.startSeed}), ${unit} ${s.steps}, messages ${s.messages}, faults injected ${s.faults}, ` +
    `elections ${s.elections}, commits ${s.commits}, acknowledged ${s.acked}, violations ${s.violations}, ${(elapsedMs / 1000).toFixed(1)} s ` +
    `(${(s.seeds / (elapsedMs / 1000)).toFixed(2)} seeds/s)`);
  for (const f of s.failures) {
    out(`  seed ${f.seed} (${f.nodes} nodes) at ${a.mode.raftOnly ? 'step' : 'ms'} ${f.step}: ${f.message}`);
    out(`  reproduce with: ${reproduceLine(f.seed, a.mode)}`);
  }
  const bug = a.mode.base.bug;
  if (bug) out(`bug ${bug}: ${s.violations > 0 ? `caught by ${s.violations} of ${s.seeds} seeds` : 'NOT caught'}`);
}

/**
 * The mutation check from the command line: seeds from --start-seed until the bug is caught (by a seed that
 * passes without it), at most --seeds of them. Exit 1 when it is not caught.
 */
function caught(a: CliArgs): number {
  if (a.mode.raftOnly) return 2;
  const t0 = performance.now();
  const c = firstCatch(a.mode.base, a.seeds, a.startSeed);
  const s = ((performance.now() - t0) / 1000).toFixed(1);
  const bug = a.mode.base.bug;
  if (a.json) out(JSON.stringify({ bug, startSeed: a.startSeed, within: a.seeds, caught: c, seedsRun: c === null ? a.seeds : c.seed - a.startSeed + 1, elapsedMs: Math.round(performance.now() - t0) }));
  else if (c === null) out(`bug ${bug}: NOT caught in ${a.seeds} seeds from ${a.startSeed} (${s} s)`);
  else out(`bug ${bug}: caught at seed ${c.seed}, ${c.seed - a.startSeed + 1} seed(s) run from ${a.startSeed} (${s} s): ${c.message}`);
  return c === null ? 1 : 0;
}

/** Splits the seeds across child processes running this file with --json, then merges their summaries. */
async function parallel(a: CliArgs, argv: string[]): Promise<Summary> {
  const self = fileURLToPath(import.meta.url);
  const strip = new Set(['--seeds', '--start-seed', '--workers']);
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    if (strip.has(argv[i]!)) i++;
    else if (argv[i] !== '--json') rest.push(argv[i]!);
  }
  const per = Math.ceil(a.seeds / a.workers);
  const jobs: Promise<Summary>[] = [];
  for (let w = 0; w < a.workers; w++) {
    const start = a.startSeed + w * per;
    const count = Math.min(per, a.startSeed + a.seeds - start);
    if (count <= 0) break;
    const args = [self, ...rest, '--seeds', String(count), '--start-seed', String(start), '--json'];
    jobs.push(
      new Promise((resolve, reject) => {
        const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
        let text = '';
        child.stdout.on('data', (d: Buffer) => (text += d.toString()));
        child.on('error', reject);
        child.on('close', () => resolve(JSON.parse(text.trim().split('\n').pop()!) as Summary));
      }),
    );
  }
  return mergeSummaries(await Promise.all(jobs));
}

async function main(): Promise<number> {
  const argv = process.argv.slice(2);
  const a = parse(argv);
  if (a.seed !== null) return one(a);
  if (a.firstCatch && !a.mode.raftOnly) return caught(a);
  const t0 = performance.now();
  const range = { startSeed: a.startSeed, seeds: a.seeds };
  const s = a.workers > 1
    ? await parallel(a, argv)
    : a.mode.raftOnly
      ? runSeeds({ ...range, base: a.mode.base })
      : runNodeSeeds({ ...range, base: a.mode.base });
  printSummary(a, s, performance.now() - t0);
  return s.violations > 0 ? 1 : 0;
}

main().then(
  (code) => (process.exitCode = code),
  (err: unknown) => {
    process.stderr.write(`sim: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 2;
  },
);
