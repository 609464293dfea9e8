/**
 * The only file that touches node:sea. Outside a single executable (tests, `node dist/cmd/punctual.js`)
 * isSea() is false and nothing here reads an asset. node:sea is imported statically on purpose: a dynamic
 * import() of a built-in crashes a code-cache binary (see docs/deploy.md).
 */
import { getAsset, isSea } from 'node:sea';

/** True inside the `punctual` single executable. */
export function runningAsSea(): boolean {
  return isSea();
}

/**
 * An asset embedded by scripts/build-binary.mjs. getAsset copies it out of the executable's read-only memory,
 * so the Buffer may be handed to anything (writeFileSync, hashing) without risk of a write fault.
 */
export function embeddedAsset(name: string): Buffer {
  return Buffer.from(getAsset(name));
}

/** The asset names shared by the build script and the runtime (the build script repeats them, plain JS). */
export const assetNames = {
  buildInfo: 'build-info.json',
  sqliteAddon: 'better_sqlite3.node',
  sqliteModule: 'better-sqlite3.cjs',
  /** The dashboard: `ui/manifest.json` and every file it lists, as `ui/PATH` (scripts/build-ui.mjs). */
  uiPrefix: 'ui/',
} as const;
