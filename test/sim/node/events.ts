/**
 * The simulators' agenda (whole-node events; the Raft-only network's messages): items ordered by (time, insertion
 * order), so two items due at the same time always come out in the order they were pushed and a seed replays
 * exactly.
 */
export interface Scheduled<T> {
  readonly atMs: number;
  readonly seq: number;
  readonly event: T;
}

export class EventQueue<T> {
  private heap: Scheduled<T>[] = [];
  private seq = 0;

  get size(): number {
    return this.heap.length;
  }

  push(atMs: number, event: T): void {
    const item: Scheduled<T> = { atMs, seq: this.seq++, event };
    const h = this.heap;
    h.push(item);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!before(h[i]!, h[p]!)) break;
      [h[i], h[p]] = [h[p]!, h[i]!];
      i = p;
    }
  }

  peekMs(): number | null {
    return this.heap.length > 0 ? this.heap[0]!.atMs : null;
  }

  /** Removes and returns the earliest event due at or before `nowMs`, or null. */
  popDue(nowMs: number): Scheduled<T> | null {
    const top = this.heap[0];
    if (!top || top.atMs > nowMs) return null;
    const h = this.heap;
    const last = h.pop()!;
    if (h.length > 0) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && before(h[l]!, h[m]!)) m = l;
        if (r < h.length && before(h[r]!, h[m]!)) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m]!, h[i]!];
        i = m;
      }
    }
    return top;
  }
}

function before(a: Scheduled<unknown>, b: Scheduled<unknown>): boolean {
  return a.atMs < b.atMs || (a.atMs === b.atMs && a.seq < b.seq);
}
