/**
 * `npm run jepsen -- --nodes 3 --duration-s 60 --nemesis all --seed N`
 * Prints the readable summary and where the report went; exit 0 when every check passed, 1 when one failed
 * (with the seed and the kept logs), 2 on bad usage.
 */
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { runJepsen, type JepsenOptions } from './run.js';

const usage = `usage: npm run jepsen -- [--nodes 1|3|5] [--duration-s S] [--nemesis none|all|kind,...] [--seed N]
                        [--clients N] [--shards N] [--quiesce-ms MS] [--results DIR]
fault kinds: kill, pause, clock, partition-halves, partition-leader, partition-bridge, partition-one-way,
             net-delay, net-reset (slow-disk is reported as unsupported)`;

function intFlag(name: string, value: string | undefined, fallback: number, lo: number, hi: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < lo || n > hi) throw new Error(`--${name}: expected an integer ${lo}..${hi}, got ${JSON.stringify(value)}`);
  return n;
}

export function parseCli(argv: string[]): JepsenOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      nodes: { type: 'string' }, 'duration-s': { type: 'string' }, nemesis: { type: 'string' }, seed: { type: 'string' },
      clients: { type: 'string' }, shards: { type: 'string' }, 'quiesce-ms': { type: 'string' }, results: { type: 'string' },
      help: { type: 'boolean' },
    },
    strict: true,
  });
  if (values.help) throw new Error(usage);
  const nodes = intFlag('nodes', values.nodes, 1, 1, 5);
  if (nodes !== 1 && nodes !== 3 && nodes !== 5) throw new Error('--nodes: 1, 3 or 5');
  const options: JepsenOptions = {
    nodes,
    durationS: intFlag('duration-s', values['duration-s'], 60, 5, 3_600),
    nemesis: values.nemesis ?? 'all',
    seed: intFlag('seed', values.seed, Math.floor(Math.random() * 1_000_000), 0, 2 ** 31 - 1),
    clients: intFlag('clients', values.clients, 4, 1, 64),
    shards: intFlag('shards', values.shards, 4, 1, 1024),
    quiesceMs: intFlag('quiesce-ms', values['quiesce-ms'], 8_000, 0, 600_000),
  };
  if (values.results !== undefined) options.resultsDir = values.results;
  return options;
}

async function main(): Promise<number> {
  let options: JepsenOptions;
  try {
    options = parseCli(process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n${(err as Error).message === usage ? '' : usage + '\n'}`);
    return 2;
  }
  try {
    const { report, dir } = await runJepsen(options);
    const { summaryText } = await import('./report.js');
    process.stdout.write(summaryText(report));
    process.stdout.write(`report: ${dir}\n`);
    if (!report.valid) process.stdout.write(`FAILED: reproduce with --seed ${options.seed} (nodes' logs kept in ${dir}/logs)\n`);
    return report.valid ? 0 : 1;
  } catch (err) {
    process.stderr.write(`jepsen-lite: run failed (seed ${options.seed}): ${(err as Error).stack ?? String(err)}\n`);
    return 1;
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().then((code) => process.exit(code));
}
