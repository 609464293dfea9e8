/**
 * The workload: a few concurrent clients, each a loop of seeded random operations against random nodes until the
 * run's end: one-off jobs due 0-5 s ahead (at, or delay_ms), jobs created and then cancelled right around their
 * due time, batches, cron and interval jobs with each misfire policy, refused creates, cancels, pauses,
 * resumes and reads. Every operation lands in the history (invoke + ok/fail/info).
 */
import { Prng } from '../../src/core/prng.js';
import type { ApiClient, Answer } from './client.js';
import { harnessNowMs, observe, sleepMs, type HistoryRecorder, type JobInfo, type JobPlan, type Misfire, type Op, type OpF } from './history.js';

export interface TargetNode {
  id: string;
  url: string;
}

export interface WorkloadOptions {
  seed: number;
  clients: number;
  /** Name of the task whose URL is the receiver. */
  taskName: string;
  /** No job is due (or ends) later than this: bounds the wait at the end of the run. */
  latestDueMs: number;
}

const misfires: readonly Misfire[] = ['fire_once', 'skip', 'fire_all'];

/** Operation weights per client step (relative). */
const weights = {
  createOnce: 30, raceCancel: 8, batch: 5, every: 4, cron: 3, invalid: 3, cancel: 7, pause: 6, resume: 6, read: 28,
} as const;
type Action = keyof typeof weights;

export class Workload {
  readonly jobs = new Map<string, JobInfo>();
  private readonly bodies = new Map<string, unknown>();
  /** Valid job ids, in creation order (targets for cancel, pause, resume, read). */
  private readonly ids: string[] = [];
  private readonly onceDue: Array<{ id: string; atMs: number }> = [];
  private readonly paused: string[] = [];
  /** Creates whose outcome is unknown, to send again with the same id and body (idempotent). */
  private readonly retryCreates: string[] = [];
  private counter = 0;
  private batches = 0;
  private readonly rng: Prng;

  constructor(
    private readonly rec: HistoryRecorder,
    private readonly api: ApiClient,
    private readonly nodes: readonly TargetNode[],
    private readonly opts: WorkloadOptions,
  ) {
    this.rng = new Prng(opts.seed);
  }

  /** Runs opts.clients client loops until endMs; resolves when the last op of each has completed. */
  async run(endMs: number): Promise<void> {
    const loops: Promise<void>[] = [];
    for (let p = 0; p < this.opts.clients; p++) loops.push(this.clientLoop(p, this.rng.fork(), endMs));
    await Promise.all(loops);
  }

  private async clientLoop(process: number, rng: Prng, endMs: number): Promise<void> {
    while (harnessNowMs() < endMs) {
      await this.step(process, rng, pick(rng));
      await sleepMs(20 + rng.int(60));
    }
  }

  private async step(p: number, rng: Prng, action: Action): Promise<void> {
    if (this.retryCreates.length > 0 && rng.int(4) === 0) return this.resend(p, rng);
    switch (action) {
      case 'createOnce':
        return void (await this.createOnce(p, rng, 0, 5_000));
      case 'raceCancel':
        return this.raceCancel(p, rng);
      case 'batch':
        return this.batch(p, rng);
      case 'every':
      case 'cron':
        return this.createRecurring(p, rng, action);
      case 'invalid':
        return this.createInvalid(p, rng);
      case 'cancel':
        return this.jobAction(p, rng, 'cancel', this.cancelTarget(rng));
      case 'pause':
        return this.jobAction(p, rng, 'pause', this.any(rng));
      case 'resume':
        return this.jobAction(p, rng, 'resume', this.paused.length > 0 && rng.int(3) > 0 ? this.paused[rng.int(this.paused.length)] : this.any(rng));
      case 'read':
        return void (await this.read(p, rng, this.any(rng)));
    }
  }

  private node(rng: Prng): TargetNode {
    return this.nodes[rng.int(this.nodes.length)];
  }

  private nextId(prefix: string): string {
    return `${prefix}${this.opts.seed}-${++this.counter}`;
  }

  private any(rng: Prng): string | null {
    return this.ids.length === 0 ? null : this.ids[rng.int(this.ids.length)];
  }

  /** Half the time a once job due within 300 ms of now (racing its fire), else any job. */
  private cancelTarget(rng: Prng): string | null {
    if (rng.int(2) === 0) {
      const nowMs = harnessNowMs();
      const near = this.onceDue.slice(-200).filter((j) => Math.abs(j.atMs - nowMs) < 300);
      if (near.length > 0) return near[rng.int(near.length)].id;
    }
    return this.any(rng);
  }

