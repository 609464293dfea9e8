/**
 * Overview: jobs by state, callbacks per second and failures over the last hour, the fire-lateness distribution
 * (the node's histogram), and how many occurrences come due each second of the next minutes.
 */
import { html } from 'htm/preact';
import type { VNode } from 'preact';
import type uPlot from 'uplot';
import { get, type DueProfile, type Overview } from '../api.js';
import { Chart, axis, bars, cssVar, utcAxis } from '../chart.js';
import { ErrorBox, Loading, Section, Unavailable, useLoad } from '../components.js';
import { count, duration, utc } from '../format.js';
import { href } from '../router.js';

const refreshMs = 5_000;
const dueSeconds = 600;
const stateOrder = ['PENDING', 'QUEUED', 'RUNNING', 'PAUSED', 'SUCCEEDED', 'FAILED', 'CANCELLED'];

export function OverviewPage(): VNode {
  const overview = useLoad(() => get<Overview>('/v1/overview'), 'overview', refreshMs);
  const due = useLoad(() => get<DueProfile>(`/v1/due-profile?seconds=${dueSeconds}`), 'due', refreshMs);
  const o = overview.data;
  return html`<div class="page">
    <div class="page-head">
      <h1>Overview</h1>
      <span class="muted">${o === null ? '' : html`node <code>${o.node_id}</code> · ${utc(o.now)} · refreshes every ${refreshMs / 1000} s`}</span>
    </div>
    <${ErrorBox} error=${overview.error} what="Overview" />
    ${o === null ? (overview.error === null ? html`<${Loading} />` : null) : html`
      <div class="grid-2">
        <${Section} title="Jobs by state"><${JobStates} jobs=${o.jobs} /><//>
        <${Section} title="Fire lateness" right=${html`<span class="muted">${latenessSummary(o)}</span>`}>
          <${LatenessChart} o=${o} />
        <//>
      </div>
      <${Section} title="Callbacks, last hour" right=${html`<span class="muted">${callbackSummary(o)}</span>`}>
        <${CallbacksChart} o=${o} />
      <//>`}
    <${Section} title=${`Due per second, next ${dueSeconds / 60} minutes`} right=${due.data !== null && html`<span class="muted">${dueSummary(due.data)}</span>`}>
      ${due.error?.missing === true ? html`<${Unavailable} what="The due profile" route="GET /v1/due-profile" />`
        : due.error !== null ? html`<${ErrorBox} error=${due.error} what="Due profile" />`
        : due.data === null ? html`<${Loading} />` : html`<${DueChart} p=${due.data} />`}
    <//>
  </div>`;
}

function JobStates({ jobs }: { jobs: Record<string, number> }): VNode {
  const states = [...stateOrder.filter((s) => s in jobs), ...Object.keys(jobs).filter((s) => !stateOrder.includes(s))];
  const total = states.reduce((n, s) => n + (jobs[s] ?? 0), 0);
  const max = Math.max(1, ...states.map((s) => jobs[s] ?? 0));
  return html`<table class="table states" data-testid="job-states">
    <tbody>
      ${states.map((s) => html`<tr>
        <td><a href=${href(['jobs'], { state: s })} class=${`badge state-${s.toLowerCase()}`}>${s}</a></td>
        <td class="num">${count(jobs[s] ?? 0)}</td>
        <td class="bar-cell"><div class=${`bar state-bar-${s.toLowerCase()}`} style=${{ width: `${((jobs[s] ?? 0) / max) * 100}%` }}></div></td>
      </tr>`)}
      <tr class="total"><td>total</td><td class="num">${count(total)}</td><td></td></tr>
    </tbody>
  </table>
  <p class="note">Stored states on this node's replicas; QUEUED and RUNNING show on the Jobs page.</p>`;
}

function callbackSummary(o: Overview): string {
  const sent = o.callbacks.samples.reduce((n, s) => n + s.sent, 0);
  const failed = o.callbacks.samples.reduce((n, s) => n + s.failed, 0);
  return `${count(sent)} sent, ${count(failed)} failed`;
}

