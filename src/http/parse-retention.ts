/**
 * A task's `retention_ms` (docs/api.md "Retention"): how long its finished jobs are kept, overriding the node's
 * `--retention`; `null` or absent: the node's. Read apart from the callback fields, which a job's inline callback
 * shares with a task (an inline callback has no retention of its own).
 */
import { taskRetentionMsMax } from '../scheduler/check.js';
import type { CallbackSpec } from '../scheduler/types.js';
import { isObject, readInt, type Issues } from './validate.js';

export function splitTaskRetention(body: unknown, issues: Issues): { callback: unknown; retentionMs: number | null } {
  if (!isObject(body) || !('retention_ms' in body)) return { callback: body, retentionMs: null };
  const { retention_ms: value, ...callback } = body;
  const retentionMs = value === null ? null : (readInt(value, 'retention_ms', 1000, taskRetentionMsMax, issues) ?? null);
  return { callback, retentionMs };
}

/** The parsed callback with the task's retention (TaskRecord.retentionMs) when one was given. */
export function withTaskRetention(spec: CallbackSpec, retentionMs: number | null): CallbackSpec {
  return retentionMs === null ? spec : ({ ...spec, retentionMs } as CallbackSpec);
}
