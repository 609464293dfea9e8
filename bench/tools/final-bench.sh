#!/bin/bash
# Measurement script (not a test): the tables of docs/performance.md.
# The lead tables, on a quiet machine: every scenario of `punctual bench` on the build in ./dist,
# results in bench/results (latest-<scenario>.json), a one-line summary per run in $LOG.
#   bash bench/tools/final-bench.sh LOG ROUNDS   (from the repository root, after npm run build)
set -u
log=$1 rounds=${2:-2}
run() {
  local name=$1; shift
  local out
  out=$(timeout 600 node dist/cmd/punctual.js bench "$@" 2>&1)
  echo "=== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $name: $*" >> "$log"
  printf '%s\n' "$out" | grep -E "accepted jobs/s|delivered callbacks/s|lateness p50|lateness p99|delivered within|first arrival|node-side|node CPU|delivered rate|early|lost|duplicates|MISS|PASS|written" >> "$log"
}
for r in $(seq "$rounds"); do
  run burst --scenario burst
  run hot10k --scenario hot-instant --count 10000
  run steady1000 --scenario steady --rate 1000 --duration-s 10
  run steady1000-warm --scenario steady --rate 1000 --duration-s 10 --warm-up-s 10
  run submit --scenario submit --count 10000
  run submit-batch --scenario submit-batch --count 50000 --lead-ms 20000
  # The floor: the same bench against an in-memory scheduler in one Node process (floor-server.mjs).
  node bench/tools/floor-server.mjs 24000 & floor=$!
  sleep 0.5
  run floor-steady1000 --scenario steady --rate 1000 --duration-s 10 --server http://127.0.0.1:24000 --out bench/results/floor
  run floor-submit --scenario submit --count 10000 --server http://127.0.0.1:24000 --out bench/results/floor
  kill $floor; wait $floor 2>/dev/null
done
run steady5000-warm --scenario steady --rate 5000 --duration-s 10 --warm-up-s 10
run steady5000 --scenario steady --rate 5000 --duration-s 10
run steady10000 --scenario steady --rate 10000 --duration-s 10
run hot100k --scenario hot-instant --count 100000
run hot100k-3 --scenario hot-instant --count 100000 --nodes 3
run steady1000-3 --scenario steady --rate 1000 --duration-s 10 --nodes 3
echo "=== done $(date -u +%H:%M:%S)" >> "$log"
