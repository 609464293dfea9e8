/** Membership changes as entry data, and the membership set they act on. */
import { assert } from '../core/assert.js';
import type { ConfChange, ConfState, NodeId } from './types.js';

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Encoded as UTF-8 `type:node`, e.g. `add_learner:n4`: small and readable in a log dump. */
export function encodeConfChange(cc: ConfChange): Uint8Array {
  return encoder.encode(`${cc.type}:${cc.node}`);
}

export function decodeConfChange(data: Uint8Array): ConfChange {
  const s = decoder.decode(data);
  const at = s.indexOf(':');
  assert(at > 0, `conf change ${JSON.stringify(s)}: no type`);
  const type = s.slice(0, at);
  const node = s.slice(at + 1) as NodeId;
  assert(type === 'add_learner' || type === 'add_voter' || type === 'remove', `conf change type ${type}`);
  return { type, node };
}

/** The membership after `cc` (pure; the caller has validated the change when it was proposed). */
export function applyToConfState(cs: ConfState, cc: ConfChange): ConfState {
  const voters = cs.voters.filter((v) => v !== cc.node);
  const learners = cs.learners.filter((v) => v !== cc.node);
  if (cc.type === 'add_voter') voters.push(cc.node);
  if (cc.type === 'add_learner') learners.push(cc.node);
  return { voters: voters.sort(), learners: learners.sort() };
}
