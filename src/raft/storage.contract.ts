/**
 * The contract every LogStorage implementation must meet (Hono's common.case.test.ts idea): MemoryStorage runs it
 * in storage.test.ts, the SQLite log store of src/store runs it too. vitest describe/it; import from a test file.
 */
import { describe, expect, it } from 'vitest';
import { makeEntry } from './crc32.js';
import type { LogStorageWriter } from './storage.js';
import { StorageCompactedError, StorageUnavailableError } from './storage.js';
import type { ConfState, Entry, LogIndex, NodeId, Term } from './types.js';

export interface LogStorageContractOptions {
  /** Close and open the same storage again (durable stores): the contract then checks nothing was lost. */
  reopen?: (s: LogStorageWriter) => LogStorageWriter;
  /** Release what make() opened (files, handles). */
  close?: (s: LogStorageWriter) => void;
}

const boot: ConfState = { voters: ['n1', 'n2', 'n3'] as NodeId[], learners: [] };
const enc = new TextEncoder();

function ent(index: number, term: number, data = `e${index}t${term}`): Entry {
  return makeEntry(index as LogIndex, term as Term, 'normal', enc.encode(data));
}

function ents(from: number, to: number, term: number): Entry[] {
  const out: Entry[] = [];
  for (let i = from; i <= to; i++) out.push(ent(i, term));
  return out;
}

function plain(es: readonly Entry[]): unknown[] {
  return es.map((e) => ({ index: e.index, term: e.term, type: e.type, data: Array.from(e.data), crc: e.crc }));
}

