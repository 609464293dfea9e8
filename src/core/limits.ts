/**
 * Every limit in one place (TigerBeetle style). Relationships between them are asserted when this module loads,
 * so a bad edit fails at start, not in production. The ones users meet are listed in docs/api.md (Limits),
 * docs/cli.md and docs/cluster.md.
 */
import { assert } from './assert.js';

export const limits = {
  // --- client API
  /** Largest request body for every route but the batch route. */
  requestBodyBytesMax: 1 * 1024 * 1024,
  /** Largest body of POST /v1/jobs:batch. */
  batchBodyBytesMax: 64 * 1024 * 1024,
  /** Jobs in one POST /v1/jobs:batch. */
  batchJobsMax: 10_000,
  /** Callback body (payload or payload_base64, decoded). */
  payloadBytesMax: 256 * 1024,
  /** metadata, as serialized JSON. */
  metadataBytesMax: 4 * 1024,
  jobIdLengthMax: 128,
  taskNameLengthMax: 128,
  callbackHeadersMax: 64,
  callbackHeaderBytesMax: 8 * 1024,
  urlLengthMax: 2048,
  signingSecretBytesMax: 1024,
  /** A shorter signing secret is refused (a whsec_ secret counts its decoded bytes). */
  signingSecretBytesMin: 16,
  /** Results of GET /v1/jobs and GET /v1/jobs/{id}/executions per page. */
  listLimitDefault: 100,
  listLimitMax: 1000,
  /** Occurrences returned by POST /v1/schedules:preview. */
  previewCountMax: 1000,
  previewCountDefault: 10,
  /** Dates plus ranges of one exclusion calendar (PUT /v1/calendars/{name}). */
  calendarEntriesMax: 1_000,
  /** Calendars one schedule may name in `exclude`. */
  calendarsPerScheduleMax: 4,
  calendarDescriptionLengthMax: 1_024,

  // --- callbacks
  callbackTimeoutMsDefault: 10_000,
  callbackTimeoutMsMax: 15 * 60 * 1000,
  retryMaxAttemptsDefault: 5,
  retryMaxAttemptsMax: 100,
  retryInitialBackoffMsDefault: 1_000,
  retryMaxBackoffMsDefault: 60_000,
  retryBackoffMsMax: 24 * 60 * 60 * 1000,
  retryMultiplierDefault: 2,
  retryMultiplierMax: 10,
  /** A Retry-After larger than this is clamped to it. */
  retryAfterMsMax: 60 * 60 * 1000,
  maxConcurrencyDefault: 100,
  maxConcurrencyMax: 10_000,
  /** Callbacks in flight on one node, whatever the task. */
  dispatchInFlightMax: 20_000,
  /** Bytes of a callback response body read (the rest is discarded). */
  responseBodyBytesMax: 4 * 1024,

  // --- schedules
  everyMsMin: 10,
  everyMsMax: 366 * 24 * 60 * 60 * 1000,
  /** Occurrences computed when applying fire_all after downtime, per job per command. */
  misfireFireAllMax: 1000,
  /**
   * A job's `misfire_threshold_ms` when the request gives none (written into the job, so apply never reads this):
   * an occurrence due more than this before Punctual gets to it is missed.
   */
  misfireThresholdMs: 5_000,
  /** Bounds of `misfire_threshold_ms`: below a second, ordinary firing jitter under load would count as missed. */
  misfireThresholdMsMin: 1_000,
  misfireThresholdMsMax: 24 * 60 * 60 * 1000,
  /**
   * Largest `spread_ms` of a recurring schedule: an hour spreads a hot instant thousands of jobs share while a
   * job's runs stay near the time its schedule names (and, for every_ms, it is also at most every_ms).
   */
  spreadMsMax: 60 * 60 * 1000,

  // --- timing wheel and loader
  /** The loader keeps jobs due within this horizon in the wheel; the rest stay in SQLite. */
  wheelHorizonMs: 60_000,
  /** How often the loader refills the wheel; must be well below the horizon. */
  loaderIntervalMs: 5_000,
  /** Jobs moved from SQLite to the wheel per loader query. */
  loaderBatchMax: 50_000,

  // --- log and group commit
  /** Commands in one group-commit batch (one transaction, one fsync). */
  commitBatchCommandsMax: 20_000,
  /** How long a proposal may wait for its batch to fill. */
  commitBatchDelayMs: 1,

  // --- src/dispatch (callback sender)
  /** Connections to one callback origin (one undici pool per origin, keep-alive). */
  dispatchConnectionsPerOriginMax: 128,
  /** Parsed callback URLs kept by the dispatcher (the cache is cleared when it fills). */
  dispatchUrlCacheMax: 10_000,
  /** Ranges in one --callback-allow or --callback-deny list. */
  callbackTargetRulesMax: 256,
  /** Distinct callback ports with their own checking connector (the map is cleared when it fills). */
  dispatchConnectorPortsMax: 1_024,
  /** How long Dispatcher.close() lets in-flight callbacks finish before aborting them. */
  dispatchCloseGraceMsDefault: 5_000,
  /** A connection opened ahead for staged deliveries (Dispatcher.warm) closes after this long unused. */
  dispatchWarmIdleMs: 10_000,
  /**
   * A request prepared ahead is signed with its due time; one that leaves later than this after it (it waited for
   * its concurrency slot, or the node was behind) is signed again, so the signature's time is when it was sent.
   */
  dispatchPreparedSignatureAgeMsMax: 1_000,
  /**
   * A callback's (or a payload_ref's) TCP and TLS connect gives up after this long, even when the task's
   * timeout_ms is longer: a connect the target never answers would otherwise hold one of the origin's pool slots
   * for the kernel's own SYN timeout (minutes) after the attempt was given up.
   */
  dispatchConnectTimeoutMs: 10_000,
  /** The signer's kept scratch buffer (one MAC's input); a larger body is signed from a buffer of its own. */
  signScratchBytesMax: 65_536,
  // --- the firing thread (src/dispatch/firing-port.ts, firing-core.ts)
  /**
   * Attempts due within this much are decided and handed to the sender ahead of time (staged: request built and
   * signed, connection warm, sent at the due ms, withdrawable until then); `serve --stage-lead-ms` overrides it.
   */
  firingStageLeadMs: 100,
  /** The largest `--stage-lead-ms`: a longer lead decides further ahead and holds more staged callbacks. */
  firingStageLeadMsMax: 1_000,
  /** Staged orders the node holds at most; past this the core decides and sends the rest at their due time. */
  firingStagedMax: 50_000,
  /** Starts and outcomes on the firing thread wait this long for others to cross to the main loop with them. */
  firingEventsDelayMs: 2,
  /** Orders staged ahead wait this long on the main side for others to cross to the firing thread with them ... */
  firingStageHoldMs: 10,
  /** ... when due at least this much after the hold (the thread still builds the request and opens connections). */
  firingStageHoldMarginMs: 40,
  /** While deliveries wait in the thread, the main side sends the shards' lease deadlines this often. */
  firingLeaseRefreshMs: 10,
  /** Unexpected exits of the firing thread after which the node sends from its main loop instead. */
  firingThreadRestartsMax: 5,
  /**
   * Requests the firing side sends to a throwaway server of its own once the node is ready (src/dispatch/warm-up.ts),
   * so its first callbacks do not pay the send path's first-use costs; in rounds of firingWarmUpRoundRequests at
   * once (a burst's shape), for at most firingWarmUpTimeoutMs. After readiness, not during the start it would slow.
   */
  firingWarmUpRequests: 120,
  firingWarmUpRoundRequests: 20,
  firingWarmUpTimeoutMs: 250,
  // --- the due profile and the admission report (GET /v1/due-profile, Punctual-Hot-Instant)
  /** Seconds GET /v1/due-profile covers at most, and by default. */
  dueProfileSecondsMax: 600,
  dueProfileSecondsDefault: 60,
  /** A submission is told about an instant whose projected delivery spread is longer than this. */
  hotInstantSpreadReportMs: 100,
  /** The drain rate assumed until the node has measured one (callbacks/s). */
  drainRatePerSAssumed: 5_000,
  /** Distinct due instants of one submission looked up for the admission report. */
  hotInstantLookupsMax: 16,
  /** An instant's count of due jobs is reused this long (plus the jobs accepted here since) before it is counted again. */
  hotInstantRecountMs: 100,
  /** Instants whose counts are kept for that reuse (the oldest counted is dropped first). */
  hotInstantCountsMax: 1024,
  /**
   * The admission report first bounds an instant by the jobs due in its bucket of this many ms (counted at most
   * every hotInstantRecountMs, like an instant): an instant whose bucket cannot be hot is not counted on its own.
   */
  hotInstantBucketMs: 10,
  /**
   * The drain rate is measured over backlogs: runs of starts each due at least drainWaitedMs before the start
   * before it went out, and following it within drainGapMaxMs (the sender busy, not idle).
   */
  drainWaitedMs: 1,
  drainGapMaxMs: 100,
  /** A backlog gives a drain-rate sample once it holds this many starts over at least drainSampleSpanMinMs. */
  drainSampleStartsMin: 100,
  drainSampleSpanMinMs: 20,
} as const;

