/**
 * Payloads by reference (`payload_ref`): the body of a callback fetched from a URL when its attempt starts.
 *
 * - Streamed and capped: the body is counted (and hashed) as it arrives; past `bytesMax` the fetch stops.
 * - Its own timeout (payloadRefLimits.fetchTimeoutMs, connect to last byte) and its own connection pool, so a
 *   slow blob store never holds the callbacks' sockets.
 * - The callbacks' SSRF rules: connections go through the same TargetPolicy connector (a refused address is
 *   refused after DNS resolution, as for callbacks).
 * - Verdicts: a fetch that fails (connection, timeout, a non-2xx status, a redirect, which is not followed) is a
 *   retryable attempt failure; a body whose SHA-256 differs from the reference's, a body over the cap or a refused
 *   target is permanent (fetching again cannot change it).
 * - Many jobs may share one reference: a reference with a sha256 is content-addressed, so its body is kept in a
 *   small LRU (url + sha256, bounded in entries and bytes) and concurrent fetches of it are shared.
 */
import { createHash } from 'node:crypto';
import { Agent } from 'undici';
import { payloadRefLimits } from '../core/limits.js';
import type { PayloadRef } from '../scheduler/types.js';
import { classifyError } from './classify.js';
import type { TargetPolicy } from './target-policy.js';

export type PayloadFetch =
  | { ok: true; body: Uint8Array; contentType: string }
  | { ok: false; kind: 'retryable' | 'permanent'; error: string };

export interface PayloadRefFetcherOptions {
  /** The callbacks' target policy (SSRF guard). */
  policy: TargetPolicy;
  /** `serve --payload-ref-max-bytes`. */
  bytesMax?: number;
  timeoutMs?: number;
}

const defaultContentType = 'application/octet-stream';

type Fetched = Extract<PayloadFetch, { ok: true }>;

export class PayloadRefFetcher {
  private readonly agent: Agent;
  private readonly bytesMax: number;
  private readonly timeoutMs: number;
  /** Content-addressed bodies (url + sha256), least recently used first. */
  private readonly cache = new Map<string, Fetched>();
  private cacheBytes = 0;
  private readonly inFlight = new Map<string, Promise<PayloadFetch>>();

  constructor(options: PayloadRefFetcherOptions) {
    this.bytesMax = options.bytesMax ?? payloadRefLimits.bytesMaxDefault;
    this.timeoutMs = options.timeoutMs ?? payloadRefLimits.fetchTimeoutMs;
    this.agent = new Agent({ connections: payloadRefLimits.connectionsPerOriginMax, connect: options.policy.connector() });
  }

  /** Never rejects: every failure is a verdict. The content type is the reference's, else the one served. */
  fetch(ref: PayloadRef): Promise<PayloadFetch> {
    if (ref.sha256 === null) return this.fetchOnce(ref).then((r) => (r.ok ? withType(r, ref) : r));
    const key = `${ref.url}\n${ref.sha256}`;
    const hit = this.cache.get(key);
    if (hit !== undefined) {
      this.cache.delete(key);
      this.cache.set(key, hit);
      return Promise.resolve(withType(hit, ref));
    }
    let shared = this.inFlight.get(key);
    if (shared === undefined) {
      shared = this.fetchOnce(ref).then((r) => {
        this.inFlight.delete(key);
        if (r.ok) this.remember(key, r);
        return r;
      });
      this.inFlight.set(key, shared);
    }
    return shared.then((r) => (r.ok ? withType(r, ref) : r));
  }

  close(): Promise<void> {
    return this.agent.destroy();
  }

  private async fetchOnce(ref: PayloadRef): Promise<PayloadFetch> {
    try {
      return await this.download(ref);
    } catch (err) {
      const aborted = (err as Error).name === 'TimeoutError' || (err as Error).name === 'AbortError';
      if (aborted) return { ok: false, kind: 'retryable', error: `payload_ref fetch: timeout after ${this.timeoutMs} ms` };
      const verdict = classifyError(err);
      return { ok: false, kind: verdict.kind === 'permanent' ? 'permanent' : 'retryable', error: `payload_ref fetch: ${verdict.error}` };
    }
  }

  private async download(ref: PayloadRef): Promise<PayloadFetch> {
    const url = new URL(ref.url);
    const res = await this.agent.request({
      origin: url.origin,
      path: url.pathname + url.search,
      method: 'GET',
      signal: AbortSignal.timeout(this.timeoutMs),
      headersTimeout: 0,
      bodyTimeout: 0,
    });
    if (res.statusCode < 200 || res.statusCode > 299) {
      discard(res.body);
      return { ok: false, kind: 'retryable', error: `payload_ref fetch: HTTP ${res.statusCode}` };
    }
    const declared = Number(res.headers['content-length'] ?? 0);
    if (declared > this.bytesMax) {
      discard(res.body);
      return this.tooLarge();
    }
    const hash = createHash('sha256');
    const chunks: Buffer[] = [];
    let bytes = 0;
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      bytes += chunk.length;
      if (bytes > this.bytesMax) {
        discard(res.body);
        return this.tooLarge();
      }
      hash.update(chunk);
      chunks.push(chunk);
    }
    const digest = hash.digest('hex');
    if (ref.sha256 !== null && digest !== ref.sha256) {
      return { ok: false, kind: 'permanent', error: `payload_ref sha256 mismatch: expected ${ref.sha256}, fetched ${digest} (${bytes} bytes)` };
    }
    const body = Buffer.concat(chunks, bytes);
    const header = res.headers['content-type'];
    const served = Array.isArray(header) ? header[0] : header;
    return { ok: true, body: new Uint8Array(body.buffer, body.byteOffset, body.byteLength), contentType: served ?? defaultContentType };
  }

  private tooLarge(): PayloadFetch {
    return { ok: false, kind: 'permanent', error: `payload_ref body exceeds ${this.bytesMax} bytes (--payload-ref-max-bytes)` };
  }

  private remember(key: string, fetched: Fetched): void {
    if (fetched.body.byteLength > payloadRefLimits.cacheBytesMax) return;
    this.cache.set(key, fetched);
    this.cacheBytes += fetched.body.byteLength;
    for (const [oldKey, old] of this.cache) {
      if (this.cache.size <= payloadRefLimits.cacheEntriesMax && this.cacheBytes <= payloadRefLimits.cacheBytesMax) break;
      this.cache.delete(oldKey);
      this.cacheBytes -= old.body.byteLength;
    }
  }
}

/** Drops a body not wanted (an error answer, one over the cap): its connection is closed, its abort not an error. */
function discard(body: { on(event: 'error', listener: () => void): unknown; destroy(): unknown }): void {
  body.on('error', () => {});
  body.destroy();
}

/** The fetched body with this reference's content type when it names one (jobs may share a body under different types). */
function withType(fetched: Fetched, ref: PayloadRef): Fetched {
  return ref.contentType === null || ref.contentType === fetched.contentType ? fetched : { ...fetched, contentType: ref.contentType };
}
