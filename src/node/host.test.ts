/**
 * The node end to end without its HTTP listener: real SQLite files in a temp bed.dir, the real dispatcher, wheel and
 * state machine, and a real node:http receiver on 127.0.0.1.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { shardOf } from '../core/ids.js';
import { stallLimits } from '../core/limits.js';
import type { JobSpec } from '../scheduler/types.js';
import type { NodeConfig } from './api.js';
import type { OpenNode } from './host.js';
import { callbackSpec, jobSpec, nodeConfig } from './testing/fixtures.js';
import { useNodeBed } from './testing/bed.js';
import { sleep, waitFor } from './testing/receiver.js';
import { useFiringThreadBundle } from '../dispatch/testing/thread-bundle.js';

const bed = useNodeBed('punctual-node-', { closeGraceMs: 2_000 });

// The firing thread as the build runs it: firing-thread.ts bundled (the sources have no firing-thread.js).
const threadEntry = useFiringThreadBundle();

/** Every test runs with callbacks sent from the firing thread and from the main loop (`--firing-thread off`). */
const modes = ['thread', 'main loop'] as const;
let mode: (typeof modes)[number] = 'thread';
async function start(over: Partial<NodeConfig> = {}): Promise<OpenNode> {
  const core = await bed.startCore(nodeConfig(bed.dir, { firingThread: mode === 'thread', ...over }), { firingThreadEntry: threadEntry() });
  expect(core.engine.dispatcher.mode).toBe(mode === 'thread' ? 'thread' : 'in-process');
  return core;
}

async function create(core: OpenNode, specs: JobSpec[]): Promise<void> {
  const results = await core.service.createJobs(specs);
  for (const r of results) if (!r.ok) throw r.error;
}

