/** Opaque page cursors: base64url of the last id (jobs) or of the last scheduled time (executions). */
import { invalid } from '../core/errors.js';
import { jobIdPattern } from '../core/ids.js';

export function encodeCursor(value: string): string {
  return Buffer.from(value, 'utf8').toString('base64url');
}

function decode(cursor: string): string | null {
  if (!/^[A-Za-z0-9_-]{1,400}$/.test(cursor)) return null;
  return Buffer.from(cursor, 'base64url').toString('utf8');
}

export function decodeJobCursor(cursor: string | null): string | null {
  if (cursor === null) return null;
  const id = decode(cursor);
  if (id === null || !jobIdPattern.test(id)) throw invalid('cursor', 'not a cursor returned by this API');
  return id;
}

export function decodeExecutionCursor(cursor: string | null): number | null {
  if (cursor === null) return null;
  const text = decode(cursor);
  if (text === null || !/^-?\d{1,16}$/.test(text)) throw invalid('cursor', 'not a cursor returned by this API');
  return Number(text);
}
