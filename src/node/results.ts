/**
 * From the state machine's CommandResult (src/scheduler/machine.ts) to what the SchedulerApi returns or throws.
 * Failures carry a stable code from the error catalog; a field, when the machine names one, becomes a field error.
 */
import { assert } from '../core/assert.js';
import { PunctualError } from '../core/errors.js';
import type { CommandResult, Failure } from '../scheduler/machine.js';
import type { CalendarRecord, JobRecord, TaskRecord } from '../scheduler/types.js';

export type CreateItem = { ok: true; job: JobRecord; created: boolean } | { ok: false; id: string; error: PunctualError };

export function errorOf(f: Failure): PunctualError {
  const errors = f.field === undefined ? [] : [{ field: f.field, message: f.message }];
  return new PunctualError(f.code, f.message, errors);
}

function asResult(r: unknown): CommandResult {
  assert(typeof r === 'object' && r !== null && 'type' in r, 'not a CommandResult');
  return r as CommandResult;
}

export function putTaskOf(r: unknown): { task: TaskRecord; created: boolean } {
  const res = asResult(r);
  assert(res.type === 'put_task', `expected a put_task result, got ${res.type}`);
  return { task: res.task, created: res.created };
}

export function deleteTaskOutcome(r: unknown): void {
  const res = asResult(r);
  assert(res.type === 'delete_task', `expected a delete_task result, got ${res.type}`);
  if (!res.result.ok) throw errorOf(res.result);
}

export function putCalendarOf(r: unknown): { calendar: CalendarRecord; created: boolean } {
  const res = asResult(r);
  assert(res.type === 'put_calendar', `expected a put_calendar result, got ${res.type}`);
  return { calendar: res.calendar, created: res.created };
}

export function deleteCalendarOutcome(r: unknown): void {
  const res = asResult(r);
  assert(res.type === 'delete_calendar', `expected a delete_calendar result, got ${res.type}`);
  if (!res.result.ok) throw errorOf(res.result);
}

export function createItemsOf(r: unknown, count: number): CreateItem[] {
  const res = asResult(r);
  assert(res.type === 'create_jobs', `expected a create_jobs result, got ${res.type}`);
  assert(res.items.length === count, 'create_jobs answered a different number of items');
  return res.items.map((item) => (item.ok ? item : { ok: false as const, id: item.id, error: errorOf(item) }));
}

/** The job of a job command, or the command's failure thrown. */
export function jobOf(r: unknown, id: string): JobRecord {
  const res = asResult(r);
  assert(
    res.type === 'cancel_job' || res.type === 'pause_job' || res.type === 'resume_job' || res.type === 'run_job' || res.type === 'patch_job',
    `expected a job command result for ${id}, got ${res.type}`,
  );
  if (!res.result.ok) throw errorOf(res.result);
  return res.result.job;
}
