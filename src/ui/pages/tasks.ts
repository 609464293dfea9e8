/** Tasks: where and how each task calls (URL, retries, timeout, concurrency, signing), with links to its jobs. */
import { html } from 'htm/preact';
import type { VNode } from 'preact';
import { get, type Task } from '../api.js';
import { ErrorBox, Loading, Time, useLoad } from '../components.js';
import { duration } from '../format.js';
import { href, type Route } from '../router.js';

export function TasksPage({ route }: { route: Route }): VNode {
  const tasks = useLoad(() => get<{ tasks: Task[] }>('/v1/tasks'), 'tasks');
  const selected = route.params.get('name');
  return html`<div class="page">
    <div class="page-head"><h1>Tasks</h1><span class="muted">${tasks.data === null ? '' : `${tasks.data.tasks.length} task(s)`}</span></div>
    <${ErrorBox} error=${tasks.error} what="Listing tasks" />
    ${tasks.data === null ? tasks.error === null && html`<${Loading} />`
      : tasks.data.tasks.length === 0 ? html`<div class="muted-box">No tasks yet. <code>PUT /v1/tasks/NAME</code> makes one (docs/api.md).</div>`
      : html`<table class="table" data-testid="tasks-table">
      <thead><tr><th>name</th><th>method</th><th>url</th><th class="num">timeout</th><th>retry</th><th class="num">concurrency</th><th>signing</th><th>updated (UTC)</th><th></th></tr></thead>
      <tbody>${tasks.data.tasks.map((t) => html`<tr class=${t.name === selected ? 'selected' : ''}>
        <td class="id">${t.name}</td>
        <td>${t.method}</td>
        <td class="mono url">${t.url}</td>
        <td class="num">${duration(t.timeout_ms)}</td>
        <td>${t.retry.max_attempts} attempts, ${duration(t.retry.initial_backoff_ms)} × ${t.retry.multiplier} up to ${duration(t.retry.max_backoff_ms)}${t.retry.jitter ? ', jitter' : ''}</td>
        <td class="num">${t.max_concurrency}</td>
        <td>${t.signing_secret === undefined ? html`<span class="muted">unsigned</span>` : t.signing_secret_next === undefined ? 'signed' : html`<span class="warn">rotating</span>`}</td>
        <td><${Time} iso=${t.updated_at} /></td>
        <td><a href=${href(['jobs'], { task: t.name })}>jobs</a> · <a href=${href(['dead-letters'], { task: t.name })}>dead letters</a></td>
      </tr>`)}</tbody>
    </table>`}
  </div>`;
}
