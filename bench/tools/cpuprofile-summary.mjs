// Summarizes a V8 .cpuprofile (node --cpu-prof): top self-time and inclusive-time functions.
//   node bench/tools/cpuprofile-summary.mjs FILE.cpuprofile [top=40]
import { readFileSync } from 'node:fs';
const [file, topArg = '40'] = process.argv.slice(2);
const prof = JSON.parse(readFileSync(file, 'utf8'));
const byId = new Map(prof.nodes.map((n) => [n.id, n]));
const self = new Map();
const dt = prof.timeDeltas; let total = 0;
const counts = new Map();
for (let i = 0; i < prof.samples.length; i++) { const id = prof.samples[i]; counts.set(id, (counts.get(id) ?? 0) + (dt[i] ?? 0)); total += dt[i] ?? 0; }
const parent = new Map();
for (const n of prof.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const label = (n) => `${n.callFrame.functionName || '(anon)'} ${n.callFrame.url.replace(/^.*\/(dist|node_modules)\//, '$1/')}:${n.callFrame.lineNumber + 1}`;
const incl = new Map();
for (const [id, t] of counts) {
  const n = byId.get(id); const k = label(n); self.set(k, (self.get(k) ?? 0) + t);
  const seen = new Set(); let cur = id;
  while (cur !== undefined) { const k2 = label(byId.get(cur)); if (!seen.has(k2)) { seen.add(k2); incl.set(k2, (incl.get(k2) ?? 0) + t); } cur = parent.get(cur); }
}
const top = Number(topArg);
console.log(`total ${(total / 1000).toFixed(0)} ms`);
console.log('--- self');
for (const [k, t] of [...self].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${(t / 1000).toFixed(1).padStart(9)} ms ${(100 * t / total).toFixed(1).padStart(5)}%  ${k}`);
console.log('--- inclusive');
for (const [k, t] of [...incl].sort((a, b) => b[1] - a[1]).slice(0, top)) console.log(`${(t / 1000).toFixed(1).padStart(9)} ms ${(100 * t / total).toFixed(1).padStart(5)}%  ${k}`);
