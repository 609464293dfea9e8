#!/usr/bin/env bash
# Where a node's disk writes go, per file: runs `punctual serve` under strace (pwrite/write calls with their file
# paths), drives it with `punctual bench --scenario steady`, and prints the bytes written to each file of the data
# directory (WAL appends and checkpoint copies apart) and per delivered job. strace slows the node, so use it for
# the split between files, not for the total: the bench's nodeWrittenBytesPerJob is that.
# Usage: bench/tools/write-breakdown.sh [RATE] [DURATION_S] [PORT]   (from the repository root, after npm run build)
set -euo pipefail
rate=${1:-1000}
duration=${2:-10}
port=${3:-18290}
work=$(mktemp -d /tmp/punctual-writes-XXXXXX)
strace -f -y -e trace=pwrite64,pwritev,write -o "$work/trace" \
  node dist/cmd/punctual.js serve --listen "127.0.0.1:$port" --peer-listen "127.0.0.1:$((port + 1))" \
  --data "$work/data" --node-id n1 --log-level warn >"$work/serve.log" 2>&1 &
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.2; done
node dist/cmd/punctual.js bench --scenario steady --rate "$rate" --duration-s "$duration" --server "http://127.0.0.1:$port" --out "$work" --json >"$work/bench.json" 2>"$work/bench.log" || true
pkill -f -- "--listen 127.0.0.1:$port" || true
sleep 1
delivered=$(node -e "const r=require('$work/bench.json'); console.log(r.figures.delivered)" 2>/dev/null || echo 0)
python3 - "$work" "$delivered" <<'PY'
import collections, re, sys
work, delivered = sys.argv[1], int(sys.argv[2] or 0)
tot = collections.Counter(); calls = collections.Counter()
for line in open(f"{work}/trace"):
    m = re.search(r'(pwrite64|pwritev|write)\((\d+)<([^>]*)>.*= (\d+)$', line)
    if not m or not m.group(3).startswith(f"{work}/data/"):
        continue
    name = m.group(3)[len(work) + 6:]
    tot[name] += int(m.group(4)); calls[name] += 1
print(f"delivered jobs: {delivered}")
for name, n in tot.most_common():
    per = f"{n / delivered / 1024:8.2f} KB/job" if delivered else ""
    print(f"{n / 1e6:9.2f} MB {calls[name]:8d} calls {per}  {name}")
all_ = sum(tot.values())
print(f"{all_ / 1e6:9.2f} MB in all" + (f", {all_ / delivered / 1024:.2f} KB/job" if delivered else ""))
PY
echo "trace, data directory and bench output: $work"
