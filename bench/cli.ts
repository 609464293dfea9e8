/**
 * `punctual bench`: the load generator and lateness meter (`npm run bench -- --scenario NAME`).
 * Prints a table (or the JSON with --json) and writes bench/results/<scenario>-<time>.json plus
 * latest-<scenario>.json. Exit 0 when the runs completed (a missed target is a figure, not a failure),
 * 1 when a run could not complete (a node did not start, the task could not be created), 2 on bad usage.
 */
import { InvalidArgumentError, Option, type Command } from 'commander';
import { createLogger } from '../src/core/log.js';
import { scenarioNames, writeResult, type BenchResult, type ScenarioName } from './results.js';
import { defaultParams, leadFor, runScenario, type ScenarioParams } from './scenarios.js';
import { formatTable } from './table.js';

interface BenchFlags {
  scenario: ScenarioName | 'all';
  server?: string[];
  nodes: number;
  concurrency?: number;
  count?: number;
  rate?: number;
  durationS?: number;
  batchSize?: number;
  leadMs?: number;
  delayMs?: number;
  drainTimeoutS?: number;
  taskMaxConcurrency?: number;
  warmLeadMs?: number;
  warmUpS?: number;
  token?: string;
  out: string;
  receiverPort: number;
  receiverInProcess?: boolean;
  tls?: boolean;
  json?: boolean;
}

function intArg(min: number, max: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min || n > max) throw new InvalidArgumentError(`expected an integer in ${min}..${max}`);
    return n;
  };
}

function serverArg(value: string, previous: string[] | undefined): string[] {
  const urls = value.split(',').map((s) => s.trim()).filter((s) => s.length > 0);
  for (const url of urls) {
    if (!/^https?:\/\/[^/]+\/?$/.test(url)) throw new InvalidArgumentError(`not a server base URL: ${url}`);
  }
  return [...(previous ?? []), ...urls.map((u) => u.replace(/\/$/, ''))];
}

/** The scenario's defaults with the flags given on the command line applied over them. */
export function resolveParams(scenario: ScenarioName, flags: Partial<BenchFlags>): ScenarioParams {
  const base = defaultParams(scenario);
  const params: ScenarioParams = {
    count: flags.count ?? base.count,
    concurrency: flags.concurrency ?? base.concurrency,
    batchSize: flags.batchSize ?? base.batchSize,
    ratePerS: flags.rate ?? base.ratePerS,
    durationS: flags.durationS ?? base.durationS,
    leadMs: flags.leadMs ?? base.leadMs,
    delayMs: flags.delayMs ?? base.delayMs,
    drainTimeoutS: flags.drainTimeoutS ?? base.drainTimeoutS,
    taskMaxConcurrency: flags.taskMaxConcurrency ?? base.taskMaxConcurrency,
    warmLeadMs: flags.warmLeadMs ?? base.warmLeadMs,
    warmUpS: flags.warmUpS ?? base.warmUpS,
  };
  // A bigger --count than the default needs a longer lead, unless the lead was given.
  if (flags.leadMs === undefined && flags.count !== undefined && scenario !== 'steady') {
    params.leadMs = Math.max(base.leadMs, leadFor(scenario, params.count));
  }
  if (scenario === 'steady' && params.ratePerS <= 0) throw new InvalidArgumentError('--rate must be positive for steady');
  return params;
}

