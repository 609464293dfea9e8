/**
 * The scheduler's promises, checked as events happen (the first violation throws a SimViolation with its kind):
 *  - no occurrence fired before its time: the core orders the first attempt of an occurrence only once its node's
 *    wall clock reads the scheduled time, and every attempt only once that clock reads the order's due time;
 *  - none fired after an acknowledged cancel: an attempt STARTED after the cancel was acknowledged to the
 *    client is a violation (one started before is not: the cancel raced it);
 *  - fencing tokens of one occurrence's attempts never go down across failovers (by the true time they start);
 *  - one deduplication key per occurrence: every attempt of an occurrence carries the same key on the wire;
 *  - every attempt names a job a client submitted;
 *  - replicas agree: a shard's scheduler state is the same on every node that applied the same index;
 * and at the end of the liveness phase (checkFinal):
 *  - no acknowledged job lost, no acknowledged cancel lost, on any node;
 *  - every due occurrence fired within `boundMs` once the cluster is healthy (or once a client's resume let it
 *    go, if a pause held it, or once the run before ended, for overlap=buffer_one): nothing PENDING overdue (a
 *    buffer_one occurrence counts from the end of the runs before it, held while one is open), no retry overdue,
 *    no attempt open past its timeout.
 */
import type { SchedulerStore } from '../../../src/scheduler/store.js';
import type { ExecutionRecord, JobRecord } from '../../../src/scheduler/types.js';
import { fail } from '../checker.js';
import { DigestSum, recordHash } from './digest-store.js';
import type { OpRecord } from './workload.js';

/** An attempt the moment its node starts sending it. */
export interface DispatchStart {
  readonly node: string;
  readonly shard: number;
  /** The core's name of the occurrence. */
  readonly key: string;
  readonly jobId: string;
  readonly scheduledAtMs: number;
  readonly attempt: number;
  readonly fencingToken: string;
  readonly dueAtMs: number;
  /** The X-Deduplication-Key the request carries. */
  readonly dedupKey: string;
  /** The sending node's wall clock (the scheduler's clock) when it started the attempt. */
  readonly nodeWallMs: number;
  readonly trueMs: number;
}

interface OccurrenceFacts {
  dedupKey: string;
  term: number;
  attempt: number;
  trueMs: number;
  node: string;
}

/** A node's stores, for the final checks. */
export interface NodeStores {
  readonly id: string;
  readonly stores: readonly SchedulerStore[];
}

export class SchedulerChecker {
  private readonly submitted = new Set<string>();
  /** jobId -> true time its create was acknowledged. */
  readonly createdAck = new Map<string, number>();
  /** jobId -> true time of the first acknowledged cancel. */
  readonly cancelAck = new Map<string, number>();
  private readonly occurrences = new Map<string, OccurrenceFacts>();
  /** Occurrence key -> true time its first attempt started (anywhere). */
  private readonly firstStart = new Map<string, number>();
  /** Per shard: applied index -> [node, digest] of the first node that reported it. */
  private readonly digests: Map<number, [string, string]>[] = [];
  /** jobId -> its pause and resume ops, with the time after which a resume is surely applied (or given up). */
  private readonly pauses = new Map<string, Array<{ rec: OpRecord; answerByMs: number }>>();
  dispatches = 0;
  digestChecks = 0;

  constructor(shards: number) {
    for (let s = 0; s < shards; s++) this.digests.push(new Map());
  }

  /** A client sent a create (whatever comes of it): attempts for that job are not phantoms. */
  submittedJob(jobId: string): void {
    this.submitted.add(jobId);
  }

  /** A client sent `rec`; its answer comes within answerMs or the client gives up (unknown outcome). */
  opIssued(rec: OpRecord, answerMs: number): void {
    if (rec.op.kind !== 'pause' && rec.op.kind !== 'resume') return;
    const list = this.pauses.get(rec.op.jobId) ?? [];
    list.push({ rec, answerByMs: rec.issuedMs + answerMs });
    this.pauses.set(rec.op.jobId, list);
  }

  /**
   * When a client's pause sent before `pausedBeforeMs` stopped holding the job's occurrences, as seen at
   * `beforeMs`: the answer to the last resume sent after it (the time the client gave up if it got none). Null:
   * no such pause.
   */
  private resumedAtMs(jobId: string, pausedBeforeMs: number, beforeMs: number): number | null {
    let paused = false;
    let resumed: number | null = null;
    for (const { rec, answerByMs } of this.pauses.get(jobId) ?? []) {
      if (rec.issuedMs >= beforeMs || rec.outcome === 'refused') continue;
      if (rec.op.kind === 'pause') paused ||= rec.issuedMs < pausedBeforeMs;
      else if (paused) resumed = rec.outcome === 'ok' ? rec.ackMs! : answerByMs;
    }
    return resumed;
  }

