/** The public face of src/http/peer: import from here. */
export { nodeIdHeader, secretHeader, secretProof } from './auth.js';
export { FrameError } from './frame.js';
export type { LinkState } from './link.js';
export { PeerRequestError, PeerTimeoutError, PeerTransport, PeerUnavailableError } from './transport.js';
export type { LinkStats, PeerAddress, PeerLimits, PeerTransportOptions, PeerTransportStats } from './transport.js';
