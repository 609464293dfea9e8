/**
 * A MemoryStore that keeps the digest of everything it holds as records are written (each record hashed once, at
 * the first digest after its put), so the replica check (equal state at equal applied index) reads one number
 * instead of every record. The digest is an order-free sum of 64-bit hashes of each record's every field (two
 * 32-bit lanes, plus the record count), the same function `storeDigest` (invariants.ts) computes by reading the
 * whole store; a test holds them equal.
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

/**
 * A record as the store keeps it (its own copy, never changed in place: a put replaces it) and its hash, computed
 * at the first digest() that finds it still kept (a record replaced before then is never hashed).
 */
interface Kept<T> {
  readonly kind: string;
  readonly rec: T;
  h: RecordHash | null;
  gone: boolean;
}

/** Every record of a store, in the order the old full read gave them (see `DigestStore.image`). */
export interface StoreImage {
  readonly tasks: readonly TaskRecord[];
  readonly calendars: readonly CalendarRecord[];
  readonly jobs: readonly JobRecord[];
  readonly executions: readonly ExecutionRecord[];
}

export class DigestStore extends MemoryStore {
  private readonly sum = new DigestSum();
  private readonly tasksK = new Map<string, Kept<TaskRecord>>();
  private readonly calendarsK = new Map<string, Kept<CalendarRecord>>();
  private readonly jobsK = new Map<string, Kept<JobRecord>>();
  /** jobId -> scheduledAtMs -> kept execution. */
  private readonly executionsK = new Map<string, Map<number, Kept<ExecutionRecord>>>();
  /** The copy MemoryStore made last: a put makes exactly one, of the record it keeps. */
  private copied: unknown = null;
  /** Records put since the last digest(), not yet in the sum. */
  private unhashed: Array<Kept<unknown>> = [];

  digest(): string {
    for (const k of this.unhashed) {
      if (k.gone) continue;
      k.h = recordHash(k.kind, k.rec);
      this.sum.add(k.h);
    }
    this.unhashed = [];
    return this.sum.toString();
  }

  protected override copy<T>(value: T): T {
    const c = copyRecord(value);
    this.copied = c;
    return c;
  }

  /** The record the put just before kept (hashed at the next digest()). */
  private kept<T>(kind: string): Kept<T> {
    const k: Kept<T> = { kind, rec: this.copied as T, h: null, gone: false };
    this.copied = null;
    this.unhashed.push(k);
    return k;
  }

  /**
   * Every record without a copy (they are never changed in place): tasks and calendars by name, jobs by id, each
   * job's executions newest first, as listTasks, listCalendars, listJobs and listExecutions order them.
   */
  image(): StoreImage {
    const byKey = <T>(m: Map<string, Kept<T>>): T[] => [...m.entries()].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)).map((e) => e[1].rec);
    const jobs = byKey(this.jobsK);
    const executions: ExecutionRecord[] = [];
    for (const j of jobs) {
      const perJob = this.executionsK.get(j.id);
      if (perJob === undefined) continue;
      const ats = [...perJob.keys()].sort((a, b) => b - a);
      for (const at of ats) executions.push(perJob.get(at)!.rec);
    }
    return { tasks: byKey(this.tasksK), calendars: byKey(this.calendarsK), jobs, executions };
  }

  override putTask(task: TaskRecord): void {
    super.putTask(task);
    this.swap(this.tasksK, task.name, this.kept('task'));
  }

  override deleteTask(name: string): boolean {
    const deleted = super.deleteTask(name);
    if (deleted) this.drop(this.tasksK, name);
    return deleted;
  }

  override putCalendar(calendar: CalendarRecord): void {
    super.putCalendar(calendar);
    this.swap(this.calendarsK, calendar.name, this.kept('calendar'));
  }

  override deleteCalendar(name: string): boolean {
    const deleted = super.deleteCalendar(name);
    if (deleted) this.drop(this.calendarsK, name);
    return deleted;
  }

  override putJob(job: JobRecord): void {
    super.putJob(job);
    this.swap(this.jobsK, job.id, this.kept('job'));
  }

  override putExecution(execution: ExecutionRecord): void {
    super.putExecution(execution);
    let perJob = this.executionsK.get(execution.jobId);
    if (perJob === undefined) {
      perJob = new Map();
      this.executionsK.set(execution.jobId, perJob);
    }
    this.swap(perJob, execution.scheduledAtMs, this.kept('execution'));
  }

  override deleteJob(id: string, executionsMax: number): { executions: number; deleted: boolean } {
    const r = super.deleteJob(id, executionsMax);
    this.forgetDeletedExecutions(id);
    if (r.deleted) this.drop(this.jobsK, id);
    return r;
  }

  override trimExecutions(jobId: string, keep: number, max: number): number {
    const n = super.trimExecutions(jobId, keep, max);
    if (n > 0) this.forgetDeletedExecutions(jobId);
    return n;
  }

  /** The store chose which executions to delete: whatever it no longer holds leaves the sum. */
  private forgetDeletedExecutions(jobId: string): void {
    const perJob = this.executionsK.get(jobId);
    if (perJob === undefined) return;
    for (const at of [...perJob.keys()]) if (super.getExecution(jobId, at) === null) this.drop(perJob, at);
    if (perJob.size === 0) this.executionsK.delete(jobId);
  }

  private swap<K, T>(m: Map<K, Kept<T>>, key: K, k: Kept<T>): void {
    const old = m.get(key);
    if (old !== undefined) this.forget(old);
    m.set(key, k);
  }

  private drop<K, T>(m: Map<K, Kept<T>>, key: K): void {
    const old = m.get(key);
    if (old === undefined) return;
    this.forget(old);
    m.delete(key);
  }

  /** A record leaves the store: out of the sum if it was hashed, else it never will be. */
  private forget(k: Kept<unknown>): void {
    k.gone = true;
    if (k.h !== null) this.sum.remove(k.h);
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
  // A spread copies the fields at once (same shape as the original); only nested values need a copy of their own.
  const o: Record<string, unknown> = { ...(v as Record<string, unknown>) };
  for (const k in o) {
    const x = o[k];
    if (typeof x === 'object' && x !== null) o[k] = copyRecord(x);
  }
  return o as T;
}
