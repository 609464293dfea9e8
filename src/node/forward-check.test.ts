/**
 * checkForwardOp: what a leader accepts from a peer. Honest ops (as ShardRouter builds them from parsed requests)
 * pass untouched; anything else is invalid_argument naming the field, as the client API names it.
 */
import { describe, expect, it } from 'vitest';
import { PunctualError } from '../core/errors.js';
import { checkForwardOp } from './forward-check.js';
import { callbackSpec, jobSpec } from './testing/fixtures.js';

const shards = 4;
const job = jobSpec('j1', { kind: 'once', atMs: 1_800_000_000_000 });
const task = { ...callbackSpec('http://127.0.0.1:9/hook'), name: 'hook', createdAtMs: 1, updatedAtMs: 2 };

function refusal(op: unknown): { code: string; errors: Array<{ field: string }> } {
  try {
    checkForwardOp(op, shards);
  } catch (err) {
    if (err instanceof PunctualError) return { code: err.code, errors: err.errors };
    throw err;
  }
  throw new Error(`accepted: ${JSON.stringify(op)}`);
}

const calendar = { name: 'hol', timezone: 'Europe/Berlin', dates: ['2027-12-25'], ranges: [{ from: '2027-12-27', to: '2027-12-31' }], description: null, createdAtMs: 1, updatedAtMs: 2 };

describe('checkForwardOp', () => {
  it('accepts what nodes forward', () => {
    const honest: unknown[] = [
      { op: 'create_jobs', shard: 1, nowMs: 1_800_000_000_000, jobs: [job] },
      { op: 'job', action: 'cancel', id: 'j1', patch: null },
      { op: 'job', action: 'run', id: 'j1', patch: null, runKey: 'client:rerun-1' },
      { op: 'job', action: 'patch', id: 'j1', patch: { metadata: { a: 1 }, payload: new Uint8Array([1]), payloadEncoding: 'base64' } },
      { op: 'get_job', id: 'j1' },
      { op: 'list_executions', id: 'j1', limit: 20, cursor: null },
      { op: 'propose', shard: 0, command: { type: 'put_task', nowMs: 5, task } },
      { op: 'propose', shard: 3, command: { type: 'delete_task', nowMs: 5, name: 'hook' } },
      { op: 'transfer_leader', shard: 2, to: 'n2' },
      { op: 'get_task', name: 'hook' },
      { op: 'list_tasks' },
      { op: 'info' },
      { op: 'propose', shard: 1, command: { type: 'put_calendar', nowMs: 5, calendar } },
      { op: 'propose', shard: 1, command: { type: 'delete_calendar', nowMs: 5, name: 'hol' } },
      { op: 'get_calendar', name: 'hol' },
      { op: 'list_calendars' },
    ];
    for (const op of honest) expect(checkForwardOp(op, shards)).toBe(op);
  });

  it('refuses anything else with invalid_argument and the field', () => {
    const cases: Array<[unknown, string]> = [
      [{ op: 'create_jobs', shard: 1, nowMs: 1, jobs: [{ ...job, payload: { not: 'bytes' } }] }, 'jobs[0].payload'],
      [{ op: 'create_jobs', shard: 9, nowMs: 1, jobs: [job] }, 'shard'],
      [{ op: 'create_jobs', shard: 1, nowMs: 1, jobs: [{ ...job, schedule: { kind: 'every', everyMs: 1, startAtMs: 0 } }] }, 'jobs[0].schedule.every_ms'],
      [{ op: 'create_jobs', shard: 1, nowMs: 1, jobs: [{ ...job, task: null, callback: { ...task, url: 'file:///etc/passwd' } }] }, 'jobs[0].callback.url'],
      [{ op: 'create_jobs', shard: 1, nowMs: 1, jobs: new Array(10_001).fill(job) }, 'jobs'],
      [{ op: 'job', action: 'explode', id: 'j1', patch: null }, 'action'],
      [{ op: 'job', action: 'run', id: 'j1', patch: null, runKey: 'k'.repeat(100_000) }, 'runKey'],
      [{ op: 'job', action: 'run', id: 'j1', patch: null, runKey: 7 }, 'runKey'],
      [{ op: 'job', action: 'patch', id: 'j1', patch: { metadata: 'x' } }, 'metadata'],
      [{ op: 'get_job', id: { $gt: '' } }, 'id'],
      [{ op: 'list_executions', id: 'j1', limit: 1e9, cursor: null }, 'limit'],
      [{ op: 'propose', shard: 0, command: { type: 'fired', nowMs: 1, nodeId: 'n1', items: [] } }, 'type'],
      [{ op: 'propose', shard: 0, command: { type: 'put_task', nowMs: 5, task: { ...task, signingSecret: '***' } } }, 'signing_secret'],
      [{ op: 'transfer_leader', shard: 0, to: 'N 2' }, 'to'],
      [{ op: 'create_jobs', shard: 1, nowMs: 1, jobs: [{ ...job, junk: 'x'.repeat(1000) }] }, 'jobs[0].junk'],
      [{ op: 'create_jobs', shard: 1, nowMs: 1, jobs: [{ ...job, schedule: { kind: 'once', atMs: 1, extra: 1 } }] }, 'jobs[0].schedule.extra'],
      [{ op: 'propose', shard: 0, command: { type: 'put_task', nowMs: 5, task: { ...task, signingSecretNext: '' } } }, 'signing_secret_next'],
      [{ op: 'propose', shard: 0, command: { type: 'put_calendar', nowMs: 5, calendar: { ...calendar, colour: 'red' } } }, 'colour'],
      [{ op: 'propose', shard: 0, command: { type: 'put_calendar', nowMs: 5, calendar: { ...calendar, dates: ['2027-02-30'] } } }, 'dates[0]'],
      [{ op: 'get_calendar', name: '../x' }, 'name'],
      [{ op: 'create_jobs', shard: 1, nowMs: 1, jobs: [{ ...job, schedule: { kind: 'once', atMs: 1, exclude: ['hol'] } }] }, 'jobs[0].schedule.exclude'],
      [{ op: 'drop_tables' }, 'op'],
      ['create_jobs', 'op'],
    ];
    for (const [op, field] of cases) expect(refusal(op), JSON.stringify(op).slice(0, 120)).toMatchObject({ code: 'invalid_argument', errors: [{ field }] });
  });
});
