#!/usr/bin/env node
// Measures the single executable's start: milliseconds from spawn to the `ready` log line and to the first
// 200 on /readyz, for a first start (empty addon cache, empty data folder) and a warm one (cache and data
// present). A measurement, not a test: prints the figures for docs/deploy.md.
//
//   node test/binary/measure-start.mjs [dist/punctual-linux-x64] [runs]
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { createServer } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const binary = resolve(process.argv[2] ?? 'dist/punctual-linux-x64');
const runs = Number(process.argv[3] ?? 5);

function freePort() {
  return new Promise((ok) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

function readyz(port) {
  return new Promise((ok) => {
    const req = request({ host: '127.0.0.1', port, path: '/readyz' }, (res) => {
      res.resume();
      ok(res.statusCode === 200);
    });
    req.on('error', () => ok(false));
    req.end();
  });
}

async function startOnce(home, data) {
  const [api, peer] = [await freePort(), await freePort()];
  const t0 = performance.now();
  const child = spawn(binary, ['serve', '--listen', `127.0.0.1:${api}`, '--peer-listen', `127.0.0.1:${peer}`, '--data', data], {
    env: { PATH: '/nonexistent', HOME: home },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const readyMs = await new Promise((ok, fail) => {
    let buf = '';
    child.stderr.on('data', (c) => {
      buf += c;
      if (buf.includes('"msg":"ready"')) ok(performance.now() - t0);
    });
    child.once('exit', (code) => fail(new Error(`exited ${code}: ${buf}`)));
  });
  while (!(await readyz(api))) await new Promise((r) => setTimeout(r, 2));
  const readyzMs = performance.now() - t0;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await exited;
  return { readyMs, readyzMs };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const cold = [];
const warm = [];
for (let i = 0; i < runs; i++) {
  const home = mkdtempSync(join(tmpdir(), 'punctual-start-'));
  cold.push(await startOnce(home, join(home, 'data')));
  warm.push(await startOnce(home, join(home, 'data')));
  rmSync(home, { recursive: true, force: true });
}
for (const [name, xs] of [['first start (empty cache and data)', cold], ['warm start (cache and data present)', warm]]) {
  console.log(`${name}: ready log line median ${median(xs.map((x) => x.readyMs)).toFixed(0)} ms, ` +
    `/readyz 200 median ${median(xs.map((x) => x.readyzMs)).toFixed(0)} ms ` +
    `(runs ${xs.map((x) => x.readyzMs.toFixed(0)).join(', ')})`);
}
console.log(`load average ${loadavg().map((x) => x.toFixed(2)).join(' ')}, ${runs} runs each`);