assert(limits.requestBodyBytesMax <= limits.batchBodyBytesMax, 'single body limit exceeds batch body limit');
assert(limits.payloadBytesMax < limits.requestBodyBytesMax, 'payload must fit in a request body');
assert(limits.listLimitDefault <= limits.listLimitMax, 'list default exceeds max');
assert(limits.previewCountDefault <= limits.previewCountMax, 'preview default exceeds max');
assert(limits.retryInitialBackoffMsDefault <= limits.retryMaxBackoffMsDefault, 'backoff defaults inverted');
assert(limits.loaderIntervalMs * 2 <= limits.wheelHorizonMs, 'loader must run at least twice per horizon');
assert(limits.everyMsMin >= 1, 'every_ms minimum must be positive');
assert(limits.misfireThresholdMsMin <= limits.misfireThresholdMs && limits.misfireThresholdMs <= limits.misfireThresholdMsMax, 'misfire threshold default out of bounds');
assert(limits.callbackTimeoutMsDefault <= limits.callbackTimeoutMsMax, 'timeout default exceeds max');

// --- cmd/ (the punctual CLI's client commands)
export const cliLimits = {
  /** How long a client command waits for a TCP connection to --server. */
  connectTimeoutMs: 10_000,
  /** How long a client command waits for response headers, then for the body. */
  requestTimeoutMs: 60_000,
  /** Pages followed by `job list --all` / `job history --all` before giving up (limit x pages rows at most). */
  listPagesMax: 10_000,
  /** Shards a node may be started with (`serve --shards`). */
  shardsMax: 1024,
} as const;
assert(cliLimits.connectTimeoutMs <= cliLimits.requestTimeoutMs, 'cli connect timeout exceeds request timeout');

// --- src/client (the library in the package; the CLI uses it too)
export const clientLimits = {
  /** How long a client waits for a TCP (and TLS) connection. */
  connectTimeoutMs: cliLimits.connectTimeoutMs,
  /** How long a client waits for an answer's headers, then between chunks of its body. */
  requestTimeoutMs: cliLimits.requestTimeoutMs,
  /** Attempts of one request, the first included, when a repeat is safe (docs/api.md, "503 and 429"). */
  retryAttemptsDefault: 5,
  retryInitialBackoffMs: 250,
  retryMaxBackoffMs: 10_000,
  /** A Retry-After larger than this is clamped to it (a client waits, it does not hang). */
  retryAfterMsMax: 60_000,
  /** Batch items answered 429/503 wait at least this long before they are sent again (the 200 has no Retry-After). */
  batchItemRetryMs: 1_000,
  /** Characters of an error answer's body a PunctualError keeps (a proxy's error page can be large). */
  errorBodyCharsMax: 64 * 1024,
  /** Items Paged.toArray() collects before it refuses (iterate a larger list instead). */
  collectItemsMax: 1_000_000,
  /** verifySignature: how far a callback's timestamp may be from the receiver's clock, either side. */
  signatureToleranceMsDefault: 5 * 60 * 1000,
  /** verifyingHandler: the largest callback body it reads (a payload is at most 256 KiB; headroom for others). */
  verifyBodyBytesMax: 1 * 1024 * 1024,
  /** `job batch --file`: the longest line (one job) read; a longer one fails alone and is skipped. */
  batchLineBytesMax: 1 * 1024 * 1024,
  /** `punctual top`: refresh period and the bounds of --interval-ms. */
  topIntervalMsDefault: 1_000,
  topIntervalMsMin: 100,
  topIntervalMsMax: 60_000,
} as const;
assert(clientLimits.retryInitialBackoffMs <= clientLimits.retryMaxBackoffMs, 'client initial backoff exceeds max backoff');
assert(clientLimits.batchLineBytesMax <= limits.batchBodyBytesMax, 'a batch line cannot fit in a batch body');

