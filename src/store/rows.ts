/**
 * Row codec: the columns SQLite indexes are stored as columns, everything else as one msgpackr blob per row.
 * msgpackr hands binary back as a Node Buffer; payloads are turned back into plain Uint8Array views so a record
 * read from SQLite looks exactly like the one written.
 */
import { Packr } from 'msgpackr';
import type { AttemptRecord, CalendarRecord, ExecutionRecord, ExecutionState, JobRecord, JobState, TaskRecord } from '../scheduler/types.js';

const packr = new Packr({ useRecords: false, mapsAsObjects: true });

export function pack(value: unknown): Uint8Array {
  return packr.pack(value);
}

export function unpack<T>(bytes: Uint8Array): T {
  return packr.unpack(bytes) as T;
}

export function plainBytes(b: Uint8Array): Uint8Array {
  return Buffer.isBuffer(b) ? new Uint8Array(b.buffer, b.byteOffset, b.byteLength) : b;
}

// --- tasks: key column `name`
export function encodeTask(task: TaskRecord): Uint8Array {
  const { name: _name, ...rest } = task;
  return pack(rest);
}

export function decodeTask(name: string, data: Uint8Array): TaskRecord {
  const task = unpack<TaskRecord>(data);
  task.name = name;
  return task;
}

// --- calendars: key column `name`
export function encodeCalendar(calendar: CalendarRecord): Uint8Array {
  const { name: _name, ...rest } = calendar;
  return pack(rest);
}

export function decodeCalendar(name: string, data: Uint8Array): CalendarRecord {
  const calendar = unpack<CalendarRecord>(data);
  calendar.name = name;
  return calendar;
}

// --- jobs: columns id, state, task, next_fire_at
export interface JobRow {
  id: string;
  state: string;
  task: string | null;
  next_fire_at: number | null;
  data: Uint8Array;
}

export function encodeJob(job: JobRecord): Uint8Array {
  const { id: _id, state: _state, task: _task, nextFireAtMs: _next, ...rest } = job;
  return pack(rest);
}

export function decodeJob(row: JobRow): JobRecord {
  // The freshly unpacked object is completed in place: no second copy per row read.
  const job = unpack<JobRecord>(row.data);
  job.payload = plainBytes(job.payload);
  job.id = row.id;
  job.state = row.state as JobState;
  job.task = row.task;
  job.nextFireAtMs = row.next_fire_at;
  return job;
}

// --- executions: columns job_id, scheduled_at, state
export interface ExecutionRow {
  job_id: string;
  scheduled_at: number;
  state: string;
  data: Uint8Array;
}

/** An attempt packed as a tuple (no key names: an execution row carries one per attempt). */
type PackedAttempt = [number, number | null, number | null, number | null, string | null, string | null, string | null];

export function encodeExecution(e: ExecutionRecord): Uint8Array {
  // Copied key by key, not by `{ jobId, ..., ...rest }` and a spread: V8 builds those through a slow generic path
  // that cost several times the packing itself. Same keys in the same order (attempts last), so the same bytes.
  const row: Record<string, unknown> = {};
  for (const key in e) {
    if (key === 'jobId' || key === 'scheduledAtMs' || key === 'state' || key === 'attempts') continue;
    row[key] = e[key as keyof ExecutionRecord];
  }
  const attempts = e.attempts;
  if (attempts !== undefined) {
    row.attempts = attempts.map((a): PackedAttempt => [a.attempt, a.startedAtMs, a.finishedAtMs, a.statusCode, a.error, a.nodeId, a.fencingToken]);
  }
  return pack(row);
}

export function decodeExecution(row: ExecutionRow): ExecutionRecord {
  const e = unpack<ExecutionRecord>(row.data);
  e.jobId = row.job_id;
  e.scheduledAtMs = row.scheduled_at;
  e.state = row.state as ExecutionState;
  if (e.attempts !== undefined) e.attempts = (e.attempts as unknown as PackedAttempt[]).map(unpackAttempt);
  return e;
}

function unpackAttempt(a: PackedAttempt): AttemptRecord {
  const [attempt, startedAtMs, finishedAtMs, statusCode, error, nodeId, fencingToken] = a;
  return { attempt, startedAtMs, finishedAtMs, statusCode, error, nodeId, fencingToken };
}
