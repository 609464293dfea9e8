/**
 * The leader's check of an operation forwarded by a peer (ShardRouter): the op's own fields, then its jobs,
 * patch or command through the same model checks the client API's parsers end in (src/scheduler/check.ts). A
 * forwarded op that fails is refused with the API's 400 (`invalid_argument`, the offending field) and never
 * proposed: an authenticated peer is still not trusted to write arbitrary bytes into a replicated log.
 */
import { PunctualError } from '../core/errors.js';
import { jobIdPattern, nodeIdPattern, taskNamePattern } from '../core/ids.js';
import { httpLimits, limits, schedulerLimits } from '../core/limits.js';
import { ShapeError, checkCalendarRecord, checkCommand, checkJobPatch, checkJobSpec, checkTaskRecord, modelTimeMsMax } from '../scheduler/check.js';
import type { ForwardOp } from './router.js';

const jobActions = ['cancel', 'pause', 'resume', 'run', 'patch'];
/** What a node forwards as a raw command: task writes (proposeToAll), dead-letter replays; the rest has its own op. */
const forwardedCommandTypes = ['put_task', 'delete_task', 'put_calendar', 'delete_calendar', 'replay_jobs'];

function fail(field: string, message: string): never {
  throw new ShapeError(field, message);
}

function shardIn(v: unknown, shards: number): void {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0 || v >= shards) fail('shard', `must be a shard number below ${shards}`);
}

function matches(v: unknown, field: string, re: RegExp): void {
  if (typeof v !== 'string' || !re.test(v)) fail(field, `must match ${re.source}`);
}

function checkOp(op: Record<string, unknown>, shards: number): void {
  switch (op.op) {
    case 'create_jobs': {
      shardIn(op.shard, shards);
      if (typeof op.nowMs !== 'number' || !Number.isSafeInteger(op.nowMs) || op.nowMs < 0 || op.nowMs > modelTimeMsMax) fail('now', 'must be a time');
      if (!Array.isArray(op.jobs) || op.jobs.length === 0) fail('jobs', 'must be a non-empty array of jobs');
      if (op.jobs.length > limits.batchJobsMax) fail('jobs', `at most ${limits.batchJobsMax} jobs per batch (got ${op.jobs.length})`);
      op.jobs.forEach((job, i) => checkJobSpec(job, `jobs[${i}]`, true));
      return;
    }
    case 'job':
      if (typeof op.action !== 'string' || !jobActions.includes(op.action)) fail('action', `must be one of ${jobActions.join(', ')}`);
      matches(op.id, 'id', jobIdPattern);
      if (op.action === 'patch') checkJobPatch(op.patch, '', true);
      if (op.runKey != null && (typeof op.runKey !== 'string' || op.runKey.length === 0 || op.runKey.length > schedulerLimits.runKeyLengthMax)) {
        fail('runKey', `must be a string of 1 to ${schedulerLimits.runKeyLengthMax} characters`);
      }
      return;
    case 'get_job':
      return matches(op.id, 'id', jobIdPattern);
    case 'list_executions':
      matches(op.id, 'id', jobIdPattern);
      if (typeof op.limit !== 'number' || !Number.isSafeInteger(op.limit) || op.limit < 1 || op.limit > limits.listLimitMax) {
        fail('limit', `must be an integer from 1 to ${limits.listLimitMax}`);
      }
      if (op.cursor !== null && (typeof op.cursor !== 'string' || op.cursor.length > httpLimits.listCursorLengthMax)) fail('cursor', 'is too long');
      return;
    case 'propose': {
      shardIn(op.shard, shards);
      const command = (typeof op.command === 'object' && op.command !== null ? op.command : {}) as { type?: unknown; task?: unknown };
      if (typeof command.type !== 'string' || !forwardedCommandTypes.includes(command.type)) fail('type', 'only task and calendar writes and replays are forwarded as commands');
      // The task first, so its fields are named as PUT /v1/tasks/{name} names them (`url`, not `task.url`).
      if (command.type === 'put_task') checkTaskRecord(command.task, '', true);
      if (command.type === 'put_calendar') checkCalendarRecord((command as { calendar?: unknown }).calendar, '', true);
      checkCommand(command);
      return;
    }
    case 'transfer_leader':
      shardIn(op.shard, shards);
      return matches(op.to, 'to', nodeIdPattern);
    case 'get_task':
      return matches(op.name, 'name', taskNamePattern);
    case 'get_calendar':
      return matches(op.name, 'name', taskNamePattern);
    case 'list_tasks':
    case 'list_calendars':
    case 'info':
      return;
    default:
      fail('op', 'unknown forwarded operation');
  }
}

/** `op` as a ForwardOp whose every field has the model's shape; throws invalid_argument naming the field. */
export function checkForwardOp(op: unknown, shards: number): ForwardOp {
  try {
    if (typeof op !== 'object' || op === null || Array.isArray(op)) fail('op', 'must be an object');
    checkOp(op as Record<string, unknown>, shards);
  } catch (err) {
    if (!(err instanceof ShapeError)) throw err;
    throw new PunctualError('invalid_argument', err.message, [err.toFieldError()]);
  }
  return op as ForwardOp;
}
