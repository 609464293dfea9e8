#!/usr/bin/env node
// Builds dist/punctual-linux-x64: one file, Node's own single executable (SEA) with the bundled program, the
// better-sqlite3 addon and build facts embedded as assets. Also writes dist/punctual-linux-x64.sha256.
// Fails loudly when something would break the executable at run time: a dynamic import() of a built-in, a
// dependency left outside the bundle, an addon that does not load in this Node, a smoke run that fails.
//
//   node scripts/build-binary.mjs [--out-dir DIR] [--addon FILE --addon-origin TEXT] [--addon-chroot ROOT]
//
// --addon FILE (or PUNCTUAL_SQLITE_ADDON): embed this better_sqlite3.node instead of node_modules' copy.
// --addon-chroot ROOT (root only): compile the addon inside a Debian root made with debootstrap, which lowers
//   the glibc the executable needs (docs/install.md, "Building the binary"). How it works: src/platform/README.md.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync,
  statSync, writeFileSync } from 'node:fs';
import { isBuiltin } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import * as esbuild from 'esbuild';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const seaFuse = 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2';
// The same names as src/platform/sea.ts assetNames (and firingThread: src/dispatch/firing-port.ts firingThreadAsset).
const assets = { buildInfo: 'build-info.json', sqliteAddon: 'better_sqlite3.node', sqliteModule: 'better-sqlite3.cjs', uiPrefix: 'ui/', firingThread: 'firing-thread.cjs' };
const binaryName = 'punctual-linux-x64';

// Built-ins of later Node versions that a dependency only probes for, lazily and inside try (undici's
// runtime-features.js and its opt-in SQLite cache store): absent in Node 20 and never loaded by punctual.
const laterBuiltins = new Set(['node:sqlite']);

class BuildError extends Error {}

function fail(message) {
  throw new BuildError(message);
}

function step(message) {
  process.stderr.write(`build-binary: ${message}\n`);
}

function sha256(bytes) {
  return createHash('sha256').update(bytes).digest('hex');
}

function preflight() {
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    fail(`builds ${binaryName} only on linux x64 (this is ${process.platform} ${process.arch})`);
  }
  const [major, minor] = process.versions.node.split('.').map(Number);
  if (major !== 20 || minor < 12) fail(`needs Node 20.12+ (node:sea assets), the project's Node; this is ${process.version}`);
  if ((process.env.NODE_OPTIONS ?? '') !== '') fail('unset NODE_OPTIONS: it would shape the blob and the smoke run');
  for (const tool of ['strip', 'objdump']) {
    if (spawnSync(tool, ['--version']).status !== 0) fail(`needs ${tool} (binutils) on PATH`);
  }
}

/** esbuild, then the checks that catch what would only fail when the executable runs. */
async function bundle(entry, outfile, alias) {
  const result = await esbuild.build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    platform: 'node',
    target: 'node20',
    format: 'cjs',
    alias,
    // A CommonJS bundle has no module URL: say so plainly (code that needs one checks runningAsSea() first).
    define: { 'import.meta.url': 'undefined' },
    metafile: true,
    logLevel: 'silent',
    absWorkingDir: root,
  }).catch((err) => fail(`esbuild failed for ${entry}:\n${err.message}`));
  if (result.warnings.length > 0) {
    const text = await esbuild.formatMessages(result.warnings, { kind: 'warning' });
    fail(`esbuild warnings for ${entry} (each one is a run-time risk in a single executable):\n${text.join('')}`);
  }
  const problems = [];
  for (const [file, input] of Object.entries(result.metafile.inputs)) {
    if (file.endsWith('.node')) problems.push(`${file}: a native addon inside the bundle`);
    for (const imp of input.imports) {
      if (!imp.external) continue;
      if (laterBuiltins.has(imp.path) && imp.kind === 'require-call') continue;
      if (!isBuiltin(imp.path)) problems.push(`${file}: ${imp.path} is left outside the bundle (unembedded dependency)`);
      else if (imp.kind === 'dynamic-import') {
        problems.push(`${file}: import('${imp.path}') (a dynamic import of a built-in crashes a code-cache executable: import it statically)`);
      }
    }
  }
  if (problems.length > 0) fail(`the bundle of ${entry} would break at run time:\n  ${problems.join('\n  ')}`);
  return Object.keys(result.metafile.inputs).length;
}

