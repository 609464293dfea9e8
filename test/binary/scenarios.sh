#!/bin/sh
# Root-only scenarios for the single executable that CI cannot run (it needs root for setpriv, mount
# namespaces and chroot). Run by hand after `npm run build:binary`:
#
#   sudo sh test/binary/scenarios.sh [dist/punctual-linux-x64] [DEBIAN_ROOT]
#
# DEBIAN_ROOT (optional): a root made with debootstrap (docs/install.md); the binary is run inside it with
# chroot, with no Node installed there. Each scenario prints PASS or FAIL; the exit code is the FAIL count.
set -u
BIN=$(readlink -f "${1:-dist/punctual-linux-x64}")
DEBROOT=${2:-}
# not under /tmp: scenario 5 mounts a noexec tmpfs over /tmp
W=$(mktemp -d /var/tmp/punctual-scenarios.XXXXXX)
chmod 755 "$W"
FAILS=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1"; FAILS=$((FAILS + 1)); }
# expect NAME EXPECTED_EXIT OUTPUT_REGEX -- command...: runs it, checks its exit code and combined output
expect() {
  name=$1 want=$2 re=$3
  shift 4
  out=$("$@" 2>&1)
  got=$?
  if [ "$got" = "$want" ] && printf '%s' "$out" | grep -Eq -- "$re"; then pass "$name"; else
    fail "$name (exit $got, want $want)"
    printf '%s\n' "$out" | sed 's/^/    /' | head -12
  fi
}

[ "$(id -u)" = 0 ] || { echo "run as root (setpriv, unshare -m, chroot)"; exit 1; }
[ -x "$BIN" ] || { echo "no executable at $BIN: npm run build:binary first"; exit 1; }
mkdir -p "$W/app"
cp "$BIN" "$W/app/punctual"
chmod 755 "$W/app/punctual"
NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
CLEAN="env -i PATH=/nonexistent"

# 1. a non-root user with a HOME that does not exist (nobody's /nonexistent): falls back to the temp folder
mkdir -p "$W/tmp-nobody" && chmod 1777 "$W/tmp-nobody"
expect "non-root user, no HOME: unpacks into the temp folder" 0 "from the temp folder" -- \
  $NOBODY $CLEAN HOME=/nonexistent TMPDIR="$W/tmp-nobody" "$W/app/punctual" doctor

# 2. a folder owned by root, given to a non-root user: refused with what to do
mkdir -p "$W/rootowned" && chmod 755 "$W/rootowned"
expect "cache folder owned by another user: one line" 1 \
  "^punctual: cannot unpack the SQLite addon: $W/rootowned belongs to uid 0, not to this user \(uid 65534\): remove it" -- \
  $NOBODY $CLEAN HOME=/nonexistent PUNCTUAL_CACHE_DIR="$W/rootowned" "$W/app/punctual" serve

# 3. a cache folder the user cannot write
mkdir -p "$W/ro-parent" && chmod 555 "$W/ro-parent"
expect "cache folder not writable: one line" 1 \
  "^punctual: cannot unpack the SQLite addon: cannot write to $W/ro-parent/cache \(permission denied\): give this user write access" -- \
  $NOBODY $CLEAN HOME=/nonexistent PUNCTUAL_CACHE_DIR="$W/ro-parent/cache" "$W/app/punctual" serve

# 4. read-only binary folder and read-only filesystem for the cache
mkdir -p "$W/home4"
expect "read-only binary folder: runs (cache in HOME)" 0 "from HOME" -- \
  unshare -m sh -c "mount --bind -o ro $W/app $W/app && $CLEAN HOME=$W/home4 $W/app/punctual doctor"
expect "cache on a read-only filesystem: one line" 1 \
  "^punctual: cannot unpack the SQLite addon: $W/app/c is on a read-only filesystem: set PUNCTUAL_CACHE_DIR" -- \
  unshare -m sh -c "mount --bind -o ro $W/app $W/app && $CLEAN PUNCTUAL_CACHE_DIR=$W/app/c $W/app/punctual serve"

# 5. noexec /tmp and HOME on it: falls back to the executable's folder
expect "noexec /tmp and HOME: unpacks beside the executable" 0 "from the executable's folder" -- \
  unshare -m sh -c "mount -t tmpfs -o noexec tmpfs /tmp && mkdir /tmp/h && $CLEAN HOME=/tmp/h TMPDIR=/tmp $W/app/punctual doctor"
rm -rf "$W/app/.punctual-cache"
expect "noexec cache folder given explicitly: one line" 1 \
  "^punctual: cannot unpack the SQLite addon: /tmp/c/[^ ]+ is on a filesystem mounted noexec, where code cannot be loaded: set PUNCTUAL_CACHE_DIR" -- \
  unshare -m sh -c "mount -t tmpfs -o noexec tmpfs /tmp && $CLEAN PUNCTUAL_CACHE_DIR=/tmp/c $W/app/punctual serve"
expect "noexec everywhere and a read-only binary folder: one line listing each folder" 1 \
  "^punctual: no folder to unpack the SQLite addon into \(HOME: .*noexec.*; the temp folder: .*noexec.*; the executable's folder: .*read-only.*\); set PUNCTUAL_CACHE_DIR" -- \
  unshare -m sh -c "mount -t tmpfs -o noexec tmpfs /tmp && mount --bind -o ro $W/app $W/app && mkdir /tmp/h && $CLEAN HOME=/tmp/h TMPDIR=/tmp $W/app/punctual serve"

