/**
 * Hash routing (`/ui#/jobs/ID?cursor=...`): the node serves one page at /ui, so any view can be linked and
 * reloaded without the server knowing the dashboard's paths.
 */
import { useEffect, useState } from 'preact/hooks';

export interface Route {
  /** Path segments after `#/`, decoded. */
  parts: string[];
  params: URLSearchParams;
}

export function currentRoute(): Route {
  const hash = location.hash.replace(/^#\/?/, '');
  const q = hash.indexOf('?');
  const path = q < 0 ? hash : hash.slice(0, q);
  const parts = path === '' ? [] : path.split('/').map((p) => decodeURIComponent(p));
  return { parts, params: new URLSearchParams(q < 0 ? '' : hash.slice(q + 1)) };
}

export function href(parts: string[], params: Record<string, string | null | undefined> = {}): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== '') q.set(k, v);
  const qs = q.toString();
  return `#/${parts.map((p) => encodeURIComponent(p)).join('/')}${qs === '' ? '' : `?${qs}`}`;
}

export function navigate(to: string): void {
  location.hash = to.startsWith('#') ? to.slice(1) : to;
}

export function useRoute(): Route {
  const [route, setRoute] = useState(currentRoute);
  useEffect(() => {
    const onChange = (): void => setRoute(currentRoute());
    addEventListener('hashchange', onChange);
    return () => removeEventListener('hashchange', onChange);
  }, []);
  return route;
}
