/**
 * The firing thread's entry (a worker_threads module; firing-port.ts starts it): a FiringCore on a loop of its
 * own, fed batches of ops by the main side and answering with batches of events. It never decides anything;
 * see firing-core.ts.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { createLogger, type LogLevel } from '../core/log.js';
import { FiringCore, OffsetClock, type FiringBatch, type FiringEvents } from './firing-core.js';
import { TargetPolicy, type TargetPolicyData } from './target-policy.js';
import { warmUpSendPath, type WarmUpReport } from './warm-up.js';

/** What the main side hands the thread when it starts it. */
export interface FiringThreadData {
  policy: TargetPolicyData;
  inFlightMax: number | undefined;
  leases: boolean;
  payloadRefBytesMax: number | undefined;
  logLevel: LogLevel;
  logFormat: 'json' | 'pretty';
  offsetMs: number;
  /** Warm the send path up (warm-up.ts) before saying ready. */
  warmUp: boolean;
}

/** A test-only message: the thread exits at once, as a crash would (firing-port.test.ts). */
export const crashMessage = 'firing-thread:crash';

const port = parentPort;
if (port !== null) {
  const data = workerData as FiringThreadData;
  const clock = new OffsetClock();
  clock.offsetMs = data.offsetMs;
  const core = new FiringCore({
    clock,
    logger: createLogger({ level: data.logLevel, format: data.logFormat }).child({ component: 'firing-thread' }),
    policy: TargetPolicy.fromData(data.policy),
    inFlightMax: data.inFlightMax,
    leases: data.leases,
    payloadRefBytesMax: data.payloadRefBytesMax,
    emit: (events, transfer) => port.postMessage(events, transfer),
  });
  const ready = (warmUp: WarmUpReport | null): void =>
    port.postMessage({ started: null, outcomes: null, errors: [], withdrawn: [], dropped: [], closed: false, ready: true, warmUp } satisfies FiringEvents);
  // Ops that arrive meanwhile are handled at once: the warm-up is a throwaway core beside this one.
  if (data.warmUp) void warmUpSendPath().then(ready, () => ready(null));
  else ready(null);
  port.on('message', (batch: FiringBatch | string) => {
    if (batch === crashMessage) process.exit(70);
    core.handle(batch as FiringBatch);
  });
}
