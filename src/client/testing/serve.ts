/**
 * Test fixture (not product code, not shipped): a real `punctual serve` process from the BUILT code
 * (dist/cmd/punctual.js, after `npm run build`), on a free port with a temporary data directory, and a real
 * node:http receiver that records every request with its raw body.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = resolve(fileURLToPath(new URL('.', import.meta.url)), '../../..');
export const punctualBin = join(repoRoot, 'dist/cmd/punctual.js');

export interface ServeProcess {
  child: ChildProcessWithoutNullStreams;
  base: string;
  stderr(): string;
  stop(): Promise<number | null>;
}

/** Starts `punctual serve` with `flags` and resolves once it logged `ready`. */
export async function startServe(flags: string[] = []): Promise<ServeProcess> {
  if (!existsSync(punctualBin)) throw new Error(`${punctualBin} is missing: run \`npm run build\` first`);
  const data = mkdtempSync(join(tmpdir(), 'punctual-client-'));
  const args = [punctualBin, 'serve', '--listen', '127.0.0.1:0', '--peer-listen', '127.0.0.1:0', '--data', data, '--shards', '2', ...flags];
  const child = spawn(process.execPath, args, { env: { PATH: process.env.PATH ?? '' } });
  let stderr = '';
  const exited = new Promise<number | null>((ok) => child.once('exit', (code) => ok(code)));
  const listen = await new Promise<string>((ok, fail) => {
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
      for (const line of stderr.split('\n')) {
        if (!line.includes('"msg":"ready"')) continue;
        ok(String((JSON.parse(line) as { listen: string }).listen));
        return;
      }
    });
    void exited.then((code) => fail(new Error(`serve exited ${code} before ready: ${stderr}`)));
  });
  return {
    child,
    base: `http://${listen}`,
    stderr: () => stderr,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const code = await exited;
      rmSync(data, { recursive: true, force: true });
      return code;
    },
  };
}

export interface Received {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

export interface Receiver {
  server: Server;
  base: string;
  received: Received[];
  /** Resolves once `n` requests arrived (at most 20 s). */
  waitFor(n: number): Promise<Received[]>;
  close(): Promise<void>;
}

/**
 * A receiver that records every request and answers 200, or hands the request to `route` when it claims the
 * path (returns true).
 */
export async function startReceiver(route?: (req: IncomingMessage, res: ServerResponse) => boolean): Promise<Receiver> {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    if (route !== undefined && route(req, res)) return;
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks) });
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const waitFor = async (n: number): Promise<Received[]> => {
    for (let i = 0; i < 2000 && received.length < n; i++) await new Promise((ok) => setTimeout(ok, 10));
    if (received.length < n) throw new Error(`only ${received.length} of ${n} callbacks arrived`);
    return received;
  };
  const close = () => new Promise<void>((ok) => server.close(() => ok()));
  return { server, base, received, waitFor, close };
}
