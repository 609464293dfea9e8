/**
 * One bench run: start the receiver, spawn local node(s) or use --server URLs, put the bench task, drive the
 * scenario's load, wait for the callbacks to drain, measure, stop what was started, build the result.
 */
import { createLogger, type Logger } from '../src/core/log.js';
import { summarize } from './histogram.js';
import {
  ServerSet,
  submitClosedLoop,
  submitOpenLoop,
  sleepMs,
  type JobPlan,
  type OpenLoopOutcome,
  type SubmitOutcome,
} from './load.js';
import { counterSum, histogramSummary, pushLimit } from './limit.js';
import { spawnLocalNodes, type LocalNodes } from './node-process.js';
import { nowPreciseMs, startReceiver, waitUntil, type CallbackReceiver } from './receiver.js';
import {
  environmentInfo,
  evaluateTargets,
  targetsFor,
  type BenchResult,
  type Figures,
  type ScenarioName,
  type WarmBurstFigures,
} from './results.js';

export interface ScenarioParams {
  count: number;
  concurrency: number;
  batchSize: number;
  ratePerS: number;
  durationS: number;
  /** submit, submit-batch, hot-instant: jobs are due at start + leadMs (one instant after the submit phase). */
  leadMs: number;
  /** steady: each job is due this long after its submission. */
  delayMs: number;
  /** After the last due time, how long to wait for missing callbacks before counting them lost. */
  drainTimeoutS: number;
  /** The bench task's max_concurrency (callbacks in flight per task). */
  taskMaxConcurrency: number;
  /**
   * burst: once the first burst is delivered, a second one of `count` jobs on the same node, due this long after
   * its submission (the warm case); 0 = none.
   */
  warmLeadMs: number;
  /**
   * Before the measured run, the node(s) carry a steady load (--rate, else 1,000/s) for this long, not measured: a
   * production node has run for hours, and a fresh process spends its first seconds compiling (V8's JIT); 0 = none.
   */
  warmUpS: number;
}

export interface RunOptions {
  scenario: ScenarioName;
  params: ScenarioParams;
  /** Client API URLs of an existing node or cluster; null = spawn `nodes` local nodes and stop them after. */
  servers: string[] | null;
  nodes: number;
  token: string | null;
  receiverPort: number;
  /** Run the callback receiver on the bench's own event loop instead of its own thread (to compare the two). */
  receiverInProcess?: boolean;
  /** Spawned nodes serve the API over HTTPS and talk to their peers over mutual TLS. */
  tls?: boolean;
  logger?: Logger;
}

export const taskName = 'bench';
/** hot-instant stops sending this long before the instant (a job sent later would hardly share it). */
const instantMarginMs = 100;

/** Defaults per scenario, sized for the targets of targetsFor(); every one can be overridden on the command line. */
export function defaultParams(scenario: ScenarioName): ScenarioParams {
  const common = { ratePerS: 0, delayMs: 1_000, drainTimeoutS: 15, taskMaxConcurrency: 1_000, warmLeadMs: 0, warmUpS: 0 };
  switch (scenario) {
    case 'submit':
      return { ...common, count: 50_000, concurrency: 64, batchSize: 1, durationS: 30, leadMs: leadFor(scenario, 50_000) };
    case 'submit-batch':
      return { ...common, count: 200_000, concurrency: 4, batchSize: 2_000, durationS: 30, leadMs: leadFor(scenario, 200_000) };
    case 'steady':
      return { ...common, count: 0, concurrency: 64, batchSize: 50, ratePerS: 5_000, durationS: 10, leadMs: 0 };
    case 'hot-instant':
      return { ...common, count: 100_000, concurrency: 4, batchSize: 5_000, durationS: 30, leadMs: leadFor(scenario, 100_000) };
    case 'burst':
      // N due at one ms on a fresh node: the connections to the receiver are cold unless the node opens them ahead.
      // Then N more on the same node (warm code, connections kept alive by the receiver).
      return { ...common, count: 20, concurrency: 1, batchSize: 20, durationS: 30, leadMs: 3_000, warmLeadMs: 1_000 };
    case 'limit':
      return { ...common, count: 50_000, concurrency: 128, batchSize: 1, durationS: 60, leadMs: 0 };
  }
}

/**
 * Default --lead-ms: time to submit count jobs at an assumed rate, with 50 % margin, plus 2 s. submit and
 * submit-batch assume their target rate (running late only overlaps delivery with the tail of submission);
 * hot-instant assumes a slower 10,000 jobs/s, because every job must be acknowledged before the instant for
 * the figure to mean anything.
 */
