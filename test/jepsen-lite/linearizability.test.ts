/** The Wing-Gong checker on hand-made histories of one job: good ones pass, bad ones fail. */
import { describe, expect, test } from 'vitest';
import type { ObservedState } from './history.js';
import { checkKey, type LinOp } from './linearizability.js';

let nextId = 0;
type F = LinOp['f'];
const ok = (f: F, invokeMs: number, completeMs: number, state?: ObservedState): LinOp => ({
  id: nextId++, f, invokeMs, completeMs, outcome: state === undefined ? { type: 'ok' } : { type: 'ok', state },
});
const fail = (f: F, invokeMs: number, completeMs: number, code: string): LinOp => ({
  id: nextId++, f, invokeMs, completeMs, outcome: { type: 'fail', code },
});
const info = (f: F, invokeMs: number): LinOp => ({ id: nextId++, f, invokeMs, completeMs: Infinity, outcome: { type: 'info' } });

describe('good histories are linearizable', () => {
  const cases: Array<[string, LinOp[], boolean]> = [
    ['create, read, cancel, read', [ok('create', 0, 10), ok('read', 20, 30, 'pending'), ok('cancel', 40, 50, 'cancelled'), ok('read', 60, 70, 'cancelled')], false],
    ['a read concurrent with the create may miss it', [ok('create', 0, 100), ok('read', 10, 20, 'absent'), ok('read', 150, 160, 'pending')], false],
    ['the job fires on its own, then a cancel conflicts', [ok('create', 0, 10), ok('read', 20, 30, 'running'), ok('read', 40, 50, 'done'), fail('cancel', 60, 70, 'conflict')], false],
    ['an info create may have happened', [info('create', 0), ok('read', 50, 60, 'pending')], false],
    ['an info create may not have happened', [info('create', 0), ok('read', 50, 60, 'absent')], false],
    ['an info cancel may land late', [ok('create', 0, 10), info('cancel', 20), ok('read', 30, 40, 'pending'), ok('read', 50, 60, 'cancelled')], false],
    ['pause, resume, the run goes on', [ok('create', 0, 10), ok('pause', 20, 30, 'paused'), ok('read', 40, 50, 'paused'), ok('resume', 60, 70, 'pending'), ok('read', 80, 90, 'running')], true],
    ['pause of a running once job conflicts', [ok('create', 0, 10), ok('read', 20, 30, 'running'), fail('pause', 40, 50, 'conflict'), ok('read', 60, 70, 'done')], false],
    ['a retry shows the once job queued again', [ok('create', 0, 10), ok('read', 20, 30, 'running'), ok('read', 40, 50, 'pending')], false],
    ['cancel of an unknown job is not_found', [fail('cancel', 0, 10, 'not_found'), ok('create', 20, 30)], false],
  ];
  for (const [name, ops, recurring] of cases) {
    test(name, () => expect(checkKey(ops, recurring).ok).toBe(true));
  }
});

describe('bad histories are not', () => {
  const cases: Array<[string, LinOp[], boolean]> = [
    ['an acknowledged create is forgotten', [ok('create', 0, 10), ok('read', 20, 30, 'absent')], false],
    ['a cancelled job comes back', [ok('create', 0, 10), ok('cancel', 20, 30, 'cancelled'), ok('read', 40, 50, 'pending')], false],
    ['a finished once job runs again', [ok('create', 0, 10), ok('read', 20, 30, 'done'), ok('read', 40, 50, 'pending')], false],
    ['a paused job unpauses by itself', [ok('create', 0, 10), ok('pause', 20, 30, 'paused'), ok('read', 40, 50, 'pending')], true],
    ['a conflict on a job that was live before and after', [ok('create', 0, 10), ok('read', 20, 30, 'pending'), fail('cancel', 40, 50, 'conflict'), ok('read', 60, 70, 'pending')], false],
    ['not_found after an acknowledged create', [ok('create', 0, 10), fail('pause', 20, 30, 'not_found')], false],
    ['a stale read after a cancel was acknowledged', [ok('create', 0, 10), ok('read', 15, 18, 'pending'), ok('cancel', 20, 30, 'cancelled'), ok('read', 31, 40, 'running')], true],
    ['resume answers paused', [ok('create', 0, 10), ok('pause', 20, 30, 'paused'), ok('resume', 40, 50, 'paused')], true],
  ];
  for (const [name, ops, recurring] of cases) {
    test(name, () => {
      const r = checkKey(ops, recurring);
      expect(r.ok).toBe(false);
      expect(r.ops?.length).toBe(ops.length);
    });
  }
});

test('overlapping ops are tried in both orders; the same answers without overlap are refused', () => {
  // The read of pending overlaps the conflicting cancel: it may take effect first (pending, fires, done, conflict).
  const overlapping = [ok('create', 0, 10), fail('cancel', 20, 25, 'conflict'), ok('read', 22, 40, 'pending')];
  expect(checkKey(overlapping, false).ok).toBe(true);
  // The read starts after the conflict was answered: the job was done, it cannot be pending again.
  const sequential = [ok('create', 0, 10), fail('cancel', 20, 25, 'conflict'), ok('read', 30, 40, 'pending')];
  expect(checkKey(sequential, false).ok).toBe(false);
});

test('a long history of one key stays cheap (the memo prunes repeated states)', () => {
  const ops: LinOp[] = [ok('create', 0, 10)];
  for (let i = 0; i < 40; i++) ops.push(ok('read', 20, 1_000, i % 2 === 0 ? 'pending' : 'running'));
  const r = checkKey(ops, true);
  expect(r.ok).toBe(true);
  expect(r.explored).toBeLessThan(200_000);
});
