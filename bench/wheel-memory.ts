/**
 * Memory and throughput of src/timerwheel with many timers (default 1,000,000 spread over the next hour).
 *
 *   npm run build && node --expose-gc dist/bench/wheel-memory.js [--timers=N] [--wheel-size=64]
 *
 * Memory is heapUsed + arrayBuffers (the entry pool lives in typed arrays, whose backing stores V8 counts outside
 * the JS heap), measured after forced GCs, once with the key strings allocated beforehand (excluded) and once
 * with the wheel holding the only reference to freshly made keys (included). Keys are flat one-byte strings like
 * `job-000123@1733043600000`, made through TextDecoder as a body parser or SQLite driver would make them.
 * Prints a summary and writes bench/results/wheel-memory-<timestamp>.json. Figures are reported, never asserted.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Prng } from '../src/core/prng.js';
import { TimerWheel } from '../src/timerwheel/wheel.js';

const hourMs = 60 * 60 * 1000;
const startMs = 1_733_043_600_000;

interface Args {
  timers: number;
  wheelSize: number;
  seed: number;
}

function parseArgs(argv: string[]): Args {
  const args: Args = { timers: 1_000_000, wheelSize: 64, seed: 42 };
  for (const arg of argv) {
    const [name, value] = arg.replace(/^--/, '').split('=');
    if (name === 'timers') args.timers = Number(value);
    else if (name === 'wheel-size') args.wheelSize = Number(value);
    else if (name === 'seed') args.seed = Number(value);
    else throw new Error(`unknown argument ${arg}`);
  }
  return args;
}

const gc = (globalThis as { gc?: () => void }).gc;

/** Bytes in use after full collections: JS heap + typed-array backing stores. */
function settledBytes(): { heapUsed: number; arrayBuffers: number; total: number } {
  if (gc === undefined) throw new Error('run with node --expose-gc');
  for (let i = 0; i < 4; i++) gc();
  const { heapUsed, arrayBuffers } = process.memoryUsage();
  return { heapUsed, arrayBuffers, total: heapUsed + arrayBuffers };
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
/** A flat sequential string (a template literal alone would make a rope that costs more than a parsed id). */
function makeKey(i: number): string {
  return decoder.decode(encoder.encode(`job-${String(i).padStart(6, '0')}@${startMs}`));
}

function seconds(fromMs: number): number {
  return (performance.now() - fromMs) / 1000;
}

function perTimer(bytes: number, n: number): number {
  return Math.round((bytes / n) * 10) / 10;
}

/** Phase 1: keys exist before the wheel, so the delta is the wheel's own cost. Then cancel, replace, fire. */
function measureExcludingKeys(args: Args, deadlines: Float64Array) {
  const n = args.timers;
  const keys: string[] = [];
  for (let i = 0; i < n; i++) keys.push(makeKey(i));
  const before = settledBytes();
  let wheel: TimerWheel<string> | null = new TimerWheel<string>(startMs, { wheelSize: args.wheelSize });
  let t = performance.now();
  for (let i = 0; i < n; i++) wheel.add(keys[i], deadlines[i]);
  const addSec = seconds(t);
  const after = settledBytes();
  const levels = wheel.levels;

  const tenth = Math.floor(n / 10);
  t = performance.now();
  for (let i = 0; i < tenth; i++) wheel.cancel(keys[i * 10]);
  const cancelSec = seconds(t);
  t = performance.now();
  for (let i = 0; i < tenth; i++) wheel.add(keys[i * 10 + 1], deadlines[i * 10]);
  const replaceSec = seconds(t);
  const pending = wheel.size;

  t = performance.now();
  let fired = 0;
  let advanceCalls = 0;
  for (let now = startMs; now <= startMs + hourMs; now++, advanceCalls++) fired += wheel.advanceTo(now).length;
  const advanceSec = seconds(t);
  if (fired !== pending || wheel.size !== 0) throw new Error(`fired ${fired} of ${pending} timers`);
  wheel = null;
  return {
    bytesPerTimer: perTimer(after.total - before.total, n),
    heapBytesPerTimer: perTimer(after.heapUsed - before.heapUsed, n),
    arrayBufferBytesPerTimer: perTimer(after.arrayBuffers - before.arrayBuffers, n),
    levels,
    addPerSec: Math.round(n / addSec),
    cancelPerSec: Math.round(tenth / cancelSec),
    replacePerSec: Math.round(tenth / replaceSec),
    firePerSec: Math.round(fired / advanceSec),
    advanceCallsPerSec: Math.round(advanceCalls / advanceSec),
    addAndFirePerSec: Math.round(n / (addSec + advanceSec)),
    advanceCalls,
    fired,
  };
}

/** Phase 2: the wheel holds the only reference to each key, so the delta includes the strings. */
function measureIncludingKeys(args: Args, deadlines: Float64Array) {
  const n = args.timers;
  const before = settledBytes();
  const wheel = new TimerWheel<string>(startMs, { wheelSize: args.wheelSize });
  for (let i = 0; i < n; i++) wheel.add(makeKey(i), deadlines[i]);
  const after = settledBytes();
  if (wheel.size !== n) throw new Error('lost timers');
  return { bytesPerTimer: perTimer(after.total - before.total, n) };
}

function main(): void {
  const args = parseArgs(process.argv.slice(2));
  const rand = new Prng(args.seed);
  const deadlines = new Float64Array(args.timers);
  for (let i = 0; i < args.timers; i++) deadlines[i] = startMs + 1 + rand.int(hourMs);

  const excluding = measureExcludingKeys(args, deadlines);
  const including = measureIncludingKeys(args, deadlines);
  const result = {
    bench: 'wheel-memory',
    at: new Date().toISOString(),
    node: process.version,
    timers: args.timers,
    spreadMs: hourMs,
    tickMs: 1,
    wheelSize: args.wheelSize,
    seed: args.seed,
    targetBytesPerTimer: 250,
    bytesPerTimerExcludingKeys: excluding.bytesPerTimer,
    bytesPerTimerIncludingKeys: including.bytesPerTimer,
    excluding,
  };
  const dir = fileURLToPath(new URL('../../bench/results/', import.meta.url));
  mkdirSync(dir, { recursive: true });
  const file = `${dir}wheel-memory-${result.at.replace(/[:.]/g, '-')}.json`;
  writeFileSync(file, JSON.stringify(result, null, 2) + '\n');
  console.log(JSON.stringify(result, null, 2));
  console.log(`written to ${file}`);
}

main();