export function leadFor(scenario: ScenarioName, count: number): number {
  const assumedPerS = scenario === 'submit' ? 8_000 : scenario === 'submit-batch' ? 50_000 : 10_000;
  return Math.ceil((count / assumedPerS) * 1_500) + 2_000;
}

function runTag(): string {
  return `b${Math.floor(nowPreciseMs()).toString(36)}${Math.floor(Math.random() * 1296).toString(36)}-`;
}

async function putTask(servers: ServerSet, receiver: CallbackReceiver, params: ScenarioParams): Promise<void> {
  const body = JSON.stringify({
    url: receiver.url,
    method: 'POST',
    timeout_ms: 10_000,
    retry: { max_attempts: 5, initial_backoff_ms: 100, max_backoff_ms: 5_000, multiplier: 2, jitter: true },
    max_concurrency: params.taskMaxConcurrency,
  });
  const { status, json } = await servers.send('PUT', `/v1/tasks/${taskName}`, body);
  if (status !== 200 && status !== 201) {
    throw new Error(`PUT /v1/tasks/${taskName} answered ${status}: ${JSON.stringify(json)}`);
  }
}

interface LoadRun {
  outcome: SubmitOutcome | OpenLoopOutcome;
  /** The latest time any accepted job is due. */
  lastDueMs: number;
  /** hot-instant: the instant. */
  instantMs: number | null;
}

async function driveLoad(
  scenario: ScenarioName,
  servers: ServerSet,
  params: ScenarioParams,
  idPrefix: string,
): Promise<LoadRun> {
  const startMs = Math.floor(nowPreciseMs());
  let lastDueMs = 0;
  const noteDue = (dueMs: number): number => {
    lastDueMs = Math.max(lastDueMs, dueMs);
    return dueMs;
  };
  if (scenario === 'steady') {
    // Due times follow the ideal schedule (start + i / rate) + delay, so callbacks are as smooth as the rate.
    const plan: JobPlan = {
      idPrefix,
      taskName,
      dueAtMs: (i) => noteDue(Math.floor(startMs + (i * 1000) / params.ratePerS) + params.delayMs),
    };
    const outcome = await submitOpenLoop({
      servers, plan, ratePerS: params.ratePerS, durationS: params.durationS, tickMs: 5,
      batchSize: params.batchSize, inFlightMax: params.concurrency,
      deadlineMs: startMs + params.durationS * 1000 + 10_000,
    });
    return { outcome, lastDueMs, instantMs: null };
  }
  const instantMs = startMs + params.leadMs;
  const plan: JobPlan = { idPrefix, taskName, dueAtMs: () => noteDue(instantMs) };
  // hot-instant: a job submitted after the instant would not share it, so the instant also ends the submit phase.
  const boundMs = startMs + params.durationS * 1000;
  const oneInstant = scenario === 'hot-instant' || scenario === 'burst';
  const deadlineMs = oneInstant ? Math.min(boundMs, instantMs - instantMarginMs) : boundMs;
  const outcome = await submitClosedLoop({
    servers, plan, count: params.count, concurrency: params.concurrency, batchSize: params.batchSize, deadlineMs,
  });
  return { outcome, lastDueMs: instantMs, instantMs: oneInstant ? instantMs : null };
}

/**
 * burst, the warm case: on the same node, once the first burst is delivered, params.count more jobs due at one
 * instant params.warmLeadMs after their submission. Job ids `<run tag>w_<n>` (the first burst's have no `_`).
 * Receiver-side figures are the first deliveries recorded since the first burst's; the node's lateness is its
 * histogram minus what it held before this burst.
 */
