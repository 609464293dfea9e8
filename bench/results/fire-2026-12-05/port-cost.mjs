// Measurement script (not a test, not product code): the firing side alone, as the node uses it. A FiringPort of a
// BUILT tree (its FiringCore on the firing thread, leases enforced) is handed N deliveries per round, sent now in
// batches of 256 per macrotask (as the NodeCore hands a hot instant over) or staged 100 ms ahead, into a keep-alive
// node:http receiver in a child process; ROUNDS rounds. Prints per round the firing thread's own CPU, the main
// thread's and the whole process's, in µs per callback, and the medians of all rounds but the first. Nothing of
// the node (Raft, SQLite, the NodeCore) is in it: the main thread's figure is the port's own work (hand-over,
// events) and the bench's.
//   node bench/results/fire-2026-12-05/port-cost.mjs [dist=dist] [n=10000] [signed=0] [rounds=6] [mode=now|stage]
import { fork } from 'node:child_process';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
if (process.argv[2] === '--receiver') {
  const { createServer } = await import('node:http');
  const srv = createServer({ keepAlive: true }, (req, res) => { req.resume(); res.writeHead(200, { 'content-length': '0' }); res.end(); });
  srv.keepAliveTimeout = 120000;
  srv.listen({ port: 0, host: '127.0.0.1', backlog: 4096 }, () => process.send({ port: srv.address().port }));
  process.on('message', () => process.exit(0));
} else {
  const [distArg = 'dist', nArg = '10000', signed = '0', roundsArg = '6', mode = 'now'] = process.argv.slice(2);
  const dist = resolve(distArg);
  const N = Number(nArg);
  const rounds = Number(roundsArg);
  const { FiringPort } = await import(`file://${dist}/src/dispatch/firing-port.js`);
  const { silentLogger } = await import(`file://${dist}/src/core/log.js`);
  const receiver = fork(fileURLToPath(import.meta.url), ['--receiver']);
  const { port } = await new Promise((r) => receiver.once('message', r));
  const clock = { nowMs: () => Date.now() };
  // One shard, term 1, its lease trusted throughout (the thread still checks it per send).
  const fp = new FiringPort({ clock, logger: silentLogger, lease: () => ({ term: 1, untilMs: Number.POSITIVE_INFINITY }) });
  await fp.ready();
  if (fp.mode !== 'thread') throw new Error(`no firing thread in ${dist}`);
  const retry = { maxAttempts: 5, initialBackoffMs: 100, maxBackoffMs: 5000, multiplier: 2, jitter: true };
  const spec = { url: `http://127.0.0.1:${port}/hook`, method: 'POST', headers: {}, timeoutMs: 10000, retry,
    signingSecret: signed === '1' ? 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQ=' : null, signingSecretNext: null, maxConcurrency: 1000 };
  const body = new Uint8Array(0);
  const threadCpuUs = () => {
    const r = process.report.getReport();
    const us = (u) => (u.userCpuSeconds + u.kernelCpuSeconds) * 1e6;
    const w = r.workers.find((x) => x.header.threadId === fp.worker.threadId);
    return { main: us(r.uvthreadResourceUsage), firing: us(w.uvthreadResourceUsage) };
  };
  const rows = [];
  for (let r = 0; r < rounds; r++) {
    let left = N, failed = 0;
    const allDone = new Promise((res) => {
      const done = (o) => { if (o === null || o.kind !== 'succeeded') failed++; if (--left === 0) res(); };
      const t0 = threadCpuUs();
      const cpu = process.cpuUsage();
      const dueAtMs = Date.now() + 100;
      let i = 0;
      const some = () => {
        for (const end = Math.min(N, i + 256); i < end; i++) {
          const d = { jobId: `j${r}-${i}`, scheduledAtMs: 1_700_000_000_000 + i, attempt: 1, fencingToken: '0.1', spec, body, bodyEncoding: 'json', concurrencyKey: 'hook' };
          if (mode === 'stage') fp.stageTo(d, dueAtMs, done, null);
          else fp.sendTo(d, done, null);
        }
        if (i < N) setImmediate(some);
      };
      some();
      rows[r] = { t0, cpu };
    });
    await allDone;
    const c = process.cpuUsage(rows[r].cpu);
    const t1 = threadCpuUs();
    rows[r] = { firing: (t1.firing - rows[r].t0.firing) / N, main: (t1.main - rows[r].t0.main) / N, node: (c.user + c.system) / N };
    console.log(`round ${r}: firing thread ${rows[r].firing.toFixed(1)}, main thread ${rows[r].main.toFixed(1)}, process ${rows[r].node.toFixed(1)} us/callback, ${failed} not succeeded`);
  }
  await fp.close(1000);
  receiver.send('done');
  const med = (k) => { const v = rows.slice(1).map((x) => x[k]).sort((a, b) => a - b); return v[v.length >> 1].toFixed(1); };
  console.log(`${dist} ${mode} signed=${signed}: medians of rounds 2-${rounds}: firing thread ${med('firing')}, main thread ${med('main')}, process ${med('node')} us/callback`);
}
