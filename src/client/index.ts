/**
 * The package's entry point: `import { Punctual, verifySignature } from 'punctual'`. The API client
 * (client.ts), its one error class (errors.ts), the callback verifier and its node:http middleware (verify.ts),
 * and the API's JSON shapes (types.ts). Nothing here starts or needs a node.
 */
export { Punctual, Paged, idempotentJobId, defaultBaseUrl } from './client.js';
export type { PunctualOptions, RequestOptions, RetryOptions, ApiResponse, JobListQuery, Jobs, Tasks, Calendars, Schedules, Cluster, Clock } from './client.js';
export { PunctualError } from './errors.js';
export type { FailureReason, ClientErrorCode } from './errors.js';
export { verifySignature, verifyingHandler, SignatureError } from './verify.js';
export type { VerifyOptions, VerifiedCallback, VerifiedRequest, VerifyingHandlerOptions, SignatureFailure, SignatureScheme, HeadersLike } from './verify.js';
export type * from './types.js';
