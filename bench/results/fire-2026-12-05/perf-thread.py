# Measurement script (not a test, not product code): where one thread's CPU goes, from `perf record` samples
# (cpu-clock: only while the thread is on a CPU, unlike a V8 .cpuprofile, whose samples also count the time a
# runnable thread waits for a core). Flat: each sample by its leaf (kernel, V8 builtins, undici, node internals,
# our code under dist/src, GC). With call graphs (perf record -g): also by the first JS frame from the leaf (the
# "owner" of the native and kernel time below it). The window starts at the hot instant: 0.2 s before the first
# sample in firing-core.js that comes more than 1 s after the first one (the warm-up's).
#   perf record [-g] -e cpu-clock -F 4000 -o F -- node --perf-basic-prof bench/tools/hot-core.mjs DIST 10000
#   perf report -i F --stdio --sort pid -g none    # the busiest threads; the firing thread is the one with undici frames
#   perf script -i F --tid TID -F time,ip,sym,dso > T; python3 perf-thread.py T 10000 [hz=4000]
import sys, re, collections
path, n = sys.argv[1], int(sys.argv[2])
hz = float(sys.argv[3]) if len(sys.argv) > 3 else 4000.0
samples = []
for block in open(path).read().split('\n\n'):
    ls = [l for l in block.splitlines() if l.strip()]
    if not ls:
        continue
    m = re.match(r'\s*([\d.]+):\s+\w+\s+(.*?)\s+\((.*)\)\s*$', ls[0])
    if m:  # flat (no call graph): the sample line carries its symbol
        samples.append((float(m.group(1)), [(m.group(2), m.group(3))]))
        continue
    m = re.match(r'\s*([\d.]+):', ls[0])
    if not m:
        continue
    frames = []
    for l in ls[1:]:
        mm = re.match(r'\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$', l)
        if mm:
            frames.append((mm.group(1), mm.group(2)))
    samples.append((float(m.group(1)), frames))
# Flat perf script output has one sample per line: regroup.
if all(len(f) == 1 for _, f in samples) and len(samples) < 2:
    samples = []
    for l in open(path):
        m = re.match(r'\s*([\d.]+):\s+\w+\s+(.*?)\s+\((.*)\)\s*$', l)
        if m:
            samples.append((float(m.group(1)), [(m.group(2), m.group(3))]))
ours_at = [t for t, f in samples if any('firing-core.js' in s for s, _ in f)]
t0 = 0.0
if ours_at:
    later = [t for t in ours_at if t > ours_at[0] + 1.0]
    t0 = (later[0] if later else ours_at[0]) - 0.2
win = [(t, f) for t, f in samples if t >= t0 and f]
us = lambda v: v / hz * 1e6 / n
def leaf(s, d):
    if d.startswith('[kernel'): return 'kernel'
    if '/dist/src/' in s: return 'ours (JS)'
    if 'undici' in s or 'wasm' in s: return 'undici (JS, wasm)'
    if s.startswith('JS:'): return 'node JS internals'
    if s.startswith('Builtins_'): return 'V8 builtins'
    if 'Scaveng' in s or 'v8::internal::Heap' in s or 'Mark' in s or 'Sweep' in s: return 'V8 GC'
    if 'v8::' in s: return 'V8 runtime other'
    if 'libc' in d: return 'libc'
    return 'native other'
def js(s):
    if '/dist/src/' in s: return 'ours: ' + s.split('/dist/src/')[1].split(':')[0]
    if 'undici' in s or 'wasm-function' in s: return 'undici'
    if s.startswith('JS:'): return 'node JS internals'
    return None
flat = collections.Counter(leaf(*f[0]) for _, f in win)
print(f'{len(win)} samples in the window = {us(len(win)):.1f} us of CPU per callback')
print('--- by leaf')
for k, v in flat.most_common():
    print(f'{us(v):7.2f} us {100 * v / len(win):5.1f}%  {k}')
if any(len(f) > 1 for _, f in win):
    owner = collections.Counter()
    for _, f in win:
        o = next((js(s) for s, _ in f if js(s)), None)
        owner[o or 'no JS frame (libuv, epoll, V8 threads)'] += 1
    print('--- by owner: the first JS frame from the leaf')
    for k, v in owner.most_common(20):
        print(f'{us(v):7.2f} us {100 * v / len(win):5.1f}%  {k}')
