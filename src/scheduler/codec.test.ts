import { describe, expect, it } from 'vitest';
import { CommandDecodeError, decodeCommand, encodeCommand } from './codec.js';
import type { Command } from './commands.js';
import type { JobSpec, TaskRecord } from './types.js';

const task: TaskRecord = {
  name: 'send-email',
  url: 'http://127.0.0.1:9/hook',
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  timeoutMs: 10_000,
  retry: { maxAttempts: 5, initialBackoffMs: 1000, maxBackoffMs: 60_000, multiplier: 2, jitter: true },
  signingSecret: null,
  maxConcurrency: 100,
  createdAtMs: 1_800_000_000_000,
  updatedAtMs: 1_800_000_000_001,
};

const job: JobSpec = {
  id: 'job:1',
  task: 'send-email',
  callback: null,
  payload: new Uint8Array([0, 1, 2, 255, 128]),
  payloadEncoding: 'base64',
  schedule: { kind: 'cron', cron: '0 0 9 * * MON-FRI', timezone: 'Europe/Berlin', startAtMs: null },
  endAtMs: 1_900_000_000_000,
  maxRuns: 0,
  misfire: 'fire_all',
  overlap: 'buffer_one',
  metadata: { labels: { team: 'a' }, n: 1.5, list: [1, 'x', null, true] },
  requestDigest: 'sha256:abc',
  idempotencyKey: null,
};

const commands: Command[] = [
  { type: 'noop' },
  { type: 'put_task', nowMs: 1, task },
  { type: 'delete_task', nowMs: 2, name: 'send-email' },
  {
    type: 'create_jobs',
    nowMs: 1_800_000_000_123,
    shard: 5,
    jobs: [job, { ...job, id: 'j2', task: null, callback: task, schedule: { kind: 'once', atMs: 253_402_300_799_999 } }],
  },
  { type: 'cancel_job', nowMs: 3, id: 'j' },
  { type: 'pause_job', nowMs: 3, id: 'j' },
  { type: 'resume_job', nowMs: 3, id: 'j' },
  { type: 'run_job', nowMs: 3, id: 'j' },
  {
    type: 'patch_job',
    nowMs: 4,
    id: 'j',
    patch: { schedule: { kind: 'every', everyMs: 60_000, startAtMs: 0 }, payload: new Uint8Array([7]), metadata: null },
  },
  { type: 'patch_job', nowMs: 4, id: 'j', patch: { payloadEncoding: 'json' } },
  { type: 'fired', nowMs: 5, nodeId: 'n1', items: [{ jobId: 'j', scheduledAtMs: 4, attempt: 1, startedAtMs: 5 }] },
  {
    type: 'outcomes',
    nowMs: 6,
    items: [
      {
        jobId: 'j',
        scheduledAtMs: 4,
        attempt: 1,
        result: 'retry',
        statusCode: 503,
        error: 'unavailable',
        finishedAtMs: 6,
        retryAtMs: 1006,
      },
    ],
  },
  { type: 'skipped', nowMs: 7, items: [{ jobId: 'j', scheduledAtMs: 8, reason: 'overlap' }] },
];

describe('codec', () => {
  it.each(commands.map((c) => [c.type, c] as const))('round-trips %s', (_type, c) => {
    const bytes = encodeCommand(c);
    expect(bytes.constructor).toBe(Uint8Array);
    const back = decodeCommand(bytes);
    expect(back).toStrictEqual(c);
  });

  it('decodes payloads as plain Uint8Array, not Buffer', () => {
    const back = decodeCommand(encodeCommand(commands[3]!));
    if (back.type !== 'create_jobs') throw new Error('wrong type');
    expect(back.jobs[0]!.payload.constructor).toBe(Uint8Array);
    expect(Array.from(back.jobs[0]!.payload)).toEqual([0, 1, 2, 255, 128]);
  });

  it('keeps earlier encodings intact after later ones', () => {
    const first = encodeCommand(commands[3]!);
    const copy = first.slice();
    for (const c of commands) encodeCommand(c);
    expect(first).toStrictEqual(copy);
  });

  it('refuses bytes that are not a command', () => {
    expect(() => decodeCommand(encodeCommand({ type: 'bogus' } as unknown as Command))).toThrow(CommandDecodeError);
    expect(() => decodeCommand(encodeCommand({ type: 'bogus' } as unknown as Command))).toThrow(/unknown type/);
    expect(() => decodeCommand(new Uint8Array([0x01]))).toThrow(/command: must be an object/);
    expect(() => decodeCommand(new Uint8Array([0x92, 0x01]))).toThrow(/not msgpack/);
  });

  it('checks the shape of every field with bounds instead of asserting (the poison of issue 9 among them)', () => {
    const create = commands[3]! as Extract<Command, { type: 'create_jobs' }>;
    const poison = (jobPatch: Record<string, unknown>): Uint8Array =>
      encodeCommand({ ...create, jobs: [{ ...job, ...jobPatch } as unknown as JobSpec] });
    expect(() => decodeCommand(poison({ payload: { a: 1 } }))).toThrow(/jobs\[0\]\.payload_base64: must be bytes/);
    expect(() => decodeCommand(poison({ payload: new Uint8Array(256 * 1024 + 1) }))).toThrow(/at most 262144 bytes/);
    expect(() => decodeCommand(poison({ id: 'a b' }))).toThrow(/jobs\[0\]\.id/);
    expect(() => decodeCommand(poison({ schedule: { kind: 'cron', cron: 'nope', timezone: 'UTC', startAtMs: null } }))).toThrow(/schedule\.cron/);
    expect(() => decodeCommand(poison({ maxRuns: 1e300 }))).toThrow(/max_runs/);
    expect(() => decodeCommand(poison({ misfire: 'sometimes' }))).toThrow(/misfire/);
    expect(() => decodeCommand(poison({ misfireThresholdMs: 10 }))).toThrow(/jobs\[0\]\.misfire_threshold_ms/);
    expect(() => decodeCommand(poison({ misfireThresholdMs: 60_000 }))).not.toThrow();
    expect(() => decodeCommand(poison({ schedule: { kind: 'every', everyMs: 1000, startAtMs: null } }))).not.toThrow();
    expect(() => decodeCommand(poison({ metadata: [1] }))).toThrow(/metadata/);
    expect(() => decodeCommand(encodeCommand({ ...create, jobs: new Array(10_001).fill(job) }))).toThrow(/jobs: at most 10000 items/);
    expect(() => decodeCommand(encodeCommand({ type: 'put_task', nowMs: 1, task: { ...task, retry: null } } as unknown as Command))).toThrow(/task\.retry/);
    expect(() => decodeCommand(encodeCommand({ type: 'fired', nowMs: 1, nodeId: 'n1', items: [{ jobId: 'j' }] } as unknown as Command))).toThrow(/items\[0\]\.scheduledAtMs/);
    expect(() => decodeCommand(encodeCommand({ type: 'cancel_job', nowMs: -1, id: 'j' }))).toThrow(/nowMs/);
  });
});
