/**
 * ShardRouter: runs an API call where it must run, on the shard's leader. On the leader the call runs locally;
 * elsewhere it is forwarded over the peer transport (`request(leader, 'api', ...)`, msgpackr body) and the
 * leader runs it locally (never forwarding again). A call that finds no leader waits up to
 * clusterLimits.leaderWaitMs for one, then fails `unavailable` (503 with Retry-After).
 *
 * A failed call is retried once (against the new leader, if it changed) only when repeating it is safe: the
 * failure proves the call never applied (a FailureReason such as not_leader or proposal_lost, src/core/errors.ts),
 * or the call is idempotent (reads; create_jobs, whose ids are fixed before forwarding; cancel, pause, patch;
 * put_task; a run with its run key, which the state machine recognises). A failure that leaves the outcome
 * unknown (proposal_timeout, leader_unreachable, ...) is never retried for resume or delete_task: the client
 * gets the 503 and decides.
 */
import { Packr } from 'msgpackr';
import { PunctualError, provesNotApplied, type ErrorCode, type FailureReason, type FieldError } from '../core/errors.js';
import { clusterLimits } from '../core/limits.js';
import type { Logger } from '../core/log.js';
import type { RaftHost } from './raft-host.js';

/** What one forwarded call asks the leader to do (the leader's NodeService runs it locally). */
export type ForwardOp =
  | { op: 'create_jobs'; shard: number; nowMs: number; jobs: unknown[] }
  | { op: 'job'; action: 'cancel' | 'pause' | 'resume' | 'run' | 'patch'; id: string; patch: unknown; runKey?: string | null }
  | { op: 'get_job'; id: string }
  | { op: 'list_executions'; id: string; limit: number; cursor: string | null }
  | { op: 'propose'; shard: number; command: unknown }
  | { op: 'transfer_leader'; shard: number; to: string }
  | { op: 'get_task'; name: string }
  | { op: 'list_tasks' }
  | { op: 'get_calendar'; name: string }
  | { op: 'list_calendars' }
  | { op: 'info' };

/** The part of PeerTransport the router uses. */
export interface RequestSender {
  request(to: string, kind: string, body: Uint8Array, timeoutMs: number): Promise<Uint8Array>;
}

export const apiKind = 'api';

const packr = new Packr({ useRecords: false, moreTypes: false });

export function encodeWire(value: unknown): Uint8Array {
  return new Uint8Array(packr.pack(value));
}

export function decodeWire<T>(bytes: Uint8Array): T {
  return packr.unpack(bytes) as T;
}

export interface WireError {
  code: ErrorCode;
  message: string;
  errors: FieldError[];
  /** What the failure proves (absent from older nodes: then it proves nothing). */
  reason?: FailureReason | null;
}

export function toWireError(err: unknown): WireError {
  if (err instanceof PunctualError) return { code: err.code, message: err.message, errors: err.errors, reason: err.reason };
  return { code: 'internal', message: err instanceof Error ? err.message : 'internal error', errors: [] };
}

export function fromWireError(e: WireError): PunctualError {
  return new PunctualError(e.code, e.message, e.errors ?? [], e.reason ?? null);
}

type Answer = { ok: true; value: unknown } | { ok: false; error: WireError };

export function noLeader(shard: number): PunctualError {
  return new PunctualError('unavailable', `shard ${shard} has no leader right now; retry in ${clusterLimits.retryAfterS} s`, [], 'no_leader');
}

export class ShardRouter {
  private sender: RequestSender | null = null;

  constructor(
    private readonly nodeId: string,
    private readonly host: RaftHost,
    private readonly logger: Logger,
  ) {}

  setSender(sender: RequestSender | null): void {
    this.sender = sender;
  }

