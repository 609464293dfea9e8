/**
 * Issue 12 against real parts: in-process nodes on real SQLite files, a real callback receiver, and for the
 * cluster cases three nodes on real loopback sockets (the real peer transport):
 * - every attempt of an execution after retries, with the node and fencing token the receiver saw;
 * - dead letters: listed, grouped, replayed (by filter on one node; by ids through a follower in a cluster), the
 *   replayed job SUCCEEDED with both executions in its history;
 * - retention: finished jobs deleted by the leader's driver, across a restart and across a failover, the same rows on
 *   every replica; a recurring job trimmed to its newest executions.
 */
import { describe, expect, it } from 'vitest';
import { shardOf } from '../core/ids.js';
import { PunctualError } from '../core/errors.js';
import type { NodeConfig } from './api.js';
import type { NodeOptions, OpenNode } from './host.js';
import { clusterConfigs } from './testing/cluster.js';
import { callbackSpec, jobSpec, nodeConfig } from './testing/fixtures.js';
import { useNodeBed } from './testing/bed.js';
import { waitFor } from './testing/receiver.js';

const bed = useNodeBed('punctual-retention-', { closeGraceMs: 1_000 });
const startCore = (config: NodeConfig, options: NodeOptions = {}): Promise<OpenNode> => bed.startCore(config, options);
const noFilter = { task: null, errorClass: null, sinceMs: null, untilMs: null };

async function startCluster(over: Partial<NodeConfig> = {}): Promise<OpenNode[]> {
  const configs = await clusterConfigs(bed.dir, 3, { shards: 2, ...over });
  const cores = await Promise.all(configs.map((c) => startCore(c, { rebalanceIntervalMs: 0 })));
  await waitFor('every shard has a leader everywhere', () => cores.every((c) => c.service.readiness().ready), 10_000);
  return cores;
}

function leaderOf(cores: OpenNode[], shard: number): OpenNode {
  const core = cores.find((c) => c.host.isLeader(shard));
  if (core === undefined) throw new Error(`no leader for shard ${shard}`);
  return core;
}

async function gone(core: OpenNode, id: string): Promise<boolean> {
  try {
    await core.service.getJob(id);
    return false;
  } catch (err) {
    return err instanceof PunctualError && err.code === 'not_found';
  }
}

describe('every attempt in the history', () => {
  it('a job that failed twice and then succeeded lists three attempts with their status, node and fencing token', async () => {
    const core = await startCore(nodeConfig(bed.dir));
    bed.rx.respond = (_r, n) => ({ status: n <= 2 ? 503 : 200 });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/flaky')));
    const atMs = core.service.nowMs() + 50;
    await core.service.createJobs([jobSpec('flaky', { kind: 'once', atMs })]);
    await waitFor('succeeded', async () => (await core.service.getJob('flaky')).state === 'SUCCEEDED');
    const got = bed.rx.of('flaky');
    expect(got).toHaveLength(3);
    const { executions } = await core.service.listExecutions('flaky', { limit: 10, cursor: null });
    expect(executions).toHaveLength(1);
    const e = executions[0]!;
    expect(e.attempts!.map((a) => [a.attempt, a.statusCode, a.error, a.nodeId])).toEqual([
      [1, 503, 'HTTP 503', 'n1'],
      [2, 503, 'HTTP 503', 'n1'],
      [3, 200, null, 'n1'],
    ]);
    // The fencing token of each attempt is the one its callback carried; started_at is the first attempt's start.
    expect(e.attempts!.map((a) => a.fencingToken)).toEqual(got.map((r) => r.headers['x-punctual-fencing-token']));
    expect(e.startedAtMs).toBe(e.attempts![0]!.startedAtMs);
    for (const a of e.attempts!) expect(a.finishedAtMs!).toBeGreaterThanOrEqual(a.startedAtMs!);
    expect(e.attempts![1]!.startedAtMs!).toBeGreaterThanOrEqual(e.attempts![0]!.finishedAtMs!);
  });
});

