/**
 * A small Wing-Gong linearizability checker (with Lowe's memo of visited (linearized set, state) pairs), run per
 * key: a job's history is linearizable when its completed ops can be put in one order, each at an instant
 * between its invoke and its completion, that the job model accepts. An info op (outcome unknown) may take
 * effect at any instant after its invoke, or never.
 *
 * The job model is nondeterministic: besides the client's ops, the system moves a job on its own (it fires:
 * pending -> running -> done; a retry shows it pending again). Those internal steps never leave absent, paused,
 * cancelled or done, so the checker still catches a job that comes back from cancelled, unpauses by itself,
 * forgets an acknowledged create, or answers a read from a stale replica.
 */
import type { ObservedState, Op } from './history.js';

export type ModelState = ObservedState;

/** An op reduced to what the model needs; completeMs is Infinity for an info op. */
export interface LinOp {
  id: number;
  f: Op['f'];
  invokeMs: number;
  completeMs: number;
  /** ok: the observed state; fail: the error code; info: undefined. */
  outcome: { type: 'ok'; state?: ObservedState } | { type: 'fail'; code: string } | { type: 'info' };
}

export interface LinResult {
  ok: boolean;
  /** Ops of the key, in invoke order, when not linearizable. */
  ops?: LinOp[];
  /** Search states explored (the cost). */
  explored: number;
}

/** Internal steps the system may take on its own; the closure of a state under them. */
function internalClosure(s: ModelState): ModelState[] {
  switch (s) {
    case 'pending':
    case 'running':
      // Fires (pending -> running), finishes (-> done), retries or re-arms (running -> pending, shown QUEUED).
      return ['pending', 'running', 'done'];
    default:
      return [s];
  }
}

/** Codes that say nothing about the job (the request was refused before touching it): allowed in any state. */
const stateless = new Set(['invalid_argument', 'unauthorized', 'forbidden', 'payload_too_large', 'rate_limited', 'unsupported_media_type']);

/** Next states after op runs in state s and answers as observed; [] when that answer is impossible in s. */
export function step(s: ModelState, op: LinOp, recurring: boolean): ModelState[] {
  const o = op.outcome;
  if (o.type === 'info') return [s, ...step(s, { ...op, outcome: { type: 'ok' } }, recurring)].filter(unique);
  if (o.type === 'fail') return failStep(s, op.f, o.code, recurring) ? [s] : [];
  const seen = o.state;
  const expect = (next: ModelState): ModelState[] => (seen === undefined || seen === next ? [next] : []);
  switch (op.f) {
    case 'read':
      return seen === s ? [s] : [];
    case 'create':
      return s === 'absent' ? ['pending'] : [s];
    case 'cancel':
      return s === 'absent' || s === 'done' ? [] : expect('cancelled');
    case 'pause': {
      const ok = s === 'pending' || s === 'paused' || (s === 'running' && recurring);
      return ok ? expect('paused') : [];
    }
    case 'resume':
      if (s === 'pending' || s === 'running') return expect(s);
      if (s !== 'paused') return [];
      // Resumed, then settled: pending, or running (a run in flight), or done (nothing left to run).
      return seen === undefined ? ['pending', 'running', 'done'] : seen === 'paused' ? [] : [seen];
  }
}

function failStep(s: ModelState, f: Op['f'], code: string, recurring: boolean): boolean {
  if (stateless.has(code)) return true;
  if (code === 'not_found') return f === 'create' || s === 'absent'; // create: the task, not the job
  if (code !== 'conflict') return false;
  switch (f) {
    case 'create':
      return s !== 'absent';
    case 'cancel':
      return s === 'done';
    case 'pause':
      return s === 'done' || s === 'cancelled' || (s === 'running' && !recurring);
    case 'resume':
      return s === 'done' || s === 'cancelled';
    case 'read':
      return false;
  }
}

function unique<T>(v: T, i: number, a: T[]): boolean {
  return a.indexOf(v) === i;
}

/** Checks one key's ops (a job that starts absent). Bounded: gives up (ok, reported) past exploredMax. */
export function checkKey(ops: readonly LinOp[], recurring: boolean, exploredMax = 2_000_000): LinResult & { gaveUp?: boolean } {
  const sorted = [...ops].sort((a, b) => a.invokeMs - b.invokeMs || a.id - b.id);
  const n = sorted.length;
  const mustCount = sorted.filter((o) => o.completeMs !== Infinity).length;
  const seen = new Set<string>();
  let explored = 0;
  let gaveUp = false;
  const done = new Uint8Array(n);

  const search = (state: ModelState, linearizedMust: number): boolean => {
    if (linearizedMust === mustCount) return true;
    if (++explored > exploredMax) {
      gaveUp = true;
      return true;
    }
    // An op may go next only if it was invoked before every other pending op completed (ms ties overlap).
    let minCompleteMs = Infinity;
    for (let i = 0; i < n; i++) if (!done[i]) minCompleteMs = Math.min(minCompleteMs, sorted[i].completeMs);
    for (let i = 0; i < n; i++) {
      const op = sorted[i];
      if (done[i]) continue;
      if (op.invokeMs > minCompleteMs) break;
      for (const from of internalClosure(state)) {
        for (const next of step(from, op, recurring)) {
          done[i] = 1;
          const memo = `${next}|${done.join('')}`;
          if (!seen.has(memo)) {
            seen.add(memo);
            if (search(next, linearizedMust + (op.completeMs === Infinity ? 0 : 1))) return true;
          }
          done[i] = 0;
        }
      }
    }
    return false;
  };
  const ok = search('absent', 0);
  return ok ? { ok, explored, gaveUp } : { ok, explored, ops: sorted };
}

/** Folds a recorded op into a LinOp (null for ops the model ignores: info reads, ops still in flight). */
export function toLinOp(op: Op): LinOp | null {
  if (op.type === 'invoke') return null;
  if (op.type === 'info') {
    if (op.f === 'read') return null;
    return { id: op.index, f: op.f, invokeMs: op.invokeMs, completeMs: Infinity, outcome: { type: 'info' } };
  }
  const completeMs = op.completeMs ?? Infinity;
  if (op.type === 'fail') {
    return { id: op.index, f: op.f, invokeMs: op.invokeMs, completeMs, outcome: { type: 'fail', code: op.error ?? 'unknown' } };
  }
  const outcome: LinOp['outcome'] = op.state === undefined ? { type: 'ok' } : { type: 'ok', state: op.state };
  return { id: op.index, f: op.f, invokeMs: op.invokeMs, completeMs, outcome };
}
