// Measurement script (not a test, not product code): where a callback's CPU goes, from a V8 .cpuprofile of the
// firing window (bench/tools/hot-core.mjs with a profile dir). Each sample is charged to the first stage of the
// list below that any frame of its stack matches (so SQLite reads inside a fire count as fire, a metric observed
// inside an apply as metrics), and separately to its leaf kind (SQLite native calls, msgpack, socket writes).
//   node bench/tools/cpuprofile-breakdown.mjs FILE.cpuprofile [callbacks]
import { readFileSync } from 'node:fs';
const [file, nArg] = process.argv.slice(2);
const prof = JSON.parse(readFileSync(file, 'utf8'));
const n = nArg === undefined ? null : Number(nArg);
const byId = new Map(prof.nodes.map((x) => [x.id, x]));
const parent = new Map();
for (const x of prof.nodes) for (const c of x.children ?? []) parent.set(c, x.id);
const name = (x) => x.callFrame.functionName;
const url = (x) => x.callFrame.url;
// Stage rules in priority order: the first rule that matches any frame of the stack names the stage.
const stages = [
  ['idle', (x) => name(x) === '(idle)'],
  ['GC', (x) => name(x) === '(garbage collector)'],
  ['metrics (prom-client)', (x) => url(x).includes('prom-client')],
  ['logging', (x) => url(x).includes('/core/log.js')],
  ['Raft persist (log append, hard state)', (x) => name(x) === 'persist' && url(x).includes('raft-host')],
  ['apply (state machine, rows)', (x) => (name(x) === 'runApplier' || name(x) === 'applyEntry') && url(x).includes('raft-host')],
  ['retention', (x) => url(x).includes('retention')],
  ['fire (wheel, decide, read job/task/execution)', (x) => name(x) === 'tick' && url(x).includes('nodecore')],
  ['outcome (record into the batcher, propose)', (x) => ['dispatchOutcome', 'finished', 'dispatchStarted', 'started', 'flush', 'onFlush', 'proposeToLog'].includes(name(x)) && (url(x).includes('nodecore') || url(x).includes('/node/shell'))],
  ['dispatch (undici, sockets, dispatcher)', (x) => url(x).includes('undici') || url(x).includes('/dispatch/') || url(x).startsWith('node:net') || url(x).startsWith('node:internal/stream')],
  ['Raft (step, ready, send)', (x) => url(x).includes('/src/raft/') || url(x).includes('raft-host') || url(x).includes('/http/peer')],
  ['node shell / other JS', (x) => url(x).includes('/dist/')],
];
const leafKinds = [
  ['SQLite native (get/run/all/iterate)', (x) => url(x) === '' && ['get', 'run', 'all', 'iterate', 'next'].includes(name(x))],
  ['msgpack', (x) => url(x).includes('msgpackr')],
  ['socket write syscalls', (x) => name(x) === 'writeLatin1String' || name(x) === 'writeBuffer' || name(x) === 'writev'],
  ['HTTP parser (wasm)', (x) => url(x).startsWith('wasm://')],
];
const t = new Map();
let total = 0;
for (let i = 0; i < prof.samples.length; i++) {
  const id = prof.samples[i];
  const dt = prof.timeDeltas[i] ?? 0;
  t.set(id, (t.get(id) ?? 0) + dt);
  total += dt;
}
const byStage = new Map();
const byLeaf = new Map();
for (const [id, dt] of t) {
  const path = [];
  for (let cur = id; cur !== undefined; cur = parent.get(cur)) path.push(byId.get(cur));
  path.reverse();
  let stage = 'other (engine, timers, microtasks)';
  for (const [s, f] of stages) if (path.some(f)) { stage = s; break; }
  byStage.set(stage, (byStage.get(stage) ?? 0) + dt);
  const leaf = byId.get(id);
  for (const [k, f] of leafKinds) if (f(leaf)) byLeaf.set(k, (byLeaf.get(k) ?? 0) + dt);
}
const busy = total - (byStage.get('idle') ?? 0);
const row = (k, v) => `| ${k} | ${(v / 1000).toFixed(0)} | ${((100 * v) / busy).toFixed(1)} % |${n ? ` ${(v / n).toFixed(1)} |` : ''}`;
console.log(`main thread: ${(total / 1000).toFixed(0)} ms sampled, ${(busy / 1000).toFixed(0)} ms busy${n ? `, ${(busy / n).toFixed(1)} us busy per callback` : ''}`);
console.log(`| stage | ms | share of busy |${n ? ' us per callback |' : ''}\n|---|---|---|${n ? '---|' : ''}`);
for (const [k, v] of [...byStage].sort((a, b) => b[1] - a[1])) if (k !== 'idle') console.log(row(k, v));
console.log(`\n| across stages (leaf) | ms | share of busy |${n ? ' us per callback |' : ''}\n|---|---|---|${n ? '---|' : ''}`);
for (const [k, v] of [...byLeaf].sort((a, b) => b[1] - a[1])) console.log(row(k, v));