export function runLogStorageContract(
  name: string,
  make: (bootstrap: ConfState) => LogStorageWriter,
  options: LogStorageContractOptions = {},
): void {
  describe(`LogStorage contract: ${name}`, () => {
    const open: LogStorageWriter[] = [];
    // A joining node's storage (empty log) unless a bootstrap membership is given.
    const fresh = (bootstrap: ConfState = { voters: [], learners: [] }): LogStorageWriter => {
      const s = make(bootstrap);
      open.push(s);
      return s;
    };
    const reopen = (s: LogStorageWriter): LogStorageWriter => {
      if (!options.reopen) return s;
      const r = options.reopen(s);
      open.push(r);
      return r;
    };
    const closeAll = (): void => {
      for (const s of open.splice(0)) options.close?.(s);
    };

    it('starts empty without a bootstrap membership', () => {
      const s = fresh();
      expect(s.firstIndex()).toBe(1);
      expect(s.lastIndex()).toBe(0);
      expect(s.term(0 as LogIndex)).toBe(0);
      expect(s.entries(1 as LogIndex, 1 as LogIndex, 1e9)).toEqual([]);
      expect(s.initialState().confState).toEqual({ voters: [], learners: [] });
      closeAll();
    });

    it('starts with the bootstrap snapshot (index 1, term 0) holding the membership', () => {
      let s = fresh(boot);
      s = reopen(s);
      expect(s.firstIndex()).toBe(2);
      expect(s.lastIndex()).toBe(1);
      expect(s.term(1 as LogIndex)).toBe(0);
      expect(s.entries(2 as LogIndex, 2 as LogIndex, 1e9)).toEqual([]);
      expect(s.snapshot()?.metadata).toEqual({ index: 1, term: 0, confState: boot });
      const init = s.initialState();
      expect(init.hardState).toEqual({ term: 0, vote: '', commit: 0 });
      expect([...init.confState.voters].sort()).toEqual(['n1', 'n2', 'n3']);
      expect(init.confState.learners).toEqual([]);
      closeAll();
    });

    it('appends and reads back entries, terms and checksums unchanged', () => {
      let s = fresh();
      s.append(ents(1, 5, 1));
      s.append([ent(6, 2), makeEntry(7 as LogIndex, 2 as Term, 'conf_change', enc.encode('add_learner:n4'))]);
      s = reopen(s);
      expect(s.firstIndex()).toBe(1);
      expect(s.lastIndex()).toBe(7);
      expect(s.term(5 as LogIndex)).toBe(1);
      expect(s.term(7 as LogIndex)).toBe(2);
      const got = s.entries(1 as LogIndex, 8 as LogIndex, 1e9);
      expect(plain(got)).toEqual(plain([...ents(1, 5, 1), ent(6, 2), makeEntry(7 as LogIndex, 2 as Term, 'conf_change', enc.encode('add_learner:n4'))]));
      closeAll();
    });

    it('limits entries() by bytes but always returns at least one', () => {
      const s = fresh();
      s.append([ent(1, 1, 'aaaa'), ent(2, 1, 'bbbb'), ent(3, 1, 'cccc')]);
      expect(s.entries(1 as LogIndex, 4 as LogIndex, 1)).toHaveLength(1);
      expect(s.entries(1 as LogIndex, 4 as LogIndex, 8)).toHaveLength(2);
      expect(s.entries(1 as LogIndex, 4 as LogIndex, 12)).toHaveLength(3);
      expect(s.entries(2 as LogIndex, 3 as LogIndex, 1e9).map((e) => e.index)).toEqual([2]);
      closeAll();
    });

    it('replaces a conflicting suffix on append', () => {
      let s = fresh();
      s.append(ents(1, 6, 1));
      s.append(ents(4, 5, 2));
      s = reopen(s);
      expect(s.lastIndex()).toBe(5);
      expect(s.entries(1 as LogIndex, 6 as LogIndex, 1e9).map((e) => e.term)).toEqual([1, 1, 1, 2, 2]);
      closeAll();
    });

    it('refuses a gap, and reads past the end are unavailable', () => {
      const s = fresh();
      s.append(ents(1, 3, 1));
      expect(() => s.append([ent(5, 1)])).toThrow();
      expect(() => s.term(4 as LogIndex)).toThrow(StorageUnavailableError);
      expect(() => s.entries(2 as LogIndex, 5 as LogIndex, 1e9)).toThrow(StorageUnavailableError);
      closeAll();
    });

    it('keeps the hard state', () => {
      let s = fresh();
      s.append(ents(1, 2, 3));
      s.setHardState({ term: 3 as Term, vote: 'n2' as NodeId, commit: 2 as LogIndex });
      s = reopen(s);
      expect(s.initialState().hardState).toEqual({ term: 3, vote: 'n2', commit: 2 });
      closeAll();
    });

    it('compacts up to its snapshot, keeping the trailing entries', () => {
      let s = fresh();
      s.append(ents(1, 10, 1));
      s.append(ents(11, 12, 2));
      const cs: ConfState = { voters: ['n1', 'n2'] as NodeId[], learners: ['n4'] as NodeId[] };
      const snap = s.createSnapshot(11 as LogIndex, cs, enc.encode('state@11'));
      expect(snap.metadata).toEqual({ index: 11, term: 2, confState: cs });
      expect(() => s.compact(12 as LogIndex)).toThrow(); // past the snapshot
      s.compact(8 as LogIndex);
      s = reopen(s);
      expect(s.firstIndex()).toBe(9);
      expect(s.lastIndex()).toBe(12);
      expect(s.term(8 as LogIndex)).toBe(1);
      expect(() => s.term(7 as LogIndex)).toThrow(StorageCompactedError);
      expect(() => s.entries(8 as LogIndex, 10 as LogIndex, 1e9)).toThrow(StorageCompactedError);
      expect(s.entries(9 as LogIndex, 13 as LogIndex, 1e9).map((e) => e.index)).toEqual([9, 10, 11, 12]);
      const got = s.snapshot();
      expect(got?.metadata).toEqual({ index: 11, term: 2, confState: cs });
      expect(new TextDecoder().decode(got!.data)).toBe('state@11');
      expect(s.initialState().confState).toEqual(cs);
      s.compact(5 as LogIndex); // older than the current first index: nothing to do
      expect(s.firstIndex()).toBe(9);
      closeAll();
    });

    it('picks out the conf changes of a range (when it offers confChanges), with the bounds of entries()', () => {
      let s = fresh();
      if (s.confChanges === undefined) return closeAll();
      const cc = (index: number): Entry => makeEntry(index as LogIndex, 1 as Term, 'conf_change', enc.encode(`cc${index}`));
      s.append([...ents(1, 3, 1), cc(4), ...ents(5, 7, 1), cc(8), ...ents(9, 10, 1)]);
      s.createSnapshot(2 as LogIndex, { voters: ['n1'] as NodeId[], learners: [] }, new Uint8Array(0));
      s.compact(2 as LogIndex);
      s = reopen(s);
      expect(plain(s.confChanges!(3 as LogIndex, 11 as LogIndex))).toEqual(plain([cc(4), cc(8)]));
      expect(s.confChanges!(5 as LogIndex, 8 as LogIndex)).toEqual([]);
      expect(plain(s.confChanges!(8 as LogIndex, 9 as LogIndex))).toEqual(plain([cc(8)]));
      expect(() => s.confChanges!(2 as LogIndex, 5 as LogIndex)).toThrow(StorageCompactedError);
      expect(() => s.confChanges!(3 as LogIndex, 12 as LogIndex)).toThrow(StorageUnavailableError);
      closeAll();
    });

    it('drops the compacted part of an append that overlaps the snapshot', () => {
      const s = fresh();
      s.append(ents(1, 5, 1));
      s.createSnapshot(5 as LogIndex, boot, new Uint8Array(0));
      s.compact(5 as LogIndex);
      s.append(ents(4, 7, 1));
      expect(s.firstIndex()).toBe(6);
      expect(s.lastIndex()).toBe(7);
      closeAll();
    });

    it('replaces the whole log by an applied snapshot, then appends after it', () => {
      let s = fresh();
      s.append(ents(1, 4, 1));
      const cs: ConfState = { voters: ['n1', 'n2', 'n3'] as NodeId[], learners: ['n5'] as NodeId[] };
      s.applySnapshot({ metadata: { index: 20 as LogIndex, term: 4 as Term, confState: cs }, data: enc.encode('img') });
      expect(s.firstIndex()).toBe(21);
      expect(s.lastIndex()).toBe(20);
      expect(s.term(20 as LogIndex)).toBe(4);
      expect(() => s.term(4 as LogIndex)).toThrow(StorageCompactedError);
      s.append(ents(21, 22, 4));
      s = reopen(s);
      expect(s.lastIndex()).toBe(22);
      expect(s.initialState().confState).toEqual(cs);
      expect(s.snapshot()?.metadata.index).toBe(20);
      closeAll();
    });
  });
}