# 6. eight copies starting at once as a non-root user, one cache
mkdir -p "$W/tmp-many" && chown 65534:65534 "$W/tmp-many"
i=0
while [ $i -lt 8 ]; do
  $NOBODY $CLEAN HOME=/nonexistent TMPDIR="$W/tmp-many" "$W/app/punctual" doctor >"$W/many.$i" 2>&1 &
  i=$((i + 1))
done
wait
if grep -l '^ok$' "$W"/many.* | wc -l | grep -q '^8$' && [ "$(ls -A "$W"/tmp-many/punctual-65534/*/ | wc -l)" = 2 ]; then
  pass "8 copies at once as nobody: all ok, one cache folder, no temp file left"
else fail "8 copies at once"; fi

# 8. what the Dockerfile's runtime stage does, in the Debian root: uid 10001, the image's environment, cache
# filled at "build" time by doctor, serve; curl schedules a job, a receiver on the host gets the callback;
# SIGTERM ends it with exit 0.
container_like() {
  R=$DEBROOT
  install -d -o 10001 -g 10001 -m 700 "$R/var/cache/punctual-test" "$R/data-test"
  IMAGE_ENV="env -i PATH=/usr/bin:/bin HOME=/nonexistent NODE_OPTIONS= PUNCTUAL_CACHE_DIR=/var/cache/punctual-test PUNCTUAL_DATA=/data-test PUNCTUAL_LISTEN=127.0.0.1:18480 PUNCTUAL_PEER_LISTEN=127.0.0.1:18481"
  expect "container-like: doctor as uid 10001 fills the cache" 0 "^ok$" -- \
    chroot --userspec=10001:10001 "$R" $IMAGE_ENV /opt/punctual-test/punctual doctor
  python3 -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"] or 0))
        print("CALLBACK", self.headers["x-punctual-job-id"], body.decode(), flush=True)
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", 18482), H).serve_forever()' >"$W/callbacks" 2>&1 &
  RECV=$!
  chroot --userspec=10001:10001 "$R" sh -c "cd /data-test && exec $IMAGE_ENV /opt/punctual-test/punctual serve" 2>"$W/serve.log" &
  SERVE=$!
  i=0
  until curl -fs -o /dev/null http://127.0.0.1:18480/readyz || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
  JOB=$(curl -s -X POST http://127.0.0.1:18480/v1/jobs -H 'content-type: application/json' \
    -d '{"callback":{"url":"http://127.0.0.1:18482/hook"},"payload":{"from":"chroot"},"schedule":{"delay_ms":300}}' |
    sed -n 's/^{"id":"\([^"]*\)".*/\1/p')
  i=0
  until grep -q "CALLBACK $JOB" "$W/callbacks" || [ $i -ge 50 ]; do sleep 0.1; i=$((i + 1)); done
  kill -TERM "$SERVE"
  wait "$SERVE"
  CODE=$?
  kill "$RECV"
  if [ -n "$JOB" ] && grep -q "CALLBACK $JOB {\"from\":\"chroot\"}" "$W/callbacks" && [ "$CODE" = 0 ] &&
    grep -q '"msg":"stopped"' "$W/serve.log"; then
    pass "container-like: serve as uid 10001 in $(basename "$R"), curl job, callback, SIGTERM exit 0"
  else
    fail "container-like serve (job '$JOB', exit $CODE)"
    sed 's/^/    /' "$W/serve.log" "$W/callbacks" | tail -12
  fi
  rm -rf "$R/var/cache/punctual-test" "$R/data-test"
}

# 7. inside a Debian root with no Node (chroot)
if [ -n "$DEBROOT" ]; then
  if chroot "$DEBROOT" sh -c 'command -v node' >/dev/null 2>&1; then echo "note: $DEBROOT has a node on PATH"; fi
  mkdir -p "$DEBROOT/opt/punctual-test"
  cp "$W/app/punctual" "$DEBROOT/opt/punctual-test/punctual"
  GLIBC=$(chroot "$DEBROOT" sh -c 'ldd --version 2>/dev/null | head -1' | grep -Eo '[0-9]+\.[0-9]+$')
  NEED=$("$W/app/punctual" doctor --json | sed -n 's/.*"glibcNeeded": "\([0-9.]*\).*/\1/p')
  if [ "$(printf '%s\n%s\n' "$NEED" "$GLIBC" | sort -V | head -1)" = "$NEED" ]; then
    expect "chroot into $(basename "$DEBROOT") (glibc $GLIBC >= $NEED): doctor ok" 0 "^ok$" -- \
      chroot "$DEBROOT" env -i PATH=/usr/bin:/bin HOME=/root /opt/punctual-test/punctual doctor
  else
    expect "chroot into $(basename "$DEBROOT") (glibc $GLIBC < $NEED): one line" 1 \
      "^punctual: this system's C library is older than glibc $NEED, which this build of punctual needs" -- \
      chroot "$DEBROOT" env -i PATH=/usr/bin:/bin HOME=/root /opt/punctual-test/punctual serve
  fi
  if [ "$(printf '%s\n%s\n' "$NEED" "$GLIBC" | sort -V | head -1)" = "$NEED" ]; then container_like; fi
  rm -rf "$DEBROOT/opt/punctual-test" "$DEBROOT/root/.cache/punctual"
fi

rm -rf "$W"
echo "$FAILS failed"
exit "$FAILS"