async function runWarmBurst(servers: ServerSet, receiver: CallbackReceiver, params: ScenarioParams, idPrefix: string, first: LoadRun): Promise<WarmBurstFigures> {
  const before = await receiver.stats();
  const metricsBefore = await metricsTexts(servers);
  const instantMs = Math.floor(nowPreciseMs()) + params.warmLeadMs;
  const plan: JobPlan = { idPrefix: `${idPrefix}w_`, taskName, dueAtMs: () => instantMs };
  const outcome = await submitClosedLoop({
    servers, plan, count: params.count, concurrency: params.concurrency, batchSize: params.batchSize,
    deadlineMs: instantMs - instantMarginMs,
  });
  // The receiver counts both bursts' jobs: the drain waits for all of them.
  const both: LoadRun = { outcome: { ...outcome, acked: [...first.outcome.acked, ...outcome.acked] }, lastDueMs: instantMs, instantMs };
  const drainOutcome = await drain(receiver, both, params);
  const after = await receiver.stats();
  // Every job of this burst is due at instantMs: a first delivery's lateness is its arrival minus the instant.
  const samples = after.lateness.slice(before.lateness.length);
  const lateness = summarize(samples);
  return {
    accepted: outcome.acked.length,
    delivered: after.uniqueKeys - before.uniqueKeys,
    lost: await receiver.countMissing(outcome.acked),
    early: after.early - before.early,
    duplicates: after.duplicates - before.duplicates,
    drainOutcome,
    lateness,
    deliveredWithinMs: lateness.maxMs,
    firstWithinMs: lateness.minMs,
    nodeLateness: histogramSummary(await metricsTexts(servers), 'punctual_fire_lateness_ms', metricsBefore),
  };
}

/** Drain gives up this long after the last due time even while callbacks still trickle in (bounded runs). */
export const drainCapMs = 300_000;

type DrainOutcome = Figures['drainOutcome'];

/**
 * Waits for the accepted jobs' callbacks: until all arrived; or, after the last due time and the end of the submit
 * phase, until none arrived for drainTimeoutS (the rest are lost: a slow but moving delivery is waited for); or
 * drainCapMs after the last due time.
 */
async function drain(receiver: CallbackReceiver, run: LoadRun, params: ScenarioParams): Promise<DrainOutcome> {
  const expected = run.outcome.acked.length;
  const idleMs = params.drainTimeoutS * 1000;
  const capMs = Math.max(run.lastDueMs, run.outcome.endMs) + idleMs + drainCapMs;
  let outcome: DrainOutcome = 'all delivered';
  await waitUntil(async () => {
    const progress = await receiver.progress();
    // Jobs whose create was applied but never answered (a node killed mid-request) are delivered too: the count
    // alone would end the drain before every acknowledged one arrived.
    if (progress.deliveredJobs >= expected && (await receiver.countMissing(run.outcome.acked)) === 0) return true;
    const nowMs = nowPreciseMs();
    if (nowMs >= capMs) return (outcome = 'cap'), true;
    // Idle counts from the last arrival, the last due time or the end of the submit phase, whichever is latest.
    const lastMs = Math.max(progress.lastArrivalMs ?? 0, run.lastDueMs, run.outcome.endMs);
    return nowMs - lastMs >= idleMs && ((outcome = 'idle'), true);
  }, capMs - nowPreciseMs() + 1_000);
  // A short grace so re-deliveries racing the last first-delivery are counted as duplicates.
  await sleepMs(250);
  return outcome;
}

async function buildFigures(
  run: LoadRun,
  receiver: CallbackReceiver,
  drainOutcome: DrainOutcome,
  nodeRss: Array<number | null> | null,
): Promise<Figures> {
  const { outcome } = run;
  const stats = await receiver.stats();
  const lostIds = await receiver.missingIds(outcome.acked, 1000);
  const submitDurationMs = outcome.endMs - outcome.startMs;
  const spanMs = stats.firstArrivalMs !== null && stats.lastArrivalMs !== null ? stats.lastArrivalMs - stats.firstArrivalMs : 0;
  const delivered = stats.uniqueKeys;
  return {
    submitted: outcome.acked.length + outcome.failed,
    accepted: outcome.acked.length,
    rejected: outcome.failed,
    submitErrors: outcome.errors,
    submitDurationMs,
    submitTimedOut: outcome.timedOut,
    acceptedPerS: submitDurationMs > 0 ? (outcome.acked.length * 1000) / submitDurationMs : null,
    requests: outcome.requests,
    requestLatency: summarize(outcome.requestMs),
    delivered,
    deliveredPerS: spanMs > 0 ? (stats.deliveries * 1000) / spanMs : null,
    lateness: summarize(stats.lateness),
    early: stats.early,
    lost: await receiver.countMissing(outcome.acked),
    lostIds,
    drainOutcome,
    duplicates: stats.duplicates,
    malformed: stats.malformed,
    foreign: stats.foreign,
    deliveredWithinMs: run.instantMs !== null && stats.lastArrivalMs !== null ? stats.lastArrivalMs - run.instantMs : null,
    firstWithinMs: run.instantMs !== null && stats.firstArrivalMs !== null ? stats.firstArrivalMs - run.instantMs : null,
    backlogMax: 'backlogMax' in outcome ? outcome.backlogMax : null,
    ackedAfterDue: outcome.ackedAfterDue,
    nodePeakRssBytes: nodeRss,
    benchPeakRssBytes: process.resourceUsage().maxRSS * 1024,
  };
}