describe.each(modes)('firing (%s)', (m) => {
  beforeAll(() => void (mode = m));

  it('fires a job due now once, with the exact callback headers and body', async () => {
    const core = await start();
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const now = core.service.nowMs();
    await create(core, [jobSpec('now-1', { kind: 'once', atMs: now })]);
    await waitFor('callback', () => bed.rx.of('now-1').length === 1);
    await waitFor('success', async () => (await core.service.getJob('now-1')).state === 'SUCCEEDED');
    const [r] = bed.rx.of('now-1');
    const shard = shardOf('now-1', 4);
    expect(r.method).toBe('POST');
    expect(r.path).toBe('/hook');
    expect(r.headers['x-deduplication-key']).toBe(`now-1:${now}`);
    expect(r.headers['x-punctual-job-id']).toBe('now-1');
    expect(r.headers['x-punctual-scheduled-at']).toBe(String(now));
    expect(r.headers['x-punctual-attempt']).toBe('1');
    expect(r.headers['x-punctual-fencing-token']).toBe(`${shard}.1`);
    expect(r.headers['x-custom']).toBe('yes');
    expect(r.headers['x-punctual-signature']).toBeUndefined();
    expect(r.body).toBe('{"job":"now-1"}');
    expect(r.atMs).toBeGreaterThanOrEqual(now);
    const job = await core.service.getJob('now-1');
    expect(job.runs).toBe(1);
    expect(job.nextFireAtMs).toBeNull();
    expect(job.lastExecution).toMatchObject({ state: 'SUCCEEDED', attempt: 1, statusCode: 200, nodeId: 'n1' });
    await sleep(100);
    expect(bed.rx.of('now-1')).toHaveLength(1);
  });

  it('never fires before the scheduled time (at and delay)', async () => {
    const core = await start();
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const now = core.service.nowMs();
    const ats = [now + 200, now + 150, now + 37, now + 1, now + 2];
    await create(core, ats.map((atMs, i) => jobSpec(`at-${i}`, { kind: 'once', atMs })));
    await waitFor('all callbacks', () => bed.rx.received.length === ats.length);
    ats.forEach((atMs, i) => {
      const [r] = bed.rx.of(`at-${i}`);
      expect(r.headers['x-punctual-scheduled-at']).toBe(String(atMs));
      expect(r.atMs).toBeGreaterThanOrEqual(atMs);
    });
    // The node's own record of when it started each attempt: never before the occurrence.
    for (let i = 0; i < ats.length; i++) {
      await waitFor('recorded', async () => (await core.service.getJob(`at-${i}`)).lastExecution !== null);
      const e = (await core.service.getJob(`at-${i}`)).lastExecution!;
      expect(e.startedAtMs!).toBeGreaterThanOrEqual(ats[i]);
      expect(e.latenessMs!).toBeGreaterThanOrEqual(0);
    }
  });

  it('fires every 100 ms exactly max_runs times, each occurrence once, then SUCCEEDED', async () => {
    const core = await start();
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const startAtMs = core.service.nowMs() + 50;
    await create(core, [jobSpec('every', { kind: 'every', everyMs: 100, startAtMs }, { maxRuns: 3 })]);
    await waitFor('done', async () => (await core.service.getJob('every')).state === 'SUCCEEDED');
    await sleep(250);
    const got = bed.rx.of('every');
    expect(got.map((r) => Number(r.headers['x-punctual-scheduled-at']))).toEqual([startAtMs, startAtMs + 100, startAtMs + 200]);
    for (const r of got) expect(r.atMs).toBeGreaterThanOrEqual(Number(r.headers['x-punctual-scheduled-at']));
    const job = await core.service.getJob('every');
    expect(job.runs).toBe(3);
    const page1 = await core.service.listExecutions('every', { limit: 2, cursor: null });
    expect(page1.executions.map((e) => e.scheduledAtMs)).toEqual([startAtMs + 200, startAtMs + 100]);
    expect(page1.nextCursor).not.toBeNull();
    const page2 = await core.service.listExecutions('every', { limit: 2, cursor: page1.nextCursor });
    expect(page2.executions.map((e) => e.scheduledAtMs)).toEqual([startAtMs]);
    expect(page2.nextCursor).toBeNull();
    expect(page2.executions[0]).toMatchObject({ state: 'SUCCEEDED', attempt: 1, statusCode: 200 });
  });

  it('fires a cron with seconds on whole seconds', async () => {
    const core = await start();
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const schedule = { kind: 'cron' as const, cron: '* * * * * *', timezone: 'UTC', startAtMs: null };
    await create(core, [jobSpec('cron', schedule, { maxRuns: 2 })]);
    await waitFor('two runs', () => bed.rx.of('cron').length === 2, 5_000);
    const at = bed.rx.of('cron').map((r) => Number(r.headers['x-punctual-scheduled-at']));
    expect(at[0] % 1000).toBe(0);
    expect(at[1] - at[0]).toBe(1000);
    for (const r of bed.rx.of('cron')) expect(r.atMs).toBeGreaterThanOrEqual(Number(r.headers['x-punctual-scheduled-at']));
  });

  it('retries a 503 with backoff, same deduplication key, attempts 1, 2, 3, then succeeds', async () => {
    const core = await start();
    bed.rx.respond = (_r, n) => (n <= 2 ? { status: 503 } : { status: 200 });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/flaky')));
    await create(core, [jobSpec('retry', { kind: 'once', atMs: core.service.nowMs() })]);
    await waitFor('success', async () => (await core.service.getJob('retry')).state === 'SUCCEEDED');
    const got = bed.rx.of('retry');
    expect(got.map((r) => r.headers['x-punctual-attempt'])).toEqual(['1', '2', '3']);
    expect(new Set(got.map((r) => r.headers['x-deduplication-key'])).size).toBe(1);
    // Backoff without jitter: 20 ms then 40 ms after each failure.
    expect(got[1].atMs - got[0].atMs).toBeGreaterThanOrEqual(20);
    expect(got[2].atMs - got[1].atMs).toBeGreaterThanOrEqual(40);
    const { executions } = await core.service.listExecutions('retry', { limit: 10, cursor: null });
    expect(executions).toHaveLength(1);
    expect(executions[0]).toMatchObject({ state: 'SUCCEEDED', attempt: 3, statusCode: 200 });
  });

  it('fails at once on a permanent 400 and when retries run out', async () => {
    const core = await start();
    bed.rx.respond = (r) => (r.path === '/bad' ? { status: 400 } : { status: 500 });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/bad')));
    await core.service.putTask('down', callbackSpec(bed.rx.url('/down')));
    const now = core.service.nowMs();
    await create(core, [jobSpec('perm', { kind: 'once', atMs: now }), jobSpec('exhaust', { kind: 'once', atMs: now }, { task: 'down' })]);
    await waitFor('failed', async () => (await core.service.getJob('perm')).state === 'FAILED');
    await waitFor('exhausted', async () => (await core.service.getJob('exhaust')).state === 'FAILED');
    expect(bed.rx.of('perm')).toHaveLength(1);
    expect(bed.rx.of('exhaust').map((r) => r.headers['x-punctual-attempt'])).toEqual(['1', '2', '3']);
    expect((await core.service.getJob('perm')).lastExecution).toMatchObject({ state: 'FAILED', statusCode: 400 });
  });
});

