// Measurement script (not a test, not product code): plain undici as a reference for the firing side. N POSTs at
// once through one undici Pool (128 keep-alive connections, as the Dispatcher's per-origin bound) with `request()`
// (a promise and a body stream per request) and the same number of headers a callback carries, into a keep-alive
// node:http receiver in a child process; ROUNDS rounds. Prints this process's CPU µs per request (user + system,
// every thread) per round and the median of all rounds but the first.
//   node bench/results/fire-2026-12-05/plain-undici.mjs [n=10000] [rounds=6]
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
if (process.argv[2] === '--receiver') {
  const { createServer } = await import('node:http');
  const srv = createServer({ keepAlive: true }, (req, res) => { req.resume(); res.writeHead(200, { 'content-length': '0' }); res.end(); });
  srv.keepAliveTimeout = 120000;
  srv.listen({ port: 0, host: '127.0.0.1', backlog: 4096 }, () => process.send({ port: srv.address().port }));
  process.on('message', () => process.exit(0));
} else {
  const [nArg = '10000', roundsArg = '6'] = process.argv.slice(2);
  const N = Number(nArg);
  const rounds = Number(roundsArg);
  const { Pool } = await import('undici');
  const receiver = fork(fileURLToPath(import.meta.url), ['--receiver']);
  const { port } = await new Promise((r) => receiver.once('message', r));
  const pool = new Pool(`http://127.0.0.1:${port}`, { connections: 128, pipelining: 1 });
  const perRequest = [];
  for (let r = 0; r < rounds; r++) {
    const cpu = process.cpuUsage();
    const all = [];
    for (let i = 0; i < N; i++) {
      const jobId = `j${r}-${i}`;
      const scheduledAtMs = 1_700_000_000_000 + i;
      // The unsigned callback's headers (docs/api.md): five of ours and a content-type.
      const headers = ['X-Deduplication-Key', `${jobId}:${scheduledAtMs}`, 'X-Punctual-Job-Id', jobId, 'X-Punctual-Scheduled-At', String(scheduledAtMs),
        'X-Punctual-Attempt', '1', 'X-Punctual-Fencing-Token', '0.1'];
      all.push(pool.request({ path: '/hook', method: 'POST', headers, body: null }).then((res) => res.body.dump()));
    }
    await Promise.all(all);
    const c = process.cpuUsage(cpu);
    perRequest.push((c.user + c.system) / N);
    console.log(`round ${r}: ${perRequest[r].toFixed(1)} us/request`);
  }
  await pool.close();
  receiver.send('done');
  const rest = perRequest.slice(1).sort((a, b) => a - b);
  console.log(`plain undici ${N}: median of rounds 2-${rounds}: ${rest[rest.length >> 1].toFixed(1)} us/request`);
}
