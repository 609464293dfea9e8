// Measurement script (not a test, not product code): a bench scenario against N spawned nodes, then each node's
// event-loop stalls, Ready-round and apply-slice durations and leadership changes, from its /metrics.
//   npm run build && node src/node/testing/cluster-measure.mjs SCENARIO [NODES=3] [DIST=dist] [-- bench flags]
// Prints the bench's table, then one JSON line per node. DIST may point at another build (a copy of dist/ with
// node_modules and package.json beside it) to compare before and after on the same machine load.
import { spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const argv = process.argv.slice(2);
const dash = argv.indexOf('--');
const [scenario = 'submit-batch', nodesArg = '3', distArg = 'dist'] = (dash < 0 ? argv : argv.slice(0, dash)).filter((a) => a !== '--prof');
const extra = dash < 0 ? [] : argv.slice(dash + 1);
// --prof (before --): the nodes run under testing/prof-entry.mjs (CPU profiles in $PUNCTUAL_PROF_DIR).
const prof = argv.includes('--prof') && (dash < 0 || argv.indexOf('--prof') < dash);
const dist = resolve(distArg);
const { spawnLocalNodes } = await import(pathToFileURL(`${dist}/bench/node-process.js`).href);
const nodes = await spawnLocalNodes({ nodes: Number(nodesArg), entry: prof ? new URL('./prof-entry.mjs', import.meta.url).pathname : `${dist}/cmd/punctual.js`, logLevel: 'warn' });

function metric(body, name) {
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(body);
  return m ? Number(m[1]) : null;
}
function buckets(body, name) {
  const out = {};
  for (const m of body.matchAll(new RegExp(`^${name}_bucket\\{le="([^"]+)"\\} (\\S+)$`, 'gm'))) out[m[1]] = Number(m[2]);
  return out;
}
/** Upper bound of the bucket holding quantile q (a histogram only tells that much). */
function quantileBound(b, q) {
  const total = b['+Inf'] ?? 0;
  for (const [le, n] of Object.entries(b)) if (n >= q * total) return le;
  return null;
}
async function scrape(url) {
  const body = await (await fetch(`${url}/metrics`)).text();
  const terms = [...body.matchAll(/^punctual_raft_term\{shard="\d+"\} (\S+)$/gm)].map((m) => Number(m[1]));
  const leads = [...body.matchAll(/^punctual_raft_role\{shard="\d+",role="leader"\} 1$/gm)].length;
  const summary = (name) => {
    const b = buckets(body, name);
    const count = metric(body, `${name}_count`) ?? 0;
    const sum = metric(body, `${name}_sum`) ?? 0;
    return { count, meanMs: count > 0 ? +(sum / count).toFixed(2) : null, p99LeMs: quantileBound(b, 0.99), over25: count - (b['25'] ?? 0), over100: count - (b['100'] ?? 0) };
  };
  return {
    url,
    stallMaxMs: metric(body, 'punctual_event_loop_stall_max_ms'),
    stallPerSecond: summary('punctual_event_loop_stall_ms'),
    round: summary('punctual_raft_append_duration_ms'),
    applySlice: summary('punctual_commit_duration_ms'),
    termSum: terms.reduce((a, b) => a + b, 0),
    leads,
  };
}

const before = await Promise.all(nodes.urls.map(scrape));
const code = await new Promise((done) => {
  const child = spawn(process.execPath, [`${dist}/cmd/punctual.js`, 'bench', '--scenario', scenario, '--server', nodes.urls.join(','), ...extra], { stdio: 'inherit' });
  child.on('exit', (c) => done(c ?? 1));
});
const after = await Promise.all(nodes.urls.map(scrape));
for (const [i, a] of after.entries()) {
  console.log(JSON.stringify({ ...a, leaderChanges: a.termSum - before[i].termSum }));
}
await nodes.stop();
process.exit(code);