  /** The client got a positive answer for `rec` at rec.ackMs. */
  acknowledged(rec: OpRecord): void {
    const at = rec.ackMs!;
    if (rec.op.kind === 'create' && !this.createdAck.has(rec.op.jobId)) this.createdAck.set(rec.op.jobId, at);
    if (rec.op.kind === 'cancel' && !this.cancelAck.has(rec.op.jobId)) this.cancelAck.set(rec.op.jobId, at);
  }

  /**
   * The core handed out an order at `nodeWallMs` (its node's clock), at most `stageLeadMs` before its due time (a
   * staged order is sent at its due time). Ordered further ahead is early, as is a first attempt's due time before
   * its scheduled time.
   */
  ordered(d: Omit<DispatchStart, 'dedupKey' | 'trueMs' | 'fencingToken' | 'shard'>, stageLeadMs: number): void {
    const where = (): string => `${d.node} ${d.key.replace('\n', '@')} attempt ${d.attempt}`;
    if (d.nodeWallMs < d.dueAtMs - stageLeadMs) fail('fired_early', `${where()}: ordered at ${d.nodeWallMs} (node clock), due ${d.dueAtMs}, stage lead ${stageLeadMs}`);
    if (!this.occurrences.has(d.key) && d.nodeWallMs < d.scheduledAtMs - stageLeadMs) {
      fail('fired_early', `${where()}: ordered at ${d.nodeWallMs} (node clock), scheduled ${d.scheduledAtMs}, stage lead ${stageLeadMs}`);
    }
  }

  /**
   * The shell hands an order to the dispatcher at `nodeWallMs` (its node's clock): at once when it was due, at its
   * due ms when it was staged; from there it starts when its concurrency key has room (a clock stepped back in that
   * wait is no early start). Before the order's due time is early; before the scheduled time is early unless an
   * attempt of the occurrence already started (a later attempt follows that start, perhaps on another node's clock).
   */
  sendable(d: Omit<DispatchStart, 'dedupKey' | 'trueMs' | 'fencingToken' | 'shard'>): void {
    const where = (): string => `${d.node} ${d.key.replace('\n', '@')} attempt ${d.attempt}`;
    if (d.nodeWallMs < d.dueAtMs) fail('fired_early', `${where()}: sendable at ${d.nodeWallMs} (node clock), due ${d.dueAtMs}`);
    if (!this.occurrences.has(d.key) && d.nodeWallMs < d.scheduledAtMs) {
      fail('fired_early', `${where()}: sendable at ${d.nodeWallMs} (node clock), scheduled ${d.scheduledAtMs}`);
    }
  }

  dispatchStarted(d: DispatchStart): void {
    this.dispatches++;
    const where = (): string => `${d.node} ${d.key.replace('\n', '@')} attempt ${d.attempt} token ${d.fencingToken}`;
    if (!this.submitted.has(d.jobId)) fail('unknown_occurrence', `${where()}: no client submitted job ${d.jobId}`);
    if (d.key !== `${d.jobId}\n${d.scheduledAtMs}`) fail('unknown_occurrence', `${where()}: order for ${d.jobId}@${d.scheduledAtMs}`);
    const prev = this.occurrences.get(d.key);
    const cancelled = this.cancelAck.get(d.jobId);
    if (cancelled !== undefined && d.trueMs > cancelled) {
      fail('fired_after_cancel', `${where()}: started at ${d.trueMs}, cancel acknowledged at ${cancelled}`);
    }
    const term = fencingTerm(d.fencingToken, d.shard, where);
    if (prev) {
      if (prev.dedupKey !== d.dedupKey) fail('dedup_key_changed', `${where()}: key ${d.dedupKey}, attempt ${prev.attempt} had ${prev.dedupKey}`);
      if (term < prev.term) {
        fail('fencing_token_decreased', `${where()} at ${d.trueMs}: ${prev.node} sent attempt ${prev.attempt} with term ${prev.term} at ${prev.trueMs}`);
      }
    }
    this.occurrences.set(d.key, { dedupKey: d.dedupKey, term, attempt: d.attempt, trueMs: d.trueMs, node: d.node });
    if (!this.firstStart.has(d.key)) this.firstStart.set(d.key, d.trueMs);
  }