export function registerBenchCommand(program: Command): void {
  program
    .command('bench')
    .description('load generator and lateness meter: runs a scenario against a local or given node')
    .addOption(new Option('--scenario <name>', 'scenario to run').choices([...scenarioNames, 'all']).makeOptionMandatory())
    .option('--server <url>', 'client API URL of an existing node; repeat or comma-separate for a cluster (default: spawn local nodes)', serverArg)
    .option('--nodes <n>', 'local nodes to spawn when --server is absent (3 = a cluster)', intArg(1, 7), 1)
    .option('--concurrency <n>', 'concurrent requests (workers, or in-flight max for steady)', intArg(1, 10_000))
    .option('--count <n>', 'jobs to submit (submit, submit-batch, hot-instant)', intArg(1, 10_000_000))
    .option('--rate <n>', 'steady: jobs per second', intArg(1, 1_000_000))
    .option('--duration-s <n>', 'steady: seconds of load; others: bound on the submit phase', intArg(1, 3_600))
    .option('--batch-size <n>', 'jobs per request (1 = POST /v1/jobs, more = POST /v1/jobs:batch)', intArg(1, 10_000))
    .option('--lead-ms <n>', 'submit, submit-batch, hot-instant: jobs are due this long after the start', intArg(0, 3_600_000))
    .option('--delay-ms <n>', 'steady: each job is due this long after its submission', intArg(0, 3_600_000))
    .option('--drain-timeout-s <n>', 'wait this long after the last due time before counting callbacks lost', intArg(0, 3_600))
    .option('--task-max-concurrency <n>', "the bench task's max_concurrency", intArg(1, 10_000))
    .option('--warm-lead-ms <n>', 'burst: then a second burst on the same node (the warm case), due this long after its submission; 0 = none (default 1000)', intArg(0, 3_600_000))
    .option('--warm-up-s <n>', 'before the measured run, a steady load (--rate, else 1,000/s) for this long, not measured (a long-running node, past the JIT\'s first compiles); 0 = none (default)', intArg(0, 3_600))
    .option('--token <token>', 'bearer token (also passed to spawned nodes as --auth-token)')
    .option('--out <dir>', 'directory of the results files', 'bench/results')
    .option('--receiver-port <port>', 'port of the callback receiver on 127.0.0.1 (0 = any free port)', intArg(0, 65_535), 0)
    .option('--receiver-in-process', "run the callback receiver on the bench's own event loop instead of its own thread (to compare with the old figures: arrivals then wait for the load generator)")
    .option('--tls', 'spawned nodes serve the API over HTTPS and their peers use mutual TLS (a CA and certificates made with openssl for the run)')
    .option('--json', 'print the result JSON instead of the table')
    .action(async function (this: Command, flags: BenchFlags) {
      const out = this.configureOutput();
      const writeOut = (s: string): void => (out.writeOut ? out.writeOut(s) : void process.stdout.write(s));
      const writeErr = (s: string): void => (out.writeErr ? out.writeErr(s) : void process.stderr.write(s));
      if (flags.tls && flags.server !== undefined) this.error('punctual: --tls applies to spawned nodes; drop --server', { exitCode: 2 });
      const scenarios = flags.scenario === 'all' ? [...scenarioNames] : [flags.scenario];
      let params: ScenarioParams[];
      try {
        params = scenarios.map((s) => resolveParams(s, flags));
      } catch (err) {
        this.error(`punctual: ${(err as Error).message}`, { exitCode: 2 });
      }
      const results: BenchResult[] = [];
      for (const [i, scenario] of scenarios.entries()) {
        try {
          const result = await runScenario({
            scenario,
            params: params[i],
            servers: flags.server ?? null,
            nodes: flags.nodes,
            token: flags.token ?? null,
            receiverPort: flags.receiverPort,
            receiverInProcess: flags.receiverInProcess ?? false,
            tls: flags.tls ?? false,
            logger: createLogger({ format: 'pretty', level: 'info', write: (line) => writeErr(line + '\n') }),
          });
          const files = await writeResult(result, flags.out);
          results.push(result);
          if (!flags.json) writeOut(formatTable(result) + `written: ${files.path}\n\n`);
        } catch (err) {
          // A commander error with exit code 1: the CLI prints the one line and exits 1 (runtime failure).
          this.error(`punctual: bench ${scenario} failed: ${(err as Error).message}`, { exitCode: 1 });
        }
      }
      if (flags.json) writeOut(JSON.stringify(results.length === 1 ? results[0] : results, null, 2) + '\n');
    });
}
