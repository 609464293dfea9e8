/**
 * One job: its schedule and fields, its next occurrences (POST /v1/schedules:preview), every attempt of every
 * occurrence, and its actions. Cancel and a dead-letter replay ask for confirmation first; a read-only token
 * sees no action at all.
 */
import { html } from 'htm/preact';
import type { VNode } from 'preact';
import { canWrite, get, hasRoute, jobPath, post, query, type Execution, type Job, type Scope } from '../api.js';
import { ActionButton, ErrorBox, Fields, Loading, Rel, Section, StateBadge, Time, useLoad } from '../components.js';
import { duration, scheduleText, utc } from '../format.js';
import { href, type Route } from '../router.js';

const refreshMs = 5_000;
const previewCount = 10;
const executionsPage = 50;
const finished = ['SUCCEEDED', 'FAILED', 'CANCELLED'];

export function JobPage({ id, route, scope }: { id: string; route: Route; scope: Scope | null }): VNode {
  const job = useLoad(() => get<Job>(jobPath(id)), `job:${id}`, refreshMs);
  const cursor = route.params.get('cursor');
  const execPath = jobPath(id, `/executions${query({ limit: executionsPage, cursor })}`);
  const executions = useLoad(() => get<{ executions: Execution[]; next_cursor: string | null }>(execPath), execPath, refreshMs);
  const reload = (): void => {
    job.reload();
    executions.reload();
  };
  const j = job.data;
  return html`<div class="page">
    <div class="page-head">
      <h1><a href="#/jobs" class="muted">Jobs</a> / <span class="mono" data-testid="job-id">${id}</span></h1>
      ${j !== null && html`<${StateBadge} state=${j.state} />`}
      ${j !== null && canWrite(scope) && html`<${JobActions} j=${j} done=${reload} />`}
    </div>
    <${ErrorBox} error=${job.error} what=${job.error?.status === 404 ? 'Not found' : 'Reading the job'} />
    ${j === null ? job.error === null && html`<${Loading} />` : html`
      <div class="grid-2">
        <${Section} title="Job"><${JobFields} j=${j} /><//>
        <${Section} title=${`Next ${previewCount} occurrences`}><${NextOccurrences} j=${j} scope=${scope} /><//>
      </div>
      ${(j.payload !== undefined || j.payload_base64 !== undefined || j.metadata !== null) && html`<div class="grid-2">
        <${Section} title="Payload">${j.payload_base64 !== undefined ? html`<pre class="code">base64: ${j.payload_base64}</pre>`
          : j.payload !== undefined ? html`<pre class="code">${JSON.stringify(j.payload, null, 2)}</pre>` : html`<span class="muted">empty body</span>`}<//>
        <${Section} title="Metadata">${j.metadata === null ? html`<span class="muted">none</span>` : html`<pre class="code">${JSON.stringify(j.metadata, null, 2)}</pre>`}<//>
      </div>`}`}
    <${Section} title="Executions" right=${html`<span class="muted">newest first; every attempt of each occurrence</span>`}>
      <${ErrorBox} error=${executions.error} what="Reading executions" />
      ${executions.data === null ? executions.error === null && html`<${Loading} />` : html`
        <${ExecutionTable} executions=${executions.data.executions} />
        <div class="pager">
          <a class="btn" href=${href(['jobs', id])} aria-disabled=${cursor === null}>Newest</a>
          ${executions.data.next_cursor !== null && html`<a class="btn" href=${href(['jobs', id], { cursor: executions.data.next_cursor })}>Older</a>`}
        </div>`}
    <//>
  </div>`;
}

function JobFields({ j }: { j: Job }): VNode {
  return html`<${Fields} rows=${[
    ['task', j.task === null ? html`inline callback <code>${j.callback?.method} ${j.callback?.url}</code>` : html`<a href=${href(['tasks'], { name: j.task })}>${j.task}</a>`],
    ['schedule', html`<code>${scheduleText(j.schedule)}</code>`],
    ['schedule (JSON)', html`<code class="small">${JSON.stringify(j.schedule)}</code>`],
    ['next fire', html`<${Time} iso=${j.next_fire_at} /> <${Rel} iso=${j.next_fire_at} />`],
    ['runs', `${j.runs}${j.max_runs > 0 ? ` of at most ${j.max_runs}` : ' (no limit)'}`],
    ['end at', html`<${Time} iso=${j.end_at} />`],
    ['misfire', `${j.misfire}, threshold ${duration(j.misfire_threshold_ms)}`],
    ['overlap', j.overlap],
    ['shard', String(j.shard)],
    ['created', html`<${Time} iso=${j.created_at} />`],
    ['updated', html`<${Time} iso=${j.updated_at} />`],
  ]} />`;
}

