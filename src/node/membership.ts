/**
 * Membership: online cluster membership (`punctual cluster add-node` / `remove-node`) over the per-shard Raft
 * groups, and the member book (who the members are and their peer addresses) that every node keeps in SQLite.
 *
 * Add (etcd's learner-first recipe, per shard group, one conf change at a time per group, groups in parallel):
 * record the new node's address in the book and push it to every member; then, for every shard, the shard's
 * leader adds the node as a learner, waits until its match reaches the leader's commit index (it catches up by
 * snapshot), and promotes it to voter. The node that received the request coordinates: it asks each shard's
 * leader (itself or a peer, `request(leader, 'membership', ...)`) to do its shard and retries against a new
 * leader when leadership moves. An interrupted add leaves the node a learner in some groups: the same command
 * resumes it (or remove-node undoes it).
 * Remove: for every shard, the leader removes the node; when the node itself leads the shard it first hands
 * leadership to the most caught-up other voter. Then the book marks it removed and every member closes its link
 * and refuses it. A group never goes below one voter.
 *
 * The book: one row per node id ever known, `{id, host, port, removed, version}`; when two books disagree the
 * higher version wins. Nodes push their book to each reachable peer that has not acknowledged its latest
 * version (every membershipLimits.syncIntervalMs), so a member that was down during a change learns it when it
 * is back. --peers seeds an empty book at first start; afterwards the book wins (differences are logged).
 */
import { formatHostPort, parseHostPort, parseNodeId, type HostPort } from '../core/addr.js';
import { PunctualError, invalid } from '../core/errors.js';
import { nodeIdPattern } from '../core/ids.js';
import { membershipLimits } from '../core/limits.js';
import type { Clock } from '../core/clock.js';
import type { Logger } from '../core/log.js';
import { PeerTimeoutError, PeerUnavailableError } from '../http/peer/index.js';
import type { ConfState, NodeId } from '../raft/index.js';
import type { Db } from '../store/db.js';
import type { ShardGroup } from './group.js';
import { notLeader, type RaftHost } from './raft-host.js';
import { decodeWire, encodeWire, fromWireError, toWireError, type WireError } from './router.js';

export interface PeerAddress {
  id: string;
  host: string;
  port: number;
}

export interface MemberEntry extends PeerAddress {
  removed: boolean;
  /** When two books disagree about an id, the higher version wins. */
  version: number;
}

/** The part of PeerTransport membership uses. */
export interface MemberTransport {
  addPeer(p: PeerAddress): boolean;
  removePeer(id: string): Promise<boolean>;
  reachable(peerId: string): boolean;
  request(to: string, kind: string, body: Uint8Array, timeoutMs: number): Promise<Uint8Array>;
}

export interface ShardMembers {
  id: number;
  voters: string[];
  learners: string[];
}

/** What add-node and remove-node answer: the node and the membership of every shard afterwards. */
export interface MembershipResult {
  id: string;
  peerAddr: string;
  shards: ShardMembers[];
}

export const membershipKind = 'membership';

type Goal = 'voter' | 'removed';

type MemberOp =
  | { op: 'book'; entries: MemberEntry[] }
  | { op: 'step'; shard: number; node: string; goal: Goal; peer: MemberEntry | null; budgetMs: number };

type Answer = { ok: true; value: unknown } | { ok: false; error: WireError };

// --- the book ---------------------------------------------------------------------------------------------

export class MemberBook {
  /**
   * `written`: called after each write of the book (the node commits its state batch there, so a change learned
   * from a peer survives a kill -9 as before the state was written in batches).
   */
  constructor(
    private readonly db: Db,
    private readonly written: () => void = () => undefined,
  ) {
    db.exec(
      'CREATE TABLE IF NOT EXISTS cluster_members (id TEXT PRIMARY KEY, host TEXT NOT NULL, port INTEGER NOT NULL, removed INTEGER NOT NULL, version INTEGER NOT NULL)',
    );
  }

