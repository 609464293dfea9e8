/**
 * startNode: one `punctual serve` node. Opens the core (SQLite, proposer, firing engine), puts the client API
 * (HTTP/1.1 + h2c on one port) in front of it, then starts the peer transport (with --peers) and the Raft
 * groups; /readyz turns ready once every shard has a known leader and this node caught up.
 */
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import type { Clock } from '../core/clock.js';
import type { Logger } from '../core/log.js';
import { createApp } from '../http/app.js';
import { startApiServer, type ApiServer, type TlsCredentials } from '../http/server.js';
import { TokenSet, readTokensFile } from '../http/tokens.js';
import { loadUiAssets } from '../http/ui.js';
import type { MetricsText } from '../metrics/metrics.js';
import type { SchedulerApi } from '../http/scheduler-api.js';
import type { NodeConfig } from './api.js';
import { openNode, type NodeOptions } from './host.js';

export interface NodeHandle {
  nodeId: string;
  apiPort: number;
  api: SchedulerApi;
  /** The Prometheus text of this node (what GET /metrics serves). */
  metrics(): Promise<MetricsText>;
  /**
   * SIGHUP: re-reads the client API's certificate and key, the tokens file and the peer TLS files. A file that does
   * not load is logged and the old certificate or tokens are kept. Returns whether everything reloaded.
   */
  reload(): boolean;
  /** Graceful: stop the HTTP server, stop firing, let in-flight callbacks finish (bounded), flush, close the file. */
  close(): Promise<void>;
}

export type StartNodeOptions = NodeOptions & { logger?: Logger; clock?: Clock };

export async function startNode(config: NodeConfig, options: StartNodeOptions = {}): Promise<NodeHandle> {
  const tokens = new TokenSet(config.authToken, config.authTokensFile == null ? null : readTokensFile(config.authTokensFile));
  const core = await openNode(config, options);
  const metrics = (): Promise<MetricsText> => core.metrics.scrape();
  let server: ApiServer;
  const httpLogger = core.logger.child({ component: 'http' });
  try {
    const app = createApp({
      api: core.service,
      authToken: config.authToken,
      tokens,
      metricsAuth: config.metricsAuth,
      metrics,
      logger: httpLogger,
      callbackUrlCheck: (url) => core.targetPolicy.refusalForUrl(url),
      ui: loadUiAssets(),
    });
    server = await startApiServer(app, config.listenHost, config.listenPort, {
      logger: httpLogger,
      tls: readTlsFiles(config),
      ...(config.httpRequestTimeoutMs === undefined ? {} : { requestTimeoutMs: config.httpRequestTimeoutMs }),
    });
    core.targetPolicy.addListener(config.listenHost, server.port, 'API listener');
    core.service.apiPort = server.port;
    core.cluster.apiPort = server.port;
    await core.start();
  } catch (err) {
    await core.close();
    throw err;
  }
  core.logger.debug('listening', { api: `${config.listenHost}:${server.port}` });
  logExposure(core.logger, config, server.tls, tokens.enabled);
  let closing: Promise<void> | null = null;
  return {
    nodeId: config.nodeId,
    apiPort: server.port,
    api: core.service,
    metrics,
    reload: () => {
      const api = reloadApiSecrets(core.logger, config, server, tokens);
      const peers = config.peerTls == null || (core.transport?.reloadTls() ?? true);
      return api && peers;
    },
    close() {
      closing ??= (async () => {
        await server.close();
        await core.close();
      })();
      return closing;
    },
  };
}

// ---------------------------------------------------------------- client API: TLS and tokens

function readTlsFiles(config: NodeConfig): TlsCredentials | null {
  if (config.tlsCertFile == null || config.tlsKeyFile == null) return null;
  return { cert: readFileSync(config.tlsCertFile), key: readFileSync(config.tlsKeyFile) };
}

/** What the client API exposes, said once at start: TLS or not, and a warning for an open API off loopback. */
function logExposure(logger: Logger, config: NodeConfig, tls: boolean, auth: boolean): void {
  logger.info('client api', { listen: config.listenHost, tls, auth });
  if (!auth && !isLoopback(config.listenHost)) {
    logger.warn('the client API has no auth token on a non-loopback address: anyone who reaches it may do anything', {
      listen: config.listenHost,
      hint: 'set --auth-token-file or --auth-tokens-file',
    });
  }
}

function isLoopback(host: string): boolean {
  if (host === 'localhost' || host === '::1') return true;
  return isIP(host) === 4 && host.startsWith('127.');
}

function reloadApiSecrets(logger: Logger, config: NodeConfig, server: ApiServer, tokens: TokenSet): boolean {
  let ok = true;
  if (config.authTokensFile != null) {
    try {
      tokens.replaceFileTokens(readTokensFile(config.authTokensFile));
      logger.info('auth tokens reloaded', { file: config.authTokensFile, names: tokens.fileTokenNames() });
    } catch (err) {
      ok = false;
      logger.error('auth tokens not reloaded, keeping the previous set', { error: (err as Error).message });
    }
  }
  if (server.tls) {
    try {
      server.setTlsCredentials(readTlsFiles(config)!);
      logger.info('tls certificate reloaded', { cert: config.tlsCertFile });
    } catch (err) {
      ok = false;
      logger.error('tls certificate not reloaded, keeping the previous one', { error: (err as Error).message });
    }
  }
  return ok;
}
