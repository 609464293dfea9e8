/**
 * The warm-up of the send path, run once when the node is ready (FiringPort.warmUp: on the firing thread, or on
 * the main loop with `--firing-thread off`). A fresh process pays for module loading, lazy compilation and the first type
 * feedback of the whole path (FiringCore, the head template and signing, undici's pool, connector and parser) on
 * its first real callbacks, which made a node's first burst tens of ms late. Here a throwaway FiringCore sends a
 * few rounds of callbacks, signed and unsigned, sent now and staged, to a throwaway node:http server on
 * 127.0.0.1:0 in the same thread, so that code is ready before the first due millisecond.
 *
 * Nothing leaves the process and nothing is the node's: the throwaway core has its own Dispatcher, its own
 * TargetPolicy (the node's is not touched, so a `--callback-deny 127.0.0.0/8` still refuses real callbacks to
 * loopback), its own clock, no leases and a silent logger, and its events go nowhere but here: no start, outcome,
 * metric or log line of a callback. Bounded by limits.firingWarmUpRequests and limits.firingWarmUpTimeoutMs.
 */
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { limits } from '../core/limits.js';
import { silentLogger } from '../core/log.js';
import type { CallbackSpec } from '../scheduler/types.js';
import type { Delivery } from './dispatcher.js';
import { FiringCore, OffsetClock, outcomeKinds, packOrders, type FiringOp, type Order } from './firing-core.js';
import { TargetPolicy } from './target-policy.js';

/** What a warm-up did (the firing side logs it at debug level). */
export interface WarmUpReport {
  /** Requests handed to the throwaway sender. */
  sent: number;
  /** Of those, answered 2xx by the throwaway server. */
  succeeded: number;
  /** From the start of the warm-up to its throwaway parts closed, ms. */
  durationMs: number;
  /** limits.firingWarmUpTimeoutMs ended it before every request was answered. */
  timedOut: boolean;
}

const succeededKind = outcomeKinds.indexOf('succeeded');

/** Runs the warm-up; never rejects (a warm-up that cannot run reports what it sent: maybe nothing). */
export async function warmUpSendPath(): Promise<WarmUpReport> {
  const startedAt = performance.now();
  const deadline = startedAt + limits.firingWarmUpTimeoutMs;
  const report: WarmUpReport = { sent: 0, succeeded: 0, durationMs: 0, timedOut: false };
  const server = createServer({ keepAlive: true, noDelay: true }, (req, res) => {
    req.resume();
    res.writeHead(200, { 'content-length': '0' });
    res.end();
  });
  // Never what keeps a process alive.
  server.unref();
  let settled = 0;
  let closed = false;
  let check: (() => void) | null = null;
  const core = new FiringCore({
    clock: new OffsetClock(),
    logger: silentLogger,
    policy: new TargetPolicy(),
    leases: false,
    emit: (ev) => {
      const o = ev.outcomes;
      if (o !== null) {
        for (let i = 0; i < o.length; i += 6) {
          settled++;
          if (o[i + 1] === succeededKind) report.succeeded++;
        }
      }
      settled += ev.dropped.length;
      if (ev.closed) closed = true;
      check?.();
    },
  });
  /** Resolves once cond() holds (looked at after each batch of events) or at the deadline. */
  const until = (cond: () => boolean, atMs: number): Promise<void> =>
    new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        check = null;
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, atMs - performance.now()));
      check = () => {
        if (cond()) done();
      };
      check();
    });
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ host: '127.0.0.1', port: 0 }, resolve);
    });
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/warm-up`;
    const spec = (signingSecret: string | null): CallbackSpec => ({
      url,
      method: 'POST',
      headers: {},
      timeoutMs: limits.firingWarmUpTimeoutMs,
      retry: { maxAttempts: 1, initialBackoffMs: 0, maxBackoffMs: 0, multiplier: 1, jitter: false },
      signingSecret,
      maxConcurrency: limits.firingWarmUpRoundRequests,
    });
    // A throwaway secret: the signing code runs as for a real signed task, with keys no one else has.
    const specs = [spec(`whsec_${randomBytes(24).toString('base64')}`), spec(null)];
    const ops: FiringOp[] = [
      { o: 'spec', id: 1, spec: specs[0]! },
      { o: 'spec', id: 2, spec: specs[1]! },
    ];
    const clock = new OffsetClock();
    const body = new TextEncoder().encode('{"warm_up":true}');
    const empty = new Uint8Array(0);
    for (let round = 0; report.sent < limits.firingWarmUpRequests && performance.now() < deadline; round++) {
      const n = Math.min(limits.firingWarmUpRoundRequests, limits.firingWarmUpRequests - report.sent);
      // Rounds alternate between sent now and staged for a due ms just ahead (prepare, the wheel, warm connections).
      const dueAtMs = round % 2 === 0 ? 0 : clock.nowMs() + 2;
      const orders: Order[] = [];
      for (let i = 0; i < n; i++) {
        const id = report.sent + i + 1;
        const delivery: Delivery = {
          jobId: `warm-up-${id}`, scheduledAtMs: dueAtMs || clock.nowMs(), attempt: 1, fencingToken: '0.0', spec: specs[i % 2]!,
          body: i % 4 < 2 ? body : empty, bodyEncoding: 'json', concurrencyKey: 'warm-up', payloadRef: null,
        };
        orders.push({ id, specId: 1 + (i % 2), shard: 0, dueAtMs, delivery });
      }
      // Packed as the thread receives orders, so the warm-up runs that decoding too.
      ops.push(packOrders(orders));
      core.handle({ offsetMs: 0, ops: ops.splice(0) });
      report.sent += n;
      await until(() => settled >= report.sent, deadline);
    }
  } catch {
    // No loopback listener possible here: the first real callbacks simply pay the first-use costs.
  } finally {
    report.timedOut = performance.now() >= deadline && (settled < report.sent || report.sent < limits.firingWarmUpRequests);
    core.handle({ offsetMs: 0, ops: [{ o: 'close', graceMs: 0 }] });
    await until(() => closed, performance.now() + limits.firingWarmUpTimeoutMs);
    server.closeAllConnections();
    server.close();
    report.durationMs = performance.now() - startedAt;
  }
  return report;
}
