/** The human-readable form of a bench result: aligned rows of figures, then the targets with pass/miss. */
import type { BenchResult } from './results.js';

function num(value: number | null, digits = 0): string {
  if (value === null || !Number.isFinite(value)) return '-';
  return value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

function mib(bytes: number | null): string {
  return bytes === null ? '-' : `${(bytes / (1024 * 1024)).toFixed(1)} MiB`;
}

function rows(result: BenchResult): Array<[string, string]> {
  const f = result.figures;
  const l = f.lateness;
  const out: Array<[string, string]> = [
    ['accepted / submitted', `${num(f.accepted)} / ${num(f.submitted)}`],
    ['submit time', `${num(f.submitDurationMs)} ms${f.submitTimedOut ? ' (stopped by its time bound)' : ''}`],
    ['accepted jobs/s', num(f.acceptedPerS)],
    ['requests, answer p50 / p99', `${num(f.requests)}, ${num(f.requestLatency.p50Ms, 2)} / ${num(f.requestLatency.p99Ms, 2)} ms`],
    ['delivered callbacks', num(f.delivered)],
    ['delivered callbacks/s', num(f.deliveredPerS)],
    ['lateness p50 / p90', `${num(l.p50Ms, 2)} / ${num(l.p90Ms, 2)} ms`],
    ['lateness p99 / p999', `${num(l.p99Ms, 2)} / ${num(l.p999Ms, 2)} ms`],
    ['lateness min / max', `${num(l.minMs, 2)} / ${num(l.maxMs, 2)} ms`],
    ['early (must be 0)', num(f.early)],
    ['lost (must be 0)', `${num(f.lost)}${f.drainOutcome === 'all delivered' ? '' : ` (drain ended: ${f.drainOutcome})`}`],
    ['duplicates', num(f.duplicates)],
  ];
  if (f.deliveredWithinMs !== null) out.push(['delivered within', `${num(f.deliveredWithinMs)} ms`]);
  if (f.firstWithinMs != null) out.push(['first arrival after the instant', `${num(f.firstWithinMs, 2)} ms`]);
  if (f.nodeLateness != null) {
    const n = f.nodeLateness;
    out.push(['node-side lateness p50 / p99 / p999 (bucket bounds)', `${num(n.p50Ms, 1)} / ${num(n.p99Ms, 1)} / ${num(n.p999Ms, 1)} ms`]);
  }
  if (f.warm != null) {
    const w = f.warm;
    out.push(['warm burst: delivered / accepted', `${num(w.delivered)} / ${num(w.accepted)}${w.drainOutcome === 'all delivered' ? '' : ` (drain ended: ${w.drainOutcome})`}`]);
    out.push(['warm burst: first / last arrival after the instant', `${num(w.firstWithinMs, 2)} / ${num(w.deliveredWithinMs, 2)} ms`]);
    if (w.nodeLateness !== null) {
      const n = w.nodeLateness;
      out.push(['warm burst: node-side lateness p50 / p99 (bucket bounds)', `${num(n.p50Ms, 1)} / ${num(n.p99Ms, 1)} ms`]);
    }
  }
  if (f.nodeCpuUsPerCallback != null) out.push(['node CPU per callback (submit to outcome, all threads)', `${num(f.nodeCpuUsPerCallback, 1)} µs (${num(f.nodeCpuMs ?? null)} ms)`]);
  if (f.nodeWrittenBytesPerJob != null) out.push(['node bytes written per job', `${num(f.nodeWrittenBytesPerJob / 1024, 1)} KB`]);
  if (f.nodeRoundsPer10kJobs != null) out.push(['log commits (Raft rounds) / state commits per 10,000 jobs', `${num(f.nodeRoundsPer10kJobs)} / ${num(f.nodeStateCommitsPer10kJobs ?? null)}`]);
  if (f.limitPerS != null) out.push(["machine's limit (same run)", `${num(f.limitPerS)} callbacks/s`]);
  if (f.shareOfLimit != null) out.push(['delivered rate / limit', `${num(f.shareOfLimit * 100, 1)} %`]);
  if (f.backlogMax !== null) out.push(['open-loop backlog max', num(f.backlogMax)]);
  if (f.ackedAfterDue > 0) out.push(['acknowledged after due', num(f.ackedAfterDue)]);
  if (f.rejected > 0) out.push(['rejected', `${num(f.rejected)} ${JSON.stringify(f.submitErrors)}`]);
  if (f.malformed > 0 || f.foreign > 0) out.push(['malformed / foreign', `${num(f.malformed)} / ${num(f.foreign)}`]);
  const nodeRss = f.nodePeakRssBytes === null ? 'n/a (--server)' : f.nodePeakRssBytes.map(mib).join(', ');
  out.push(['peak RSS node(s)', nodeRss], ['peak RSS bench', mib(f.benchPeakRssBytes)]);
  return out;
}

export function formatTable(result: BenchResult): string {
  const header =
    `scenario ${result.scenario}  (${result.servers.mode} ${result.servers.urls.join(' ')}; ` +
    `commit ${result.gitCommit}; node ${result.nodeVersion}; ${result.cpuCount} cpus; load ${result.loadAverage.join(' ')})`;
  const params = Object.entries(result.parameters)
    .map(([k, v]) => `${k}=${v}`)
    .join(' ');
  const figureRows = rows(result);
  const width = Math.max(...figureRows.map(([k]) => k.length));
  const lines = [header, `parameters: ${params}`, ''];
  for (const [k, v] of figureRows) lines.push(`  ${k.padEnd(width)}  ${v}`);
  lines.push('', 'targets:');
  for (const t of result.targets) {
    const mark = t.pass ? 'PASS' : 'MISS';
    lines.push(`  ${mark}  ${t.label}: ${t.figure} ${t.op} ${num(t.value)} (measured ${num(t.actual, 2)})`);
  }
  return lines.join('\n') + '\n';
}
