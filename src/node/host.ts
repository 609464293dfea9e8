/**
 * NodeCore: everything of a node but its HTTP listener: the SQLite file, one (store, log) pair per shard, the
 * proposer (group commit), the dispatcher, the firing engine, metrics and the SchedulerApi. startNode
 * (node.ts) puts the HTTP server in front of it; tests may drive the core's api directly.
 */
import { systemClock, type Clock } from '../core/clock.js';
import { createLogger, type Logger } from '../core/log.js';
import { nodeLimits } from '../core/limits.js';
import { Dispatcher } from '../dispatch/dispatcher.js';
import { NodeMetrics } from '../metrics/metrics.js';
import { jobStates, type JobState } from '../scheduler/types.js';
import { dbFilePath, getNodeMeta, openNodeDb, setNodeMeta, type Db } from '../store/db.js';
import { SqliteLogStorage } from '../store/log-storage.js';
import { SqliteShardStore } from '../store/shard-store.js';
import { WalSyncer } from '../store/wal-sync.js';
import { Checkpointer } from '../store/checkpointer.js';
import type { NodeConfig } from './api.js';
import { FiringEngine } from './engine.js';
import { Proposer, type ShardStorage } from './proposer.js';
import { NodeService } from './service.js';

export interface NodeOptions {
  logger?: Logger;
  clock?: Clock;
  /** A storage error after which the file cannot be trusted. Default: log it and exit(1). */
  onFatal?: (err: unknown) => void;
  /** How long close() lets in-flight callbacks finish (default nodeLimits.closeGraceMs). */
  closeGraceMs?: number;
}

export interface NodeCore {
  readonly service: NodeService;
  readonly metrics: NodeMetrics;
  readonly engine: FiringEngine;
  readonly logger: Logger;
  /** Loads open executions and due jobs, starts firing; readiness becomes true. */
  start(): Promise<void>;
  /** Stops firing, lets in-flight callbacks finish (bounded), flushes proposals, closes the file. */
  close(): Promise<void>;
}

/** Fixes the shard count and node id at bootstrap; a later start with other values is refused. */
function checkIdentity(db: Db, config: NodeConfig): void {
  const shards = getNodeMeta(db, 'shards');
  if (shards === null) setNodeMeta(db, 'shards', String(config.shards));
  else if (Number(shards) !== config.shards) {
    throw new Error(`--shards ${config.shards} does not match the ${shards} shards this data directory was created with`);
  }
  const nodeId = getNodeMeta(db, 'node_id');
  if (nodeId === null) setNodeMeta(db, 'node_id', config.nodeId);
  else if (nodeId !== config.nodeId) {
    throw new Error(`--node-id ${config.nodeId} does not match node ${nodeId} that owns this data directory`);
  }
}

function openShards(db: Db, count: number): ShardStorage[] {
  const shards: ShardStorage[] = [];
  for (let shard = 0; shard < count; shard++) {
    const log = new SqliteLogStorage(db, shard);
    const lastIndex = log.lastIndex();
    const appliedIndex = log.appliedIndex();
    // Append and apply share one transaction in the single node, so they can never disagree.
    if (lastIndex !== appliedIndex) throw new Error(`shard ${shard}: log ends at ${lastIndex}, applied ${appliedIndex}`);
    shards.push({ shard, store: new SqliteShardStore(db, shard), log, lastIndex, appliedIndex, appliedSinceCompact: 0 });
  }
  return shards;
}

function sumCounts(shards: ShardStorage[]): Record<JobState, number> {
  const total = Object.fromEntries(jobStates.map((s) => [s, 0])) as Record<JobState, number>;
  for (const sh of shards) {
    const c = sh.store.countJobsByState();
    for (const s of jobStates) total[s] += c[s];
  }
  return total;
}

export async function openNode(config: NodeConfig, options: NodeOptions = {}): Promise<NodeCore> {
  const logger = (options.logger ?? createLogger({ level: config.logLevel, format: config.logFormat })).child({
    node: config.nodeId,
  });
  const clock = options.clock ?? systemClock(config.clockOffsetMs);
  const db = openNodeDb(config.dataDir, config.fsync);
  const onFatal =
    options.onFatal ??
    ((err: unknown) => {
      logger.error('fatal storage error; exiting', { err });
      process.exit(1);
    });
  let shards: ShardStorage[];
  let walSync: WalSyncer | null = null;
  let checkpointer: Checkpointer | null = null;
  try {
    checkIdentity(db, config);
    shards = openShards(db, config.shards);
    if (config.fsync === 'batch') {
      walSync = new WalSyncer(dbFilePath(config.dataDir), onFatal);
      checkpointer = new Checkpointer(dbFilePath(config.dataDir), nodeLimits.walCheckpointIntervalMs, logger, onFatal);
    }
  } catch (err) {
    await walSync?.close();
    db.close();
    throw err;
  }
  // The engine is created below; the metrics and proposer reach it through this late-bound reference.
  let engine: FiringEngine | null = null;
  const dispatcher = new Dispatcher({
    clock,
    logger: logger.child({ component: 'dispatch' }),
    onStart: (d, startedAtMs) => {
      if (d.attempt === 1) metrics.fireLatenessMs.observe(startedAtMs - d.scheduledAtMs);
      engine?.onDispatchStart(d);
    },
  });
  const metrics = new NodeMetrics({
    jobCounts: () => sumCounts(shards),
    wheelSize: () => engine?.wheelSize ?? 0,
    dispatchInFlight: () => dispatcher.inFlight(),
  });
  const proposer = new Proposer({
    nodeId: config.nodeId,
    db,
    shards,
    fsync: config.fsync,
    clock,
    logger,
    metrics,
    onApplied: (shard, command, effects) => engine?.onApplied(shard, command, effects),
    onFatal,
    walSync,
  });
  engine = new FiringEngine({ shards, proposer, dispatcher, clock, logger: logger.child({ component: 'engine' }), metrics });
  const firing = engine;
  const service = new NodeService({ config, shards, proposer, engine, clock, metrics });
  let closing: Promise<void> | null = null;
  const close = async (): Promise<void> => {
    firing.stop();
    await dispatcher.close(options.closeGraceMs ?? nodeLimits.closeGraceMs);
    await firing.drain();
    await proposer.close();
    await checkpointer?.close();
    metrics.close();
    db.close();
    logger.info('node closed');
  };
  return {
    service,
    metrics,
    engine,
    logger,
    async start() {
      await firing.start();
      service.ready = true;
      logger.info('node started', { shards: config.shards, dataDir: config.dataDir, fsync: config.fsync });
    },
    close() {
      service.ready = false;
      closing ??= close();
      return closing;
    },
  };
}
