// Measurement script (not a test, not product code): the floor of this machine for a scheduler written in Node.
// An in-memory scheduler in one process: node:http in, a binary heap and one setTimeout, undici out; no
// durability, no Raft, no SQLite, no validation. It answers just enough of Punctual's API for `punctual bench`
// (PUT /v1/tasks/NAME, POST /v1/jobs, POST /v1/jobs:batch, GET /metrics), so the same bench, receiver and
// lateness measure it: what the bench's client, receiver and a Node process that does nothing else allow on
// these cores, before any of Punctual's own work. Run it, then bench it as a --server:
//   node bench/tools/floor-server.mjs 24000 &
//   node dist/cmd/punctual.js bench --scenario steady --rate 1000 --duration-s 10 --server http://127.0.0.1:24000
import http from 'node:http';
import { Pool } from 'undici';

const port = Number(process.argv[2] ?? 24000);
const tasks = new Map();
const pools = new Map();

// [dueMs, jobId, url], a min-heap by due time.
const heap = [];
function push(x) {
  heap.push(x);
  let i = heap.length - 1;
  while (i > 0) {
    const p = (i - 1) >> 1;
    if (heap[p][0] <= x[0]) break;
    heap[i] = heap[p];
    i = p;
  }
  heap[i] = x;
}
function pop() {
  const top = heap[0];
  const last = heap.pop();
  if (heap.length > 0) {
    let i = 0;
    for (;;) {
      let c = 2 * i + 1;
      if (c >= heap.length) break;
      if (c + 1 < heap.length && heap[c + 1][0] < heap[c][0]) c++;
      if (heap[c][0] >= last[0]) break;
      heap[i] = heap[c];
      i = c;
    }
    heap[i] = last;
  }
  return top;
}

// One timer, at the earliest due time; Node's timers fire at or after their ms, never before.
let timer = null;
let timerAt = Infinity;
function arm() {
  if (heap.length === 0) return;
  const due = heap[0][0];
  if (timer !== null && timerAt <= due) return;
  if (timer !== null) clearTimeout(timer);
  timerAt = due;
  timer = setTimeout(fire, Math.max(0, due - Date.now()));
}
function fire() {
  timer = null;
  timerAt = Infinity;
  while (heap.length > 0 && heap[0][0] <= Date.now()) send(...pop());
  arm();
}

function poolFor(origin) {
  let p = pools.get(origin);
  if (p === undefined) pools.set(origin, (p = new Pool(origin, { connections: 64 })));
  return p;
}
function send(due, id, url) {
  const u = new URL(url);
  poolFor(u.origin)
    .request({
      method: 'POST',
      path: u.pathname + u.search,
      headers: {
        'content-type': 'application/json',
        'x-deduplication-key': `${id}:${due}`,
        'x-punctual-scheduled-at': String(due),
        'x-punctual-job-id': id,
      },
      body: '{}',
    })
    .then((r) => r.body.dump())
    .catch(() => {});
}

function add(job) {
  const task = tasks.get(job.task);
  if (task === undefined) return false;
  push([job.schedule?.at ?? Date.now(), job.id, task.url]);
  return true;
}

function answer(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(body);
}

http
  .createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const url = req.url;
      if (req.method === 'PUT' && url.startsWith('/v1/tasks/')) {
        tasks.set(url.slice('/v1/tasks/'.length), JSON.parse(body));
        return answer(res, 201, '{}');
      }
      if (req.method === 'POST' && url === '/v1/jobs') {
        const job = JSON.parse(body);
        if (!add(job)) return answer(res, 404, '{"code":"task_not_found"}');
        arm();
        return answer(res, 201, JSON.stringify({ id: job.id, state: 'PENDING' }));
      }
      if (req.method === 'POST' && url === '/v1/jobs:batch') {
        const results = JSON.parse(body).jobs.map((j) => (add(j) ? { id: j.id } : { id: j.id, error: { code: 'task_not_found' } }));
        arm();
        return answer(res, 200, JSON.stringify({ results }));
      }
      if (url === '/metrics') {
        res.writeHead(200, { 'content-type': 'text/plain' });
        return res.end('');
      }
      res.writeHead(404);
      res.end();
    });
  })
  .listen(port, '127.0.0.1');
