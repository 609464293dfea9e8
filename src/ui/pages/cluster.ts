/**
 * Cluster: the nodes this node knows and whether it reaches them, and every shard with its leader, term,
 * commit and applied indexes (their difference: this node's apply lag), members and learners. Admins can move a
 * shard's leadership.
 */
import { html } from 'htm/preact';
import type { VNode } from 'preact';
import { useState } from 'preact/hooks';
import { get, isAdmin, post, type ClusterInfo, type Scope } from '../api.js';
import { ActionButton, ErrorBox, Loading, Section, useLoad } from '../components.js';
import { count } from '../format.js';

const refreshMs = 3_000;

export function ClusterPage({ scope }: { scope: Scope | null }): VNode {
  const cluster = useLoad(() => get<ClusterInfo>('/v1/cluster'), 'cluster', refreshMs);
  const c = cluster.data;
  return html`<div class="page">
    <div class="page-head"><h1>Cluster</h1><span class="muted">${c === null ? '' : html`as seen by <code>${c.node_id}</code> · refreshes every ${refreshMs / 1000} s`}</span></div>
    <${ErrorBox} error=${cluster.error} what="Reading the cluster" />
    ${c === null ? cluster.error === null && html`<${Loading} />` : html`
      <${Section} title="Nodes" right=${html`<span class="muted">${c.nodes.filter((n) => n.reachable).length} of ${c.nodes.length} reachable</span>`}>
        <table class="table" data-testid="nodes-table">
          <thead><tr><th>node</th><th>peer address</th><th>API address</th><th>reachable</th><th class="num">shards led</th></tr></thead>
          <tbody>${[...c.nodes].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)).map((n) => html`<tr>
            <td class="id">${n.id}${n.id === c.node_id ? html` <span class="muted">(this node)</span>` : ''}</td>
            <td class="mono">${n.peer_addr}</td>
            <td class="mono">${n.api_addr ?? html`<span class="muted">not reached yet</span>`}</td>
            <td>${n.reachable ? html`<span class="ok">yes</span>` : html`<span class="bad">no</span>`}</td>
            <td class="num">${c.shards.filter((s) => s.leader === n.id).length}</td>
          </tr>`)}</tbody>
        </table>
      <//>
      <${Section} title="Shards">
        <table class="table middle" data-testid="shards-table">
          <thead><tr><th class="num">shard</th><th>leader</th><th class="num">term</th><th class="num">commit</th><th class="num">applied</th><th class="num">lag</th><th>members</th><th>learners</th>${isAdmin(scope) && html`<th>transfer leadership</th>`}</tr></thead>
          <tbody>${c.shards.map((s) => html`<tr>
            <td class="num">${s.id}</td>
            <td>${s.leader ?? html`<span class="bad">no leader</span>`}</td>
            <td class="num">${s.term}</td>
            <td class="num">${count(s.commit_index)}</td>
            <td class="num">${count(s.applied_index)}</td>
            <td class=${`num ${s.commit_index - s.applied_index > 0 ? 'warn' : ''}`}>${count(s.commit_index - s.applied_index)}</td>
            <td>${s.members.join(', ')}</td>
            <td>${s.learners.length === 0 ? html`<span class="muted">none</span>` : s.learners.join(', ')}</td>
            ${isAdmin(scope) && html`<td><${Transfer} shard=${s} done=${cluster.reload} /></td>`}
          </tr>`)}</tbody>
        </table>
      <//>`}
  </div>`;
}

function Transfer({ shard, done }: { shard: ClusterInfo['shards'][number]; done: () => void }): VNode {
  const others = shard.members.filter((m) => m !== shard.leader && !shard.learners.includes(m));
  const [picked, setTo] = useState(others[0] ?? '');
  if (others.length === 0) return html`<span class="muted">no other voter</span>`;
  // the leader may change under the page: a choice that became the leader falls back to another voter
  const to = others.includes(picked) ? picked : others[0]!;
  return html`<span class="transfer">
    <select value=${to} onChange=${(e: Event) => setTo((e.target as HTMLSelectElement).value)} aria-label=${`new leader of shard ${shard.id}`}>
      ${others.map((m) => html`<option value=${m}>${m}</option>`)}
    </select>
    <${ActionButton} label="Transfer" testId=${`transfer-${shard.id}`} done=${done}
      confirm=${{ title: `Move shard ${shard.id}'s leadership?`, action: 'Transfer', body: html`<p>Leadership of shard ${shard.id} moves from <code>${shard.leader}</code> to <code>${to}</code>. Writes to the shard pause for the election (about a second).</p>` }}
      run=${() => post(`/v1/cluster/shards/${shard.id}/transfer-leader`, { to })} />
  </span>`;
}
