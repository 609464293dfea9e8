/**
 * One bounded, seeded run: start the nodes (peer links through the proxy mesh), the receiver and the task; run
 * the workload and the nemesis side by side for durationS; heal; wait for every due occurrence plus a bound;
 * read every job once more; stop; check; write the report. A failing run keeps the nodes' logs.
 */
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { limits } from '../../src/core/limits.js';
import { createLogger, type Logger } from '../../src/core/log.js';
import { Prng } from '../../src/core/prng.js';
import { checkRun, type CheckResult } from './checker.js';
import { ApiClient } from './client.js';
import { harnessNowMs, HistoryRecorder, sleepMs, type RunHistory } from './history.js';
import { Nemesis, healAll, planNemesis } from './nemesis.js';
import { clusterShards, defaultEntry, holdPorts, NodeProcess, repoRoot, waitAllReady, type ShardView } from './nodes.js';
import { ProxyMesh } from './proxy.js';
import { startReceiver } from './receiver.js';
import { writeReport, type Report } from './report.js';
import { Workload } from './workload.js';

export interface JepsenOptions {
  nodes: number;
  durationS: number;
  /** none | all | a comma list of fault kinds (nemesis.ts). */
  nemesis: string;
  seed: number;
  clients?: number;
  shards?: number;
  /** Path of dist/cmd/punctual.js (default: this checkout's). */
  entry?: string;
  /** Where the run's folder goes (default test/jepsen-lite/results). */
  resultsDir?: string;
  /** Waited after the latest due time before the final reads and the checker. */
  quiesceMs?: number;
  opTimeoutMs?: number;
  logger?: Logger;
}

export interface JepsenResult {
  report: Report;
  /** The run's results folder (report.json, summary.txt, lateness.svg, history, and logs/ when it failed). */
  dir: string;
}

const taskName = 'jl';
/** Jobs are due at most this long after the workload stops. */
const tailMs = 6_000;

interface Started {
  work: string;
  nodes: NodeProcess[];
  mesh: ProxyMesh | null;
}

/**
 * Starts the nodes and waits until every one answers /readyz. The ports stay held while the fault proxies bind
 * theirs; a node that still finds its port taken (another program took it in the instant between release and
 * bind) makes the whole start repeat on fresh ports, at most twice. Any other failure to get ready throws with
 * each node's state and the end of its log, since CI keeps nothing else.
 */
async function startNodes(o: Required<Pick<JepsenOptions, 'nodes' | 'shards'>> & { entry: string }, log: Logger): Promise<Started> {
  for (let attempt = 1; ; attempt++) {
    const work = mkdtempSync(join(tmpdir(), 'jepsen-lite-'));
    const ids = Array.from({ length: o.nodes }, (_, i) => `n${i + 1}`);
    const held = await holdPorts(ids.length * 2);
    const ports = held.ports;
    const peerPorts = new Map<string, number>(ids.map((id, i) => [id, ports[2 * i]!]));
    let mesh: ProxyMesh | null = null;
    try {
      mesh = o.nodes > 1 ? await ProxyMesh.start(peerPorts) : null;
    } finally {
      await held.release();
    }
    const nodes: NodeProcess[] = [];
    for (const [i, id] of ids.entries()) {
      mkdirSync(join(work, id), { recursive: true });
      nodes.push(new NodeProcess({
        id, apiPort: ports[2 * i + 1]!, peerPort: peerPorts.get(id)!, dataDir: join(work, id, 'data'),
        logPath: join(work, `${id}.log`), peers: mesh ? mesh.peersFlag(id) : '', shards: o.shards,
      }, o.entry));
    }
    for (const n of nodes) n.start();
    log.info('nodes started', { nodes: ids, work, attempt });
    if ((await waitAllReady(nodes, 30_000)) !== null) return { work, nodes, mesh };
    const why = await notReadyReport(nodes);
    await Promise.all(nodes.map((n) => n.stop()));
    await mesh?.close();
    if (why.includes('EADDRINUSE') && attempt < 3) {
      log.warn('a port was taken between choosing and binding it: starting again on fresh ports', { attempt });
      rmSync(work, { recursive: true, force: true });
      continue;
    }
    throw new Error(`nodes not ready within 30 s (their data and logs kept in ${work}):\n${why}`);
  }
}