// --- src/node and src/store (the single node host)
export const nodeLimits = {
  /** A firing record (fired, skipped, outcomes) refused by Raft in a way that proves it never applied (a leadership
   * transfer in progress) is proposed again this much later while the node still leads the shard in that term. */
  recordRetryMs: 20,
  /** A callback due (or out of the dispatcher's queue) while its shard's lease has lapsed is looked at again this much later. */
  leaseRetryMs: 5,
  /** Log entries kept below a shard's applied index; older ones are compacted away. */
  logKeepEntries: 10_000,
  /** Compaction runs for a shard once this many entries were applied since its last compaction. */
  logCompactEveryEntries: 1_000,
  /** A shard's log kept below its applied index is also held to about this many bytes (entries grow under load). */
  logKeepBytes: 8 * 1024 * 1024,
  /** The state file's write batch commits at least this often (etcd's backend batch interval; src/store/state-batch.ts). */
  stateBatchIntervalMs: 100,
  /** ... or once this many entries were applied into it (etcd's batch limit). */
  stateBatchEntriesMax: 10_000,
  /** How long close() lets in-flight callbacks finish before aborting them. */
  closeGraceMs: 5_000,
  /** Open executions read per query when the node (re)starts firing. */
  openExecutionsPageMax: 10_000,
  /** Below this distance to a deadline the firing engine spins on setImmediate instead of a timer (timers fire ~1 ms early/late). */
  firingSpinMs: 1,
  /** Callbacks due now handed to the network per turn of the firing loop: the first of a hot instant are written
   * (their connections opened, their bytes out) before the rest are prepared, instead of after all of a batch. */
  firingSendChunkMax: 20,
  /**
   * Ops the firing thread takes from the main side's batches per turn of its loop: a hot instant's hand-over
   * (thousands of orders, some arriving after their due ms) is taken in turns between which the thread's sends
   * are written, instead of all of it first.
   */
  firingThreadOpsPerTurnMax: 64,
  /** Staged requests built (head, signature) per turn of the firing loop: a hot instant staged at once is built
   * between other work, and its first due ones are not held behind the building of the rest. */
  firingPrepareChunkMax: 64,
  /** The longest the node sleeps on a wall-clock deadline: its timer runs on the monotonic clock, so a step of
   * the wall clock forward (NTP) is seen at the latest this much later rather than once the old wait ran out. */
  wallClockRecheckMs: 1_000,
  /** Stored rows examined per page of GET /v1/jobs?state=QUEUED|RUNNING|PENDING (overlay states are filtered in memory). */
  listScanRowsMax: 10_000,
  /** --fsync batch: how often the checkpointer thread copies the WAL into the database file (off the event loop). */
  walCheckpointIntervalMs: 100,
  /** --fsync batch: past this WAL file size a TRUNCATE checkpoint follows the checkpointer thread's PASSIVE one. */
  walBytesSoftMax: 64 * 1024 * 1024,
  /** --fsync batch: PASSIVE checkpoints the thread runs again at once while one leaves frames (so the WAL can rewind). */
  walCheckpointCatchUpMax: 4,
  /** Past this WAL file size the node warns (and punctual_wal_bytes shows it): a reader keeps checkpoints from ending. */
  walBytesHardMax: 256 * 1024 * 1024,
  /** A TRUNCATE checkpoint (run on the event loop, between transactions) waits at most this long for readers. */
  walTruncateBusyMs: 10,
  /** After a TRUNCATE checkpoint that readers kept from ending, the next one waits this long (PASSIVE ones go on). */
  walTruncateRetryMs: 1_000,
  /** Every mode: when SQLite rewinds the WAL to its beginning, it truncates the file back to this size (journal_size_limit). */
  walJournalSizeLimitBytes: 16 * 1024 * 1024,
  /** Every this many loader runs, the loader rescans everything due within the horizon, not just the new window. */
  loaderFullScanEveryRuns: 12,
  /** The newest entries of each shard's Raft log kept in memory as appended, so the applier and the leader's
   * appends to followers read them without SQLite: at most this many ... */
  logTailEntriesMax: 2_048,
  /** ... and about this many bytes of entry data. */
  logTailBytesMax: 4 * 1024 * 1024,
  /** raft_log (one table for every group's log, src/store/log-table.ts): a group whose oldest rows keep more than
   * this many dead rows of other groups from being freed has its live rows moved to the tail. */
  logDeadRowsMax: 50_000,
  /** Page size of raft-log.db: a round appends small rows of many groups at the tail, so small pages write less. */
  logPageBytes: 1024,
  /** Committed entries a start applies at open (src/node/replay.ts), in one transaction; the applier takes the
   * rest. A kill -9 under load leaves hundreds (the batch interval's and the applier's backlog). */
  startReplayEntriesMax: 200_000,
  /** ... read from the log this many bytes of entry data at a time. */
  startReplayReadBytesMax: 4 * 1024 * 1024,
} as const;
assert(nodeLimits.logCompactEveryEntries <= nodeLimits.logKeepEntries, 'compaction interval exceeds kept entries');
assert(nodeLimits.listScanRowsMax >= limits.listLimitMax, 'list scan bound below a page');
assert(nodeLimits.walBytesSoftMax < nodeLimits.walBytesHardMax, 'WAL soft limit not below its hard limit');

