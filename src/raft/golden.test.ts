/**
 * Golden interaction scripts (testdata/*.txt). Each command's printed output must match the expected block.
 * REWRITE_GOLDEN=1 npx vitest run src/raft   rewrites the expected blocks from the actual output (review the diff).
 */
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseScript, runScript } from './testing/interaction.js';

const dir = join(dirname(fileURLToPath(import.meta.url)), 'testdata');
const rewrite = process.env['REWRITE_GOLDEN'] === '1';
const scripts = readdirSync(dir).filter((f) => f.endsWith('.txt')).sort();

describe('golden interaction scripts', () => {
  it('has the required scripts', () => {
    for (const name of ['campaign', 'deliver', 'drop', 'partition', 'stabilize', 'compact', 'transfer', 'membership']) {
      expect(scripts, name).toContain(`${name}.txt`);
    }
  });

  for (const file of scripts) {
    it(file, () => {
      const path = join(dir, file);
      const text = readFileSync(path, 'utf8');
      const { actual, rewritten } = runScript(text);
      for (const lines of actual) for (const l of lines) expect(l.startsWith('error:'), `${file}: ${l}`).toBe(false);
      if (rewrite) {
        writeFileSync(path, rewritten);
        return;
      }
      const { blocks } = parseScript(text);
      blocks.forEach((b, i) => {
        expect(actual[i]!.join('\n'), `${file}: ${b.command}`).toBe(b.expected.join('\n'));
      });
    });
  }
});
