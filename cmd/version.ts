/**
 * `punctual --version`: `punctual <version> (<commit>)`. The version comes from package.json, found by walking
 * up from this file (it runs both as cmd/version.ts under vitest and as dist/cmd/version.js). The commit never
 * comes from running git: PUNCTUAL_BUILD_COMMIT (set by a release build or a container image), else a
 * BUILD_COMMIT file beside package.json, else the checkout's .git files read directly, else "unknown".
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { seaVersionString } from '../src/platform/build-info.js';

const commitPattern = /^[0-9a-f]{7,64}$/;

/** The directory of Punctual's package.json, or null when it cannot be found (a bundle without it). */
export function packageRoot(): string | null {
  let dir: string;
  try {
    dir = dirname(fileURLToPath(import.meta.url));
  } catch {
    return null; // a CommonJS bundle (single executable) has no import.meta.url: version "unknown", not a crash
  }
  for (let depth = 0; depth < 6; depth++) {
    const candidate = join(dir, 'package.json');
    if (existsSync(candidate)) {
      const pkg = JSON.parse(readFileSync(candidate, 'utf8')) as { name?: unknown };
      if (pkg.name === 'punctual') return dir;
    }
    const parent = dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  return null;
}

function readText(path: string): string | null {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return null;
  }
}

/**
 * HEAD of a checkout: a detached hash, or a ref looked up loose then in packed-refs. In a linked worktree (or a
 * submodule) `.git` is a file naming the git directory, whose refs live in its common directory.
 */
function gitHead(root: string): string | null {
  const pointer = readText(join(root, '.git')); // null for a directory
  const gitDir = pointer !== null && pointer.startsWith('gitdir: ') ? resolve(root, pointer.slice('gitdir: '.length)) : join(root, '.git');
  const common = readText(join(gitDir, 'commondir'));
  const commonDir = common === null ? gitDir : resolve(gitDir, common);
  const head = readText(join(gitDir, 'HEAD'));
  if (head === null) return null;
  if (!head.startsWith('ref: ')) return head;
  const ref = head.slice('ref: '.length);
  const loose = readText(join(gitDir, ref)) ?? readText(join(commonDir, ref));
  if (loose !== null) return loose;
  const packed = readText(join(commonDir, 'packed-refs')) ?? '';
  const line = packed.split('\n').find((l) => l.endsWith(` ${ref}`));
  return line === undefined ? null : line.split(' ')[0];
}

export function buildCommit(env: Record<string, string | undefined>, root: string | null): string {
  const candidates = [env.PUNCTUAL_BUILD_COMMIT ?? null];
  if (root !== null) candidates.push(readText(join(root, 'BUILD_COMMIT')), gitHead(root));
  for (const c of candidates) {
    if (c !== null && commitPattern.test(c.toLowerCase())) return c.toLowerCase().slice(0, 12);
  }
  return 'unknown';
}

export function versionString(env: Record<string, string | undefined>): string {
  const root = packageRoot();
  let version = 'unknown';
  if (root !== null) {
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version?: unknown };
    if (typeof pkg.version === 'string') version = pkg.version;
  }
  return `punctual ${version} (${buildCommit(env, root)})`;
}

/** What `--version` and `doctor` show: the build facts baked into a single executable, else this checkout's. */
export function programVersion(env: Record<string, string | undefined>): string {
  return seaVersionString(env) ?? versionString(env);
}
