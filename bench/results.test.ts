import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command, CommanderError } from 'commander';
import { afterEach, describe, expect, it } from 'vitest';
import { summarize } from './histogram.js';
import { registerBenchCommand } from './cli.js';
import { startFixtureNode, type FixtureNode } from './fixture-node.js';
import { evaluateTargets, targetsFor, writeResult, type BenchResult, type Figures } from './results.js';
import { formatTable } from './table.js';
import { freePort } from './node-process.js';

const dirs: string[] = [];
let fixture: FixtureNode | null = null;
afterEach(async () => {
  await fixture?.close();
  fixture = null;
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function tempDir(): Promise<string> {
  const d = await mkdtemp(join(tmpdir(), 'punctual-bench-test-'));
  dirs.push(d);
  return d;
}

function figures(overrides: Partial<Figures> = {}): Figures {
  return {
    submitted: 10, accepted: 10, rejected: 0, submitErrors: {}, submitDurationMs: 2, submitTimedOut: false, acceptedPerS: 5000, requests: 1, requestLatency: summarize(Float64Array.from([2])),
    delivered: 10, deliveredPerS: 1000, lateness: summarize(Float64Array.from([0.5, 0.7, 1.2, 3, 4.5])),
    early: 0, lost: 0, drainOutcome: 'all delivered', duplicates: 0, malformed: 0, foreign: 0, deliveredWithinMs: null, backlogMax: 0,
    ackedAfterDue: 0, nodePeakRssBytes: [50 * 1024 * 1024], benchPeakRssBytes: 80 * 1024 * 1024, ...overrides,
  };
}

function result(f: Figures): BenchResult {
  const targets = evaluateTargets(f, targetsFor('steady'));
  return {
    scenario: 'steady', startedAt: '2026-01-02T03:04:05.678Z', parameters: { ratePerS: 5000, durationS: 10 },
    servers: { mode: 'spawned', urls: ['http://127.0.0.1:1'] }, gitCommit: 'abc', nodeVersion: 'v20.20.2',
    cpuCount: 2, cpuModel: 'test', loadAverage: [0.5, 0.4, 0.3], figures: f, targets, pass: targets.every((t) => t.pass),
  };
}

describe('targets', () => {
  it('passes and misses each target against the issue figures; an unmeasured figure is a miss', () => {
    const good = evaluateTargets(figures(), targetsFor('steady'));
    expect(good.map((t) => [t.figure, t.actual, t.pass])).toEqual([
      ['latenessP50Ms', 1.2, false],
      ['latenessP99Ms', 4.5, true],
      ['early', 0, true],
      ['lost', 0, true],
    ]);
    const none = evaluateTargets(figures({ acceptedPerS: null }), targetsFor('submit'));
    expect(none[0]).toMatchObject({ figure: 'acceptedPerS', value: 8000, actual: null, pass: false });
    const batch = evaluateTargets(figures({ acceptedPerS: 50_000, lost: 1 }), targetsFor('submit-batch'));
    expect(batch.map((t) => t.pass)).toEqual([true, true, false]);
    expect(targetsFor('hot-instant')[0]).toMatchObject({ figure: 'deliveredWithinMs', op: '<=', value: 4000 });
  });

  it('a steady rate is held to its tier of the issue: 1,000/s, 5,000/s, or delivered at the rate above', () => {
    const at1000 = evaluateTargets(figures(), targetsFor('steady', 1_000));
    expect(at1000.map((t) => [t.label, t.value, t.actual, t.pass])).toEqual([
      ['steady 1,000/s lateness p99', 2, 4.5, false],
      ['steady 1,000/s lateness p999', 5, 4.5, true],
      ['no callback before its time', 0, 0, true],
      ['every accepted job delivered', 0, 0, true],
    ]);
    expect(targetsFor('steady', 2_500).map((t) => t.label).slice(0, 2)).toEqual(['steady 2,500/s lateness p50', 'steady 2,500/s lateness p99']);
    const at10k = evaluateTargets(figures({ deliveredPerS: 9_950 }), targetsFor('steady', 10_000));
    expect(at10k.slice(0, 2).map((t) => [t.figure, t.value, t.pass])).toEqual([
      ['deliveredPerS', 9_900, true],
      ['latenessP99Ms', 20, true],
    ]);
    expect(evaluateTargets(figures({ deliveredPerS: 6_221 }), targetsFor('steady', 10_000))[0]!.pass).toBe(false);
  });
});

describe('results file', () => {
  it('writes <scenario>-<time>.json and an identical latest-<scenario>.json with the expected shape', async () => {
    const out = join(await tempDir(), 'nested', 'results');
    const r = result(figures());
    const files = await writeResult(r, out);
    expect(files.path).toBe(join(out, 'steady-2026-01-02T03-04-05-678Z.json'));
    expect(files.latestPath).toBe(join(out, 'latest-steady.json'));
    const written = JSON.parse(await readFile(files.path, 'utf8')) as BenchResult;
    expect(await readFile(files.latestPath, 'utf8')).toBe(await readFile(files.path, 'utf8'));
    expect(Object.keys(written).sort()).toEqual(
      ['cpuCount', 'cpuModel', 'figures', 'gitCommit', 'loadAverage', 'nodeVersion', 'parameters', 'pass', 'scenario', 'servers', 'startedAt', 'targets'].sort(),
    );
    expect(written.figures.lateness).toEqual({ count: 5, minMs: 0.5, meanMs: 1.98, p50Ms: 1.2, p90Ms: 4.5, p99Ms: 4.5, p999Ms: 4.5, maxMs: 4.5 });
    expect(written.targets[0]).toEqual({ figure: 'latenessP50Ms', op: '<=', value: 1, label: 'steady 5,000/s lateness p50', actual: 1.2, pass: false });
    expect(written.pass).toBe(false);
  });

  it('prints a table with every figure and one PASS/MISS line per target', () => {
    const text = formatTable(result(figures({ lost: 3 })));
    expect(text).toContain('lateness p50 / p90');
    expect(text).toMatch(/lost \(must be 0\)\s+3/);
    expect(text).toContain('MISS  steady 5,000/s lateness p50');
    expect(text).toContain('PASS  steady 5,000/s lateness p99');
    expect(text).toContain('MISS  every accepted job delivered');
    expect(text).toContain('50.0 MiB');
  });
});

describe('bench command', () => {
  function program(): { cmd: Command; out: string[]; err: string[] } {
    const out: string[] = [];
    const err: string[] = [];
    const cmd = new Command('punctual').exitOverride().configureOutput({ writeOut: (s) => out.push(s), writeErr: (s) => err.push(s) });
    registerBenchCommand(cmd);
    return { cmd, out, err };
  }

  it('runs a scenario against --server, prints the JSON and writes the results files', async () => {
    fixture = await startFixtureNode();
    const outDir = await tempDir();
    const { cmd, out } = program();
    await cmd.parseAsync(
      ['bench', '--scenario', 'submit-batch', '--server', fixture.url, '--count', '40', '--batch-size', '10',
        '--lead-ms', '300', '--drain-timeout-s', '1', '--out', outDir, '--json'],
      { from: 'user' },
    );
    const printed = JSON.parse(out.join('')) as BenchResult;
    expect(printed.scenario).toBe('submit-batch');
    expect(printed.parameters).toMatchObject({ count: 40, batchSize: 10, leadMs: 300, nodes: 1, receiver: 'thread' });
    expect(printed.figures).toMatchObject({ accepted: 40, delivered: 40, lost: 0, early: 0 });
    expect(fixture.routes['POST /v1/jobs:batch']).toBe(4);
    const names = (await readdir(outDir)).sort();
    expect(names).toHaveLength(2);
    expect(names[0]).toBe('latest-submit-batch.json');
    expect(names[1]).toMatch(/^submit-batch-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z\.json$/);
  });

  it('--receiver-in-process runs the receiver on the bench loop and says so in the result', async () => {
    fixture = await startFixtureNode();
    const outDir = await tempDir();
    const { cmd, out } = program();
    await cmd.parseAsync(
      ['bench', '--scenario', 'submit-batch', '--server', fixture.url, '--count', '20', '--batch-size', '10',
        '--lead-ms', '300', '--drain-timeout-s', '1', '--out', outDir, '--receiver-in-process', '--json'],
      { from: 'user' },
    );
    const printed = JSON.parse(out.join('')) as BenchResult;
    expect(printed.parameters).toMatchObject({ receiver: 'in-process' });
    expect(printed.figures).toMatchObject({ accepted: 20, delivered: 20, lost: 0, early: 0 });
  });

  it('fails with exit code 1 and one line when the server cannot be reached', async () => {
    const port = await freePort();
    const { cmd, err } = program();
    const run = cmd.parseAsync(['bench', '--scenario', 'submit', '--server', `http://127.0.0.1:${port}`, '--out', await tempDir()], {
      from: 'user',
    });
    await expect(run).rejects.toMatchObject({ exitCode: 1 });
    expect(err.join('')).toMatch(/punctual: bench submit failed: .*ECONNREFUSED/);
  });

  it('refuses an unknown scenario and a bad number (commander usage errors)', async () => {
    const a = program();
    await expect(a.cmd.parseAsync(['bench', '--scenario', 'nope'], { from: 'user' })).rejects.toBeInstanceOf(CommanderError);
    expect(a.err.join('')).toContain('nope');
    const b = program();
    await expect(b.cmd.parseAsync(['bench', '--scenario', 'steady', '--rate', '-3'], { from: 'user' })).rejects.toBeInstanceOf(CommanderError);
    expect(b.err.join('')).toContain('expected an integer');
  });
});
