/**
 * The published package as a user gets it: `npm pack` of the built tree (npm run build first; npm test does it),
 * its file list (the built client and CLI, README, LICENSE, the docs; no tests, fixtures, sources or source
 * maps), and the tarball installed into a temporary node_modules: `import { Punctual, verifySignature } from
 * 'punctual'` runs and type-checks through package.json `exports`, and the CLI starts from it.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { repoRoot } from './testing/serve.js';

const tmp = mkdtempSync(join(tmpdir(), 'punctual-pack-'));
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';

afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe('the npm package', () => {
  it('npm pack --dry-run --json lists the files a user gets, and only those', () => {
    expect(existsSync(join(repoRoot, 'dist/src/client/index.d.ts')), 'run `npm run build` first').toBe(true);
    const out = execFileSync(npm, ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: repoRoot, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    const files = (JSON.parse(out) as Array<{ files: Array<{ path: string }> }>)[0]!.files.map((f) => f.path);
    for (const wanted of ['package.json', 'README.md', 'LICENSE', 'docs/client.md', 'docs/api.md', 'dist/cmd/punctual.js', 'dist/src/client/index.js', 'dist/src/client/index.d.ts', 'dist/src/client/verify.js', 'dist/src/node/node.js']) {
      expect(files, wanted).toContain(wanted);
    }
    const shipped = (f: string) => !/\.test\.|\.map$|(^|\/)testing\/(?!certs\.)|cli-fixture/.test(f) && !(/\.ts$/.test(f) && !f.endsWith('.d.ts'));
    expect(files.filter((f) => !shipped(f))).toEqual([]);
    expect(files.filter((f) => !/^(dist\/(src|cmd|bench|ui)\/|docs\/[^/]+\.md$|package\.json$|README\.md$|LICENSE$)/.test(f))).toEqual([]);
  });

  it('installed from the tarball: the library imports and type-checks through exports, the CLI starts', () => {
    execFileSync(npm, ['pack', '--ignore-scripts', '--pack-destination', tmp], { cwd: repoRoot, stdio: 'ignore' });
    const tarball = readdirSync(tmp).find((f) => f.endsWith('.tgz'))!;
    const pkg = join(tmp, 'node_modules', 'punctual');
    mkdirSync(pkg, { recursive: true });
    execFileSync('tar', ['-xzf', join(tmp, tarball), '-C', pkg, '--strip-components', '1']);
    // the package's dependencies (and @types/node for the type check) as an install would put them beside it
    const deps = Object.keys((JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { dependencies: Record<string, string> }).dependencies);
    for (const dep of [...deps, '@types']) symlinkSync(join(repoRoot, 'node_modules', dep), join(tmp, 'node_modules', dep));
    writeFileSync(join(tmp, 'package.json'), '{"type": "module"}\n');
    writeFileSync(
      join(tmp, 'use.ts'),
      [
        "import { Punctual, PunctualError, verifySignature, type Job, type VerifiedCallback } from 'punctual';",
        "const client = new Punctual({ baseUrl: 'http://127.0.0.1:1', token: 'x', retry: false });",
        'const jobs: AsyncIterable<Job> = client.jobs.list({ state: "PENDING" });',
        "const checked: (b: Uint8Array) => VerifiedCallback = (b) => verifySignature(b, {}, ['s'], { toleranceMs: 1000 });",
        'console.log(typeof jobs, typeof checked, PunctualError.name);',
        'await client.close();',
      ].join('\n') + '\n',
    );
    const tsc = spawnSync(process.execPath, [join(repoRoot, 'node_modules/typescript/bin/tsc'), '--noEmit', '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--types', 'node', '--skipLibCheck', 'use.ts'], { cwd: tmp, encoding: 'utf8' });
    expect(tsc.stdout + tsc.stderr).toBe('');
    expect(tsc.status).toBe(0);
    writeFileSync(join(tmp, 'use.mjs'), "import { Punctual, verifySignature } from 'punctual';\nconsole.log(typeof Punctual, typeof verifySignature);\n");
    expect(execFileSync(process.execPath, ['use.mjs'], { cwd: tmp, encoding: 'utf8' })).toBe('function function\n');
    const version = spawnSync(process.execPath, [join(pkg, 'dist/cmd/punctual.js'), '--version'], { encoding: 'utf8', env: { PATH: process.env.PATH ?? '' } });
    expect(version.status).toBe(0);
    expect(version.stdout).toMatch(/^punctual \d+\.\d+\.\d+ \(/);
  }, 120_000);
});
