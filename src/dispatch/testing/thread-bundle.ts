/**
 * The firing thread as the build runs it, for tests: firing-thread.ts bundled by esbuild into a temporary file
 * (the TypeScript sources have no firing-thread.js for the port to start).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildSync } from 'esbuild';
import { afterAll, beforeAll } from 'vitest';

/** Bundles the thread entry before the file's tests and removes it after; the returned function gives its path. */
export function useFiringThreadBundle(): () => string {
  let dir = '';
  let entry = '';
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'punctual-firing-'));
    entry = join(dir, 'firing-thread.cjs');
    buildSync({
      entryPoints: [fileURLToPath(new URL('../firing-thread.ts', import.meta.url))],
      bundle: true,
      platform: 'node',
      format: 'cjs',
      target: 'node20',
      outfile: entry,
      logLevel: 'silent',
    });
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  return () => entry;
}
