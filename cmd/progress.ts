/**
 * Progress of long commands (`job batch --file`, backups), always on stderr so stdout stays the command's
 * output. On a terminal: one bar redrawn in place (at most 10 times a second, and at the end). Elsewhere (a log
 * file, CI): one plain line per update, which the caller makes at a meaningful step (a batch, a file).
 */
import type { CliIo } from './io.js';

/** What a terminal stream has beyond write(); a buffer or a pipe has neither. */
interface TtyLike {
  isTTY?: boolean;
  columns?: number;
}

export function isTty(stream: CliIo['stderr']): boolean {
  return (stream as TtyLike).isTTY === true;
}

export interface ProgressOptions {
  /** The amount that means done (file bytes), or null when unknown (stdin): no percentage then. */
  total: number | null;
  /** Forces the bar (true) or plain lines (false); default: the bar on a TTY. */
  tty?: boolean;
}

const redrawEveryMs = 100;
const barCellsMax = 30;

export class Progress {
  /** True when drawing a bar in place (a terminal), false for plain lines. */
  readonly live: boolean;
  private lastDrawMs = 0;
  private drawn = false;
  private readonly startMs = Date.now();

  constructor(
    private readonly stream: CliIo['stderr'],
    private readonly options: ProgressOptions,
  ) {
    this.live = options.tty ?? isTty(stream);
  }

  /** `done` of the total so far; `detail` is the rest of the line (counts, rates). */
  update(done: number, detail: string, final = false): void {
    const pct = this.options.total === null || this.options.total === 0 ? null : Math.min(100, Math.floor((done / this.options.total) * 100));
    if (!this.live) {
      this.stream.write(`progress: ${pct === null ? '' : `${pct}%, `}${detail}\n`);
      return;
    }
    const now = Date.now();
    if (!final && now - this.lastDrawMs < redrawEveryMs) return;
    this.lastDrawMs = now;
    const columns = (this.stream as TtyLike).columns ?? 80;
    const cells = Math.max(10, Math.min(barCellsMax, columns - detail.length - 12));
    const filled = pct === null ? 0 : Math.round((pct / 100) * cells);
    const bar = pct === null ? '' : `[${'#'.repeat(filled)}${'.'.repeat(cells - filled)}] ${String(pct).padStart(3)}% `;
    const line = (bar + detail).slice(0, Math.max(20, columns - 1));
    this.stream.write(`\r\x1b[2K${line}`);
    this.drawn = true;
  }

  /** A message between updates: on a terminal it goes above the bar, which is redrawn by the next update. */
  note(text: string): void {
    if (this.live && this.drawn) this.stream.write('\r\x1b[2K');
    this.stream.write(text + '\n');
    this.drawn = false;
  }

  /** Ends the bar's line (a terminal keeps the last state visible). */
  finish(): void {
    if (this.live && this.drawn) this.stream.write('\n');
    this.drawn = false;
  }

  /** Items per second since the start, for the detail text. */
  rate(items: number): string {
    const seconds = (Date.now() - this.startMs) / 1000;
    return seconds <= 0 ? '-' : `${Math.round(items / seconds)}/s`;
  }
}
