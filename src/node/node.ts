/**
 * startNode: one `punctual serve` node. Opens the core (SQLite, proposer, firing engine), puts the client API
 * (HTTP/1.1 + h2c on one port) in front of it, then starts the peer transport (with --peers) and the Raft
 * groups; /readyz turns ready once every shard has a known leader and this node caught up.
 */
import type { Clock } from '../core/clock.js';
import type { Logger } from '../core/log.js';
import { createApp } from '../http/app.js';
import { startApiServer } from '../http/server.js';
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
  /** Re-reads the peer TLS files (SIGHUP); false without peer TLS or when a file is bad (logged, old kept). */
  reloadPeerTls(): boolean;
  /** Graceful: stop the HTTP server, stop firing, let in-flight callbacks finish (bounded), flush, close the file. */
  close(): Promise<void>;
}

export type StartNodeOptions = NodeOptions & { logger?: Logger; clock?: Clock };

export async function startNode(config: NodeConfig, options: StartNodeOptions = {}): Promise<NodeHandle> {
  const core = await openNode(config, options);
  const metrics = (): Promise<MetricsText> => core.metrics.scrape();
  let server: { port: number; close(): Promise<void> };
  try {
    const app = createApp({
      api: core.service,
      authToken: config.authToken,
      metricsAuth: config.metricsAuth,
      metrics,
      logger: core.logger.child({ component: 'http' }),
      callbackUrlCheck: (url) => core.targetPolicy.refusalForUrl(url),
    });
    server = await startApiServer(app, config.listenHost, config.listenPort);
    core.targetPolicy.addListener(config.listenHost, server.port, 'API listener');
    core.service.apiPort = server.port;
    core.cluster.apiPort = server.port;
    await core.start();
  } catch (err) {
    await core.close();
    throw err;
  }
  core.logger.debug('listening', { api: `${config.listenHost}:${server.port}` });
  let closing: Promise<void> | null = null;
  return {
    nodeId: config.nodeId,
    apiPort: server.port,
    api: core.service,
    metrics,
    reloadPeerTls: () => core.transport?.reloadTls() ?? false,
    close() {
      closing ??= (async () => {
        await server.close();
        await core.close();
      })();
      return closing;
    },
  };
}
