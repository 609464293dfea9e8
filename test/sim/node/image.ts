/**
 * A shard's scheduler state as a snapshot's bytes (the simulator's stand-in for src/store/shard-snapshot.ts): every
 * task, calendar, job and execution of a DigestStore, plus the Raft checker's state hash at that index. The bytes
 * are a token (the state hash, big-endian) naming an image kept beside them: the records themselves, without a
 * copy (a store never changes a record it keeps, a put replaces it). One object travels by reference through the
 * simulated disks and network, so every node that reads the snapshot finds the same image; a store restored from
 * it copies every record in, as a put does.
 */
import { DigestStore } from './digest-store.js';
import type { StoreImage } from './digest-store.js';

interface Image extends StoreImage {
  readonly hash: number;
}

const images = new WeakMap<Uint8Array, Image>();

export function encodeImage(store: DigestStore, hash: number): Uint8Array {
  const bytes = new Uint8Array(4);
  new DataView(bytes.buffer).setUint32(0, hash);
  images.set(bytes, { hash, ...store.image() });
  return bytes;
}

/** The store and state hash a snapshot holds (the bootstrap snapshot has no data: empty). */
export function decodeImage(data: Uint8Array, emptyHash: number): { store: DigestStore; hash: number } {
  const store = new DigestStore();
  if (data.length === 0) return { store, hash: emptyHash };
  const image = images.get(data);
  if (image === undefined) throw new Error('decodeImage: bytes that no encodeImage made');
  for (const t of image.tasks) store.putTask(t);
  for (const c of image.calendars) store.putCalendar(c);
  for (const j of image.jobs) store.putJob(j);
  for (const e of image.executions) store.putExecution(e);
  return { store, hash: image.hash };
}
