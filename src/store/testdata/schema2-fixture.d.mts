// Types of schema2-fixture.mjs, a plain script so that it also runs against the dist of the schema-2 code.
import type { SqliteShardStore } from '../shard-store.js';

export function writeRows(store: SqliteShardStore, shard: number): void;
export function answers(store: SqliteShardStore): Record<string, unknown>;