/** The highest GLIBC_x.y version an ELF file asks for. */
function glibcFloor(file) {
  const out = execFileSync('objdump', ['-T', file], { encoding: 'utf8', maxBuffer: 64 << 20 });
  const versions = [...out.matchAll(/GLIBC_(\d+)\.(\d+)(?:\.(\d+))?/g)].map((m) => [+m[1], +m[2], +(m[3] ?? 0)]);
  if (versions.length === 0) fail(`${file}: no GLIBC symbol versions found (not a glibc ELF file?)`);
  versions.sort((a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2]);
  const [major, minor, patch] = versions[versions.length - 1];
  return patch === 0 ? `${major}.${minor}` : `${major}.${minor}.${patch}`;
}

function maxVersion(a, b) {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < 3; i++) if ((pa[i] ?? 0) !== (pb[i] ?? 0)) return (pa[i] ?? 0) > (pb[i] ?? 0) ? a : b;
  return a;
}

/** The addon must load in exactly this Node (same ABI): checked in a child so a crash is a message here. */
function checkAddonLoads(addon) {
  const probe = `const m = { exports: {} }; process.dlopen(m, ${JSON.stringify(addon)});
if (typeof m.exports.Database !== 'function') { console.error('no Database export'); process.exit(3); }`;
  const r = spawnSync(process.execPath, ['-e', probe], { encoding: 'utf8', env: { PATH: process.env.PATH } });
  if (r.status !== 0) {
    fail(`the SQLite addon ${addon} does not load in ${process.version} (ABI ${process.versions.modules}): ` +
      `${(r.stderr || r.error?.message || '').trim().split('\n').slice(0, 3).join(' ')}`);
  }
}

function gitFacts() {
  const git = (args) => {
    const r = spawnSync('git', args, { cwd: root, encoding: 'utf8' });
    return r.status === 0 ? r.stdout.trim() : null;
  };
  // A build without .git (a container build context) passes the commit in; otherwise git answers.
  const given = (process.env.PUNCTUAL_BUILD_COMMIT ?? '').toLowerCase();
  if (/^[0-9a-f]{40}$/.test(given)) return { commit: given, dirty: false };
  const commit = git(['rev-parse', 'HEAD']) ?? 'unknown';
  const status = git(['status', '--porcelain', '--untracked-files=no']);
  return { commit, dirty: status === null ? false : status !== '' };
}

// Binds the libm symbols that glibc 2.29 versioned anew (exp, log, log2, pow) to their older versions, which
// every later glibc still carries, so the addon needs no more than glibc 2.28: Node 20's own floor.
const glibcCompatHeader = `#if defined(__x86_64__)
__asm__(".symver exp,exp@GLIBC_2.2.5");
__asm__(".symver log,log@GLIBC_2.2.5");
__asm__(".symver log2,log2@GLIBC_2.2.5");
__asm__(".symver pow,pow@GLIBC_2.2.5");
#endif
`;

/** Compiles better-sqlite3 inside a Debian root (with g++, make, python3) using this Node and its headers. */
function compileAddonInChroot(chroot) {
  if (process.getuid?.() !== 0) fail('--addon-chroot needs root (chroot)');
  const headers = resolve(dirname(process.execPath), '..', 'include', 'node');
  if (!existsSync(join(headers, 'node_api.h'))) fail(`no Node headers at ${headers}`);
  const nodeGyp = resolve(dirname(process.execPath), '..', 'lib', 'node_modules', 'npm', 'node_modules');
  if (!existsSync(join(nodeGyp, 'node-gyp', 'bin', 'node-gyp.js'))) fail(`no node-gyp at ${nodeGyp}/node-gyp`);
  const work = join(chroot, 'punctual-build');
  rmSync(work, { recursive: true, force: true });
  mkdirSync(join(work, 'include'), { recursive: true });
  mkdirSync(join(work, 'bin'), { recursive: true });
  copyFileSync(process.execPath, join(work, 'bin', 'node')); // on PATH too: a gyp action of better-sqlite3 runs node
  cpSync(headers, join(work, 'include', 'node'), { recursive: true });
  cpSync(nodeGyp, join(work, 'npm-modules'), { recursive: true });
  const src = join(root, 'node_modules', 'better-sqlite3');
  for (const part of ['binding.gyp', 'deps', 'src', 'lib', 'package.json']) {
    cpSync(join(src, part), join(work, 'better-sqlite3', part), { recursive: true });
  }
  writeFileSync(join(work, 'glibc-compat.h'), glibcCompatHeader);
  const flags = '-include /punctual-build/glibc-compat.h';
  step(`compiling better-sqlite3 in ${chroot} (about 2 minutes)`);
  const r = spawnSync('chroot', [chroot, '/usr/bin/env', '-i', 'PATH=/punctual-build/bin:/usr/bin:/bin', 'HOME=/punctual-build', 'NODE_PATH=/punctual-build/npm-modules',
    `CFLAGS=${flags}`, `CXXFLAGS=${flags}`, '/punctual-build/bin/node',
    '/punctual-build/npm-modules/node-gyp/bin/node-gyp.js', 'rebuild', '--release', '--nodedir=/punctual-build',
    '-j', '2', '--directory=/punctual-build/better-sqlite3'], { encoding: 'utf8', maxBuffer: 256 << 20 });
  if (r.status !== 0) fail(`node-gyp in ${chroot} failed:\n${(r.stdout + r.stderr).slice(-3000)}`);
  const osRelease = readFileSync(join(chroot, 'etc', 'os-release'), 'utf8').match(/^PRETTY_NAME="?([^"\n]*)/m);
  return {
    file: join(work, 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node'),
    origin: `${osRelease?.[1] ?? 'a chroot'} (chroot)`,
  };
}

