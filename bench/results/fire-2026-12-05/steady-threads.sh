#!/bin/bash
# Measurement script (not a test, not product code): steady 1,000/s for 10 s (punctual bench) against a `punctual serve`
# of DIST run under perf record (cpu-clock, 1 kHz, node --perf-basic-prof), with every thread's CPU (utime + stime) and
# context switches from /proc before and after the bench. The firing thread is the one whose perf samples show undici and
# firing-core.js frames (perf report -i OUT --stdio --tid TID --sort dso,sym -g none).
#   flock /tmp/bench.lock bench/results/fire-2026-12-05/steady-threads.sh DIST OUT     (RATE=1000 DURATION_S=10 by default)
d=$(realpath "$1") out=$(realpath "$2") port=18961
data=$(mktemp -d /tmp/punctual-fire-XXXX)
# From the data dir: --perf-basic-prof leaves isolate-*-v8.log files in the working directory.
(cd $data && exec perf record -e cpu-clock -F 1000 -o $out -- node --perf-basic-prof $d/cmd/punctual.js serve --listen 127.0.0.1:$port --peer-listen 127.0.0.1:$((port + 1)) --data $data --log-level warn > $data/serve.log 2>&1) &
pid=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:$port/readyz >/dev/null 2>&1 && break; sleep 0.1; done
sleep 1
spid=$(pgrep -P $pid | head -1)
snap() { for t in /proc/$spid/task/*; do echo "$(basename $t) $(awk '{print $14+$15}' $t/stat) $(grep -E '^(voluntary|nonvoluntary)_ctxt' $t/status | awk '{print $2}' | tr '\n' ' ')"; done; }
snap > $out.before
node dist/cmd/punctual.js bench --scenario steady --rate "${RATE:-1000}" --duration-s "${DURATION_S:-10}" --server http://127.0.0.1:$port --out "$(dirname "$out")" 2>&1 | grep -E "node CPU|lateness p99"
snap > $out.after
kill -INT $spid
wait $pid
rm -rf $data
join $out.before $out.after | awk '{printf "%s cpu %d ms vol %d invol %d\n", $1, ($5-$2)*10, $6-$3, $7-$4}' | sort -k3 -n -r | head -8
