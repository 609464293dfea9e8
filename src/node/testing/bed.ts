/**
 * The test bed the in-process node tests share: a temp data dir and a real callback receiver per test, and the
 * cores a test opened, closed after it (even when it failed half-way).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach } from 'vitest';
import { silentLogger } from '../../core/log.js';
import type { NodeConfig } from '../api.js';
import { openNode, type NodeCore, type NodeOptions } from '../host.js';
import { startReceiver, type Receiver } from './receiver.js';

export class NodeBed {
  dir = '';
  rx!: Receiver;
  private open: NodeCore[] = [];

  constructor(private readonly defaults: NodeOptions) {}

  /** Opens and starts a node; it is closed after the test unless the test stops it first. */
  async startCore(config: NodeConfig, options: NodeOptions = {}): Promise<NodeCore> {
    const core = this.track(await openNode(config, { logger: silentLogger, ...this.defaults, ...options }));
    await core.start();
    return core;
  }

  /** A core the test opened itself (to look at it before start): closed after the test like the others. */
  track(core: NodeCore): NodeCore {
    this.open.push(core);
    return core;
  }

  async stop(core: NodeCore): Promise<void> {
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
