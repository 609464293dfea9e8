/**
 * A shard's scheduler state as snapshot bytes (the simulator's stand-in for src/store/shard-snapshot.ts): every
 * task, calendar, job and execution of a MemoryStore, plus the Raft checker's state hash at that index.
 */
import { pack, unpack } from 'msgpackr';
import type { MemoryStore } from '../../../src/scheduler/memory-store.js';
import type { CalendarRecord, ExecutionRecord, JobRecord, TaskRecord } from '../../../src/scheduler/types.js';
import { DigestStore } from './digest-store.js';
import { allJobs } from './invariants.js';

interface Image {
  hash: number;
  tasks: TaskRecord[];
  calendars: CalendarRecord[];
  jobs: JobRecord[];
  executions: ExecutionRecord[];
}

export function encodeImage(store: MemoryStore, hash: number): Uint8Array {
  const jobs = allJobs(store);
  const executions = jobs.flatMap((j) => store.listExecutions(j.id, 1_000_000, null));
  const image: Image = { hash, tasks: store.listTasks(), calendars: store.listCalendars(), jobs, executions };
  return pack(image);
}

/** The store and state hash a snapshot holds (the bootstrap snapshot has no data: empty). */
export function decodeImage(data: Uint8Array, emptyHash: number): { store: DigestStore; hash: number } {
  const store = new DigestStore();
  if (data.length === 0) return { store, hash: emptyHash };
  const image = unpack(data) as Image;
  for (const t of image.tasks) store.putTask(t);
  for (const c of image.calendars) store.putCalendar(c);
  for (const j of image.jobs) store.putJob(plain(j));
  for (const e of image.executions) store.putExecution(e);
  return { store, hash: image.hash };
}

/** msgpackr gives Buffers back: the payload becomes a plain Uint8Array, as the scheduler's codec returns it. */
function plain(j: JobRecord): JobRecord {
  return { ...j, payload: new Uint8Array(j.payload) };
}