  all(): MemberEntry[] {
    const rows = this.db.prepare('SELECT id, host, port, removed, version FROM cluster_members ORDER BY id').all() as Array<
      Omit<MemberEntry, 'removed'> & { removed: number }
    >;
    return rows.map((r) => ({ id: r.id, host: r.host, port: r.port, removed: r.removed === 1, version: r.version }));
  }

  get(id: string): MemberEntry | null {
    return this.all().find((e) => e.id === id) ?? null;
  }

  version(): number {
    return this.all().reduce((v, e) => Math.max(v, e.version), 0);
  }

  /** Takes every entry newer than ours (or unknown to us); returns the ones taken. */
  merge(entries: readonly MemberEntry[]): MemberEntry[] {
    const mine = new Map(this.all().map((e) => [e.id, e]));
    const taken = entries.filter((e) => {
      const m = mine.get(e.id);
      return validEntry(e) && (m === undefined || e.version > m.version);
    });
    const upsert = this.db.prepare(
      'INSERT INTO cluster_members (id, host, port, removed, version) VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET host = excluded.host, port = excluded.port, removed = excluded.removed, version = excluded.version',
    );
    if (taken.length === 0) return taken;
    this.db.transaction(() => {
      for (const e of taken) upsert.run(e.id, e.host, e.port, e.removed ? 1 : 0, e.version);
    })();
    this.written();
    return taken;
  }

  /** The members other than `selfId` that are not removed. */
  live(selfId: string): PeerAddress[] {
    return this.all()
      .filter((e) => !e.removed && e.id !== selfId)
      .map((e) => ({ id: e.id, host: e.host, port: e.port }));
  }
}

function validEntry(e: MemberEntry): boolean {
  return (
    typeof e === 'object' && e !== null && typeof e.id === 'string' && nodeIdPattern.test(e.id) && typeof e.host === 'string' &&
    e.host.length > 0 && Number.isInteger(e.port) && e.port > 0 && e.port <= 65535 && typeof e.removed === 'boolean' &&
    Number.isSafeInteger(e.version)
  );
}

/**
 * The peers a node starts with. An empty book (first start, or a data directory from before the book) is
 * seeded from --peers; afterwards the book wins, and every way --peers differs from it is logged.
 */
export function startPeers(book: MemberBook, selfId: string, flagPeers: readonly PeerAddress[], logger: Logger): PeerAddress[] {
  if (book.all().length === 0) {
    book.merge(flagPeers.map((p) => ({ ...p, removed: false, version: 1 })));
    return book.live(selfId);
  }
  for (const p of flagPeers) {
    const e = book.get(p.id);
    if (e === null) logger.warn('--peers names a node the member book does not know: ignored (use punctual cluster add-node)', { peer: p.id });
    else if (e.removed) logger.warn('--peers names a node that was removed from the cluster: ignored', { peer: p.id });
    else if (e.host !== p.host || e.port !== p.port) {
      logger.warn('--peers differs from the member book: the book wins', { peer: p.id, flag: `${p.host}:${p.port}`, book: `${e.host}:${e.port}` });
    }
  }
  const flagIds = new Set(flagPeers.map((p) => p.id));
  for (const p of book.live(selfId)) {
    if (!flagIds.has(p.id)) logger.info('member from the member book (not in --peers)', { peer: p.id, address: `${p.host}:${p.port}` });
  }
  return book.live(selfId);
}

/** `HOST:PORT` (IPv6 in brackets) of a peer listener (src/core/addr.ts); throws invalid_argument naming `field`. */
export function parsePeerAddr(field: string, text: unknown): HostPort {
  if (typeof text !== 'string') throw invalid(field, 'must be a string HOST:PORT');
  return parseHostPort(text, (reason) => invalid(field, reason));
}

export const formatAddr = formatHostPort;

