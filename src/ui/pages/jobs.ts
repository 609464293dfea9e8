/**
 * Jobs: the list with the API's filters (state, task, metadata, next fire range), paged by cursor, and a search
 * by id. The filters live in the URL's hash so a filtered view can be shared and reloaded.
 */
import { html } from 'htm/preact';
import type { VNode } from 'preact';
import { useState } from 'preact/hooks';
import { get, query, type Job, type Task } from '../api.js';
import { ErrorBox, Loading, Rel, StateBadge, Time, useLoad } from '../components.js';
import { scheduleText } from '../format.js';
import { href, navigate, type Route } from '../router.js';

const states = ['PENDING', 'QUEUED', 'RUNNING', 'PAUSED', 'SUCCEEDED', 'FAILED', 'CANCELLED'];
const pageSize = 50;

/** The filter fields, as the hash holds them. `meta` is `KEY=VALUE`, sent as `metadata.KEY=VALUE`. */
const filterKeys = ['state', 'task', 'meta', 'after', 'before'] as const;
type Filters = Record<(typeof filterKeys)[number], string>;

function filtersOf(params: URLSearchParams): Filters {
  return Object.fromEntries(filterKeys.map((k) => [k, params.get(k) ?? ''])) as Filters;
}

function apiQuery(f: Filters, cursor: string | null): string {
  const params: Record<string, string | number | null> = {
    state: f.state, task: f.task, next_fire_after: f.after, next_fire_before: f.before, limit: pageSize, cursor,
  };
  const eq = f.meta.indexOf('=');
  if (eq > 0) params[`metadata.${f.meta.slice(0, eq).trim()}`] = f.meta.slice(eq + 1).trim();
  return `/v1/jobs${query(params)}`;
}

export function JobsPage({ route }: { route: Route }): VNode {
  const filters = filtersOf(route.params);
  const cursor = route.params.get('cursor');
  // Cursors of the pages before this one (to go back): kept in the hash too, comma-free since cursors are base64url.
  const trail = (route.params.get('trail') ?? '').split(',').filter((c) => c !== '');
  const path = apiQuery(filters, cursor);
  const jobs = useLoad(() => get<{ jobs: Job[]; next_cursor: string | null }>(path), path);
  const tasks = useLoad(() => get<{ tasks: Task[] }>('/v1/tasks'), 'tasks');
  const go = (changes: Partial<Filters> & { cursor?: string | null; trail?: string[] }): void => {
    const { trail: nextTrail, cursor: nextCursor, ...nextFilters } = changes;
    const next: Record<string, string | null> = { ...filters, ...nextFilters, cursor: nextCursor ?? null, trail: (nextTrail ?? []).join(',') };
    navigate(href(['jobs'], next));
  };
  return html`<div class="page">
    <div class="page-head"><h1>Jobs</h1><${SearchById} /></div>
    <${FilterBar} filters=${filters} tasks=${tasks.data?.tasks.map((t) => t.name) ?? []} apply=${(f: Filters) => go(f)} />
    <${ErrorBox} error=${jobs.error} what="Listing jobs" />
    ${jobs.data === null ? jobs.error === null && html`<${Loading} />` : html`
      <${JobTable} jobs=${jobs.data.jobs} />
      <div class="pager">
        <button type="button" class="btn" disabled=${cursor === null} onClick=${() => go({})}>First page</button>
        <button type="button" class="btn" disabled=${cursor === null}
          onClick=${() => go({ cursor: trail[trail.length - 1] === '-' ? null : (trail[trail.length - 1] ?? null), trail: trail.slice(0, -1) })}>Previous</button>
        <button type="button" class="btn" data-testid="next-page" disabled=${jobs.data.next_cursor === null}
          onClick=${() => go({ cursor: jobs.data!.next_cursor, trail: [...trail, cursor ?? '-'] })}>Next page</button>
        <span class="muted">${jobs.data.jobs.length} job(s) on this page${jobs.data.next_cursor === null ? '' : ', more after'}</span>
      </div>`}
  </div>`;
}

function SearchById(): VNode {
  const [id, setId] = useState('');
  const submit = (e: Event): void => {
    e.preventDefault();
    if (id.trim() !== '') navigate(href(['jobs', id.trim()]));
  };
  return html`<form class="search" onSubmit=${submit} method="post">
    <input type="search" placeholder="Job id" aria-label="Job id" value=${id} onInput=${(e: Event) => setId((e.target as HTMLInputElement).value)} data-testid="job-search" />
    <button type="submit" class="btn">Open</button>
  </form>`;
}

function FilterBar({ filters, tasks, apply }: { filters: Filters; tasks: string[]; apply: (f: Filters) => void }): VNode {
  const [f, setF] = useState(filters);
  const set = (k: keyof Filters) => (e: Event): void => setF({ ...f, [k]: (e.target as HTMLInputElement).value });
  const submit = (e: Event): void => {
    e.preventDefault();
    apply(f);
  };
  const clear = (): void => {
    const empty = Object.fromEntries(filterKeys.map((k) => [k, ''])) as Filters;
    setF(empty);
    apply(empty);
  };
  return html`<form class="filters" onSubmit=${submit} method="post">
    <label>State<select value=${f.state} onChange=${set('state')} data-testid="filter-state">
      <option value="">any</option>${states.map((s) => html`<option value=${s}>${s}</option>`)}
    </select></label>
    <label>Task<input list="task-names" value=${f.task} onInput=${set('task')} placeholder="any" size="14" data-testid="filter-task" />
      <datalist id="task-names">${tasks.map((t) => html`<option value=${t} />`)}</datalist></label>
    <label>Metadata<input value=${f.meta} onInput=${set('meta')} placeholder="key=value" size="16" data-testid="filter-meta" /></label>
    <label>Next fire after<input value=${f.after} onInput=${set('after')} placeholder="2026-12-01T09:00:00Z" size="22" /></label>
    <label>before<input value=${f.before} onInput=${set('before')} placeholder="RFC 3339, UTC" size="22" /></label>
    <button type="submit" class="btn primary" data-testid="apply-filters">Apply</button>
    <button type="button" class="btn" onClick=${clear}>Clear</button>
  </form>`;
}

export function JobTable({ jobs }: { jobs: Job[] }): VNode {
  if (jobs.length === 0) return html`<div class="muted-box">No jobs match.</div>`;
  return html`<table class="table" data-testid="jobs-table">
    <thead><tr><th>id</th><th>task</th><th>state</th><th>schedule</th><th>next fire (UTC)</th><th></th><th class="num">runs</th><th>last execution</th></tr></thead>
    <tbody>${jobs.map((j) => html`<tr>
      <td class="id"><a href=${href(['jobs', j.id])}>${j.id}</a></td>
      <td>${j.task === null ? html`<span class="muted">inline</span>` : html`<a href=${href(['jobs'], { task: j.task })}>${j.task}</a>`}</td>
      <td><${StateBadge} state=${j.state} /></td>
      <td class="mono">${scheduleText(j.schedule)}</td>
      <td><${Time} iso=${j.next_fire_at} /></td>
      <td><${Rel} iso=${j.next_fire_at} /></td>
      <td class="num">${j.runs}${j.max_runs > 0 ? ` / ${j.max_runs}` : ''}</td>
      <td>${j.last_execution === null ? html`<span class="muted">none</span>` : html`<${StateBadge} state=${j.last_execution.state} />
        <span class="muted">${j.last_execution.status_code ?? ''} ${j.last_execution.error ?? ''}</span>`}</td>
    </tr>`)}</tbody>
  </table>`;
}
