/**
 * The shapes of the API's answers (views.ts renders them), as JSON Schema for the OpenAPI document. Answers are
 * never read, only described; test/openapi checks real answers against these, so they stay honest.
 */
import { errorCatalog } from '../core/errors.js';
import { callbackMethods, misfirePolicies, overlapPolicies, redactedSecret } from '../scheduler/check.js';
import { jobStates } from '../scheduler/types.js';
import { namedShape, orNull, type JsonSchema } from './schema.js';

const timeOut: JsonSchema = { type: 'string', format: 'date-time', description: 'RFC 3339 in UTC with milliseconds.' };
const str: JsonSchema = { type: 'string' };
const int: JsonSchema = { type: 'integer' };
const strings: JsonSchema = { type: 'array', items: str };

function closed(properties: Record<string, JsonSchema>, required: string[] = Object.keys(properties), description?: string): JsonSchema {
  return { type: 'object', ...(description === undefined ? {} : { description }), properties, required, additionalProperties: false };
}

const secretOut: JsonSchema = { const: redactedSecret, description: 'A set secret; never echoed.' };

const callbackOut = {
  url: str,
  method: { enum: [...callbackMethods] },
  headers: { type: 'object', additionalProperties: str },
  timeout_ms: int,
  retry: closed({ max_attempts: int, initial_backoff_ms: int, max_backoff_ms: int, multiplier: { type: 'number' }, jitter: { type: 'boolean' } }),
  signing_secret: secretOut,
  signing_secret_next: secretOut,
  max_concurrency: int,
};
const callbackRequired = ['url', 'method', 'headers', 'timeout_ms', 'retry', 'max_concurrency'];

export const callbackAnswer = namedShape('Callback', closed(callbackOut, callbackRequired, 'An inline callback as answered: every default filled in; a set secret as "***", an unset one omitted.'));

export const taskAnswer = namedShape(
  'Task',
  closed(
    { name: str, ...callbackOut, retention_ms: orNull(int), created_at: timeOut, updated_at: timeOut },
    ['name', ...callbackRequired, 'created_at', 'updated_at'],
    'A task as answered (retention_ms null: the node\'s --retention).',
  ),
);

export const calendarAnswer = namedShape(
  'Calendar',
  closed({
    name: str,
    timezone: str,
    dates: strings,
    ranges: { type: 'array', items: closed({ from: str, to: str }) },
    description: orNull(str),
    created_at: timeOut,
    updated_at: timeOut,
  }),
);

export const executionAnswer = namedShape(
  'Execution',
  closed(
    {
      id: { type: 'string', description: '{job_id}:{scheduled_at_ms}: the callback\'s X-Deduplication-Key.' },
      scheduled_at: timeOut,
      attempt: int,
      state: { enum: ['QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED'] },
      started_at: orNull(timeOut),
      finished_at: orNull(timeOut),
      status_code: orNull(int),
      error: orNull(str),
      lateness_ms: orNull(int),
      node_id: orNull(str),
      attempts: {
        type: 'array',
        description: 'Every attempt of the occurrence, oldest first (the latest 100).',
        items: closed({
          attempt: int,
          started_at: orNull(timeOut),
          finished_at: orNull(timeOut),
          duration_ms: orNull(int),
          status_code: orNull(int),
          error: orNull(str),
          node_id: orNull(str),
          fencing_token: orNull(str),
        }),
      },
    },
    undefined,
    'One occurrence of a job: attempt, status_code and error are the latest attempt\'s; values not known yet are null.',
  ),
);

const dstOut = closed({ gap: str, repeat: str });
const scheduleAnswer = namedShape('ScheduleAnswer', {
  description: 'The stored schedule: {at}, {cron, timezone, start_at?}, or {every_ms, start_at}; plus dst, spread_ms with spread_offset_ms, and exclude when given.',
  oneOf: [
    closed({ at: timeOut }),
    closed({ cron: str, timezone: str, start_at: timeOut, dst: dstOut, spread_ms: int, spread_offset_ms: int, exclude: strings }, ['cron', 'timezone']),
    closed({ every_ms: int, start_at: timeOut, spread_ms: int, spread_offset_ms: int, exclude: strings }, ['every_ms', 'start_at']),
  ],
});

