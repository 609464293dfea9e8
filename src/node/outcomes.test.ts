/**
 * Precise outcomes: what a failed proposal proves decides whether the router repeats it. Three nodes in one
 * process (real PeerTransport over HTTP/2, real SQLite, a real callback receiver). The faults: a leader's appends
 * lost long enough for its proposal to time out (proposal_timeout) before it commits, and the answer of a
 * forwarded call lost on its way back from the leader after the leader applied it (leader_unreachable). Either
 * way the caller cannot know whether the write applied.
 */
import { describe, expect, it } from 'vitest';
import { PunctualError, provesNotApplied, type FailureReason } from '../core/errors.js';
import { shardOf } from '../core/ids.js';
import { clusterLimits } from '../core/limits.js';
import type { Message } from '../raft/index.js';
import type { NodeConfig } from './api.js';
import type { OpenNode, NodeOptions } from './host.js';
import { apiKind, decodeWire, retryable, type ForwardOp } from './router.js';
import { clusterConfigs } from './testing/cluster.js';
import { callbackSpec, jobSpec } from './testing/fixtures.js';
import { useNodeBed } from './testing/bed.js';
import { sleep, waitFor } from './testing/receiver.js';

const bed = useNodeBed('punctual-outcomes-', { closeGraceMs: 1_000 });

async function startCluster(over: Partial<NodeConfig> = {}, options: NodeOptions = {}): Promise<OpenNode[]> {
  const configs = await clusterConfigs(bed.dir, 3, { shards: 4, ...over });
  const cores = await Promise.all(configs.map((c) => bed.startCore(c, options)));
  await waitFor('every shard has a leader everywhere', () => cores.every((c) => c.service.readiness().ready), 10_000);
  return cores;
}

function leaderOf(cores: OpenNode[], shard: number): OpenNode {
  const core = cores.find((c) => c.host.isLeader(shard));
  if (core === undefined) throw new Error(`no leader for shard ${shard}`);
  return core;
}

/**
 * The follower's forwarded calls of kind `op` reach the leader and run there, but the first `n` answers are lost
 * (the transport throws as if the link broke after sending). Returns how many answers were dropped so far.
 */
function loseAnswers(core: OpenNode, op: ForwardOp['op'], n: number): () => number {
  const t = core.transport!;
  const request = t.request.bind(t);
  let dropped = 0;
  t.request = async (to: string, kind: string, body: Uint8Array, timeoutMs: number): Promise<Uint8Array> => {
    const answer = await request(to, kind, body, timeoutMs);
    if (kind === apiKind && decodeWire<ForwardOp>(body).op === op && dropped < n) {
      dropped++;
      throw new Error('answer lost on the way back');
    }
    return answer;
  };
  return () => dropped;
}

describe('which failures the router repeats', () => {
  const failure = (reason: FailureReason | null): PunctualError => new PunctualError('unavailable', 'x', [], reason);
  const run = (runKey: string | null): ForwardOp => ({ op: 'job', action: 'run', id: 'a', patch: null, runKey });
  const resume: ForwardOp = { op: 'job', action: 'resume', id: 'a', patch: null };
  const create: ForwardOp = { op: 'create_jobs', shard: 0, nowMs: 0, jobs: [] };

  it('repeats any call after a failure that proves it never applied', () => {
    for (const reason of ['not_leader', 'no_leader', 'shutting_down', 'proposal_refused', 'proposal_lost'] as const) {
      expect(provesNotApplied(failure(reason))).toBe(true);
      expect(retryable(resume, failure(reason))).toBe(true);
      expect(retryable(run(null), failure(reason))).toBe(true);
    }
  });

  it('after an unknown outcome, repeats only what is safe to repeat', () => {
    for (const reason of ['proposal_timeout', 'snapshot_overtook', 'interrupted', 'leader_unreachable', null] as const) {
      expect(provesNotApplied(failure(reason))).toBe(false);
      expect(retryable(resume, failure(reason))).toBe(false);
      expect(retryable(run(null), failure(reason))).toBe(false);
      expect(retryable({ op: 'propose', shard: 0, command: { type: 'delete_task', nowMs: 0, name: 't' } }, failure(reason))).toBe(false);
      expect(retryable(run('node:k'), failure(reason))).toBe(true);
      expect(retryable(create, failure(reason))).toBe(true);
      expect(retryable({ op: 'job', action: 'cancel', id: 'a', patch: null }, failure(reason))).toBe(true);
      expect(retryable({ op: 'get_job', id: 'a' }, failure(reason))).toBe(true);
    }
  });

  it('never repeats back-pressure or an answer from the state machine', () => {
    const full = new PunctualError('rate_limited', 'full', [], 'proposer_queue_full');
    expect(provesNotApplied(full)).toBe(true);
    expect(retryable(create, full)).toBe(false);
    expect(retryable(create, new PunctualError('conflict', 'taken'))).toBe(false);
    expect(retryable(create, new Error('boom'))).toBe(false);
  });
});

