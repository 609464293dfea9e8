/** Test fixture (not product code): free loopback ports and the configs of an N-node cluster. */
import { createServer } from 'node:net';
import { join } from 'node:path';
import type { NodeConfig } from '../api.js';
import { nodeConfig } from './fixtures.js';

/** Ports the OS hands out now (closed again at once, so a test can give them to nodes up front). */
export async function freePorts(n: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from({ length: n }, () => new Promise<ReturnType<typeof createServer>>((resolve) => {
      const s = createServer();
      s.listen(0, '127.0.0.1', () => resolve(s));
    })),
  );
  const ports = servers.map((s) => (s.address() as { port: number }).port);
  await Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
  return ports;
}

/** Configs of nodes n1..nN under `root`, every node naming all the others in --peers. */
export async function clusterConfigs(root: string, n: number, over: Partial<NodeConfig> = {}): Promise<NodeConfig[]> {
  const ports = await freePorts(n);
  const ids = Array.from({ length: n }, (_, i) => `n${i + 1}`);
  return ids.map((id, i) =>
    nodeConfig(join(root, id), {
      nodeId: id,
      peerListenPort: ports[i],
      peers: ids.flatMap((other, k) => (k === i ? [] : [{ id: other, host: '127.0.0.1', port: ports[k] }])),
      ...over,
    }),
  );
}
