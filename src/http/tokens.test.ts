/** Tokens and scopes: the file format, every bad line named, and what each scope may do through the app. */
import { describe, expect, it } from 'vitest';
import { call, makeHarness } from './testing/harness.js';
import { TokenSet, parseTokensFile } from './tokens.js';

const admin = 'admin-token-0123456789';
const reader = 'read-token-0123456789';
const writer = 'write-token-0123456789';
const ops = 'ops-token-0123456789';

describe('parseTokensFile', () => {
  it('NAME SCOPE TOKEN per line; blank lines and # comments ignored; spaces and tabs separate', () => {
    const text = `# CI and the dashboard\n\ndashboard read ${reader}\n  ci\twrite   ${writer}  \r\nops admin ${ops}\n`;
    expect(parseTokensFile(text)).toEqual([
      { name: 'dashboard', scope: 'read', token: reader },
      { name: 'ci', scope: 'write', token: writer },
      { name: 'ops', scope: 'admin', token: ops },
    ]);
    expect(parseTokensFile('# nothing yet\n')).toEqual([]);
  });

  it.each([
    ['two fields', `ci ${writer}`, 'line 1: expected NAME SCOPE TOKEN, got 2 fields'],
    ['four fields', `ci write ${writer} extra`, 'line 1: expected NAME SCOPE TOKEN, got 4 fields'],
    ['unknown scope', `ci root ${writer}`, 'line 1: scope must be read, write or admin, got "root"'],
    ['short token', 'ci write 0123456789abcde', 'line 1: token shorter than 16 bytes'],
    ['bad name', `c/i write ${writer}`, 'line 1: name must match'],
    ['duplicate name', `ci write ${writer}\nci read ${reader}`, 'line 2: duplicate name "ci"'],
    ['duplicate token', `ci write ${writer}\nbot read ${writer}`, 'line 2: the same token as an earlier line'],
  ])('%s is refused, naming the line', (_name, text, message) => {
    expect(() => parseTokensFile(text)).toThrow(message);
    try {
      parseTokensFile(text);
    } catch (err) {
      expect((err as Error).message).not.toContain(writer); // a secret never lands in an error message
    }
  });
});

