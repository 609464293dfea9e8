// Test fixture (not product code): a real `punctual serve`-like node process for the crash and failover tests.
// It imports the BUILT node from dist/ (`npm run build` first), reads its NodeConfig as JSON from argv[2] and
// optional StartNodeOptions (plain JSON: rebalanceIntervalMs, compaction) from argv[3], prints one line
// {"port": N} on stdout once it serves, and closes gracefully on SIGTERM. The tests kill it with SIGKILL.
import { startNode } from '../../../dist/src/node/node.js';
import { createLogger } from '../../../dist/src/core/log.js';

const config = JSON.parse(process.argv[2]);
const options = process.argv[3] === undefined ? {} : JSON.parse(process.argv[3]);
const logger = createLogger({ level: 'warn', format: 'json' });
const node = await startNode(config, { logger, ...options });
process.stdout.write(JSON.stringify({ port: node.apiPort }) + '\n');
process.on('SIGTERM', () => {
  node.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
});