describe('a proposal that times out and commits later', () => {
  it('a run on the leader whose proposal timed out is repeated with its run key and runs once', async () => {
    // No rebalancing: the leader must keep its entry (a leader moved by a transfer could drop it uncommitted).
    const cores = await startCluster({}, { rebalanceIntervalMs: 3_600_000 });
    await cores[0].service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const id = 'run-timeout';
    const shard = shardOf(id, 4);
    const leader = leaderOf(cores, shard);
    await leader.service.createJobs([jobSpec(id, { kind: 'once', atMs: leader.service.nowMs() + 3_600_000 })]);
    // The leader's appends are lost for a while (heartbeats still flow, so it stays leader): its entry cannot
    // commit before the proposal times out, and commits once appends flow again.
    const transport = leader.transport!;
    let blocking = true;
    leader.host.setSender({
      send: (messages: readonly Message[]) => transport.send(blocking ? messages.filter((m) => m.type !== 'append') : messages),
      reachable: (peer: string) => transport.reachable(peer),
    });
    const saved = clusterLimits.proposalTimeoutMs;
    Object.assign(clusterLimits as Record<string, number>, { proposalTimeoutMs: 200 });
    try {
      const group = leader.host.groups[shard]!;
      const running = leader.service.runJob(id);
      await waitFor('the run proposed', () => group.proposals.size === 1);
      await waitFor('the proposal timed out', () => group.proposals.size === 0);
      blocking = false;
      const view = await running; // the router repeated it (same run key) once the first timed out
      expect(view.id).toBe(id);
    } finally {
      Object.assign(clusterLimits as Record<string, number>, { proposalTimeoutMs: saved });
      blocking = false;
    }
    await waitFor('the run fired', () => bed.rx.of(id).length >= 1);
    await waitFor('the run recorded', async () => (await leader.service.listExecutions(id, { limit: 10, cursor: null })).executions.some((e) => e.state === 'SUCCEEDED'));
    await sleep(300);
    expect(bed.rx.of(id)).toHaveLength(1);
    expect((await leader.service.listExecutions(id, { limit: 10, cursor: null })).executions).toHaveLength(1);
    expect((await leader.service.getJob(id)).runKeys).toHaveLength(1);
  });
});

describe('a forwarded call whose answer is lost after it applied', () => {
  it('a run is repeated with its run key and runs once', async () => {
    const cores = await startCluster();
    await cores[0].service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const id = 'run-once';
    const shard = shardOf(id, 4);
    const leader = leaderOf(cores, shard);
    await leader.service.createJobs([jobSpec(id, { kind: 'once', atMs: leader.service.nowMs() + 3_600_000 })]);
    const follower = cores.find((c) => !c.host.isLeader(shard))!;
    const dropped = loseAnswers(follower, 'job', 1);
    const view = await follower.service.runJob(id);
    expect(dropped()).toBe(1); // the first answer was lost: the router repeated the call
    expect(view.id).toBe(id);
    await waitFor('the run fired', () => bed.rx.of(id).length >= 1);
    await waitFor('the run recorded', async () => (await leader.service.listExecutions(id, { limit: 10, cursor: null })).executions.some((e) => e.state === 'SUCCEEDED'));
    await sleep(300);
    expect(bed.rx.of(id)).toHaveLength(1);
    const { executions } = await follower.service.listExecutions(id, { limit: 10, cursor: null });
    expect(executions).toHaveLength(1);
  });

  it('a client run repeated with the same Idempotency-Key runs once; another key runs again', async () => {
    const cores = await startCluster();
    await cores[0].service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const id = 'run-keyed';
    const shard = shardOf(id, 4);
    await leaderOf(cores, shard).service.createJobs([jobSpec(id, { kind: 'once', atMs: cores[0].service.nowMs() + 3_600_000 })]);
    const [a, b] = cores.filter((c) => !c.host.isLeader(shard));
    await a.service.runJob(id, 'client-key-1');
    await b.service.runJob(id, 'client-key-1'); // the client retried through another node
    await waitFor('the run fired', () => bed.rx.of(id).length >= 1);
    await sleep(300);
    expect(bed.rx.of(id)).toHaveLength(1);
    await a.service.runJob(id, 'client-key-2');
    await waitFor('the second run fired', () => bed.rx.of(id).length >= 2);
    expect((await a.service.listExecutions(id, { limit: 10, cursor: null })).executions).toHaveLength(2);
  });

  it('a resume is not repeated: the caller gets 503 leader_unreachable and the job was resumed once', async () => {
    const cores = await startCluster();
    await cores[0].service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const id = 'resume-once';
    const shard = shardOf(id, 4);
    const leader = leaderOf(cores, shard);
    await leader.service.createJobs([jobSpec(id, { kind: 'every', everyMs: 3_600_000, startAtMs: leader.service.nowMs() + 3_600_000 })]);
    await leader.service.pauseJob(id);
    const follower = cores.find((c) => !c.host.isLeader(shard))!;
    const dropped = loseAnswers(follower, 'job', 1);
    const err = await follower.service.resumeJob(id).then(
      () => null,
      (e: unknown) => e,
    );
    expect(dropped()).toBe(1);
    expect(err).toBeInstanceOf(PunctualError);
    expect(err).toMatchObject({ code: 'unavailable', reason: 'leader_unreachable' });
    expect((await follower.service.getJob(id)).state).toBe('PENDING'); // it did apply, once
  });

  it('a create without an id is repeated with the id fixed at the first node: one job', async () => {
    const cores = await startCluster();
    await cores[0].service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    // The HTTP layer derives the id (deriveJobId) before calling the node: a random UUID without Idempotency-Key.
    const id = crypto.randomUUID();
    const shard = shardOf(id, 4);
    const follower = cores.find((c) => !c.host.isLeader(shard))!;
    const dropped = loseAnswers(follower, 'create_jobs', 1);
    const atMs = follower.service.nowMs() + 300;
    const [r] = await follower.service.createJobs([jobSpec(id, { kind: 'once', atMs })]);
    expect(dropped()).toBe(1);
    expect(r).toMatchObject({ ok: true, created: false }); // the repeat found the job its first try created
    await waitFor('fired', () => bed.rx.of(id).length >= 1);
    await sleep(300);
    expect(bed.rx.of(id)).toHaveLength(1);
    const { jobs } = await follower.service.listJobs({ state: null, task: null, limit: 100, cursor: null });
    expect(jobs.map((j) => j.id)).toEqual([id]);
  });
});