function chooseAddon(args) {
  if (args['addon-chroot'] !== undefined) return compileAddonInChroot(resolve(args['addon-chroot']));
  const given = args.addon ?? process.env.PUNCTUAL_SQLITE_ADDON;
  if (given !== undefined && given !== '') {
    return { file: resolve(given), origin: args['addon-origin'] ?? `given file ${resolve(given)}` };
  }
  const file = join(root, 'node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node');
  let origin = 'the build host';
  try {
    origin = `the build host (${readFileSync('/etc/os-release', 'utf8').match(/^PRETTY_NAME="?([^"\n]*)/m)[1]})`;
  } catch {
    // keep the short form
  }
  return { file, origin };
}

function run(cmd, args, what) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, env: { ...process.env, NODE_OPTIONS: '' } });
  if (r.status !== 0) fail(`${what} failed (${cmd} ${args.join(' ')}):\n${(r.stdout ?? '') + (r.stderr ?? '')}${r.error ?? ''}`);
  return r.stdout;
}

/**
 * Builds the dashboard afresh (scripts/build-ui.mjs: a build from sources alone, the Dockerfile's, has no dist/ui),
 * then returns its manifest and every file it lists as SEA assets named `ui/PATH` (src/http/ui.ts reads them back).
 */
function uiAssets() {
  const dir = join(root, 'dist', 'ui');
  run(process.execPath, [join(root, 'scripts', 'build-ui.mjs'), '--out-dir', dir], 'building the dashboard');
  const manifest = join(dir, 'manifest.json');
  if (!existsSync(manifest)) fail(`no dashboard at ${dir} after scripts/build-ui.mjs`);
  const out = { [`${assets.uiPrefix}manifest.json`]: manifest };
  for (const path of Object.keys(JSON.parse(readFileSync(manifest, 'utf8')).files)) {
    if (!existsSync(join(dir, path))) fail(`the dashboard manifest names ${path}, missing from ${dir}`);
    out[`${assets.uiPrefix}${path}`] = join(dir, path);
  }
  return out;
}

/** Runs the new executable the way a user would, in a clean environment: doctor must pass, --version match. */
function smoke(binary, expectedVersion, work) {
  const home = mkdtempSync(join(work, 'home-'));
  const env = { PATH: '/nonexistent', HOME: home };
  const doctor = spawnSync(binary, ['doctor', '--json'], { encoding: 'utf8', env, cwd: home, timeout: 60_000 });
  if (doctor.status !== 0) {
    fail(`smoke run of ${binary} doctor failed (exit ${doctor.status}, signal ${doctor.signal}):\n${doctor.stdout}${doctor.stderr}`);
  }
  if (doctor.stderr.trim() !== '') fail(`smoke run printed on stderr (a warning at start?):\n${doctor.stderr}`);
  const version = spawnSync(binary, ['--version'], { encoding: 'utf8', env, cwd: home });
  if (version.status !== 0 || version.stdout.trim() !== expectedVersion) {
    fail(`smoke run: --version printed ${JSON.stringify(version.stdout)}, expected ${JSON.stringify(expectedVersion)}`);
  }
  return JSON.parse(doctor.stdout);
}

