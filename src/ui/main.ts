/**
 * The dashboard served by the node at /ui: a token form, then Overview, Jobs, Tasks, Dead letters and Cluster.
 * Every figure comes from the node's own API (docs/api.md); what the token's scope would refuse is not shown.
 */
import { html } from 'htm/preact';
import { render, type VNode } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { get, setUnauthorizedHandler, storeToken, storedToken, type Whoami } from './api.js';
import { asApiError } from './components.js';
import { ClusterPage } from './pages/cluster.js';
import { DeadLettersPage } from './pages/dead-letters.js';
import { JobPage } from './pages/job.js';
import { JobsPage } from './pages/jobs.js';
import { OverviewPage } from './pages/overview.js';
import { TasksPage } from './pages/tasks.js';
import { useRoute, type Route } from './router.js';

type Session = { kind: 'checking' } | { kind: 'login'; message: string | null } | { kind: 'in'; who: Whoami };

async function whoami(): Promise<Session> {
  try {
    return { kind: 'in', who: await get<Whoami>('/v1/whoami') };
  } catch (err) {
    const e = asApiError(err);
    if (e.status === 401) {
      const had = storedToken() !== null;
      storeToken(null);
      return { kind: 'login', message: had ? 'The node did not accept this token.' : null };
    }
    return { kind: 'login', message: `The node answered: ${e.status === 0 ? '' : `${e.status} `}${e.message}` };
  }
}

function App(): VNode {
  const [session, setSession] = useState<Session>({ kind: 'checking' });
  useEffect(() => {
    setUnauthorizedHandler(() => {
      storeToken(null);
      setSession({ kind: 'login', message: 'The node no longer accepts this token: log in again.' });
    });
    void whoami().then(setSession);
  }, []);
  const logIn = async (token: string): Promise<void> => {
    storeToken(token);
    setSession(await whoami());
  };
  const logOut = async (): Promise<void> => {
    storeToken(null);
    const next = await whoami();
    setSession(next.kind === 'in' && next.who.auth_required ? { kind: 'login', message: null } : next);
  };
  if (session.kind === 'checking') return html`<div class="center muted">Connecting…</div>`;
  if (session.kind === 'login') return html`<${Login} message=${session.message} logIn=${logIn} />`;
  return html`<${Shell} who=${session.who} logOut=${logOut} />`;
}

function Login({ message, logIn }: { message: string | null; logIn: (token: string) => Promise<void> }): VNode {
  const [token, setToken] = useState('');
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event): Promise<void> => {
    e.preventDefault();
    if (token.trim() === '') return;
    setBusy(true);
    await logIn(token.trim());
    setBusy(false);
  };
  return html`<div class="center">
    <form class="login" onSubmit=${submit} method="post" autocomplete="off">
      <h1><span class="brand-mark">◷</span> Punctual</h1>
      <p class="muted">This node asks for an API token (<code>--auth-token</code> or a line of <code>--auth-tokens-file</code>).
        It is kept in this tab's session storage and sent only as an <code>Authorization</code> header.</p>
      <label for="token">API token</label>
      <input id="token" name="token" type="password" autocomplete="off" spellcheck="false" value=${token}
        onInput=${(e: Event) => setToken((e.target as HTMLInputElement).value)} data-testid="token" autofocus />
      ${message !== null && html`<div class="error" role="alert">${message}</div>`}
      <button type="submit" class="btn primary" disabled=${busy} data-testid="login">Log in</button>
    </form>
  </div>`;
}

const pages: Array<{ path: string; label: string }> = [
  { path: '', label: 'Overview' },
  { path: 'jobs', label: 'Jobs' },
  { path: 'tasks', label: 'Tasks' },
  { path: 'dead-letters', label: 'Dead letters' },
  { path: 'cluster', label: 'Cluster' },
];

function Shell({ who, logOut }: { who: Whoami; logOut: () => void }): VNode {
  const route = useRoute();
  const top = route.parts[0] ?? '';
  return html`<div class="shell">
    <nav class="topbar">
      <a class="brand" href="#/"><span class="brand-mark">◷</span> Punctual</a>
      ${pages.map((p) => html`<a class=${`nav ${top === p.path ? 'active' : ''}`} href=${`#/${p.path}`}>${p.label}</a>`)}
      <span class="spacer"></span>
      <span class="who" data-testid="who">${who.name ?? 'anonymous'} <span class=${`badge scope-${who.scope ?? 'none'}`}>${who.scope ?? 'no scope'}</span>
        ${!who.auth_required && html`<span class="badge warn-badge" title="this node accepts requests without a token">open node</span>`}</span>
      ${who.auth_required && html`<button type="button" class="btn" onClick=${logOut} data-testid="logout">Log out</button>`}
    </nav>
    <main><${Page} route=${route} who=${who} /></main>
  </div>`;
}

function Page({ route, who }: { route: Route; who: Whoami }): VNode {
  const [top, second] = route.parts;
  switch (top ?? '') {
    case '':
      return html`<${OverviewPage} />`;
    case 'jobs':
      return second === undefined ? html`<${JobsPage} route=${route} />` : html`<${JobPage} key=${second} id=${second} route=${route} scope=${who.scope} />`;
    case 'tasks':
      return html`<${TasksPage} route=${route} />`;
    case 'dead-letters':
      return html`<${DeadLettersPage} route=${route} scope=${who.scope} />`;
    case 'cluster':
      return html`<${ClusterPage} scope=${who.scope} />`;
    default:
      return html`<div class="page"><h1>Not found</h1><p>No page <code>#/${route.parts.join('/')}</code>. <a href="#/">Overview</a></p></div>`;
  }
}

render(html`<${App} />`, document.getElementById('app')!);
