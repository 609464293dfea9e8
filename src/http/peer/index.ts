/** The public face of src/http/peer: import from here. */
export { certNodeUriPrefix, nodeIdHeader } from './auth.js';
export type { PeerMode } from './auth.js';
export { FrameError } from './frame.js';
export type { LinkState } from './link.js';
export { loadPeerTls } from './tls.js';
export type { PeerTlsFiles } from './tls.js';
export { PeerRequestError, PeerTimeoutError, PeerTransport, PeerUnavailableError } from './transport.js';
export type { LinkStats, PeerAddress, PeerLimits, PeerTransportOptions, PeerTransportStats } from './transport.js';
