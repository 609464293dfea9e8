/**
 * The CLI end to end: commands run in-process through buildProgram/run with buffered io; client commands talk
 * to a real node:http server on 127.0.0.1 that answers like docs/api.md (a fixture for these tests, recording every
 * request); the built executable runs as a real process for --version and exit codes.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runCli, type CliResult } from './cli-fixture.js';
import { resolveServeConfig } from './serve.js';
import { buildCommit } from './version.js';
import { spreadOffsetOf } from '../src/scheduler/schedule.js';

const cli = (argv: string[], env: Record<string, string> = {}): Promise<CliResult> => runCli(argv, env);

const tmp = mkdtempSync(join(tmpdir(), 'punctual-cli-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function file(name: string, text: string): string {
  const path = join(tmp, name);
  writeFileSync(path, text);
  return path;
}

async function config(argv: string[], env: Record<string, string> = {}): Promise<Record<string, unknown>> {
  const r = await cli(['serve', '--check-config', ...argv], env);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout) as Record<string, unknown>;
}

describe('serve: flags and env', () => {
  it('uses the defaults of docs/cli.md', async () => {
    expect(await config([])).toEqual({
      listenHost: '127.0.0.1',
      listenPort: 8080,
      dataDir: resolve('./punctual-data'),
      nodeId: 'n1',
      peerListenHost: '127.0.0.1',
      peerListenPort: 8081,
      peers: [],
      shards: 8,
      authToken: null,
      clusterSecret: null,
      fsync: 'batch',
      logLevel: 'info',
      logFormat: 'json',
      metricsAuth: false,
      clockOffsetMs: 0,
      join: false,
      tlsCertFile: null,
      tlsKeyFile: null,
      authTokensFile: null,
      retentionMs: 7 * 24 * 60 * 60 * 1000,
      retentionExecutions: 100,
    });
  });

  it('reads every flag', async () => {
    const c = await config([
      '--listen', '0.0.0.0:8001', '--data', join(tmp, 'd1'), '--node-id', 'node-1', '--peer-listen', '[::1]:9001',
      '--peers', 'n2=127.0.0.1:9002,n3=localhost:9003', '--shards', '1024', '--auth-token', 'tok-0123456789abcdef',
      '--cluster-secret', 'sec-0123456789abcdef', '--fsync', 'always', '--log-level', 'debug', '--log-format', 'pretty',
      '--metrics-auth', '--join', '--retention', '36h', '--retention-executions', '7',
    ]); // prettier-ignore
    expect(c).toEqual({
      listenHost: '0.0.0.0',
      listenPort: 8001,
      dataDir: join(tmp, 'd1'),
      nodeId: 'node-1',
      peerListenHost: '::1',
      peerListenPort: 9001,
      peers: [
        { id: 'n2', host: '127.0.0.1', port: 9002 },
        { id: 'n3', host: 'localhost', port: 9003 },
      ],
      shards: 1024,
      authToken: '<redacted, 20 chars>',
      clusterSecret: '<redacted, 20 chars>',
      fsync: 'always',
      logLevel: 'debug',
      logFormat: 'pretty',
      metricsAuth: true,
      clockOffsetMs: 0,
      join: true,
      tlsCertFile: null,
      tlsKeyFile: null,
      authTokensFile: null,
      retentionMs: 36 * 60 * 60 * 1000,
      retentionExecutions: 7,
    });
  });

  it('--retention takes a duration with a unit, or off; anything else is a usage error', async () => {
    expect((await config(['--retention', '90s'])).retentionMs).toBe(90_000);
    expect(await config(['--retention', '1000ms', '--retention-executions', '1'])).toMatchObject({ retentionMs: 1000, retentionExecutions: 1 });
    expect((await config(['--retention', 'off'])).retentionMs).toBeNull();
    expect((await config([], { PUNCTUAL_RETENTION: '2d' })).retentionMs).toBe(2 * 86_400_000);
    for (const bad of ['7', '7w', '-1d', '1.5h', '0s']) {
      const r = await cli(['serve', '--check-config', '--retention', bad]);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/--retention: must be a duration/);
    }
    const r = await cli(['serve', '--check-config', '--retention-executions', '0']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--retention-executions/);
  });

  it('--firing-thread on|off (absent: not in the config, the node runs the thread); anything else is a usage error', async () => {
    expect((await config([])).firingThread).toBeUndefined();
    expect((await config(['--firing-thread', 'off'])).firingThread).toBe(false);
    expect((await config(['--firing-thread', 'on'])).firingThread).toBe(true);
    expect((await config([], { PUNCTUAL_FIRING_THREAD: 'off' })).firingThread).toBe(false);
    expect((await config(['--firing-thread', 'on'], { PUNCTUAL_FIRING_THREAD: 'off' })).firingThread).toBe(true);
    const r = await cli(['serve', '--check-config', '--firing-thread', 'yes']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--firing-thread/);
  });

  it('--stage-lead-ms 0..1000 (absent: not in the config, the default applies); out of range is a usage error', async () => {
    expect((await config([])).stageLeadMs).toBeUndefined();
    expect((await config(['--stage-lead-ms', '0'])).stageLeadMs).toBe(0);
    expect((await config(['--stage-lead-ms', '250'])).stageLeadMs).toBe(250);
    expect((await config([], { PUNCTUAL_STAGE_LEAD_MS: '20' })).stageLeadMs).toBe(20);
    for (const bad of ['-1', '1001', '5ms']) {
      const r = await cli(['serve', '--check-config', '--stage-lead-ms', bad]);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/--stage-lead-ms/);
    }
  });

  it('reads PUNCTUAL_<FLAG_IN_CAPS> env vars, and a flag wins over its env var', async () => {
    const env = {
      PUNCTUAL_LISTEN: '127.0.0.1:7000',
      PUNCTUAL_NODE_ID: 'env-node',
      PUNCTUAL_PEER_LISTEN: '127.0.0.1:7001',
      PUNCTUAL_PEERS: 'n9=127.0.0.1:7009',
      PUNCTUAL_SHARDS: '3',
      PUNCTUAL_FSYNC: 'off',
      PUNCTUAL_LOG_LEVEL: 'warn',
      PUNCTUAL_LOG_FORMAT: 'pretty',
      PUNCTUAL_DATA: join(tmp, 'env-data'),
      PUNCTUAL_AUTH_TOKEN_FILE: file('token', 'from-file-token-0123\n'),
      PUNCTUAL_CLUSTER_SECRET: 'env-secret-012345678',
      PUNCTUAL_METRICS_AUTH: 'true',
      PUNCTUAL_JOIN: 'true',
    };
    const fromEnv = await config([], env);
    expect(fromEnv).toMatchObject({
      listenPort: 7000,
      nodeId: 'env-node',
      peerListenPort: 7001,
      peers: [{ id: 'n9', host: '127.0.0.1', port: 7009 }],
      shards: 3,
      fsync: 'off',
      logLevel: 'warn',
      logFormat: 'pretty',
      dataDir: join(tmp, 'env-data'),
      authToken: '<redacted, 20 chars>',
      clusterSecret: '<redacted, 20 chars>',
      metricsAuth: true,
      join: true,
    });
    const flagged = await config(['--node-id', 'flag-node', '--shards', '5', '--auth-token', 'flag-0123456789abcdef'], env);
    expect(flagged).toMatchObject({ nodeId: 'flag-node', shards: 5, authToken: '<redacted, 21 chars>', listenPort: 7000 });
  });

  it('--clock manual with --clock-start as RFC 3339 or epoch ms; the system clock by default', async () => {
    expect(await config(['--clock', 'manual'])).toMatchObject({ clock: 'manual', clockStartMs: null });
    expect(await config(['--clock', 'manual', '--clock-start', '2027-03-01T10:00:00+01:00'])).toMatchObject({ clock: 'manual', clockStartMs: Date.UTC(2027, 2, 1, 9) });
    expect(await config([], { PUNCTUAL_CLOCK: 'manual', PUNCTUAL_CLOCK_START: '1800000000000' })).toMatchObject({ clock: 'manual', clockStartMs: 1_800_000_000_000 });
    expect(await config(['--clock', 'system'])).not.toHaveProperty('clock');
  });

  it('the clock offset is a test knob: PUNCTUAL_TEST_CLOCK_OFFSET_MS counts only with PUNCTUAL_TEST_MODE=1', async () => {
    expect(await config([], { PUNCTUAL_TEST_CLOCK_OFFSET_MS: '1000' })).toMatchObject({ clockOffsetMs: 0 });
    expect(await config([], { PUNCTUAL_TEST_MODE: '1', PUNCTUAL_TEST_CLOCK_OFFSET_MS: '-250' })).toMatchObject({ clockOffsetMs: -250 });
  });

  it('reads secrets from files without their trailing newline; an empty env var counts as unset', () => {
    const c = resolveServeConfig(
      { authTokenFile: file('t2', 's3cret-0123456789\r\n'), clusterSecretFile: file('c2', 'cluster-key-0123456789') },
      { PUNCTUAL_NODE_ID: '', PUNCTUAL_AUTH_TOKEN: 'ignored-because-the-flag-wins' },
    );
    expect(c.authToken).toBe('s3cret-0123456789');
    expect(c.clusterSecret).toBe('cluster-key-0123456789');
    expect(c.nodeId).toBe('n1');
  });

  it('accepts port 0 for the listeners (tests pick a free port) and a bracketed IPv6 host', async () => {
    const c = await config(['--listen', '127.0.0.1:0', '--peer-listen', '127.0.0.1:0']);
    expect(c).toMatchObject({ listenPort: 0, peerListenPort: 0 });
  });

  const missing = join(tmp, 'does-not-exist');
  const badConfigs: Array<[string, string[], Record<string, string>, string]> = [
    ['listen without port', ['--listen', '127.0.0.1'], {}, '--listen: expected HOST:PORT'],
    ['listen port too big', ['--listen', '127.0.0.1:70000'], {}, '--listen: port must be in 0..65535'],
    ['listen bad host', ['--listen', 'bad_host!:80'], {}, '--listen: invalid host'],
    ['listen bad IPv6', ['--listen', '[::zz]:80'], {}, '--listen: invalid host'],
    ['listen bad IPv4', ['--listen', '999.0.0.1:80'], {}, '--listen: invalid host'],
    ['peer-listen garbage', ['--peer-listen', 'nope'], {}, '--peer-listen: expected HOST:PORT'],
    ['listen equals peer-listen', ['--listen', '127.0.0.1:9000', '--peer-listen', '127.0.0.1:9000'], {}, 'must differ'],
    ['node id upper case', ['--node-id', 'N1'], {}, '--node-id: node id must match [a-z0-9-]{1,32}'],
    ['node id too long', ['--node-id', 'a'.repeat(33)], {}, '--node-id: node id must match'],
    ['node id from env', [], { PUNCTUAL_NODE_ID: 'bad id' }, 'PUNCTUAL_NODE_ID: node id must match'],
    ['peer without =', ['--peers', 'n2:127.0.0.1:9002'], {}, '--peers: expected ID=HOST:PORT'],
    ['peer bad id', ['--peers', 'N2=127.0.0.1:9002'], {}, '--peers: node id must match'],
    ['peer bad address', ['--peers', 'n2=127.0.0.1'], {}, '--peers (n2): expected HOST:PORT'],
    ['peer port 0', ['--peers', 'n2=127.0.0.1:0'], {}, '--peers (n2): port must be in 1..65535'],
    ['peer empty entry', ['--peers', 'n2=127.0.0.1:9002,'], {}, '--peers: empty entry'],
    ['peer from env names the env var', [], { PUNCTUAL_PEERS: 'n2=127.0.0.1' }, 'PUNCTUAL_PEERS (n2): expected HOST:PORT'],
    ['self in env peers', [], { PUNCTUAL_PEERS: 'n1=127.0.0.1:9002' }, "PUNCTUAL_PEERS: lists this node's own id"],
    ['duplicate peer id', ['--peers', 'n2=127.0.0.1:9002,n2=127.0.0.1:9003'], {}, '--peers: duplicate node id "n2"'],
    ['duplicate peer address', ['--peers', 'n2=127.0.0.1:9002,n3=127.0.0.1:9002'], {}, '--peers: duplicate address'],
    ['self in peers', ['--node-id', 'n1', '--peers', 'n1=127.0.0.1:9002'], {}, "--peers: lists this node's own id"],
    ['shards 0', ['--shards', '0'], {}, '--shards: must be in 1..1024, got 0'],
    ['shards 1025', ['--shards', '1025'], {}, '--shards: must be in 1..1024, got 1025'],
    ['shards not a number', ['--shards', 'many'], {}, '--shards: expected an integer'],
    ['shards fraction', ['--shards', '1.5'], {}, '--shards: expected an integer'],
    ['shards from env', [], { PUNCTUAL_SHARDS: '0' }, 'PUNCTUAL_SHARDS: must be in 1..1024'],
    ['token file missing', ['--auth-token-file', missing], {}, '--auth-token-file: cannot read'],
    ['token file empty', ['--auth-token-file', file('empty', '\n')], {}, '--auth-token-file: ' + JSON.stringify(join(tmp, 'empty')) + ' is empty'],
    ['token file of two lines', ['--auth-token-file', file('two', 'a\nb\n')], {}, 'must hold one line'],
    ['token env file missing', [], { PUNCTUAL_AUTH_TOKEN_FILE: missing }, 'PUNCTUAL_AUTH_TOKEN_FILE: cannot read'],
    ['token and token file', ['--auth-token', 'x', '--auth-token-file', file('t3', 'y')], {}, '--auth-token and --auth-token-file are mutually exclusive'],
    ['token env and token file env', [], { PUNCTUAL_AUTH_TOKEN: 'x', PUNCTUAL_AUTH_TOKEN_FILE: file('t4', 'y') }, 'PUNCTUAL_AUTH_TOKEN and PUNCTUAL_AUTH_TOKEN_FILE are mutually exclusive'],
    ['empty token', ['--auth-token', ''], {}, '--auth-token: must not be empty'],
    ['cluster secret file missing', ['--cluster-secret-file', missing], {}, '--cluster-secret-file: cannot read'],
    ['cluster secret file empty', ['--cluster-secret-file', file('empty2', '')], {}, 'is empty'],
    ['secret and secret file', ['--cluster-secret', 'x', '--cluster-secret-file', file('c3', 'y')], {}, 'mutually exclusive'],
    ['fsync enum', ['--fsync', 'sometimes'], {}, '--fsync: must be one of always|batch|off, got "sometimes"'],
    ['fsync env enum', [], { PUNCTUAL_FSYNC: 'never' }, 'PUNCTUAL_FSYNC: must be one of always|batch|off'],
    ['log level', ['--log-level', 'trace'], {}, '--log-level: must be one of debug|info|warn|error'],
    ['log format', ['--log-format', 'xml'], {}, '--log-format: must be one of json|pretty'],
    ['metrics auth without token', ['--metrics-auth'], {}, '--metrics-auth needs an auth token'],
    ['auth token shorter than 16 bytes', ['--auth-token', 'fifteen-bytes!!'], {}, '--auth-token: must be at least 16 bytes (got 15)'],
    ['auth token file shorter than 16 bytes', ['--auth-token-file', file('short', 'short\n')], {}, '--auth-token-file: must be at least 16 bytes (got 5)'],
    ['cluster secret shorter than 16 bytes', [], { PUNCTUAL_CLUSTER_SECRET: 'right' }, 'PUNCTUAL_CLUSTER_SECRET: must be at least 16 bytes'],
    ['tls cert without key', ['--tls-cert-file', file('cert-only', 'x')], {}, '--tls-cert-file and --tls-key-file go together'],
    ['tls key from env without cert', [], { PUNCTUAL_TLS_KEY_FILE: file('key-only', 'x') }, '--tls-cert-file and --tls-key-file go together'],
    ['tls files that are not PEM', ['--tls-cert-file', file('c.pem', 'x'), '--tls-key-file', file('k.pem', 'y')], {}, 'not a usable PEM certificate and key'],
    ['tls cert missing', ['--tls-cert-file', missing, '--tls-key-file', file('k2.pem', 'y')], {}, '--tls-cert-file: cannot read'],
    ['tokens file bad scope', ['--auth-tokens-file', file('tok1', '# ci\nci read 0123456789abcdef\nops root 0123456789abcdeg\n')], {}, 'line 3: scope must be read, write or admin'],
    ['tokens file short token', [], { PUNCTUAL_AUTH_TOKENS_FILE: file('tok2', 'ci read short\n') }, 'PUNCTUAL_AUTH_TOKENS_FILE: ' + JSON.stringify(join(tmp, 'tok2')) + ': line 1: token shorter than 16 bytes'],
    ['tokens file two fields', ['--auth-tokens-file', file('tok3', '\nci 0123456789abcdef\n')], {}, 'line 2: expected NAME SCOPE TOKEN'],
    ['tokens file missing', ['--auth-tokens-file', missing], {}, '--auth-tokens-file: ' + JSON.stringify(missing) + ': cannot read'],
    ['join without peers', ['--join'], {}, '--join needs --peers'],
    ['metrics auth env not a bool', [], { PUNCTUAL_METRICS_AUTH: 'maybe' }, 'PUNCTUAL_METRICS_AUTH: expected true|false|1|0|yes|no, got "maybe"'],
    ['the clock offset is no product flag', ['--clock-offset-ms', '250'], {}, "unknown option '--clock-offset-ms'"],
    ['test clock offset not an integer', [], { PUNCTUAL_TEST_MODE: '1', PUNCTUAL_TEST_CLOCK_OFFSET_MS: 'soon' }, 'PUNCTUAL_TEST_CLOCK_OFFSET_MS: expected an integer'],
    ['manual clock with peers', ['--clock', 'manual', '--peers', 'n2=127.0.0.1:9002', '--cluster-secret', 'sec-0123456789abcdef'], {}, '--clock manual runs a single node only'],
    ['manual clock with peers from env', [], { PUNCTUAL_CLOCK: 'manual', PUNCTUAL_PEERS: 'n2=127.0.0.1:9002' }, '--clock manual runs a single node only'],
    ['unknown clock', ['--clock', 'sundial'], {}, '--clock: must be one of system|manual'],
    ['clock start without a manual clock', ['--clock-start', '2027-03-01T00:00:00Z'], {}, '--clock-start: needs --clock manual'],
    ['clock start not a time', ['--clock', 'manual', '--clock-start', 'tomorrow'], {}, '--clock-start: must be an RFC 3339 time'],
    ['unknown flag', ['--nope'], {}, "unknown option '--nope'"],
    ['flag without value', ['--shards'], {}, "option '--shards <n>' argument missing"],
  ]; // prettier-ignore

  it.each(badConfigs)('%s: one line on stderr, exit 2, nothing started', async (_name, argv, env, reason) => {
    const r = await cli(['serve', ...argv], env);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr.startsWith('punctual: ')).toBe(true);
    expect(r.stderr.endsWith('\n')).toBe(true);
    expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain(reason);
  });
});

describe('program', () => {
  it('--version prints the package version and a commit', async () => {
    const r = await cli(['--version'], { PUNCTUAL_BUILD_COMMIT: 'ABCDEF0123456789abcdef' });
    expect(r).toEqual({ stdout: 'punctual 0.1.0 (abcdef012345)\n', stderr: '', code: 0 });
    const fallback = await cli(['--version']);
    expect(fallback.stdout).toMatch(/^punctual 0\.1\.0 \(([0-9a-f]{12}|unknown)\)\n$/);
  });

  it('--help lists the command groups, exit 0', async () => {
    const r = await cli(['--help']);
    expect(r.code).toBe(0);
    for (const c of ['serve', 'job', 'task', 'cluster', 'bench']) expect(r.stdout).toContain(c);
  });

  it('no command, or a group without its subcommand, is bad usage: exit 2', async () => {
    expect((await cli([])).code).toBe(2);
    expect((await cli(['job'])).code).toBe(2);
    const r = await cli(['jbo']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("punctual: unknown command 'jbo'");
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Client commands against a real HTTP server on 127.0.0.1 that answers like docs/api.md.

interface Recorded {
  method: string;
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body: unknown;
}

interface Reply {
  status: number;
  body?: unknown;
  /** Sent as is instead of JSON (for a proxy's HTML error page). */
  raw?: string;
  contentType?: string;
}