  /** Runs `local` if this node leads `shard`, else forwards `op` to the leader; one retry when that is safe. */
  async call<T>(shard: number, op: ForwardOp, local: () => Promise<T>): Promise<T> {
    let lastLeader: string | null = null;
    for (let attempt = 0; ; attempt++) {
      const leader = await this.waitLeader(shard, lastLeader);
      try {
        if (leader === this.nodeId) return await local();
        return (await this.forward(leader, op)) as T;
      } catch (err) {
        if (attempt >= 1 || !retryable(op, err)) throw err;
        lastLeader = leader;
      }
    }
  }

  /**
   * The shard's leader, waiting (bounded) until one is known. After a failure against `previous`, waits up to
   * half of that bound for another leader, then tries `previous` again.
   */
  private async waitLeader(shard: number, previous: string | null): Promise<string> {
    const startMs = Date.now();
    for (;;) {
      const leader = this.host.leaderOf(shard);
      // This node's own soft state says leader only once its Ready round ran: trust isLeader for itself.
      const usable = leader !== null && (leader !== this.nodeId || this.host.isLeader(shard));
      const waitedMs = Date.now() - startMs;
      if (usable && (leader !== previous || waitedMs >= clusterLimits.leaderWaitMs / 2)) return leader;
      if (waitedMs >= clusterLimits.leaderWaitMs) throw noLeader(shard);
      await new Promise<void>((r) => setTimeout(r, 10));
    }
  }

  private async forward(leader: string, op: ForwardOp): Promise<unknown> {
    if (this.sender === null) throw new PunctualError('unavailable', `no peer transport to reach leader ${leader}`, [], 'not_leader');
    let bytes: Uint8Array;
    try {
      bytes = await this.sender.request(leader, apiKind, encodeWire(op), clusterLimits.forwardTimeoutMs);
    } catch (err) {
      this.logger.debug('forward failed', { leader, op: op.op, err });
      // The request may have reached the leader and applied there: the outcome is unknown.
      throw new PunctualError('unavailable', `shard leader ${leader} did not answer: ${(err as Error).message}`, [], 'leader_unreachable');
    }
    const answer = decodeWire<Answer>(bytes);
    if (!answer.ok) throw fromWireError(answer.error);
    return answer.value;
  }
}

/**
 * Worth one retry against the (new) leader: an `unavailable` failure that proves the call never applied, or any
 * `unavailable` failure of a call that is safe to repeat. Back-pressure (rate_limited) is never retried here.
 */
export function retryable(op: ForwardOp, err: unknown): boolean {
  if (!(err instanceof PunctualError) || err.code !== 'unavailable') return false;
  return provesNotApplied(err) || idempotent(op);
}

/** Repeating the call cannot change more than the first one did (or it is recognised as a repeat). */
export function idempotent(op: ForwardOp): boolean {
  switch (op.op) {
    case 'job':
      // resume of a job resumed already is refused (409); run is a repeat only when it carries its run key.
      if (op.action === 'run') return typeof op.runKey === 'string';
      return op.action !== 'resume';
    case 'propose':
      // put_task replaces the task; delete_task of a deleted task answers 404; the rest are not proposed this way.
      // put_calendar replaces the calendar, as put_task does.
      const type = (op.command as { type?: string } | null)?.type;
      return type === 'put_task' || type === 'put_calendar';
    default:
      // create_jobs: ids are fixed before forwarding and a repeat with the same digest answers the existing job.
      return true;
  }
}

/** The leader's side: runs a forwarded op and encodes the answer (errors travel as values, never as a 500). */
export async function answerForward(run: (op: unknown) => Promise<unknown>, body: Uint8Array): Promise<Uint8Array> {
  let answer: Answer;
  try {
    // `run` checks the op (NodeService.runForwarded): what a peer sends is decoded here, never trusted.
    let op: unknown;
    try {
      op = decodeWire<unknown>(body);
    } catch {
      throw new PunctualError('invalid_argument', 'forwarded operation is not msgpack', [{ field: 'op', message: 'is not msgpack' }]);
    }
    answer = { ok: true, value: await run(op) };
  } catch (err) {
    answer = { ok: false, error: toWireError(err) };
  }
  return encodeWire(answer);
}
