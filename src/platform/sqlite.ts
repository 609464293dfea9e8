/**
 * How better-sqlite3 finds its native addon. Under Node (tests, `node dist/...`) better-sqlite3 loads it from
 * node_modules as usual and these functions change nothing. Inside the single executable the addon is an
 * embedded asset: it is unpacked once into a cache folder (addon-cache.ts), loaded with process.dlopen, and the
 * loaded object is handed to better-sqlite3 as `nativeBinding`.
 */
import type BetterSqlite3 from 'better-sqlite3';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cacheDirCandidates, unpackAndLoad, type CacheFile, type UnpackedAddon } from './addon-cache.js';
import { embeddedBuildInfo } from './build-info.js';
import { assetNames, embeddedAsset, runningAsSea } from './sea.js';

let unpacked: UnpackedAddon | null = null;

/**
 * Inside the single executable: the unpacked and loaded addon (done once per process). Throws
 * AddonCacheError with a one-line message saying what to do.
 */
export function seaSqlite(env: Record<string, string | undefined> = process.env): UnpackedAddon {
  if (unpacked !== null) return unpacked;
  const info = embeddedBuildInfo();
  if (info === null) throw new Error('seaSqlite() is only for the single executable');
  const files: CacheFile[] = [assetNames.sqliteAddon, assetNames.sqliteModule].map((name) => ({
    name,
    sha256: info.files[name],
    bytes: () => embeddedAsset(name),
  }));
  const uid = process.getuid?.() ?? 0;
  unpacked = unpackAndLoad({
    candidates: cacheDirCandidates({ env, uid, tmpDir: tmpdir(), execPath: process.execPath }),
    cacheKey: info.cacheKey,
    files,
    addonName: assetNames.sqliteAddon,
    uid,
    glibcFloor: info.glibcFloor,
  });
  return unpacked;
}

/**
 * Options for `new Database(path, options)`: empty under Node; `{ nativeBinding: <loaded addon> }` in the
 * single executable. (better-sqlite3 accepts the loaded addon object as nativeBinding since 8.x; its type
 * declarations only list the string form, hence the cast.)
 */
export function sqliteOpenOptions(): BetterSqlite3.Options {
  if (!runningAsSea()) return {};
  return { nativeBinding: seaSqlite().addon as unknown as string };
}

/**
 * A path that `require()` (in a worker thread, say) turns into better-sqlite3's Database class. In the single
 * executable: a bundled copy of better-sqlite3 unpacked beside the addon, which it loads from its own folder.
 */
export function sqliteModulePath(): string {
  if (runningAsSea()) return join(seaSqlite().dir, assetNames.sqliteModule);
  return createRequire(import.meta.url).resolve('better-sqlite3');
}
