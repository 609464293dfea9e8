/**
 * `punctual serve`: flags and PUNCTUAL_* env vars (docs/cli.md) -> a validated NodeConfig -> startNode.
 * Precedence: flag, then env var, then default. A bad value is a usage error (exit 2) naming the flag or the
 * env var it came from; a failure to start is a runtime error (exit 1).
 */
import { readFileSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import { createSecureContext } from 'node:tls';
import { Command, Option } from 'commander';
import type { NodeConfig } from '../src/node/api.js';
import { startNode } from '../src/node/node.js';
import { manualClockRefusal, peerSecurityRefusal } from '../src/node/host.js';
import { parseRfc3339, timeMsMax } from '../src/http/time.js';
import { lockDataDir, type DataLock } from './data-lock.js';
import { cliLimits, limits, payloadRefLimits, retentionLimits } from '../src/core/limits.js';
import { taskRetentionMsMax } from '../src/scheduler/check.js';
import { parseCidrList } from '../src/dispatch/target-policy.js';
import { createLogger, type LogLevel, type Logger } from '../src/core/log.js';
import { CliError, exitCodes, usageError, type CliIo } from './io.js';
import { readTokensFile, secretBytesMin } from '../src/http/tokens.js';
import {
  formatHostPort,
  parseBool,
  parseEnum,
  parseHostPort,
  parseIntIn,
  parseNodeId,
  parsePeers,
  readSecretFile,
} from './parse.js';

/** Raw option values as commander hands them over (strings; undefined when the flag is absent). */
export interface ServeOptions {
  listen?: string;
  data?: string;
  nodeId?: string;
  peerListen?: string;
  peers?: string;
  shards?: string;
  authToken?: string;
  authTokenFile?: string;
  clusterSecret?: string;
  clusterSecretFile?: string;
  fsync?: string;
  logLevel?: string;
  logFormat?: string;
  metricsAuth?: boolean;
  join?: boolean;
  clock?: string;
  clockStart?: string;
  checkConfig?: boolean;
  callbackAllow?: string;
  callbackDeny?: string;
  payloadRefMaxBytes?: string;
  peerTlsCertFile?: string;
  peerTlsKeyFile?: string;
  peerTlsCaFile?: string;
  insecurePeers?: boolean;
  // client API trust boundary
  tlsCertFile?: string;
  tlsKeyFile?: string;
  authTokensFile?: string;
  httpRequestTimeoutMs?: string;
  retention?: string;
  retentionExecutions?: string;
  firingThread?: string;
  stageLeadMs?: string;
}

type Env = Record<string, string | undefined>;

export const serveDefaults = {
  listen: '127.0.0.1:8080',
  data: './punctual-data',
  nodeId: 'n1',
  peerListen: '127.0.0.1:8081',
  shards: 8,
  fsync: 'batch',
  logLevel: 'info',
  logFormat: 'json',
} as const;

const shardsMax = cliLimits.shardsMax;
const clockOffsetMsMax = 365 * 24 * 60 * 60 * 1000;
const logLevels: readonly LogLevel[] = ['debug', 'info', 'warn', 'error'];

/** `--node-id` -> `PUNCTUAL_NODE_ID`. */
export function envName(flag: string): string {
  return 'PUNCTUAL_' + flag.replace(/^--/, '').replace(/-/g, '_').toUpperCase();
}

interface Picked {
  value: string;
  /** The flag or env var it came from, for error messages. */
  source: string;
}

/** Flag wins over env; an empty env var counts as unset (a blank line in a unit file must not mean ""). */
function pick(flag: string, flagValue: string | undefined, env: Env): Picked | null {
  if (flagValue !== undefined) {
    if (flagValue === '') throw usageError(`${flag}: must not be empty`);
    return { value: flagValue, source: flag };
  }
  const name = envName(flag);
  const fromEnv = env[name];
  if (fromEnv !== undefined && fromEnv !== '') return { value: fromEnv, source: name };
  return null;
}

/**
 * A secret given inline or as a file, by flag or env. Both forms at the same level is a usage error; any flag
 * form wins over both env forms.
 */
function pickSecret(flag: string, inline: string | undefined, file: string | undefined, env: Env): string | null {
  const picked = pickSecretText(flag, inline, file, env);
  if (picked === null) return null;
  const bytes = Buffer.byteLength(picked.value, 'utf8');
  if (bytes < secretBytesMin) throw usageError(`${picked.source}: must be at least ${secretBytesMin} bytes (got ${bytes})`);
  return picked.value;
}

function pickSecretText(flag: string, inline: string | undefined, file: string | undefined, env: Env): Picked | null {
  const fileFlag = `${flag}-file`;
  if (inline !== undefined && file !== undefined) {
    throw usageError(`${flag} and ${fileFlag} are mutually exclusive`);
  }
  if (inline !== undefined || file !== undefined) {
    if (file !== undefined) return { value: readSecretFile(fileFlag, file), source: fileFlag };
    if (inline === '') throw usageError(`${flag}: must not be empty`);
    return { value: inline!, source: flag };
  }
  const envInline = pick(flag, undefined, env);
  const envFile = pick(fileFlag, undefined, env);
  if (envInline !== null && envFile !== null) {
    throw usageError(`${envName(flag)} and ${envName(fileFlag)} are mutually exclusive`);
  }
  if (envFile !== null) return { value: readSecretFile(envFile.source, envFile.value), source: envFile.source };
  return envInline;
}

/** Validates every serve flag and env var into a NodeConfig; throws a usage error (exit 2) on the first bad one. */
export function resolveServeConfig(opts: ServeOptions, env: Env): NodeConfig {
  const valueOf = (flag: string, flagValue: string | undefined, fallback: string): Picked =>
    pick(flag, flagValue, env) ?? { value: fallback, source: flag };

  const nodeIdP = valueOf('--node-id', opts.nodeId, serveDefaults.nodeId);
  const nodeId = parseNodeId(nodeIdP.source, nodeIdP.value);
  const listenP = valueOf('--listen', opts.listen, serveDefaults.listen);
  const listen = parseHostPort(listenP.source, listenP.value, true);
  const peerListenP = valueOf('--peer-listen', opts.peerListen, serveDefaults.peerListen);
  const peerListen = parseHostPort(peerListenP.source, peerListenP.value, true);
  if (listen.port !== 0 && listen.port === peerListen.port && listen.host === peerListen.host) {
    throw usageError(`--listen and --peer-listen must differ, both are ${listenP.value}`);
  }
  const peersP = pick('--peers', opts.peers, env);
  const peers = peersP === null ? [] : parsePeers(peersP.source, peersP.value, nodeId);
  const shardsP = valueOf('--shards', opts.shards, String(serveDefaults.shards));
  const dataP = valueOf('--data', opts.data, serveDefaults.data);
  const fsyncP = valueOf('--fsync', opts.fsync, serveDefaults.fsync);
  const levelP = valueOf('--log-level', opts.logLevel, serveDefaults.logLevel);
  const formatP = valueOf('--log-format', opts.logFormat, serveDefaults.logFormat);
  const authToken = pickSecret('--auth-token', opts.authToken, opts.authTokenFile, env);
  const clusterSecret = pickSecret('--cluster-secret', opts.clusterSecret, opts.clusterSecretFile, env);
  const metricsAuth = resolveBoolFlag('--metrics-auth', opts.metricsAuth, env);
  const join = resolveBoolFlag('--join', opts.join, env);
  if (join && peers.length === 0) throw usageError('--join needs --peers naming the current members');
  const api = resolveApiTrust(opts, env);
  if (metricsAuth && authToken === null && api.authTokensFile === null) {
    throw usageError('--metrics-auth needs an auth token (--auth-token, --auth-token-file or --auth-tokens-file)');
  }
  const callbackPolicy = resolveCallbackPolicy(opts, env);
  const clock = resolveClock(opts, env, peers.length > 0);
  const peerSecurity = resolvePeerSecurity(opts, env, peers.length > 0, clusterSecret !== null);
  return {
    ...api,
    listenHost: listen.host,
    listenPort: listen.port,
    dataDir: resolvePath(dataP.value),
    nodeId,
    peerListenHost: peerListen.host,
    peerListenPort: peerListen.port,
    peers,
    shards: parseIntIn(shardsP.source, shardsP.value, 1, shardsMax),
    authToken,
    clusterSecret,
    fsync: parseEnum(fsyncP.source, fsyncP.value, ['always', 'batch', 'off'] as const),
    logLevel: parseEnum(levelP.source, levelP.value, logLevels),
    logFormat: parseEnum(formatP.source, formatP.value, ['json', 'pretty'] as const),
    metricsAuth,
    clockOffsetMs: resolveTestClockOffset(env),
    ...clock,
    join,
    ...callbackPolicy,
    ...peerSecurity,
    ...resolvePayloadRefBytes(opts, env),
    ...resolveRetention(opts, env),
    ...resolveFiringThread(opts, env),
    ...resolveStageLead(opts, env),
  };
}

/** `--stage-lead-ms`: kept in the config only when given (absent = limits.firingStageLeadMs). */
function resolveStageLead(opts: ServeOptions, env: Env): Pick<NodeConfig, 'stageLeadMs'> {
  const picked = pick('--stage-lead-ms', opts.stageLeadMs, env);
  if (picked === null) return {};
  return { stageLeadMs: parseIntIn(picked.source, picked.value, 0, limits.firingStageLeadMsMax) };
}

/** `--firing-thread on|off`: kept in the config only when given (absent = on). */
function resolveFiringThread(opts: ServeOptions, env: Env): Pick<NodeConfig, 'firingThread'> {
  const picked = pick('--firing-thread', opts.firingThread, env);
  if (picked === null) return {};
  return { firingThread: parseEnum(picked.source, picked.value, ['on', 'off'] as const) === 'on' };
}

/** `--payload-ref-max-bytes`: kept in the config only when given. */
function resolvePayloadRefBytes(opts: ServeOptions, env: Env): Pick<NodeConfig, 'payloadRefBytesMax'> {
  const picked = pick('--payload-ref-max-bytes', opts.payloadRefMaxBytes, env);
  if (picked === null) return {};
  return { payloadRefBytesMax: parseIntIn(picked.source, picked.value, 1, payloadRefLimits.bytesMaxCeiling) };
}

const durationUnitsMs: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** A duration: an integer and a unit, `500ms`, `90s`, `15m`, `12h`, `7d` (`off`: none, when allowed). */
export function parseDurationMs(what: string, text: string, minMs: number, maxMs: number): number {
  const m = /^(\d{1,12})(ms|s|m|h|d)$/.exec(text.trim());
  const ms = m === null ? NaN : Number(m[1]) * durationUnitsMs[m[2]!]!;
  if (!(ms >= minMs && ms <= maxMs)) {
    throw usageError(`${what}: must be a duration like 90s, 15m, 12h or 7d, from ${minMs} ms to ${maxMs / 86_400_000} days (got ${JSON.stringify(text)})`);
  }
  return ms;
}

/** `--retention DURATION|off` (default 7d) and `--retention-executions N` (default 100): docs/api.md "Retention". */
function resolveRetention(opts: ServeOptions, env: Env): Pick<NodeConfig, 'retentionMs' | 'retentionExecutions'> {
  const retentionP = pick('--retention', opts.retention, env);
  const keepP = pick('--retention-executions', opts.retentionExecutions, env);
  const retentionMs =
    retentionP === null ? retentionLimits.retentionMsDefault : retentionP.value === 'off' ? null : parseDurationMs(retentionP.source, retentionP.value, 1000, taskRetentionMsMax);
  const keep = keepP === null ? retentionLimits.executionsKeepDefault : parseIntIn(keepP.source, keepP.value, 1, retentionLimits.executionsKeepMax);
  return { retentionMs, retentionExecutions: keep };
}

/**
 * `--clock system|manual` and `--clock-start TIME` (RFC 3339 or epoch ms; manual only). The fields are set only for
 * a manual clock, so a config without them reads as before. A manual clock runs a single node only.
 */
function resolveClock(opts: ServeOptions, env: Env, hasPeers: boolean): Pick<NodeConfig, 'clock' | 'clockStartMs'> {
  const modeP = pick('--clock', opts.clock, env);
  const mode = modeP === null ? 'system' : parseEnum(modeP.source, modeP.value, ['system', 'manual'] as const);
  const startP = pick('--clock-start', opts.clockStart, env);
  if (mode === 'system') {
    if (startP !== null) throw usageError(`${startP.source}: needs --clock manual`);
    return {};
  }
  if (hasPeers) throw usageError(`--peers: ${manualClockRefusal}`);
  if (startP === null) return { clock: 'manual', clockStartMs: null };
  let startMs: number | string;
  if (/^\d{1,16}$/.test(startP.value)) {
    startMs = Number(startP.value);
    if (startMs > timeMsMax) startMs = 'must be between 1970 and 9999';
  } else {
    startMs = parseRfc3339(startP.value);
  }
  if (typeof startMs === 'string') throw usageError(`${startP.source}: ${startMs}`);
  return { clock: 'manual', clockStartMs: startMs };
}

/**
 * jepsen-lite skews a node's clock through PUNCTUAL_TEST_CLOCK_OFFSET_MS, honoured only with PUNCTUAL_TEST_MODE=1
 * (docs/testing.md): a test knob, not a product flag.
 */
function resolveTestClockOffset(env: Env): number {
  if (env.PUNCTUAL_TEST_MODE !== '1') return 0;
  const raw = env.PUNCTUAL_TEST_CLOCK_OFFSET_MS;
  if (raw === undefined || raw === '') return 0;
  return parseIntIn('PUNCTUAL_TEST_CLOCK_OFFSET_MS', raw, -clockOffsetMsMax, clockOffsetMsMax);
}

/** `--callback-allow` / `--callback-deny`: CIDR lists, kept in the config only when given. */
function resolveCallbackPolicy(opts: ServeOptions, env: Env): Pick<NodeConfig, 'callbackAllow' | 'callbackDeny'> {
  const out: Pick<NodeConfig, 'callbackAllow' | 'callbackDeny'> = {};
  const allowP = pick('--callback-allow', opts.callbackAllow, env);
  const denyP = pick('--callback-deny', opts.callbackDeny, env);
  for (const [picked, key] of [[allowP, 'callbackAllow'], [denyP, 'callbackDeny']] as const) {
    if (picked === null) continue;
    const cidrs = parseCidrList(picked.value);
    if (typeof cidrs === 'string') throw usageError(`${picked.source}: ${cidrs}`);
    out[key] = cidrs.map((c) => c.text);
  }
  return out;
}

/**
 * Peer authentication: --peer-tls-{cert,key,ca}-file (all three or none) and --insecure-peers. A node with
 * --peers and neither peer TLS nor a cluster secret is refused unless --insecure-peers says so. The fields are
 * set only when given, so a config without them reads as before.
 */
function resolvePeerSecurity(opts: ServeOptions, env: Env, hasPeers: boolean, hasSecret: boolean): Pick<NodeConfig, 'peerTls' | 'insecurePeers'> {
  const files = {
    certFile: pick('--peer-tls-cert-file', opts.peerTlsCertFile, env),
    keyFile: pick('--peer-tls-key-file', opts.peerTlsKeyFile, env),
    caFile: pick('--peer-tls-ca-file', opts.peerTlsCaFile, env),
  };
  const given = Object.entries(files).filter(([, p]) => p !== null);
  if (given.length > 0 && given.length < 3) {
    const missing = Object.entries(files).filter(([, p]) => p === null).map(([k]) => `--peer-tls-${k.replace('File', '').toLowerCase()}-file`);
    throw usageError(`--peer-tls-cert-file, --peer-tls-key-file and --peer-tls-ca-file go together: missing ${missing.join(', ')}`);
  }
  const insecure = resolveBoolFlag('--insecure-peers', opts.insecurePeers, env);
  if (hasPeers && given.length === 0 && !hasSecret && !insecure) throw usageError(`--peers: ${peerSecurityRefusal}`);
  const out: Pick<NodeConfig, 'peerTls' | 'insecurePeers'> = {};
  if (given.length === 3) {
    out.peerTls = { certFile: resolvePath(files.certFile!.value), keyFile: resolvePath(files.keyFile!.value), caFile: resolvePath(files.caFile!.value) };
  }
  if (insecure) out.insecurePeers = true;
  return out;
}

/**
 * The client API's TLS files (both or neither; each must load now), the tokens file (each line checked now, a bad
 * one named) and the test-only request deadline.
 */
function resolveApiTrust(opts: ServeOptions, env: Env): Pick<NodeConfig, 'tlsCertFile' | 'tlsKeyFile' | 'authTokensFile' | 'httpRequestTimeoutMs'> {
  const certP = pick('--tls-cert-file', opts.tlsCertFile, env);
  const keyP = pick('--tls-key-file', opts.tlsKeyFile, env);
  if ((certP === null) !== (keyP === null)) throw usageError('--tls-cert-file and --tls-key-file go together: give both or neither');
  if (certP !== null && keyP !== null) checkTlsPair(certP, keyP);
  const tokensP = pick('--auth-tokens-file', opts.authTokensFile, env);
  if (tokensP !== null) {
    try {
      readTokensFile(tokensP.value);
    } catch (err) {
      throw usageError(`${tokensP.source}: ${(err as Error).message}`);
    }
  }
  const timeoutP = pick('--http-request-timeout-ms', opts.httpRequestTimeoutMs, env);
  return {
    tlsCertFile: certP === null ? null : resolvePath(certP.value),
    tlsKeyFile: keyP === null ? null : resolvePath(keyP.value),
    authTokensFile: tokensP === null ? null : resolvePath(tokensP.value),
    ...(timeoutP === null ? {} : { httpRequestTimeoutMs: parseIntIn(timeoutP.source, timeoutP.value, 100, 24 * 60 * 60 * 1000) }),
  };
}

/** The certificate and key must read, parse and match at start (a reload that fails keeps the old pair instead). */
function checkTlsPair(cert: Picked, key: Picked): void {
  const read = (p: Picked): Buffer => {
    try {
      return readFileSync(p.value);
    } catch (err) {
      const code = typeof err === 'object' && err !== null && 'code' in err ? String((err as { code: unknown }).code) : String(err);
      throw usageError(`${p.source}: cannot read ${JSON.stringify(p.value)}: ${code}`);
    }
  };
  const certPem = read(cert);
  const keyPem = read(key);
  try {
    createSecureContext({ cert: certPem, key: keyPem });
  } catch (err) {
    throw usageError(`${cert.source} / ${key.source}: not a usable PEM certificate and key: ${(err as Error).message}`);
  }
}

/** A boolean flag: present = true, else its env var (true/false/1/0...), else false. */
function resolveBoolFlag(flagName: string, flag: boolean | undefined, env: Env): boolean {
  if (flag === true) return true;
  const fromEnv = pick(flagName, undefined, env);
  return fromEnv === null ? false : parseBool(fromEnv.source, fromEnv.value);
}

/** The config as printed by --check-config and logged at start: secrets never leave the process. */
export function redactedConfig(config: NodeConfig): Record<string, unknown> {
  const redact = (s: string | null): string | null => (s === null ? null : `<redacted, ${s.length} chars>`);
  return { ...config, authToken: redact(config.authToken), clusterSecret: redact(config.clusterSecret) };
}

export function registerServeCommand(program: Command, io: CliIo): void {
  const cmd = program
    .command('serve')
    .description('run a node (the daemon); every flag but --check-config also reads PUNCTUAL_<FLAG_IN_CAPS> from the environment')
    .option('--listen <host:port>', `client API address (default ${serveDefaults.listen})`)
    .option('--data <dir>', `where this node keeps its SQLite files (default ${serveDefaults.data})`)
    .option('--node-id <id>', `this node's id, [a-z0-9-]{1,32} (default ${serveDefaults.nodeId})`)
    .option('--peer-listen <host:port>', `Raft transport address (default ${serveDefaults.peerListen})`)
    .option('--peers <list>', "the other members' peer addresses, ID=HOST:PORT,... (default: none, single node)")
    .option('--shards <n>', `shard groups, 1..${shardsMax}, fixed at bootstrap (default ${serveDefaults.shards})`)
    .option('--auth-token <token>', 'require Authorization: Bearer TOKEN on /v1/*')
    .option('--auth-token-file <file>', 'read the auth token from a file')
    .option('--cluster-secret <secret>', 'secret that peers must present')
    .option('--cluster-secret-file <file>', 'read the cluster secret from a file')
    .option('--fsync <mode>', `always|batch|off (default ${serveDefaults.fsync})`)
    .option('--log-level <level>', `debug|info|warn|error (default ${serveDefaults.logLevel})`)
    .option('--log-format <format>', `json|pretty (default ${serveDefaults.logFormat})`)
    .option('--metrics-auth', 'require the auth token on /metrics too')
    .option('--peer-tls-cert-file <file>', "peers use mutual TLS: this node's certificate (PEM, SAN URI:punctual:node:<node id>); re-read on SIGHUP")
    .option('--peer-tls-key-file <file>', 'the private key of --peer-tls-cert-file (PEM)')
    .option('--peer-tls-ca-file <file>', "the CA that signs every node's peer certificate (PEM)")
    .option('--insecure-peers', 'allow peers with neither peer TLS nor a cluster secret: anyone who reaches --peer-listen controls the cluster')
    .option('--join', 'join a running cluster (the members named by --peers) instead of bootstrapping; then run `punctual cluster add-node` against it')
    .option('--callback-allow <cidrs>', 'callbacks may target these ranges (CIDR,...), even link-local ones; never this node\'s own ports')
    .option('--callback-deny <cidrs>', 'callbacks may not target these ranges (CIDR,...); the longest matching range decides')
    .option('--payload-ref-max-bytes <n>', `largest body a job's payload_ref may fetch (default ${payloadRefLimits.bytesMaxDefault})`)
    .option('--clock <mode>', 'system|manual: manual runs the scheduler on a virtual clock moved only by POST /v1/clock:advance (tests; single node only) (default system)')
    .option('--clock-start <time>', 'with --clock manual: where the virtual clock starts, RFC 3339 or epoch ms (default: the real time at start)')
    .option('--check-config', 'validate the configuration, print it as JSON (secrets redacted) and exit')
    .option('--tls-cert-file <file>', 'serve the client API over HTTPS with this PEM certificate (chain); needs --tls-key-file; re-read on SIGHUP')
    .option('--tls-key-file <file>', 'the PEM private key of --tls-cert-file; re-read on SIGHUP')
    .option('--auth-tokens-file <file>', 'named tokens with scopes, one "NAME SCOPE TOKEN" per line (scope read|write|admin); re-read on SIGHUP')
    .option('--retention <duration>', 'finished jobs and their executions are deleted this long after they finish, e.g. 12h, 7d; off: kept (default 7d)')
    .option('--retention-executions <n>', 'each job keeps its newest N executions (default 100)')
    .option('--firing-thread <on|off>', 'on: callbacks leave from a thread of their own (the default); off: from the main event loop')
    .option('--stage-lead-ms <ms>', 'callbacks are decided and prepared up to this long before their due time, sent at it; 0: at the due time (default 100)')
    .addOption(new Option('--http-request-timeout-ms <ms>', 'test only: client API request deadline').hideHelp());
  cmd.action(async (opts: ServeOptions) => {
    const config = resolveServeConfig(opts, io.env);
    if (opts.checkConfig === true) {
      io.stdout.write(JSON.stringify(redactedConfig(config), null, 2) + '\n');
      return;
    }
    await serve(config, io);
  });
}

async function serve(config: NodeConfig, io: CliIo): Promise<void> {
  const logger = createLogger({
    level: config.logLevel,
    format: config.logFormat,
    write: (line) => io.stderr.write(line + '\n'),
  });
  logger.debug('starting', { config: redactedConfig(config) });
  let handle: { nodeId: string; apiPort: number; reload(): boolean; close(): Promise<void> };
  let lock: DataLock | null = null;
  try {
    lock = lockDataDir(config.dataDir);
    const node = await startNode(config, { logger });
    const held = lock;
    handle = { nodeId: node.nodeId, apiPort: node.apiPort, reload: () => node.reload(), close: () => node.close().then(() => held.release()) };
  } catch (err) {
    lock?.release();
    // an operating failure (address in use, wrong data directory) wants its reason, not a stack: the stack is
    // logged at debug level for the case it is a bug
    logger.error('failed to start', startFailure(err));
    logger.debug('failed to start: stack', { err });
    throw new CliError(exitCodes.runtime, '');
  }
  logger.info('ready', {
    node_id: handle.nodeId,
    listen: formatHostPort(config.listenHost, handle.apiPort),
    peer_listen: formatHostPort(config.peerListenHost, config.peerListenPort),
    peers: config.peers.map((p) => p.id),
    shards: config.shards,
    data: config.dataDir,
  });
  installShutdown(handle, logger, io);
  installReload(handle, logger);
}

/**
 * SIGHUP: re-read the client API's certificate, key and tokens file and the peer certificate (the node logs what
 * it kept or changed; a bad file keeps the old one).
 */
function installReload(handle: { reload(): boolean }, logger: Logger): void {
  process.on('SIGHUP', () => {
    logger.info('SIGHUP: reloading');
    handle.reload();
  });
}

/** The reason a node did not start, as log fields: the message and the system error code when there is one. */
function startFailure(err: unknown): Record<string, unknown> {
  const fields: Record<string, unknown> = { error: err instanceof Error ? err.message : String(err) };
  const code = typeof err === 'object' && err !== null && 'code' in err ? (err as { code: unknown }).code : undefined;
  if (typeof code === 'string') fields.code = code;
  return fields;
}

/** First SIGTERM/SIGINT: close gracefully, then exit 0 (1 if close fails). A second one: exit 1 at once. */
function installShutdown(handle: { close(): Promise<void> }, logger: Logger, io: CliIo): void {
  let closing = false;
  const onSignal = (signal: NodeJS.Signals): void => {
    if (closing) {
      logger.warn('second signal, exiting now', { signal });
      io.exit(exitCodes.runtime);
      return;
    }
    closing = true;
    logger.info('shutting down', { signal });
    handle.close().then(
      () => {
        logger.info('stopped');
        io.exit(exitCodes.ok);
      },
      (err: unknown) => {
        logger.error('shutdown failed', { err });
        io.exit(exitCodes.runtime);
      },
    );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
}
