/** Times are shown in UTC, as the API writes them, with a relative hint: one zone for every operator. */

export function utc(iso: string | null | undefined): string {
  if (iso === null || iso === undefined) return '—';
  return iso.replace('T', ' ').replace(/\.000Z$/, 'Z');
}

/** "in 4 s", "3 min ago": how far a time is from now. */
export function relative(iso: string | null | undefined, nowMs: number = Date.now()): string {
  if (iso === null || iso === undefined) return '';
  const deltaMs = Date.parse(iso) - nowMs;
  const text = duration(Math.abs(deltaMs));
  return deltaMs >= 0 ? `in ${text}` : `${text} ago`;
}

export function duration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return '—';
  if (ms === 0) return '0 ms';
  if (ms < 1) return `${ms.toFixed(2)} ms`;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.round(s)} s`;
  const m = s / 60;
  if (m < 60) return Math.floor(s % 60) === 0 ? `${Math.floor(m)} min` : `${Math.floor(m)} min ${Math.floor(s % 60)} s`;
  const h = m / 60;
  if (h < 48) return Math.floor(m % 60) === 0 ? `${Math.floor(h)} h` : `${Math.floor(h)} h ${Math.floor(m % 60)} min`;
  return `${Math.round(h / 24)} d`;
}

export function count(n: number): string {
  return n.toLocaleString('en-US');
}

/** A schedule in one line: `cron 0 9 * * 1-5 (Europe/Berlin)`, `every 10 s`, `at 2027-01-04 08:00:00Z`. */
export function scheduleText(s: Record<string, unknown>): string {
  if (typeof s.cron === 'string') {
    const extras = [s.timezone, s.spread_ms === undefined ? null : `spread ${duration(s.spread_ms as number)}`].filter((x) => x != null);
    return `cron ${s.cron}${extras.length > 0 ? ` (${extras.join(', ')})` : ''}`;
  }
  if (typeof s.every_ms === 'number') return `every ${duration(s.every_ms)}`;
  if (typeof s.at === 'string') return `at ${utc(s.at)}`;
  return JSON.stringify(s);
}
