// Measurement script (not a test, not product code): plain undici paced like the firing thread, the reference.
//   node bench/tools/plain-steady.mjs [wait|timer] [RATE=1000] [SECONDS=6]
// plain undici at a steady rate from a worker thread: pacing 'timer' (setTimeout per request) or 'wait' (Atomics.wait to the ms, like FiringCore)
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
if (process.argv[2] === '--receiver') {
  const { createServer } = await import('node:http');
  const srv = createServer({ keepAlive: true }, (req, res) => { req.resume(); res.writeHead(200, { 'content-length': '0' }); res.end(); });
  srv.keepAliveTimeout = 120000;
  srv.listen({ port: 0, host: '127.0.0.1', backlog: 4096 }, () => process.send({ port: srv.address().port }));
  process.on('message', () => process.exit(0));
} else if (isMainThread) {
  const [mode = 'wait', rate = '1000', dur = '6'] = process.argv.slice(2);
  const receiver = fork(fileURLToPath(import.meta.url), ['--receiver']);
  const { port } = await new Promise((r) => receiver.once('message', r));
  const w = new Worker(fileURLToPath(import.meta.url), { workerData: { port, mode, rate: Number(rate), dur: Number(dur) } });
  w.on('message', (m) => { console.log(`plain undici ${mode}: ${m.toFixed(1)} us/request thread CPU`); receiver.send('x'); w.terminate(); });
} else {
  const { Pool } = await import('/work/main/node_modules/undici/index.js');
  const { port, mode, rate, dur } = workerData;
  const pool = new Pool(`http://127.0.0.1:${port}`, { connections: 128, pipelining: 1 });
  const sleeper = new Int32Array(new SharedArrayBuffer(4));
  const headers = ['content-type', 'application/json', 'x-deduplication-key', 'k', 'x-punctual-job-id', 'j', 'x-punctual-scheduled-at', '1', 'x-punctual-attempt', '1', 'x-punctual-fencing-token', '0.1'];
  const body = Buffer.from('{"hello":"world"}');
  let left = 0, sent = 0;
  const handler = () => ({ onConnect() {}, onHeaders() { return true; }, onData() { return true; }, onComplete() { left--; }, onError() { left--; } });
  const send = () => { left++; sent++; pool.dispatch({ path: '/hook', method: 'POST', headers, body, headersTimeout: 0, bodyTimeout: 0 }, handler()); };
  // warm
  for (let i = 0; i < 200; i++) send();
  while (left > 0) await new Promise((r) => setTimeout(r, 10));
  const total = rate * dur; sent = 0;
  const { readFileSync } = await import('node:fs');
  const tcpu = () => { const f = readFileSync('/proc/thread-self/stat', 'utf8').split(') ')[1].split(' '); return (Number(f[11]) + Number(f[12])) * 10000; };
  const c0 = tcpu();
  const t0 = performance.now() + 5;
  await new Promise((res) => {
    const step = () => {
      if (sent >= total) return res();
      const due = t0 + (sent * 1000) / rate;
      const left = due - performance.now();
      if (mode === 'timer') {
        if (left > 0) return void setTimeout(step, Math.max(0, Math.floor(left)));
        send(); setImmediate(step); return;
      }
      if (left > 1.2) return void setTimeout(step, Math.floor(left - 1));
      if (left > 0) Atomics.wait(sleeper, 0, 0, left);
      send(); setImmediate(step);
    };
    step();
  });
  while (left > 0) await new Promise((r) => setTimeout(r, 5));
  parentPort.postMessage((tcpu() - c0) / total);
}