describe('scopes through the app', () => {
  const tokens = (): TokenSet =>
    new TokenSet(admin, [
      { name: 'dashboard', scope: 'read', token: reader },
      { name: 'ci', scope: 'write', token: writer },
      { name: 'ops', scope: 'admin', token: ops },
    ]);
  const bearer = (t: string) => ({ authorization: `Bearer ${t}` });
  const job = { id: 'j1', callback: { url: 'http://127.0.0.1:9/hook' }, schedule: { delay_ms: 60_000 } };
  const task = { url: 'http://127.0.0.1:9/hook' };
  const preview = { schedule: { cron: '0 * * * *' }, from: '2027-01-01T00:00:00Z', count: 2 };

  it('read: every GET, nothing else (403 forbidden naming the scope needed)', async () => {
    const { app } = makeHarness({ authToken: admin, tokens: tokens() });
    expect((await call(app, 'GET', '/v1/jobs', undefined, bearer(reader))).status).toBe(200);
    expect((await call(app, 'GET', '/v1/tasks', undefined, bearer(reader))).status).toBe(200);
    expect((await call(app, 'GET', '/v1/cluster', undefined, bearer(reader))).status).toBe(200);
    const denied = await call(app, 'POST', '/v1/jobs', job, bearer(reader));
    expect(denied.status).toBe(403);
    expect(denied.headers['content-type']).toBe('application/problem+json');
    expect(denied.json).toMatchObject({ status: 403, code: 'forbidden' });
    expect(denied.json.detail).toContain('needs write');
    expect((await call(app, 'POST', '/v1/schedules:preview', preview, bearer(reader))).status).toBe(403);
  });

  it('write: job writes and preview, not tasks nor cluster operations (admin)', async () => {
    const { app, api } = makeHarness({ authToken: admin, tokens: tokens() });
    await call(app, 'PUT', '/v1/tasks/t1', task, bearer(admin));
    expect((await call(app, 'POST', '/v1/jobs', job, bearer(writer))).status).toBe(201);
    expect((await call(app, 'POST', '/v1/jobs/j1/pause', undefined, bearer(writer))).status).toBe(200);
    expect((await call(app, 'POST', '/v1/jobs/j1/resume', undefined, bearer(writer))).status).toBe(200);
    expect((await call(app, 'PATCH', '/v1/jobs/j1', { metadata: { a: 1 } }, bearer(writer))).status).toBe(200);
    expect((await call(app, 'POST', '/v1/jobs:batch', { jobs: [{ ...job, id: 'j2' }] }, bearer(writer))).status).toBe(200);
    expect((await call(app, 'DELETE', '/v1/jobs/j2', undefined, bearer(writer))).status).toBe(200);
    expect((await call(app, 'POST', '/v1/schedules:preview', preview, bearer(writer))).status).toBe(200);
    const taskWrite = await call(app, 'PUT', '/v1/tasks/t2', task, bearer(writer));
    expect(taskWrite.status).toBe(403);
    expect(taskWrite.json.detail).toContain('needs admin');
    expect((await call(app, 'DELETE', '/v1/tasks/t1', undefined, bearer(writer))).status).toBe(403);
    expect((await call(app, 'POST', '/v1/cluster/shards/0/transfer-leader', { to: 'n2' }, bearer(writer))).status).toBe(403);
    expect((await call(app, 'POST', '/v1/cluster/nodes', { id: 'n4', peer_addr: '127.0.0.1:9' }, bearer(writer))).status).toBe(403);
    expect((await call(app, 'DELETE', '/v1/cluster/nodes/n3', undefined, bearer(writer))).status).toBe(403);
    expect(api.tasks.has('t2')).toBe(false);
  });

  it('admin (the file or --auth-token): everything; an unknown token is 401', async () => {
    const { app } = makeHarness({ authToken: admin, tokens: tokens() });
    expect((await call(app, 'PUT', '/v1/tasks/t1', task, bearer(ops))).status).toBe(201);
    expect((await call(app, 'PUT', '/v1/tasks/t1', task, bearer(admin))).status).toBe(200);
    // the memory api has no leader transfer: 503 means the scope let it through
    expect((await call(app, 'POST', '/v1/cluster/shards/0/transfer-leader', { to: 'n2' }, bearer(ops))).status).toBe(503);
    expect((await call(app, 'GET', '/v1/jobs', undefined, bearer('not-a-token-0123456789'))).status).toBe(401);
  });

  it('/metrics with metricsAuth needs read; healthz never needs a token', async () => {
    const { app } = makeHarness({ authToken: admin, tokens: tokens(), metricsAuth: true });
    expect((await call(app, 'GET', '/metrics')).status).toBe(401);
    expect((await call(app, 'GET', '/metrics', undefined, bearer(reader))).status).toBe(200);
    expect((await call(app, 'GET', '/healthz')).status).toBe(200);
  });

  it('a new file set replaces the old at once (SIGHUP): a removed token is refused, a new one works', async () => {
    const set = tokens();
    const { app } = makeHarness({ authToken: admin, tokens: set });
    expect((await call(app, 'GET', '/v1/jobs', undefined, bearer(reader))).status).toBe(200);
    set.replaceFileTokens([{ name: 'dashboard-2', scope: 'read', token: 'read-token-rotated-0123' }]);
    expect((await call(app, 'GET', '/v1/jobs', undefined, bearer(reader))).status).toBe(401);
    expect((await call(app, 'GET', '/v1/jobs', undefined, bearer('read-token-rotated-0123'))).status).toBe(200);
    expect((await call(app, 'GET', '/v1/jobs', undefined, bearer(admin))).status).toBe(200); // --auth-token stays
  });

  it('every write leaves an access log line with the token name, method, path, status and duration; reads do not', async () => {
    const { app, logs } = makeHarness({ authToken: admin, tokens: tokens() });
    await call(app, 'PUT', '/v1/tasks/t1', task, bearer(admin));
    await call(app, 'POST', '/v1/jobs', job, bearer(writer));
    await call(app, 'POST', '/v1/jobs', job, bearer(reader));
    await call(app, 'POST', '/v1/jobs', job);
    await call(app, 'GET', '/v1/jobs', undefined, bearer(reader));
    const access = logs.map((l) => JSON.parse(l)).filter((l) => l.msg === 'access');
    expect(access.map((l) => [l.method, l.path, l.status, l.token])).toEqual([
      ['PUT', '/v1/tasks/t1', 201, 'auth-token'],
      ['POST', '/v1/jobs', 201, 'ci'],
      ['POST', '/v1/jobs', 403, 'dashboard'],
      ['POST', '/v1/jobs', 401, null],
    ]);
    for (const l of access) {
      expect(l.level).toBe('info');
      expect(typeof l.duration_ms).toBe('number');
    }
    expect(logs.join('\n')).not.toContain(writer);
  });
});
