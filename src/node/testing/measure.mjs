// Measurement script (not a test, not product code): figures of the node core without HTTP, on the BUILT code.
//   npm run build && node src/node/testing/measure.mjs [fsync=batch] [ratePerSec=2000] [seconds=3]
// Prints: create throughput (concurrent single-job createJobs calls, as a burst of POST /v1/jobs would make, and
// batches of 1000), then fire lateness at a steady rate of occurrences against a receiver in another process
// (node's own start-of-attempt lateness, from punctual_fire_lateness_ms, and the receiver's arrival lateness).
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

if (process.argv[2] === '--receiver') {
  const { createServer } = await import('node:http');
  const lat = [];
  const srv = createServer((req, res) => {
    lat.push(Date.now() - Number(req.headers['x-punctual-scheduled-at']));
    req.resume();
    res.end('ok');
  });
  srv.listen(0, '127.0.0.1', () => process.send({ port: srv.address().port }));
  process.on('message', () => process.send({ lat }, () => process.exit(0)));
} else {
  const [fsync = 'batch', rateArg = '2000', secondsArg = '3'] = process.argv.slice(2);
  const rate = Number(rateArg);
  const seconds = Number(secondsArg);
  const { openNode } = await import('../../../dist/src/node/host.js');
  const { silentLogger } = await import('../../../dist/src/core/log.js');
  const receiver = fork(fileURLToPath(import.meta.url), ['--receiver']);
  const { port } = await new Promise((r) => receiver.once('message', r));
  const dir = mkdtempSync(join(tmpdir(), 'punctual-measure-'));
  const config = {
    listenHost: '127.0.0.1', listenPort: 0, dataDir: dir, nodeId: 'n1', peerListenHost: '127.0.0.1', peerListenPort: 0,
    peers: [], shards: 8, authToken: null, clusterSecret: null, fsync, logLevel: 'error', logFormat: 'json',
    metricsAuth: false, clockOffsetMs: 0,
  };
  const core = await openNode(config, { logger: silentLogger });
  await core.start();
  const retry = { maxAttempts: 3, initialBackoffMs: 100, maxBackoffMs: 1000, multiplier: 2, jitter: true };
  await core.service.putTask('hook', {
    url: `http://127.0.0.1:${port}/hook`, method: 'POST', headers: {}, timeoutMs: 5000, retry, signingSecret: null, maxConcurrency: 10000,
  });
  const job = (id, atMs) => ({
    id, task: 'hook', callback: null, payload: new Uint8Array([123, 125]), payloadEncoding: 'json', schedule: { kind: 'once', atMs },
    endAtMs: null, maxRuns: 0, misfire: 'fire_once', overlap: 'allow', metadata: null, requestDigest: `d-${id}`, idempotencyKey: null,
  });
  const far = Date.now() + 3_600_000;
  const single = 5000;
  // CPU time per operation is reported too: wall-clock rates depend on what else the machine runs.
  const cpuUs = (c) => c.user + c.system;
  let t = performance.now();
  let cpu = process.cpuUsage();
  await Promise.all(Array.from({ length: single }, (_, i) => core.service.createJobs([job(`s${i}`, far)])));
  console.log(`fsync=${fsync} single-job creates: ${Math.round(single / ((performance.now() - t) / 1000))}/s (${single} concurrent calls), CPU ${(cpuUs(process.cpuUsage(cpu)) / single).toFixed(0)} us/job`);
  t = performance.now();
  cpu = process.cpuUsage();
  for (let b = 0; b < 10; b++) await core.service.createJobs(Array.from({ length: 1000 }, (_, i) => job(`b${b}-${i}`, far)));
  console.log(`fsync=${fsync} batch creates: ${Math.round(10000 / ((performance.now() - t) / 1000))} jobs/s (batches of 1000), CPU ${(cpuUs(process.cpuUsage(cpu)) / 10000).toFixed(0)} us/job`);
  const total = rate * seconds;
  const start = Date.now() + 1000;
  for (let b = 0; b < total; b += 1000) {
    await core.service.createJobs(Array.from({ length: Math.min(1000, total - b) }, (_, i) => job(`f${b + i}`, start + Math.floor(((b + i) * 1000) / rate))));
  }
  await new Promise((r) => setTimeout(r, Math.max(0, start - Date.now() - 50)));
  cpu = process.cpuUsage();
  while (Date.now() < start + seconds * 1000 + 2000) await new Promise((r) => setTimeout(r, 50));
  const fireCpuUs = cpuUs(process.cpuUsage(cpu));
  const text = (await core.metrics.scrape()).body;
  await core.close();
  receiver.send('done');
  const { lat } = await new Promise((r) => receiver.once('message', r));
  rmSync(dir, { recursive: true, force: true });
  lat.sort((a, b) => a - b);
  const q = (p) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))];
  const buckets = text.split('\n').filter((l) => l.startsWith('punctual_fire_lateness_ms_bucket'));
  const count = (le) => Number(buckets.find((l) => l.includes(`le="${le}"`)).split(' ')[1]);
  console.log(`fired ${lat.length}/${total} at ${rate}/s for ${seconds} s: receiver lateness p50=${q(0.5)} p99=${q(0.99)} max=${lat[lat.length - 1]} ms;`
    + ` node start lateness <=1 ms: ${((100 * count('1')) / total).toFixed(1)}%, <=5 ms: ${((100 * count('5')) / total).toFixed(1)}%, <=50 ms: ${((100 * count('50')) / total).toFixed(1)}%;`
    + ` node CPU ${(fireCpuUs / total).toFixed(0)} us/callback (fire + dispatch + record)`);
}
