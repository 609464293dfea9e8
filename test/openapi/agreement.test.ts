/**
 * The document never refuses what the node accepts: random bodies near the edges of every field (nulls, bounds,
 * any-case values, both time forms, unknown keys, wrong types) go through the node's parsers and through ajv with
 * the document's request schema; whatever a parser accepts, the schema accepts. (The converse does not hold by
 * design: what a schema cannot say, such as a cron that never matches, is refused by the node after the shape.)
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseCalendarBody, parseTaskBody } from '../../src/http/parse.js';
import { parseJob, parsePatch, parsePreview } from '../../src/http/parse-job.js';
import { findOperation, validatorOf } from './document.js';

const nowMs = Date.UTC(2026, 11, 1, 9);
const runs = { numRuns: 400, seed: 1414 };

/** Absent (the key left out), null, or a value. */
function maybe<T>(arb: fc.Arbitrary<T>): fc.Arbitrary<T | null | undefined> {
  return fc.oneof({ weight: 2, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constant(null) }, { weight: 4, arbitrary: arb });
}

/** Mostly good values, sometimes bad ones: enough bodies pass the parser to say something about the schema. */
function edge<T, U>(good: fc.Arbitrary<T>, bad: fc.Arbitrary<U>): fc.Arbitrary<T | U> {
  return fc.oneof({ weight: 12, arbitrary: good }, { weight: 1, arbitrary: bad });
}

/** A record whose undefined values are dropped (the key absent). */
function body(fields: Record<string, fc.Arbitrary<unknown>>, extra = true): fc.Arbitrary<Record<string, unknown>> {
  const withExtra = extra ? { ...fields, zz_unknown: fc.oneof({ weight: 9, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constant(1) }) } : fields;
  return fc.record(withExtra).map((r) => Object.fromEntries(Object.entries(r).filter(([, v]) => v !== undefined)));
}

const int = (min: number, max: number) => edge(fc.oneof(fc.integer({ min, max }), fc.constantFrom(min, max)), fc.constantFrom(min - 1, max + 1, 1.5, '5'));
const time = edge(
  fc.oneof(fc.constantFrom('2027-01-04T09:00:00+01:00', '2027-01-04t09:00:00.123456z', '2030-06-01T00:00:00Z'), fc.integer({ min: 0, max: 253_402_300_799_999 })),
  fc.constantFrom('2027-02-30T00:00:00Z', '2027-01-04', 'soon', '1767225600000', -1),
);
const pick = <T, U>(good: T[], bad: U[]) => edge(fc.constantFrom(...good), fc.constantFrom(...bad));
const wrongType = fc.constantFrom(true, [], 'x', 3);
const rarely = <T>(arb: fc.Arbitrary<T>) => edge(arb, wrongType);

const schedule = fc.oneof(
  { weight: 1, arbitrary: fc.constant(null) },
  fc.constant({}),
  body({ at: time }),
  body({ delay_ms: int(0, 10_000_000) }),
  body({
    cron: pick(['0 9 * * *', '0 30 9 * * MON-FRI', '@daily'], ['not cron', '', '0 0 30 2 *']),
    timezone: maybe(pick(['UTC', 'Europe/Berlin', 'europe/berlin'], ['Mars/Olympus'])),
    start_at: maybe(time),
    dst: maybe(rarely(body({ gap: maybe(pick(['skip', 'shift_forward'], ['x'])), repeat: maybe(fc.constantFrom('first', 'last', 'both')) }))),
    spread_ms: maybe(int(1, 3_600_000)),
    exclude: maybe(pick([['c1'], ['c1', 'c2']], [[], ['a', 'a'], ['bad name'], 'c1'])),
  }),
  body({ every_ms: int(10, 1_000_000), start_at: maybe(time), spread_ms: maybe(int(1, 1000)), spread_offset_ms: maybe(fc.constantFrom(5, 'x')) }),
  { weight: 1, arbitrary: body({ at: time, delay_ms: fc.constant(5) }) },
  { weight: 1, arbitrary: wrongType },
);

const callback = rarely(
  body({
    url: maybe(pick(['https://example.com/hook', 'HTTP://Example.COM:80/a b'], ['ftp://x/', '/rel', 'https://u:p@x/', 'https:x'])),
    method: maybe(pick(['post', 'GET', 'Put'], ['TRACE', 7])),
    headers: maybe(rarely(fc.dictionary(fc.constantFrom('X-A', 'x-a', 'content-type', 'X-B', 'host', 'bad name', 'X-Punctual-X'), pick(['v', ' padded '], ['a\nb', 1]), { maxKeys: 3 }))),
    timeout_ms: maybe(int(1, 900_000)),
    retry: maybe(rarely(body({ max_attempts: maybe(int(1, 100)), initial_backoff_ms: maybe(int(0, 5000)), max_backoff_ms: maybe(int(0, 5000)), multiplier: maybe(pick([1, 2.5, 10], [0.5, 11])), jitter: maybe(pick([true, false], ['yes'])) }))),
    signing_secret: maybe(pick(['a-secret-of-16-bytes', `whsec_${Buffer.alloc(16, 7).toString('base64')}`], ['short', '***', 'whsec_***', ''])),
    signing_secret_next: maybe(fc.constantFrom('b-secret-of-16-bytes', 'a-secret-of-16-bytes')),
    max_concurrency: maybe(int(1, 10_000)),
  }),
);

