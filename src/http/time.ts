/**
 * Times on the wire: input is RFC 3339 with any offset or an integer of epoch ms; output is RFC 3339 UTC with
 * milliseconds (`2026-12-01T09:00:00.000Z`).
 */
import { httpLimits } from '../core/limits.js';

/** 1970-01-01 .. 9999-12-31T23:59:59.999Z: the range every output renders as a 4-digit-year RFC 3339 string. */
export const timeMsMin = 0;
export const timeMsMax = 253_402_300_799_999;

const rfc3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(?:([Zz])|([+-])(\d{2}):(\d{2}))$/;

function daysInMonth(year: number, month: number): number {
  const d = new Date(0);
  d.setUTCFullYear(year, month, 0); // day 0 of the next month = the last day of this one
  return d.getUTCDate();
}

/**
 * Parses an RFC 3339 timestamp into epoch ms (fractions beyond ms are truncated), or returns an error message.
 * Leap seconds (:60) are refused: JavaScript time has none.
 */
export function parseRfc3339(text: string): number | string {
  const m = rfc3339.exec(text);
  if (m === null) return 'must be an RFC 3339 time such as 2026-12-01T09:00:00.000Z, or epoch milliseconds';
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  if (month < 1 || month > 12) return 'month out of range';
  if (day < 1 || day > daysInMonth(year, month)) return 'day out of range';
  if (hour > 23 || minute > 59 || second > 59) return 'time of day out of range';
  const ms = m[7] === undefined ? 0 : Number(m[7].slice(1, 4).padEnd(3, '0'));
  let offsetMin = 0;
  if (m[8] === undefined) {
    const oh = Number(m[10]);
    const om = Number(m[11]);
    if (oh > 23 || om > 59) return 'offset out of range';
    offsetMin = (m[9] === '-' ? -1 : 1) * (oh * 60 + om);
  }
  const d = new Date(0);
  d.setUTCFullYear(year, month - 1, day);
  d.setUTCHours(hour, minute, second, ms);
  const epochMs = d.getTime() - offsetMin * 60_000;
  if (epochMs < timeMsMin || epochMs > timeMsMax) return 'must be between 1970 and 9999';
  return epochMs;
}

/**
 * The last few instants rendered: the job views of one answer (a batch, a hot instant's submissions) repeat the same
 * few times (the instant, the commit's nowMs), and Date#toISOString costs more than the rest of a view's fields.
 */
const rendered: Array<{ ms: number; text: string }> = [];

export function renderTime(ms: number): string {
  for (const r of rendered) if (r.ms === ms) return r.text;
  const text = new Date(ms).toISOString();
  if (rendered.length >= httpLimits.renderedTimesMax) rendered.pop();
  rendered.unshift({ ms, text });
  return text;
}

export function renderTimeOrNull(ms: number | null): string | null {
  return ms === null ? null : renderTime(ms);
}
