/**
 * The run's report: report.json (everything), summary.txt (readable), lateness.svg (lateness of each first
 * delivery over the run, fault windows shaded), history.jsonl, deliveries.jsonl and jobs.jsonl (the raw material).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { CheckReport, Percentiles } from './checker.js';
import type { Delivery, FaultWindow, RunHistory } from './history.js';

export interface RunMeta {
  seed: number;
  nodes: number;
  durationS: number;
  nemesis: string;
  faultKinds: string[];
  skippedFaults: Array<{ kind: string; reason: string }>;
  leaderChanges: number;
  unexpectedExits: Array<{ node: string; atMs: number; code: number | null; signal: string | null }>;
  startedAt: string;
  wallMs: number;
}

export interface Report extends CheckReport {
  meta: RunMeta;
  clockToleranceMs: number;
  faults: FaultWindow[];
}

export function writeReport(dir: string, report: Report, h: RunHistory): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'report.json'), JSON.stringify(report, null, 2) + '\n');
  writeFileSync(join(dir, 'summary.txt'), summaryText(report));
  writeFileSync(join(dir, 'lateness.svg'), latenessSvg(h.deliveries, h.faults, h.startMs, h.endMs, report.clockToleranceMs));
  writeFileSync(join(dir, 'history.jsonl'), h.ops.map((o) => JSON.stringify(o)).join('\n') + '\n');
  writeFileSync(join(dir, 'deliveries.jsonl'), h.deliveries.map((d) => JSON.stringify(d)).join('\n') + '\n');
  writeFileSync(join(dir, 'jobs.jsonl'), h.jobs.map((j) => JSON.stringify(j)).join('\n') + '\n');
}

const fmtP = (p: Percentiles): string =>
  p.count === 0 ? 'no samples' : `n=${p.count} p50=${p.p50} p90=${p.p90} p99=${p.p99} p99.9=${p.p999} max=${p.max} ms`;

export function summaryText(r: Report): string {
  const m = r.meta;
  const lines = [
    `jepsen-lite: ${r.valid ? 'VALID' : 'INVALID'}   seed=${m.seed} nodes=${m.nodes} duration=${m.durationS}s nemesis=${m.nemesis}`,
    `faults used: ${m.faultKinds.join(', ') || 'none'}`,
    ...m.skippedFaults.map((s) => `fault not run: ${s.kind}: ${s.reason}`),
    '',
    'checks:',
    ...r.checks.map((c) => `  ${c.ok ? 'ok  ' : 'FAIL'} ${c.name.padEnd(24)} ${Object.entries(c.counts).map(([k, v]) => `${k}=${v}`).join(' ')}`),
    '',
    `clock offset tolerance: ${r.clockToleranceMs} ms (largest positive PUNCTUAL_TEST_CLOCK_OFFSET_MS used)`,
    `ops: ${Object.entries(r.stats.ops).sort().map(([k, v]) => `${k}=${v}`).join(' ')}`,
    `deliveries: ${r.stats.deliveries}, distinct occurrences ${r.stats.uniqueOccurrences}, duplicates ${r.stats.duplicates} (rate ${r.stats.duplicateRate.toFixed(4)})`,
    `stale fencing deliveries: ${r.stats.staleFencing}`,
    `lateness all:          ${fmtP(r.stats.lateness.all)}`,
    `lateness under faults: ${fmtP(r.stats.lateness.underFaults)}`,
    `lateness after pause:  ${fmtP(r.stats.lateness.afterPause)}`,
    `lateness quiet:        ${fmtP(r.stats.lateness.quiet)}`,
    `leader changes (GET /v1/cluster): ${m.leaderChanges}`,
    `unexpected node exits: ${m.unexpectedExits.length}`,
    '',
    'faults (held ms, ready after heal ms, first ok op after heal ms):',
    ...r.stats.recovery.map((x) => `  ${x.kind.padEnd(18)} ${x.detail.padEnd(28)} ${x.faultMs} ${x.readyAfterHealMs ?? 'never'} ${x.firstOkAfterHealMs ?? 'none'}`),
  ];
  for (const c of r.checks) {
    if (c.ok) continue;
    lines.push('', `FAILED ${c.name}: first violations:`);
    for (const e of c.examples) lines.push('  ' + JSON.stringify(e));
  }
  return lines.join('\n') + '\n';
}

const faultColors: Record<string, string> = {
  kill: '#e57373', pause: '#ffb74d', clock: '#ba68c8', 'partition-halves': '#64b5f6', 'partition-leader': '#4db6ac',
  'partition-bridge': '#7986cb', 'partition-one-way': '#4fc3f7', 'net-delay': '#aed581', 'net-reset': '#90a4ae',
};

/** Lateness (ms) of each first delivery against time since the start of the run; fault windows shaded. */
export function latenessSvg(ds: readonly Delivery[], faults: readonly FaultWindow[], startMs: number, endMs: number, tolMs: number): string {
  const W = 1000, H = 420, L = 60, R = 20, T = 30, B = 40;
  const first = new Map<string, Delivery>();
  for (const d of ds) if (!first.has(d.key) || d.arrivalMs < first.get(d.key)!.arrivalMs) first.set(d.key, d);
  const pts = [...first.values()].map((d) => ({ t: d.scheduledAtMs - startMs, late: d.arrivalMs - d.scheduledAtMs }));
  const spanMs = Math.max(1, endMs - startMs, ...pts.map((p) => p.t));
  const lates = pts.map((p) => p.late).sort((a, b) => a - b);
  const yMax = Math.max(20, lates.length === 0 ? 20 : lates[Math.floor(lates.length * 0.999)] * 1.1);
  const yMin = Math.min(0, -tolMs, ...lates.slice(0, 1));
  const x = (t: number): number => L + ((W - L - R) * t) / spanMs;
  const y = (v: number): number => T + (H - T - B) * (1 - (Math.min(v, yMax) - yMin) / (yMax - yMin));
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${L}" y="18" font-size="13">lateness of first delivery (ms) vs scheduled time (s since start); shaded: faults (to recovery)</text>`,
  ];
  for (const f of faults) {
    const x0 = x(f.startMs - startMs);
    const x1 = x((f.recoveredMs ?? f.healMs) - startMs);
    const color = faultColors[f.kind] ?? '#bdbdbd';
    out.push(`<rect x="${x0.toFixed(1)}" y="${T}" width="${Math.max(1, x1 - x0).toFixed(1)}" height="${H - T - B}" fill="${color}" fill-opacity="0.3"><title>${esc(f.kind)} ${esc(f.detail)}</title></rect>`);
    out.push(`<text x="${(x0 + 2).toFixed(1)}" y="${T + 12}" fill="#333">${esc(f.kind)}</text>`);
  }
  out.push(`<line x1="${L}" y1="${y(0)}" x2="${W - R}" y2="${y(0)}" stroke="#888"/>`);
  for (const v of ticks(yMin, yMax)) {
    out.push(`<text x="${L - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${v}</text>`);
    out.push(`<line x1="${L}" y1="${y(v).toFixed(1)}" x2="${W - R}" y2="${y(v).toFixed(1)}" stroke="#eee"/>`);
  }
  for (let s = 0; s <= spanMs / 1000; s += Math.max(1, Math.ceil(spanMs / 1000 / 10))) {
    out.push(`<text x="${x(s * 1000).toFixed(1)}" y="${H - B + 16}" text-anchor="middle">${s}</text>`);
  }
  for (const p of pts) {
    const clipped = p.late > yMax;
    out.push(`<circle cx="${x(p.t).toFixed(1)}" cy="${y(p.late).toFixed(1)}" r="1.6" fill="${clipped ? '#d32f2f' : '#1565c0'}"/>`);
  }
  out.push(`<rect x="${L}" y="${T}" width="${W - L - R}" height="${H - T - B}" fill="none" stroke="#444"/>`, '</svg>');
  return out.join('\n') + '\n';
}

function ticks(lo: number, hi: number): number[] {
  const raw = (hi - lo) / 6;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((k) => k * mag).find((s) => s >= raw) ?? raw;
  const out: number[] = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi; v += step) out.push(Math.round(v));
  return out;
}

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}
