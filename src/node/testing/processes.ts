/** Test fixture (not product code): node child processes running the BUILT code (dist/), and HTTP calls to them. */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { NodeConfig } from '../api.js';

const here = dirname(fileURLToPath(import.meta.url));
export const root = join(here, '..', '..', '..');
const childScript = join(here, 'crash-child.mjs');

/** The children run dist/: refuse to test missing or stale output with a clear message. */
export function assertBuilt(): void {
  const built = join(root, 'dist', 'src', 'node', 'node.js');
  if (!existsSync(built)) throw new Error(`${built} is missing: run \`npm run build\` first (npm test does)`);
  const stale = (dir: string): string | null => {
    for (const name of readdirSync(join(root, dir))) {
      const rel = join(dir, name);
      if (rel === join('src', 'ui')) {
        // the dashboard is bundled into dist/ui (scripts/build-ui.mjs), not compiled file by file
        const manifest = join(root, 'dist', 'ui', 'manifest.json');
        const newest = Math.max(...readdirSync(join(root, rel), { recursive: true }).map((f) => statSync(join(root, rel, String(f))).mtimeMs));
        if (!existsSync(manifest) || newest > statSync(manifest).mtimeMs + 1) return rel;
        continue;
      }
      if (statSync(join(root, rel)).isDirectory()) {
        const found = stale(rel);
        if (found !== null) return found;
      } else if (name.endsWith('.ts') && !name.endsWith('.test.ts') && !name.endsWith('.d.ts')) {
        const out = join(root, 'dist', rel.replace(/\.ts$/, '.js'));
        if (!existsSync(out) || statSync(join(root, rel)).mtimeMs > statSync(out).mtimeMs + 1) return rel;
      }
    }
    return null;
  };
  const found = stale('src');
  if (found !== null) throw new Error(`dist/ is older than ${found}: run \`npm run build\` first (npm test does)`);
}

export interface Child {
  proc: ChildProcess;
  base: string;
  stderr(): string;
}

/** Spawns `node <args>` and waits for the line that says it serves (`{"port":N}` or the serve 'ready' log). */
function spawnAndWait(args: string[], portOf: (line: string) => number | null, fromStderr: boolean): Promise<Child> {
  const proc = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  const lines = createInterface({ input: fromStderr ? proc.stderr! : proc.stdout! });
  return new Promise<Child>((resolve, reject) => {
    proc.once('exit', (code) => reject(new Error(`child exited ${code} before serving: ${stderr}`)));
    lines.on('line', (line) => {
      const port = portOf(line);
      if (port === null) return;
      proc.removeAllListeners('exit');
      resolve({ proc, base: `http://127.0.0.1:${port}`, stderr: () => stderr });
    });
  });
}

/** A node through src/node/testing/crash-child.mjs (startNode with test options). */
export function spawnNode(config: NodeConfig, options: Record<string, unknown> = {}): Promise<Child> {
  const args = [join(here, 'crash-child.mjs'), JSON.stringify(config), JSON.stringify(options)];
  return spawnAndWait(args, (line) => (JSON.parse(line) as { port: number }).port, false);
}

/** A real `punctual serve` process (dist/cmd/punctual.js) with the given flags; its API must be on a fixed port. */
export function spawnServe(flags: string[], apiPort: number): Promise<Child> {
  const args = [join(root, 'dist', 'cmd', 'punctual.js'), 'serve', ...flags];
  return spawnAndWait(args, (line) => (line.includes('"msg":"ready"') ? apiPort : null), true);
}

export function kill9(child: Child): Promise<void> {
  if (child.proc.exitCode !== null || child.proc.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.proc.once('exit', () => resolve());
    child.proc.kill('SIGKILL');
  });
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function call(child: Child, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(child.base + path, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text === '' ? null : JSON.parse(text) };
}

export { childScript };
