/**
 * The machine's own limit: how fast ONE process pushes callback-shaped requests into the bench's receiver with
 * plain undici (one Pool, 128 keep-alive connections, the headers a node sends). Every other scenario reports
 * its delivery rate as a share of this, measured in the same run on the same machine, so a busy machine lowers
 * both figures and the share still means something. Also: node-side lateness from a node's /metrics.
 */
import { Pool } from 'undici';
import type { LatenessSummary } from './histogram.js';
import { nowPreciseMs, type CallbackReceiver } from './receiver.js';

export const limitConnections = 128;

export interface LimitRun {
  sent: number;
  failed: number;
  durationMs: number;
  perS: number;
}

/** Pushes `count` requests into the receiver, `limitConnections` at a time, as fast as the answers come back. */
export async function pushLimit(receiver: CallbackReceiver, idPrefix: string, count: number): Promise<LimitRun> {
  const url = new URL(receiver.url);
  const pool = new Pool(url.origin, { connections: limitConnections, pipelining: 1, keepAliveTimeout: 60_000 });
  const body = '{}';
  let next = 0;
  let failed = 0;
  const startMs = nowPreciseMs();
  const worker = async (): Promise<void> => {
    while (next < count) {
      const i = next++;
      const id = idPrefix + i.toString(36);
      const scheduled = String(Math.floor(nowPreciseMs()));
      try {
        const res = await pool.request({
          method: 'POST',
          path: url.pathname,
          headers: {
            'content-type': 'application/json',
            'x-deduplication-key': `${id}:${scheduled}`,
            'x-punctual-job-id': id,
            'x-punctual-scheduled-at': scheduled,
            'x-punctual-attempt': '1',
            'x-punctual-fencing-token': '0.1',
          },
          body,
        });
        await res.body.dump();
        if (res.statusCode !== 200) failed++;
      } catch {
        failed++;
      }
    }
  };
  await Promise.all(Array.from({ length: limitConnections }, worker));
  const durationMs = nowPreciseMs() - startMs;
  await pool.close();
  return { sent: count, failed, durationMs, perS: durationMs > 0 ? ((count - failed) * 1000) / durationMs : 0 };
}

/**
 * Percentiles of a Prometheus histogram (cumulative `_bucket{le=...}` lines of `name` in a /metrics text), each
 * given as the upper bound of the bucket that holds it: the node's own view of its lateness, coarse by design.
 * With `sinceText` (an earlier /metrics text of the same nodes), only what was observed after it.
 */
export function histogramSummary(metricsText: string, name: string, sinceText?: string): LatenessSummary | null {
  const sums = bucketSums(metricsText, name);
  if (sums.size === 0) return null;
  if (sinceText !== undefined) for (const [le, n] of bucketSums(sinceText, name)) sums.set(le, (sums.get(le) ?? 0) - n);
  const buckets = [...sums.entries()].sort((a, b) => a[0] - b[0]);
  const total = buckets[buckets.length - 1]![1];
  if (total === 0) return null;
  const at = (q: number): number | null => {
    const rank = Math.ceil(q * total);
    for (const [le, n] of buckets) if (n >= rank) return Number.isFinite(le) ? le : null;
    return null;
  };
  return { count: total, minMs: null, meanMs: null, p50Ms: at(0.5), p90Ms: at(0.9), p99Ms: at(0.99), p999Ms: at(0.999), maxMs: null };
}

/** A histogram's cumulative bucket counts by upper bound; several nodes' texts concatenated are summed (the cluster's). */
function bucketSums(metricsText: string, name: string): Map<number, number> {
  const sums = new Map<number, number>();
  const re = new RegExp(`^${name}_bucket\\{[^}]*le="([^"]+)"[^}]*\\} (\\S+)$`, 'gm');
  for (const m of metricsText.matchAll(re)) {
    const le = m[1] === '+Inf' ? Number.POSITIVE_INFINITY : Number(m[1]);
    sums.set(le, (sums.get(le) ?? 0) + Number(m[2]));
  }
  return sums;
}

/** The sum of a counter over several nodes' /metrics texts (lines `name value` or `name{...} value`); null when absent. */
export function counterSum(metricsText: string, name: string): number | null {
  const re = new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'gm');
  let sum: number | null = null;
  for (const m of metricsText.matchAll(re)) sum = (sum ?? 0) + Number(m[1]);
  return sum;
}
