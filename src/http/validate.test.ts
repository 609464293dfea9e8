/**
 * Every bad input of docs/api.md, one test each: the answer is 400 (or the stated status),
 * application/problem+json, code invalid_argument, and `errors` names the field as a JSON path.
 */
import { describe, expect, it } from 'vitest';
import { limits } from '../core/limits.js';
import { call, makeHarness } from './testing/harness.js';
import { jsonDepthMax } from './validate.js';

const cb = { url: 'https://example.com/hook' };
const job = (extra: Record<string, unknown>): Record<string, unknown> => ({ callback: cb, ...extra });
const withCallback = (extra: Record<string, unknown>): Record<string, unknown> => ({ callback: { ...cb, ...extra } });

/** [case, body, field]: POST /v1/jobs must answer 400 invalid_argument naming `field`. */
const badJobs: Array<[string, unknown, string]> = [
  ['array body', [1, 2], 'body'],
  ['string body', '"hello"', 'body'],
  ['null body', 'null', 'body'],
  ['unknown top-level field', job({ delay: 5 }), 'delay'],
  ['id with a space', job({ id: 'a b' }), 'id'],
  ['id too long', job({ id: 'x'.repeat(limits.jobIdLengthMax + 1) }), 'id'],
  ['id not a string', job({ id: 42 }), 'id'],
  ['neither task nor callback', { schedule: {} }, 'task'],
  ['both task and callback', job({ task: 't' }), 'task'],
  ['bad task name', { task: 'a/b' }, 'task'],
  ['schedule not an object', job({ schedule: 'now' }), 'schedule'],
  ['schedule with two kinds', job({ schedule: { at: 0, delay_ms: 5 } }), 'schedule'],
  ['unknown schedule field', job({ schedule: { delay: 5 } }), 'schedule.delay'],
  ['at: free text', job({ schedule: { at: 'tomorrow' } }), 'schedule.at'],
  ['at: no offset', job({ schedule: { at: '2026-12-01T09:00:00' } }), 'schedule.at'],
  ['at: date only', job({ schedule: { at: '2026-12-01' } }), 'schedule.at'],
  ['at: February 30', job({ schedule: { at: '2026-02-30T09:00:00Z' } }), 'schedule.at'],
  ['at: hour 24', job({ schedule: { at: '2026-12-01T24:00:00Z' } }), 'schedule.at'],
  ['at: leap second', job({ schedule: { at: '2026-12-31T23:59:60Z' } }), 'schedule.at'],
  ['at: fractional epoch ms', job({ schedule: { at: 1.5 } }), 'schedule.at'],
  ['at: negative epoch ms', job({ schedule: { at: -1 } }), 'schedule.at'],
  ['at: numeric string', job({ schedule: { at: '1767225600000' } }), 'schedule.at'],
  ['delay_ms negative', job({ schedule: { delay_ms: -1 } }), 'schedule.delay_ms'],
  ['delay_ms fractional', job({ schedule: { delay_ms: 1.5 } }), 'schedule.delay_ms'],
  ['delay_ms as a string', job({ schedule: { delay_ms: '5000' } }), 'schedule.delay_ms'],
  ['cron: not an expression', job({ schedule: { cron: 'every day' } }), 'schedule.cron'],
  ['cron: 7 fields', job({ schedule: { cron: '0 0 9 * * * 2027' } }), 'schedule.cron'],
  ['cron: out-of-range minute', job({ schedule: { cron: '61 * * * *' } }), 'schedule.cron'],
  ['cron: empty', job({ schedule: { cron: '' } }), 'schedule.cron'],
  ['cron: unknown time zone', job({ schedule: { cron: '0 9 * * *', timezone: 'Mars/Olympus' } }), 'schedule.timezone'],
  ['timezone without cron', job({ schedule: { at: 0, timezone: 'UTC' } }), 'schedule.timezone'],
  ['every_ms below the minimum', job({ schedule: { every_ms: limits.everyMsMin - 1 } }), 'schedule.every_ms'],
  ['every_ms above the maximum', job({ schedule: { every_ms: limits.everyMsMax + 1 } }), 'schedule.every_ms'],
  ['every_ms fractional', job({ schedule: { every_ms: 100.5 } }), 'schedule.every_ms'],
  ['every_ms start_at invalid', job({ schedule: { every_ms: 1000, start_at: 'soon' } }), 'schedule.start_at'],
  ['start_at with at', job({ schedule: { at: 0, start_at: 0 } }), 'schedule.start_at'],
  ['callback not an object', job({ callback: 'https://example.com' }), 'callback'],
  ['callback without url', { callback: { method: 'POST' } }, 'callback.url'],
  ['url relative', withCallback({ url: '/hook' }), 'callback.url'],
  ['url ftp', withCallback({ url: 'ftp://example.com/x' }), 'callback.url'],
  ['url too long', withCallback({ url: 'https://example.com/' + 'a'.repeat(limits.urlLengthMax) }), 'callback.url'],
  ['url with leading spaces', withCallback({ url: '  https://example.com/' }), 'callback.url'],
  ['url without //', withCallback({ url: 'https:example.com' }), 'callback.url'],
  ['url with credentials', withCallback({ url: 'https://u:p@example.com/' }), 'callback.url'],
  ['url not a string', withCallback({ url: 7 }), 'callback.url'],
  ['unknown callback field', withCallback({ body: 'x' }), 'callback.body'],
  ['method TRACE', withCallback({ method: 'TRACE' }), 'callback.method'],
  ['method not a string', withCallback({ method: 1 }), 'callback.method'],
  ['headers not an object', withCallback({ headers: ['a'] }), 'callback.headers'],
  ['header value not a string', withCallback({ headers: { 'x-a': 1 } }), 'callback.headers.x-a'],
  ['header value with a newline', withCallback({ headers: { 'x-a': 'a\r\nb: c' } }), 'callback.headers.x-a'],
  ['header name invalid', withCallback({ headers: { 'bad name': 'v' } }), 'callback.headers.bad name'],
  ['hop-by-hop header', withCallback({ headers: { Connection: 'close' } }), 'callback.headers.Connection'],
  ['transfer-encoding header', withCallback({ headers: { 'transfer-encoding': 'chunked' } }), 'callback.headers.transfer-encoding'],
  ['host header', withCallback({ headers: { host: 'x' } }), 'callback.headers.host'],
  ['X-Punctual-* header', withCallback({ headers: { 'X-Punctual-Job-Id': 'x' } }), 'callback.headers.X-Punctual-Job-Id'],
  ['X-Deduplication-Key header', withCallback({ headers: { 'x-deduplication-key': 'x' } }), 'callback.headers.x-deduplication-key'],
  ['header given twice (case)', withCallback({ headers: { 'X-A': '1', 'x-a': '2' } }), 'callback.headers.x-a'],
  [
    'too many headers',
    withCallback({ headers: Object.fromEntries(Array.from({ length: limits.callbackHeadersMax + 1 }, (_, i) => [`x-h${i}`, 'v'])) }),
    'callback.headers',
  ],
  ['headers too large', withCallback({ headers: { 'x-big': 'v'.repeat(limits.callbackHeaderBytesMax) } }), 'callback.headers'],
  ['timeout_ms zero', withCallback({ timeout_ms: 0 }), 'callback.timeout_ms'],
  ['timeout_ms too large', withCallback({ timeout_ms: limits.callbackTimeoutMsMax + 1 }), 'callback.timeout_ms'],
  ['retry not an object', withCallback({ retry: 3 }), 'callback.retry'],
  ['retry unknown field', withCallback({ retry: { attempts: 3 } }), 'callback.retry.attempts'],
  ['retry.max_attempts zero', withCallback({ retry: { max_attempts: 0 } }), 'callback.retry.max_attempts'],
  ['retry.max_attempts too many', withCallback({ retry: { max_attempts: limits.retryMaxAttemptsMax + 1 } }), 'callback.retry.max_attempts'],
  ['retry.initial_backoff_ms negative', withCallback({ retry: { initial_backoff_ms: -1 } }), 'callback.retry.initial_backoff_ms'],
  ['retry.max_backoff_ms below initial', withCallback({ retry: { initial_backoff_ms: 5000, max_backoff_ms: 1000 } }), 'callback.retry.max_backoff_ms'],
  ['retry.multiplier below 1', withCallback({ retry: { multiplier: 0.5 } }), 'callback.retry.multiplier'],
  ['retry.jitter not a boolean', withCallback({ retry: { jitter: 'yes' } }), 'callback.retry.jitter'],
  ['signing_secret empty', withCallback({ signing_secret: '' }), 'callback.signing_secret'],
  ['signing_secret is the redaction', withCallback({ signing_secret: '***' }), 'callback.signing_secret'],
  ['signing_secret too long', withCallback({ signing_secret: 's'.repeat(limits.signingSecretBytesMax + 1) }), 'callback.signing_secret'],
  ['signing_secret shorter than 16 bytes', withCallback({ signing_secret: 'a'.repeat(limits.signingSecretBytesMin - 1) }), 'callback.signing_secret'],
  ['signing_secret whsec_ not base64', withCallback({ signing_secret: 'whsec_not*base64-at-all!!' }), 'callback.signing_secret'],
  ['signing_secret whsec_ under 16 decoded bytes', withCallback({ signing_secret: 'whsec_' + Buffer.alloc(15, 1).toString('base64') }), 'callback.signing_secret'],
  ['signing_secret_next shorter than 16 bytes', withCallback({ signing_secret: 'a'.repeat(16), signing_secret_next: 'short' }), 'callback.signing_secret_next'],
  ['signing_secret_next without signing_secret', withCallback({ signing_secret_next: 'b'.repeat(16) }), 'callback.signing_secret_next'],
  ['signing_secret_next equal to signing_secret', withCallback({ signing_secret: 'a'.repeat(16), signing_secret_next: 'a'.repeat(16) }), 'callback.signing_secret_next'],
  ['signing_secret_next is the redaction', withCallback({ signing_secret: 'a'.repeat(16), signing_secret_next: '***' }), 'callback.signing_secret_next'],
  ['header webhook-signature', withCallback({ headers: { 'Webhook-Signature': 'v1,x' } }), 'callback.headers.Webhook-Signature'],
  ['max_concurrency zero', withCallback({ max_concurrency: 0 }), 'callback.max_concurrency'],
  ['max_concurrency too high', withCallback({ max_concurrency: limits.maxConcurrencyMax + 1 }), 'callback.max_concurrency'],
  ['payload and payload_base64', job({ payload: 1, payload_base64: 'AA==' }), 'payload'],
  ['payload_base64 unpadded', job({ payload_base64: 'abc' }), 'payload_base64'],
  ['payload_base64 url alphabet', job({ payload_base64: 'ab-_' }), 'payload_base64'],
  ['payload_base64 with whitespace', job({ payload_base64: 'YW Jj' }), 'payload_base64'],
  ['payload_base64 non-canonical bits', job({ payload_base64: 'YR==' }), 'payload_base64'],
  ['payload_base64 not a string', job({ payload_base64: 12 }), 'payload_base64'],
  ['payload too large', job({ payload: 'x'.repeat(limits.payloadBytesMax) }), 'payload'],
  ['payload_base64 too large', job({ payload_base64: Buffer.alloc(limits.payloadBytesMax + 1).toString('base64') }), 'payload_base64'],
  ['end_at invalid', job({ schedule: { every_ms: 1000 }, end_at: 'never' }), 'end_at'],
  ['end_at before start_at', job({ schedule: { every_ms: 1000, start_at: 2000 }, end_at: 1000 }), 'end_at'],
  ['max_runs negative', job({ max_runs: -1 }), 'max_runs'],
  ['max_runs fractional', job({ max_runs: 1.5 }), 'max_runs'],
  ['misfire unknown', job({ misfire: 'fire_twice' }), 'misfire'],
  ['overlap unknown', job({ overlap: 'queue' }), 'overlap'],
  ['misfire_threshold_ms below 1 s', job({ misfire_threshold_ms: 999 }), 'misfire_threshold_ms'],
  ['misfire_threshold_ms above 1 day', job({ misfire_threshold_ms: 86_400_001 }), 'misfire_threshold_ms'],
  ['misfire_threshold_ms not an integer', job({ misfire_threshold_ms: '5000' }), 'misfire_threshold_ms'],
  ['end_at in the past with every_ms from now', job({ schedule: { every_ms: 1000 }, end_at: 1000 }), 'end_at'],
  ['metadata an array', job({ metadata: [1] }), 'metadata'],
  ['metadata a string', job({ metadata: 'labels' }), 'metadata'],
  ['cron first occurring after 9999', job({ schedule: { cron: '0 0 1 1 *', start_at: '9999-06-01T00:00:00Z' } }), 'schedule'],
  ['metadata with a __proto__ key', JSON.stringify(job({ metadata: { labels: 'x' } })).replace('"labels"', '"__proto__"'), 'metadata'],
  ['metadata with a nested __proto__ key', JSON.stringify(job({ metadata: { a: [{ labels: 1 }] } })).replace('"labels"', '"__proto__"'), 'metadata'],
  ['header named __proto__', JSON.stringify(withCallback({ headers: { 'x-a': 'v' } })).replace('"x-a"', '"__proto__"'), 'callback.headers.__proto__'],
  ['metadata over 4 KiB', job({ metadata: { labels: 'x'.repeat(limits.metadataBytesMax) } }), 'metadata'],
];

