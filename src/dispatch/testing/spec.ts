import type { CallbackSpec } from '../../scheduler/types.js';

/** A callback spec for the dispatch tests: POST to `url`, 5 s timeout, 3 attempts without jitter, unsigned. */
export function callbackSpec(url: string, overrides: Partial<CallbackSpec> = {}): CallbackSpec {
  return {
    url,
    method: 'POST',
    headers: {},
    timeoutMs: 5_000,
    retry: { maxAttempts: 3, initialBackoffMs: 100, maxBackoffMs: 1000, multiplier: 2, jitter: false },
    signingSecret: null,
    maxConcurrency: 100,
    ...overrides,
  };
}
