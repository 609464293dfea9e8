/**
 * Test bed of the dashboard's browser tests: a real `punctual serve` process (dist/, with a tokens file of an
 * admin, a write and a read token), a real callback receiver, and Debian's chromium driven by playwright-core.
 * Pages are opened in a fresh browser context each (its own session storage) and every console error, page error
 * and failed request of the page is collected for the test to check.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { assertBuilt, kill9, root, spawnServe, type Child } from '../../src/node/testing/processes.js';
import { startReceiver, waitFor, type Receiver } from '../../src/node/testing/receiver.js';

export const chromiumPath = '/usr/bin/chromium';
export const screenshotDir = join(root, 'test-results', 'ui');

/** Chromium's flags that work on a machine with a closed network (no background fetches, no GPU). */
const chromiumArgs = ['--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

export const tokens = {
  admin: 'admin-token-0123456789abcdef',
  write: 'write-token-0123456789abcdef',
  read: 'read-token-0123456789abcdef',
} as const;
export type Role = keyof typeof tokens;

export interface Opened {
  page: Page;
  /** Console errors, uncaught page errors and failed responses (status >= 400) seen so far, as text. */
  problems: string[];
  close(): Promise<void>;
}

export interface UiBed {
  node: Child;
  /** Every node of the bed (one, or a cluster n1..nN); `node` and `base` are the first. */
  nodes: Child[];
  base: string;
  rx: Receiver;
  browser: Browser;
  /** A call to the node's API with the given role's token. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  api(method: string, path: string, body?: unknown, role?: Role): Promise<{ status: number; json: any; headers: Headers }>;
  /** A new browser context on /ui (of node `at`, default the first), logged in with the role's token (or not with `null`). */
  open(role: Role | null, hash?: string, at?: number): Promise<Opened>;
  close(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/**
 * Routes a test expects to be missing on this build (the node answers 404 for them and the page says so calmly):
 * their 404s are not counted as problems.
 */
export function ignoring404(...paths: string[]): (text: string) => boolean {
  return (text) => paths.some((p) => text.startsWith('404 ') && text.includes(p));
}

/** The `serve` flags of node i of n (a cluster authenticates its peers with a shared secret). */
function serveFlags(dir: string, tokensFile: string, i: number, apiPorts: number[], peerPorts: number[]): string[] {
  const id = `n${i + 1}`;
  const flags = ['--node-id', id, '--listen', `127.0.0.1:${apiPorts[i]}`, '--data', join(dir, id), '--auth-tokens-file', tokensFile];
  if (apiPorts.length === 1) return flags;
  const peers = apiPorts.flatMap((_p, k) => (k === i ? [] : [`n${k + 1}=127.0.0.1:${peerPorts[k]}`])).join(',');
  return [...flags, '--peer-listen', `127.0.0.1:${peerPorts[i]}`, '--peers', peers, '--cluster-secret', 'ui-test-cluster-secret-0123456789'];
}

/** A bed of `nodes` nodes (1: a single node; 3: a cluster, ready once every node answers /readyz 200). */
export async function startBed(nodes = 1): Promise<UiBed> {
  assertBuilt();
  mkdirSync(screenshotDir, { recursive: true });
  const dir = mkdtempSync(join(tmpdir(), 'punctual-ui-'));
  const tokensFile = join(dir, 'tokens');
  writeFileSync(tokensFile, Object.entries(tokens).map(([scope, token]) => `${scope}-ops ${scope} ${token}`).join('\n') + '\n', { mode: 0o600 });
  const rx = await startReceiver();
  const apiPorts: number[] = [];
  const peerPorts: number[] = [];
  for (let i = 0; i < nodes; i++) apiPorts.push(await freePort());
  for (let i = 0; i < nodes; i++) peerPorts.push(await freePort());
  const children: Child[] = [];
  let browser: Browser | null = null;
  try {
    await Promise.all(apiPorts.map(async (port, i) => children.push(await spawnServe(serveFlags(dir, tokensFile, i, apiPorts, peerPorts), port))));
    children.sort((a, b) => apiPorts.indexOf(Number(new URL(a.base).port)) - apiPorts.indexOf(Number(new URL(b.base).port)));
    for (const c of children) await waitFor(`${c.base}/readyz`, async () => (await fetch(`${c.base}/readyz`)).status === 200, 30_000);
    browser = await chromium.launch({ executablePath: chromiumPath, headless: true, args: chromiumArgs });
  } catch (err) {
    for (const c of children) await kill9(c);
    await rx.close();
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const base = children[0]!.base;
  const b = browser;
  const n = children[0]!;
  const api: UiBed['api'] = async (method, path, body, role = 'admin') => {
    const res = await fetch(base + path, {
      method,
      headers: { authorization: `Bearer ${tokens[role]}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, json: text === '' ? null : (JSON.parse(text) as unknown), headers: res.headers };
  };
  const open: UiBed['open'] = async (role, hash = '#/', at = 0) => {
    const context = await b.newContext({ viewport: { width: 1440, height: 900 }, colorScheme: 'light' });
    const page = await context.newPage();
    const problems: string[] = [];
    page.on('console', (m) => m.type() === 'error' && problems.push(`console: ${m.text()} (${m.location().url})`));
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    page.on('response', (r) => r.status() >= 400 && problems.push(`${r.status()} ${r.request().method()} ${new URL(r.url()).pathname}`));
    await page.goto(`${children[at]!.base}/ui${hash}`);
    if (role !== null) {
      await page.getByTestId('token').fill(tokens[role]);
      await page.getByTestId('login').click();
      await page.getByTestId('who').waitFor();
    }
    return { page, problems, close: () => context.close() };
  };
  return {
    node: n,
    nodes: children,
    base,
    rx,
    browser: b,
    api,
    open,
    close: async () => {
      await b.close();
      for (const c of children) await kill9(c);
      await rx.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * The problems a page showed, minus the expected 401s of the token form's first look and the listed 404s.
 * Chromium also logs every failed response as a console error naming its URL: those follow the same rule.
 */
export function unexpected(problems: string[], allow: (text: string) => boolean = () => false): string[] {
  const allowedStatus = problems.filter((p) => /^\d{3} /.test(p) && (p.startsWith('401 GET /v1/whoami') || allow(p)));
  return problems.filter((p) => {
    if (allowedStatus.includes(p)) return false;
    if (p.startsWith('console: Failed to load resource')) {
      return !allowedStatus.some((s) => p.includes(s.split(' ').slice(2).join(' ')));
    }
    return true;
  });
}
