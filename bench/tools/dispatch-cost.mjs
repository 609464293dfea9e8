// Measurement script (not a test, not product code): the callback sender alone. N sends at once through one
// Dispatcher of a BUILT tree into a node:http receiver in a child process (keep-alive, 200, empty body), ROUNDS
// rounds; prints this process's CPU µs per send (user + system, every thread) of each round and the median of all
// rounds but the first (connections, JIT). The node's other work (fire, records, Raft) is not in it.
//   node bench/tools/dispatch-cost.mjs [dist=dist] [sends=10000] [signed=1] [rounds=5] [profile-file]
// signed=1: the spec has a signing secret (three HMACs per send); 0: unsigned, as in hot-core.mjs.
// With a profile file, the last round is profiled (node:inspector) into it.
import { fork } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
if (process.argv[2] === '--receiver') {
  const { createServer } = await import('node:http');
  const srv = createServer({ keepAlive: true }, (req, res) => { req.resume(); res.writeHead(200, { 'content-length': '0' }); res.end(); });
  srv.keepAliveTimeout = 120000;
  srv.listen({ port: 0, host: '127.0.0.1', backlog: 4096 }, () => process.send({ port: srv.address().port }));
  process.on('message', () => process.exit(0));
} else {
  const [distArg = 'dist', nArg = '10000', signed = '1', roundsArg = '5', profFile = null] = process.argv.slice(2);
  const dist = resolve(distArg);
  const N = Number(nArg);
  const rounds = Number(roundsArg);
  const { Dispatcher } = await import(`file://${dist}/src/dispatch/dispatcher.js`);
  const { silentLogger } = await import(`file://${dist}/src/core/log.js`);
  const receiver = fork(fileURLToPath(import.meta.url), ['--receiver']);
  const { port } = await new Promise((r) => receiver.once('message', r));
  // As the node does: a start hook and an admission check per send.
  const d = new Dispatcher({ clock: { nowMs: () => Date.now() }, logger: silentLogger, onStart: () => {}, admit: () => true });
  const retry = { maxAttempts: 5, initialBackoffMs: 100, maxBackoffMs: 5000, multiplier: 2, jitter: true };
  const spec = { url: `http://127.0.0.1:${port}/hook`, method: 'POST', headers: { 'x-tenant': 'bench' }, timeoutMs: 10000, retry,
    signingSecret: signed === '1' ? 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQ=' : null, maxConcurrency: 1000 };
  const body = Buffer.from('{"hello":"world","n":12345}');
  const perSend = [];
  for (let r = 0; r < rounds; r++) {
    let session = null;
    if (profFile !== null && r === rounds - 1) {
      const { Session } = await import('node:inspector/promises');
      session = new Session(); session.connect();
      await session.post('Profiler.enable'); await session.post('Profiler.start');
    }
    const cpu = process.cpuUsage();
    const sends = [];
    for (let i = 0; i < N; i++) {
      sends.push(d.send({ jobId: `j${r}-${i}`, scheduledAtMs: 1_700_000_000_000 + i, attempt: 1, fencingToken: '3.7', spec, body, concurrencyKey: 'hook' }));
    }
    const outcomes = await Promise.all(sends);
    const c = process.cpuUsage(cpu);
    if (session !== null) {
      const { profile } = await session.post('Profiler.stop');
      writeFileSync(profFile, JSON.stringify(profile));
      session.disconnect();
    }
    const failed = outcomes.filter((o) => o.kind !== 'succeeded').length;
    perSend.push((c.user + c.system) / N);
    console.log(`round ${r}: ${perSend[r].toFixed(1)} us/send, ${failed} not succeeded`);
  }
  await d.close(1000);
  receiver.send('done');
  const rest = perSend.slice(1).sort((a, b) => a - b);
  console.log(`${dist}: median of rounds 2-${rounds}: ${rest[rest.length >> 1].toFixed(1)} us/send (signed=${signed})`);
}