const metadata = maybe(rarely(fc.dictionary(fc.string({ maxLength: 5 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 })));
const payloadParts = {
  payload: fc.oneof({ weight: 3, arbitrary: fc.constant(undefined) }, { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 2 }) }),
  payload_base64: maybe(pick(['AAEC', ''], ['abc', 'YR==', 'YW Jj', 3])),
};

const target = fc.oneof(
  { weight: 4, arbitrary: body({ task: pick(['t1'], ['a/b']) }, false) },
  { weight: 4, arbitrary: body({ callback }, false) },
  { weight: 1, arbitrary: body({ task: maybe(fc.constant('t1')), callback: maybe(callback) }, false) },
);
const job = fc.tuple(target, body({
  id: maybe(pick(['job-1', 'a:b.c_d', 'x'.repeat(128)], ['bad id', '', 'x'.repeat(129)])),
  ...payloadParts,
  schedule: maybe(schedule),
  end_at: maybe(time),
  max_runs: maybe(int(0, 10)),
  misfire: maybe(pick(['fire_once', 'skip', 'fire_all'], ['FIRE_ONCE'])),
  overlap: maybe(pick(['allow', 'skip', 'buffer_one'], ['queue'])),
  misfire_threshold_ms: maybe(int(1000, 86_400_000)),
  metadata,
})).map(([t, rest]) => ({ ...t, ...rest }));

function accepts(parse: () => unknown): boolean {
  try {
    parse();
    return true;
  } catch {
    return false;
  }
}

function schemaOf(method: string, path: string) {
  return validatorOf(findOperation(method, path)!.op.requestBody.content['application/json'].schema);
}

/** Runs the property and counts how many bodies the parser accepted (a property that accepts nothing proves nothing). */
function agree(arb: fc.Arbitrary<unknown>, parse: (b: unknown) => unknown, validate: (b: unknown) => boolean): number {
  let accepted = 0;
  fc.assert(
    fc.property(arb, (b) => {
      if (!accepts(() => parse(b))) return true;
      accepted++;
      return validate(b);
    }),
    runs,
  );
  return accepted;
}

describe('what the node accepts, the document accepts', () => {
  it('job bodies (POST /v1/jobs): callback, schedule, payload and every option', () => {
    const valid = schemaOf('POST', '/v1/jobs');
    const accepted = agree(job, (b) => parseJob(b, '', { nowMs, idempotencyKey: null, batchIndex: null }), (b) => valid(b));
    expect(accepted).toBeGreaterThan(20);
  });

  it('task bodies (PUT /v1/tasks/{name})', () => {
    const valid = schemaOf('PUT', '/v1/tasks/t');
    expect(agree(callback, (b) => parseTaskBody(b), (b) => valid(b))).toBeGreaterThan(20);
  });

  it('patches, previews and calendars', () => {
    const patch = body({ schedule: maybe(schedule), ...payloadParts, metadata, misfire_threshold_ms: maybe(int(1000, 86_400_000)) });
    const patchValid = schemaOf('PATCH', '/v1/jobs/j');
    expect(agree(patch, (b) => parsePatch(b, nowMs), (b) => patchValid(b))).toBeGreaterThan(20);
    const preview = body({ schedule: maybe(schedule), from: maybe(time), count: maybe(int(1, 1000)), id: maybe(pick(['report-7'], ['bad id'])) });
    const previewValid = schemaOf('POST', '/v1/schedules:preview');
    expect(agree(preview, (b) => parsePreview(b, nowMs), (b) => previewValid(b))).toBeGreaterThan(20);
    const date = pick(['2027-12-25', '0001-01-01', '2028-02-29'], ['2027-02-30', '27-12-25', 5]);
    const calendar = body({
      timezone: maybe(pick(['UTC', 'Asia/Tokyo'], ['Nowhere/Zone'])),
      dates: maybe(rarely(fc.array(date, { maxLength: 3 }))),
      ranges: maybe(rarely(fc.array(body({ from: date, to: date }, false), { maxLength: 2 }))),
      description: maybe(pick(['Christmas'], ['', 7])),
    });
    const calendarValid = schemaOf('PUT', '/v1/calendars/c');
    expect(agree(calendar, (b) => parseCalendarBody(b, 'c'), (b) => calendarValid(b))).toBeGreaterThan(20);
  });
});
