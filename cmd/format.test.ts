import { describe, expect, it } from 'vitest';
import { cell, clusterText, jobsTable, renderObject, renderTable, scheduleSummary } from './format.js';

describe('renderTable', () => {
  it('pads every column but the last to its widest cell, two spaces apart', () => {
    const out = renderTable(['ID', 'STATE', 'ERROR'], [['a-long-id', 'PENDING', 'x'], ['b', 'FAILED', '-']]);
    expect(out).toBe('ID         STATE    ERROR\n' + 'a-long-id  PENDING  x\n' + 'b          FAILED   -\n');
  });

  it('prints only the header for an empty list', () => {
    expect(renderTable(['A', 'B'], [])).toBe('A  B\n');
  });
});

describe('cell', () => {
  it('shows null as "-", objects as compact JSON, and keeps a row on one line', () => {
    expect(cell(null)).toBe('-');
    expect(cell(undefined)).toBe('-');
    expect(cell({ a: [1, 2] })).toBe('{"a":[1,2]}');
    expect(cell('line1\nline2\tx')).toBe('line1 line2 x');
    expect(cell(0)).toBe('0');
    expect(cell(false)).toBe('false');
  });
});

describe('renderObject', () => {
  it('aligns values and flattens one level of nesting with dotted keys', () => {
    const out = renderObject({ id: 'j1', schedule: { cron: '0 9 * * *', timezone: 'UTC' }, runs: 3, meta: {} });
    expect(out).toBe(
      'id:                j1\n' +
        'schedule.cron:     0 9 * * *\n' +
        'schedule.timezone: UTC\n' +
        'runs:              3\n' +
        'meta:              {}\n',
    );
  });

  it('prints deeper values and arrays as compact JSON', () => {
    expect(renderObject({ a: { b: { c: 1 } }, l: [1, 'x'] })).toBe('a.b: {"c":1}\nl:   [1,"x"]\n');
  });
});

describe('summaries', () => {
  it('names each schedule kind', () => {
    expect(scheduleSummary({ at: '2026-12-01T09:00:00.000Z' })).toBe('at 2026-12-01T09:00:00.000Z');
    expect(scheduleSummary({ cron: '*/5 * * * *', timezone: 'Europe/Berlin' })).toBe('cron "*/5 * * * *" Europe/Berlin');
    expect(scheduleSummary({ every_ms: 60000, start_at: 'x' })).toBe('every 60000ms');
    expect(scheduleSummary(null)).toBe('-');
  });

  it('marks a job with an inline callback in the TASK column', () => {
    const out = jobsTable([{ id: 'j', task: null, state: 'PENDING', schedule: { at: 't' }, next_fire_at: 't', runs: 0, shard: 1 }]);
    expect(out.split('\n')[1]).toBe('j   (callback)  PENDING  at t      t             0     1');
  });

  it('renders the cluster view as the node id, a node table and a shard table', () => {
    const out = clusterText({
      node_id: 'n1',
      nodes: [{ id: 'n1', api_addr: '127.0.0.1:8001', peer_addr: '127.0.0.1:9001', reachable: true }],
      shards: [{ id: 0, leader: null, term: 2, commit_index: 10, applied_index: 9, members: ['n1', 'n2'] }],
    });
    expect(out).toBe(
      'node: n1\n\n' +
        'NODE  API ADDR        PEER ADDR       REACHABLE\n' +
        'n1    127.0.0.1:8001  127.0.0.1:9001  yes\n\n' +
        'SHARD  LEADER  TERM  COMMIT  APPLIED  MEMBERS\n' +
        '0      -       2     10      9        n1,n2\n',
    );
  });
});