  /** `node` applied `shard` up to `index` and its state then digests to `digest`. */
  appliedState(shard: number, node: string, index: number, digest: string): void {
    this.digestChecks++;
    const m = this.digests[shard]!;
    const known = m.get(index);
    if (!known) m.set(index, [node, digest]);
    else if (known[1] !== digest) fail('replicas_diverge', `shard ${shard} at index ${index}: ${node} differs from ${known[0]}`);
  }

  /**
   * After the liveness phase, every node having applied every shard to the same index: replicas equal, no
   * acknowledged job or cancel lost, nothing due before `endWallMs - boundMs` still waiting.
   */
  checkFinal(nodes: readonly NodeStores[], endWallMs: number, boundMs: number, healTrueMs: number): void {
    const first = nodes[0]!;
    for (let s = 0; s < first.stores.length; s++) {
      const want = storeDigest(first.stores[s]!);
      for (const n of nodes) {
        if (storeDigest(n.stores[s]!) !== want) fail('replicas_diverge', `shard ${s}: ${n.id} differs from ${first.id} at the end`);
      }
    }
    for (const n of nodes) {
      for (const [jobId, at] of this.createdAck) {
        const job = findJob(n.stores, jobId);
        if (!job) fail('acked_job_lost', `${n.id} has no job ${jobId} (create acknowledged at ${at})`);
        if (this.cancelAck.has(jobId) && job.state !== 'CANCELLED') {
          fail('acked_cancel_lost', `${n.id}: job ${jobId} is ${job.state}, cancel acknowledged at ${this.cancelAck.get(jobId)}`);
        }
      }
    }
    for (const store of first.stores) {
      this.checkNothingOverdue(store, endWallMs - boundMs, boundMs, healTrueMs);
      this.checkLateness(store, healTrueMs, boundMs);
    }
  }

  /**
   * Every occurrence's first attempt started within boundMs of its time, or of the healing if it was due before,
   * or of the resume that let it go if a client's pause held it (the machine fires what came due during a pause
   * on resume). True times: after the healing every wall clock is within a few ms of true time.
   */
  private checkLateness(store: SchedulerStore, healTrueMs: number, boundMs: number): void {
    for (const job of allJobs(store)) {
      const executions = store.listExecutions(job.id, 1_000_000, null);
      for (const e of executions) {
        const first = this.firstStart.get(`${e.jobId}\n${e.scheduledAtMs}`);
        if (e.latenessMs === null || first === undefined || first <= healTrueMs) continue;
        // A pause counts only if it came before the occurrence was late (it cannot excuse an earlier lateness).
        // overlap=buffer_one holds an occurrence until the runs before it ended (their retries included).
        const heldByMs = Math.min(first, Math.max(e.scheduledAtMs, healTrueMs) + boundMs);
        const runBeforeMs = job.overlap === 'buffer_one' ? this.runEndBefore(job, executions, e.scheduledAtMs, heldByMs) : -Infinity;
        const dueMs = Math.max(e.scheduledAtMs, healTrueMs, runBeforeMs);
        const due = Math.max(dueMs, this.resumedAtMs(job.id, dueMs + boundMs, first) ?? -Infinity);
        if (first > due + boundMs + clockSlackMs) {
          fail('not_fired_in_time', `job ${job.id}: occurrence ${e.scheduledAtMs} first started at ${first}, ${first - due} ms after it was due in a healthy cluster`);
        }
      }
    }
  }

  /**
   * When the job's runs before this occurrence ended: those scheduled before it, and those another node started
   * (true time) by `startedByMs` whatever their time (a manual run, or an occurrence scheduled on a wall clock that
   * had jumped ahead: buffer_one waits for every other open execution). An end is its finish on its node's clock,
   * which a wall clock that jumped ahead may have set late, so capped by the true start of its last attempt plus
   * the timeout.
   */
  private runEndBefore(job: JobRecord, executions: readonly ExecutionRecord[], scheduledAtMs: number, startedByMs: number): number {
    let endMs = -Infinity;
    for (const f of executions) {
      if (f.scheduledAtMs === scheduledAtMs || f.finishedAtMs === null) continue;
      const key = `${f.jobId}\n${f.scheduledAtMs}`;
      if (f.scheduledAtMs > scheduledAtMs && !((this.firstStart.get(key) ?? Infinity) <= startedByMs)) continue;
      const last = this.occurrences.get(key);
      if (last === undefined) continue;
      endMs = Math.max(endMs, Math.min(f.finishedAtMs, last.trueMs + (job.callback?.timeoutMs ?? 0) + clockSlackMs));
    }
    return endMs;
  }

