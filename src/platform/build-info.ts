/**
 * What scripts/build-binary.mjs measured and baked into the executable (asset build-info.json): the version
 * and commit for `--version`, and the glibc floor for `doctor`.
 */
import { assetNames, embeddedAsset, runningAsSea } from './sea.js';

export interface BuildInfo {
  /** package.json version at build time. */
  version: string;
  /** Full git commit of the build (40 hex), or "unknown". */
  commit: string;
  /** true when the working tree had uncommitted changes at build time. */
  dirty: boolean;
  /** process.version of the Node build the executable was made from. */
  nodeVersion: string;
  /** Highest GLIBC_x.y symbol version needed by the executable or the addon, e.g. "2.28". */
  glibcFloor: string;
  nodeGlibcFloor: string;
  addonGlibcFloor: string;
  /** Where the SQLite addon was compiled (e.g. "Debian 11 chroot" or "build host"). */
  addonOrigin: string;
  /** Names the folder the embedded files are unpacked into: changes whenever one of them changes. */
  cacheKey: string;
  /** sha256 (hex) of each file unpacked at run time, by asset name. */
  files: Record<string, string>;
}

let cached: BuildInfo | null | undefined;

/** The embedded build info, or null outside a single executable. */
export function embeddedBuildInfo(): BuildInfo | null {
  if (cached !== undefined) return cached;
  cached = runningAsSea() ? (JSON.parse(embeddedAsset(assetNames.buildInfo).toString('utf8')) as BuildInfo) : null;
  return cached;
}

const commitPattern = /^[0-9a-f]{7,64}$/;

/**
 * `punctual <version> (<commit>)` of the single executable, or null outside one (cmd/version.ts then answers).
 * PUNCTUAL_BUILD_COMMIT still wins, as docs/cli.md says.
 */
export function seaVersionString(env: Record<string, string | undefined>): string | null {
  const info = embeddedBuildInfo();
  if (info === null) return null;
  const fromEnv = (env.PUNCTUAL_BUILD_COMMIT ?? '').toLowerCase();
  const commit = commitPattern.test(fromEnv) ? fromEnv : info.commit;
  const shown = commitPattern.test(commit) ? commit.slice(0, 12) : 'unknown';
  return `punctual ${info.version} (${shown})`;
}