/** Each node's state, /readyz answer and last log lines: what a failed start leaves in a CI log. */
async function notReadyReport(nodes: readonly NodeProcess[]): Promise<string> {
  const parts: string[] = [];
  for (const n of nodes) {
    const readyz = await readyzAnswer(n.url);
    const tail = existsSync(n.spec.logPath)
      ? readFileSync(n.spec.logPath, 'utf8').trimEnd().split('\n').slice(-12).map((l) => `    ${l.slice(0, 400)}`).join('\n')
      : '    (no log)';
    parts.push(`${n.spec.id}: ${n.status}, unexpected exits ${JSON.stringify(n.unexpectedExits)}, /readyz ${readyz}\n${tail}`);
  }
  return parts.join('\n');
}

async function readyzAnswer(url: string): Promise<string> {
  try {
    const res = await request(`${url}/readyz`, { signal: AbortSignal.timeout(1_000) });
    return `${res.statusCode} ${(await res.body.text()).slice(0, 300)}`;
  } catch (err) {
    return `no answer (${(err as Error).message})`;
  }
}

/** With several nodes: every shard lists every node as a member and has a leader (the cluster formed). */
export async function clusterFormed(nodes: readonly NodeProcess[], timeoutMs: number): Promise<boolean> {
  const deadlineMs = harnessNowMs() + timeoutMs;
  while (harnessNowMs() < deadlineMs) {
    const views = await Promise.all(nodes.map((n) => clusterShards(n.url)));
    const formed = views.every((v) => v !== null && v.length > 0 && v.every((s) => s.members.length === nodes.length && s.leader !== null));
    if (formed) return true;
    await sleepMs(200);
  }
  return false;
}

async function putTask(api: ApiClient, url: string, receiverUrl: string): Promise<void> {
  const body = {
    url: receiverUrl, method: 'POST', timeout_ms: 2_000,
    retry: { max_attempts: 30, initial_backoff_ms: 100, max_backoff_ms: 1_000, multiplier: 2, jitter: true },
  };
  for (let attempt = 0; attempt < 50; attempt++) {
    const a = await api.call(url, 'PUT', `/v1/tasks/${taskName}`, body);
    if (a.kind === 'ok') return;
    if (a.kind === 'fail') throw new Error(`PUT /v1/tasks/${taskName}: ${a.status} ${a.code}`);
    await sleepMs(200);
  }
  throw new Error(`PUT /v1/tasks/${taskName}: no answer`);
}

/** Polls GET /v1/cluster on every node; leader changes = distinct (term, leader) per shard, minus the first. */
class LeaderWatch {
  private readonly seen = new Map<number, Set<string>>();
  private timer: NodeJS.Timeout | null = null;
  private busy = false;

  constructor(private readonly nodes: readonly NodeProcess[]) {}

  start(everyMs = 1_000): void {
    this.timer = setInterval(() => void this.poll(), everyMs);
  }

  async poll(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      const up = this.nodes.filter((n) => n.status === 'up');
      const views = await Promise.all(up.map((n) => clusterShards(n.url, 500)));
      for (const v of views) if (v) this.record(v);
    } finally {
      this.busy = false;
    }
  }

  private record(shards: ShardView[]): void {
    for (const s of shards) {
      if (s.leader === null) continue;
      const set = this.seen.get(s.id) ?? new Set<string>();
      set.add(`${s.term}:${s.leader}`);
      this.seen.set(s.id, set);
    }
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  changes(): number {
    let n = 0;
    for (const set of this.seen.values()) n += Math.max(0, set.size - 1);
    return n;
  }
}

function runDir(o: JepsenOptions): string {
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  return join(o.resultsDir ?? join(repoRoot(), 'test', 'jepsen-lite', 'results'), `${stamp}-seed${o.seed}-n${o.nodes}`);
}

