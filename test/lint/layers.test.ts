/**
 * scripts/lint-layers.mjs run as `npm run lint` runs it, on the repository and on small trees written into a temp
 * folder: an import that points up, sideways within a layer, or into no layer fails with one line naming both
 * files; imports that point down pass.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const script = join(repo, 'scripts/lint-layers.mjs');
const trees: string[] = [];

afterEach(() => {
  for (const t of trees.splice(0)) rmSync(t, { recursive: true, force: true });
});

/** Writes { path: content } under a new temp folder and returns it. */
function tree(files: Record<string, string>): string {
  const root = mkdtempSync(join(tmpdir(), 'punctual-layers-'));
  trees.push(root);
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), content);
  }
  return root;
}

function lint(root?: string): { status: number | null; lines: string[] } {
  const r = spawnSync(process.execPath, root === undefined ? [script] : [script, root], { encoding: 'utf8' });
  return { status: r.status, lines: r.stderr.split('\n').filter((l) => l !== '') };
}

const downward = {
  'src/core/ids.ts': 'export const a = 1;\n',
  'src/scheduler/types.ts': "import { a } from '../core/ids.js';\nexport const b = a;\n",
  'src/node/node.ts': "import type { b } from '../scheduler/types.js';\nexport const c = 1;\n",
  'cmd/punctual.ts': "import { c } from '../src/node/node.js';\nimport { Command } from 'commander';\n",
};

describe('lint-layers', () => {
  it('passes on the repository', () => {
    expect(lint()).toEqual({ status: 0, lines: [] });
  });

  it('passes on a tree whose imports all point down', () => {
    expect(lint(tree(downward))).toEqual({ status: 0, lines: [] });
  });

  it('fails on an upward import with one line naming both files', () => {
    const root = tree({ ...downward, 'src/core/clock.ts': "import { c } from '../node/node.js';\nexport { c };\n" });
    const r = lint(root);
    expect(r.status).toBe(1);
    expect(r.lines[0]).toBe(
      'src/core/clock.ts:1: imports src/node/node.ts: src/core (layer 0, core) may not import src/node (layer 4, node), which is above it',
    );
    expect(r.lines).toHaveLength(2); // the offending import, then the count
  });

  it('counts a type-only import, and one in a dynamic import()', () => {
    const root = tree({
      ...downward,
      'src/platform/sqlite.ts': "\n\nimport type { X } from '../../cmd/punctual.js';\nexport type Y = X;\n",
      'src/raft/raft.ts': "export async function f() {\n  return import('../store/db.js');\n}\n",
      'src/store/db.ts': 'export const d = 1;\n',
    });
    const r = lint(root);
    expect(r.status).toBe(1);
    expect(r.lines).toContain(
      'src/platform/sqlite.ts:3: imports cmd/punctual.ts: src/platform (layer 1, pure cores, platform) may not import cmd (layer 6, program), which is above it',
    );
    expect(r.lines.some((l) => l.startsWith('src/raft/raft.ts:2: imports src/store/db.ts: '))).toBe(true);
  });

  it('fails on both edges of a cycle between two folders of one layer', () => {
    const root = tree({
      ...downward,
      'src/store/db.ts': "import { h } from '../http/app.js';\nexport const d = h;\n",
      'src/http/app.ts': "import { d } from '../store/db.js';\nexport const h = d;\n",
    });
    const r = lint(root);
    expect(r.status).toBe(1);
    expect(r.lines).toEqual([
      'src/http/app.ts:1: imports src/store/db.ts: src/http (layer 2, services) may not import src/store (layer 2, services), a folder of the same layer',
      'src/store/db.ts:1: imports src/http/app.ts: src/store (layer 2, services) may not import src/http (layer 2, services), a folder of the same layer',
      'lint-layers: 2 import(s) against the layers (docs/design.md, "Layers")',
    ]);
  });

  it('tells a folder of http/peer from src/http: the transport may not import the client API', () => {
    const root = tree({
      ...downward,
      'src/http/app.ts': 'export const h = 1;\n',
      'src/http/peer/link.ts': "import { h } from '../app.js';\nexport { h };\n",
    });
    const r = lint(root);
    expect(r.status).toBe(1);
    expect(r.lines[0]).toMatch(/^src\/http\/peer\/link\.ts:1: imports src\/http\/app\.ts: src\/http\/peer .* same layer$/);
  });

  it('fails on a folder that no layer declares, and ignores tests', () => {
    const root = tree({
      ...downward,
      'src/extra/thing.ts': 'export const e = 1;\n',
      'src/core/ids.test.ts': "import { c } from '../node/node.js';\n",
    });
    const r = lint(root);
    expect(r.status).toBe(1);
    expect(r.lines[0]).toBe('src/extra/thing.ts: is in no layer: add its folder to scripts/lint-layers.mjs and docs/design.md');
    expect(r.lines).toHaveLength(2);
  });
});