function expectInvalid(res: { status: number; headers: Record<string, string>; json: any }, field: string): void {
  expect(res.status).toBe(400);
  expect(res.headers['content-type']).toBe('application/problem+json');
  expect(res.json.code).toBe('invalid_argument');
  expect(res.json.errors.map((e: { field: string }) => e.field)).toContain(field);
}

describe('POST /v1/jobs validation', () => {
  it.each(badJobs)('%s -> 400 on %j', async (_name, body, field) => {
    const { app, api } = makeHarness();
    const res = await call(app, 'POST', '/v1/jobs', body);
    expectInvalid(res, field);
    expect(api.created).toEqual([]); // nothing reached the node
  });

  it('malformed JSON -> 400 on body', async () => {
    const { app } = makeHarness();
    expectInvalid(await call(app, 'POST', '/v1/jobs', '{"callback": '), 'body');
  });

  it('empty body -> 400 on body', async () => {
    const { app } = makeHarness();
    expectInvalid(await call(app, 'POST', '/v1/jobs'), 'body');
  });

  it('invalid UTF-8 -> 400 on body', async () => {
    const { app } = makeHarness();
    const res = await app.handle({ method: 'POST', path: '/v1/jobs', headers: {}, body: new Uint8Array([0x7b, 0xff, 0x7d]) });
    expect(res.status).toBe(400);
    expect(JSON.parse(res.body as string).errors[0].field).toBe('body');
  });

  it(`JSON nested deeper than ${jsonDepthMax} levels -> 400 on body (it was a stack overflow, 500)`, async () => {
    const { app } = makeHarness();
    const n = 100_000;
    for (const field of ['payload', 'metadata']) {
      const text = `{"callback":{"url":"https://example.com/"},"${field}":${'['.repeat(n)}${']'.repeat(n)}}`;
      expectInvalid(await call(app, 'POST', '/v1/jobs', text), 'body');
    }
    const deep = (levels: number): unknown => (levels === 0 ? 1 : [deep(levels - 1)]);
    // The body is level 1, so a payload may nest jsonDepthMax - 1 levels.
    const ok = await call(app, 'POST', '/v1/jobs', { callback: cb, payload: deep(jsonDepthMax - 1) });
    expect(ok.status).toBe(201);
    expectInvalid(await call(app, 'POST', '/v1/jobs', { callback: cb, payload: deep(jsonDepthMax) }), 'body');
    expectInvalid(await call(app, 'POST', '/v1/jobs:batch', { jobs: [{ callback: cb, payload: deep(jsonDepthMax) }] }), 'body');
  });

  it('Idempotency-Key too long -> 400 on Idempotency-Key', async () => {
    const { app } = makeHarness();
    const res = await call(app, 'POST', '/v1/jobs', job({}), { 'Idempotency-Key': 'k'.repeat(256) });
    expectInvalid(res, 'Idempotency-Key');
  });

  it('names every bad field of one body at once', async () => {
    const { app } = makeHarness();
    const res = await call(app, 'POST', '/v1/jobs', { callback: { url: 'nope' }, schedule: { delay_ms: -1 }, misfire: 'x' });
    expect(res.json.errors.map((e: { field: string }) => e.field).sort()).toEqual(['callback.url', 'misfire', 'schedule.delay_ms']);
    expect(res.json.detail).toMatch(/and 2 more/);
  });
});

