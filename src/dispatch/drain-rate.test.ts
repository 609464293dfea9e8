import { describe, expect, it } from 'vitest';
import { limits } from '../core/limits.js';
import { DrainRate } from './drain-rate.js';

const T = 1_700_000_000_000;

/** `n` starts of callbacks all due at `dueAtMs`, one every `everyMs` from `fromMs`. */
function instant(rate: DrainRate, n: number, dueAtMs: number, fromMs: number, everyMs: number): void {
  for (let i = 0; i < n; i++) rate.noteStart(dueAtMs, fromMs + i * everyMs);
}

describe('DrainRate', () => {
  it('measures a hot instant: the starts after its first millisecond over the time they took', () => {
    const rate = new DrainRate();
    expect(rate.perS()).toBeNull();
    // 1,000 due at T, one start every 0.2 ms: 5,000/s. The first ms does not wait behind anything yet.
    instant(rate, 1000, T, T, 0.2);
    expect(rate.perS()).toBe(5000);
    // Ended by a start that did not wait (due after the last start): the sample stays.
    rate.noteStart(T + 500, T + 500);
    expect(rate.perS()).toBe(5000);
    // A second instant drained at 2,500/s is averaged in (0.7 old, 0.3 new).
    instant(rate, 1000, T + 2000, T + 2000, 0.4);
    rate.noteStart(T + 3000, T + 3000);
    expect(rate.perS()).toBe(Math.round(0.7 * 5000 + 0.3 * 2500));
  });

  it('says nothing of callbacks that were late but waited behind no other start', () => {
    const rate = new DrainRate();
    // Jobs submitted to run now start 10-30 ms after their due time, seconds apart.
    for (let i = 0; i < 300; i++) rate.noteStart(T + i * 2000, T + i * 2000 + 10 + (i % 20));
    // An overdue job (due a year ago) after an idle hour: late, but nothing went out just before it.
    rate.noteStart(T - 365 * 86_400_000, T + 3_600_000);
    expect(rate.perS()).toBeNull();
  });

  it('says nothing of a steady rate kept on time, nor of a short hiccup in it', () => {
    const rate = new DrainRate();
    // 1,000/s, each started 0.5 ms after its due time.
    for (let i = 0; i < 5000; i++) rate.noteStart(T + i, T + i + 0.5);
    expect(rate.perS()).toBeNull();
    // A 30 ms stall: the 30 jobs due meanwhile start at once after it, then the rate goes on.
    const at = T + 5000;
    for (let i = 0; i < 30; i++) rate.noteStart(at + i, at + 30 + i * 0.05);
    for (let i = 30; i < 1000; i++) rate.noteStart(at + i, at + i + 0.5);
    expect(limits.drainSampleStartsMin).toBeGreaterThan(30);
    expect(rate.perS()).toBeNull();
  });

  it('counts a backlog still going on, and takes a sample of each of its seconds', () => {
    const rate = new DrainRate();
    // 12,000 due at T drained at 4,000/s over 3 s: the open backlog counts before it ends.
    instant(rate, 4000, T, T, 0.25);
    expect(rate.perS()).toBe(4000);
    instant(rate, 8000, T, T + 1000, 0.25);
    expect(rate.perS()).toBe(4000);
  });

  it('lets retries count inside a backlog without beginning or ending one', () => {
    const rate = new DrainRate();
    // Retries alone, back to back: no backlog.
    for (let i = 0; i < 500; i++) rate.noteStart(null, T + i * 0.2);
    expect(rate.perS()).toBeNull();
    // A hot instant with one retry every 10th start: the retries count in its rate and do not cut it.
    for (let i = 0; i < 1000; i++) rate.noteStart(i % 10 === 9 ? null : T + 1000, T + 1000 + i * 0.2);
    expect(rate.perS()).toBe(5000);
  });

  it('ignores a backlog too small or too short to say a rate', () => {
    const rate = new DrainRate();
    instant(rate, limits.drainSampleStartsMin - 1, T, T, 1);
    rate.noteStart(T + 1000, T + 1000);
    // Many at once within a few ms (a chunk written in one turn): no span to divide by.
    instant(rate, 500, T + 2000, T + 2000, 0.01);
    rate.noteStart(T + 3000, T + 3000);
    expect(rate.perS()).toBeNull();
  });
});