type Route = (req: Recorded) => Reply;

const job = {
  id: 'j1',
  task: 'send-email',
  schedule: { cron: '0 9 * * MON-FRI', timezone: 'Europe/Berlin' },
  state: 'PENDING',
  next_fire_at: '2026-12-01T08:00:00.000Z',
  created_at: '2026-11-30T10:00:00.000Z',
  updated_at: '2026-11-30T10:00:00.000Z',
  runs: 0,
  shard: 5,
  last_execution: null,
};

const execution = {
  id: 'j1:1796112000000',
  scheduled_at: '2026-12-01T08:00:00.000Z',
  attempt: 2,
  state: 'FAILED',
  started_at: '2026-12-01T08:00:00.001Z',
  finished_at: '2026-12-01T08:00:00.120Z',
  status_code: 500,
  error: 'HTTP 500',
  lateness_ms: 1,
  node_id: 'n2',
};

const task = {
  name: 'send-email',
  url: 'https://example.com/hooks/email',
  method: 'POST',
  headers: {},
  timeout_ms: 10000,
  retry: { max_attempts: 5, initial_backoff_ms: 1000, max_backoff_ms: 60000, multiplier: 2, jitter: true },
  max_concurrency: 100,
  created_at: '2026-11-30T10:00:00.000Z',
  updated_at: '2026-11-30T10:00:00.000Z',
};