export const jobAnswer = namedShape(
  'Job',
  closed(
    {
      id: str,
      task: orNull(str),
      schedule: scheduleAnswer,
      state: { enum: [...jobStates] },
      next_fire_at: orNull(timeOut),
      created_at: timeOut,
      updated_at: timeOut,
      runs: int,
      shard: int,
      last_execution: orNull(executionAnswer),
      payload: { description: 'The JSON payload (absent when the job has none or has payload_base64).' },
      payload_base64: { type: 'string', contentEncoding: 'base64' },
      payload_ref: closed({ url: str, sha256: orNull(str), content_type: orNull(str) }, ['url']),
      callback: callbackAnswer,
      end_at: orNull(timeOut),
      max_runs: int,
      misfire: { enum: [...misfirePolicies] },
      misfire_threshold_ms: int,
      overlap: { enum: [...overlapPolicies] },
      metadata: orNull({ type: 'object' }),
    },
    ['id', 'task', 'schedule', 'state', 'next_fire_at', 'created_at', 'updated_at', 'runs', 'shard', 'last_execution', 'end_at', 'max_runs', 'misfire', 'misfire_threshold_ms', 'overlap', 'metadata'],
    'A job as answered. callback only for an inline callback (task is then null).',
  ),
);

export const problemAnswer = namedShape(
  'Problem',
  closed(
    {
      type: str,
      title: str,
      status: int,
      detail: str,
      code: { enum: Object.keys(errorCatalog) },
      errors: { type: 'array', items: closed({ field: { type: 'string', description: 'A JSON path: schedule.cron, callback.headers.X-Foo, jobs[3].schedule, body.' }, message: str }) },
      reason: { type: 'string', description: 'Why a 503 or 429 happened: what the failure proves about the write (docs/api.md).' },
    },
    ['type', 'title', 'status', 'detail', 'code'],
    'RFC 9457 problem details with a stable code; errors name every bad field of a 400.',
  ),
);

export const jobListAnswer = closed({ jobs: { type: 'array', items: jobAnswer }, next_cursor: orNull(str) });
export const executionListAnswer = closed({ executions: { type: 'array', items: executionAnswer }, next_cursor: orNull(str) });
export const taskListAnswer = closed({ tasks: { type: 'array', items: taskAnswer } });
export const calendarListAnswer = closed({ calendars: { type: 'array', items: calendarAnswer } });
export const batchAnswer = closed({
  results: {
    type: 'array',
    items: closed({ id: orNull(str), status: int, error: problemAnswer }, ['id', 'status'], 'One item: the status it would have had alone, and its problem when it failed.'),
  },
});
export const previewAnswer = closed({ occurrences: { type: 'array', items: timeOut } });

export const clusterAnswer = namedShape(
  'Cluster',
  closed({
    node_id: str,
    nodes: { type: 'array', items: closed({ id: str, peer_addr: str, api_addr: orNull(str), reachable: { type: 'boolean' } }) },
    shards: {
      type: 'array',
      items: closed({ id: int, leader: orNull(str), term: int, commit_index: int, applied_index: int, members: strings, learners: strings }),
    },
  }),
);
export const membershipAnswer = closed({ id: str, peer_addr: str, shards: { type: 'array', items: closed({ id: int, voters: strings, learners: strings }) } });
export const transferAnswer = closed({ shard: int, to: str });
export const clockAnswer = closed({ mode: { enum: ['system', 'manual'] }, now: timeOut });
export const clockAdvanceAnswer = closed({ now: timeOut, fired: int, complete: { type: 'boolean' } });
export const healthAnswer = closed({ status: { const: 'ok' }, node_id: str });
export const readyAnswer = closed({ ready: { const: true } });
