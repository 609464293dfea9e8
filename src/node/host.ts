/**
 * openNode: everything of a node but its HTTP listener: the SQLite file, the Raft host (one group per shard),
 * the peer transport (when --peers is set), the proposer (group commit), the dispatcher, the firing engine,
 * metrics and the SchedulerApi. startNode (node.ts) puts the HTTP server in front of it; tests may drive the
 * core's api directly.
 */
import { randomInt } from 'node:crypto';
import { ManualClock, systemClock, type Clock } from '../core/clock.js';
import { createLogger, type Logger } from '../core/log.js';
import { clusterLimits, limits, nodeLimits, queueLimits } from '../core/limits.js';
import { Prng } from '../core/prng.js';
import { targetPolicyFromLists, type TargetPolicy } from '../dispatch/target-policy.js';
import type { ThreadEntry } from '../dispatch/firing-port.js';
import { PunctualError } from '../core/errors.js';
import { PeerTransport } from '../http/peer/index.js';
import { NodeMetrics } from '../metrics/metrics.js';
import { jobStates, type JobState } from '../scheduler/types.js';
import { dbFilePath, getNodeMeta, logFilePath, openNodeDbs, setNodeMeta, type Db, type NodeDbs } from '../store/db.js';
import { WalSyncer } from '../store/wal-sync.js';
import { BackupTaker } from '../store/backup.js';
import { Checkpointer, walFileBytes } from '../store/checkpointer.js';
import type { NodeConfig } from './api.js';
import { ClockDriver } from './clock-driver.js';
import { ClusterOps } from './cluster-ops.js';
import { MemberBook, Membership, membershipKind, startPeers, type MembershipOptions, type MembershipResult } from './membership.js';
import type { ShardGroup } from './group.js';
import { NodeShell } from './shell.js';
import { openShardLogs, RaftHost } from './raft-host.js';
import { Node } from '../nodecore/index.js';
import { answerForward, apiKind, ShardRouter } from './router.js';
import { NodeService, type ServiceOptions } from './service.js';
import { RetentionDriver } from './retention.js';
import { retentionLimits } from '../core/limits.js';

export interface NodeOptions {
  logger?: Logger;
  clock?: Clock;
  /** A storage error after which the file cannot be trusted. Default: log it and exit(1). */
  onFatal?: (err: unknown) => void;
  /** How long close() lets in-flight callbacks finish (default nodeLimits.closeGraceMs). */
  closeGraceMs?: number;
  /** Leadership rebalancing period; 0 turns it off (tests that place leaders by hand). */
  rebalanceIntervalMs?: number;
  /** Log compaction thresholds (tests lower them to see a follower catch up by snapshot). */
  compaction?: { keepEntries: number; everyEntries: number; keepBytes?: number };
  /** The state file's write batch (tests): defaults nodeLimits.stateBatchIntervalMs / stateBatchEntriesMax. */
  stateBatch?: { intervalMs: number; entriesMax: number };
  /**
   * This node joins a running cluster (`punctual serve --join`): its groups are not bootstrapped from --peers
   * (which must name current members); each waits for a snapshot from its leader once `punctual cluster
   * add-node` adds this node. Ignored when the data directory already holds Raft state.
   */
  join?: boolean;
  /** Overrides of membershipLimits (tests). */
  membershipLimits?: MembershipOptions['limits'];
  /** Overrides of the manual clock's bounds on one advance (tests; default clockLimits). */
  clockLimits?: { advanceAttemptsMax: number; advanceRealMsMax: number };
  /** The firing thread's module (tests run a bundle of the sources); default: the built one, else none. */
  firingThreadEntry?: ThreadEntry;
}

/** The API with online membership (POST / DELETE /v1/cluster/nodes), on top of NodeService. */
export class MemberNodeService extends NodeService {
  constructor(
    o: ServiceOptions,
    readonly membership: Membership,
  ) {
    super(o);
  }

  addNode(id: string, peerAddr: string): Promise<MembershipResult> {
    return this.membership.addNode(id, peerAddr);
  }

  removeNode(id: string): Promise<MembershipResult> {
    return this.membership.removeNode(id);
  }
}