// --- src/scheduler (the replicated state machine)
export const schedulerLimits = {
  /** Parsed cron expressions kept per process (an LRU keyed by expression and zone): parsing is costly. */
  cronCacheEntriesMax: 4_096,
  /** Occurrences previewed or scanned per call never exceed this (preview count is clamped to it). */
  occurrencesPerCallMax: 10_000,
  /**
   * Occurrences a patched schedule skips because they already have an execution (the patch was stamped before
   * they fired): a handful at most, as many as fired between the patch's stamp and its apply.
   */
  patchFiredSkipsMax: 100,
  /** Run keys a job remembers (its latest keyed runs), so a repeated `run` answers the first instead of running again. */
  runKeysPerJobMax: 16,
  /** A run key: `client:` or `node:` and the client's Idempotency-Key or a UUID. */
  runKeyLengthMax: 300,
  /**
   * Search steps (src/scheduler/schedule.ts: a month the cron excludes = 1, a month it includes = its days) for
   * one next occurrence: 25 years of a February-only date (40 steps a year). A cron whose next match is further
   * away has no next. A step costs cron-parser up to ~100 µs with a time zone.
   */
  cronSearchStepsMax: 1_000,
  /**
   * Search steps for a whole preview (and a fire_all replay): what bounds its CPU time (under a second). Every
   * search also costs cronSearchBaseSteps, for cron-parser's work per call.
   */
  cronPreviewStepsMax: 10_000,
  cronSearchBaseSteps: 2,
  /**
   * Excluded stretches (src/scheduler/calendar.ts) one next occurrence may jump over: an occurrence further away
   * counts as none (the schedule ends there, on every replica alike). A preview shares this many for all of its
   * occurrences.
   */
  calendarJumpsMax: 1_000,
  /** Attempts one execution's history keeps (its latest; the execution's started_at stays the first's). */
  attemptsPerExecutionMax: 100,
  /** Executions one `retention` command deletes at most (jobs' and trimmed ones together): one apply stays short. */
  retentionExecutionsMax: 1_000,
} as const;
assert(schedulerLimits.cronCacheEntriesMax >= 1, 'cron cache must hold at least one entry');
assert(schedulerLimits.runKeysPerJobMax >= 1, 'a job must remember at least its latest run key');
assert(schedulerLimits.cronSearchStepsMax <= schedulerLimits.cronPreviewStepsMax, 'one cron search exceeds the preview bound');
assert(limits.previewCountMax <= schedulerLimits.occurrencesPerCallMax, 'preview max exceeds the per-call bound');
assert(limits.misfireFireAllMax < schedulerLimits.occurrencesPerCallMax, 'fire_all cap exceeds the per-call bound');

// --- src/http (the client API server)
export const httpLimits = {
  /** Idempotency-Key header length. */
  idempotencyKeyLengthMax: 255,
  cronExpressionLengthMax: 256,
  timezoneLengthMax: 64,
  listCursorLengthMax: 1024,
  /** An idle keep-alive connection is closed after this long. */
  keepAliveTimeoutMs: 65_000,
  /** A client must send its request headers within this long (HTTP/1.1; slowloris guard). */
  headersTimeoutMs: 30_000,
  /** A whole request (headers and body) must arrive within this long (HTTP/1.1). */
  requestTimeoutMs: 5 * 60 * 1000,
  /** A new connection must send its first bytes (an HTTP/1.1 request or the HTTP/2 preface) within this long. */
  sniffTimeoutMs: 10_000,
  /** close(): how long in-flight requests may take to finish before their connections are destroyed. */
  closeGraceMs: 10_000,
  /** After a 413, bytes of the rejected body read and discarded (never buffered) before the connection is cut. */
  drainBytesMax: 64 * 1024 * 1024,
  /** An HTTP/2 stream whose request body is incomplete is reset after this long without a frame. */
  streamIdleTimeoutMs: 30_000,
  /** After refusing an HTTP/1.1 request unread (401, 403, 404, 405), how long its connection lingers half-closed. */
  refusedLingerMs: 2_000,
  /** Concurrent streams a client may open on one HTTP/2 connection (SETTINGS_MAX_CONCURRENT_STREAMS). */
  h2StreamsMax: 1_000,
  /** Instants whose rendered time (ISO 8601) is kept for the next view that shows them (src/http/time.ts). */
  renderedTimesMax: 4,
} as const;
assert(httpLimits.headersTimeoutMs < httpLimits.requestTimeoutMs, 'http headers timeout must be below the request timeout');
assert(schedulerLimits.runKeyLengthMax >= httpLimits.idempotencyKeyLengthMax + 'client:'.length, 'a run key must hold any Idempotency-Key');

