// Measurement helper (not a test, not product code): runs dist/cmd/punctual.js under the V8 CPU profiler for
// PUNCTUAL_PROF_MS (default 40 s) and writes $PUNCTUAL_PROF_DIR/<pid>.cpuprofile, so nodes spawned by
// cluster-measure.mjs (which pass no node flags) can be profiled:
//   PUNCTUAL_PROF_DIR=/tmp/prof node src/node/testing/cluster-measure.mjs submit-batch 3 dist --prof
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';

const session = new Session();
session.connect();
session.post('Profiler.enable');
session.post('Profiler.setSamplingInterval', { interval: 1000 });
session.post('Profiler.start');
const timer = setTimeout(() => {
  session.post('Profiler.stop', (err, res) => {
    if (!err) writeFileSync(`${process.env.PUNCTUAL_PROF_DIR ?? '.'}/${process.pid}.cpuprofile`, JSON.stringify(res.profile));
  });
}, Number(process.env.PUNCTUAL_PROF_MS ?? 40_000));
timer.unref();
// punctual.js runs only as the main script: say it is.
const main = new URL('../../../dist/cmd/punctual.js', import.meta.url);
process.argv[1] = main.pathname;
await import(main.href);
