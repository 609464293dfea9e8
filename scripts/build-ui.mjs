#!/usr/bin/env node
// Builds the dashboard (src/ui) into dist/ui: index.html, assets/NAME-HASH.{js,css,svg} and manifest.json (each
// file's path under /ui/ and its Content-Type), which the node serves at /ui (src/http/ui.ts) and
// scripts/build-binary.mjs embeds in the single executable. Type-checks src/ui first (its own tsconfig: DOM types),
// then bundles with esbuild: Preact, htm and uPlot go into the one script, uPlot's CSS into the one stylesheet, so
// the page loads nothing from anywhere but the node.
//
//   node scripts/build-ui.mjs [--out-dir DIR]     (npm run build runs it after tsc)
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import * as esbuild from 'esbuild';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const src = join(root, 'src', 'ui');
const types = { '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8', '.svg': 'image/svg+xml', '.html': 'text/html; charset=utf-8' };

function fail(message) {
  process.stderr.write(`build-ui: ${message}\n`);
  process.exit(1);
}

function typeOf(path) {
  const ext = path.slice(path.lastIndexOf('.'));
  return types[ext] ?? fail(`no Content-Type for ${path}`);
}

function hashed(name, bytes) {
  const dot = name.lastIndexOf('.');
  const hash = createHash('sha256').update(bytes).digest('base64url').slice(0, 10);
  return `${name.slice(0, dot)}-${hash}${name.slice(dot)}`;
}

function typecheck() {
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  const r = spawnSync(process.execPath, [tsc, '-p', join(src, 'tsconfig.json')], { encoding: 'utf8' });
  if (r.status !== 0) fail(`src/ui does not type-check:\n${r.stdout}${r.stderr}`);
}

async function bundle() {
  const result = await esbuild.build({
    entryPoints: { app: join(src, 'main.ts'), app_style: join(src, 'style.css') },
    bundle: true,
    minify: process.env.UI_MINIFY !== '0',
    format: 'esm',
    target: ['chrome109', 'firefox115', 'safari16'],
    write: false,
    outdir: 'assets',
    entryNames: '[name]-[hash]',
    legalComments: 'eof',
    logLevel: 'silent',
    absWorkingDir: root,
  }).catch((err) => fail(`esbuild failed:\n${err.message}`));
  if (result.warnings.length > 0) {
    const text = await esbuild.formatMessages(result.warnings, { kind: 'warning' });
    fail(`esbuild warnings:\n${text.join('')}`);
  }
  return result.outputFiles.map((f) => ({ path: `assets/${f.path.split('/').pop()}`, bytes: f.contents }));
}

async function main() {
  const { values: args } = parseArgs({ options: { 'out-dir': { type: 'string', default: join(root, 'dist', 'ui') } } });
  const out = resolve(args['out-dir']);
  typecheck();
  const files = await bundle();
  const icon = readFileSync(join(src, 'icon.svg'));
  files.push({ path: `assets/${hashed('icon.svg', icon)}`, bytes: icon });
  const find = (re) => files.find((f) => re.test(f.path))?.path ?? fail(`no output file matching ${re}`);
  const index = readFileSync(join(src, 'index.html'), 'utf8')
    .replace('{{js}}', find(/^assets\/app-.*\.js$/))
    .replace('{{css}}', find(/^assets\/app_style-.*\.css$/))
    .replace('{{icon}}', find(/^assets\/icon-.*\.svg$/));
  if (index.includes('{{')) fail('index.html has a placeholder left');
  files.push({ path: 'index.html', bytes: Buffer.from(index) });
  rmSync(out, { recursive: true, force: true });
  mkdirSync(join(out, 'assets'), { recursive: true });
  for (const f of files) writeFileSync(join(out, f.path), f.bytes);
  const manifest = { files: Object.fromEntries(files.map((f) => [f.path, typeOf(f.path)])) };
  writeFileSync(join(out, 'manifest.json'), JSON.stringify(manifest, null, 2) + '\n');
  const kib = files.reduce((n, f) => n + f.bytes.length, 0) / 1024;
  if (process.env.npm_config_loglevel !== 'silent') process.stderr.write(`build-ui: ${files.length} files, ${kib.toFixed(0)} KiB in ${out}\n`);
}

await main();
