/**
 * Dead letters: occurrences whose every attempt failed, grouped by task and error class, with the failures of a
 * group listed below it. Replay (a group, or the selected ones) asks first, showing how many would be sent
 * again (a dry run of the same request).
 */
import { html } from 'htm/preact';
import type { VNode } from 'preact';
import { useState } from 'preact/hooks';
import { canWrite, get, post, query, type DeadLetter, type DeadLetterGroup, type Scope } from '../api.js';
import { ActionButton, ErrorBox, Loading, Section, Time, Unavailable, useLoad } from '../components.js';
import { count } from '../format.js';
import { href, type Route } from '../router.js';

const pageSize = 100;

interface ReplayResult {
  matched: number;
  replayed: number;
}

export function DeadLettersPage({ route, scope }: { route: Route; scope: Scope | null }): VNode {
  const groups = useLoad(() => get<{ groups: DeadLetterGroup[] }>('/v1/dead-letters:groups'), 'groups');
  const task = route.params.get('task');
  const errorClass = route.params.get('error_class');
  const [notice, setNotice] = useState<string | null>(null);
  const replayed = (r: ReplayResult): void => {
    setNotice(`Replayed ${count(r.replayed)} of ${count(r.matched)} matched dead letter(s).`);
    groups.reload();
  };
  if (groups.error?.missing === true) {
    return html`<div class="page"><div class="page-head"><h1>Dead letters</h1></div>
      <${Unavailable} what="The dead-letter API" route="GET /v1/dead-letters:groups" /></div>`;
  }
  return html`<div class="page">
    <div class="page-head"><h1>Dead letters</h1><span class="muted">occurrences whose every attempt failed</span></div>
    ${notice !== null && html`<div class="notice" role="status" data-testid="notice">${notice}</div>`}
    <${ErrorBox} error=${groups.error} what="Reading dead letters" />
    ${groups.data === null ? groups.error === null && html`<${Loading} />` : html`
      <${Section} title="By task and error">
        ${groups.data.groups.length === 0 ? html`<div class="muted-box">No dead letters.</div>` : html`
        <table class="table" data-testid="dead-letter-groups">
          <thead><tr><th>task</th><th>error class</th><th class="num">count</th><th>last failed (UTC)</th><th></th></tr></thead>
          <tbody>${groups.data.groups.map((g) => html`<tr class=${g.task === task && g.error_class === errorClass ? 'selected' : ''}>
            <td>${g.task ?? html`<span class="muted">inline</span>`}</td>
            <td class="mono">${g.error_class}</td>
            <td class="num">${count(g.count)}</td>
            <td><${Time} iso=${g.last_failed_at} /></td>
            <td class="actions-cell">
              <a class="btn" href=${href(['dead-letters'], { task: g.task, error_class: g.error_class })}>Show</a>
              ${canWrite(scope) && html`<${GroupReplay} group=${g} done=${replayed} />`}
            </td>
          </tr>`)}</tbody>
        </table>`}
      <//>`}
    ${(task !== null || errorClass !== null) && html`<${GroupList} task=${task} errorClass=${errorClass} scope=${scope} done=${replayed} />`}
  </div>`;
}

function filterOf(task: string | null, errorClass: string | null): Record<string, string> {
  const f: Record<string, string> = {};
  if (task !== null) f.task = task;
  if (errorClass !== null) f.error_class = errorClass;
  return f;
}

function GroupReplay({ group, done }: { group: DeadLetterGroup; done: (r: ReplayResult) => void }): VNode {
  const filter = filterOf(group.task, group.error_class);
  return html`<${ActionButton} label="Replay all" testId="replay-group" done=${done}
    confirm=${async () => {
      const dry = await post<ReplayResult>('/v1/dead-letters:replay', { filter, dry_run: true });
      return { title: 'Replay this group?', action: `Replay ${count(dry.matched)}`,
        body: html`<p>${count(dry.matched)} dead letter(s) of task <code>${group.task ?? 'inline'}</code> failing with <code>${group.error_class}</code> are sent to their receivers again.</p>` };
    }}
    run=${() => post<ReplayResult>('/v1/dead-letters:replay', { filter })} />`;
}

function GroupList({ task, errorClass, scope, done }: { task: string | null; errorClass: string | null; scope: Scope | null; done: (r: ReplayResult) => void }): VNode {
  const path = `/v1/dead-letters${query({ task, error_class: errorClass, limit: pageSize })}`;
  const list = useLoad(() => get<{ dead_letters: DeadLetter[]; next_cursor: string | null }>(path), path);
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const toggle = (id: string): void => {
    const next = new Set(selected);
    if (next.has(id)) next.delete(id);
    else next.add(id);
    setSelected(next);
  };
  const ids = [...selected];
  return html`<${Section} title=${`Dead letters: ${task ?? 'any task'} · ${errorClass ?? 'any error'}`}
      right=${html`<a class="btn" href="#/dead-letters">Close</a>`}>
    <${ErrorBox} error=${list.error} what="Listing dead letters" />
    ${list.data === null ? list.error === null && html`<${Loading} />` : html`
      ${canWrite(scope) && html`<div class="toolbar">
        <${ActionButton} label=${`Replay selected (${ids.length})`} testId="replay-selected" disabled=${ids.length === 0}
          confirm=${{ title: 'Replay the selected dead letters?', action: `Replay ${ids.length}`, body: html`<p>${ids.length} occurrence(s) are sent to their receivers again.</p>` }}
          run=${() => post<ReplayResult>('/v1/dead-letters:replay', { ids })} done=${(r: ReplayResult) => { setSelected(new Set()); list.reload(); done(r); }} />
      </div>`}
      <table class="table" data-testid="dead-letters-table">
        <thead><tr>${canWrite(scope) && html`<th></th>`}<th>job</th><th>task</th><th>error</th><th class="num">status</th><th class="num">attempts</th><th>scheduled at (UTC)</th><th>failed at</th></tr></thead>
        <tbody>${list.data.dead_letters.map((d) => html`<tr>
          ${canWrite(scope) && html`<td><input type="checkbox" aria-label=${`select ${d.job_id}`} checked=${selected.has(d.job_id)} onChange=${() => toggle(d.job_id)} /></td>`}
          <td class="id"><a href=${href(['jobs', d.job_id])}>${d.job_id}</a></td>
          <td>${d.task ?? html`<span class="muted">inline</span>`}</td>
          <td class="err">${d.error ?? d.error_class}</td>
          <td class="num">${d.status_code ?? '—'}</td>
          <td class="num">${d.attempts}</td>
          <td><${Time} iso=${d.scheduled_at} /></td>
          <td><${Time} iso=${d.failed_at} /></td>
        </tr>`)}</tbody>
      </table>
      ${list.data.next_cursor !== null && html`<p class="note">Showing the first ${pageSize}; replay the whole group to reach the rest.</p>`}`}
  <//>`;
}
