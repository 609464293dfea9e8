// Test fixture (not product code): a real `punctual serve`-like node process for the crash test. It imports the
// BUILT node from dist/ (`npm run build` first), reads its NodeConfig as JSON from argv[2], prints one line
// {"port": N} on stdout once it serves, and closes gracefully on SIGTERM. The crash test kills it with SIGKILL.
import { startNode } from '../../../dist/src/node/node.js';
import { createLogger } from '../../../dist/src/core/log.js';

const config = JSON.parse(process.argv[2]);
const logger = createLogger({ level: 'warn', format: 'json' });
const node = await startNode(config, { logger });
process.stdout.write(JSON.stringify({ port: node.apiPort }) + '\n');
process.on('SIGTERM', () => {
  node.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
});