export interface OpenNode {
  readonly service: MemberNodeService;
  readonly membership: Membership;
  readonly metrics: NodeMetrics;
  /** The shell of the node's NodeCore: firing (the wheel, the dispatcher) and group commit (foldedTotal). */
  readonly engine: NodeShell;
  /** The same shell, by the name of its group commit side. */
  readonly proposer: NodeShell;
  /** Data retention (retention.ts). */
  readonly retention: RetentionDriver;
  readonly host: RaftHost;
  readonly cluster: ClusterOps;
  readonly logger: Logger;
  /** The peer transport (null without --peers). */
  readonly transport: PeerTransport | null;
  /** The SSRF guard of callbacks; startNode adds the API listener to it once bound. */
  readonly targetPolicy: TargetPolicy;
  /** Starts the peer transport and the Raft groups; a single node waits until it fires every shard. */
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

/**
 * A node that talks to peers must authenticate them (peer TLS or a cluster secret) unless the operator said
 * otherwise (--insecure-peers): without either, anyone who reaches --peer-listen can read and change everything.
 */
export const peerSecurityRefusal =
  'peers need authentication: give --peer-tls-cert-file, --peer-tls-key-file and --peer-tls-ca-file, or --cluster-secret (or --insecure-peers to run peers unauthenticated)';

/** `--clock manual` is for one node: a cluster's leases and elections need every member on real time. */
export const manualClockRefusal = '--clock manual runs a single node only: a cluster needs real time (refused with --peers)';

export function peerSecurityOk(config: NodeConfig): boolean {
  return (config.peerTls ?? null) !== null || config.clusterSecret !== null || config.insecurePeers === true;
}

function sumCounts(shards: ShardGroup[]): Record<JobState, number> {
  const total = Object.fromEntries(jobStates.map((s) => [s, 0])) as Record<JobState, number>;
  for (const sh of shards) {
    const c = sh.store.countJobsByState();
    for (const s of jobStates) total[s] += c[s];
  }
  return total;
}

/** The bounded queues of the node, for punctual_queue_depth / punctual_queue_limit (src/core/limits.ts queueLimits). */
function queueDepths(node: Node, shell: NodeShell): Array<{ queue: string; depth: number; limit: number }> {
  const e = node.core.queueDepths();
  return [
    { queue: 'proposer', depth: e.proposer, limit: queueLimits.proposerCommandsMax },
    { queue: 'proposer_engine_items', depth: e.engineItems, limit: queueLimits.proposerEngineItemsMax },
    { queue: 'apply', depth: node.replication.applyBacklog(), limit: queueLimits.applyQueueEntriesMax },
    { queue: 'due_backlog', depth: e.dueBacklog, limit: queueLimits.dueBacklogMax },
    { queue: 'dispatch_queued', depth: shell.dispatcher.queued(), limit: queueLimits.dispatchQueuedMax },
    { queue: 'wheel', depth: e.wheel, limit: queueLimits.wheelEntriesMax },
    { queue: 'wheel_loaded', depth: e.wheel, limit: queueLimits.wheelLoadedMax },
    { queue: 'wheel_parked', depth: e.parked, limit: queueLimits.wheelEntriesMax - queueLimits.wheelLoadedMax },
  ];
}

/**
 * When each step of a start ended, in ms since the process started (performance.now's origin), logged once at
 * debug: a slow restart shows at a glance whether module load, the files, the logs, the election or the replay
 * took the time.
 */
class StartupPhases {
  private readonly at: Record<string, number> = {};

  constructor() {
    this.mark('open');
  }

  mark(phase: string): void {
    this.at[`${phase}Ms`] = Math.round(performance.now());
  }

  /** Marks 'leading' the first time `all` holds; answers `all`. */
  leading(all: boolean): boolean {
    if (all && this.at.leadingMs === undefined) this.mark('leading');
    return all;
  }