  private checkNothingOverdue(store: SchedulerStore, deadlineMs: number, boundMs: number, healTrueMs: number): void {
    for (const job of allJobs(store)) {
      if (job.state === 'PENDING' && job.nextFireAtMs !== null && this.pendingDueMs(store, job, job.nextFireAtMs, healTrueMs, boundMs) < deadlineMs) {
        fail('not_fired_in_time', `job ${job.id}: occurrence ${job.nextFireAtMs} still pending ${boundMs} ms into a healthy cluster`);
      }
      if (job.state === 'PAUSED' || job.state === 'CANCELLED') continue;
      for (const e of store.openExecutions(job.id)) this.checkExecution(job, e, deadlineMs);
    }
  }

  /**
   * When a PENDING job's next occurrence (at `atMs`) is due to start: its time; for overlap=buffer_one, not before
   * the runs that hold it ended (the same runs as runEndBefore's). One of them still open holds it to the end of
   * the check: that run's retry or attempt is checked on its own (checkExecution), and a retry timed on a wall
   * clock that had jumped ahead may be due after the run ends.
   */
  private pendingDueMs(store: SchedulerStore, job: JobRecord, atMs: number, healTrueMs: number, boundMs: number): number {
    if (job.overlap !== 'buffer_one') return atMs;
    const heldByMs = Math.max(atMs, healTrueMs) + boundMs;
    const holds = (e: ExecutionRecord): boolean =>
      e.scheduledAtMs < atMs || (e.scheduledAtMs > atMs && (this.firstStart.get(`${e.jobId}\n${e.scheduledAtMs}`) ?? Infinity) <= heldByMs);
    if (store.openExecutions(job.id).some(holds)) return Infinity;
    return Math.max(atMs, this.runEndBefore(job, store.listExecutions(job.id, 1_000_000, null), atMs, heldByMs));
  }

  private checkExecution(job: JobRecord, e: ExecutionRecord, deadlineMs: number): void {
    const timeoutMs = job.callback?.timeoutMs ?? 0;
    if (e.state === 'QUEUED' && e.retryAtMs !== null && e.retryAtMs < deadlineMs) {
      fail('not_fired_in_time', `job ${job.id}: attempt ${e.attempt + 1} of ${e.scheduledAtMs} due ${e.retryAtMs} never sent`);
    }
    if (e.state === 'RUNNING' && e.startedAtMs !== null && e.startedAtMs + timeoutMs < deadlineMs) {
      fail('not_fired_in_time', `job ${job.id}: attempt ${e.attempt} of ${e.scheduledAtMs} started ${e.startedAtMs} never finished`);
    }
  }
}

/** How far a healed node's wall clock may be from true time (the simulator resyncs them within 10 ms). */
const clockSlackMs = 20;

function fencingTerm(token: string, shard: number, where: () => string): number {
  const m = /^(\d+)\.(\d+)$/.exec(token);
  if (!m || Number(m[1]) !== shard) fail('fencing_token_decreased', `${where()}: token is not ${shard}.<term>`);
  return Number(m[2]);
}

function findJob(stores: readonly SchedulerStore[], id: string): JobRecord | null {
  for (const s of stores) {
    const j = s.getJob(id);
    if (j) return j;
  }
  return null;
}

export function allJobs(store: SchedulerStore): JobRecord[] {
  const out: JobRecord[] = [];
  for (let after: string | null = null; ; ) {
    const page = store.listJobs({ state: null, task: null, limit: 500, afterId: after });
    out.push(...page);
    if (page.length < 500) return out;
    after = page[page.length - 1]!.id;
  }
}

/**
 * A digest of everything a shard's store holds (tasks, calendars, jobs, every execution), read record by record:
 * the same value a DigestStore (digest-store.ts) keeps up to date as it is written.
 */
export function storeDigest(store: SchedulerStore): string {
  const sum = new DigestSum();
  for (const t of store.listTasks()) sum.add(recordHash('task', t));
  for (const c of store.listCalendars()) sum.add(recordHash('calendar', c));
  for (const job of allJobs(store)) {
    sum.add(recordHash('job', job));
    for (const e of store.listExecutions(job.id, 1_000_000, null)) sum.add(recordHash('execution', e));
  }
  return sum.toString();
}
