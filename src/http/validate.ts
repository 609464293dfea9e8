/**
 * Validation primitives: each reader takes a JSON value and its field path (`schedule.cron`, `jobs[3].callback.url`),
 * returns the normalized value, or records a FieldError in an Issues collector and returns undefined. Parsers
 * (parse.ts) collect every problem of a body before failing, so one 400 names all the bad fields.
 */
import { PunctualError, type FieldError } from '../core/errors.js';
import { parseRfc3339, timeMsMax, timeMsMin } from './time.js';

export class Issues {
  readonly list: FieldError[] = [];

  /** Records a problem; returns undefined so a reader can `return issues.add(...)`. */
  add(field: string, message: string): undefined {
    this.list.push({ field, message });
    return undefined;
  }

  get ok(): boolean {
    return this.list.length === 0;
  }

  toError(): PunctualError {
    const first = this.list[0];
    const more = this.list.length > 1 ? ` (and ${this.list.length - 1} more)` : '';
    const detail = first === undefined ? 'invalid request' : `${first.field}: ${first.message}${more}`;
    return new PunctualError('invalid_argument', detail, this.list.slice());
  }

  throwIfAny(): void {
    if (!this.ok) throw this.toError();
  }
}

/** `a` + `b` -> `a.b`; the root has no prefix. */
export function fieldAt(prefix: string, key: string): string {
  return prefix === '' ? key : `${prefix}.${key}`;
}

export type JsonObject = Record<string, unknown>;

export function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function readObject(value: unknown, field: string, issues: Issues): JsonObject | undefined {
  if (isObject(value)) return value;
  return issues.add(field || 'body', 'must be a JSON object');
}

/** Unknown fields are rejected by name: a typo (`delay` for `delay_ms`) must not be silently ignored. */
export function onlyKeys(obj: JsonObject, allowed: readonly string[], prefix: string, issues: Issues): void {
  for (const key of Object.keys(obj)) {
    if (!allowed.includes(key)) issues.add(fieldAt(prefix, key), 'unknown field');
  }
}

export function readInt(value: unknown, field: string, min: number, max: number, issues: Issues): number | undefined {
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) return issues.add(field, 'must be an integer');
  if (value < min || value > max) return issues.add(field, `must be between ${min} and ${max}`);
  return value;
}

export function readNumber(value: unknown, field: string, min: number, max: number, issues: Issues): number | undefined {
  if (typeof value !== 'number' || !Number.isFinite(value)) return issues.add(field, 'must be a number');
  if (value < min || value > max) return issues.add(field, `must be between ${min} and ${max}`);
  return value;
}

export function readBool(value: unknown, field: string, issues: Issues): boolean | undefined {
  if (typeof value !== 'boolean') return issues.add(field, 'must be true or false');
  return value;
}

export function readString(value: unknown, field: string, maxLength: number, issues: Issues): string | undefined {
  if (typeof value !== 'string') return issues.add(field, 'must be a string');
  if (value.length === 0) return issues.add(field, 'must not be empty');
  if (value.length > maxLength) return issues.add(field, `must be at most ${maxLength} characters`);
  return value;
}

export function readPattern(value: unknown, field: string, pattern: RegExp, what: string, issues: Issues): string | undefined {
  if (typeof value !== 'string') return issues.add(field, 'must be a string');
  if (!pattern.test(value)) return issues.add(field, `must match ${what}`);
  return value;
}

export function readEnum<T extends string>(value: unknown, field: string, values: readonly T[], issues: Issues): T | undefined {
  if (typeof value === 'string' && (values as readonly string[]).includes(value)) return value as T;
  return issues.add(field, `must be one of ${values.join(', ')}`);
}

/** A time: RFC 3339 with any offset, or an integer of epoch ms. */
export function readTime(value: unknown, field: string, issues: Issues): number | undefined {
  if (typeof value === 'number') return readInt(value, field, timeMsMin, timeMsMax, issues);
  if (typeof value !== 'string') return issues.add(field, 'must be an RFC 3339 time or epoch milliseconds');
  const parsed = parseRfc3339(value);
  return typeof parsed === 'string' ? issues.add(field, parsed) : parsed;
}

/**
 * Deepest nesting of arrays and objects a request body may have (the body itself is level 1). JSON.parse copes
 * with any depth, but the recursive steps after it (JSON.stringify, the canonical digest, the store's encoder)
 * overflow the stack on a 1 MiB body of `[[[[...`, which was a 500. Protobuf's JSON mapping stops at 100 too.
 * (Kept here rather than in src/core/limits.ts, which has another helper's uncommitted work in progress.)
 */
export const jsonDepthMax = 100;

/** The nesting depth of a parsed JSON value (scalars 0), counted without recursion; stops once over `max`. */
export function jsonDepthOver(value: unknown, max: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 0]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (typeof v !== 'object' || v === null) continue;
    if (depth + 1 > max) return true;
    for (const child of Array.isArray(v) ? v : Object.values(v)) {
      if (typeof child === 'object' && child !== null) stack.push([child, depth + 1]);
    }
  }
  return false;
}

export function utf8Length(text: string): number {
  return Buffer.byteLength(text, 'utf8');
}

const base64Pattern = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** Strict base64 (RFC 4648 section 4, padded, no whitespace, canonical trailing bits). */
export function readBase64(value: unknown, field: string, issues: Issues): Uint8Array | undefined {
  if (typeof value !== 'string') return issues.add(field, 'must be a base64 string');
  if (!base64Pattern.test(value)) return issues.add(field, 'must be strict base64 (A-Z a-z 0-9 + /, padded with =)');
  const bytes = Buffer.from(value, 'base64');
  if (bytes.toString('base64') !== value) return issues.add(field, 'must be canonical base64 (non-zero padding bits)');
  return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

export const nonFiniteNumberMessage = 'a number beyond the range of a double (about 1.8e308): it would be stored as null';

/**
 * The JSON path of the first number in `value` beyond a double's range, or null: JSON.parse reads `1e400` as
 * Infinity, which JSON.stringify writes as `null`, so a payload or metadata holding one would silently change.
 * `text` is JSON.stringify(value): without a `null` in it there is none, and the value is not walked (submit).
 */
export function nonFiniteNumberIn(value: unknown, text: string, path: string): string | null {
  return text.includes('null') ? nonFiniteNumberAt(value, path) : null;
}

function nonFiniteNumberAt(value: unknown, path: string): string | null {
  if (typeof value === 'number') return Number.isFinite(value) ? null : path;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const at = nonFiniteNumberAt(value[i], `${path}[${i}]`);
      if (at !== null) return at;
    }
    return null;
  }
  if (isObject(value)) {
    for (const [key, item] of Object.entries(value)) {
      const at = nonFiniteNumberAt(item, fieldAt(path, key));
      if (at !== null) return at;
    }
  }
  return null;
}