// --- src/http/peer (the Raft transport over HTTP/2)
export const peerLimits = {
  /** Raft messages queued for one peer; past this (or the byte bound) new ones are dropped and counted. */
  queueMessagesMax: 20_000,
  /** Estimated bytes of the messages queued for one peer. */
  queueBytesMax: 64 * 1024 * 1024,
  /** Bytes taken from a peer's queue into one batch frame (one HTTP/2 request); a lone bigger message goes alone. */
  batchBytesMax: 4 * 1024 * 1024,
  /** Batch requests in flight per peer; more messages wait in the queue and coalesce into the next batch. */
  batchesInFlightMax: 2,
  /** Largest frame accepted (a message batch, a request or response body, a snapshot header). */
  frameBytesMax: 16 * 1024 * 1024,
  /** Largest snapshot accepted (the receiver holds it whole in memory before installing it). */
  snapshotBytesMax: 512 * 1024 * 1024,
  /** A snapshot is written to its stream in chunks of this many bytes (each waits for the stream to drain). */
  snapshotChunkBytes: 256 * 1024,
  /** A snapshot must be sent and installed within this long, or the sender reports it failed. */
  snapshotTimeoutMs: 120_000,
  /** A batch request not answered within this long means the session is stuck: it is torn down. */
  batchTimeoutMs: 10_000,
  /** A new session must connect within this long. */
  connectTimeoutMs: 2_000,
  /** Reconnect backoff: doubles from min to max after each failed attempt, reset on success. */
  reconnectBackoffMsMin: 50,
  reconnectBackoffMsMax: 2_000,
  /** A peer is reachable while connected and heard from (a response or a request) within this long. */
  reachableMs: 3_000,
  /** Refused peer requests (bad secret, stranger, bad frame) are logged at most once per this long per address. */
  refusalLogIntervalMs: 10_000,
  /** close(): how long open streams may take to finish before sessions are destroyed. */
  closeGraceMs: 1_000,
  /** HTTP/2 flow-control window per stream and per session, so a batch is not split into window-sized waits. */
  windowBytes: 16 * 1024 * 1024,
  /** Raft messages one batch frame may hold (a bigger count is a bad frame, refused before Raft sees any). */
  messagesPerFrameMax: 200_000,
  /** Characters of a ReadIndex context string in a peer message (the host's are a few characters). */
  readCtxCharsMax: 256,
  /** Node ids in a snapshot's voters or learners list. */
  confMembersMax: 64,
  /** Bytes of a snapshot stream's header (the message and its membership; the data follows). */
  snapshotHeaderBytesMax: 64 * 1024,
  /**
   * A peer session must prove the cluster secret (peer handshake) within this long after it connects, else it is
   * closed; a connection that never authenticates cannot hold a socket for long.
   */
  handshakeTimeoutMs: 5_000,
} as const;
assert(peerLimits.batchBytesMax * 2 <= peerLimits.frameBytesMax, 'peer batch (estimated) must leave a margin under the frame limit');
assert(peerLimits.batchBytesMax <= peerLimits.queueBytesMax, 'peer batch exceeds the queue bound');
assert(peerLimits.snapshotChunkBytes <= peerLimits.snapshotBytesMax, 'snapshot chunk exceeds the snapshot limit');
assert(peerLimits.reconnectBackoffMsMin <= peerLimits.reconnectBackoffMsMax, 'peer backoff bounds inverted');
assert(peerLimits.connectTimeoutMs < peerLimits.reachableMs, 'a connect attempt outlasts reachability');

// --- src/node (the cluster host: one Raft group per shard)
export const clusterLimits = {
  /** One Raft tick of every group on the node (one host interval for all groups). */
  tickMs: 50,
  /** Followers campaign after [electionTicks, 2 x electionTicks) ticks without a leader: 500 to 1000 ms. */
  electionTicks: 10,
  /** Leaders send a heartbeat round every this many ticks (it also renews the lease). */
  heartbeatTicks: 2,
  /** A leader's lease (for firing and reads) lasts this many ticks from a quorum-acknowledged heartbeat round. */
  leaseTicks: 8,
  /**
   * Ticks run at once after a stall (the host ticks by monotonic time elapsed): enough to expire any lease and
   * let CheckQuorum depose a leader that was frozen, bounded so a long freeze costs little work.
   */
  catchUpTicksMax: 40,
  /** Append messages in flight per follower per group. */
  maxInflightMsgs: 256,
  /** Entry bytes in flight per follower per group. */
  maxInflightBytes: 32 * 1024 * 1024,
  /** Soft limit on the entry bytes of one append message. */
  maxMsgBytes: 4 * 1024 * 1024,
  /** A proposal not applied within this long is answered 503 (it may still apply: retry with the same id). */
  proposalTimeoutMs: 10_000,
  /** A forwarded API call waits at most this long for the shard leader's answer. */
  forwardTimeoutMs: 15_000,
  /** How long a call waits for a shard to have a known leader before answering 503. */
  leaderWaitMs: 2_000,
  /** Seconds a client is told to wait (Retry-After) when no leader is known. */
  retryAfterS: 1,
  /** A linearizable read that cannot use the lease waits at most this long for its ReadIndex round. */
  readIndexTimeoutMs: 2_000,
  /**
   * Right after a start, a node waits this many more ticks before campaigning in a group it is not the preferred
   * leader of, so the preferred node (when up) wins the first election and leaderships are spread from the start.
   * Only that first election is later when the preferred node is down (by 4 election timeouts, 2 s); the
   * preferred node wins when it starts up to 1.5 s after the others.
   */
  bootCampaignDelayTicks: 40,
  /** How often each node checks whether to hand a shard it leads to that shard's preferred leader. */
  rebalanceIntervalMs: 3_000,
  /** Leadership transfers one node starts per rebalance round. */
  rebalanceTransfersMax: 2,
  /** Peers' API addresses are asked again after this long (GET /v1/cluster). */
  peerInfoTtlMs: 5_000,
  /**
   * A planned leadership transfer first drains the shard (its callbacks in flight end and are recorded) for at most
   * this long, then hands over anyway: a receiver that holds a callback must not hold the transfer.
   */
  transferDrainMaxMs: 1_000,
  /** How often the transfer looks whether the shard is drained. */
  transferDrainPollMs: 2,
  /** A shard this node still leads this long after it asked for the transfer was not handed over: it fires again. */
  transferUndrainAfterMs: 1_000,
} as const;
assert(clusterLimits.leaseTicks < clusterLimits.electionTicks, 'the lease must end before a follower may campaign');
assert(
  clusterLimits.transferUndrainAfterMs >= clusterLimits.tickMs * clusterLimits.electionTicks,
  'a transfer Raft may still carry out (within an election timeout) must not find its shard firing again',
);
assert(
  limits.firingLeaseRefreshMs < clusterLimits.tickMs * (clusterLimits.leaseTicks - clusterLimits.heartbeatTicks),
  'the firing thread gets a renewed lease deadline before the one it holds ends',
);
assert(clusterLimits.heartbeatTicks < clusterLimits.leaseTicks, 'heartbeats must renew the lease before it ends');
assert(clusterLimits.catchUpTicksMax > clusterLimits.electionTicks, 'a catch-up must be able to expire a lease');
assert(clusterLimits.maxMsgBytes * 2 <= peerLimits.frameBytesMax, 'an append message must fit in a peer frame');

