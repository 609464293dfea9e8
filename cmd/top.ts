/**
 * `punctual top`: a live terminal view of a node, refreshed every second from the API. Jobs by state,
 * callbacks per second and failures, the fire-lateness distribution, the due profile of the next minutes, and
 * every shard's leader with its term and apply lag. It reads `GET /v1/overview` and `GET /v1/due-profile`
 * where the node has them, and otherwise works from `GET /metrics` and `GET /v1/cluster` (a route answered 404
 * once is not asked again).
 */
import type { Command } from 'commander';
import { PunctualError, type ClusterStatus, type Punctual } from '../src/client/index.js';
import { clientLimits } from '../src/core/limits.js';
import { cliErrorOf, withClient, type ClientOptions } from './client.js';
import { withClientOptions } from './common.js';
import { isPlainObject, renderTable } from './format.js';
import type { CliIo } from './io.js';
import { parseIntIn } from './parse.js';
import { isTty } from './progress.js';

const jobStateOrder = ['PENDING', 'QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'PAUSED', 'CANCELLED'];

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples of a Prometheus text exposition (comments and malformed lines skipped). */
export function parsePrometheus(text: string): Sample[] {
  const out: Sample[] = [];
  const line = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
  for (const raw of text.split('\n')) {
    if (raw.startsWith('#')) continue;
    const m = line.exec(raw);
    if (m === null) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    const value = m[3] === '+Inf' ? Infinity : Number(m[3]);
    if (!Number.isNaN(value)) out.push({ name: m[1]!, labels, value });
  }
  return out;
}

/** Cumulative lateness buckets: `le` in ms (null = above the largest bound) and the count at or below it. */
interface Lateness {
  buckets: Array<{ le: number | null; cumulative: number }>;
  count: number;
}

/** What one refresh read. Every part may be missing: the view shows what it has. */
export interface Snapshot {
  atMs: number;
  nodeId: string | null;
  jobs: Record<string, number> | null;
  /** Callback attempts since the node started, by outcome (succeeded, retryable, permanent). */
  callbacks: Record<string, number> | null;
  /** From /v1/overview: attempts and failures per second over its last complete interval. */
  overviewRate: { sent: number; failed: number } | null;
  inFlight: number | null;
  wheel: number | null;
  lateness: Lateness | null;
  due: { counts: number[]; intervalMs: number } | null;
  cluster: ClusterStatus | null;
  problems: string[];
}

function sum(samples: Sample[], name: string, by?: string): Record<string, number> | null {
  const picked = samples.filter((s) => s.name === name);
  if (picked.length === 0) return null;
  const out: Record<string, number> = {};
  for (const s of picked) {
    const key = by === undefined ? '' : (s.labels[by] ?? '');
    out[key] = (out[key] ?? 0) + s.value;
  }
  return out;
}

function latenessFromMetrics(samples: Sample[]): Lateness | null {
  const buckets = samples
    .filter((s) => s.name === 'punctual_fire_lateness_ms_bucket')
    .map((s) => ({ le: s.labels.le === '+Inf' ? null : Number(s.labels.le), cumulative: s.value }))
    .sort((a, b) => (a.le ?? Infinity) - (b.le ?? Infinity));
  if (buckets.length === 0) return null;
  return { buckets, count: buckets.at(-1)!.cumulative };
}

/** /v1/overview's `fire_lateness_ms` (`buckets: [{le, count}]`, `count`), per-bucket or cumulative counts. */
function latenessFromOverview(value: unknown): Lateness | null {
  if (!isPlainObject(value) || !Array.isArray(value.buckets) || typeof value.count !== 'number') return null;
  const raw = value.buckets.filter(isPlainObject).map((b) => ({ le: typeof b.le === 'number' ? b.le : null, count: Number(b.count) || 0 }));
  const perBucket = raw.reduce((a, b) => a + b.count, 0) === value.count;
  let running = 0;
  const buckets = raw.map((b) => ({ le: b.le, cumulative: perBucket ? (running += b.count) : b.count }));
  return { buckets, count: value.count };
}

/** The due counts of /v1/due-profile (docs/api.md: `per_second`, one count per second). */
function dueFromProfile(value: unknown): Snapshot['due'] {
  if (!isPlainObject(value) || !Array.isArray(value.per_second) || !value.per_second.every((x) => typeof x === 'number')) return null;
  return { counts: value.per_second as number[], intervalMs: 1000 };
}

/** The routes a node may not have yet: asked until they answer 404 once. */
interface Optional {
  overview: boolean;
  dueProfile: boolean;
}

async function optionalGet(api: Punctual, path: string): Promise<unknown> {
  try {
    return (await api.request('GET', path)).body;
  } catch (err) {
    if (err instanceof PunctualError && (err.status === 404 || err.status === 405)) return undefined;
    throw err;
  }
}

export async function takeSnapshot(api: Punctual, optional: Optional): Promise<Snapshot> {
  const snap: Snapshot = {
    atMs: Date.now(), nodeId: null, jobs: null, callbacks: null, overviewRate: null, inFlight: null, wheel: null,
    lateness: null, due: null, cluster: null, problems: [],
  }; // prettier-ignore
  // the cluster view is the one source every node has: its failure (a bad token, a node gone) is the command's
  snap.cluster = await api.cluster.status();
  snap.nodeId = snap.cluster.node_id;
  try {
    const samples = parsePrometheus(await api.metrics());
    snap.jobs = sum(samples, 'punctual_jobs', 'state');
    // a counter shows no sample before its first increment: no callback yet is zero, not unknown
    snap.callbacks = sum(samples, 'punctual_callbacks_total', 'outcome') ?? {};
    snap.inFlight = sum(samples, 'punctual_dispatch_in_flight')?.[''] ?? null;
    snap.wheel = sum(samples, 'punctual_timer_wheel_size')?.[''] ?? null;
    snap.lateness = latenessFromMetrics(samples);
  } catch (err) {
    snap.problems.push(`/metrics: ${err instanceof PunctualError ? `${err.code}: ${err.detail}` : String(err)}`);
  }
  if (optional.overview) {
    const o = await optionalGet(api, '/v1/overview').catch((err: unknown) => (snap.problems.push(`/v1/overview: ${String(err)}`), null));
    if (o === undefined) optional.overview = false;
    else if (isPlainObject(o)) applyOverview(snap, o);
  }
  if (optional.dueProfile) {
    const d = await optionalGet(api, '/v1/due-profile').catch((err: unknown) => (snap.problems.push(`/v1/due-profile: ${String(err)}`), null));
    if (d === undefined) optional.dueProfile = false;
    else snap.due = dueFromProfile(d);
  }
  return snap;
}

function applyOverview(snap: Snapshot, o: Record<string, unknown>): void {
  if (isPlainObject(o.jobs) && Object.values(o.jobs).every((v) => typeof v === 'number')) snap.jobs = o.jobs as Record<string, number>;
  const lateness = latenessFromOverview(o.fire_lateness_ms);
  if (lateness !== null) snap.lateness = lateness;
  const cb = o.callbacks;
  if (isPlainObject(cb) && typeof cb.interval_ms === 'number' && cb.interval_ms > 0 && Array.isArray(cb.samples) && cb.samples.length >= 2) {
    // the last sample is the current, partial interval: the one before it is the latest whole one
    const s = cb.samples.at(-2);
    if (isPlainObject(s) && typeof s.sent === 'number' && typeof s.failed === 'number') {
      snap.overviewRate = { sent: (s.sent * 1000) / cb.interval_ms, failed: (s.failed * 1000) / cb.interval_ms };
    }
  }
}

/** The bound of the bucket that holds quantile q, as `≤N ms` (`>N ms` for the overflow bucket). */
function quantile(l: Lateness, q: number): string {
  if (l.count === 0) return '-';
  const target = q * l.count;
  let prevLe = 0;
  for (const b of l.buckets) {
    if (b.cumulative >= target) return b.le === null ? `>${prevLe} ms` : `≤${b.le} ms`;
    if (b.le !== null) prevLe = b.le;
  }
  return `>${prevLe} ms`;
}

/** The lateness counted between two snapshots (bucket by bucket). */
function latenessDelta(now: Lateness, before: Lateness | null): Lateness {
  if (before === null || before.buckets.length !== now.buckets.length) return now;
  return { buckets: now.buckets.map((b, i) => ({ le: b.le, cumulative: b.cumulative - before.buckets[i]!.cumulative })), count: now.count - before.count };
}

const sparks = '▁▂▃▄▅▆▇█';

function sparkline(counts: number[]): string {
  const max = Math.max(...counts);
  return counts.map((c) => (max === 0 ? sparks[0] : sparks[Math.min(sparks.length - 1, Math.floor((c / max) * (sparks.length - 1)))])).join('');
}

function fmtRate(n: number | null): string {
  return n === null ? '-' : n >= 100 ? n.toFixed(0) : n.toFixed(1);
}

/** One frame of text: the figures of `now`, rates against `before` (null on the first frame). */
export function renderFrame(server: string, now: Snapshot, before: Snapshot | null, columns = 100): string {
  const out: string[] = [];
  out.push(`punctual top  ${server}  node ${now.nodeId ?? '-'}  ${new Date(now.atMs).toISOString()}`);
  out.push('');
  const jobs = now.jobs ?? {};
  const states = [...jobStateOrder, ...Object.keys(jobs).filter((s) => !jobStateOrder.includes(s))];
  out.push(`JOBS       ${now.jobs === null ? '-' : states.map((s) => `${s} ${jobs[s] ?? 0}`).join('  ')}`);
  const seconds = before === null ? 0 : (now.atMs - before.atMs) / 1000;
  const rate = (outcome: string): number | null => {
    if (before === null || seconds <= 0 || now.callbacks === null || before.callbacks === null) return null;
    return Math.max(0, ((now.callbacks[outcome] ?? 0) - (before.callbacks[outcome] ?? 0)) / seconds);
  };
  const ok = rate('succeeded');
  const retryable = rate('retryable');
  const permanent = rate('permanent');
  const total = ok === null || retryable === null || permanent === null ? null : ok + retryable + permanent;
  out.push(
    `CALLBACKS  ${fmtRate(total)}/s  succeeded ${fmtRate(ok)}/s  retryable ${fmtRate(retryable)}/s  permanent ${fmtRate(permanent)}/s` +
      `  in flight ${now.inFlight ?? '-'}  wheel ${now.wheel ?? '-'}`,
  );
  if (now.overviewRate !== null) {
    out.push(`           last interval: ${fmtRate(now.overviewRate.sent)}/s sent, ${fmtRate(now.overviewRate.failed)}/s failed`);
  }
  const c = now.callbacks;
  out.push(
    `FAILURES   retryable ${c?.retryable ?? '-'}  permanent ${c?.permanent ?? '-'} (attempts since start)  jobs FAILED ${jobs.FAILED ?? '-'}`,
  );
  if (now.lateness === null) {
    out.push('LATENESS   -');
  } else {
    const l = now.lateness;
    const recent = before?.lateness === null || before === null ? null : latenessDelta(l, before.lateness);
    const window = recent === null || recent.count === 0 ? '' : `  |  last ${seconds.toFixed(1)} s: p50 ${quantile(recent, 0.5)}  p99 ${quantile(recent, 0.99)}  n ${recent.count}`;
    out.push(`LATENESS   p50 ${quantile(l, 0.5)}  p90 ${quantile(l, 0.9)}  p99 ${quantile(l, 0.99)}  max ${quantile(l, 1)}  n ${l.count}${window}`);
  }
  if (now.due !== null && now.due.counts.length > 0) {
    const counts = now.due.counts.slice(0, Math.max(10, columns - 40));
    const span = ` (${now.due.intervalMs} ms each)`;
    out.push(`DUE        ${sparkline(counts)}  max ${Math.max(...counts)}, ${counts.reduce((a, b) => a + b, 0)} in all${span}`);
  }
  out.push('');
  if (now.cluster !== null) {
    const shards = now.cluster.shards.map((s) => [String(s.id), s.leader ?? '(none)', String(s.term), String(s.commit_index), String(s.applied_index), String(s.commit_index - s.applied_index), s.members.join(',')]);
    out.push(renderTable(['SHARD', 'LEADER', 'TERM', 'COMMIT', 'APPLIED', 'LAG', 'MEMBERS'], shards).trimEnd());
    const leaders = new Map<string, number>();
    for (const s of now.cluster.shards) if (s.leader !== null) leaders.set(s.leader, (leaders.get(s.leader) ?? 0) + 1);
    out.push('');
    const nodes = now.cluster.nodes.map((n) => [n.id, n.api_addr ?? '-', n.reachable ? 'yes' : 'NO', String(leaders.get(n.id) ?? 0)]);
    out.push(renderTable(['NODE', 'API ADDR', 'REACHABLE', 'LEADS'], nodes).trimEnd());
  }
  for (const p of now.problems) out.push(`! ${p}`);
  return out.join('\n') + '\n';
}

interface TopOptions extends ClientOptions {
  intervalMs?: string;
  iterations?: string;
  once?: boolean;
}

/** Sleeps ms, or less when stop() is called (Ctrl-C ends the view between frames). */
function stoppable(): { sleep(ms: number): Promise<void>; stop(): void; stopped(): boolean } {
  let wake: (() => void) | null = null;
  let stopped = false;
  return {
    sleep: (ms) =>
      new Promise<void>((ok) => {
        const t = setTimeout(ok, ms);
        wake = () => (clearTimeout(t), ok());
      }),
    stop: () => {
      stopped = true;
      wake?.();
    },
    stopped: () => stopped,
  };
}

async function runTop(opts: TopOptions, io: CliIo): Promise<void> {
  const intervalMs = opts.intervalMs === undefined ? clientLimits.topIntervalMsDefault : parseIntIn('--interval-ms', opts.intervalMs, clientLimits.topIntervalMsMin, clientLimits.topIntervalMsMax);
  const iterations = opts.once === true ? 1 : opts.iterations === undefined ? null : parseIntIn('--iterations', opts.iterations, 1, Number.MAX_SAFE_INTEGER);
  // redraw in place only on a terminal and only for a live view; anything else gets frames one after another
  const live = isTty(io.stdout) && opts.json !== true;
  await withClient(opts, io, async (client) => {
    const optional: Optional = { overview: true, dueProfile: true };
    const timer = stoppable();
    const onSignal = () => timer.stop();
    if (iterations === null) process.once('SIGINT', onSignal);
    let before: Snapshot | null = null;
    try {
      for (let i = 0; iterations === null || i < iterations; i++) {
        if (i > 0) await timer.sleep(intervalMs);
        if (timer.stopped()) break;
        let now: Snapshot;
        try {
          now = await takeSnapshot(client.api, optional);
        } catch (err) {
          // the first frame's failure ends the command (a wrong server or token); later ones are shown and retried
          if (before === null) throw cliErrorOf(client.server, err);
          io.stderr.write(cliErrorOf(client.server, err).message + '\n');
          continue;
        }
        if (opts.json === true) io.stdout.write(JSON.stringify(frameJson(now, before)) + '\n');
        else io.stdout.write((live ? '\x1b[H\x1b[2J' : i > 0 ? '\n' : '') + renderFrame(client.server, now, before));
        before = now;
      }
    } finally {
      process.removeListener('SIGINT', onSignal);
    }
  });
}

/** --json: one object per refresh, the raw figures plus the rates against the previous refresh. */
function frameJson(now: Snapshot, before: Snapshot | null): Record<string, unknown> {
  const seconds = before === null ? 0 : (now.atMs - before.atMs) / 1000;
  const rates: Record<string, number> = {};
  if (before !== null && seconds > 0 && now.callbacks !== null && before.callbacks !== null) {
    for (const [k, v] of Object.entries(now.callbacks)) rates[k] = Math.max(0, (v - (before.callbacks[k] ?? 0)) / seconds);
  }
  return {
    at: new Date(now.atMs).toISOString(),
    node_id: now.nodeId,
    jobs: now.jobs,
    callbacks_total: now.callbacks,
    callbacks_per_second: before === null ? null : rates,
    in_flight: now.inFlight,
    wheel: now.wheel,
    fire_lateness_ms: now.lateness === null ? null : { count: now.lateness.count, p50: quantile(now.lateness, 0.5), p90: quantile(now.lateness, 0.9), p99: quantile(now.lateness, 0.99), max: quantile(now.lateness, 1) },
    due: now.due === null ? null : { counts: now.due.counts, interval_ms: now.due.intervalMs },
    shards: now.cluster?.shards ?? null,
    problems: now.problems,
  };
}

export function registerTopCommand(program: Command, io: CliIo): void {
  const cmd = program.command('top').description('a live view of a node: jobs by state, callbacks/s, failures, fire lateness, due profile, shard leaders');
  withClientOptions(cmd)
    .option('--interval-ms <ms>', `refresh period, ${clientLimits.topIntervalMsMin}..${clientLimits.topIntervalMsMax} (default ${clientLimits.topIntervalMsDefault})`)
    .option('--iterations <n>', 'stop after N refreshes (default: until Ctrl-C)')
    .option('--once', 'one refresh, then exit (same as --iterations 1)')
    .action((opts: TopOptions) => runTop(opts, io));
}
