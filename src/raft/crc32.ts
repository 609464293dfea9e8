/**
 * A small table-driven CRC-32 (IEEE 802.3, the zlib polynomial), so the pure core needs no node:zlib.
 * Every entry carries crc32(index, term, type, data): a corrupted entry on the wire or on disk is detected
 * before it is acknowledged or applied.
 */
import type { Entry, EntryType, LogIndex, Term } from './types.js';

const table: Uint32Array = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

/** Continue a running crc (start from 0) over `bytes`. */
export function crc32Update(crc: number, bytes: Uint8Array): number {
  let c = ~crc >>> 0;
  for (let i = 0; i < bytes.length; i++) c = table[(c ^ bytes[i]!) & 0xff]! ^ (c >>> 8);
  return ~c >>> 0;
}

export function crc32(bytes: Uint8Array): number {
  return crc32Update(0, bytes);
}

const header = new Uint8Array(17);
const headerView = new DataView(header.buffer);
const two32 = 4294967296;

/**
 * The checksum stored in Entry.crc: crc32 of index and term (each as an unsigned 64-bit big-endian integer),
 * one type byte (0 normal, 1 conf_change), then the data.
 */
export function entryCrc(index: LogIndex, term: Term, type: EntryType, data: Uint8Array): number {
  headerView.setUint32(0, Math.floor(index / two32));
  headerView.setUint32(4, index >>> 0);
  headerView.setUint32(8, Math.floor(term / two32));
  headerView.setUint32(12, term >>> 0);
  header[16] = type === 'normal' ? 0 : 1;
  return crc32Update(crc32Update(0, header), data);
}

export function makeEntry(index: LogIndex, term: Term, type: EntryType, data: Uint8Array): Entry {
  return { index, term, type, data, crc: entryCrc(index, term, type, data) };
}

export function entryCrcOk(e: Entry): boolean {
  return entryCrc(e.index, e.term, e.type, e.data) === e.crc;
}