let server: Server;
let base = '';
let requests: Recorded[] = [];
let route: Route = () => ({ status: 404, body: { code: 'not_found', detail: 'no route in this test' } });

beforeAll(async () => {
  server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const rec: Recorded = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: text === '' ? undefined : JSON.parse(text) };
      requests.push(rec);
      const reply = route(rec);
      if (reply.raw !== undefined) {
        res.writeHead(reply.status, { 'content-type': reply.contentType ?? 'text/html' }).end(reply.raw);
        return;
      }
      const type = reply.status >= 400 ? 'application/problem+json' : 'application/json';
      if (reply.body === undefined) res.writeHead(reply.status).end();
      else res.writeHead(reply.status, { 'content-type': type }).end(JSON.stringify(reply.body));
    });
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise<void>((ok) => server.close(() => ok()));
});

afterEach(() => {
  requests = [];
  route = () => ({ status: 404, body: { code: 'not_found', detail: 'no route in this test' } });
});

/** Runs a client command against the fixture server. */
function client(argv: string[], env: Record<string, string> = {}): Promise<CliResult> {
  return cli([...argv, '--server', base], env);
}

describe('job add', () => {
  it('sends a task job with payload, cron schedule, id, metadata, idempotency key and bearer token', async () => {
    route = () => ({ status: 201, body: job });
    const r = await client([
      'job', 'add', '--task', 'send-email', '--payload', '{"to":"a@b.c"}', '--cron', '0 9 * * MON-FRI',
      '--timezone', 'Europe/Berlin', '--id', 'j1', '--metadata', '{"team":"x"}', '--idempotency-key', 'k-1',
      '--misfire', 'skip', '--overlap', 'buffer_one', '--max-runs', '10', '--end-at', '2027-01-01T00:00:00+01:00',
      '--misfire-threshold-ms', '60000', '--token', 's3cret',
    ]); // prettier-ignore
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(requests).toHaveLength(1);
    const req = requests[0];
    expect(req.method).toBe('POST');
    expect(req.url).toBe('/v1/jobs');
    expect(req.headers.authorization).toBe('Bearer s3cret');
    expect(req.headers['idempotency-key']).toBe('k-1');
    expect(req.headers['content-type']).toBe('application/json');
    expect(req.body).toEqual({
      id: 'j1',
      task: 'send-email',
      payload: { to: 'a@b.c' },
      schedule: { cron: '0 9 * * MON-FRI', timezone: 'Europe/Berlin' },
      end_at: '2027-01-01T00:00:00+01:00',
      max_runs: 10,
      misfire: 'skip',
      misfire_threshold_ms: 60_000,
      overlap: 'buffer_one',
      metadata: { team: 'x' },
    });
    expect(r.stdout).toBe(
      [
        'id:                j1',
        'task:              send-email',
        'schedule.cron:     0 9 * * MON-FRI',
        'schedule.timezone: Europe/Berlin',
        'state:             PENDING',
        'next_fire_at:      2026-12-01T08:00:00.000Z',
        'created_at:        2026-11-30T10:00:00.000Z',
        'updated_at:        2026-11-30T10:00:00.000Z',
        'runs:              0',
        'shard:             5',
        'last_execution:    -',
      ].join('\n') + '\n',
    );
  });

  it('sends an inline callback with every callback flag, base64 payload and an every_ms schedule; --json', async () => {
    route = () => ({ status: 201, body: { ...job, task: null } });
    const r = await client([
      'job', 'add', '--url', 'http://127.0.0.1:9999/hook', '--method', 'put', '--header', 'X-Team: ops',
      '--header', 'content-type:text/plain', '--timeout-ms', '2500', '--max-attempts', '3',
      '--payload-base64', 'aGVsbG8=', '--every-ms', '60000', '--start-at', '1796112000000', '--json',
    ]); // prettier-ignore
    expect(r.code).toBe(0);
    expect(requests[0].body).toEqual({
      callback: {
        url: 'http://127.0.0.1:9999/hook',
        method: 'PUT',
        headers: { 'x-team': 'ops', 'content-type': 'text/plain' },
        timeout_ms: 2500,
        retry: { max_attempts: 3 },
      },
      payload_base64: 'aGVsbG8=',
      schedule: { every_ms: 60000, start_at: 1796112000000 },
    });
    expect(requests[0].headers.authorization).toBeUndefined();
    expect(JSON.parse(r.stdout)).toEqual({ ...job, task: null });
  });

  it('reads --payload-file, sends --at and --delay-ms schedules, and no schedule means now', async () => {
    route = () => ({ status: 200, body: job });
    await client(['job', 'add', '--task', 't', '--payload-file', file('p.json', '[1,2,3]\n'), '--at', '2026-12-01T09:00:00Z']);
    await client(['job', 'add', '--task', 't', '--delay-ms', '5000']);
    await client(['job', 'add', '--task', 't']);
    expect(requests.map((q) => q.body)).toEqual([
      { task: 't', payload: [1, 2, 3], schedule: { at: '2026-12-01T09:00:00Z' } },
      { task: 't', schedule: { delay_ms: 5000 } },
      { task: 't' },
    ]);
  });

  const badAdds: Array<[string, string[], string]> = [
    ['no target', [], 'give --task NAME or --url URL'],
    ['task and url', ['--task', 't', '--url', 'http://x/'], '--task and --url are mutually exclusive'],
    ['callback flag with task', ['--task', 't', '--header', 'a:b'], '--header: only with --url'],
    ['bad url', ['--url', 'ftp://x/'], '--url: expected an absolute http(s) URL'],
    ['bad method', ['--url', 'http://x/', '--method', 'TRACE'], '--method: must be one of GET|POST|PUT|PATCH|DELETE'],
    ['bad header', ['--url', 'http://x/', '--header', 'no-colon'], '--header: expected NAME:VALUE'],
    ['bad task name', ['--task', 'a b'], '--task: invalid task name'],
    ['bad id', ['--task', 't', '--id', 'a/b'], '--id: must match'],
    ['two payloads', ['--task', 't', '--payload', '1', '--payload-base64', 'AA=='], '--payload and --payload-base64 are mutually exclusive'],
    ['payload not JSON', ['--task', 't', '--payload', '{oops'], '--payload: invalid JSON'],
    ['payload file missing', ['--task', 't', '--payload-file', join(tmp, 'nope.json')], '--payload-file: cannot read'],
    ['bad base64', ['--task', 't', '--payload-base64', 'abc'], '--payload-base64: expected standard base64'],
    ['two schedules', ['--task', 't', '--at', '1', '--cron', '* * * * *'], '--at and --cron are mutually exclusive'],
    ['timezone without cron', ['--task', 't', '--timezone', 'UTC'], '--timezone: only with --cron'],
    ['start-at without every', ['--task', 't', '--start-at', '1'], '--start-at: only with --every-ms'],
    ['bad time', ['--task', 't', '--at', 'tomorrow'], '--at: expected an RFC 3339 time'],
    ['negative delay', ['--task', 't', '--delay-ms', '-5'], '--delay-ms: must be in 0..'],
    ['every too small', ['--task', 't', '--every-ms', '1'], '--every-ms: must be in 10..'],
    ['bad misfire', ['--task', 't', '--misfire', 'sometimes'], '--misfire: must be one of fire_once|skip|fire_all'],
    ['bad overlap', ['--task', 't', '--overlap', 'never'], '--overlap: must be one of allow|skip|buffer_one'],
    ['misfire threshold too small', ['--task', 't', '--misfire-threshold-ms', '10'], '--misfire-threshold-ms: must be in 1000..'],
    ['metadata not an object', ['--task', 't', '--metadata', '[1]'], '--metadata: expected a JSON object'],
    ['max runs negative', ['--task', 't', '--max-runs', '-1'], '--max-runs: must be in 0..'],
    ['timeout 0', ['--url', 'http://x/', '--timeout-ms', '0'], '--timeout-ms: must be in 1..'],
  ]; // prettier-ignore

  it.each(badAdds)('%s: exit 2 with one line, no request sent', async (_name, argv, reason) => {
    const r = await client(['job', 'add', ...argv]);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(`punctual: ${r.stderr.slice('punctual: '.length).trimEnd()}\n`);
    expect(r.stderr).toContain(reason);
    expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
    expect(requests).toHaveLength(0);
  });
});