// --- src/node (stalls: bounded work per event-loop turn, so timers, Raft ticks and heartbeats keep running)
export const stallLimits = {
  /** Committed entries are applied in transactions of at most this long (then the loop runs, then the next). */
  applySliceMs: 5,
  /** ... and of at most this many entries. */
  applySliceEntriesMax: 256,
  /**
   * A slice ends early for a callback due within the firing spin window, once it ran this long: at a steady rate one
   * is always that close, and slices of one entry each cost a commit (its pages written to the WAL) per entry.
   */
  applySliceFireDueMs: 0.5,
  /**
   * Until a node that starts is ready, a slice applying while a shard it leads catches up runs up to this long and
   * does not end early for a due callback (src/node/raft-host.ts catchingUpAtStart): the catch-up of every shard is
   * a few entries each after the start's replay, and readiness waits for the last one.
   */
  applyStartSliceMs: 50,
  /** A round's committed entries up to this many bytes are applied in the round's own transaction (no slicing). */
  inlineApplyBytesMax: 16 * 1024,
  /** Concurrent create_jobs proposals of one shard are merged into one entry up to this many jobs. */
  mergedCreateJobsMax: 256,
  /** Engine items (fired, skipped, outcomes) per command: one entry's apply stays near applySliceMs. */
  engineItemsPerCommandMax: 256,
  /** Due occurrences the firing engine fires per macrotask before letting the loop run. */
  fireBatchMax: 256,
  /**
   * How long the engine's own records (fired, skipped, outcomes) wait for company before they are proposed. They
   * delay no callback, and fewer, larger commits leave more CPU for firing (bench/NOTES.md, "A job at a steady rate").
   */
  engineItemsDelayMs: 10,
  /**
   * The fired item of a one-off job's first attempt waits up to this long for its outcome (then both become one
   * record: src/node/proposer.ts, folding). A fired item only makes the RUNNING execution durable; without it a
   * restart or a new leader fires the occurrence again anyway (same deduplication key), so holding it loses
   * nothing. It saves a record per callback when the receiver is slower than engineItemsDelayMs (a hot instant),
   * and under load the outcome comes seconds after the start: a short hold let most of them go as two records.
   */
  firedHoldMs: 5_000,
  /** After a stall, a group this node does not lead counts at most this many of the missed Raft ticks. */
  followerCatchUpTicksMax: 2,
} as const;
assert(stallLimits.applySliceMs <= stallLimits.applyStartSliceMs, 'a start slice is the longer one');

// --- src/node/membership.ts (online membership: punctual cluster add-node / remove-node)
export const membershipLimits = {
  /** A new learner must reach its shard leader's commit index within this long, or add-node fails (504). */
  catchUpTimeoutMs: 30_000,
  /** One conf change (add learner, promote, remove, or moving leadership away first) must apply within this long. */
  confChangeTimeoutMs: 10_000,
  /** Every node pushes its member book to each reachable peer that has not acknowledged its latest version. */
  syncIntervalMs: 1_000,
  /** A membership request to a peer waits this long beyond the work it asks for (network, queueing). */
  requestMarginMs: 2_000,
  /** Pause between two attempts to reach a shard's leader while it moves or is elected. */
  retryDelayMs: 50,
} as const;
assert(
  membershipLimits.catchUpTimeoutMs + 2 * membershipLimits.confChangeTimeoutMs + membershipLimits.requestMarginMs < cliLimits.requestTimeoutMs,
  'an add-node must end (or fail) before the CLI gives up on its request',
);

// --- src/node: the three-node cluster as a user meets it
export const clusterAuditLimits = {
  /**
   * Entry bytes of one Raft append message as the host configures its groups (clusterLimits.maxMsgBytes is the
   * transport-level ceiling). Entries are small, so a large cap lets a probing follower be re-sent tens of
   * thousands of entries on every heartbeat answer, costing the leader its loop and memory; a lone bigger entry
   * (a batch) still goes alone, and replicate state pipelines clusterLimits.maxInflightMsgs of them.
   */
  appendBytesMax: 64 * 1024,
  /** /readyz: a shard with more committed entries than this not yet applied is "catching up". */
  readyLagEntriesMax: 1_000,
  /** /readyz: ... or one whose entries committed when the lag was first seen are still not applied after this. */
  readyLagMs: 1_000,
} as const;
assert(clusterAuditLimits.appendBytesMax <= clusterLimits.maxMsgBytes, 'the host append limit exceeds the transport ceiling');

// --- back-pressure: every in-memory queue of the node has a limit (src/node/README.md, "Back-pressure")
export const queueLimits = {
  /** Client proposals waiting for the proposer's next flush; past this a write is refused 429. */
  proposerCommandsMax: 50_000,
  /**
   * Engine records (fired, skipped, outcomes, held fired items) waiting for the next flush; past this the engine
   * fires nothing new (due occurrences wait, armed) until a flush took them. Outcomes of callbacks already in
   * flight are always taken, so the count may pass the limit by what is in flight.
   */
  proposerEngineItemsMax: 100_000,
  /** Committed entries waiting for the applier; past this client writes are refused 429 (the entries all apply). */
  applyQueueEntriesMax: 100_000,
  /** Due occurrences taken from the wheel and not looked at yet; the rest stay in the wheel, due. */
  dueBacklogMax: 50_000,
  /** Callbacks waiting in the dispatcher's concurrency queues; past this the engine fires nothing new. */
  dispatchQueuedMax: 100_000,
  /** Timers the wheel holds at most (its entry pool stops growing here). */
  wheelEntriesMax: 2 * 1024 * 1024,
  /**
   * The loader fills the wheel only up to this many timers (the rest stay in SQLite until there is room), and a
   * client `run` is refused 429 above it; the headroom up to wheelEntriesMax is for retries and runs already accepted.
   */
  wheelLoadedMax: 1_000_000,
  /**
   * An attempt armed by an applied command keeps that command's job record (its fire then need not read it back)
   * only while the wheel holds fewer timers than this, and only when the job's inline payload is at most
   * armedRecordPayloadBytesMax; else its fire reads the store. A record held costs about 1.1 KiB of heap plus its
   * payload, so the records the wheel keeps alive stay within about 220 MiB.
   */
  armedRecordsHeldMax: 100_000,
  armedRecordPayloadBytesMax: 1024,
  /** The firing side, held back by a full queue, looks again this much later. */
  holdBackRetryMs: 5,
  /** Seconds a client is told to wait (Retry-After) after a 429. */
  retryAfterS: 1,
} as const;
assert(queueLimits.proposerCommandsMax >= limits.commitBatchCommandsMax, 'the proposer queue must hold a whole group commit');
assert(queueLimits.proposerEngineItemsMax >= stallLimits.engineItemsPerCommandMax, 'engine items must fill at least one command');
assert(queueLimits.applyQueueEntriesMax >= stallLimits.applySliceEntriesMax, 'the apply queue must hold a whole slice');
assert(
  nodeLimits.startReplayEntriesMax >= queueLimits.applyQueueEntriesMax + nodeLimits.stateBatchEntriesMax,
  'a start must replay at open what a kill can leave unapplied (the apply queue and an open batch)',
);
assert(queueLimits.dueBacklogMax >= stallLimits.fireBatchMax, 'the due backlog must hold a whole fire batch');
assert(queueLimits.wheelLoadedMax < queueLimits.wheelEntriesMax, 'the loader limit must leave headroom in the wheel');
assert(
  queueLimits.wheelEntriesMax - queueLimits.wheelLoadedMax >= limits.dispatchInFlightMax + queueLimits.dispatchQueuedMax + queueLimits.proposerCommandsMax,
  'wheel headroom must hold a retry of every callback in flight or queued, and the runs already accepted',
);
assert(queueLimits.wheelLoadedMax >= limits.loaderBatchMax, 'a loader page must fit under the loader limit');

