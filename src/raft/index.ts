/** The public face of src/raft: import from here. */
export { RaftBugs, resetRaftBugs } from './bugs.js';
export type { RaftBugName } from './bugs.js';
export { applyToConfState, decodeConfChange, encodeConfChange } from './confchange.js';
export { crc32, entryCrc, entryCrcOk, makeEntry } from './crc32.js';
export { CorruptEntryError } from './log.js';
export type { ProposeRejection, ProposeResult } from './raft.js';
export { RawNode } from './rawnode.js';
export type { BasicStatus, ProgressStatus, Status } from './rawnode.js';
export { MemoryStorage, StorageCompactedError, StorageUnavailableError, emptyHardState } from './storage.js';
export type { InitialState, LogStorage, LogStorageWriter } from './storage.js';
export * from './types.js';