async function startServers(options: RunOptions, log: Logger): Promise<{ urls: string[]; local: LocalNodes | null }> {
  if (options.servers !== null) return { urls: options.servers, local: null };
  const local = await spawnLocalNodes({ nodes: options.nodes, token: options.token, tls: options.tls ?? false });
  log.info('bench: local node(s) ready', { urls: local.urls, pids: local.pids });
  return { urls: local.urls, local };
}

/** Callbacks pushed to measure the machine's limit after every other scenario (its `limit` share). */
const limitCountAfter = 20_000;

/**
 * The warm-up (params.warmUpS): a steady load at the run's rate (1,000/s when it has none) whose jobs carry another
 * id prefix (the receiver counts them as foreign, never as this run's), then a wait until the last of them is due
 * and a second more, so their outcomes are recorded before the measured run reads the node's costs.
 */
async function warmUp(servers: ServerSet, params: ScenarioParams, idPrefix: string, log: Logger): Promise<void> {
  const ratePerS = params.ratePerS > 0 ? params.ratePerS : 1_000;
  const startMs = Math.floor(nowPreciseMs());
  log.info('bench: warming up', { seconds: params.warmUpS, ratePerS });
  const plan: JobPlan = {
    idPrefix: `warm-${idPrefix}`,
    taskName,
    dueAtMs: (i) => Math.floor(startMs + (i * 1000) / ratePerS) + params.delayMs,
  };
  await submitOpenLoop({
    servers, plan, ratePerS, durationS: params.warmUpS, tickMs: 5, batchSize: 1, inFlightMax: params.concurrency,
    deadlineMs: startMs + params.warmUpS * 1000 + 10_000,
  });
  const lastDueMs = startMs + params.warmUpS * 1000 + params.delayMs;
  await sleepMs(Math.max(0, lastDueMs - nowPreciseMs()) + 1_000);
}

/** Every node's /metrics text, concatenated (the ServerSet goes round-robin: one request per server). */
async function metricsTexts(servers: ServerSet): Promise<string> {
  const texts: string[] = [];
  for (let i = 0; i < servers.urls.length; i++) {
    const { status, json } = await servers.send('GET', '/metrics').catch(() => ({ status: 0, json: null }));
    if (status === 200 && typeof json === 'string') texts.push(json);
  }
  return texts.join('\n');
}

/**
 * What the node process(es) spent so far, summed: CPU seconds of every thread (prom-client's
 * process_cpu_seconds_total), bytes written to storage, Raft rounds (one log commit each) and state-batch commits.
 */
async function nodeCosts(servers: ServerSet): Promise<{ cpuS: number | null; written: number | null; rounds: number | null; stateCommits: number | null }> {
  const text = await metricsTexts(servers);
  return {
    cpuS: counterSum(text, 'process_cpu_seconds_total'),
    written: counterSum(text, 'punctual_process_write_bytes'),
    rounds: counterSum(text, 'punctual_raft_append_duration_ms_count'),
    stateCommits: counterSum(text, 'punctual_commit_duration_ms_count'),
  };
}

/** After the last delivery, the outcome records still to be proposed and applied: their CPU belongs to the run. */
const cpuSettleMs = 300;

/** Scenario limit: no node; one process pushes callbacks into the receiver (bench/limit.ts). */
async function runLimit(options: RunOptions, receiver: CallbackReceiver, idPrefix: string): Promise<Figures> {
  const run = await pushLimit(receiver, idPrefix, options.params.count);
  const stats = await receiver.stats();
  return {
    submitted: 0, accepted: 0, rejected: 0, submitErrors: {}, submitDurationMs: 0, submitTimedOut: false, acceptedPerS: null,
    requests: run.sent, requestLatency: summarize(new Float64Array(0)),
    delivered: stats.uniqueKeys, deliveredPerS: run.perS, lateness: summarize(stats.lateness),
    early: 0, lost: run.failed, drainOutcome: 'all delivered', duplicates: stats.duplicates, malformed: stats.malformed,
    foreign: stats.foreign, deliveredWithinMs: null, backlogMax: null, ackedAfterDue: 0, nodePeakRssBytes: null,
    benchPeakRssBytes: process.resourceUsage().maxRSS * 1024, limitPerS: run.perS, shareOfLimit: 1,
  };
}

