/**
 * The addon cache under Node, with real folders and the real better-sqlite3 addon from node_modules: candidate
 * order, fallback, atomic unpacking, checks on owner and mode, and the one-line messages. (The same code inside
 * the built executable: test/binary/binary.test.ts.)
 */
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AddonCacheError, cacheDirCandidates, fsProblem, ownershipProblem, unpackAndLoad, type CacheFile } from './addon-cache.js';
import { versionAtLeast } from './doctor.js';

const addonPath = join(
  dirname(createRequire(import.meta.url).resolve('better-sqlite3/package.json')),
  'build',
  'Release',
  'better_sqlite3.node',
);
const addonBytes = readFileSync(addonPath);
const files: CacheFile[] = [
  { name: 'better_sqlite3.node', sha256: createHash('sha256').update(addonBytes).digest('hex'), bytes: () => addonBytes },
];
const uid = process.getuid!();
let dir: string;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'punctual-cache-test-'));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

function load(candidates: Array<{ dir: string; from: string }>) {
  return unpackAndLoad({ candidates, cacheKey: 'k1', files, addonName: 'better_sqlite3.node', uid, glibcFloor: '2.28' });
}

describe('cacheDirCandidates', () => {
  const base = { uid: 1000, tmpDir: '/tmp', execPath: '/opt/punctual/punctual' };

  it('tries XDG_CACHE_HOME, HOME, the temp folder, then beside the executable', () => {
    const c = cacheDirCandidates({ ...base, env: { XDG_CACHE_HOME: '/x', HOME: '/home/u' } });
    expect(c).toEqual([
      { dir: '/x/punctual', from: 'XDG_CACHE_HOME' },
      { dir: '/home/u/.cache/punctual', from: 'HOME' },
      { dir: '/tmp/punctual-1000', from: 'the temp folder' },
      { dir: '/opt/punctual/.punctual-cache', from: "the executable's folder" },
    ]);
  });

  it('ignores relative or empty XDG_CACHE_HOME and HOME', () => {
    const c = cacheDirCandidates({ ...base, env: { XDG_CACHE_HOME: 'rel', HOME: '' } });
    expect(c.map((x) => x.from)).toEqual(['the temp folder', "the executable's folder"]);
  });

  it('uses PUNCTUAL_CACHE_DIR alone when set', () => {
    const c = cacheDirCandidates({ ...base, env: { PUNCTUAL_CACHE_DIR: '/var/cache/p', HOME: '/home/u' } });
    expect(c).toEqual([{ dir: '/var/cache/p', from: 'PUNCTUAL_CACHE_DIR' }]);
  });
});

describe('ownershipProblem and fsProblem', () => {
  it('accepts a folder of ours with mode 700 or 755', () => {
    expect(ownershipProblem('/c', { uid: 5, mode: 0o40700 }, 5)).toBeNull();
    expect(ownershipProblem('/c', { uid: 5, mode: 0o40755 }, 5)).toBeNull();
  });

  it('refuses a folder of another user, and one that group or others can write', () => {
    expect(ownershipProblem('/c', { uid: 0, mode: 0o40700 }, 5)).toBe(
      '/c belongs to uid 0, not to this user (uid 5): remove it, or set PUNCTUAL_CACHE_DIR to a folder you own, ' +
        'on a filesystem mounted without noexec',
    );
    expect(ownershipProblem('/c', { uid: 5, mode: 0o40770 }, 5)).toMatch(/^\/c is writable by other users \(mode 770\): run chmod 700 \/c/);
    expect(ownershipProblem('/c', { uid: 5, mode: 0o40757 }, 5)).toMatch(/mode 757/);
  });

  it('says what to do for each file-system error', () => {
    const e = (code: string) => Object.assign(new Error(code), { code });
    expect(fsProblem('/c', e('EACCES'))).toMatch(/^cannot write to \/c \(permission denied\): give this user write access/);
    expect(fsProblem('/c', e('EROFS'))).toMatch(/^\/c is on a read-only filesystem: set PUNCTUAL_CACHE_DIR/);
    expect(fsProblem('/c', e('ENOSPC'))).toMatch(/^no space left for \/c .*free some space/);
    expect(fsProblem('/c', e('ENOTDIR'))).toMatch(/^\/c \(or a parent\) is not a folder: remove it/);
    expect(fsProblem('/c', e('EIO'))).toMatch(/^cannot use \/c: EIO: set PUNCTUAL_CACHE_DIR/);
    for (const code of ['EACCES', 'EROFS', 'ENOSPC', 'ENOTDIR', 'EIO']) expect(fsProblem('/c', e(code))).not.toContain('\n');
  });
});

describe('unpackAndLoad', () => {
  it('unpacks into <dir>/<key>/ with mode 700 folders and loads the addon', () => {
    const got = load([{ dir: join(dir, 'cache'), from: 'HOME' }]);
    expect(got.dir).toBe(join(dir, 'cache', 'k1'));
    expect(got.from).toBe('HOME');
    expect(typeof (got.addon as { Database?: unknown }).Database).toBe('function');
    expect(readdirSync(got.dir)).toEqual(['better_sqlite3.node']);
    expect(readFileSync(join(got.dir, 'better_sqlite3.node')).equals(addonBytes)).toBe(true);
  });

  it('moves on to the next candidate when one is unusable', () => {
    const blocked = join(dir, 'blocked');
    writeFileSync(blocked, '');
    const got = load([
      { dir: blocked, from: 'XDG_CACHE_HOME' },
      { dir: join(dir, 'ok'), from: 'the temp folder' },
    ]);
    expect(got.from).toBe('the temp folder');
  });

  it('rewrites a cached file whose content is wrong', () => {
    mkdirSync(join(dir, 'c', 'k1'), { recursive: true, mode: 0o700 });
    chmodSync(join(dir, 'c'), 0o700);
    writeFileSync(join(dir, 'c', 'k1', 'better_sqlite3.node'), 'garbage');
    load([{ dir: join(dir, 'c'), from: 'HOME' }]);
    expect(readFileSync(join(dir, 'c', 'k1', 'better_sqlite3.node')).equals(addonBytes)).toBe(true);
  });

  it('throws one line naming the single candidate, or every candidate, when none works', () => {
    const open = join(dir, 'open');
    mkdirSync(open);
    chmodSync(open, 0o777);
    expect(() => load([{ dir: open, from: 'PUNCTUAL_CACHE_DIR' }])).toThrow(
      new AddonCacheError(
        `cannot unpack the SQLite addon: ${open} is writable by other users (mode 777): run chmod 700 ${open}, ` +
          'or set PUNCTUAL_CACHE_DIR to a folder you own, on a filesystem mounted without noexec',
      ),
    );
    const file = join(dir, 'file');
    writeFileSync(file, '');
    expect(() => load([{ dir: open, from: 'HOME' }, { dir: file, from: 'the temp folder' }])).toThrow(
      new AddonCacheError(
        `no folder to unpack the SQLite addon into (HOME: ${open} is writable by other users (mode 777): run chmod 700 ${open}; ` +
          `the temp folder: ${file} (or a parent) is not a folder: remove it); ` +
          'set PUNCTUAL_CACHE_DIR to a folder you own, on a filesystem mounted without noexec',
      ),
    );
  });
});

describe('versionAtLeast', () => {
  it('compares dotted versions numerically', () => {
    expect(versionAtLeast('2.31', '2.28')).toBe(true);
    expect(versionAtLeast('2.28', '2.28')).toBe(true);
    expect(versionAtLeast('2.9', '2.28')).toBe(false);
    expect(versionAtLeast('3.0', '2.99')).toBe(true);
  });
});
