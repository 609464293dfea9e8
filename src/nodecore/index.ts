export { NodeCore } from './core.js';
export { queueFull, shuttingDown } from './batcher.js';
export { occurrenceKey } from './rules.js';
export type * from './types.js';
export { ShardLeadership, type RaftStatus } from './leadership.js';
export { Replication, ReplicaShard, notLeader, proposalFailed } from './replication.js';
export type { PendingProposal, PendingRead, ReplicaEvent, ReplicaRound, ReplicationDeps, ReplicaShardInit, RoundShard, ProposeAnswer, ReadAnswer } from './replication.js';
export { Node, diskFull, emptyReady, type NodeClocks, type NodeDeps, type NodeReady } from './node.js';
