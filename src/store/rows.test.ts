/**
 * The row codec's stored layout: an execution's blob is the msgpack map of its fields but the key columns, its
 * attempts packed as tuples last. Files written by earlier versions hold exactly this, so the bytes are pinned
 * here against the layout spelled out, not against the encoder's own output.
 */
import { describe, expect, it } from 'vitest';
import type { ExecutionRecord } from '../scheduler/types.js';
import { decodeExecution, encodeExecution, pack } from './rows.js';

const attempt = { attempt: 1, startedAtMs: 2_000, finishedAtMs: 2_002, statusCode: 500, error: 'boom', nodeId: 'n1', fencingToken: '0.3' };
const base: ExecutionRecord = {
  jobId: 'j1',
  scheduledAtMs: 1_990,
  attempt: 2,
  state: 'QUEUED',
  startedAtMs: 2_000,
  finishedAtMs: null,
  statusCode: 500,
  error: 'boom',
  latenessMs: 10,
  nodeId: 'n1',
  retryAtMs: 2_100,
  attempts: [attempt, { ...attempt, attempt: 2, finishedAtMs: null, statusCode: null, error: null }],
};
const row = (e: ExecutionRecord, data: Uint8Array) => ({ job_id: e.jobId, scheduled_at: e.scheduledAtMs, state: e.state, data });

describe('execution rows', () => {
  it('store the fields but the key columns as a map, attempts as tuples last, and read back equal', () => {
    const data = encodeExecution(base);
    const layout = {
      attempt: 2, startedAtMs: 2_000, finishedAtMs: null, statusCode: 500, error: 'boom', latenessMs: 10, nodeId: 'n1', retryAtMs: 2_100,
      attempts: [[1, 2_000, 2_002, 500, 'boom', 'n1', '0.3'], [2, 2_000, null, null, null, 'n1', '0.3']],
    };
    expect(Buffer.from(data).equals(Buffer.from(pack(layout)))).toBe(true);
    expect(decodeExecution(row(base, data))).toEqual(base);
  });

  it('an execution without attempts (written before they were recorded) has no attempts key, even one set undefined', () => {
    const { attempts: _a, ...old } = base;
    const layout = { attempt: 2, startedAtMs: 2_000, finishedAtMs: null, statusCode: 500, error: 'boom', latenessMs: 10, nodeId: 'n1', retryAtMs: 2_100 };
    for (const e of [old as ExecutionRecord, { ...old, attempts: undefined }]) {
      const data = encodeExecution(e);
      expect(Buffer.from(data).equals(Buffer.from(pack(layout)))).toBe(true);
      expect(decodeExecution(row(e, data))).toEqual(old);
    }
  });

  it('a record built by spreads (as the state machine builds them) encodes like the same record written plainly', () => {
    const spread = { ...base, state: 'SUCCEEDED' as const, finishedAtMs: 2_050, retryAtMs: null };
    const plain: ExecutionRecord = JSON.parse(JSON.stringify(spread));
    expect(Buffer.from(encodeExecution(spread)).equals(Buffer.from(encodeExecution(plain)))).toBe(true);
  });
});
