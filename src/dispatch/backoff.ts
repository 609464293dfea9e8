/**
 * Retry delays. Pure: the caller (the node) passes the random number, so a seeded simulator replays it.
 */
import type { RetryPolicy } from '../scheduler/types.js';
import { assert } from '../core/assert.js';

/**
 * Delay before attempt `attempt + 1` after attempt `attempt` failed: min(maxBackoffMs, initialBackoffMs *
 * multiplier^(attempt-1)), with jitter (equal jitter: half fixed, half random from rand01) when policy.jitter;
 * a Retry-After raises it to at least retryAfterMs.
 *
 * Whole milliseconds: the base delay d is floored, the jittered one is ceil(d/2 + rand01 * d/2), in [d/2, d].
 */
export function retryDelayMs(
  policy: RetryPolicy,
  attempt: number,
  retryAfterMs: number | null,
  rand01: number,
): number {
  assert(Number.isInteger(attempt), 'attempt must be an integer');
  assert(attempt >= 1, 'attempt must be >= 1');
  assert(rand01 >= 0, 'rand01 must be >= 0');
  assert(rand01 < 1, 'rand01 must be < 1');
  assert(policy.initialBackoffMs >= 0, 'initialBackoffMs must be >= 0');
  assert(policy.maxBackoffMs >= 0, 'maxBackoffMs must be >= 0');
  // Math.pow may overflow to Infinity for large attempts; min() brings it back to maxBackoffMs.
  const grownMs = policy.initialBackoffMs * Math.pow(policy.multiplier, attempt - 1);
  const baseMs = Math.floor(Math.min(policy.maxBackoffMs, grownMs));
  const delayMs = policy.jitter ? Math.ceil((baseMs / 2) * (1 + rand01)) : baseMs;
  if (retryAfterMs !== null && retryAfterMs > delayMs) return Math.ceil(retryAfterMs);
  return delayMs;
}
