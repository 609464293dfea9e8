import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { walFileBytes } from '../store/checkpointer.js';
import { dbFilePath, openNodeDb } from '../store/db.js';
import { NodeMetrics } from './metrics.js';

describe('NodeMetrics', () => {
  it('serves every metric from its own registry, gauges collected at scrape', async () => {
    let wheel = 3;
    const counts = { PENDING: 2, QUEUED: 0, RUNNING: 1, SUCCEEDED: 4, FAILED: 0, PAUSED: 0, CANCELLED: 1 };
    const m = new NodeMetrics({ jobCounts: () => counts, wheelSize: () => wheel, dispatchInFlight: () => 7 });
    const other = new NodeMetrics({ jobCounts: () => counts, wheelSize: () => 99, dispatchInFlight: () => 0 });
    try {
      m.callbacks.inc({ outcome: 'succeeded' });
      m.callbacks.inc({ outcome: 'retryable' }, 2);
      m.fireLatenessMs.observe(0.7);
      m.jobsSubmitted.inc(5);
      m.commitBatchSize.observe(12);
      m.commitDurationMs.observe(0.3);
      wheel = 4;
      const { contentType, body } = await m.scrape();
      expect(contentType).toMatch(/^text\/plain/);
      expect(body).toContain('punctual_jobs{state="PENDING"} 2');
      expect(body).toContain('punctual_jobs{state="SUCCEEDED"} 4');
      expect(body).toContain('punctual_callbacks_total{outcome="succeeded"} 1');
      expect(body).toContain('punctual_callbacks_total{outcome="retryable"} 2');
      expect(body).toContain('punctual_fire_lateness_ms_bucket{le="0.5"} 0');
      expect(body).toContain('punctual_fire_lateness_ms_bucket{le="1"} 1');
      expect(body).toContain('punctual_jobs_submitted_total 5');
      expect(body).toContain('punctual_timer_wheel_size 4');
      expect(body).toContain('punctual_dispatch_in_flight 7');
      expect(body).toContain('punctual_commit_batch_size_count 1');
      expect(body).toContain('punctual_commit_duration_ms_count 1');
      expect(body).toContain('nodejs_eventloop_lag_seconds');
      expect((await other.scrape()).body).toContain('punctual_timer_wheel_size 99');
      expect((await other.scrape()).body).toContain('punctual_jobs_submitted_total 0');
    } finally {
      m.close();
      other.close();
    }
  });

  it('counts finished callbacks into punctual_callbacks_total at every read, beside direct increments', async () => {
    const counts = { PENDING: 0, QUEUED: 0, RUNNING: 0, SUCCEEDED: 0, FAILED: 0, PAUSED: 0, CANCELLED: 0 };
    const m = new NodeMetrics({ jobCounts: () => counts, wheelSize: () => 0, dispatchInFlight: () => 0 });
    try {
      m.callbackFinished('succeeded');
      m.callbackFinished('succeeded');
      m.callbackFinished('permanent');
      m.callbacks.inc({ outcome: 'succeeded' });
      let body = (await m.scrape()).body;
      expect(body).toContain('punctual_callbacks_total{outcome="succeeded"} 3');
      expect(body).toContain('punctual_callbacks_total{outcome="permanent"} 1');
      expect(body).not.toContain('outcome="retryable"');
      m.callbackFinished('retryable');
      m.callbackFinished('succeeded');
      body = (await m.scrape()).body;
      expect(body).toContain('punctual_callbacks_total{outcome="succeeded"} 4');
      expect(body).toContain('punctual_callbacks_total{outcome="retryable"} 1');
      expect(body).toContain('punctual_callbacks_total{outcome="permanent"} 1');
    } finally {
      m.close();
    }
  });

  it('records a blocked event loop in punctual_event_loop_stall_ms', async () => {
    const m = new NodeMetrics({ jobCounts: () => ({ PENDING: 0, QUEUED: 0, RUNNING: 0, SUCCEEDED: 0, FAILED: 0, PAUSED: 0, CANCELLED: 0 }), wheelSize: () => 0, dispatchInFlight: () => 0 });
    try {
      await new Promise((r) => setTimeout(r, 20));
      const until = performance.now() + 150;
      while (performance.now() < until) {
        // a synchronous stall, as a long SQLite transaction would make
      }
      await new Promise((r) => setTimeout(r, 1_100));
      const { body } = await m.scrape();
      const max = Number(/^punctual_event_loop_stall_max_ms (\S+)$/m.exec(body)?.[1]);
      expect(max).toBeGreaterThanOrEqual(100);
      expect(body).toMatch(/^punctual_event_loop_stall_ms_count [1-9]/m);
      expect(body).toContain('punctual_event_loop_stall_ms_bucket{le="50"} 0');
    } finally {
      m.close();
    }
  });

  it('shows the depth and limit of every queue as punctual_queue_depth / punctual_queue_limit', async () => {
    let depth = 0;
    const m = new NodeMetrics({
      jobCounts: () => ({ PENDING: 0, QUEUED: 0, RUNNING: 0, SUCCEEDED: 0, FAILED: 0, PAUSED: 0, CANCELLED: 0 }),
      wheelSize: () => 0,
      dispatchInFlight: () => 0,
      queues: () => [
        { queue: 'proposer', depth, limit: 50 },
        { queue: 'dispatch_queued', depth: 2, limit: 9 },
      ],
    });
    try {
      depth = 17;
      const { body } = await m.scrape();
      expect(body).toContain('punctual_queue_depth{queue="proposer"} 17');
      expect(body).toContain('punctual_queue_limit{queue="proposer"} 50');
      expect(body).toContain('punctual_queue_depth{queue="dispatch_queued"} 2');
      expect(body).toContain('punctual_queue_limit{queue="dispatch_queued"} 9');
    } finally {
      m.close();
    }
  });

  it('shows the size of the node\'s WAL file as punctual_wal_bytes', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'punctual-metrics-wal-'));
    const db = openNodeDb(dir, 'batch');
    const m = new NodeMetrics({
      jobCounts: () => ({ PENDING: 0, QUEUED: 0, RUNNING: 0, SUCCEEDED: 0, FAILED: 0, PAUSED: 0, CANCELLED: 0 }),
      wheelSize: () => 0,
      dispatchInFlight: () => 0,
      walBytes: () => walFileBytes(dbFilePath(dir)),
    });
    try {
      db.prepare("INSERT INTO node_meta (key, value) VALUES ('k', ?)").run('x'.repeat(100_000));
      const size = statSync(`${dbFilePath(dir)}-wal`).size;
      expect(size).toBeGreaterThan(100_000);
      expect((await m.scrape()).body).toContain(`punctual_wal_bytes ${size}\n`);
    } finally {
      m.close();
      db.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