export function checkNodeId(field: string, id: unknown): string {
  return parseNodeId(id, (reason) => invalid(field, reason));
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function isMember(c: ConfState, id: string): boolean {
  return c.voters.includes(id as NodeId) || c.learners.includes(id as NodeId);
}

/** Worth another attempt against the shard's (new) leader. */
function retryable(err: unknown): boolean {
  if (err instanceof PunctualError) return err.code === 'unavailable';
  return err instanceof PeerUnavailableError || err instanceof PeerTimeoutError;
}

export interface MembershipOptions {
  nodeId: string;
  book: MemberBook;
  host: RaftHost;
  clock: Clock;
  logger: Logger;
  /** Overrides of membershipLimits (tests). */
  limits?: Partial<{ -readonly [K in keyof typeof membershipLimits]: number }>;
  /**
   * Starts the peer transport of a node that runs without one (a single node started without --peers) when it
   * adds its first member, so one node can grow into a cluster. Absent: such a node refuses (unavailable).
   */
  startTransport?: () => Promise<MemberTransport>;
  /**
   * Hands a shard this node leads to `to` as a planned transfer does (ClusterOps.transferLeader: drained first, so
   * the next leader finds every callback sent here recorded). Absent: Raft's transfer alone.
   */
  handOver?: (shard: number, to: string) => Promise<void>;
}

export class Membership {
  private transport: MemberTransport | null = null;
  private readonly limits: { -readonly [K in keyof typeof membershipLimits]: number };
  /** The change this node coordinates now (one at a time per node; Raft refuses a second one per group). */
  private busy: string | null = null;
  /** Peer id -> the book version it acknowledged. */
  private readonly pushed = new Map<string, number>();
  private readonly pushing = new Set<string>();
  private syncTimer: NodeJS.Timeout | null = null;
  /** Shards whose applied membership included this node when last seen (for the removal warning). */
  private readonly memberOf = new Set<number>();
  /** Shards whose applied membership dropped this node while it ran. */
  private readonly left = new Set<number>();
  /** The member book marks this node removed (a remove-node told it, or it learned it from a peer). */
  private selfRemoved: boolean;

  constructor(private readonly o: MembershipOptions) {
    this.limits = { ...membershipLimits, ...o.limits };
    this.selfRemoved = o.book.get(o.nodeId)?.removed === true;
  }

  /**
   * The shards this node knows it was removed from: every shard once the book says so, else those whose
   * membership dropped it while it ran. Readiness reports them first: a removed node may keep a stale view of
   * a shard it led (its removal is committed without it) and would otherwise look ready or merely leaderless.
   */
  removedFrom(): number[] {
    if (this.selfRemoved) return this.o.host.groups.map((g) => g.shard);
    return [...this.left].sort((a, b) => a - b);
  }

  start(transport: MemberTransport | null): void {
    this.confs().forEach((c, shard) => {
      if (isMember(c, this.o.nodeId)) this.memberOf.add(shard);
    });
    this.transport = transport;
    if (transport === null) return;
    this.syncTimer = setInterval(() => this.sync(), this.limits.syncIntervalMs);
    this.syncTimer.unref();
  }

  close(): void {
    if (this.syncTimer !== null) clearInterval(this.syncTimer);
    this.syncTimer = null;
  }

  /** The other live members with their peer addresses. */
  peers(): PeerAddress[] {
    return this.o.book.live(this.o.nodeId);
  }

  /** RaftHost.onConfChange: log what this node sees change. */
  onConfChange(shard: number, conf: ConfState): void {
    this.o.logger.info('shard membership changed', { shard, voters: conf.voters, learners: conf.learners });
    const member = isMember(conf, this.o.nodeId);
    // A joining node first installs a snapshot taken before it was added: not a member YET, nothing to warn of.
    if (!member && this.memberOf.has(shard) && conf.voters.length > 0) {
      this.o.logger.warn('this node is no longer a member of the shard', { shard });
      this.left.add(shard);
    }
    if (member) {
      this.memberOf.add(shard);
      this.left.delete(shard);
    } else this.memberOf.delete(shard);
  }

  // --- coordinator --------------------------------------------------------------------------------------

  /** punctual cluster add-node: learner in every shard, caught up, then voter (resumes a partial add). */
  async addNode(idIn: string, peerAddr: string): Promise<MembershipResult> {
    const id = checkNodeId('id', idIn);
    const addr = parsePeerAddr('peer_addr', peerAddr);
    if (this.transport === null && this.o.startTransport === undefined) this.requireTransport();
    const confs = this.confs();
    if (id === this.o.nodeId || confs.every((c) => c.voters.includes(id as NodeId))) {
      throw new PunctualError('conflict', `${id} is already a member (a voter of every shard)`);
    }
    const known = this.o.book.get(id);
    if (known !== null && !known.removed && confs.some((c) => isMember(c, id)) && (known.host !== addr.host || known.port !== addr.port)) {
      throw new PunctualError('conflict', `${id} is being added at ${formatAddr(known.host, known.port)}, not ${peerAddr}: finish with that address or remove-node ${id} first`);
    }
    const clash = this.o.book.all().find((e) => !e.removed && e.id !== id && e.host === addr.host && e.port === addr.port);
    if (clash !== undefined) throw new PunctualError('conflict', `${peerAddr} is the peer address of ${clash.id}`);
    return this.exclusive(`add-node ${id}`, async () => {
      if (this.transport === null) await this.growFromOne();
      const entry: MemberEntry = { id, ...addr, removed: false, version: this.nextVersion() };
      this.apply(this.o.book.merge([entry]));
      await this.pushAll();
      const budgetMs = this.limits.catchUpTimeoutMs + 2 * this.limits.confChangeTimeoutMs;
      await this.allShards(id, 'voter', entry, budgetMs);
      await this.waitLocal((c) => c.voters.includes(id as NodeId), 'add-node');
      this.o.logger.info('node added to every shard as a voter', { node: id, peerAddr });
      return this.result(id);
    });
  }

  /** punctual cluster remove-node: out of every shard (leadership moved away first), then out of the book. */
  async removeNode(idIn: string): Promise<MembershipResult> {
    const id = checkNodeId('id', idIn);
    const confs = this.confs();
    const entry = this.o.book.get(id);
    if (!confs.some((c) => isMember(c, id)) && (entry === null || entry.removed)) {
      throw new PunctualError('not_found', `node ${JSON.stringify(id)} is not a member`);
    }
    confs.forEach((c, shard) => {
      if (c.voters.length === 1 && c.voters[0] === id) {
        throw new PunctualError('conflict', `refused: ${id} is the only voter of shard ${shard}; a shard group cannot go below one voter`);
      }
    });
    if (confs.some((c) => isMember(c, id))) this.requireTransport();
    return this.exclusive(`remove-node ${id}`, async () => {
      const budgetMs = 3 * this.limits.confChangeTimeoutMs;
      await this.allShards(id, 'removed', null, budgetMs);
      await this.waitLocal((c) => !isMember(c, id), 'remove-node');
      const base = entry ?? { id, host: 'unknown', port: 1 };
      const taken = this.o.book.merge([{ id, host: base.host, port: base.port, removed: true, version: this.nextVersion() }]);
      // Told while its link is still open (best effort): the removed node then says so in its log and /readyz
      // instead of only seeing every peer refuse it.
      if (this.transport?.reachable(id) === true) await this.push(id);
      this.apply(taken);
      await this.pushAll();
      this.o.logger.info('node removed from every shard', { node: id });
      return this.result(id);
    });
  }

  /** A single node adds its first member: it opens its peer listener (--peer-listen) now. */
  private async growFromOne(): Promise<void> {
    if (this.o.startTransport === undefined) return;
    let transport: MemberTransport;
    try {
      transport = await this.o.startTransport();
    } catch (err) {
      // A node without peer authentication refuses to grow (conflict): retrying will not help.
      if (err instanceof PunctualError) throw err;
      throw new PunctualError('unavailable', `cannot open the peer listener (--peer-listen) to grow into a cluster: ${(err as Error).message}`);
    }
    this.start(transport);
    this.o.logger.info('peer transport started: this single node is growing into a cluster');
  }

  private requireTransport(): MemberTransport {
    if (this.transport === null) {
      throw new PunctualError('unavailable', 'this node runs without a peer transport (no --peers): membership cannot change');
    }
    return this.transport;
  }

  private async exclusive<T>(what: string, fn: () => Promise<T>): Promise<T> {
    if (this.busy !== null) throw new PunctualError('conflict', `a membership change is in progress on this node (${this.busy})`);
    this.busy = what;
    try {
      return await fn();
    } finally {
      this.busy = null;
    }
  }

  /** Every shard in parallel; a failure names the shards that failed and how to resume. */
  private async allShards(node: string, goal: Goal, peer: MemberEntry | null, budgetMs: number): Promise<void> {
    const untilMs = Date.now() + budgetMs;
    const outcomes = await Promise.allSettled(this.o.host.groups.map((g) => this.driveShard(g.shard, node, goal, peer, untilMs)));
    const failed = outcomes.flatMap((r, shard) => (r.status === 'rejected' ? [{ shard, err: r.reason as unknown }] : []));
    if (failed.length === 0) return;
    const first = failed[0]!.err;
    const code = first instanceof PunctualError ? first.code : 'internal';
    const why = first instanceof Error ? first.message : String(first);
    const verb = goal === 'voter' ? 'add-node' : 'remove-node';
    throw new PunctualError(
      code,
      `${verb} ${node} failed on shard(s) ${failed.map((f) => f.shard).join(', ')} of ${outcomes.length}: ${why}. Run the same command again to resume${goal === 'voter' ? `, or remove-node ${node} to undo` : ''}.`,
    );
  }

  /** Asks the shard's leader (this node or a peer) to do the step; retries while leadership moves. */
  private async driveShard(shard: number, node: string, goal: Goal, peer: MemberEntry | null, untilMs: number): Promise<void> {
    for (;;) {
      const budgetMs = untilMs - Date.now();
      const leader = this.o.host.leaderOf(shard);
      try {
        if (budgetMs <= 0) throw new PunctualError('timeout', `shard ${shard}: no leader finished the change in time`);
        if (leader === null) throw new PunctualError('unavailable', `shard ${shard} has no leader right now`);
        if (leader === this.o.nodeId) return await this.leaderStep(shard, node, goal, peer, budgetMs);
        const op: MemberOp = { op: 'step', shard, node, goal, peer, budgetMs };
        const bytes = await this.requireTransport().request(leader, membershipKind, encodeWire(op), budgetMs + this.limits.requestMarginMs);
        const answer = decodeWire<Answer>(bytes);
        if (!answer.ok) throw fromWireError(answer.error);
        return;
      } catch (err) {
        if (!retryable(err) || Date.now() >= untilMs) throw err;
        await sleep(this.limits.retryDelayMs);
      }
    }
  }

  /** Waits until this node's own view of every shard agrees (so the answer shows the new membership). */
  private async waitLocal(done: (c: ConfState) => boolean, what: string): Promise<void> {
    const untilMs = Date.now() + this.limits.confChangeTimeoutMs;
    while (!this.confs().every(done)) {
      if (Date.now() >= untilMs) throw new PunctualError('timeout', `${what}: the change is committed but this node has not applied it yet`);
      await sleep(10);
    }
  }

  private confs(): ConfState[] {
    return this.o.host.groups.map((g) => g.raw.confState());
  }

  private result(id: string): MembershipResult {
    const e = this.o.book.get(id);
    return {
      id,
      peerAddr: e === null ? '' : formatAddr(e.host, e.port),
      shards: this.confs().map((c, shard) => ({ id: shard, voters: [...c.voters].sort(), learners: [...c.learners].sort() })),
    };
  }

  private nextVersion(): number {
    return Math.max(this.o.book.version() + 1, this.o.clock.nowMs());
  }

  // --- the shard leader's side ----------------------------------------------------------------------------

  /** On the shard's leader: one node to `goal` in this shard, one conf change at a time. */
  private async leaderStep(shard: number, node: string, goal: Goal, peer: MemberEntry | null, budgetMs: number): Promise<void> {
    const g = this.o.host.groups[shard];
    if (g === undefined) throw new PunctualError('not_found', `shard ${shard} not found`);
    if (peer !== null) this.apply(this.o.book.merge([peer]));
    const untilMs = Date.now() + budgetMs;
    if (goal === 'voter') return this.promote(g, node, untilMs);
    return this.demote(g, node, untilMs);
  }

  private async promote(g: ShardGroup, node: string, untilMs: number): Promise<void> {
    const id = node as NodeId;
    if (g.raw.confState().voters.includes(id)) return;
    if (!g.raw.confState().learners.includes(id)) {
      this.o.host.proposeConfChange(g.shard, { type: 'add_learner', node: id });
      await this.waitConf(g, (c) => isMember(c, node), Math.min(untilMs, Date.now() + this.limits.confChangeTimeoutMs), `adding ${node} as a learner`);
      this.o.logger.info('membership: learner added', { shard: g.shard, node });
    }
    const caughtUpBy = Math.min(untilMs, Date.now() + this.limits.catchUpTimeoutMs);
    for (;;) {
      this.checkLeader(g);
      const s = g.raw.status();
      const pr = s.progress.get(id);
      // Proposed in the same turn as the check, so the commit index cannot move in between.
      if (pr !== undefined && pr.match >= s.commit) {
        this.o.host.proposeConfChange(g.shard, { type: 'add_voter', node: id });
        break;
      }
      if (Date.now() >= caughtUpBy) {
        const addr = this.o.book.get(node);
        throw new PunctualError(
          'timeout',
          `${node} did not catch up with shard ${g.shard} within ${this.limits.catchUpTimeoutMs} ms (match ${pr?.match ?? 0} of commit ${s.commit}): is it running with --join and reachable at ${addr === null ? '?' : formatAddr(addr.host, addr.port)}?`,
        );
      }
      await sleep(10);
    }
    this.o.logger.info('membership: learner caught up, promoting', { shard: g.shard, node });
    await this.waitConf(g, (c) => c.voters.includes(id), Math.min(untilMs, Date.now() + this.limits.confChangeTimeoutMs), `promoting ${node}`);
    this.o.logger.info('membership: voter', { shard: g.shard, node });
  }

  private async demote(g: ShardGroup, node: string, untilMs: number): Promise<void> {
    if (!isMember(g.raw.confState(), node)) return;
    if (node === this.o.nodeId) await this.leaveLeadership(g, untilMs);
    this.o.host.proposeConfChange(g.shard, { type: 'remove', node: node as NodeId });
    await this.waitConf(g, (c) => !isMember(c, node), Math.min(untilMs, Date.now() + this.limits.confChangeTimeoutMs), `removing ${node}`);
    this.o.logger.info('membership: removed', { shard: g.shard, node });
  }

  /** This leader is the node being removed: hand the shard to the most caught-up other voter, then retry there. */
  private async leaveLeadership(g: ShardGroup, untilMs: number): Promise<never> {
    const s = g.raw.status();
    const others = s.confState.voters.filter((v) => v !== this.o.nodeId);
    const to = others.sort((a, b) => (s.progress.get(b)?.match ?? 0) - (s.progress.get(a)?.match ?? 0))[0];
    if (to === undefined) throw new PunctualError('conflict', `refused: ${this.o.nodeId} is the only voter of shard ${g.shard}`);
    this.o.logger.info('membership: moving leadership away before leaving', { shard: g.shard, to });
    await this.handOver(g, to);
    const byMs = Math.min(untilMs, Date.now() + this.limits.confChangeTimeoutMs);
    while (g.role === 'leader' && Date.now() < byMs) {
      await sleep(10);
      // An abandoned transfer (the election timeout passed) is asked again.
      if (g.role === 'leader' && g.raw.status().leaseValid) await this.handOver(g, to);
    }
    throw notLeader(g.shard); // the coordinator retries against the new leader
  }

  /**
   * A planned transfer where the node has one (o.handOver), so removing a node sends no callback twice; its
   * refusal while one of the shard is under way (or the target looks unreachable from here) is waited out by the
   * caller's loop, which asks again.
   */
  private async handOver(g: ShardGroup, to: NodeId): Promise<void> {
    if (this.o.handOver === undefined) {
      g.raw.transferLeader(to);
      this.o.host.schedule();
      return;
    }
    try {
      await this.o.handOver(g.shard, to);
    } catch (err) {
      if (!(err instanceof PunctualError && err.code === 'unavailable')) throw err;
    }
  }

  /** Polls the leader's applied membership; leadership lost on the way is `unavailable` (the caller retries). */
  private async waitConf(g: ShardGroup, done: (c: ConfState) => boolean, untilMs: number, what: string): Promise<void> {
    for (;;) {
      if (done(g.raw.confState())) return;
      this.checkLeader(g);
      if (Date.now() >= untilMs) throw new PunctualError('timeout', `shard ${g.shard}: ${what} was not applied in time`);
      await sleep(5);
    }
  }

  private checkLeader(g: ShardGroup): void {
    if (g.role !== 'leader') throw notLeader(g.shard);
  }

  // --- the book between nodes -----------------------------------------------------------------------------

  /** A membership request from a peer (kind 'membership'): errors travel as values. */
  async answer(body: Uint8Array): Promise<Uint8Array> {
    let answer: Answer;
    try {
      answer = { ok: true, value: await this.run(decodeWire<MemberOp>(body)) };
    } catch (err) {
      answer = { ok: false, error: toWireError(err) };
    }
    return encodeWire(answer);
  }

  private async run(op: MemberOp): Promise<unknown> {
    if (op.op === 'book') {
      if (!Array.isArray(op.entries)) throw new PunctualError('invalid_argument', 'book: entries expected');
      this.apply(this.o.book.merge(op.entries));
      return this.o.book.all();
    }
    if (op.op === 'step') {
      await this.leaderStep(op.shard, checkNodeId('node', op.node), op.goal, op.peer, Math.min(op.budgetMs, 120_000));
      return null;
    }
    throw new PunctualError('invalid_argument', 'unknown membership op');
  }

  /** Book entries just taken: the transport adds, moves or drops those peers. */
  private apply(changed: readonly MemberEntry[]): void {
    const t = this.transport;
    for (const e of changed) {
      if (e.id === this.o.nodeId) {
        if (e.removed) this.o.logger.warn('this node was removed from the cluster: stop it (its data directory is of no further use)');
        this.selfRemoved = e.removed;
        continue;
      }
      this.pushed.delete(e.id);
      if (t === null) continue;
      if (e.removed) void t.removePeer(e.id);
      else t.addPeer(e);
    }
  }

  /** Pushes the book to every live member now (bounded wait; the periodic sync retries the ones that failed). */
  private async pushAll(): Promise<void> {
    await Promise.all(this.peers().map((p) => this.push(p.id)));
  }

  /** Every syncIntervalMs: the book to each reachable member that has not acknowledged its latest version. */
  private sync(): void {
    const t = this.transport;
    if (t === null) return;
    const version = this.o.book.version();
    for (const p of this.peers()) {
      if (this.pushed.get(p.id) !== version && t.reachable(p.id)) void this.push(p.id);
    }
  }

  private async push(peerId: string): Promise<void> {
    const t = this.transport;
    if (t === null || this.pushing.has(peerId)) return;
    this.pushing.add(peerId);
    const version = this.o.book.version();
    try {
      const op: MemberOp = { op: 'book', entries: this.o.book.all() };
      const answer = decodeWire<Answer>(await t.request(peerId, membershipKind, encodeWire(op), this.limits.requestMarginMs));
      if (!answer.ok) throw fromWireError(answer.error);
      this.pushed.set(peerId, version);
      if (Array.isArray(answer.value)) this.apply(this.o.book.merge(answer.value as MemberEntry[]));
    } catch (err) {
      this.o.logger.debug('member book push failed (retried later)', { peer: peerId, err });
    } finally {
      this.pushing.delete(peerId);
    }
  }
}
