/**
 * Human output: an aligned table for lists, a `key: value` block for one object. `--json` bypasses all of this
 * and prints the server's JSON as it came. Pure string functions, so they are tested without a server.
 */

/** One cell: null -> "-", objects as compact JSON, control characters flattened so a row stays one line. */
export function cell(value: unknown): string {
  if (value === null || value === undefined) return '-';
  const text = typeof value === 'object' ? JSON.stringify(value) : String(value);
  return text.replace(/[\u0000-\u001f\u007f]/g, ' ');
}

/** Columns padded to their widest cell and separated by two spaces; the last column is not padded. */
export function renderTable(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i])))
      .join('  ')
      .trimEnd();
  return [line(headers), ...rows.map(line)].join('\n') + '\n';
}

/**
 * `key: value` lines with the values aligned. Nested objects are flattened one level with dotted keys
 * (schedule.cron, retry.max_attempts, last_execution.state); deeper values and arrays print as compact JSON.
 */
export function renderObject(obj: Record<string, unknown>): string {
  const pairs: Array<[string, string]> = [];
  for (const [key, value] of Object.entries(obj)) {
    if (isPlainObject(value) && Object.keys(value).length > 0) {
      for (const [sub, subValue] of Object.entries(value)) pairs.push([`${key}.${sub}`, cell(subValue)]);
    } else {
      pairs.push([key, cell(value)]);
    }
  }
  const width = Math.max(0, ...pairs.map(([k]) => k.length + 1));
  return pairs.map(([k, v]) => `${(k + ':').padEnd(width)} ${v}`.trimEnd()).join('\n') + '\n';
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A schedule as the API renders it, in a few words: `at ...`, `cron "..." Europe/Berlin`, `every 60000ms`. */
export function scheduleSummary(schedule: unknown): string {
  if (!isPlainObject(schedule)) return cell(schedule);
  if (schedule.cron !== undefined) return `cron "${cell(schedule.cron)}" ${cell(schedule.timezone ?? 'UTC')}`;
  if (schedule.every_ms !== undefined) return `every ${cell(schedule.every_ms)}ms`;
  if (schedule.at !== undefined) return `at ${cell(schedule.at)}`;
  return cell(schedule);
}

export function jobsTable(jobs: readonly Record<string, unknown>[]): string {
  const headers = ['ID', 'TASK', 'STATE', 'SCHEDULE', 'NEXT FIRE AT', 'RUNS', 'SHARD'];
  const rows = jobs.map((j) => [
    cell(j.id),
    j.task === null || j.task === undefined ? '(callback)' : cell(j.task),
    cell(j.state),
    scheduleSummary(j.schedule),
    cell(j.next_fire_at),
    cell(j.runs),
    cell(j.shard),
  ]);
  return renderTable(headers, rows);
}

export function executionsTable(executions: readonly Record<string, unknown>[]): string {
  const headers = ['SCHEDULED AT', 'ATTEMPT', 'STATE', 'STATUS', 'LATENESS MS', 'NODE', 'FINISHED AT', 'ERROR'];
  const rows = executions.map((e) => [
    cell(e.scheduled_at),
    cell(e.attempt),
    cell(e.state),
    cell(e.status_code),
    cell(e.lateness_ms),
    cell(e.node_id),
    cell(e.finished_at),
    cell(e.error),
  ]);
  return renderTable(headers, rows);
}

export function tasksTable(tasks: readonly Record<string, unknown>[]): string {
  const headers = ['NAME', 'METHOD', 'URL', 'TIMEOUT MS', 'MAX ATTEMPTS', 'MAX CONCURRENCY'];
  const rows = tasks.map((t) => [
    cell(t.name),
    cell(t.method),
    cell(t.url),
    cell(t.timeout_ms),
    cell(isPlainObject(t.retry) ? t.retry.max_attempts : null),
    cell(t.max_concurrency),
  ]);
  return renderTable(headers, rows);
}

export function clusterText(view: Record<string, unknown>): string {
  const nodes = Array.isArray(view.nodes) ? (view.nodes as Record<string, unknown>[]) : [];
  const shards = Array.isArray(view.shards) ? (view.shards as Record<string, unknown>[]) : [];
  const nodeRows = nodes.map((n) => [
    cell(n.id),
    cell(n.api_addr),
    cell(n.peer_addr),
    n.reachable === true ? 'yes' : 'no',
  ]);
  const shardRows = shards.map((s) => [
    cell(s.id),
    cell(s.leader),
    cell(s.term),
    cell(s.commit_index),
    cell(s.applied_index),
    Array.isArray(s.members) ? s.members.map(cell).join(',') : cell(s.members),
  ]);
  return (
    `node: ${cell(view.node_id)}\n\n` +
    renderTable(['NODE', 'API ADDR', 'PEER ADDR', 'REACHABLE'], nodeRows) +
    '\n' +
    renderTable(['SHARD', 'LEADER', 'TERM', 'COMMIT', 'APPLIED', 'MEMBERS'], shardRows)
  );
}
