/**
 * A MemoryStore that keeps the digest of everything it holds up to date as records are written, so the replica
 * check (equal state at equal applied index) reads one number instead of every record. The digest is an
 * order-free sum of 64-bit hashes of each record's every field (two 32-bit lanes, plus the record count), the
 * same function `storeDigest` (invariants.ts) computes by reading the whole store; a test holds them equal.
 */
import { MemoryStore } from '../../../src/scheduler/memory-store.js';
import type { CalendarRecord, ExecutionRecord, JobRecord, TaskRecord } from '../../../src/scheduler/types.js';

/** One record's hash: two 32-bit lanes. */
export type RecordHash = readonly [number, number];

/**
 * The hash of a record of `kind` (task, calendar, job, execution): every field, as canonical JSON would print it
 * (undefined left out, byte arrays as their bytes), without building the text. An object's fields are hashed
 * one by one and summed, so their order does not count and no key list is sorted.
 */
export function recordHash(kind: string, record: unknown): RecordHash {
  feedText(0x811c9dc5, 0x01000193, kind);
  feed(r1, r2, record);
  const h1 = Math.imul(r1 ^ (r1 >>> 15), 0x85ebca6b) >>> 0;
  const h2 = Math.imul(r2 ^ (r2 >>> 13) ^ h1, 0xc2b2ae35) >>> 0;
  return [h1, h2];
}

/** The hasher's state after the last feed (two 32-bit FNV-style lanes); module state keeps the walk allocation-free. */
let r1 = 0;
let r2 = 0;

const float = new Float64Array(1);
const floatWords = new Uint32Array(float.buffer);

function mix(h1: number, h2: number, x: number): void {
  r1 = Math.imul(h1 ^ x, 0x01000193);
  r2 = Math.imul(h2 ^ r1, 0x5bd1e995);
}

function feedText(h1: number, h2: number, s: string): void {
  let a = Math.imul(h1 ^ s.length, 0x01000193);
  let b = Math.imul(h2 ^ a, 0x5bd1e995);
  for (let i = 0; i < s.length; i++) {
    a = Math.imul(a ^ s.charCodeAt(i), 0x01000193);
    b = Math.imul(b ^ a, 0x5bd1e995);
  }
  r1 = a;
  r2 = b;
}

/** Feeds one value, tagged by its type so differently shaped values cannot hash alike. */
function feed(h1: number, h2: number, v: unknown): void {
  switch (typeof v) {
    case 'number':
      float[0] = v;
      mix(h1, h2, 1);
      mix(r1, r2, floatWords[0]!);
      return mix(r1, r2, floatWords[1]!);
    case 'string':
      mix(h1, h2, 2);
      return feedText(r1, r2, v);
    case 'boolean':
      return mix(h1, h2, v ? 3 : 4);
    case 'object':
      break;
    default:
      throw new Error(`recordHash: a ${typeof v} in a record`);
  }
  if (v === null) return mix(h1, h2, 6);
  if (v instanceof Uint8Array) {
    let a = Math.imul(h1 ^ 7, 0x01000193);
    let b = Math.imul(h2 ^ a, 0x5bd1e995);
    a = Math.imul(a ^ v.length, 0x01000193);
    b = Math.imul(b ^ a, 0x5bd1e995);
    for (let i = 0; i < v.length; i++) {
      a = Math.imul(a ^ v[i]!, 0x01000193);
      b = Math.imul(b ^ a, 0x5bd1e995);
    }
    r1 = a;
    r2 = b;
    return;
  }
  if (Array.isArray(v)) {
    mix(h1, h2, 8);
    mix(r1, r2, v.length);
    for (const x of v) feed(r1, r2, x);
    return;
  }
  const o = v as Record<string, unknown>;
  let s1 = 0;
  let s2 = 0;
  let n = 0;
  for (const k in o) {
    const x = o[k];
    if (x === undefined) continue;
    feedText(0x811c9dc5, 0x01000193, k);
    feed(r1, r2, x);
    s1 = (s1 + Math.imul(r1 ^ (r1 >>> 15), 0x85ebca6b)) | 0;
    s2 = (s2 + Math.imul(r2 ^ (r2 >>> 13), 0xc2b2ae35)) | 0;
    n++;
  }
  mix(h1, h2, 9);
  mix(r1, r2, n);
  mix(r1, r2, s1);
  mix(r1, r2, s2);
}

/** The order-free sum of record hashes, printed as the digest. */
export class DigestSum {
  private a = 0;
  private b = 0;
  private n = 0;

