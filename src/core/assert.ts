/**
 * Programmer errors crash; operating errors (bad input, a peer that is down) are values or coded errors
 * (see errors.ts). Split compound assertions so the failing one names itself.
 */
export class AssertionError extends Error {
  override name = 'AssertionError';
}

export function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new AssertionError(message);
}

export function unreachable(value: never, message = 'unreachable'): never {
  throw new AssertionError(`${message}: ${JSON.stringify(value)}`);
}