export async function runJepsen(o: JepsenOptions): Promise<JepsenResult> {
  const log = o.logger ?? createLogger({ bindings: { component: 'jepsen-lite' } });
  const entry = o.entry ?? defaultEntry();
  if (!existsSync(entry)) throw new Error(`${entry} not found: run \`npm run build\` first`);
  const plan = planNemesis(o.nemesis, o.nodes);
  const rng = new Prng(o.seed);
  const api = new ApiClient(o.opTimeoutMs ?? 2_500);
  const receiver = await startReceiver();
  let started: Started;
  try {
    started = await startNodes({ nodes: o.nodes, shards: o.shards ?? 4, entry }, log);
  } catch (err) {
    await receiver.close();
    await api.close();
    throw err;
  }
  const { nodes, mesh, work } = started;
  const watch = new LeaderWatch(nodes);
  let clockToleranceMs = 0;
  let clockBehindMs = 0;
  const t0 = harnessNowMs();
  /** Set when the run failed: the nodes' logs are copied there once they have stopped. */
  let keepLogsIn: string | null = null;
  try {
    if (o.nodes > 1 && !(await clusterFormed(nodes, 20_000))) {
      throw new Error(`the ${o.nodes} nodes did not form a cluster (GET /v1/cluster): does this build support --peers yet?`);
    }
    await putTask(api, nodes[0].url, receiver.url);
    watch.start();
    const rec = new HistoryRecorder(harnessNowMs);
    const startMs = harnessNowMs();
    const endMs = startMs + o.durationS * 1_000;
    const clients = o.clients ?? 4;
    const workload = new Workload(rec, api, nodes.map((n) => ({ id: n.spec.id, url: n.url })), {
      seed: o.seed, clients, taskName, latestDueMs: endMs + tailMs,
    });
    const nemesis = new Nemesis(plan, {
      nodes, mesh, rng: rng.fork(),
      onClockOffset: (ms) => {
        clockToleranceMs = Math.max(clockToleranceMs, ms);
        clockBehindMs = Math.max(clockBehindMs, -ms);
      },
    });
    log.info('run started', { seed: o.seed, nodes: o.nodes, durationS: o.durationS, faults: plan.kinds });
    await Promise.all([workload.run(endMs), nemesis.run(endMs)]);
    await healAll(nodes, mesh);
    if ((await waitAllReady(nodes, 60_000)) === null) log.warn('nodes not ready 60 s after the final heal');
    await sleepMs(endMs + tailMs + (o.quiesceMs ?? 8_000) - harnessNowMs());
    await workload.finalReads(clients);
    await watch.poll();
    const history: RunHistory = {
      ops: rec.ops, deliveries: [...receiver.deliveries], jobs: [...workload.jobs.values()], faults: nemesis.windows,
      clockToleranceMs, clockBehindMs, misfireThresholdMs: limits.misfireThresholdMs, startMs, endMs,
    };
    const checked = checkRun(history);
    const exits = nodes.flatMap((n) => n.unexpectedExits.map((e) => ({ node: n.spec.id, ...e })));
    checked.checks.push(exitCheck(exits));
    const report: Report = {
      ...checked,
      valid: checked.valid && exits.length === 0,
      clockToleranceMs,
      faults: nemesis.windows,
      meta: {
        seed: o.seed, nodes: o.nodes, durationS: o.durationS, nemesis: o.nemesis, faultKinds: plan.kinds,
        skippedFaults: plan.skipped, leaderChanges: watch.changes(), unexpectedExits: exits,
        startedAt: new Date(startMs).toISOString(), wallMs: harnessNowMs() - t0,
      },
    };
    const dir = runDir(o);
    writeReport(dir, report, history);
    if (!report.valid) keepLogsIn = dir;
    return { report, dir };
  } catch (err) {
    keepLogsIn = runDir(o);
    log.error('run failed', { seed: o.seed, err, logs: join(keepLogsIn, 'logs') });
    throw err;
  } finally {
    watch.stop();
    await Promise.all(nodes.map((n) => n.stop()));
    await mesh?.close();
    await receiver.close();
    await api.close();
    if (keepLogsIn !== null) keepLogs(keepLogsIn, nodes);
    rmSync(work, { recursive: true, force: true });
  }
}

/** A node process that died without being told to is a finding (a crash), whatever the other checks say. */
function exitCheck(exits: unknown[]): CheckResult {
  return { name: 'no-unexpected-exit', ok: exits.length === 0, counts: { violations: exits.length }, examples: exits.slice(0, 10) };
}

function keepLogs(dir: string, nodes: readonly NodeProcess[]): void {
  mkdirSync(join(dir, 'logs'), { recursive: true });
  for (const n of nodes) if (existsSync(n.spec.logPath)) cpSync(n.spec.logPath, join(dir, 'logs', `${n.spec.id}.log`));
}