function CallbacksChart({ o }: { o: Overview }): VNode {
  const intervalS = o.callbacks.interval_ms / 1000;
  const nowS = Date.parse(o.now) / 1000;
  const xs: number[] = [];
  const sent: number[] = [];
  const failed: number[] = [];
  for (const s of o.callbacks.samples) {
    const startS = Date.parse(s.start) / 1000;
    const spanS = Math.max(1, Math.min(intervalS, nowS - startS)); // the last interval is still running
    xs.push(startS);
    sent.push(s.sent / spanS);
    failed.push(s.failed / spanS);
  }
  const options = (): Omit<uPlot.Options, 'width' | 'height'> => ({
    scales: { x: { time: true, range: () => [nowS - 3600, nowS] }, y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] } },
    series: [
      { label: 'interval from', value: (_u, v) => (v == null ? '—' : utc(new Date(v * 1000).toISOString())) },
      { label: 'sent/s', stroke: cssVar('--accent'), fill: cssVar('--accent-fill'), width: 1.5, value: (_u, v) => (v == null ? '—' : v.toFixed(2)) },
      { label: 'failed/s', stroke: cssVar('--bad'), width: 1.5, value: (_u, v) => (v == null ? '—' : v.toFixed(2)) },
    ],
    axes: [utcAxis(false), axis({ size: 50 })],
    legend: { live: true },
  });
  return html`<${Chart} options=${options} shape="callbacks" data=${[xs, sent, failed]} height=${200} label="callbacks per second over the last hour" />`;
}

function bucketLabel(le: number | null, prev: number | null): string {
  if (le === null) return `>${prev ?? 0}`;
  return `≤${le}`;
}

/** The bucket holding the q-th quantile: an upper bound, as Prometheus histograms give. */
function quantileBound(o: Overview, q: number): string {
  const b = o.fire_lateness_ms.buckets;
  const total = b.reduce((n, x) => n + x.count, 0);
  if (total === 0) return '—';
  let seen = 0;
  for (let i = 0; i < b.length; i++) {
    seen += b[i]!.count;
    if (seen >= q * total) return b[i]!.le === null ? `>${b[i - 1]?.le ?? 0} ms` : `≤${b[i]!.le} ms`;
  }
  return '—';
}

function latenessSummary(o: Overview): string {
  const l = o.fire_lateness_ms;
  if (l.count === 0) return 'no callbacks fired yet';
  return `${count(l.count)} fired · mean ${duration(l.sum / l.count)} · p50 ${quantileBound(o, 0.5)} · p99 ${quantileBound(o, 0.99)}`;
}

function LatenessChart({ o }: { o: Overview }): VNode {
  const b = o.fire_lateness_ms.buckets;
  const labels = b.map((x, i) => bucketLabel(x.le, b[i - 1]?.le ?? null));
  const xs = b.map((_x, i) => i);
  const options = (): Omit<uPlot.Options, 'width' | 'height'> => ({
    scales: { x: { time: false, range: [-0.5, b.length - 0.5] }, y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] } },
    series: [
      { label: 'lateness', value: (_u, v) => (v == null ? '—' : `${labels[v] ?? ''} ms`) },
      { label: 'first attempts', stroke: cssVar('--accent'), fill: cssVar('--accent-fill'), paths: bars(), points: { show: false } },
    ],
    axes: [axis({ values: (_u, splits) => splits.map((i) => labels[i] ?? ''), splits: () => xs, gap: 4 }), axis({ size: 50 })],
    legend: { live: true },
  });
  return html`<${Chart} options=${options} shape=${`lateness-${b.length}`} data=${[xs, b.map((x) => x.count)]} height=${180} label="fire lateness histogram, ms" />
    <p class="note">Start of each occurrence's first attempt minus its scheduled time, since the node started (ms buckets).</p>`;
}

function dueSummary(p: DueProfile): string {
  const total = p.per_second.reduce((n, x) => n + x, 0);
  const peak = Math.max(0, ...p.per_second);
  const rate = p.drain_rate_per_s === null ? '' : ` · drains ${count(Math.round(p.drain_rate_per_s))}/s`;
  return `${count(total)} due · peak ${count(peak)}/s${rate}`;
}

function DueChart({ p }: { p: DueProfile }): VNode {
  const fromS = Date.parse(p.from) / 1000;
  const xs = p.per_second.map((_n, i) => fromS + i);
  const series: uPlot.Series[] = [
    { label: 'second', value: (_u, v) => (v == null ? '—' : utc(new Date(v * 1000).toISOString())) },
    { label: 'due/s', stroke: cssVar('--warn'), fill: cssVar('--warn-fill'), paths: bars(), points: { show: false } },
  ];
  const data: uPlot.AlignedData = [xs, p.per_second];
  if (p.drain_rate_per_s !== null) {
    series.push({ label: 'drain rate/s', stroke: cssVar('--muted'), dash: [4, 4], width: 1, points: { show: false } });
    data.push(p.per_second.map(() => p.drain_rate_per_s));
  }
  const options = (): Omit<uPlot.Options, 'width' | 'height'> => ({
    scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] } },
    series,
    axes: [utcAxis(true), axis({ size: 50 })],
    legend: { live: true },
  });
  return html`<${Chart} options=${options} shape=${`due-${series.length}`} data=${data} height=${180} label="occurrences due per second" />
    <p class="note">Occurrences due each second from now on: a spike here is a hot instant before it arrives.</p>`;
}