  summary(): Record<string, number> {
    return { ...this.at };
  }
}

/** Polls `done` every few ms until it holds or `ms` passed. */
async function waitUntil(done: () => boolean, ms: number): Promise<boolean> {
  const until = Date.now() + ms;
  while (!done()) {
    if (Date.now() >= until) return false;
    await new Promise<void>((r) => setTimeout(r, 2));
  }
  return true;
}

interface Durability {
  /** fsyncs the log's WAL after each round. */
  walSync: WalSyncer | null;
  /** fsyncs the state file's WAL after each batch commit. */
  stateSync: WalSyncer | null;
  checkpointer: Checkpointer | null;
  logCheckpointer: Checkpointer | null;
  /** Set once the Raft host exists: a TRUNCATE checkpoint of the state file commits its write batch first. */
  beforeStateTruncate: { run: () => void };
}

const noDurability = (): Durability => ({ walSync: null, stateSync: null, checkpointer: null, logCheckpointer: null, beforeStateTruncate: { run: () => undefined } });

function openDurability(config: NodeConfig, logger: Logger, onFatal: (err: unknown) => void): Durability {
  const d = noDurability();
  if (config.fsync !== 'batch') return d;
  d.walSync = new WalSyncer(logFilePath(config.dataDir), onFatal);
  d.stateSync = new WalSyncer(dbFilePath(config.dataDir), onFatal);
  const before = d.beforeStateTruncate;
  d.checkpointer = new Checkpointer(dbFilePath(config.dataDir), nodeLimits.walCheckpointIntervalMs, logger, onFatal, { beforeTruncate: () => before.run() });
  d.logCheckpointer = new Checkpointer(logFilePath(config.dataDir), nodeLimits.walCheckpointIntervalMs, logger, onFatal);
  return d;
}

async function closeDurability(d: Durability): Promise<void> {
  for (const w of [d.walSync, d.stateSync]) {
    if (w === null) continue;
    await w.sync();
    await w.close();
  }
  await d.checkpointer?.close();
  await d.logCheckpointer?.close();
}

export async function openNode(config: NodeConfig, options: NodeOptions = {}): Promise<OpenNode> {
  const logger = (options.logger ?? createLogger({ level: config.logLevel, format: config.logFormat })).child({
    node: config.nodeId,
  });
  const realClock = options.clock ?? systemClock(config.clockOffsetMs);
  if (config.clock === 'manual' && config.peers.length > 0) throw new Error(manualClockRefusal);
  // Only the scheduler's time is virtual: Raft (leases, elections, proposal deadlines) keeps realClock.
  const manualClock = config.clock === 'manual' ? new ManualClock(config.clockStartMs ?? realClock.nowMs()) : null;
  const clock = manualClock ?? realClock;
  if ((options.join ?? config.join) === true && config.peers.length === 0) throw new Error('--join needs --peers naming the current members');
  if (config.peers.length > 0 && !peerSecurityOk(config)) throw new Error(peerSecurityRefusal);
  const phases = new StartupPhases();
  const dbs = openNodeDbs(config.dataDir, config.fsync);
  phases.mark('files');
  const db = dbs.state;
  const onFatal =
    options.onFatal ??
    ((err: unknown) => {
      logger.error('fatal storage error; exiting', { err });
      process.exit(1);
    });
  let durability: Durability = noDurability();
  try {
    checkIdentity(db, config);
    durability = openDurability(config, logger, onFatal);
  } catch (err) {
    dbs.log.close();
    db.close();
    throw err;
  }
  try {
    return assemble(config, options, { db, dbs, clock, realClock, manualClock, logger, onFatal, phases, ...durability });
  } catch (err) {
    await closeDurability(durability);
    dbs.log.close();
    db.close();
    throw err;
  }
}

interface Parts extends Durability {
  db: Db;
  dbs: NodeDbs;
  /** The scheduler's clock: manualClock when there is one, else realClock. */
  clock: Clock;
  realClock: Clock;
  manualClock: ManualClock | null;
  logger: Logger;
  onFatal: (err: unknown) => void;
  phases: StartupPhases;
}

function assemble(config: NodeConfig, options: NodeOptions, p: Parts): OpenNode {
  const { db, clock, logger, onFatal } = p;
  // The peer transport: opened below, or later by the first add-node of a single node (growTransport).
  let transport: PeerTransport | null = null;
  const targetPolicy = targetPolicyFromLists(config.callbackAllow, config.callbackDeny);
  // A joining node bootstraps nothing: its groups learn their membership from their leaders' snapshots.
  const voters = (options.join ?? config.join) === true ? [] : [config.nodeId, ...config.peers.map((x) => x.id)];
  const logs = openShardLogs(p.dbs, config.shards, voters, config.fsync);
  p.phases.mark('logs');
  const rand = new Prng(randomInt(2 ** 31));
  // The node's pure side: Replication and NodeCore composed (src/nodecore/node.ts); the shells below carry it out.
  const node = new Node({
    replication: {
      nodeId: config.nodeId,
      shards: logs.storages.map((storage, shard) => ({ storage, applied: logs.applied[shard]! })),
      rand,
      compaction: options.compaction ?? { keepEntries: nodeLimits.logKeepEntries, everyEntries: nodeLimits.logCompactEveryEntries, keepBytes: nodeLimits.logKeepBytes },
      reachable: (peer) => transport === null || transport.reachable(peer),
    },
    core: {
      nodeId: config.nodeId,
      stores: logs.stores,
      startMs: clock.nowMs(),
      rand01: Math.random,
      mergeCreates: config.fsync !== 'always',
      manualClock: p.manualClock !== null,
      stageLeadMs: config.stageLeadMs ?? limits.firingStageLeadMs,
      logger: logger.child({ component: 'engine' }),
    },
    clocks: { nowMs: () => clock.nowMs(), monoMs: () => performance.now() },
  });
  // The host exists only below; the book's first writes (seeded from --peers) come before any batch is open.
  const afterBookWrite = { run: (): void => undefined };
  const book = new MemberBook(db, () => afterBookWrite.run());
  const peerList = startPeers(book, config.nodeId, config.peers, logger);
  // Metrics read the node, and the shell's dispatcher and the service once they exist (only when scraped).
  const metrics: NodeMetrics = new NodeMetrics({
    jobCounts: (): Record<JobState, number> => sumCounts(host.groups),
    wheelSize: () => node.core.queueDepths().wheel,
    dispatchInFlight: () => firing.dispatcher.inFlight(),
    shards: () => host.groups.map((g) => ({ shard: g.shard, role: g.role, term: g.raw.status().term, commit: g.raw.status().commit, applied: g.applied })),
    peers: () => transport?.stats() ?? null,
    queues: () => queueDepths(node, firing),
    dueProfile: () => service.dueProfile(60),
    walBytes: () => walFileBytes(dbFilePath(config.dataDir)) + walFileBytes(logFilePath(config.dataDir)),
  });
  const host: RaftHost = new RaftHost({
    nodeId: config.nodeId,
    db,
    logDb: p.dbs.log,
    node,
    logs,
    shell: (rounds) =>
      new NodeShell({
        node,
        rounds,
        clock,
        logger: logger.child({ component: 'engine' }),
        metrics,
        firing: {
          targetPolicy,
          payloadRefBytesMax: config.payloadRefBytesMax,
          clock,
          logger: logger.child({ component: 'dispatch' }),
          // The thread keeps its own clock (the real one plus an offset): a manual clock stays on this loop.
          mode: config.firingThread !== false && p.manualClock === null ? 'thread' : 'in-process',
          threadEntry: options.firingThreadEntry,
          logLevel: config.logLevel,
          logFormat: config.logFormat,
        },
      }),
    fsync: config.fsync,
    walSync: p.walSync,
    stateSync: p.stateSync,
    stateBatch: options.stateBatch,
    logger: logger.child({ component: 'raft' }),
    metrics,
    onFatal,
    onConfChange: (shard, conf) => membership.onConfChange(shard, conf),
  });
  const firing = host.shell;
  p.beforeStateTruncate.run = () => host.batch.commit();
  afterBookWrite.run = () => void host.batch.commit();
  const membership = new Membership({
    nodeId: config.nodeId,
    book,
    host,
    clock: p.realClock,
    logger: logger.child({ component: 'membership' }),
    limits: options.membershipLimits,
    // Called only on an add-node, long after assembly: growTransport is defined below by then.
    startTransport: () => growTransport(),
    // Called only on a remove-node, long after assembly: cluster is defined below by then.
    handOver: (shard, to) => cluster.transferLeader(shard, to),
  });
  const dispatcher = firing.dispatcher;
  // Data retention (retention.ts): the leader of each shard proposes the deletions.
  const retention = new RetentionDriver({
    shards: host.groups,
    leading: () => firing.firingShards().keys(),
    propose: (shard, command) => firing.propose(shard, command),
    clock,
    logger: logger.child({ component: 'retention' }),
    retentionMs: config.retentionMs === undefined ? retentionLimits.retentionMsDefault : config.retentionMs,
    executionsKeep: config.retentionExecutions ?? retentionLimits.executionsKeepDefault,
  });
  const router = new ShardRouter(config.nodeId, host, logger);
  const cluster = new ClusterOps(config, host, logger.child({ component: 'cluster' }));
  cluster.setMembers(() => membership.peers());
  cluster.setRemovedFrom(() => membership.removedFrom());
  const clockDriver = p.manualClock === null ? null : new ClockDriver(p.manualClock, firing, options.clockLimits);
  const backups = new BackupTaker(db, config.dataDir, config.nodeId, logger.child({ component: 'backup' }), undefined, { log: p.dbs.log, hold: () => host.holdForCopy() });
  const service = new MemberNodeService({ config, shards: host.groups, proposer: firing, engine: firing, host, router, cluster, clock, metrics, clockDriver, backups }, membership);
  const makeTransport = (): PeerTransport => {
    // Also a node whose member book has peers (restarted without --peers) or that grows with add-node.
    if (p.manualClock !== null) throw new PunctualError('conflict', manualClockRefusal);
    if (!peerSecurityOk(config)) throw new PunctualError('conflict', `this node cannot talk to peers: ${peerSecurityRefusal}`);
    return new PeerTransport({
      nodeId: config.nodeId,
      listenHost: config.peerListenHost,
      listenPort: config.peerListenPort,
      peers: peerList,
      clusterSecret: config.clusterSecret,
      tls: config.peerTls ?? null,
      shards: config.shards,
      logger: logger.child({ component: 'peer' }),
      onMessages: (_from, messages) => host.step(messages),
      onSnapshot: (_from, message) => host.installSnapshot(message),
      onRequest: (_from, kind, body) => {
        if (kind === membershipKind) return membership.answer(body);
        if (kind !== apiKind) return Promise.reject(new Error(`unknown request kind ${kind}`));
        return answerForward((op) => service.runForwarded(op), body);
      },
      onSnapshotStatus: (peerId, group, ok) => host.reportSnapshot(group, peerId, ok),
    });
  };
  // The member book (seeded from --peers) decides: a node that ever had peers keeps its peer transport.
  if (peerList.length > 0 || book.all().length > 0) transport = makeTransport();
  router.setSender(transport);
  cluster.setPeers(transport);
  /** A single node adding its first member: open --peer-listen now and wire the transport everywhere. */
  const growTransport = async (): Promise<PeerTransport> => {
    if (transport !== null) return transport;
    const t = makeTransport();
    cluster.peerPort = (await t.start()).port;
    targetPolicy.addListener(config.peerListenHost, cluster.peerPort, 'peer listener');
    transport = t;
    router.setSender(t);
    cluster.setPeers(t);
    host.setSender(t);
    cluster.startRebalancer(options.rebalanceIntervalMs ?? clusterLimits.rebalanceIntervalMs);
    return t;
  };
  let closing: Promise<void> | null = null;
  const close = async (): Promise<void> => {
    await backups.close();
    membership.close();
    cluster.stopRebalancer();
    firing.stop();
    retention.stop();
    await dispatcher.close(options.closeGraceMs ?? nodeLimits.closeGraceMs);
    await firing.drain();
    await firing.close(clusterLimits.leaderWaitMs);
    await host.close();
    await transport?.close();
    await closeDurability(p);
    metrics.close();
    p.dbs.log.close();
    db.close();
    logger.info('node closed');
  };
  return {
    service,
    membership,
    metrics,
    engine: firing,
    proposer: firing,
    retention,
    host,
    cluster,
    logger,
    targetPolicy,
    get transport() {
      return transport;
    },
    async start() {
      const peers = transport;
      if (peers !== null) {
        cluster.peerPort = (await peers.start()).port;
        targetPolicy.addListener(config.peerListenHost, cluster.peerPort, 'peer listener');
      }
      const { phases } = p;
      phases.mark('start');
      host.start(peers);
      membership.start(peers);
      await firing.start();
      phases.mark('loaded');
      // A single node leads every shard after its first rounds: answer only once it fires them all.
      if (peers === null) {
        await waitUntil(() => phases.leading(host.groups.every((g) => g.role === 'leader')) && host.groups.every((g) => g.firing), 5_000);
      }
      phases.mark('firing');
      host.started();
      logger.debug('startup phases', { ...phases.summary(), replayEntries: logs.replay.entries, replayMs: logs.replay.ms });
      cluster.startRebalancer(options.rebalanceIntervalMs ?? clusterLimits.rebalanceIntervalMs);
      retention.start();
      service.ready = true;
      // The send path warmed up right after readiness (src/dispatch/warm-up.ts), not during the start it would slow.
      if (p.manualClock === null) void dispatcher.warmUp();
      if (p.manualClock !== null) {
        logger.warn('manual clock: time moves only with POST /v1/clock:advance; not for production', { now: new Date(p.manualClock.nowMs()).toISOString() });
      }
      logger.info('node started', { shards: config.shards, dataDir: config.dataDir, fsync: config.fsync, peers: config.peers.map((x) => x.id), firing: firing.dispatcher.mode });
    },
    close() {
      service.ready = false;
      closing ??= close();
      return closing;
    },
  };
}
