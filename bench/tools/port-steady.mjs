// Measurement script (not a test, not product code): the firing side alone at a steady rate.
//   node bench/tools/port-steady.mjs [DIST=dist] [RATE=1000] [SECONDS=10] [SIGNED=1] [LEAD_MS=100]
// steady-rate firing side alone: FiringPort (thread, leases) staged RATE/s, LEAD ms ahead, for DUR s; receiver in child.
// prints firing thread CPU/callback, main CPU/callback, lateness p50/p99 (arrival at receiver - due, node clock = Date.now()),
// and the thread's context switches.
import { fork } from 'node:child_process';
import { resolve } from 'node:path';
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
if (process.argv[2] === '--receiver') {
  const { createServer } = await import('node:http');
  const lat = [];
  const srv = createServer({ keepAlive: true }, (req, res) => {
    lat.push(Date.now() - Number(req.headers['x-punctual-scheduled-at']));
    req.resume(); res.writeHead(200, { 'content-length': '0' }); res.end(); });
  srv.keepAliveTimeout = 120000;
  srv.listen({ port: 0, host: '127.0.0.1', backlog: 4096 }, () => process.send({ port: srv.address().port }));
  process.on('message', (m) => { if (m === 'reset') { lat.length = 0; return; } process.send({ lat }, () => process.exit(0)); });
} else {
  const [distArg = 'dist', rateArg = '1000', durArg = '10', signed = '1', leadArg = '100'] = process.argv.slice(2);
  const dist = resolve(distArg);
  const RATE = Number(rateArg), DUR = Number(durArg), LEAD = Number(leadArg);
  const { FiringPort } = await import(`file://${dist}/src/dispatch/firing-port.js`);
  const { silentLogger } = await import(`file://${dist}/src/core/log.js`);
  const receiver = fork(fileURLToPath(import.meta.url), ['--receiver']);
  const { port } = await new Promise((r) => receiver.once('message', r));
  const clock = { nowMs: () => Date.now() };
  const fp = new FiringPort({ clock, logger: silentLogger, lease: () => ({ term: 1, untilMs: performance.timeOrigin + performance.now() + 300 }) });
  await fp.ready();
  if (fp.mode !== 'thread') throw new Error('no thread');
  await fp.warmUp();
  const retry = { maxAttempts: 5, initialBackoffMs: 100, maxBackoffMs: 5000, multiplier: 2, jitter: true };
  const specs = new Map();
  const specFor = (due) => ({ url: `http://127.0.0.1:${port}/hook`, method: 'POST', headers: {}, timeoutMs: 10000, retry,
    signingSecret: signed === '1' ? 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQ=' : null, signingSecretNext: null, maxConcurrency: 1000 });
  const theSpec = specFor(0);
  const body = new TextEncoder().encode('{"hello":"world"}');
  const tid = () => {
    const r = process.report.getReport();
    const us = (u) => (u.userCpuSeconds + u.kernelCpuSeconds) * 1e6;
    const w = r.workers.find((x) => x.header.threadId === fp.worker.threadId);
    return { main: us(r.uvthreadResourceUsage), firing: us(w.uvthreadResourceUsage) };
  };
  // find the firing thread's OS tid: the newest task
  const tasks = () => readdirSync('/proc/self/task').map(Number).sort((a, b) => a - b);
  const ctx = (t) => { const s = readFileSync(`/proc/self/task/${t}/status`, 'utf8'); return [Number(/voluntary_ctxt_switches:\s+(\d+)/.exec(s)[1]), Number(/nonvoluntary_ctxt_switches:\s+(\d+)/.exec(s)[1])]; };
  let N = 0, failed = 0, left = 0;
  let finish;
  const allDone = new Promise((r) => (finish = r));
  let submitting = true;
  const done = (o) => { if (o === null || o.kind !== 'succeeded') failed++; if (--left === 0 && !submitting) finish(); };
  const total = RATE * DUR;
  // warm: 1 s at the rate, then reset
  const run = (count) => new Promise((res) => {
    const start = Date.now() + 5;
    let i = 0;
    const tick = () => {
      const now = Date.now();
      // stage every order whose due ms is within LEAD of now
      while (i < count && start + Math.floor(i * 1000 / RATE) <= now + LEAD) {
        const due = start + Math.floor(i * 1000 / RATE);
        const d = { jobId: `j${N}-${i}`, scheduledAtMs: due, attempt: 1, fencingToken: '0.1', spec: theSpec, body, bodyEncoding: 'json', concurrencyKey: `k${i % 7}` };
        left++;
        fp.stageTo(d, due, done, null);
        i++;
      }
      if (i < count) setTimeout(tick, 1); else res();
    };
    tick();
  });
  await run(RATE); N++;
  while (left > 0) await new Promise((r) => setTimeout(r, 50));
  receiver.send('reset');
  await new Promise((r) => setTimeout(r, 200));
  let msgs = 0; fp.worker.on('message', () => msgs++);
  const ftid = tasks().at(-1);
  const c0 = ctx(ftid), t0 = tid();
  await run(total); N++;
  while (left > 0) await new Promise((r) => setTimeout(r, 20));
  const t1 = tid(), c1 = ctx(ftid);
  await fp.close(1000);
  receiver.send('done');
  const { lat } = await new Promise((r) => receiver.once('message', r));
  lat.sort((a, b) => a - b);
  const q = (p) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))];
  const early = lat.filter((x) => x < 0).length;
  console.log(`${distArg} rate=${RATE} n=${total} got=${lat.length} failed=${failed} early=${early}: firing ${((t1.firing - t0.firing) / total).toFixed(1)} us/cb, main ${((t1.main - t0.main) / total).toFixed(1)} us/cb, late p50 ${q(0.5)} p99 ${q(0.99)} p999 ${q(0.999)} max ${lat.at(-1)}, msgs/cb ${(msgs/total).toFixed(2)}, ctxsw/cb vol ${((c1[0]-c0[0])/total).toFixed(2)} invol ${((c1[1]-c0[1])/total).toFixed(2)}`);
}
