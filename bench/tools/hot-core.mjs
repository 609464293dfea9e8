// Measurement script (not a test, not product code): a hot instant on the node core (no client API): N one-off
// jobs due at the same ms, a receiver in a child process. Prints time to the first / last arrival, duplicates,
// the node's CPU us per callback (fire + dispatch + record; also the main thread's and the firing thread's own) and
// the longest event-loop stall, and writes them to
// bench/results/hot-core-<time>.json.
//   npm run build && node bench/tools/hot-core.mjs [dist=dist] [jobs=20000] [profile-dir]
// PUNCTUAL_FIRING_THREAD=off sends the callbacks from the main loop (serve --firing-thread off; default: the firing
// thread, as serve), PUNCTUAL_STAGE_LEAD_MS sets serve --stage-lead-ms; the CPU figure is the whole process's, the
// firing thread's included.
// With a profile dir, the main thread is profiled (node:inspector) from the instant to the end only, so the
// profile holds the callbacks' work and not the submission's: <dir>/hot-core-<time>.cpuprofile.
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { monitorEventLoopDelay } from 'node:perf_hooks';
if (process.argv[2] === '--receiver') {
  const { createServer } = await import('node:http');
  const lat = []; const seen = new Set(); let dups = 0;
  const srv = createServer({ keepAlive: true }, (req, res) => {
    const k = req.headers['x-deduplication-key']; if (seen.has(k)) dups++; else seen.add(k);
    lat.push(performance.timeOrigin + performance.now() - Number(req.headers['x-punctual-scheduled-at']));
    req.resume(); res.writeHead(200, { 'content-length': '0' }); res.end();
  });
  srv.keepAliveTimeout = 120000;
  // Warmed up (as bench/receiver.ts is) and then forgotten: a fresh receiver's first requests are slower to parse.
  const warmUp = async (port) => {
    const { request, Agent } = await import('node:http');
    const agent = new Agent({ keepAlive: true, maxSockets: 20 });
    await Promise.all(Array.from({ length: 600 }, (_, i) => new Promise((done) => {
      const req = request({ host: '127.0.0.1', port, path: '/hook', method: 'POST', agent,
        headers: { 'x-deduplication-key': `warm-${i}:0`, 'x-punctual-scheduled-at': String(Date.now()) } }, (res) => { res.resume(); res.on('end', done); res.on('error', done); });
      req.on('error', done);
      req.end();
    })));
    agent.destroy();
    lat.length = 0; seen.clear(); dups = 0;
  };
  srv.listen({ port: 0, host: '127.0.0.1', backlog: 4096 }, () => void warmUp(srv.address().port).then(() => process.send({ port: srv.address().port })));
  process.on('message', () => process.send({ lat, dups }, () => process.exit(0)));
} else {
  const [distArg = 'dist', nArg = '20000', profDir = null] = process.argv.slice(2);
  const dist = resolve(distArg);
  const N = Number(nArg);
  const { openNode } = await import(`file://${dist}/src/node/host.js`);
  const { silentLogger } = await import(`file://${dist}/src/core/log.js`);
  const receiver = fork(fileURLToPath(import.meta.url), ['--receiver']);
  const { port } = await new Promise((r) => receiver.once('message', r));
  const dir = mkdtempSync(join(tmpdir(), 'punctual-hot-'));
  const config = { listenHost: '127.0.0.1', listenPort: 0, dataDir: dir, nodeId: 'n1', peerListenHost: '127.0.0.1', peerListenPort: 0,
    peers: [], shards: 8, authToken: null, clusterSecret: null, fsync: 'batch', logLevel: 'error', logFormat: 'json', metricsAuth: false, clockOffsetMs: 0,
    firingThread: process.env.PUNCTUAL_FIRING_THREAD !== 'off',
    ...(process.env.PUNCTUAL_STAGE_LEAD_MS ? { stageLeadMs: Number(process.env.PUNCTUAL_STAGE_LEAD_MS) } : {}) };
  const core = await openNode(config, { logger: silentLogger });
  await core.start();
  const retry = { maxAttempts: 5, initialBackoffMs: 100, maxBackoffMs: 5000, multiplier: 2, jitter: true };
  await core.service.putTask('hook', { url: `http://127.0.0.1:${port}/hook`, method: 'POST', headers: {}, timeoutMs: 10000, retry, signingSecret: null, maxConcurrency: 1000 });
  const job = (id, atMs) => ({ id, task: 'hook', callback: null, payload: new Uint8Array(0), payloadEncoding: 'json', schedule: { kind: 'once', atMs },
    endAtMs: null, maxRuns: 0, misfire: 'fire_once', overlap: 'allow', metadata: null, requestDigest: `d-${id}`, idempotencyKey: null });
  const at = Date.now() + 2000 + N / 10;
  for (let b = 0; b < N; b += 5000) await core.service.createJobs(Array.from({ length: Math.min(5000, N - b) }, (_, i) => job(`h${b + i}`, at)));
  // Per thread: the main thread's and the firing thread's own CPU (the diagnostic report's per-thread rusage; the
  // FiringPort's worker found by its threadId), beside the whole process's. Counted from the end of the submission,
  // not from the instant: the firing thread receives, prepares and warms staged callbacks up to the stage lead
  // (100 ms) before their due ms, and it does nothing else meanwhile.
  const firingWorker = core.engine.dispatcher?.worker ?? null;
  const threadCpuUs = () => {
    const r = process.report.getReport();
    const us = (u) => (u.userCpuSeconds + u.kernelCpuSeconds) * 1e6;
    const w = firingWorker === null ? undefined : r.workers.find((x) => x.header.threadId === firingWorker.threadId);
    return { main: us(r.uvthreadResourceUsage), firing: w === undefined ? null : us(w.uvthreadResourceUsage) };
  };
  const threads0 = threadCpuUs();
  await new Promise((r) => setTimeout(r, Math.max(0, at - Date.now() - 20)));
  let session = null;
  if (profDir !== null) {
    const { Session } = await import('node:inspector/promises');
    session = new Session(); session.connect();
    await session.post('Profiler.enable'); await session.post('Profiler.start');
  }
  const h = monitorEventLoopDelay({ resolution: 5 }); h.enable();
  const cpu = process.cpuUsage();
  let done = 0;
  // Done once nothing is armed or out AND every record (fired, outcome) is applied: the records are part of a callback's cost.
  while (done < N) {
    await new Promise((r) => setTimeout(r, 50));
    done = Date.now() > at && core.engine.wheelSize === 0 && core.engine.inFlightCount() === 0 && core.engine.idle() && core.engine.settled() ? N : 0;
    if (Date.now() > at + 120000) break;
  }
  const c = process.cpuUsage(cpu);
  const threads1 = threadCpuUs();
  h.disable();
  if (session !== null) {
    const { profile } = await session.post('Profiler.stop');
    const { mkdirSync } = await import('node:fs');
    mkdirSync(profDir, { recursive: true });
    const file = join(profDir, `hot-core-${new Date().toISOString().replace(/[:.]/g, '-')}.cpuprofile`);
    writeFileSync(file, JSON.stringify(profile));
    console.log(`profile: ${file}`);
    session.disconnect();
  }
  const folded = core.proposer?.foldedTotal ?? 0;
  await core.close();
  receiver.send('done');
  const { lat, dups } = await new Promise((r) => receiver.once('message', r));
  rmSync(dir, { recursive: true, force: true });
  lat.sort((a, b) => a - b);
  const figures = { jobs: N, firstMs: lat[0], lastMs: lat[lat.length - 1], p50Ms: lat[lat.length >> 1], duplicates: dups,
    nodeCpuUsPerCallback: (c.user + c.system) / N,
    // From the end of the submission (threadCpuUs above), unlike nodeCpuUsPerCallback.
    mainThreadCpuUsPerCallback: (threads1.main - threads0.main) / N,
    firingThreadCpuUsPerCallback: threads0.firing === null || threads1.firing === null ? null : (threads1.firing - threads0.firing) / N, maxLoopStallMs: h.max / 1e6, firedFolded: folded };
  const startedAt = new Date().toISOString();
  const out = join(fileURLToPath(new URL('../results/', import.meta.url)), `hot-core-${startedAt.replace(/[:.]/g, '-')}.json`);
  const firing = `${process.env.PUNCTUAL_FIRING_THREAD !== 'off' ? 'thread' : 'main loop'}, stage lead ${process.env.PUNCTUAL_STAGE_LEAD_MS ?? 'default'}`;
  writeFileSync(out, JSON.stringify({ scenario: 'hot-core', startedAt, dist, firing, loadAverage: loadavg(), figures }, null, 2) + '\n');
  console.log(`${firing} N=${N}: first ${lat[0].toFixed(0)} ms, last ${lat[lat.length - 1].toFixed(0)} ms, p50 ${lat[lat.length >> 1].toFixed(0)} ms, dups ${dups}, node CPU ${((c.user + c.system) / N).toFixed(1)} us/callback (main thread ${figures.mainThreadCpuUsPerCallback.toFixed(1)}, firing thread ${figures.firingThreadCpuUsPerCallback?.toFixed(1) ?? '-'}), max loop stall ${(h.max / 1e6).toFixed(0)} ms, fired items folded ${folded}; written ${out}`);
}