describe('callback target policy at submit (SSRF guard)', () => {
  // The node passes its TargetPolicy's check; here a stand-in that refuses one literal address.
  const urlCheck = (url: string): string | null =>
    new URL(url).hostname === '169.254.169.254' ? 'callback target 169.254.169.254 refused by policy (link-local 169.254.0.0/16)' : null;

  it('a refused literal address is a 400 on the url field, for a job, a batch item and a task; nothing is stored', async () => {
    const { app, api } = makeHarness({ callbackUrlCheck: urlCheck });
    const bad = { url: 'http://169.254.169.254/latest/meta-data/' };
    const res = await call(app, 'POST', '/v1/jobs', { callback: bad });
    expectInvalid(res, 'callback.url');
    expect(res.json.errors[0].message).toBe('callback target 169.254.169.254 refused by policy (link-local 169.254.0.0/16)');
    const batch = await call(app, 'POST', '/v1/jobs:batch', { jobs: [{ callback: cb }, { callback: bad }] });
    expect(batch.status).toBe(200);
    expect(batch.json.results[1].error.errors[0].field).toBe('jobs[1].callback.url');
    expectInvalid(await call(app, 'PUT', '/v1/tasks/t', bad), 'url');
    expect(api.created.flat().map((j) => j.callback?.url)).toEqual(['https://example.com/hook']);
    expect((await call(app, 'GET', '/v1/tasks/t')).status).toBe(404);
  });

  it('accepts and redacts a rotation pair; both secrets survive a task round trip', async () => {
    const { app, api } = makeHarness();
    const next = 'whsec_' + Buffer.alloc(32, 7).toString('base64');
    const put = await call(app, 'PUT', '/v1/tasks/t', { url: 'https://example.com/', signing_secret: 'current-secret-16b', signing_secret_next: next });
    expect(put.status).toBe(201);
    expect(put.json).toMatchObject({ signing_secret: '***', signing_secret_next: '***' });
    expect(JSON.stringify(put.json)).not.toContain('current-secret-16b');
    const stored = await api.getTask('t');
    expect(stored).toMatchObject({ signingSecret: 'current-secret-16b', signingSecretNext: next });
    const plain = await call(app, 'PUT', '/v1/tasks/u', { url: 'https://example.com/', signing_secret: 'current-secret-16b' });
    expect(plain.json).not.toHaveProperty('signing_secret_next');
  });
});