// --- integrity: quarantined log entries and a full disk (src/store/quarantine.ts, src/node/raft-host.ts)
export const quarantineLimits = {
  /** A quarantined entry keeps at most this many of its bytes in raft_quarantine (its SHA-256 covers all). */
  keepBytesMax: 64 * 1024,
  /** ... and at most this much of its error text. */
  errorLengthMax: 1024,
  /** Quarantined entries listed at once (GET /v1/cluster, logs). */
  listMax: 100,
  /** While the disk is full, a Ready round that could not be written is retried this often. */
  diskFullRetryMs: 500,
  /** Writes are answered 507 with this Retry-After (seconds) while the disk is full. */
  diskFullRetryAfterS: 5,
} as const;

// --- data retention and dead letters (src/node/retention.ts, src/node/service.ts; docs/api.md "Retention")
export const retentionLimits = {
  /** `serve --retention` default: finished jobs and their executions are kept this long. */
  retentionMsDefault: 7 * 24 * 60 * 60 * 1000,
  /** `serve --retention-executions` default: a job keeps its newest this many executions. */
  executionsKeepDefault: 100,
  executionsKeepMax: 1_000_000,
  /** How often the leader's driver looks for expired rows in each shard it leads, when the last pass found none. */
  intervalMs: 1_000,
  /** The pause between two batches while a backlog is being deleted (firing and proposals run in between). */
  batchPauseMs: 20,
  /** Finished jobs one `retention` command deletes at most. */
  jobsPerCommandMax: 256,
  /**
   * Jobs one driver pass checks, per shard, for executions beyond the kept count (a sweep over every job, in id
   * order): one synchronous slice of index probes, kept to about a millisecond so a due fire is hardly delayed.
   */
  trimScanJobsMax: 200,
  /** Jobs one `retention` command trims at most. */
  trimJobsPerCommandMax: 64,
  /** Dead letters one POST /v1/dead-letters:replay replays at most (matched ones beyond it stay listed). */
  replayJobsMax: 1_000,
  /** Dead-letter groups (task, error class) GET /v1/dead-letters:groups lists at most. */
  groupsMax: 1_000,
} as const;
assert(retentionLimits.jobsPerCommandMax <= schedulerLimits.retentionExecutionsMax, 'a retention command must fit an execution of each of its jobs');
assert(retentionLimits.trimJobsPerCommandMax <= retentionLimits.trimScanJobsMax, 'trims come from one scan');

// --- the manual clock (`punctual serve --clock manual`, POST /v1/clock:advance; docs/api.md "The clock")
export const clockLimits = {
  /** The largest `by_ms` of one advance (and the farthest `to` ahead of the node's now): 10 years. */
  advanceByMsMax: 10 * 366 * 24 * 60 * 60 * 1000,
  /**
   * Callback attempts one advance sends at most: past it the advance stops at the last instant it completed and
   * answers `complete: false` (call again to go on), so one request never holds the node for minutes.
   */
  advanceAttemptsMax: 10_000,
  /** Real time one advance may take: past it, it stops the same way after the instant it is on. */
  advanceRealMsMax: 30_000,
} as const;

// --- data lifecycle: job search, payloads by reference, online backups (docs/api.md "Limits")
export const searchLimits = {
  /** `metadata.KEY=VALUE` filters in one GET /v1/jobs (they combine with AND). */
  metadataFiltersMax: 4,
  /** A metadata key longer than this (UTF-8) is not indexed, and a filter on it is refused. */
  metadataKeyBytesMax: 128,
  /** A metadata value longer than this (UTF-8, as indexed) is not indexed, and a filter on it is refused. */
  metadataValueBytesMax: 256,
} as const;
assert(searchLimits.metadataKeyBytesMax + searchLimits.metadataValueBytesMax <= limits.metadataBytesMax, 'an indexed pair must fit in metadata');

export const payloadRefLimits = {
  /** Default of `serve --payload-ref-max-bytes`: a referenced body larger than this fails its attempt. */
  bytesMaxDefault: 16 * 1024 * 1024,
  /** The flag's ceiling: the whole body is held in memory while its callback is sent. */
  bytesMaxCeiling: 256 * 1024 * 1024,
  /** One fetch of a referenced payload (connect, headers and body). */
  fetchTimeoutMs: 10_000,
  /** Referenced payloads with a sha256 kept in memory for the next jobs that share them (url + sha256 as key). */
  cacheEntriesMax: 64,
  cacheBytesMax: 64 * 1024 * 1024,
  /** Connections per origin of the payload fetcher (its own pool, apart from the callbacks'). */
  connectionsPerOriginMax: 16,
} as const;
assert(payloadRefLimits.bytesMaxDefault <= payloadRefLimits.bytesMaxCeiling, 'payload ref default above its ceiling');