  private register(id: string, plan: JobPlan, body: unknown): void {
    this.jobs.set(id, { id, plan });
    this.bodies.set(id, body);
    if (plan.kind !== 'invalid') this.ids.push(id);
    if (plan.kind === 'once') this.onceDue.push({ id, atMs: plan.atMs });
  }

  private dueIn(rng: Prng, loMs: number, hiMs: number): number {
    return Math.min(harnessNowMs() + loMs + rng.int(hiMs - loMs + 1), this.opts.latestDueMs);
  }

  private onceBody(rng: Prng, id: string, loMs: number, hiMs: number): { body: Record<string, unknown>; plan: JobPlan } {
    const base = { id, task: this.opts.taskName, payload: { id } };
    if (rng.int(7) === 0) {
      const delayMs = Math.min(loMs + rng.int(hiMs - loMs + 1), Math.max(0, this.opts.latestDueMs - harnessNowMs()));
      return { body: { ...base, schedule: { delay_ms: delayMs } }, plan: { kind: 'delay', delayMs } };
    }
    const atMs = this.dueIn(rng, loMs, hiMs);
    return { body: { ...base, schedule: { at: atMs } }, plan: { kind: 'once', atMs } };
  }

  private async createOnce(p: number, rng: Prng, loMs: number, hiMs: number): Promise<{ id: string; op: Op; plan: JobPlan }> {
    const id = this.nextId('o');
    const { body, plan } = this.onceBody(rng, id, loMs, hiMs);
    this.register(id, plan, body);
    const op = await this.create(p, rng, id, body);
    return { id, op, plan };
  }

  private async create(p: number, rng: Prng, id: string, body: unknown): Promise<Op> {
    const node = this.node(rng);
    const op = this.rec.invoke(p, 'create', id, node.id);
    const answer = await this.api.call(node.url, 'POST', '/v1/jobs', body);
    this.completeWrite(op, answer);
    if (answer.kind === 'info' && rng.int(2) === 0) this.retryCreates.push(id);
    return op;
  }

  private async resend(p: number, rng: Prng): Promise<void> {
    const id = this.retryCreates.splice(rng.int(this.retryCreates.length), 1)[0];
    await this.create(p, rng, id, this.bodies.get(id));
  }

  /** Creates a once job due 0.3-1.5 s ahead, then cancels it within 150 ms of its due time. */
  private async raceCancel(p: number, rng: Prng): Promise<void> {
    const { id, op, plan } = await this.createOnce(p, rng, 300, 1_500);
    if (op.type === 'fail' || plan.kind !== 'once') return;
    await sleepMs(plan.atMs + rng.int(301) - 150 - harnessNowMs());
    await this.jobAction(p, rng, 'cancel', id);
  }

  private async batch(p: number, rng: Prng): Promise<void> {
    const items: Array<{ id: string; body: Record<string, unknown> }> = [];
    for (let i = 2 + rng.int(5); i > 0; i--) {
      const id = this.nextId('b');
      const { body, plan } = this.onceBody(rng, id, 0, 5_000);
      this.register(id, plan, body);
      items.push({ id, body });
    }
    const node = this.node(rng);
    const batch = ++this.batches;
    const ops = items.map((it) => this.rec.invoke(p, 'create', it.id, node.id, batch));
    const answer = await this.api.call(node.url, 'POST', '/v1/jobs:batch', { jobs: items.map((it) => it.body) });
    if (answer.kind !== 'ok') {
      ops.forEach((op) => this.completeWrite(op, answer));
      return;
    }
    const results = ((answer.body as { results?: unknown[] } | null)?.results ?? []) as Array<{ status?: number; error?: { code?: string } }>;
    ops.forEach((op, i) => {
      const r = results[i];
      const status = r?.status ?? 0;
      if (status >= 200 && status < 300) this.rec.complete(op, 'ok', { status });
      else if (status >= 400 && status < 500) this.rec.complete(op, 'fail', { status, error: r?.error?.code ?? `http_${status}` });
      else this.rec.complete(op, 'info', { error: `item_status_${status}` });
    });
  }