/** Runs one scenario end to end; stops every process and server it started, even on failure. */
export async function runScenario(options: RunOptions): Promise<BenchResult> {
  const log = options.logger ?? createLogger({ format: 'pretty' });
  const { scenario, params } = options;
  const startedAt = new Date().toISOString();
  const environment = environmentInfo();
  const idPrefix = runTag();
  const expected = scenario === 'steady' ? params.ratePerS * params.durationS : params.count;
  const receiver = await startReceiver({
    port: options.receiverPort,
    jobIdPrefix: idPrefix,
    expectedDeliveries: expected,
    inProcess: options.receiverInProcess ?? false,
  });
  let local: LocalNodes | null = null;
  let servers: ServerSet | null = null;
  try {
    if (scenario === 'limit') {
      const figures = await runLimit(options, receiver, idPrefix);
      return {
        scenario, startedAt, parameters: { ...params, nodes: 0, receiver: receiver.mode, tls: false },
        servers: { mode: 'spawned', urls: [] }, ...environment, figures, targets: [], pass: true,
      };
    }
    const started = await startServers(options, log);
    local = started.local;
    const perServer = Math.max(1, Math.ceil(params.concurrency / started.urls.length));
    servers = new ServerSet(started.urls, { connections: perServer, token: options.token, caPem: local?.caPem ?? null });
    await putTask(servers, receiver, params);
    // After a warm-up the node's lateness histogram is read as the difference from here.
    const metricsAtStart = params.warmUpS > 0 ? (await warmUp(servers, params, idPrefix, log), await metricsTexts(servers)) : undefined;
    const before = await nodeCosts(servers);
    log.info('bench: submitting', { scenario, ...params });
    const run = await driveLoad(scenario, servers, params, idPrefix);
    log.info('bench: submitted, draining', { accepted: run.outcome.acked.length, rejected: run.outcome.failed });
    const drained = await drain(receiver, run, params);
    const mode = local ? 'spawned' : 'external';
    const figures = await buildFigures(run, receiver, drained, local ? local.peakRssBytes() : null);
    figures.nodeLateness = histogramSummary(await metricsTexts(servers), 'punctual_fire_lateness_ms', metricsAtStart);
    await new Promise((r) => setTimeout(r, cpuSettleMs));
    const after = await nodeCosts(servers);
    const per = (a: number | null, b: number | null, scale: number): number | null =>
      a === null || b === null || figures.delivered === 0 ? null : ((b - a) * scale) / figures.delivered;
    if (before.cpuS !== null && after.cpuS !== null) {
      figures.nodeCpuMs = (after.cpuS - before.cpuS) * 1000;
      figures.nodeCpuUsPerCallback = per(before.cpuS, after.cpuS, 1e6);
    }
    figures.nodeWrittenBytesPerJob = per(before.written, after.written, 1);
    figures.nodeRoundsPer10kJobs = per(before.rounds, after.rounds, 10_000);
    figures.nodeStateCommitsPer10kJobs = per(before.stateCommits, after.stateCommits, 10_000);
    if (scenario === 'burst' && params.warmLeadMs > 0) {
      const warm = await runWarmBurst(servers, receiver, params, idPrefix, run);
      figures.warm = warm;
      // The safety figures cover both bursts.
      figures.early += warm.early;
      figures.lost += warm.lost;
      figures.duplicates += warm.duplicates;
    }
    // The machine's limit in the same run, once the node(s) no longer compete for the CPU.
    await servers.close();
    servers = null;
    await local?.stop();
    local = null;
    const limit = await pushLimit(receiver, 'limit-', limitCountAfter);
    figures.limitPerS = limit.perS;
    figures.shareOfLimit = figures.deliveredPerS !== null && limit.perS > 0 ? figures.deliveredPerS / limit.perS : null;
    // The warm burst's target applies when it ran.
    const targets = evaluateTargets(figures, targetsFor(scenario, params.ratePerS).filter((t) => t.figure !== 'warmDeliveredWithinMs' || figures.warm != null));
    return {
      scenario,
      startedAt,
      parameters: {
        ...params,
        nodes: options.servers === null ? options.nodes : options.servers.length,
        receiver: receiver.mode,
        tls: options.tls ?? false,
      },
      servers: { mode, urls: started.urls },
      ...environment,
      figures,
      targets,
      pass: targets.every((t) => t.pass),
    };
  } finally {
    await servers?.close();
    await local?.stop();
    await receiver.close();
  }
}
export { runRetentionSoak } from './soak.js';