describe('job get|cancel|pause|resume|run|list|history', () => {
  it('maps each verb to its method and path, escaping the id; an id the API would refuse is bad usage', async () => {
    route = () => ({ status: 200, body: job });
    for (const verb of ['get', 'cancel', 'delete', 'pause', 'resume', 'run', 'history']) {
      const bad = await client(['job', verb, 'a/b c']);
      expect(bad).toEqual({ stdout: '', stderr: 'punctual: job id must match [A-Za-z0-9._:-]{1,128}, got "a/b c"\n', code: 2 });
    }
    expect(requests).toEqual([]);
    for (const verb of ['get', 'cancel', 'delete', 'pause', 'resume', 'run']) {
      const r = await client(['job', verb, 'a:b.c']);
      expect(r.code).toBe(0);
      expect(r.stdout).toContain('id:                j1\n');
    }
    expect(requests.map((q) => `${q.method} ${q.url}`)).toEqual([
      'GET /v1/jobs/a%3Ab.c',
      'POST /v1/jobs/a%3Ab.c/cancel',
      'POST /v1/jobs/a%3Ab.c/cancel',
      'POST /v1/jobs/a%3Ab.c/pause',
      'POST /v1/jobs/a%3Ab.c/resume',
      'POST /v1/jobs/a%3Ab.c/run',
    ]);
  });

  it('run --idempotency-key sends the Idempotency-Key header (a repeat runs once); an empty key is bad usage', async () => {
    route = () => ({ status: 200, body: job });
    const r = await client(['job', 'run', 'j1', '--idempotency-key', 'rerun-2026-12-01']);
    expect(r.code).toBe(0);
    expect(requests[0].url).toBe('/v1/jobs/j1/run');
    expect(requests[0].headers['idempotency-key']).toBe('rerun-2026-12-01');
    const bad = await client(['job', 'run', 'j1', '--idempotency-key', ' ']);
    expect(bad.code).toBe(2);
    expect(requests).toHaveLength(1);
  });

  it('list sends the filters and prints a table and the next cursor', async () => {
    route = () => ({ status: 200, body: { jobs: [job, { ...job, id: 'job-two', task: null, schedule: { every_ms: 500 }, runs: 12 }], next_cursor: 'c2' } });
    const r = await client(['job', 'list', '--state', 'pending', '--task', 'send-email', '--limit', '2']);
    expect(r.code).toBe(0);
    expect(requests[0].method).toBe('GET');
    expect(requests[0].url).toBe('/v1/jobs?state=PENDING&task=send-email&limit=2');
    expect(r.stdout).toBe(
      [
        'ID       TASK        STATE    SCHEDULE                              NEXT FIRE AT              RUNS  SHARD',
        'j1       send-email  PENDING  cron "0 9 * * MON-FRI" Europe/Berlin  2026-12-01T08:00:00.000Z  0     5',
        'job-two  (callback)  PENDING  every 500ms                           2026-12-01T08:00:00.000Z  12    5',
        'next cursor: c2',
      ].join('\n') + '\n',
    );
  });

  it('list --all follows next_cursor to the end; with --json it prints one merged page', async () => {
    route = (q) => {
      const cursor = new URL(q.url, 'http://x').searchParams.get('cursor');
      if (cursor === null) return { status: 200, body: { jobs: [job], next_cursor: 'p2' } };
      if (cursor === 'p2') return { status: 200, body: { jobs: [{ ...job, id: 'j2' }], next_cursor: 'p3' } };
      return { status: 200, body: { jobs: [{ ...job, id: 'j3' }], next_cursor: null } };
    };
    const r = await client(['job', 'list', '--all', '--json']);
    expect(r.code).toBe(0);
    expect(requests.map((q) => q.url)).toEqual(['/v1/jobs', '/v1/jobs?cursor=p2', '/v1/jobs?cursor=p3']);
    const page = JSON.parse(r.stdout) as { jobs: Array<{ id: string }>; next_cursor: null };
    expect(page.jobs.map((j) => j.id)).toEqual(['j1', 'j2', 'j3']);
    expect(page.next_cursor).toBeNull();
  });

  it('list rejects a state that does not exist and a limit over the maximum', async () => {
    expect((await client(['job', 'list', '--state', 'DONE'])).stderr).toContain('--state: must be one of PENDING|');
    expect((await client(['job', 'list', '--limit', '1001'])).stderr).toContain('--limit: must be in 1..1000');
    expect(requests).toHaveLength(0);
  });

  it('history prints the executions table', async () => {
    route = () => ({ status: 200, body: { executions: [execution], next_cursor: null } });
    const r = await client(['job', 'history', 'j1', '--limit', '5', '--cursor', 'c0']);
    expect(requests[0].url).toBe('/v1/jobs/j1/executions?limit=5&cursor=c0');
    expect(r.stdout).toBe(
      [
        'SCHEDULED AT              ATTEMPT  STATE   STATUS  LATENESS MS  NODE  FINISHED AT               ERROR',
        '2026-12-01T08:00:00.000Z  2        FAILED  500     1            n2    2026-12-01T08:00:00.120Z  HTTP 500',
      ].join('\n') + '\n',
    );
  });
});