describe('POST /v1/jobs:batch validation', () => {
  it('jobs not an array -> 400 on jobs', async () => {
    const { app } = makeHarness();
    expectInvalid(await call(app, 'POST', '/v1/jobs:batch', { jobs: {} }), 'jobs');
  });

  it('unknown top-level field -> 400 on it', async () => {
    const { app } = makeHarness();
    expectInvalid(await call(app, 'POST', '/v1/jobs:batch', { jobs: [], atomic: true }), 'atomic');
  });

  it(`more than ${limits.batchJobsMax} jobs -> 400 on jobs (the byte limit is the 413)`, async () => {
    const { app, api } = makeHarness();
    const jobs = Array.from({ length: limits.batchJobsMax + 1 }, () => ({}));
    expectInvalid(await call(app, 'POST', '/v1/jobs:batch', { jobs }), 'jobs');
    expect(api.created).toEqual([]);
  });

  it('one bad item fails alone, with its field path, in input order', async () => {
    const { app, api } = makeHarness();
    const jobs = [job({ id: 'a' }), job({ id: 'b', schedule: { cron: 'nope' } }), job({ id: 'c' }), 'not a job'];
    const res = await call(app, 'POST', '/v1/jobs:batch', { jobs });
    expect(res.status).toBe(200);
    const results = res.json.results;
    expect(results.map((r: { id: string | null; status: number }) => [r.id, r.status])).toEqual([
      ['a', 201],
      ['b', 400],
      ['c', 201],
      [null, 400],
    ]);
    expect(results[1].error.code).toBe('invalid_argument');
    expect(results[1].error.errors[0].field).toBe('jobs[1].schedule.cron');
    expect(results[3].error.errors[0].field).toBe('jobs[3]');
    expect(results[0].error).toBeUndefined();
    expect(api.created).toHaveLength(1);
    expect(api.created[0]!.map((s) => s.id)).toEqual(['a', 'c']);
  });
});

