/** Pieces every page uses: loading with refresh, errors, state badges, times, buttons that confirm. */
import { html } from 'htm/preact';
import type { ComponentChildren, VNode } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { ApiError } from './api.js';
import { relative, utc } from './format.js';

export interface Loaded<T> {
  data: T | null;
  error: ApiError | null;
  loading: boolean;
  reload: () => void;
}

/**
 * Runs `load` now, whenever `key` changes, and every `refreshMs` (if given) while the page is open. An answer
 * that arrives after the key changed is dropped, so a slow page never overwrites a newer one.
 */
export function useLoad<T>(load: () => Promise<T>, key: string, refreshMs?: number): Loaded<T> {
  const [state, setState] = useState<{ data: T | null; error: ApiError | null; loading: boolean; key: string }>({ data: null, error: null, loading: true, key });
  const generation = useRef(0);
  const loadRef = useRef(load);
  loadRef.current = load;
  const run = useCallback(() => {
    const mine = ++generation.current;
    loadRef.current().then(
      (data) => mine === generation.current && setState({ data, error: null, loading: false, key }),
      (err: unknown) => mine === generation.current && setState((s) => ({ data: s.key === key ? s.data : null, error: asApiError(err), loading: false, key })),
    );
  }, [key]);
  useEffect(() => {
    setState((s) => (s.key === key ? s : { data: null, error: null, loading: true, key }));
    run();
    if (refreshMs === undefined) return undefined;
    const timer = setInterval(run, refreshMs);
    return () => clearInterval(timer);
  }, [key, refreshMs, run]);
  const fresh = state.key === key;
  return { data: fresh ? state.data : null, error: fresh ? state.error : null, loading: !fresh || state.loading, reload: run };
}

export function asApiError(err: unknown): ApiError {
  return err instanceof ApiError ? err : new ApiError(0, 'client', (err as Error).message ?? String(err));
}

export function ErrorBox({ error, what }: { error: ApiError | null; what?: string }): VNode | null {
  if (error === null) return null;
  return html`<div class="error" role="alert">
    <strong>${what ?? 'Request failed'}</strong>: ${error.status === 0 ? '' : `${error.status} ${error.code}: `}${error.message}
    ${error.fields.length > 0 && html`<ul>${error.fields.map((f) => html`<li><code>${f.field}</code> ${f.message}</li>`)}</ul>`}
  </div>`;
}

/** A feature this node's API does not have yet (404 on its route): said calmly, once. */
export function Unavailable({ what, route }: { what: string; route: string }): VNode {
  return html`<div class="muted-box">${what} is not available on this node (<code>${route}</code> answered 404).</div>`;
}

export function Loading(): VNode {
  return html`<div class="muted">Loading…</div>`;
}

export function StateBadge({ state }: { state: string | null | undefined }): VNode {
  const s = state ?? '—';
  return html`<span class=${`badge state-${s.toLowerCase()}`}>${s}</span>`;
}

export function Time({ iso }: { iso: string | null | undefined }): VNode {
  if (iso === null || iso === undefined) return html`<span class="muted">—</span>`;
  return html`<span class="time" title=${relative(iso)}>${utc(iso)}</span>`;
}

export function Rel({ iso }: { iso: string | null | undefined }): VNode {
  return html`<span class="muted">${relative(iso)}</span>`;
}

export function Section({ title, children, right }: { title: string; children: ComponentChildren; right?: ComponentChildren }): VNode {
  return html`<section class="panel">
    <header class="panel-head"><h2>${title}</h2>${right !== undefined && html`<div class="panel-tools">${right}</div>`}</header>
    <div class="panel-body">${children}</div>
  </section>`;
}

export interface ConfirmSpec {
  title: string;
  body: ComponentChildren;
  action: string;
  danger?: boolean;
}

/**
 * A button that runs `run`; with `confirm`, only after the operator confirms in a dialog that names what will
 * happen. Errors are shown next to the button; `done` is told the result.
 */
export function ActionButton<T>(props: {
  label: string;
  run: () => Promise<T>;
  confirm?: ConfirmSpec | (() => Promise<ConfirmSpec>);
  done?: (result: T) => void;
  danger?: boolean;
  testId?: string;
  disabled?: boolean;
}): VNode {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const [asking, setAsking] = useState<ConfirmSpec | null>(null);
  const go = async (): Promise<void> => {
    setAsking(null);
    setBusy(true);
    setError(null);
    try {
      const result = await props.run();
      props.done?.(result);
    } catch (err) {
      setError(asApiError(err));
    } finally {
      setBusy(false);
    }
  };
  const click = async (): Promise<void> => {
    if (props.confirm === undefined) return void go();
    try {
      setAsking(typeof props.confirm === 'function' ? await props.confirm() : props.confirm);
    } catch (err) {
      setError(asApiError(err));
    }
  };
  return html`<span class="action">
    <button type="button" class=${props.danger === true ? 'btn danger' : 'btn'} disabled=${busy || props.disabled === true}
      data-testid=${props.testId} onClick=${click}>${busy ? `${props.label}…` : props.label}</button>
    ${error !== null && html`<span class="action-error" role="alert">${error.status === 0 ? '' : `${error.status} `}${error.message}</span>`}
    ${asking !== null && html`<${Dialog} spec=${asking} onConfirm=${go} onCancel=${() => setAsking(null)} />`}
  </span>`;
}

function Dialog({ spec, onConfirm, onCancel }: { spec: ConfirmSpec; onConfirm: () => void; onCancel: () => void }): VNode {
  const ref = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    ref.current?.focus();
    const onKey = (e: KeyboardEvent): void => {
      if (e.key === 'Escape') onCancel();
    };
    addEventListener('keydown', onKey);
    return () => removeEventListener('keydown', onKey);
  }, []);
  return html`<div class="overlay" onClick=${(e: MouseEvent) => e.target === e.currentTarget && onCancel()}>
    <div class="dialog" role="dialog" aria-modal="true" aria-labelledby="dialog-title">
      <h3 id="dialog-title">${spec.title}</h3>
      <div class="dialog-body">${spec.body}</div>
      <div class="dialog-buttons">
        <button type="button" class="btn" onClick=${onCancel}>Keep as is</button>
        <button type="button" ref=${ref} class=${spec.danger === true ? 'btn danger' : 'btn primary'} data-testid="confirm" onClick=${onConfirm}>${spec.action}</button>
      </div>
    </div>
  </div>`;
}

/** A key/value grid for a record's fields. */
export function Fields({ rows }: { rows: Array<[string, ComponentChildren]> }): VNode {
  return html`<dl class="fields">${rows.map(([k, v]) => html`<dt>${k}</dt><dd>${v}</dd>`)}</dl>`;
}
