export type { PlacementConfig } from './config.js';
export { defaultPlacementConfig, placementConfig } from './config.js';
export type { Plan } from './driver.js';
export { plan } from './driver.js';
export { PlanContext } from './context.js';
export { replicaBand } from './balance.js';
export {
  idleMessagesPerS,
  isPlaceable,
  isUp,
  leaseExpiryMs,
  livenessOf,
  perGroupHeartbeatMessagesPerS,
  supportPeerCounts,
  supportPeers,
} from './liveness.js';
export { applyStep, hasQuorum, leadershipFrozen, quorum, stepRefusal, stepTimeoutMs, votersOf } from './operator.js';
export type { SlotEntry, SlotSpace } from './slots.js';
export { legacyShardRange, reverseBits, SlotTable, slotOf, slotOfHash, slotSpace, splitPoint } from './slots.js';
export type {
  ChangeRecord,
  ClusterModel,
  DriverMemory,
  GroupEpoch,
  GroupId,
  GroupInfo,
  InFlight,
  NodeAdmin,
  NodeInfo,
  NodeLiveness,
  Operator,
  OperatorReason,
  ReplicaInfo,
  ReplicaRole,
  SlotRange,
  Step,
} from './types.js';
export { emptyMemory } from './types.js';
