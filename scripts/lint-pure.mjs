#!/usr/bin/env node
// Holds the line of docs/design.md: the pure folders (src/raft, src/timerwheel, src/scheduler) take time,
// randomness and IO only through src/core. Fails (exit 1) on any forbidden use outside *.test.ts files.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

const pure = ['src/raft', 'src/timerwheel', 'src/scheduler'];
const forbidden = [
  [/\bDate\.now\s*\(/, 'Date.now()'],
  [/\bnew Date\s*\(\s*\)/, 'new Date()'],
  [/\bsetTimeout\s*\(/, 'setTimeout'],
  [/\bsetInterval\s*\(/, 'setInterval'],
  [/\bsetImmediate\s*\(/, 'setImmediate'],
  [/\bqueueMicrotask\s*\(/, 'queueMicrotask'],
  [/\bMath\.random\s*\(/, 'Math.random()'],
  [/\bperformance\.now\s*\(/, 'performance.now()'],
  [/\bprocess\./, 'process.*'],
  [/from\s+['"]node:/, "import from 'node:*'"],
  [/require\(\s*['"]node:/, "require('node:*')"],
  [/from\s+['"](fs|path|http|http2|net|os|crypto|child_process|worker_threads)['"]/, 'a node built-in'],
  [/\basync\s+function\b|\basync\s*\(/, 'async (the pure core is synchronous)'],
];

function* files(dir) {
  let entries = [];
  try {
    entries = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of entries) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* files(path);
    else if (name.endsWith('.ts') && !name.endsWith('.test.ts') && !name.endsWith('.contract.ts')) yield path;
  }
}

let failures = 0;
for (const dir of pure) {
  for (const path of files(dir)) {
    const lines = readFileSync(path, 'utf8').split('\n');
    lines.forEach((line, i) => {
      const code = line.replace(/\/\/.*$/, '');
      if (/^\s*\*/.test(code) || /^\s*\/\*/.test(code)) return; // doc comments may name what they avoid
      for (const [re, what] of forbidden) {
        if (re.test(code)) {
          console.error(`${path}:${i + 1}: ${what} is not allowed in a pure folder (go through src/core)`);
          failures++;
        }
      }
    });
  }
}
if (failures > 0) {
  console.error(`lint-pure: ${failures} violation(s)`);
  process.exit(1);
}
