#!/usr/bin/env bash
# Measurement script: a node under a steady load is killed with SIGKILL and started again on the same data
# directory; prints how long after the kill /readyz answered 200 (the new process's start included), then the
# bench's safety figures (an acknowledged job not delivered counts as lost).
#   bash bench/tools/kill-restart.sh [ROOT=.] [RATE=5000] [PORT=18091]
# ROOT is a checkout with dist/ built; the bench writes its steady-*.json result under bench/results as usual.
set -euo pipefail
root=${1:-.}; rate=${2:-5000}; port=${3:-18091}
data=$(mktemp -d /tmp/punctual-restart-XXXX)
out=$(mktemp /tmp/punctual-restart-XXXX.json)
node "$root/dist/cmd/punctual.js" serve --listen 127.0.0.1:$port --data "$data/d" > "$data/serve1.log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -s -o /dev/null "localhost:$port/readyz" && break; sleep 0.1; done
node "$root/dist/cmd/punctual.js" bench --scenario steady --rate "$rate" --duration-s 8 --delay-ms 3000 --server "http://127.0.0.1:$port" --json > "$out" 2>/dev/null &
bench=$!
sleep 5
kill -9 $pid
t0=$(date +%s%N)
node "$root/dist/cmd/punctual.js" serve --listen 127.0.0.1:$port --data "$data/d" > "$data/serve2.log" 2>&1 &
pid=$!
until [ "$(curl -s -o /dev/null -w '%{http_code}' "localhost:$port/readyz")" = 200 ]; do sleep 0.01; done
t1=$(date +%s%N)
echo "ready $(( (t1 - t0) / 1000000 )) ms after kill -9 (the new process's start included)"
wait $bench || true
kill $pid; wait $pid 2>/dev/null || true
node -e "const d=JSON.parse(require('fs').readFileSync('$out','utf8')).figures; console.log(JSON.stringify({accepted:d.accepted, delivered:d.delivered, lost:d.lost, early:d.early, duplicates:d.duplicates}))"
rm -rf "$data" "$out"