function NextOccurrences({ j, scope }: { j: Job; scope: Scope | null }): VNode {
  const live = !finished.includes(j.state);
  const key = `preview:${j.id}:${JSON.stringify(j.schedule)}`;
  const preview = useLoad(
    () => (live && canWrite(scope) ? post<{ occurrences: string[] }>('/v1/schedules:preview', { schedule: j.schedule, count: previewCount, id: j.id }) : Promise.resolve({ occurrences: [] })),
    key,
  );
  const ended: Record<string, string> = { SUCCEEDED: 'succeeded', FAILED: 'failed', CANCELLED: 'been cancelled' };
  if (!live) return html`<span class="muted">This job has ${ended[j.state] ?? 'ended'}: its schedule runs nothing more.</span>`;
  if (!canWrite(scope)) return html`<span class="muted">The preview needs a token with the write scope. Next fire: ${utc(j.next_fire_at)}</span>`;
  if (preview.error !== null) return html`<${ErrorBox} error=${preview.error} what="Preview" />`;
  if (preview.data === null) return html`<${Loading} />`;
  if (preview.data.occurrences.length === 0) return html`<span class="muted">No further occurrence.</span>`;
  return html`<ol class="occurrences" data-testid="occurrences">${preview.data.occurrences.map((t) => html`<li><${Time} iso=${t} /> <${Rel} iso=${t} /></li>`)}</ol>
    ${j.state === 'PAUSED' && html`<p class="note">Paused: these run only after a resume (missed ones follow the misfire policy).</p>`}`;
}

function JobActions({ j, done }: { j: Job; done: () => void }): VNode {
  const path = (action: string): string => jobPath(j.id, `/${action}`);
  const failed = j.state === 'FAILED' || j.last_execution?.state === 'FAILED';
  const replayable = useLoad(() => (failed ? hasRoute('/v1/dead-letters?limit=1') : Promise.resolve(false)), `replay:${failed}`);
  const dead = failed && replayable.data === true;
  return html`<div class="actions" data-testid="job-actions">
    ${j.state !== 'CANCELLED' && html`<${ActionButton} label="Run now" testId="run-now" run=${() => post<Job>(path('run'))} done=${done} />`}
    ${j.state === 'PAUSED'
      ? html`<${ActionButton} label="Resume" testId="resume" run=${() => post<Job>(path('resume'))} done=${done} />`
      : !finished.includes(j.state) && html`<${ActionButton} label="Pause" testId="pause" run=${() => post<Job>(path('pause'))} done=${done} />`}
    ${dead && html`<${ActionButton} label="Replay dead letter" testId="replay" done=${done}
      confirm=${{ title: 'Replay this dead letter?', action: 'Replay', body: html`<p>The failed occurrence of <code>${j.id}</code> is sent to its receiver again, with a new attempt count.</p>` }}
      run=${() => post<{ matched: number; replayed: number }>('/v1/dead-letters:replay', { ids: [j.id] })} />`}
    ${!finished.includes(j.state) && html`<${ActionButton} label="Cancel job" testId="cancel" danger=${true} done=${done}
      confirm=${{ title: 'Cancel this job?', danger: true, action: 'Cancel job',
        body: html`<p><code>${j.id}</code> (${scheduleText(j.schedule)}) will never fire again. This cannot be undone: the job stays readable, as CANCELLED.</p>` }}
      run=${() => post<Job>(path('cancel'))} />`}
  </div>`;
}

function ExecutionTable({ executions }: { executions: Execution[] }): VNode {
  if (executions.length === 0) return html`<div class="muted-box">No execution yet.</div>`;
  return html`<table class="table" data-testid="executions-table">
    <thead><tr><th>scheduled at (UTC)</th><th>state</th><th class="num">attempt</th><th class="num">status</th><th>error</th>
      <th>started</th><th class="num">duration</th><th class="num">lateness</th><th>node</th><th>fencing</th></tr></thead>
    <tbody>${executions.map((e) => html`
      <tr class="execution">
        <td><${Time} iso=${e.scheduled_at} /></td>
        <td><${StateBadge} state=${e.state} /></td>
        <td class="num">${e.attempt ?? '—'}</td>
        <td class="num">${e.status_code ?? '—'}</td>
        <td class="err">${e.error ?? ''}</td>
        <td><${Time} iso=${e.started_at} /></td>
        <td class="num">${e.started_at !== null && e.finished_at !== null ? duration(Date.parse(e.finished_at) - Date.parse(e.started_at)) : '—'}</td>
        <td class="num">${duration(e.lateness_ms)}</td>
        <td>${e.node_id ?? '—'}</td>
        <td></td>
      </tr>
      ${(e.attempts ?? []).map((a) => html`<tr class="attempt">
        <td class="indent">attempt ${a.attempt}</td>
        <td>${a.finished_at === null ? html`<span class="muted">in flight</span>` : a.error === null && a.status_code !== null && a.status_code < 300 ? html`<span class="ok">ok</span>` : html`<span class="bad">failed</span>`}</td>
        <td class="num">${a.attempt}</td>
        <td class="num">${a.status_code ?? '—'}</td>
        <td class="err">${a.error ?? ''}</td>
        <td><${Time} iso=${a.started_at} /></td>
        <td class="num">${duration(a.duration_ms)}</td>
        <td></td>
        <td>${a.node_id ?? '—'}</td>
        <td class="mono">${a.fencing_token ?? ''}</td>
      </tr>`)}`)}
    </tbody>
  </table>
  ${executions.every((e) => e.attempts === undefined) && html`<p class="note">This node lists each occurrence's latest attempt only.</p>`}`;
}

