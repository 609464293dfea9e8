#!/usr/bin/env node
// Holds the line of docs/design.md: the pure folders (src/raft, src/timerwheel, src/scheduler, src/placement,
// src/nodecore) take time, randomness and IO only through src/core. Fails (exit 1) on any forbidden use outside *.test.ts files.
// src/nodecore sits above the services for their types: its value imports may reach only pure code (`valueImports`),
// so no IO comes in through a module it loads.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, sep } from 'node:path';

const pure = ['src/raft', 'src/timerwheel', 'src/scheduler', 'src/placement', 'src/nodecore'];
/** Where src/nodecore may import values from (type-only imports may reach any lower layer). */
const valueImports = [/^src\/(core|raft|timerwheel|scheduler|placement|nodecore)\//, /^src\/dispatch\/backoff\.ts$/];
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

/** A value import of src/nodecore that may bring IO along (a type-only import is erased). */
function checkValueImports(path, text) {
  let n = 0;
  for (const m of text.matchAll(/^\s*import\s+(type\s+)?[^;]*?from\s+['"]([^'"]+)['"]/gm)) {
    const target = join(dirname(path), m[2]).split(sep).join('/').replace(/\.js$/, '.ts');
    if (m[1] !== undefined || valueImports.some((re) => re.test(target))) continue;
    const line = text.slice(0, m.index).split('\n').length;
    console.error(`${path}:${line}: imports values from ${m[2]}: src/nodecore may import values only from pure code (import type for the rest)`);
    n++;
  }
  return n;
}

let failures = 0;
for (const dir of pure) {
  for (const path of files(dir)) {
    const text = readFileSync(path, 'utf8');
    if (path.startsWith('src/nodecore')) failures += checkValueImports(path, text);
    const lines = text.split('\n');
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
