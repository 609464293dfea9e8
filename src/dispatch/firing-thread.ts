/**
 * The firing thread's entry (a worker_threads module; firing-port.ts starts it): a FiringCore on a loop of its
 * own, fed batches of ops by the main side and answering with batches of events. It never decides anything;
 * see firing-core.ts.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { createLogger, type LogLevel } from '../core/log.js';
import { limits, nodeLimits } from '../core/limits.js';
import { FiringCore, OffsetClock, sleepUntil, type BatchCursor, type FiringBatch, type FiringEvents } from './firing-core.js';
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
}

/**
 * How long starts and outcomes wait for others to cross to the main loop with them (FiringCore's eventsDelayMs):
 * the main side holds a start's record for longer than this anyway (the engine's item delay), and an outcome
 * becomes a record on its next group commit.
 */
const eventsDelayMs = limits.firingEventsDelayMs;

/** A test-only message: the thread exits at once, as a crash would (firing-port.test.ts). */
export const crashMessage = 'firing-thread:crash';
/** Runs the warm-up of the send path (warm-up.ts); answered by an event carrying its report. */
export const warmUpMessage = 'firing-thread:warm-up';

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
    // The clock reads dueAtMs once monoEpochMs() + offsetMs reaches it.
    sleepUntil: (dueAtMs) => sleepUntil(dueAtMs - clock.offsetMs),
    eventsDelayMs,
    emit: (events, transfer) => port.postMessage(events, transfer),
  });
  port.postMessage({ started: null, outcomes: null, errors: [], withdrawn: [], dropped: [], closed: false, ready: true } satisfies FiringEvents);
  const warmedUp = (warmUp: WarmUpReport | null): void =>
    port.postMessage({ started: null, outcomes: null, errors: [], withdrawn: [], dropped: [], closed: false, warmUp } satisfies FiringEvents);
  // Batches wait here in arrival order and are handled firingThreadOpsPerTurnMax ops or orders per turn (one
  // setImmediate each): Node hands a worker every queued message in one go, and the writes of what is due wait for
  // the next turn.
  const batches: FiringBatch[] = [];
  const at: BatchCursor = { op: 0, order: 0 };
  let turn: NodeJS.Immediate | null = null;
  const handleSome = (): void => {
    turn = null;
    if (core.handlePart(batches[0]!, at, nodeLimits.firingThreadOpsPerTurnMax)) {
      batches.shift();
      at.op = 0;
      at.order = 0;
    }
    if (batches.length > 0) turn = setImmediate(handleSome);
  };
  port.on('message', (batch: FiringBatch | string) => {
    if (batch === crashMessage) process.exit(70);
    // Ops that arrive meanwhile are handled at once: the warm-up is a throwaway core beside this one.
    if (batch === warmUpMessage) return void warmUpSendPath().then(warmedUp, () => warmedUp(null));
    batches.push(batch as FiringBatch);
    turn ??= setImmediate(handleSome);
  });
}
