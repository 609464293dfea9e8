/**
 * The test beds the node tests share. useNodeBed (in-process nodes): a temp data dir and a real callback receiver
 * per test, and the cores a test opened, closed after it (even when it failed half-way). useProcessBed (nodes as
 * child processes): the same per test file, and the children killed after it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach } from 'vitest';
import { silentLogger } from '../../core/log.js';
import type { NodeConfig } from '../api.js';
import { openNode, type OpenNode, type NodeOptions } from '../host.js';
import { assertBuilt, kill9, type Child } from './processes.js';
import { startReceiver, type Receiver } from './receiver.js';

export class NodeBed {
  dir = '';
  rx!: Receiver;
  private open: OpenNode[] = [];

  constructor(private readonly defaults: NodeOptions) {}

  /** Opens and starts a node; it is closed after the test unless the test stops it first. */
  async startCore(config: NodeConfig, options: NodeOptions = {}): Promise<OpenNode> {
    const core = this.track(await openNode(config, { logger: silentLogger, ...this.defaults, ...options }));
    await core.start();
    return core;
  }

  /** A core the test opened itself (to look at it before start): closed after the test like the others. */
  track(core: OpenNode): OpenNode {
    this.open.push(core);
    return core;
  }

  async stop(core: OpenNode): Promise<void> {
    this.open = this.open.filter((c) => c !== core);
    await core.close();
  }

  async closeAll(): Promise<void> {
    for (const core of this.open) await core.close();
    this.open = [];
  }
}

/** Registers the hooks of a bed for the calling test file. */
export function useNodeBed(dirPrefix: string, defaults: NodeOptions = {}): NodeBed {
  const bed = new NodeBed(defaults);
  beforeEach(async () => {
    bed.dir = mkdtempSync(join(tmpdir(), dirPrefix));
    bed.rx = await startReceiver();
  });
  afterEach(async () => {
    await bed.closeAll();
    await bed.rx.close();
    rmSync(bed.dir, { recursive: true, force: true });
  });
  return bed;
}

/**
 * The bed of the tests that run nodes as child processes (the BUILT code): dist/ checked up to date, one temp dir
 * and one real callback receiver for the file, and every child tracked is killed (resumed first, in case a test
 * left it SIGSTOPped) after the file's last test.
 */
export class ProcessBed {
  dir = '';
  rx!: Receiver;
  private readonly children: Child[] = [];

  /** Kills `child` after the file's tests (a test may kill it earlier: kill9 of a dead child does nothing). */
  track<T extends Child | Child[]>(child: T): T {
    for (const c of Array.isArray(child) ? child : [child]) this.children.push(c);
    return child;
  }

  async killAll(): Promise<void> {
    for (const c of this.children) {
      if (c.proc.pid !== undefined && c.proc.exitCode === null) c.proc.kill('SIGCONT');
      await kill9(c);
    }
    this.children.length = 0;
  }
}

/** Registers the hooks of a process bed for the calling test file. */
export function useProcessBed(dirPrefix: string): ProcessBed {
  const bed = new ProcessBed();
  beforeAll(async () => {
    assertBuilt();
    bed.dir = mkdtempSync(join(tmpdir(), dirPrefix));
    bed.rx = await startReceiver();
  });
  afterAll(async () => {
    await bed.killAll();
    await bed.rx?.close();
    if (bed.dir !== '') rmSync(bed.dir, { recursive: true, force: true });
  });
  return bed;
}