describe('dead letters', () => {
  it('a job that exhausts its retries is a dead letter; a replay by filter makes it SUCCEEDED with both executions', async () => {
    const core = await startCore(nodeConfig(bed.dir));
    let failing = true;
    bed.rx.respond = (r) => ({ status: failing ? (r.path === '/gone' ? 404 : 503) : 200 });
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/down'), { retry: { maxAttempts: 2, initialBackoffMs: 10, maxBackoffMs: 10, multiplier: 1, jitter: false } }));
    await core.service.putTask('other', callbackSpec(bed.rx.url('/gone')));
    const atMs = core.service.nowMs() + 30;
    await core.service.createJobs([jobSpec('d1', { kind: 'once', atMs }), jobSpec('d2', { kind: 'once', atMs }), jobSpec('d3', { kind: 'once', atMs }, { task: 'other' })]);
    await waitFor('failed', async () => (await core.service.listDeadLetters(noFilter, { limit: 10, cursor: null })).deadLetters.length === 3);

    const page = await core.service.listDeadLetters({ ...noFilter, errorClass: 'http_5xx' }, { limit: 1, cursor: null });
    expect(page.deadLetters).toHaveLength(1);
    expect(page.deadLetters[0]).toMatchObject({ task: 'hook', errorClass: 'http_5xx', statusCode: 503, error: 'HTTP 503', attempts: 2, scheduledAtMs: atMs });
    const rest = await core.service.listDeadLetters({ ...noFilter, errorClass: 'http_5xx' }, { limit: 1, cursor: page.nextCursor });
    expect(rest.deadLetters.map((d) => d.jobId)).not.toContain(page.deadLetters[0]!.jobId);
    expect(rest.nextCursor).toBeNull();
    const groups = await core.service.deadLetterGroups();
    expect(groups.map((g) => [g.task, g.errorClass, g.count])).toEqual([
      ['hook', 'http_5xx', 2],
      ['other', 'http_4xx', 1],
    ]);

    const dry = await core.service.replayDeadLetters({ filter: { ...noFilter, task: 'hook' }, dryRun: true });
    expect(dry).toEqual({ matched: 2, replayed: 0 });
    expect((await core.service.getJob('d1')).state).toBe('FAILED');
    failing = false;
    expect(await core.service.replayDeadLetters({ filter: { ...noFilter, task: 'hook' }, dryRun: false })).toEqual({ matched: 2, replayed: 2 });
    await waitFor('replayed', async () => (await core.service.getJob('d1')).state === 'SUCCEEDED' && (await core.service.getJob('d2')).state === 'SUCCEEDED');
    const history = (await core.service.listExecutions('d1', { limit: 10, cursor: null })).executions;
    expect(history.map((e) => e.state)).toEqual(['SUCCEEDED', 'FAILED']);
    expect(history[1]!.scheduledAtMs).toBe(atMs);
    const left = await core.service.listDeadLetters(noFilter, { limit: 10, cursor: null });
    expect(left.deadLetters.map((d) => d.jobId)).toEqual(['d3']);
  });

  it('in a cluster: a replay by ids through a follower runs on the leader; every replica sees the job SUCCEEDED', async () => {
    const cores = await startCluster();
    let failing = true;
    bed.rx.respond = () => ({ status: failing ? 400 : 200 });
    await cores[0].service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const id = 'cluster-dead';
    const shard = shardOf(id, 2);
    await cores[0].service.createJobs([jobSpec(id, { kind: 'once', atMs: cores[0].service.nowMs() + 30 })]);
    await waitFor('failed', () => cores.every((c) => c.host.groups[shard]!.store.getJob(id)?.state === 'FAILED'), 30_000);
    const follower = cores.find((c) => !c.host.isLeader(shard))!;
    expect(await follower.service.replayDeadLetters({ ids: [id, 'not-a-dead-letter'], dryRun: true })).toEqual({ matched: 1, replayed: 0 });
    failing = false;
    expect(await follower.service.replayDeadLetters({ ids: [id], dryRun: false })).toEqual({ matched: 1, replayed: 1 });
    await waitFor('succeeded everywhere', () => cores.every((c) => c.host.groups[shard]!.store.getJob(id)?.state === 'SUCCEEDED'), 30_000);
    for (const c of cores) {
      expect((await c.service.listDeadLetters(noFilter, { limit: 10, cursor: null })).deadLetters).toEqual([]);
    }
    const history = (await follower.service.listExecutions(id, { limit: 10, cursor: null })).executions;
    expect(history.map((e) => [e.state, e.statusCode])).toEqual([
      ['SUCCEEDED', 200],
      ['FAILED', 400],
    ]);
  });
});