describe('task put|get|list|delete', () => {
  it('put sends the flags as the task body of docs/api.md', async () => {
    route = () => ({ status: 201, body: task });
    const r = await client([
      'task', 'put', 'send-email', '--url', 'https://example.com/hooks/email', '--method', 'post',
      '--header', 'content-type:application/json', '--timeout-ms', '10000', '--max-attempts', '5',
      '--initial-backoff-ms', '1000', '--max-backoff-ms', '60000', '--multiplier', '1.5', '--no-jitter',
      '--signing-secret', 'current-secret-0123', '--signing-secret-next', 'next-secret-456789',
      '--max-concurrency', '100', '--token', 't0k',
    ]); // prettier-ignore
    expect(r.code).toBe(0);
    expect(requests[0].method).toBe('PUT');
    expect(requests[0].url).toBe('/v1/tasks/send-email');
    expect(requests[0].headers.authorization).toBe('Bearer t0k');
    expect(requests[0].body).toEqual({
      url: 'https://example.com/hooks/email',
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      timeout_ms: 10000,
      retry: { max_attempts: 5, initial_backoff_ms: 1000, max_backoff_ms: 60000, multiplier: 1.5, jitter: false },
      signing_secret: 'current-secret-0123',
      signing_secret_next: 'next-secret-456789',
      max_concurrency: 100,
    });
    expect(r.stdout).toContain('retry.max_attempts:       5\n');
  });

  it('put --file sends the file as the body; with other flags it is bad usage', async () => {
    route = () => ({ status: 200, body: task });
    const body = { url: 'http://127.0.0.1:1/x', retry: { jitter: false } };
    const f = file('task.json', JSON.stringify(body));
    expect((await client(['task', 'put', 'x', '--file', f])).code).toBe(0);
    expect(requests[0].body).toEqual(body);
    const bad = await client(['task', 'put', 'x', '--file', f, '--url', 'http://a/']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toBe('punctual: --file and --url are mutually exclusive\n');
    expect((await client(['task', 'put', 'x'])).stderr).toContain('give --url URL');
    expect((await client(['task', 'put', 'bad name', '--url', 'http://a/'])).code).toBe(2);
    expect(requests).toHaveLength(1);
  });

  it('get, list and delete', async () => {
    route = (q) => {
      if (q.method === 'DELETE') return { status: 204 };
      if (q.url === '/v1/tasks') return { status: 200, body: { tasks: [task] } };
      return { status: 200, body: task };
    };
    expect((await client(['task', 'get', 'send-email'])).stdout).toContain('url:                      https://example.com/hooks/email\n');
    expect((await client(['task', 'list'])).stdout).toBe(
      'NAME        METHOD  URL                              TIMEOUT MS  MAX ATTEMPTS  MAX CONCURRENCY\n' +
        'send-email  POST    https://example.com/hooks/email  10000       5             100\n',
    );
    expect(await client(['task', 'delete', 'send-email'])).toEqual({ stdout: 'deleted task send-email\n', stderr: '', code: 0 });
    expect(await client(['task', 'delete', 'send-email', '--json'])).toEqual({ stdout: '', stderr: '', code: 0 });
    expect(requests.map((q) => `${q.method} ${q.url}`)).toEqual([
      'GET /v1/tasks/send-email',
      'GET /v1/tasks',
      'DELETE /v1/tasks/send-email',
      'DELETE /v1/tasks/send-email',
    ]);
  });
});

describe('cluster status|transfer-leader', () => {
  const view = {
    node_id: 'n1',
    nodes: [{ id: 'n1', peer_addr: '127.0.0.1:9001', api_addr: '127.0.0.1:8001', reachable: true }],
    shards: [{ id: 0, leader: 'n1', term: 3, commit_index: 42, applied_index: 42, members: ['n1'] }],
  };

  it('status prints the nodes and shards; --json the raw view', async () => {
    route = () => ({ status: 200, body: view });
    const r = await client(['cluster', 'status']);
    expect(requests[0].url).toBe('/v1/cluster');
    expect(r.stdout).toContain('node: n1\n');
    expect(r.stdout).toContain('0      n1      3     42      42       n1\n');
    expect(JSON.parse((await client(['cluster', 'status', '--json'])).stdout)).toEqual(view);
  });

  it('transfer-leader posts {to} for the shard', async () => {
    route = () => ({ status: 202 });
    const r = await client(['cluster', 'transfer-leader', '3', '--to', 'n2']);
    expect(r).toEqual({ stdout: 'leadership transfer of shard 3 to n2 requested\n', stderr: '', code: 0 });
    expect(requests[0].method).toBe('POST');
    expect(requests[0].url).toBe('/v1/cluster/shards/3/transfer-leader');
    expect(requests[0].body).toEqual({ to: 'n2' });
    expect((await client(['cluster', 'transfer-leader', '3'])).code).toBe(2); // --to is required
    expect((await client(['cluster', 'transfer-leader', 'x', '--to', 'n2'])).stderr).toContain('<shard>: expected an integer');
    expect(requests).toHaveLength(1);
  });
});

describe('client errors and settings', () => {
  it('an API problem prints `error: <code>: <detail>` and the field errors not already in the detail, exit 1', async () => {
    route = () => ({
      status: 400,
      body: {
        type: 'https://punctual.dev/problems/invalid-argument',
        title: 'Invalid argument',
        status: 400,
        detail: 'schedule.cron: bad cron expression',
        code: 'invalid_argument',
        errors: [
          { field: 'schedule.cron', message: 'bad cron expression' },
          { field: 'metadata', message: 'too large' },
        ],
      },
    });
    const r = await client(['job', 'add', '--task', 't', '--cron', 'x x']);
    expect(r).toEqual({
      stdout: '',
      stderr: 'error: invalid_argument: schedule.cron: bad cron expression\n  metadata: too large\n',
      code: 1,
    });
  });

  it('a 404 and a non-JSON error page are both runtime errors (exit 1)', async () => {
    route = () => ({ status: 404, body: { code: 'not_found', detail: 'job "nope" not found', status: 404 } });
    expect(await client(['job', 'get', 'nope'])).toEqual({ stdout: '', stderr: 'error: not_found: job "nope" not found\n', code: 1 });
    route = () => ({ status: 502, raw: '<html>\n<b>Bad gateway</b></html>' });
    expect((await client(['job', 'get', 'x'])).stderr).toBe('error: http_502: <html> <b>Bad gateway</b></html>\n');
  });

  it('a server that cannot be reached is named, exit 1', async () => {
    const closed = createServer();
    await new Promise<void>((ok) => closed.listen(0, '127.0.0.1', ok));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((ok) => closed.close(() => ok()));
    const r = await cli(['job', 'list', '--server', `http://127.0.0.1:${port}`]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`^punctual: cannot reach server http://127\\.0\\.0\\.1:${port}: .*ECONNREFUSED.*\\n$`));
  });

  it('PUNCTUAL_SERVER and PUNCTUAL_TOKEN are used when the flags are absent; --token wins', async () => {
    route = () => ({ status: 200, body: { tasks: [] } });
    const env = { PUNCTUAL_SERVER: base + '/', PUNCTUAL_TOKEN: 'env-token' };
    expect((await cli(['task', 'list'], env)).code).toBe(0);
    expect((await cli(['task', 'list', '--token', 'flag-token'], env)).code).toBe(0);
    expect(requests.map((q) => q.headers.authorization)).toEqual(['Bearer env-token', 'Bearer flag-token']);
    expect(requests[0].url).toBe('/v1/tasks');
  });

  it('a bad --server is bad usage', async () => {
    expect((await cli(['task', 'list', '--server', 'ftp://x'])).stderr).toBe(
      'punctual: --server: must be an http:// or https:// URL, got "ftp://x"\n',
    );
    expect((await cli(['task', 'list'], { PUNCTUAL_SERVER: 'not a url' })).code).toBe(2);
  });
});