  add(h: RecordHash): void {
    this.a = (this.a + h[0]) >>> 0;
    this.b = (this.b + h[1]) >>> 0;
    this.n++;
  }

  remove(h: RecordHash): void {
    this.a = (this.a - h[0]) >>> 0;
    this.b = (this.b - h[1]) >>> 0;
    this.n--;
  }

  toString(): string {
    return `${this.a.toString(16).padStart(8, '0')}${this.b.toString(16).padStart(8, '0')}/${this.n}`;
  }
}

export class DigestStore extends MemoryStore {
  private readonly sum = new DigestSum();
  private readonly tasksH = new Map<string, RecordHash>();
  private readonly calendarsH = new Map<string, RecordHash>();
  private readonly jobsH = new Map<string, RecordHash>();
  /** jobId -> scheduledAtMs -> hash. */
  private readonly executionsH = new Map<string, Map<number, RecordHash>>();

  digest(): string {
    return this.sum.toString();
  }

  protected override copy<T>(value: T): T {
    return copyRecord(value);
  }

  override putTask(task: TaskRecord): void {
    super.putTask(task);
    this.swap(this.tasksH, task.name, recordHash('task', task));
  }

  override deleteTask(name: string): boolean {
    const deleted = super.deleteTask(name);
    if (deleted) this.drop(this.tasksH, name);
    return deleted;
  }

  override putCalendar(calendar: CalendarRecord): void {
    super.putCalendar(calendar);
    this.swap(this.calendarsH, calendar.name, recordHash('calendar', calendar));
  }

  override deleteCalendar(name: string): boolean {
    const deleted = super.deleteCalendar(name);
    if (deleted) this.drop(this.calendarsH, name);
    return deleted;
  }

  override putJob(job: JobRecord): void {
    super.putJob(job);
    this.swap(this.jobsH, job.id, recordHash('job', job));
  }

  override putExecution(execution: ExecutionRecord): void {
    super.putExecution(execution);
    let perJob = this.executionsH.get(execution.jobId);
    if (perJob === undefined) {
      perJob = new Map();
      this.executionsH.set(execution.jobId, perJob);
    }
    this.swap(perJob, execution.scheduledAtMs, recordHash('execution', execution));
  }

  override deleteJob(id: string, executionsMax: number): { executions: number; deleted: boolean } {
    const r = super.deleteJob(id, executionsMax);
    this.forgetDeletedExecutions(id);
    if (r.deleted) this.drop(this.jobsH, id);
    return r;
  }

  override trimExecutions(jobId: string, keep: number, max: number): number {
    const n = super.trimExecutions(jobId, keep, max);
    if (n > 0) this.forgetDeletedExecutions(jobId);
    return n;
  }

  /** The store chose which executions to delete: whatever it no longer holds leaves the sum. */
  private forgetDeletedExecutions(jobId: string): void {
    const perJob = this.executionsH.get(jobId);
    if (perJob === undefined) return;
    for (const at of [...perJob.keys()]) if (super.getExecution(jobId, at) === null) this.drop(perJob, at);
    if (perJob.size === 0) this.executionsH.delete(jobId);
  }

  private swap<K>(m: Map<K, RecordHash>, key: K, h: RecordHash): void {
    const old = m.get(key);
    if (old !== undefined) this.sum.remove(old);
    m.set(key, h);
    this.sum.add(h);
  }

  private drop<K>(m: Map<K, RecordHash>, key: K): void {
    const old = m.get(key);
    if (old === undefined) return;
    this.sum.remove(old);
    m.delete(key);
  }
}

/**
 * A deep copy of a stored record (plain objects, arrays, byte arrays, primitives), what structuredClone gives for
 * them at a fraction of its cost. MemoryStore copies every record in and out with structuredClone, which made up
 * a large part of a simulated seed; DigestStore copies with this instead (MemoryStore.copy).
 * Anything else (a Map, a Date, a class instance) is refused rather than copied wrong.
 */
export function copyRecord<T>(v: T): T {
  if (typeof v !== 'object' || v === null) return v;
  if (v instanceof Uint8Array) return new Uint8Array(v) as T;
  if (Array.isArray(v)) return v.map(copyRecord) as T;
  if (Object.getPrototypeOf(v) !== Object.prototype) throw new Error('copyRecord: not a plain record');
  const o: Record<string, unknown> = {};
  for (const k in v) o[k] = copyRecord((v as Record<string, unknown>)[k]);
  return o as T;
}
