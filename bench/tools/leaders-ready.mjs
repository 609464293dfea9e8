// Measurement script (not a test): how long after a fresh three-node cluster is ready (/readyz 200 on every node)
// its shard leaderships are balanced (every shard led, each node leading within +-1 of shards/3), with the default
// rebalancer on. Starts `punctual serve` x3 of the build at ROOT (default: this checkout) on loopback, RUNS times,
// fresh data directories each time; writes bench/results/leaders-ready-<time>.json under OUT_ROOT (default ROOT).
//   node bench/tools/leaders-ready.mjs [RUNS] [ROOT] [BASE_PORT] [OUT_ROOT]
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const runs = Number(process.argv[2] ?? 5);
const root = resolve(process.argv[3] ?? '.');
const basePort = Number(process.argv[4] ?? 18720);
const outRoot = resolve(process.argv[5] ?? root);
const shards = 8;
const ids = ['n1', 'n2', 'n3'];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function get(port, path) {
  try {
    const res = await fetch(`http://127.0.0.1:${port}${path}`);
    return { status: res.status, json: res.headers.get('content-type')?.includes('json') ? await res.json() : null };
  } catch {
    return { status: 0, json: null };
  }
}

async function once(run) {
  const dir = mkdtempSync(join(tmpdir(), 'punctual-leaders-'));
  writeFileSync(join(dir, 'secret'), 'leaders-ready-secret-0123456789', { mode: 0o600 });
  const api = (i) => basePort + i * 2;
  const peer = (i) => basePort + i * 2 + 1;
  const t0 = performance.now();
  const procs = ids.map((id, i) => {
    const peers = ids.flatMap((other, k) => (k === i ? [] : [`${other}=127.0.0.1:${peer(k)}`])).join(',');
    const args = [join(root, 'dist', 'cmd', 'punctual.js'), 'serve', '--node-id', id, '--listen', `127.0.0.1:${api(i)}`, '--peer-listen', `127.0.0.1:${peer(i)}`,
      '--data', join(dir, id), '--peers', peers, '--shards', String(shards), '--cluster-secret-file', join(dir, 'secret'), '--log-level', 'warn'];
    return spawn(process.execPath, args, { stdio: 'ignore' });
  });
  let readyMs = null;
  let balancedMs = null;
  let layout = null;
  try {
    for (;;) {
      const now = performance.now() - t0;
      if (now > 60_000) break;
      if (readyMs === null) {
        const answers = await Promise.all(ids.map((_, i) => get(api(i), '/readyz')));
        if (answers.every((a) => a.status === 200)) readyMs = performance.now() - t0;
      } else {
        const view = (await get(api(0), '/v1/cluster')).json;
        const leaders = view?.shards?.map((s) => s.leader) ?? [];
        const counts = ids.map((id) => leaders.filter((l) => l === id).length);
        if (leaders.length === shards && leaders.every((l) => l !== null) && counts.every((c) => Math.abs(c - shards / ids.length) <= 1)) {
          balancedMs = performance.now() - t0;
          layout = Object.fromEntries(ids.map((id, i) => [id, counts[i]]));
          break;
        }
      }
      await sleep(20);
    }
  } finally {
    for (const p of procs) p.kill('SIGKILL');
    await sleep(300);
    rmSync(dir, { recursive: true, force: true });
  }
  const r = { run, readyMs, balancedMs, readyToBalancedMs: readyMs !== null && balancedMs !== null ? balancedMs - readyMs : null, layout };
  console.log(JSON.stringify(r));
  return r;
}

const results = [];
for (let i = 0; i < runs; i++) results.push(await once(i + 1));
const gaps = results.map((r) => r.readyToBalancedMs).filter((x) => x !== null).sort((a, b) => a - b);
const summary = { scenario: 'leaders-ready', startedAt: new Date().toISOString(), root, shards, nodes: ids.length, runs: results,
  readyToBalancedMedianMs: gaps.length > 0 ? gaps[Math.floor(gaps.length / 2)] : null, neverBalanced: results.filter((r) => r.balancedMs === null).length };
mkdirSync(join(outRoot, 'bench', 'results'), { recursive: true });
const file = join(outRoot, 'bench', 'results', `leaders-ready-${summary.startedAt.replace(/[:.]/g, '-')}.json`);
writeFileSync(file, JSON.stringify(summary, null, 2) + '\n');
console.log(`median ready -> balanced ${summary.readyToBalancedMedianMs?.toFixed(0)} ms; written: ${file}`);