describe('retention', () => {
  it('deletes finished jobs and their executions after the retention, and goes on after a restart', async () => {
    const config = nodeConfig(bed.dir, { retentionMs: 3_000 });
    let core = await startCore(config);
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const atMs = core.service.nowMs() + 30;
    await core.service.createJobs([jobSpec('old', { kind: 'once', atMs }), jobSpec('later', { kind: 'once', atMs: atMs + 60_000 })]);
    await waitFor('fired', async () => (await core.service.getJob('old')).state === 'SUCCEEDED');
    // Stopped before the retention ends: the restarted node's driver deletes it.
    await bed.stop(core);
    core = await startCore(config);
    expect((await core.service.getJob('old')).state).toBe('SUCCEEDED');
    await waitFor('deleted after the restart', () => gone(core, 'old'), 10_000);
    const store = core.host.groups[shardOf('old', 4)]!.store;
    expect(store.listExecutions('old', 10, null)).toEqual([]);
    expect((await core.service.getJob('later')).state).not.toBe('SUCCEEDED');
    expect(core.retention.jobsDeletedTotal).toBe(1);
  });

  it('a task with retention_ms keeps its jobs longer than --retention; a recurring job keeps its newest executions', async () => {
    const core = await startCore(nodeConfig(bed.dir, { retentionMs: 300, retentionExecutions: 2 }));
    await core.service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    await core.service.putTask('keep', { ...callbackSpec(bed.rx.url('/keep')), retentionMs: 3_600_000 } as ReturnType<typeof callbackSpec>);
    const atMs = core.service.nowMs() + 30;
    await core.service.createJobs([
      jobSpec('short', { kind: 'once', atMs }),
      jobSpec('long', { kind: 'once', atMs }, { task: 'keep' }),
      jobSpec('every', { kind: 'every', everyMs: 100, startAtMs: atMs }),
    ]);
    await waitFor('short deleted', () => gone(core, 'short'), 10_000);
    const every = core.host.groups[shardOf('every', 4)]!.store;
    await waitFor('every fired 5 times', () => bed.rx.of('every').length >= 5, 10_000);
    await waitFor('trimmed', () => every.listExecutions('every', 100, null).length <= 3, 10_000);
    expect((await core.service.getJob('long')).state).toBe('SUCCEEDED');
  });

  it('across a failover: the new leader deletes, and every replica holds the same rows', { timeout: 120_000 }, async () => {
    const cores = await startCluster({ retentionMs: 2_000 });
    await cores[0].service.putTask('hook', callbackSpec(bed.rx.url('/hook')));
    const ids = Array.from({ length: 8 }, (_, i) => `fo-${i}`);
    const atMs = cores[0].service.nowMs() + 30;
    await cores[0].service.createJobs(ids.map((id) => jobSpec(id, { kind: 'once', atMs })));
    const stores = (c: OpenNode) => c.host.groups.map((g) => g.store);
    await waitFor('finished everywhere', () => cores.every((c) => ids.every((id) => stores(c)[shardOf(id, 2)]!.getJob(id)?.state === 'SUCCEEDED')), 30_000);
    // The leader of shard 0 goes away before the retention ends.
    const old = leaderOf(cores, 0);
    await bed.stop(old);
    const left = cores.filter((c) => c !== old);
    await waitFor('new leader', () => left.some((c) => c.host.isLeader(0) && c.host.groups[0]!.firing), 30_000);
    await waitFor('deleted on every replica', () => left.every((c) => ids.every((id) => stores(c)[shardOf(id, 2)]!.getJob(id) === null)), 30_000);
    for (const c of left) for (const id of ids) expect(stores(c)[shardOf(id, 2)]!.listExecutions(id, 10, null)).toEqual([]);
  });
});
