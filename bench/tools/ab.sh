#!/bin/bash
# Measurement script (not a test, not product code): A/B of two builds in one window, alternating run by run so
# both share the machine's load. A base build comes from `git archive <commit> | tar -x -C DIR`, a node_modules
# symlink and `npm run build` there.
#   bench/tools/ab.sh hot-core BASE_DIST ROUNDS [jobs=10000]
#       bench/tools/hot-core.mjs on BASE_DIST then on ./dist: node CPU per callback of a hot instant
#   bench/tools/ab.sh steady BASE_DIST ROUNDS [rate=1000] [duration-s=10]
#       a `serve` of each build on 127.0.0.1:18931 (data in a temp dir), driven by THIS build's bench with
#       --server (the bench reads node CPU from /metrics); results in bench/results/ab/
#   bench/tools/ab.sh bench BASE_DIST ROUNDS BENCH_ARGS...
#       the same with any scenario: `bench/tools/ab.sh bench B 1 --scenario submit --count 10000`; burst prints
#       both bursts (cold: delivered within / first arrival; warm burst: first / last)
# A build is named DIR with options after @: @on / @off runs its firing thread on / off (`serve --firing-thread`,
# PUNCTUAL_FIRING_THREAD for hot-core), @leadN its stage lead (`serve --stage-lead-ms N`, PUNCTUAL_STAGE_LEAD_MS):
# `bench/tools/ab.sh steady dist@lead0 3` compares this build without staging with itself; NEW=dist@on runs this
# build with the thread (`NEW=dist@on bench/tools/ab.sh bench dist@lead0 3 --scenario burst`).
# AB_PORT (default 18931) moves the served node's API port (and the peer port, one above), so that two A/Bs on
# one machine do not meet.
set -u
mode=$1 base=$2 rounds=$3
port=${AB_PORT:-18931}
cd "$(dirname "$0")/../.."
for r in $(seq "$rounds"); do
  for spec in "$base" "${NEW:-dist}"; do
    d=${spec%%@*} flags=() envs=()
    IFS=@ read -r -a opts <<<"${spec#"$d"}"
    for o in "${opts[@]}"; do
      case $o in
        on | off) flags+=(--firing-thread "$o") envs+=("PUNCTUAL_FIRING_THREAD=$o") ;;
        lead*) flags+=(--stage-lead-ms "${o#lead}") envs+=("PUNCTUAL_STAGE_LEAD_MS=${o#lead}") ;;
      esac
    done
    load=$(cut -d' ' -f1 /proc/loadavg)
    if [ "$mode" = hot-core ]; then
      out=$(env "${envs[@]}" timeout 300 node bench/tools/hot-core.mjs "$d" "${4:-10000}" 2>&1 | tail -1)
    else
      data=$(mktemp -d /tmp/punctual-ab-XXXX)
      node "$d/cmd/punctual.js" serve --listen 127.0.0.1:$port --peer-listen 127.0.0.1:$((port + 1)) --data "$data" --log-level warn "${flags[@]}" >"$data/serve.log" 2>&1 &
      pid=$!
      # Ready, not just listening: a node refuses writes until it fires its shards (and its send path is warm).
      for _ in $(seq 100); do curl -sf http://127.0.0.1:$port/readyz >/dev/null 2>&1 && break; sleep 0.1; done
      if [ "$mode" = bench ]; then args=("${@:4}"); else args=(--scenario steady --rate "${4:-1000}" --duration-s "${5:-10}"); fi
      res=$(timeout 300 node dist/cmd/punctual.js bench "${args[@]}" --server http://127.0.0.1:$port --out bench/results/ab 2>&1)
      kill -INT "$pid"; wait "$pid" 2>/dev/null
      rm -rf "$data"
      out=$(echo "$res" | grep -E 'accepted jobs/s|node CPU|lateness p99|delivered within|first arrival|warm burst: first|node-side|written' | sed 's/  */ /g' | tr '\n' ' ')
    fi
    echo "$(date +%T) load $load $spec: $out"
  done
done
