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
    // Sift up with a hole: parents move down one write each, the item is written once where it belongs.
    let i = h.length;
    h.push(item);
    while (i > 0) {
      const p = (i - 1) >> 1;
      const parent = h[p]!;
      if (!before(item, parent)) break;
      h[i] = parent;
      i = p;
    }
    h[i] = item;
  }

  peekMs(): number | null {
    return this.heap.length > 0 ? this.heap[0]!.atMs : null;
  }

  /** Removes and returns the earliest event due at or before `nowMs`, or null. */
  popDue(nowMs: number): Scheduled<T> | null {
    const h = this.heap;
    const top = h[0];
    if (top === undefined || top.atMs > nowMs) return null;
    const last = h.pop()!;
    const n = h.length;
    if (n === 0) return top;
    // Sift the last item down from the root with a hole.
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const c = r < n && before(h[r]!, h[l]!) ? r : l;
      const child = h[c]!;
      if (!before(child, last)) break;
      h[i] = child;
      i = c;
    }
    h[i] = last;
    return top;
  }
}

function before(a: Scheduled<unknown>, b: Scheduled<unknown>): boolean {
  return a.atMs < b.atMs || (a.atMs === b.atMs && a.seq < b.seq);
}