export const backupLimits = {
  /** Database pages copied per step of an online backup; the event loop runs between steps. */
  pagesPerStep: 128,
  /** A backup still copying after this long is abandoned (writes kept restarting it, or the disk is slow). */
  durationMsMax: 30 * 60 * 1000,
  /** Backups one node takes at once; another request meanwhile is refused 409. */
  concurrentMax: 1,
} as const;
assert(backupLimits.pagesPerStep >= 1, 'a backup step must copy at least one page');
// --- the dashboard's overview (GET /v1/overview, src/metrics/history.ts)
export const overviewLimits = {
  /** Callback counts are kept per interval of this length... */
  historyIntervalMs: 10_000,
  /** ... for this many intervals (one hour): the ring buffer never grows past it. */
  historyIntervalsMax: 360,
} as const;
assert(overviewLimits.historyIntervalMs * overviewLimits.historyIntervalsMax === 60 * 60 * 1000, 'the overview history must cover one hour');

// --- src/placement (the placement driver: which nodes hold which shard groups; not yet wired into the node)
export const placementLimits = {
  /** Slots a new cluster's job space is cut into at least (a legacy --shards count rounds it up: src/placement/slots.ts). */
  slotsMin: 4_096,
  /** Replicas of each group (voters); 5 is the other supported setting. */
  replicationFactorDefault: 3,
  /** Replicas one node may hold: Kudu's recommended tablets per server; a split past it is refused. */
  replicasPerNodeMax: 1_000,
  // liveness (CockroachDB store liveness: one heartbeat per node pair, never per group)
  /** Every node heartbeats each peer it owes support to this often. */
  livenessHeartbeatMs: 100,
  /** Support given by one heartbeat lasts this long; a leader's lease is its quorum's support. */
  livenessSupportMs: 500,
  /** A node unheard of for this long is suspect: no new replicas or leaderships go to it. */
  suspectAfterMs: 3_000,
  /** A node unheard of for this long is dead: its replicas are re-created elsewhere (CockroachDB's 5 min). */
  deadAfterMs: 5 * 60 * 1000,
  // replica balance (CockroachDB's range_rebalance_threshold and its minimum of 2 replicas)
  /** A node is overfull when above its share by more than this fraction... */
  rebalanceThresholdFraction: 0.05,
  /** ...and by at least this many replicas (both must hold; underfull is the mirror image). */
  rebalanceThresholdReplicasMin: 2,
  // throttles and anti-thrash (PD's store limit 15/min; CockroachDB's 1 lease transfer/s, PD's batch of 4)
  /** Replicas added to one node per minute (each is a snapshot into it), repairs included. */
  addsPerNodePerMinuteMax: 15,
  /** Replicas removed from one live node per minute. */
  removesPerNodePerMinuteMax: 15,
  /** Snapshots into one node at once, and out of one node (a group leader sends them) at once. */
  snapshotsPerNodeMax: 2,
  /** Leaderships one node hands away per second, repairs (drain, decommission) included. */
  leaderTransfersPerNodePerSecondMax: 4,
  /** Operators in flight in the whole cluster: this fraction of the groups, and at least operatorsInFlightMin. */
  operatorsInFlightFraction: 0.05,
  operatorsInFlightMin: 8,
  /** A group moved by a rebalance (replica or split) is left alone this long after (repairs do not wait). */
  groupCooldownMs: 15_000,
  /** A group whose leadership moved is not moved again by leader balance for this long. */
  leaderCooldownMs: 10_000,
  /**
   * A rebalance never removes a replica added to that node within this window, nor adds one removed from it within
   * it (a reversed move, issue 24's target: 0 within 1 h). CockroachDB's newReplicaGracePeriod is 5 min.
   */
  reversalWindowMs: 60 * 60 * 1000,
  // operator steps: timeouts (executed elsewhere; a step past its timeout fails its operator)
  /** A conf change (add learner, promote, remove) or a split must apply within this long. */
  confChangeTimeoutMs: 10_000,
  /** A leadership transfer (drain at most 1 s, then the election) must be done within this long. */
  transferTimeoutMs: 5_000,
  /** Snapshot rate assumed for a learner's timeout (CockroachDB's kv.snapshot_rebalance.max_rate). */
  snapshotBytesPerS: 32 * 1024 * 1024,
  /** A learner's catch-up may take this many times its snapshot's time at snapshotBytesPerS, plus confChangeTimeoutMs. */
  snapshotTimeoutFactor: 3,
  // splits (TiKV's load split: sustained 10 s; a size cap; no merges in v1)
  /** A group above this many bytes is split in two. */
  splitSizeBytes: 256 * 1024 * 1024,
  /** A group firing above this rate for splitLoadSustainMs is split in two. */
  splitFiresPerS: 2_000,
  splitLoadSustainMs: 10_000,
  /** Splits in flight at once (each rewrites the group's rows on every replica). */
  splitsInFlightMax: 4,
} as const;
assert(placementLimits.suspectAfterMs > placementLimits.livenessSupportMs, 'a node is suspect only after its support lapsed');
assert(placementLimits.livenessHeartbeatMs * 2 < placementLimits.livenessSupportMs, 'support must outlive two heartbeats');
assert(placementLimits.deadAfterMs > placementLimits.suspectAfterMs, 'a node is dead only after it was suspect');
assert(placementLimits.reversalWindowMs >= placementLimits.groupCooldownMs, 'the reversal window covers the cooldown');
assert((placementLimits.slotsMin & (placementLimits.slotsMin - 1)) === 0, 'slotsMin must be a power of two');
assert(placementLimits.slotsMin >= cliLimits.shardsMax, 'every legacy shard must own at least one slot');
assert(placementLimits.replicationFactorDefault % 2 === 1, 'an even replication factor adds no failure tolerance');