describe.each(modes)('job commands (%s)', (m) => {
  beforeAll(() => void (mode = m));

  it('a job cancelled before it is due never fires', async () => {
    const core = await start();
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const atMs = core.service.nowMs() + 400;
    await create(core, [jobSpec('c', { kind: 'once', atMs })]);
    expect((await core.service.getJob('c')).state).toBe('QUEUED');
    const cancelled = await core.service.cancelJob('c');
    expect(cancelled.state).toBe('CANCELLED');
    expect(core.service.nowMs()).toBeLessThan(atMs); // the cancel was acknowledged before the job was due
    await sleep(atMs - core.service.nowMs() + 150);
    expect(bed.rx.of('c')).toHaveLength(0);
    expect(core.engine.wheelSize).toBe(0);
  });

  it('a callback staged ahead of its due time is taken back by a cancel, a pause (not refused) and a new schedule', async () => {
    const core = await start({ stageLeadMs: 1_000 });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const atMs = core.service.nowMs() + 700;
    await create(core, [jobSpec('sc', { kind: 'once', atMs }), jobSpec('sp', { kind: 'once', atMs }), jobSpec('sn', { kind: 'once', atMs })]);
    // Inside the lead: all three are decided and staged in the sender.
    await waitFor('staged', () => core.engine.dispatcher.stagedCount() === 3);
    expect((await core.service.cancelJob('sc')).state).toBe('CANCELLED');
    expect((await core.service.pauseJob('sp')).state).toBe('PAUSED');
    const laterMs = atMs + 2_000;
    await core.service.patchJob('sn', { schedule: { kind: 'once', atMs: laterMs } });
    expect(core.service.nowMs()).toBeLessThan(atMs); // all three acknowledged before the due time
    await sleep(atMs - core.service.nowMs() + 200);
    expect(bed.rx.received).toHaveLength(0);
    await core.service.resumeJob('sp');
    await waitFor('the paused one, after its resume', () => bed.rx.of('sp').length === 1);
    await waitFor('the rescheduled one, at its new time', () => bed.rx.of('sn').length === 1);
    expect(bed.rx.of('sn')[0].atMs).toBeGreaterThanOrEqual(laterMs);
    expect(bed.rx.of('sn')[0].headers['x-punctual-scheduled-at']).toBe(String(laterMs));
    expect(bed.rx.of('sc')).toHaveLength(0);
  });

  it('pause holds a due job back; resume fires it', async () => {
    const core = await start();
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const atMs = core.service.nowMs() + 300;
    await create(core, [jobSpec('p', { kind: 'once', atMs })]);
    expect((await core.service.pauseJob('p')).state).toBe('PAUSED');
    expect(core.service.nowMs()).toBeLessThan(atMs);
    await sleep(atMs - core.service.nowMs() + 150);
    expect(bed.rx.of('p')).toHaveLength(0);
    await core.service.resumeJob('p');
    await waitFor('fired after resume', () => bed.rx.of('p').length === 1);
    expect(bed.rx.of('p')[0].headers['x-punctual-scheduled-at']).toBe(String(atMs));
  });

  it('run fires an extra occurrence now and leaves the schedule alone', async () => {
    const core = await start();
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const later = core.service.nowMs() + 3_600_000;
    await create(core, [jobSpec('r', { kind: 'once', atMs: later })]);
    const before = core.service.nowMs();
    const job = await core.service.runJob('r');
    expect(job.nextFireAtMs).toBe(later);
    await waitFor('extra run', () => bed.rx.of('r').length === 1);
    const at = Number(bed.rx.of('r')[0].headers['x-punctual-scheduled-at']);
    expect(at).toBeGreaterThanOrEqual(before);
    await waitFor('recorded', async () => (await core.service.listExecutions('r', { limit: 5, cursor: null })).executions[0]?.state === 'SUCCEEDED');
    const after = await core.service.getJob('r');
    expect(after.nextFireAtMs).toBe(later);
    expect(after.state).toBe('PENDING');
  });

  it('a cancel acknowledged while the callback waits for its concurrency slot is final: it is never sent', async () => {
    const core = await start();
    bed.rx.respond = () => ({ status: 200, delayMs: 600 });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/one-at-a-time'), { maxConcurrency: 1 }));
    const now = core.service.nowMs();
    await create(core, [jobSpec('first', { kind: 'once', atMs: now })]);
    await waitFor('first in flight', () => bed.rx.of('first').length === 1);
    await create(core, [jobSpec('queued', { kind: 'once', atMs: core.service.nowMs() })]);
    // Due, handed to the dispatcher, waiting behind "first" for the task's one slot.
    await waitFor('queued in the dispatcher', () => core.engine.dispatcher.queued() === 1);
    expect((await core.service.cancelJob('queued')).state).toBe('CANCELLED');
    await waitFor('first done', async () => (await core.service.getJob('first')).state === 'SUCCEEDED');
    await sleep(300);
    expect(bed.rx.of('queued')).toHaveLength(0);
    expect((await core.service.getJob('queued')).state).toBe('CANCELLED');
    expect(core.engine.dispatcher.queued()).toBe(0);
  });

  it('a callback waiting for its slot when the node closes is not sent, and its job fires after a restart', async () => {
    let core = await start();
    bed.rx.respond = (r) => (r.path === '/one-at-a-time' ? { status: 200, delayMs: 300 } : { status: 200 });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/one-at-a-time'), { maxConcurrency: 1 }));
    await create(core, [jobSpec('first', { kind: 'once', atMs: core.service.nowMs() })]);
    await waitFor('first in flight', () => bed.rx.of('first').length === 1);
    await create(core, [jobSpec('waits', { kind: 'once', atMs: core.service.nowMs() })]);
    await waitFor('queued in the dispatcher', () => core.engine.dispatcher.queued() === 1);
    await bed.stop(core);
    expect(bed.rx.of('waits')).toHaveLength(0);
    core = await start();
    await waitFor('fired after the restart', async () => (await core.service.getJob('waits')).state === 'SUCCEEDED');
    expect(bed.rx.of('waits')).toHaveLength(1);
  });

  if (m === 'thread') {
    it('a staged callback leaves the firing thread at its due time while the main loop is stalled (the lease it holds is Raft\'s)', async () => {
      const core = await start({ stageLeadMs: 200 });
      await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
      const at = core.service.nowMs() + 400;
      await create(core, [jobSpec('stalled', { kind: 'once', atMs: at })]);
      await waitFor('staged in the thread', () => core.engine.dispatcher.stagedCount() === 1);
      while (core.service.nowMs() < at - 60) await sleep(5);
      // The main loop blocks from 60 ms before the due time to 150 ms after it: longer than any refresh of the
      // thread's lease deadline, shorter than the lease a single node renews every tick.
      const stallEndMs = at + 150;
      while (Date.now() < stallEndMs) {
        /* a synchronous stall, as a long SQLite transaction or GC would be */
      }
      await waitFor('done', async () => (await core.service.getJob('stalled')).state === 'SUCCEEDED');
      const e = (await core.service.getJob('stalled')).lastExecution!;
      expect(e.startedAtMs!).toBeGreaterThanOrEqual(at);
      // Started by the thread during the stall: it did not wait for the main loop to renew its lease.
      expect(e.startedAtMs!).toBeLessThan(stallEndMs);
      expect(bed.rx.of('stalled')).toHaveLength(1);
    });

    it('a firing thread that dies with a callback out: the attempt is retried with the same deduplication key, nothing is lost', async () => {
      const core = await start();
      bed.rx.respond = (_r, n) => (n === 1 ? { status: 200, delayMs: 1_000 } : { status: 200 });
      await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
      const at = core.service.nowMs();
      await create(core, [jobSpec('crash', { kind: 'once', atMs: at })]);
      await waitFor('in flight', () => bed.rx.of('crash').length === 1);
      core.engine.dispatcher.crashThreadForTest();
      await waitFor('done', async () => (await core.service.getJob('crash')).state === 'SUCCEEDED');
      const got = bed.rx.of('crash');
      expect(got.length).toBeGreaterThanOrEqual(2);
      expect(new Set(got.map((r) => r.headers['x-deduplication-key']))).toEqual(new Set([`crash:${at}`]));
      expect(got.map((r) => r.headers['x-punctual-attempt']).slice(0, 2)).toEqual(['1', '2']);
      expect(core.engine.dispatcher.mode).toBe('thread');
      // The new thread sends the next callbacks.
      await create(core, [jobSpec('after', { kind: 'once', atMs: core.service.nowMs() })]);
      await waitFor('after', async () => (await core.service.getJob('after')).state === 'SUCCEEDED');
    });
  }

  it('shows RUNNING while a callback is in flight', async () => {
    const core = await start();
    bed.rx.respond = () => ({ status: 200, delayMs: 300 });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/slow')));
    await create(core, [jobSpec('slow', { kind: 'once', atMs: core.service.nowMs() })]);
    await waitFor('in flight', () => bed.rx.of('slow').length === 1);
    // From the firing thread the start reaches the main loop as a message, which may come a moment after the
    // request reached this receiver (on the same loop): RUNNING within the 300 ms the receiver holds the callback.
    const states: string[] = [];
    await waitFor('RUNNING while in flight', async () => states.push((await core.service.getJob('slow')).state) > 0 && states.at(-1) !== 'QUEUED');
    expect(states.at(-1)).toBe('RUNNING');
    expect(bed.rx.of('slow')).toHaveLength(1);
    await waitFor('done', async () => (await core.service.getJob('slow')).state === 'SUCCEEDED');
  });

  it('records a quick callback with one record (fired folded into its outcome), a slow one RUNNING while in flight', async () => {
    const core = await start();
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/quick')));
    const now = core.service.nowMs();
    const quick = Array.from({ length: 10 }, (_, i) => jobSpec(`quick-${i}`, { kind: 'once', atMs: now + 30 * i }));
    await create(core, quick);
    await waitFor('quick ones done', async () => {
      for (const j of quick) if ((await core.service.getJob(j.id)).state !== 'SUCCEEDED') return false;
      return true;
    });
    // The receiver answers within the engine-item delay: most fired items never become records of their own.
    expect(core.proposer.foldedTotal).toBeGreaterThan(0);
    for (const j of quick) {
      const at = (j.schedule as { atMs: number }).atMs;
      const [e] = (await core.service.listExecutions(j.id, { limit: 5, cursor: null })).executions;
      expect(e).toMatchObject({ scheduledAtMs: at, attempt: 1, state: 'SUCCEEDED', statusCode: 200, nodeId: 'n1' });
      expect(e.startedAtMs).toBeGreaterThanOrEqual(at);
      expect(e.latenessMs).toBe(e.startedAtMs! - at);
      expect(e.finishedAtMs).toBeGreaterThanOrEqual(e.startedAtMs!);
    }
    // A receiver slower than the engine-item delay but within the hold of a one-off's fired item: still one record.
    let folded = core.proposer.foldedTotal;
    bed.rx.respond = () => ({ status: 200, delayMs: 100 });
    await create(core, [jobSpec('medium', { kind: 'once', atMs: core.service.nowMs() })]);
    await waitFor('medium done', async () => (await core.service.getJob('medium')).state === 'SUCCEEDED');
    expect(core.proposer.foldedTotal).toBe(folded + 1);
    expect(core.proposer.heldCount()).toBe(0);
    // A slow callback: once the hold is over its fired item is proposed alone, so the stored execution (what a
    // new leader or a restart sees) is RUNNING while the receiver holds the request.
    folded = core.proposer.foldedTotal;
    bed.rx.respond = () => ({ status: 200, delayMs: stallLimits.firedHoldMs + 1_000 });
    const at = core.service.nowMs();
    await core.service.putTask('slow-hook', callbackSpec(bed.rx.url('/quick'), { timeoutMs: stallLimits.firedHoldMs + 5_000 }));
    await create(core, [jobSpec('slow-2', { kind: 'once', atMs: at }, { task: 'slow-hook' })]);
    await waitFor('in flight', () => bed.rx.of('slow-2').length === 1);
    const store = core.host.groups[shardOf('slow-2', 4)].store;
    await waitFor('RUNNING stored', () => store.getExecution('slow-2', at)?.state === 'RUNNING', stallLimits.firedHoldMs + 1_000);
    expect(bed.rx.of('slow-2')).toHaveLength(1);
    await waitFor('done', async () => (await core.service.getJob('slow-2')).state === 'SUCCEEDED');
    expect(core.proposer.foldedTotal).toBe(folded);
  });

  it('a held fired item does not hold back the other items: a quick outcome is recorded while it still waits', async () => {
    const core = await start();
    bed.rx.respond = (r) => (r.path === '/slow' ? { status: 200, delayMs: 1_200 } : { status: 200 });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/slow')));
    await core.service.putTask('quick', callbackSpec(bed.rx.url('/quick')));
    const at = core.service.nowMs();
    await create(core, [jobSpec('held', { kind: 'once', atMs: at })]);
    await waitFor('slow in flight', () => bed.rx.of('held').length === 1);
    const heldStore = core.host.groups[shardOf('held', 4)].store;
    await create(core, [{ ...jobSpec('quick-1', { kind: 'once', atMs: core.service.nowMs() }), task: 'quick' }]);
    await waitFor('quick recorded', async () => (await core.service.getJob('quick-1')).state === 'SUCCEEDED');
    // The quick outcome went out with the next engine-item flush, not with the held item's (up to 500 ms later).
    expect(heldStore.getExecution('held', at)).toBeNull();
    await waitFor('held done', async () => (await core.service.getJob('held')).state === 'SUCCEEDED');
  });

  it('refuses to pause a one-off job whose callback is in flight, before and after its fired record is stored', async () => {
    const core = await start();
    bed.rx.respond = () => ({ status: 200, delayMs: 1_200 });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/slow')));
    const at = core.service.nowMs();
    await create(core, [jobSpec('busy', { kind: 'once', atMs: at })]);
    await waitFor('in flight', () => bed.rx.of('busy').length === 1);
    const store = core.host.groups[shardOf('busy', 4)].store;
    expect(store.getExecution('busy', at)).toBeNull(); // the fired item is held for its outcome
    await expect(core.service.pauseJob('busy')).rejects.toMatchObject({ code: 'conflict', message: /RUNNING/ });
    await waitFor('RUNNING stored', () => store.getExecution('busy', at)?.state === 'RUNNING');
    await expect(core.service.pauseJob('busy')).rejects.toMatchObject({ code: 'conflict', message: /RUNNING/ });
    await waitFor('done', async () => (await core.service.getJob('busy')).state === 'SUCCEEDED');
    expect(bed.rx.of('busy')).toHaveLength(1);
  });

  it('shows QUEUED while waiting for a concurrency slot, RUNNING once sent', async () => {
    const core = await start();
    bed.rx.respond = () => ({ status: 200, delayMs: 300 });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/one-at-a-time'), { maxConcurrency: 1 }));
    const now = core.service.nowMs();
    await create(core, [jobSpec('first', { kind: 'once', atMs: now }), jobSpec('second', { kind: 'once', atMs: now + 5 })]);
    await waitFor('first in flight', () => bed.rx.received.length === 1);
    await sleep(30);
    const [a, b] = [await core.service.getJob('first'), await core.service.getJob('second')];
    expect(bed.rx.received).toHaveLength(1);
    expect(a.state).toBe('RUNNING');
    expect(b.state).toBe('QUEUED');
    await waitFor('both done', async () => (await core.service.getJob('second')).state === 'SUCCEEDED');
    expect(bed.rx.of('second')[0].atMs).toBeGreaterThanOrEqual(bed.rx.of('first')[0].atMs + 300);
  });

  it('answers idempotent creates, conflicts and unknown tasks per item, in input order', async () => {
    const core = await start();
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const later = core.service.nowMs() + 3_600_000;
    const a = jobSpec('dup', { kind: 'once', atMs: later });
    const first = await core.service.createJobs([a]);
    expect(first[0]).toMatchObject({ ok: true, created: true });
    const results = await core.service.createJobs([
      jobSpec('x1', { kind: 'once', atMs: later }),
      a,
      { ...a, requestDigest: 'other' },
      jobSpec('x2', { kind: 'once', atMs: later }, { task: 'nope' }),
      jobSpec('x3', { kind: 'once', atMs: later }),
    ]);
    expect(results.map((r) => (r.ok ? `ok:${r.job.id}:${r.created}` : `err:${r.error.code}`))).toEqual([
      'ok:x1:true',
      'ok:dup:false',
      'err:conflict',
      'err:not_found',
      'ok:x3:true',
    ]);
    await expect(core.service.getJob('x2')).rejects.toMatchObject({ code: 'not_found' });
    await expect(core.service.cancelJob('missing')).rejects.toMatchObject({ code: 'not_found' });
  });

  it('lists jobs across shards by id with a cursor, and filters by overlaid state', async () => {
    const core = await start();
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const now = core.service.nowMs();
    const ids = Array.from({ length: 23 }, (_, i) => `job-${String(i).padStart(2, '0')}`);
    await create(core, ids.map((id, i) => jobSpec(id, { kind: 'once', atMs: now + (i < 5 ? 30_000 : 120_000) })));
    await core.service.cancelJob('job-07');
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: Awaited<ReturnType<typeof core.service.listJobs>> = await core.service.listJobs({ state: null, task: null, limit: 5, cursor });
      expect(page.jobs.length).toBeLessThanOrEqual(5);
      seen.push(...page.jobs.map((j) => j.id));
      cursor = page.nextCursor;
    } while (cursor !== null);
    expect(seen).toEqual(ids);
    // Due within the wheel horizon (60 s) -> QUEUED; later -> PENDING (the loader leaves them in SQLite).
    const queued = await core.service.listJobs({ state: 'QUEUED', task: null, limit: 100, cursor: null });
    expect(queued.jobs.map((j) => j.id)).toEqual(ids.slice(0, 5));
    expect(queued.jobs.every((j) => j.state === 'QUEUED')).toBe(true);
    const pending = await core.service.listJobs({ state: 'PENDING', task: null, limit: 3, cursor: null });
    expect(pending.jobs.map((j) => j.id)).toEqual(['job-05', 'job-06', 'job-08']);
    const rest = await core.service.listJobs({ state: 'PENDING', task: null, limit: 100, cursor: pending.nextCursor });
    expect(rest.jobs.map((j) => j.id)).toEqual(ids.slice(9));
    expect(rest.nextCursor).toBeNull();
    const cancelled = await core.service.listJobs({ state: 'CANCELLED', task: 'hook', limit: 100, cursor: null });
    expect(cancelled.jobs.map((j) => j.id)).toEqual(['job-07']);
    await expect(core.service.listJobs({ state: null, task: null, limit: 5, cursor: '!!' })).rejects.toMatchObject({ code: 'invalid_argument' });
  });
});