// ---------------------------------------------------------------------------------------------------------------
// The built executable as a real process (npm test builds first).

const root = resolve(fileURLToPath(import.meta.url), '../..');
const bin = join(root, 'dist/cmd/punctual.js');

interface Proc {
  child: ChildProcessWithoutNullStreams;
  stdout: string;
  stderr: string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function start(args: string[], env: Record<string, string> = {}): Proc {
  // a clean environment: only PATH and what the test gives, so no PUNCTUAL_* of the caller leaks in
  const child = spawn(process.execPath, [bin, ...args], { env: { PATH: process.env.PATH ?? '', ...env } });
  const proc: Proc = {
    child,
    stdout: '',
    stderr: '',
    exited: new Promise((ok) => child.on('exit', (code, signal) => ok({ code, signal }))),
  };
  child.stdout.on('data', (d: Buffer) => (proc.stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (proc.stderr += d.toString()));
  return proc;
}

async function runBin(args: string[], env: Record<string, string> = {}): Promise<CliResult> {
  const p = start(args, env);
  const { code } = await p.exited;
  return { stdout: p.stdout, stderr: p.stderr, code: code ?? -1 };
}

/** Resolves with the first JSON log line of stderr whose msg is `msg` (or rejects when the process exits). */
async function logLine(p: Proc, msg: string): Promise<Record<string, unknown>> {
  for (;;) {
    const line = p.stderr
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .find((l) => l.msg === msg);
    if (line !== undefined) return line;
    const exited = await Promise.race([p.exited, new Promise<null>((ok) => setTimeout(() => ok(null), 20))]);
    if (exited !== null) throw new Error(`exited (${JSON.stringify(exited)}) before logging ${msg}: ${p.stderr}`);
  }
}

describe('the executable', () => {
  it('--version: exit 0 with the version line', async () => {
    const r = await runBin(['--version']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^punctual 0\.1\.0 \(([0-9a-f]{12}|unknown)\)\n$/);
    expect((await runBin(['--version'], { PUNCTUAL_BUILD_COMMIT: '0123456789abcdef' })).stdout).toBe('punctual 0.1.0 (0123456789ab)\n');
  });

  it('a bad flag or env var: exit 2 with one line', async () => {
    const r = await runBin(['serve', '--shards', '0']);
    expect(r).toEqual({ stdout: '', stderr: 'punctual: --shards: must be in 1..1024, got 0\n', code: 2 });
    const e = await runBin(['serve'], { PUNCTUAL_FSYNC: 'maybe' });
    expect(e.code).toBe(2);
    expect(e.stderr).toBe('punctual: PUNCTUAL_FSYNC: must be one of always|batch|off, got "maybe"\n');
  });

  it('a client command against a server that is down: exit 1', async () => {
    const closed = createServer();
    await new Promise<void>((ok) => closed.listen(0, '127.0.0.1', ok));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((ok) => closed.close(() => ok()));
    const r = await runBin(['job', 'list'], { PUNCTUAL_SERVER: `http://127.0.0.1:${port}` });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`punctual: cannot reach server http://127.0.0.1:${port}`);
  });

  it('serve: logs ready with the listen address, answers, and exits 0 on SIGTERM', async () => {
    const data = join(tmp, 'serve-n1');
    const p = start(['serve', '--listen', '127.0.0.1:0', '--peer-listen', '127.0.0.1:0', '--data', data, '--shards', '2'], {
      PUNCTUAL_AUTH_TOKEN: 'proc-token-0123456789',
    });
    try {
      const ready = await logLine(p, 'ready');
      expect(ready.node_id).toBe('n1');
      expect(ready.listen).toMatch(/^127\.0\.0\.1:\d+$/);
      expect(ready.listen).not.toBe('127.0.0.1:0');
      const server = `http://${String(ready.listen)}`;
      // the CLI against the real node: unauthenticated is refused, with the token it lists (no jobs yet)
      const denied = await cli(['job', 'list', '--server', server]);
      expect(denied.code).toBe(1);
      expect(denied.stderr).toMatch(/^error: unauthorized: /);
      const listed = await cli(['job', 'list', '--server', server, '--token', 'proc-token-0123456789']);
      expect(listed).toEqual({ stdout: 'ID  TASK  STATE  SCHEDULE  NEXT FIRE AT  RUNS  SHARD\n', stderr: '', code: 0 });
    } finally {
      p.child.kill('SIGTERM');
    }
    const exit = await p.exited;
    expect(exit).toEqual({ code: 0, signal: null });
    expect((await logLine(p, 'stopped')).level).toBe('info');
  });

  it('serve: a second signal during a graceful shutdown exits 1 at once', async () => {
    // a receiver that never answers keeps a callback in flight, so the graceful close has something to wait for
    let delivered!: () => void;
    const gotCallback = new Promise<void>((ok) => (delivered = ok));
    const receiver = createServer(() => delivered());
    await new Promise<void>((ok) => receiver.listen(0, '127.0.0.1', ok));
    const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    const p = start(['serve', '--listen', '127.0.0.1:0', '--peer-listen', '127.0.0.1:0', '--data', join(tmp, 'serve-n3')]);
    try {
      const server = `http://${String((await logLine(p, 'ready')).listen)}`;
      expect((await cli(['task', 'put', 'slow', '--url', hook, '--timeout-ms', '60000', '--server', server])).code).toBe(0);
      expect((await cli(['job', 'add', '--task', 'slow', '--server', server])).code).toBe(0);
      await gotCallback;
      p.child.kill('SIGTERM');
      await logLine(p, 'shutting down');
      p.child.kill('SIGTERM');
      expect(await p.exited).toEqual({ code: 1, signal: null });
      expect((await logLine(p, 'second signal, exiting now')).level).toBe('warn');
      expect(p.stderr).not.toContain('"msg":"stopped"');
    } finally {
      p.child.kill('SIGKILL');
      receiver.closeAllConnections();
      await new Promise<void>((ok) => receiver.close(() => ok()));
    }
  });

  it('serve: a listen address already in use is a failure to start, exit 1', async () => {
    const taken = createServer();
    await new Promise<void>((ok) => taken.listen(0, '127.0.0.1', ok));
    const port = (taken.address() as AddressInfo).port;
    try {
      const p = start(['serve', '--listen', `127.0.0.1:${port}`, '--peer-listen', '127.0.0.1:0', '--data', join(tmp, 'serve-n2')]);
      const exit = await p.exited;
      expect(exit.code).toBe(1);
      const failed = await logLine(p, 'failed to start');
      expect(failed.level).toBe('error');
      // the reason, not a stack trace
      expect(failed.error).toBe(`listen EADDRINUSE: address already in use 127.0.0.1:${port}`);
      expect(failed.code).toBe('EADDRINUSE');
      expect(p.stderr).not.toContain('stack');
    } finally {
      await new Promise<void>((ok) => taken.close(() => ok()));
    }
  });
});

// ---------------------------------------------------------------------------------------------------------------
// The CLI as a user meets it: each case runs against one real node started as a process.

describe('the executable against a real node', () => {
  let node: Proc;
  let server = '';
  const data = join(tmp, 'audit-n1');

  beforeAll(async () => {
    node = start(['serve', '--listen', '127.0.0.1:0', '--peer-listen', '127.0.0.1:0', '--data', data, '--shards', '2']);
    server = `http://${String((await logLine(node, 'ready')).listen)}`;
    // an unreachable callback URL is fine: these jobs are far in the future
    expect((await cli(['task', 'put', 't1', '--url', 'http://127.0.0.1:9/hook', '--server', server])).code).toBe(0);
  });

  afterAll(async () => {
    node.child.kill('SIGTERM');
    expect(await node.exited).toEqual({ code: 0, signal: null });
  });

  it('a second serve on the same data directory fails to start (exit 1) and the first keeps running', async () => {
    const second = start(['serve', '--listen', '127.0.0.1:0', '--peer-listen', '127.0.0.1:0', '--data', data, '--shards', '2']);
    expect((await second.exited).code).toBe(1);
    const failed = await logLine(second, 'failed to start');
    expect(failed.error).toBe(`data directory ${data} is in use by another punctual serve`);
    expect(second.stderr).not.toContain('"msg":"ready"');
    expect((await cli(['task', 'get', 't1', '--server', server])).code).toBe(0);
  });

  it('job update changes schedule, payload and metadata; job delete cancels', async () => {
    const add = ['job', 'add', '--task', 't1', '--id', 'up-1', '--at', '2031-01-01T00:00:00Z', '--metadata', '{"a":1}'];
    expect((await cli([...add, '--server', server])).code).toBe(0);
    const upd = await cli(['job', 'update', 'up-1', '--cron', '0 9 * * MON-FRI', '--timezone', 'Europe/Berlin',
      '--payload', '{"v":2}', '--clear-metadata', '--json', '--server', server]); // prettier-ignore
    expect(upd.code).toBe(0);
    const job = JSON.parse(upd.stdout) as Record<string, unknown>;
    expect(job.schedule).toEqual({ cron: '0 9 * * MON-FRI', timezone: 'Europe/Berlin' });
    expect(job.payload).toEqual({ v: 2 });
    expect(job.metadata).toBeNull();
    const nothing = await cli(['job', 'update', 'up-1', '--server', server]);
    expect(nothing.code).toBe(2);
    const del = await cli(['job', 'delete', 'up-1', '--json', '--server', server]);
    expect((JSON.parse(del.stdout) as Record<string, unknown>).state).toBe('CANCELLED');
  });

  it('job batch reports each item; a partly failed batch exits 1', async () => {
    const jobs = [
      { id: 'b-1', task: 't1', schedule: { at: '2031-01-01T00:00:00Z' } },
      { task: 'no-such-task' },
      { id: 'b-1', task: 't1', schedule: { at: '2031-01-01T00:00:00Z' } },
    ];
    const r = await cli(['job', 'batch', file('batch.json', JSON.stringify({ jobs })), '--server', server]);
    expect(r.code).toBe(1);
    const lines = r.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^#\s+ID\s+STATUS\s+ERROR$/);
    expect(lines[1]).toMatch(/^0\s+b-1\s+201\s+-$/);
    expect(lines[2]).toContain('404');
    expect(lines[2]).toContain('not_found: task "no-such-task" not found');
    expect(lines[3]).toMatch(/^2\s+b-1\s+200\s+-$/);
    expect(lines[4]).toBe('1 created, 1 existing, 1 failed');
    expect(r.stderr).toBe('punctual: 1 of 3 jobs failed\n');
    const ok = await cli(['job', 'batch', file('array.json', JSON.stringify([jobs[0]])), '--server', server]);
    expect(ok.code).toBe(0);
    expect((await cli(['job', 'batch', file('empty.json', '[]'), '--server', server])).code).toBe(2);
  });

  it('job preview lists the fire times of a cron across the spring-forward day', async () => {
    const r = await cli(['job', 'preview', '--cron', '30 2 * * *', '--timezone', 'America/New_York',
      '--from', '2027-03-13T00:00:00Z', '--count', '3', '--server', server]); // prettier-ignore
    expect(r).toEqual({
      stdout: '2027-03-13T07:30:00.000Z\n2027-03-14T07:30:00.000Z\n2027-03-15T06:30:00.000Z\n',
      stderr: '',
      code: 0,
    });
  });

  it('job preview takes --dst-repeat, --dst-gap, --spread-ms and --id; a bad policy is usage (exit 2)', async () => {
    const both = await cli(['job', 'preview', '--cron', '30 1 * * *', '--timezone', 'America/New_York', '--dst-repeat', 'both',
      '--from', '2027-11-06T12:00:00Z', '--count', '2', '--server', server]); // prettier-ignore
    expect(both).toEqual({ stdout: '2027-11-07T05:30:00.000Z\n2027-11-07T06:30:00.000Z\n', stderr: '', code: 0 });
    const skip = await cli(['job', 'preview', '--cron', '30 2 * * *', '--timezone', 'America/New_York', '--dst-gap', 'skip',
      '--from', '2027-03-13T12:00:00Z', '--count', '1', '--server', server]); // prettier-ignore
    expect(skip.stdout).toBe('2027-03-15T06:30:00.000Z\n');
    const offset = spreadOffsetOf('report-7', 3_600_000);
    const spread = await cli(['job', 'preview', '--cron', '0 10 * * *', '--spread-ms', '3600000', '--id', 'report-7',
      '--from', '2027-01-01T00:00:00Z', '--count', '1', '--server', server]); // prettier-ignore
    expect(spread.stdout).toBe(`${new Date(Date.UTC(2027, 0, 1, 10) + offset).toISOString()}\n`);
    const bad = await cli(['job', 'preview', '--cron', '30 1 * * *', '--dst-repeat', 'twice', '--server', server]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--dst-repeat: must be one of first|last|both');
    expect((await cli(['job', 'preview', '--every-ms', '1000', '--dst-gap', 'skip', '--server', server])).code).toBe(2);
  });

  it('a server error whose field error repeats the detail prints one line', async () => {
    const r = await cli(['job', 'add', '--task', 'no-such-task', '--server', server]);
    expect(r).toEqual({ stdout: '', stderr: 'error: not_found: task "no-such-task" not found\n', code: 1 });
  });

  it('a server error with several field errors prints the first once (the detail) and the others indented', async () => {
    const body = file('calendar-with-read-only-fields.json', JSON.stringify({ name: 'c1', dates: ['2027-12-25'], created_at: 'x', updated_at: 'y' }));
    const r = await cli(['calendar', 'put', 'c1', '--file', body, '--server', server]);
    expect(r).toEqual({
      stdout: '',
      stderr: 'error: invalid_argument: name: unknown field (and 2 more)\n  created_at: unknown field\n  updated_at: unknown field\n',
      code: 1,
    });
  });

  it('a reader that closes the pipe early (| head) ends the command quietly, exit 0', async () => {
    const jobs = Array.from({ length: 2000 }, () => ({ task: 't1', schedule: { at: '2032-01-01T00:00:00Z' } }));
    expect((await cli(['job', 'batch', file('many.json', JSON.stringify({ jobs })), '--server', server])).code).toBe(0);
    // the table (~250 KB) is far larger than a pipe's buffer, so the CLI is still writing when the reader goes
    const p = start(['job', 'list', '--all', '--server', server]);
    let first = '';
    p.child.stdout.once('data', (d: Buffer) => {
      first = d.toString().slice(0, 2);
      p.child.stdout.destroy(); // what `| head -c 1` does once it has its byte
    });
    expect(await p.exited).toEqual({ code: 0, signal: null });
    expect(first).toBe('ID');
    expect(p.stderr).toBe('');
  });
});

describe('usage as a user meets it', () => {
  it('help GROUP COMMAND shows the help of the command', async () => {
    const r = await cli(['help', 'job', 'add']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^Usage: punctual job add \[options\]/);
  });

  it('an impossible calendar date is bad usage, not a request', async () => {
    const r = await cli(['job', 'add', '--task', 't1', '--at', '2030-02-30T00:00:00Z', '--server', 'http://127.0.0.1:9']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--at: expected an RFC 3339 time');
  });

  it('--server HOST:PORT suggests the URL', async () => {
    const r = await cli(['job', 'list', '--server', 'localhost:8080']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('(did you mean http://localhost:8080?)');
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Statements of docs/cli.md that a run of every documented command found broken.

describe('docs/cli.md as written', () => {
  it('help names an unknown command (exit 2, one line) instead of showing some other help', async () => {
    expect(await cli(['help', 'nosuch'])).toEqual({ stdout: '', stderr: "punctual: unknown command 'nosuch'\n", code: 2 });
    expect(await cli(['help', 'job', 'nosuch'])).toEqual({ stdout: '', stderr: "punctual: unknown command 'nosuch'\n", code: 2 });
    const group = await cli(['help', 'job']);
    expect([group.code, group.stdout.split('\n')[0]]).toEqual([0, 'Usage: punctual job [options] [command]']);
    const alias = await cli(['help', 'job', 'delete']);
    expect([alias.code, alias.stdout.split('\n')[0]]).toEqual([0, 'Usage: punctual job cancel|delete [options] <id>']);
  });

  it('a bad time, task name, job id or too many filters in any client command is bad usage: exit 2, no request', async () => {
    const ids = Array.from({ length: 1001 }, (_, i) => `j${i}`);
    const cases: Array<[string[], string]> = [
      [['job', 'list', '--next-fire-after', 'tomorrow'], '--next-fire-after: expected an RFC 3339 time'],
      [['job', 'list', '--next-fire-before', '2030-02-30T00:00:00Z'], '--next-fire-before: expected an RFC 3339 time'],
      [['job', 'list', '--task', 'a b'], '--task: invalid task name "a b"'],
      [['job', 'list', ...['a', 'b', 'c', 'd', 'e'].flatMap((k) => ['--metadata', `${k}=1`])], '--metadata: at most 4 filters, got 5'],
      [['dead-letters', 'list', '--task', 'a/b'], '--task: invalid task name "a/b"'],
      [['dead-letters', 'replay', 'bad id'], 'job id must match [A-Za-z0-9._:-]{1,128}, got "bad id"'],
      [['dead-letters', 'replay', ...ids], 'at most 1000 job ids per replay, got 1001'],
      [['clock', 'advance', '--to', 'next week'], '--to: expected an RFC 3339 time'],
      [['job', 'add', '--task', 't1', '--at', '999999999999999'], '--at: must be in 0..253402300799999, got 999999999999999'],
    ];
    for (const [argv, reason] of cases) {
      const r = await client(argv);
      const seen = { argv: argv.slice(0, 4), code: r.code, stdout: r.stdout, lines: r.stderr.trimEnd().split('\n').length };
      expect(seen).toEqual({ argv: argv.slice(0, 4), code: 2, stdout: '', lines: 1 });
      expect(r.stderr.startsWith(`punctual: ${reason}`)).toBe(true);
    }
    expect(requests).toHaveLength(0);
  });

  it('a payload file that is not JSON is one line naming the flag (the parser quotes the file, newline and all)', async () => {
    const r = await client(['job', 'add', '--task', 't1', '--payload-file', file('not-json.txt', 'nope\nnot json either\n')]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^punctual: --payload-file: invalid JSON: [^\n]*\n$/);
    expect(requests).toHaveLength(0);
  });

  it('backup from a server that answers 200 with something else than a database fails (exit 1) and writes no file', async () => {
    route = () => ({ status: 200, raw: '<html>welcome</html>' });
    const out = join(tmp, 'not-a-backup.db');
    const r = await client(['backup', '--out', out]);
    expect(requests.map((q) => q.url)).toEqual(['/v1/admin/backup']);
    expect([r.code, r.stdout, r.stderr]).toEqual([1, '', `error: bad_response: ${base}/v1/admin/backup answered 20 bytes that are not an SQLite database\n`]);
    expect([existsSync(out), existsSync(`${out}.partial`)]).toEqual([false, false]);
  });

  it('backup from a server it cannot reach says so in one line, like every client command (a TLS error included)', async () => {
    const tls = await cli(['backup', '--out', join(tmp, 'tls.db'), '--server', base.replace('http:', 'https:')]);
    expect([tls.code, tls.stdout]).toEqual([1, '']);
    expect(tls.stderr).toMatch(new RegExp(`^punctual: cannot reach server ${base.replace('http:', 'https:').replace(/\./g, '\\.')}: [^\n]+\n$`));
  });

  it('the good forms of those flags are sent: times as given or as epoch ms, every id of a replay', async () => {
    route = (q) => (q.url.startsWith('/v1/jobs') ? { status: 200, body: { jobs: [], next_cursor: null } } : q.url.startsWith('/v1/clock') ? { status: 200, body: { now: '2027-01-01T00:00:00.000Z', fired: 0, complete: true } } : { status: 200, body: { matched: 2, replayed: 2 } });
    expect((await client(['job', 'list', '--next-fire-after', '2027-01-01T00:00:00+01:00', '--next-fire-before', '1800000000000', '--task', 'send-email'])).code).toBe(0);
    expect((await client(['dead-letters', 'replay', 'j1', 'a:b.c-d_e'])).code).toBe(0);
    expect((await client(['clock', 'advance', '--to', '1800000000000'])).code).toBe(0);
    expect(requests.map((q) => [q.method, decodeURIComponent(q.url), q.body])).toEqual([
      ['GET', '/v1/jobs?task=send-email&next_fire_after=2027-01-01T00:00:00+01:00&next_fire_before=1800000000000', undefined],
      ['POST', '/v1/dead-letters:replay', { ids: ['j1', 'a:b.c-d_e'] }],
      ['POST', '/v1/clock:advance', { to: 1800000000000 }],
    ]);
  });

  it('--version reads the commit of a linked worktree, whose .git is a file naming its git directory', () => {
    const checkout = join(tmp, 'worktree');
    const common = join(tmp, 'main.git');
    const gitDir = join(common, 'worktrees', 'wt');
    mkdirSync(checkout, { recursive: true });
    mkdirSync(join(gitDir), { recursive: true });
    mkdirSync(join(common, 'refs', 'heads'), { recursive: true });
    writeFileSync(join(checkout, '.git'), `gitdir: ${gitDir}\n`);
    writeFileSync(join(gitDir, 'HEAD'), 'ref: refs/heads/wt-branch\n');
    writeFileSync(join(gitDir, 'commondir'), '../..\n');
    writeFileSync(join(common, 'refs', 'heads', 'wt-branch'), '92cc1d4e993991167c8abe9c1f7fe1b159429464\n');
    expect(buildCommit({}, checkout)).toBe('92cc1d4e9939');
    // a ref only in the common directory's packed-refs
    rmSync(join(common, 'refs', 'heads', 'wt-branch'));
    writeFileSync(join(common, 'packed-refs'), '# pack-refs with: peeled\n4428dff63e50cd26c900d7ac44bddb67385d0293 refs/heads/wt-branch\n');
    expect(buildCommit({}, checkout)).toBe('4428dff63e50');
  });
});