async function main() {
  const { values: args } = parseArgs({
    options: {
      'out-dir': { type: 'string', default: join(root, 'dist') },
      addon: { type: 'string' },
      'addon-origin': { type: 'string' },
      'addon-chroot': { type: 'string' },
      // tests only: bundle another entry to prove the checks refuse what would break at run time
      entry: { type: 'string', default: 'cmd/sea-main.ts' },
    },
  });
  const startedMs = performance.now();
  preflight();
  const outDir = resolve(args['out-dir']);
  mkdirSync(outDir, { recursive: true });
  const work = mkdtempSync(join(tmpdir(), 'punctual-binary-'));
  try {
    await build(args, outDir, work);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  step(`done in ${((performance.now() - startedMs) / 1000).toFixed(1)} s`);
}

async function build(args, outDir, work) {
  const stub = (name) => join(root, 'src', 'platform', 'stubs', name);
  const mainJs = join(work, 'punctual.cjs');
  const modules = await bundle(args.entry, mainJs, {
    'msgpackr-extract': stub('msgpackr-extract.cjs'),
    bindings: stub('bindings-main.cjs'),
  });
  const sqliteJs = join(work, assets.sqliteModule);
  await bundle('node_modules/better-sqlite3/lib/index.js', sqliteJs, { bindings: stub('bindings-beside.cjs') });
  // The firing thread's entry, started from its source (new Worker(source, { eval: true })): a single executable
  // has no module file beside it to start.
  const firingJs = join(work, assets.firingThread);
  await bundle('src/dispatch/firing-thread.ts', firingJs, {});
  step(`bundled ${modules} modules (${(statSync(mainJs).size / 1024).toFixed(0)} KiB), the firing thread ${(statSync(firingJs).size / 1024).toFixed(0)} KiB`);

  const addon = chooseAddon(args);
  if (!existsSync(addon.file)) fail(`no SQLite addon at ${addon.file} (npm install compiles it)`);
  checkAddonLoads(addon.file);

  const binaryTmp = join(outDir, `.${binaryName}.${process.pid}.tmp`);
  copyFileSync(process.execPath, binaryTmp);
  chmodSync(binaryTmp, 0o755);
  run('strip', ['--strip-all', binaryTmp], 'strip'); // before injecting: stripping afterwards breaks the blob
  const nodeFloor = glibcFloor(binaryTmp);
  const addonFloor = glibcFloor(addon.file);
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
  const addonBytes = readFileSync(addon.file);
  const moduleBytes = readFileSync(sqliteJs);
  const files = { [assets.sqliteAddon]: sha256(addonBytes), [assets.sqliteModule]: sha256(moduleBytes) };
  const info = {
    version: pkg.version,
    ...gitFacts(),
    nodeVersion: process.version,
    glibcFloor: maxVersion(nodeFloor, addonFloor),
    nodeGlibcFloor: nodeFloor,
    addonGlibcFloor: addonFloor,
    addonOrigin: addon.origin,
    cacheKey: `${pkg.version}-${sha256(files[assets.sqliteAddon] + files[assets.sqliteModule]).slice(0, 16)}`,
    files,
  };
  const infoFile = join(work, assets.buildInfo);
  writeFileSync(infoFile, JSON.stringify(info, null, 2));

  const ui = uiAssets(); // the dashboard built by `npm run build` (scripts/build-ui.mjs), served at /ui
  const blob = join(work, 'sea.blob');
  const seaConfig = join(work, 'sea-config.json');
  writeFileSync(seaConfig, JSON.stringify({
    main: mainJs,
    output: blob,
    disableExperimentalSEAWarning: true,
    useCodeCache: true,
    assets: { [assets.buildInfo]: infoFile, [assets.sqliteAddon]: addon.file, [assets.sqliteModule]: sqliteJs, [assets.firingThread]: firingJs, ...ui },
  }));
  run(process.execPath, ['--experimental-sea-config', seaConfig], 'making the SEA blob');
  run(process.execPath, [join(root, 'node_modules', 'postject', 'dist', 'cli.js'), binaryTmp, 'NODE_SEA_BLOB', blob,
    '--sentinel-fuse', seaFuse], 'postject');

  const shortCommit = /^[0-9a-f]{40}$/.test(info.commit) ? info.commit.slice(0, 12) : 'unknown';
  const report = smoke(binaryTmp, `punctual ${info.version} (${shortCommit})`, work);
  // rename, never copy over: a running copy of the old executable keeps its file ("Text file busy" otherwise)
  const binary = join(outDir, binaryName);
  renameSync(binaryTmp, binary);
  const digest = sha256(readFileSync(binary));
  writeFileSync(join(outDir, `${binaryName}.sha256`), `${digest}  ${binaryName}\n`);
  const sizeMiB = (statSync(binary).size / 1048576).toFixed(1);
  step(`${relative(process.cwd(), binary) || binary}: ${sizeMiB} MiB, sha256 ${digest}`);
  step(`glibc floor ${info.glibcFloor} (node ${nodeFloor}, addon ${addonFloor} from ${addon.origin}); ` +
    `sqlite ${report.sqlite}; commit ${shortCommit}${info.dirty ? ' (dirty tree)' : ''}`);
}

main().catch((err) => {
  process.stderr.write(`build-binary: ${err instanceof BuildError ? err.message : (err?.stack ?? err)}\n`);
  process.exit(1);
});
