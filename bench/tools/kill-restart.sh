#!/usr/bin/env bash
# Measurement script: a node under a steady load is killed with SIGKILL and started again on the same data
# directory; prints how long after the kill /readyz answered 200 (the new process's start included), then the
# bench's safety figures (an acknowledged job not delivered counts as lost), and writes both to
# bench/results/restart-<time>.json (or RESULTS_DIR/restart-<time>.json), with the restarted node's `startup
# phases` debug line when it logs one (src/node/README.md: when each step of its start ended).
#   bash bench/tools/kill-restart.sh [ROOT=.] [RATE=5000] [PORT=18091]
# ROOT is a checkout with dist/ built. The node runs as `node ROOT/dist/cmd/punctual.js`, or as SERVE_CMD when set
# (the single executable: SERVE_CMD=dist/punctual-linux-x64 after `npm run build:binary`).
set -euo pipefail
root=${1:-.}; rate=${2:-5000}; port=${3:-18091}
serve_cmd=${SERVE_CMD:-node $root/dist/cmd/punctual.js}
data=$(mktemp -d /tmp/punctual-restart-XXXX)
out=$(mktemp /tmp/punctual-restart-XXXX.json)
$serve_cmd serve --listen 127.0.0.1:$port --data "$data/d" > "$data/serve1.log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -s -o /dev/null "localhost:$port/readyz" && break; sleep 0.1; done
node "$root/dist/cmd/punctual.js" bench --scenario steady --rate "$rate" --duration-s 8 --delay-ms 3000 --server "http://127.0.0.1:$port" --out "$data/results" --json > "$out" 2>/dev/null &
bench=$!
sleep 5
kill -9 $pid
t0=$(date +%s%N)
$serve_cmd serve --listen 127.0.0.1:$port --data "$data/d" --log-level debug > "$data/serve2.log" 2>&1 &
pid=$!
until [ "$(curl -s -o /dev/null -w '%{http_code}' "localhost:$port/readyz")" = 200 ]; do sleep 0.01; done
t1=$(date +%s%N)
ready_ms=$(( (t1 - t0) / 1000000 ))
echo "ready $ready_ms ms after kill -9 (the new process's start included)"
wait $bench || true
kill $pid; wait $pid 2>/dev/null || true
results=${RESULTS_DIR:-bench/results}
mkdir -p "$results"
node -e "
const fs = require('fs');
const r = JSON.parse(fs.readFileSync('$out', 'utf8'));
const f = r.figures;
const line = fs.readFileSync('$data/serve2.log', 'utf8').split('\n').find((l) => l.includes('\"msg\":\"startup phases\"'));
const phases = line === undefined ? null : JSON.parse(line);
if (phases !== null) for (const k of ['time', 'level', 'msg', 'node']) delete phases[k];
const result = { scenario: 'restart', startedAt: r.startedAt, gitCommit: r.gitCommit, loadAverage: r.loadAverage, parameters: { ratePerS: $rate, killAfterS: 5, serve: '$serve_cmd' },
  figures: { readyMsAfterKill: $ready_ms, accepted: f.accepted, delivered: f.delivered, lost: f.lost, early: f.early, duplicates: f.duplicates }, startupPhases: phases };
const file = '$results/restart-' + r.startedAt.replace(/[:.]/g, '-') + '.json';
fs.writeFileSync(file, JSON.stringify(result, null, 2) + '\\n');
console.log(JSON.stringify(result.figures), '->', file);
"
rm -rf "$data" "$out"