describe('other bodies and queries', () => {
  const cases: Array<[string, string, string, unknown, string]> = [
    ['PATCH unknown field', 'PATCH', '/v1/jobs/j1', { state: 'PAUSED' }, 'state'],
    ['PATCH bad schedule', 'PATCH', '/v1/jobs/j1', { schedule: { at: 'x' } }, 'schedule.at'],
    ['PATCH schedule first occurring after 9999', 'PATCH', '/v1/jobs/j1', { schedule: { cron: '0 0 1 1 *', start_at: '9999-06-01T00:00:00Z' } }, 'schedule'],
    ['PATCH metadata not an object', 'PATCH', '/v1/jobs/j1', { metadata: 3 }, 'metadata'],
    ['PATCH misfire_threshold_ms out of bounds', 'PATCH', '/v1/jobs/j1', { misfire_threshold_ms: 0 }, 'misfire_threshold_ms'],
    ['PATCH bad job id in path', 'PATCH', '/v1/jobs/a%20b', { metadata: null }, 'id'],
    ['preview count 0', 'POST', '/v1/schedules:preview', { count: 0 }, 'count'],
    ['preview count over max', 'POST', '/v1/schedules:preview', { count: limits.previewCountMax + 1 }, 'count'],
    ['preview bad from', 'POST', '/v1/schedules:preview', { from: 'yesterday' }, 'from'],
    ['preview bad cron', 'POST', '/v1/schedules:preview', { schedule: { cron: '* * *' } }, 'schedule.cron'],
    ['preview unknown field', 'POST', '/v1/schedules:preview', { limit: 3 }, 'limit'],
    ['PUT task without url', 'PUT', '/v1/tasks/t1', { method: 'POST' }, 'url'],
    ['PUT task unknown field', 'PUT', '/v1/tasks/t1', { url: 'https://e.com', created_at: 0 }, 'created_at'],
    ['PUT task bad name', 'PUT', '/v1/tasks/a%20b', { url: 'https://e.com' }, 'name'],
    ['PUT task not an object', 'PUT', '/v1/tasks/t1', [1], 'body'],
    ['PUT task retry bad', 'PUT', '/v1/tasks/t1', { url: 'https://e.com', retry: { jitter: 1 } }, 'retry.jitter'],
    ['transfer bad shard', 'POST', '/v1/cluster/shards/x/transfer-leader', { to: 'n2' }, 'shard'],
    ['transfer bad node id', 'POST', '/v1/cluster/shards/1/transfer-leader', { to: 'N 2' }, 'to'],
    ['transfer without body', 'POST', '/v1/cluster/shards/1/transfer-leader', undefined, 'body'],
    ['GET job bad id', 'GET', '/v1/jobs/' + 'x'.repeat(129), undefined, 'id'],
    ['list bad state', 'GET', '/v1/jobs?state=DONE', undefined, 'state'],
    ['list limit 0', 'GET', '/v1/jobs?limit=0', undefined, 'limit'],
    ['list limit too high', 'GET', `/v1/jobs?limit=${limits.listLimitMax + 1}`, undefined, 'limit'],
    ['list limit not a number', 'GET', '/v1/jobs?limit=ten', undefined, 'limit'],
    ['list bad task', 'GET', '/v1/jobs?task=a%2Fb', undefined, 'task'],
    ['list unknown parameter', 'GET', '/v1/jobs?status=PENDING', undefined, 'status'],
    ['list cursor too long', 'GET', '/v1/jobs?cursor=' + 'c'.repeat(1025), undefined, 'cursor'],
    ['tasks list with a parameter', 'GET', '/v1/tasks?limit=5', undefined, 'limit'],
    ['executions limit bad', 'GET', '/v1/jobs/j1/executions?limit=-1', undefined, 'limit'],
    ['executions unknown parameter', 'GET', '/v1/jobs/j1/executions?state=x', undefined, 'state'],
    ['malformed percent-encoding', 'GET', '/v1/jobs/%E0%A4%A', undefined, 'path'],
  ];
  it.each(cases)('%s -> 400 on %s', async (_name, method, path, body, field) => {
    const { app, api } = makeHarness();
    await call(app, 'POST', '/v1/jobs', job({ id: 'j1' }));
    expectInvalid(await call(app, method, path, body), field);
    expect(api.jobs.get('j1')!.state).toBe('PENDING');
  });
});
