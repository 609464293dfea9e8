#!/usr/bin/env node
// Holds the layers of docs/design.md: a file of src/, cmd/ or bench/ imports only from its own folder or from a
// folder of a lower layer, so every dependency points down and no two folders can import each other. Folders of
// one layer stay independent of each other. Every import counts, `import type` too: a type-only edge still
// ties the folders together, so an interface both sides need lives in the lower one.
//
//   node scripts/lint-layers.mjs [ROOT]     (ROOT defaults to the repository; the tests run it on a temp tree)
//
// Fails (exit 1) with one line per offending import, naming both files.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, posix, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

/** Lowest first. Change it together with the drawing in docs/design.md, "Layers". */
const layers = [
  { name: 'core', folders: ['src/core'] },
  { name: 'pure cores, platform', folders: ['src/raft', 'src/timerwheel', 'src/scheduler', 'src/placement', 'src/platform'] },
  { name: 'services', folders: ['src/store', 'src/dispatch', 'src/metrics', 'src/http/peer', 'src/http', 'src/client'] },
  // Pure (lint-pure.mjs): above the services only for their types and pure functions (Delivery, retryDelayMs).
  { name: 'node core', folders: ['src/nodecore'] },
  { name: 'node', folders: ['src/node'] },
  { name: 'bench', folders: ['bench'] },
  { name: 'program', folders: ['cmd', 'src/ui'] },
];
const roots = ['src', 'cmd', 'bench'];
const sourceFile = /\.(ts|mts|cts|js|mjs|cjs)$/;
// Tests and the shared test suites they run may reach anywhere: they are not part of the program.
const testFile = /\.(test|contract)\.ts$|\.contract\.test\.ts$/;

const root = resolve(process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), '..'));

/** [folder, layer index], longest folder first, so src/http/peer wins over src/http. */
const folderLayers = layers
  .flatMap((layer, i) => layer.folders.map((folder) => [folder, i]))
  .sort((a, b) => b[0].length - a[0].length);

function folderOf(path) {
  for (const [folder, layer] of folderLayers) {
    if (path === folder || path.startsWith(folder + '/')) return { folder, layer };
  }
  return null;
}

function* files(dir) {
  let entries;
  try {
    entries = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of entries.sort()) {
    if (name === 'node_modules' || name === 'testdata' || name === 'results') continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* files(path);
    else if (sourceFile.test(name) && !testFile.test(name) && !name.endsWith('.d.ts')) yield path;
  }
}

/** A repository path with forward slashes; code built into dist/ is checked as its source. */
function repoPath(absolute) {
  const path = relative(root, absolute).split(sep).join(posix.sep);
  return path.startsWith('dist/') ? path.slice('dist/'.length) : path;
}

/** The reason an import from `from` to `to` breaks the layers, or null when it points down or stays home. */
function violation(fromPath, from, toPath) {
  const to = folderOf(toPath);
  if (to === null) return `imports ${toPath}, which is in no layer (scripts/lint-layers.mjs lists them)`;
  if (to.folder === from.folder) return null;
  const a = `${from.folder} (layer ${from.layer}, ${layers[from.layer].name})`;
  const b = `${to.folder} (layer ${to.layer}, ${layers[to.layer].name})`;
  if (to.layer > from.layer) return `imports ${toPath}: ${a} may not import ${b}, which is above it`;
  if (to.layer === from.layer) return `imports ${toPath}: ${a} may not import ${b}, a folder of the same layer`;
  return null;
}

const problems = [];
for (const top of roots) {
  for (const absolute of files(join(root, top))) {
    const fromPath = repoPath(absolute);
    const from = folderOf(fromPath);
    if (from === null) {
      problems.push(`${fromPath}: is in no layer: add its folder to scripts/lint-layers.mjs and docs/design.md`);
      continue;
    }
    const text = readFileSync(absolute, 'utf8');
    const { importedFiles } = ts.preProcessFile(text, true, true);
    for (const { fileName, pos } of importedFiles) {
      if (!fileName.startsWith('.')) continue; // a package or a built-in: below every layer
      const toPath = repoPath(resolve(dirname(absolute), fileName)).replace(/\.js$/, '.ts');
      const reason = toPath.startsWith('..') ? `imports ${fileName}, outside the repository` : violation(fromPath, from, toPath);
      if (reason !== null) problems.push(`${fromPath}:${text.slice(0, pos).split('\n').length}: ${reason}`);
    }
  }
}
if (problems.length > 0) {
  for (const p of problems) console.error(p);
  console.error(`lint-layers: ${problems.length} import(s) against the layers (docs/design.md, "Layers")`);
  process.exit(1);
}