  private async createRecurring(p: number, rng: Prng, kind: 'every' | 'cron'): Promise<void> {
    const id = this.nextId(kind === 'every' ? 'e' : 'c');
    const misfire = misfires[rng.int(misfires.length)];
    const nowMs = harnessNowMs();
    const endAtMs = Math.min(nowMs + 5_000 + rng.int(9_001), this.opts.latestDueMs);
    let body: Record<string, unknown>;
    let plan: JobPlan;
    if (kind === 'every') {
      const everyMs = [500, 1_000, 2_000][rng.int(3)];
      const startAtMs = nowMs + 500 + rng.int(1_501);
      body = { id, task: this.opts.taskName, payload: { id }, schedule: { every_ms: everyMs, start_at: startAtMs }, end_at: endAtMs, misfire };
      plan = { kind: 'every', everyMs, startAtMs, endAtMs, misfire };
    } else {
      const [expr, periodMs] = rng.int(2) === 0 ? ['*/2 * * * * *', 2_000] : ['* * * * * *', 1_000];
      body = { id, task: this.opts.taskName, payload: { id }, schedule: { cron: expr, timezone: 'UTC' }, end_at: endAtMs, misfire };
      plan = { kind: 'cron', expr, periodMs, endAtMs, misfire };
    }
    this.register(id, plan, body);
    await this.create(p, rng, id, body);
  }

  /** A create the server must refuse (4xx): unknown task, every_ms below the minimum, end_at before the start. */
  private async createInvalid(p: number, rng: Prng): Promise<void> {
    const id = this.nextId('x');
    const nowMs = harnessNowMs();
    const variants: Array<[string, Record<string, unknown>]> = [
      ['unknown task', { id, task: 'jl-no-such-task', payload: { id }, schedule: { at: nowMs + 500 } }],
      ['every_ms too small', { id, task: this.opts.taskName, payload: { id }, schedule: { every_ms: 1 } }],
      ['end_at before start', { id, task: this.opts.taskName, payload: { id }, schedule: { every_ms: 1_000, start_at: nowMs + 3_000 }, end_at: nowMs + 1_000 }],
    ];
    const [reason, body] = variants[rng.int(variants.length)];
    this.register(id, { kind: 'invalid', reason }, body);
    await this.create(p, rng, id, body);
  }

  private async jobAction(p: number, rng: Prng, f: Extract<OpF, 'cancel' | 'pause' | 'resume'>, id: string | null): Promise<void> {
    if (id === null) return;
    const node = this.node(rng);
    const op = this.rec.invoke(p, f, id, node.id);
    const answer = await this.api.call(node.url, 'POST', `/v1/jobs/${encodeURIComponent(id)}/${f}`, {});
    this.completeWrite(op, answer);
    if (f === 'pause' && answer.kind !== 'fail') this.paused.push(id);
  }

  async read(p: number, rng: Prng, id: string | null): Promise<Op | null> {
    if (id === null) return null;
    const node = this.node(rng);
    const op = this.rec.invoke(p, 'read', id, node.id);
    const answer = await this.api.call(node.url, 'GET', `/v1/jobs/${encodeURIComponent(id)}`);
    // A 404 read is a successful read of "no such job", not a failed operation.
    if (answer.kind === 'fail' && answer.code === 'not_found') this.rec.complete(op, 'ok', { state: 'absent', status: 404 });
    else this.completeWrite(op, answer);
    return op;
  }

  private completeWrite(op: Op, answer: Answer): void {
    if (answer.kind === 'info') {
      this.rec.complete(op, 'info', { error: answer.reason });
      return;
    }
    if (answer.kind === 'fail') {
      this.rec.complete(op, 'fail', { status: answer.status, error: answer.code });
      return;
    }
    const state = (answer.body as { state?: unknown } | null)?.state;
    const fields: Partial<Op> = { status: answer.status };
    if (op.f !== 'create' && state !== undefined) fields.state = observe(state);
    this.rec.complete(op, 'ok', fields);
  }

  /** After the run: reads every valid job once (retrying an unknown answer) from process `p`. */
  async finalReads(p: number): Promise<void> {
    const rng = new Prng(this.opts.seed ^ 0x5eed);
    for (const id of this.ids) {
      for (let attempt = 0; attempt < 3; attempt++) {
        const op = await this.read(p, rng, id);
        if (op?.type === 'ok') break;
      }
    }
  }
}

function pick(rng: Prng): Action {
  const entries = Object.entries(weights) as Array<[Action, number]>;
  let r = rng.int(entries.reduce((s, [, w]) => s + w, 0));
  for (const [action, w] of entries) {
    if (r < w) return action;
    r -= w;
  }
  return 'read';
}
