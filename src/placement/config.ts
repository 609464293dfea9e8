/** The driver's settings: every number defaults to src/core/limits.ts placementLimits; tests and the simulator override. */
import { placementLimits } from '../core/limits.js';

type Numbers = { readonly [K in keyof typeof placementLimits]: number };

export interface PlacementConfig extends Numbers {
  /**
   * Liveness heartbeats go to every other member ('members', the default: the driver needs every node's liveness,
   * a node holding nothing included, and the count is flat in the group count) or only to the peers this node
   * shares a group with ('shared', CockroachDB's store liveness: fewer while a node holds few groups).
   */
  readonly supportScope: 'members' | 'shared';
  /** Split the largest group while there are fewer groups than this many per placeable node (0: never for count). */
  readonly groupsPerNodeMin: number;
}

export const defaultPlacementConfig: PlacementConfig = {
  ...placementLimits,
  supportScope: 'members',
  groupsPerNodeMin: 0,
};

export function placementConfig(overrides: Partial<PlacementConfig> = {}): PlacementConfig {
  return { ...defaultPlacementConfig, ...overrides };
}
