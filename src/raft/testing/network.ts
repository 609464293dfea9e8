/**
 * An in-test cluster for one Raft group: nodes on MemoryStorage, a message queue with drop/partition rules,
 * crash/restart, and a tiny state machine (the list of applied entries) whose snapshots are JSON. Pure and
 * deterministic, so tests and golden scripts replay exactly; test/sim may borrow the ideas.
 */
import type { NodeId } from '../../core/ids.js';
import { Prng } from '../../core/prng.js';
import { RawNode } from '../rawnode.js';
import { MemoryStorage } from '../storage.js';
import type { ConfState, Config, Entry, LogIndex, Message, ReadState, Ready, Term } from '../types.js';

export interface AppliedEntry {
  readonly index: LogIndex;
  readonly term: Term;
  readonly type: Entry['type'];
  readonly data: string;
}

export type TestConfig = Partial<Omit<Config, 'id' | 'group' | 'rand' | 'applied'>>;

export const defaultTestConfig: Required<TestConfig> = {
  electionTicks: 10,
  heartbeatTicks: 1,
  preVote: true,
  checkQuorum: true,
  maxInflightMsgs: 256,
  maxInflightBytes: 0,
  maxMsgBytes: 1 << 20,
  leaseTicks: 8,
  bootCampaignDelayTicks: 0,
};

const enc = new TextEncoder();
const dec = new TextDecoder();

export class TestNode {
  raw: RawNode;
  /** The durable state machine: what was applied, in order. */
  state: AppliedEntry[] = [];
  appliedIndex = 0 as LogIndex;
  readStates: ReadState[] = [];
  crashed = false;
  snapshotsRequested = 0;

  constructor(
    readonly id: NodeId,
    readonly storage: MemoryStorage,
    readonly config: Config,
  ) {
    this.raw = new RawNode(config, storage);
  }

  /** A crash loses everything volatile; storage and the state machine are durable. */
  restart(): void {
    this.raw = new RawNode({ ...this.config, applied: this.appliedIndex }, this.storage);
    this.crashed = false;
  }

  /** Snapshots the state machine at its applied index (what a host does when asked or on a schedule). */
  snapshotNow(): void {
    this.storage.createSnapshot(this.appliedIndex, this.raw.confState(), enc.encode(JSON.stringify(this.state)));
  }

  /** Does what one Ready says in the contract's order; returns the Ready and the messages to send. */
  handleReady(): Ready {
    const rd = this.raw.ready();
    if (rd.snapshot) {
      this.storage.applySnapshot(rd.snapshot);
      this.state = rd.snapshot.data.length > 0 ? (JSON.parse(dec.decode(rd.snapshot.data)) as AppliedEntry[]) : [];
      this.appliedIndex = rd.snapshot.metadata.index;
    }
    this.storage.append(rd.entries);
    if (rd.hardState) this.storage.setHardState(rd.hardState);
    for (const e of rd.committedEntries) {
      this.state.push({ index: e.index, term: e.term, type: e.type, data: dec.decode(e.data) });
      this.appliedIndex = e.index;
    }
    for (const r of rd.readStates) this.readStates.push(r);
    if (rd.snapshotRequested) {
      this.snapshotsRequested++;
      this.snapshotNow();
    }
    this.raw.advance();
    return rd;
  }
}

export interface ClusterOptions {
  config?: TestConfig;
  seed?: number;
  group?: number;
}

/** Why a message did not arrive. */
type Rule = (m: Message) => boolean;

export class Cluster {
  readonly nodes = new Map<NodeId, TestNode>();
  /** Messages sent and not yet delivered, in send order. */
  queue: Message[] = [];
  /** Every leader seen, by term (election safety: at most one per term). */
  readonly leadersByTerm = new Map<number, Set<NodeId>>();
  readonly config: Required<TestConfig>;
  readonly group: number;
  private readonly rand: Prng;
  private dropRules: Rule[] = [];
  private partitions: NodeId[][] | null = null;
  /** Called on every delivered message; may return a replacement (tests use it to corrupt frames). */
  tamper: ((m: Message) => Message) | null = null;
  dropped = 0;

  constructor(options: ClusterOptions = {}) {
    this.config = { ...defaultTestConfig, ...options.config };
    this.group = options.group ?? 1;
    this.rand = new Prng(options.seed ?? 1);
  }

  /**
   * Adds nodes n<k>. The first call bootstraps them as the voters; later nodes join empty (add them as members).
   * `config`: for every node added, or per node.
   */
  addNodes(count: number, config: TestConfig | ((id: NodeId) => TestConfig) = {}): NodeId[] {
    const first = this.nodes.size === 0;
    const ids: NodeId[] = [];
    for (let i = 0; i < count; i++) ids.push(`n${this.nodes.size + i + 1}` as NodeId);
    const boot: ConfState = first ? { voters: ids, learners: [] } : { voters: [], learners: [] };
    for (const id of ids) {
      const own = typeof config === 'function' ? config(id) : config;
      const cfg: Config = { ...this.config, ...own, id, group: this.group, rand: this.rand.fork() };
      this.nodes.set(id, new TestNode(id, new MemoryStorage(boot), cfg));
    }
    return ids;
  }

  node(id: NodeId | string): TestNode {
    const n = this.nodes.get(id as NodeId);
    if (!n) throw new Error(`no node ${id}`);
    return n;
  }

  ids(): NodeId[] {
    return [...this.nodes.keys()];
  }

  /** Runs every pending Ready of the node (repeatedly, until none). Returns the Readies handled. */
  processReady(id: NodeId): Ready[] {
    const n = this.node(id);
    const out: Ready[] = [];
    while (!n.crashed && n.raw.hasReady()) {
      const rd = n.handleReady();
      for (const m of rd.messages) this.queue.push(m);
      out.push(rd);
      this.observe(n);
    }
    return out;
  }

  processAll(): number {
    let n = 0;
    for (const id of this.nodes.keys()) n += this.processReady(id).length;
    return n;
  }

  /** Whether m gets through the current partitions and drop rules. */
  reachable(m: Message): boolean {
    const to = this.nodes.get(m.to);
    if (!to || to.crashed || this.node(m.from).crashed) return false;
    if (this.partitions) {
      const side = (id: NodeId): number => this.partitions!.findIndex((p) => p.includes(id));
      if (side(m.from) !== side(m.to)) return false;
    }
    return !this.dropRules.some((r) => r(m));
  }

  /** Delivers (steps) the queued messages addressed to `to` (or all), in order. Returns the delivered ones. */
  deliver(to?: NodeId[]): Message[] {
    const take: Message[] = [];
    const keep: Message[] = [];
    for (const m of this.queue) (to && !to.includes(m.to) ? keep : take).push(m);
    this.queue = keep;
    const delivered: Message[] = [];
    for (const m0 of take) {
      if (!this.reachable(m0)) {
        this.dropped++;
        continue;
      }
      const m = this.tamper ? this.tamper(m0) : m0;
      this.node(m.to).raw.step(m);
      this.observe(this.node(m.to));
      delivered.push(m);
    }
    return delivered;
  }

  /** Ready + deliver until nothing moves. Throws if it does not settle (a livelock is a bug too). */
  stabilize(maxRounds = 10_000): void {
    for (let i = 0; i < maxRounds; i++) {
      const readies = this.processAll();
      const delivered = this.deliver().length;
      if (readies === 0 && delivered === 0 && this.queue.length === 0) return;
    }
    throw new Error('cluster did not stabilize');
  }

  /** One tick on every live node (or those given), then stabilize. */
  tickAll(times = 1, ids: NodeId[] = this.ids()): void {
    for (let t = 0; t < times; t++) {
      for (const id of ids) {
        const n = this.node(id);
        if (n.crashed) continue;
        n.raw.tick();
        this.observe(n);
      }
      this.stabilize();
    }
  }

  /** Ticks until some node leads (with a quorum able to elect it). Returns the leader. */
  electLeader(maxTicks = 500): NodeId {
    for (let t = 0; t < maxTicks; t++) {
      const l = this.leader();
      if (l) return l;
      this.tickAll();
    }
    throw new Error('no leader elected');
  }

  /** The live leader with the highest term, if any. */
  leader(): NodeId | null {
    let best: TestNode | null = null;
    for (const n of this.nodes.values()) {
      if (n.crashed) continue;
      const s = n.raw.status();
      if (s.role === 'leader' && (!best || s.term > best.raw.status().term)) best = n;
    }
    return best ? best.id : null;
  }

  partition(...groups: NodeId[][]): void {
    const named = new Set(groups.flat());
    const rest = this.ids().filter((id) => !named.has(id));
    this.partitions = rest.length > 0 ? [...groups, rest] : groups;
  }

  isolate(id: NodeId): void {
    this.partition([id]);
  }

  heal(): void {
    this.partitions = null;
    this.dropRules = [];
  }

  /** Drops every future message that matches. */
  dropWhere(rule: Rule): void {
    this.dropRules.push(rule);
  }

  /** Discards queued messages (matching `rule`, or all). Returns how many. */
  dropQueued(rule: Rule = () => true): number {
    const before = this.queue.length;
    this.queue = this.queue.filter((m) => !rule(m));
    return before - this.queue.length;
  }

  crash(id: NodeId): void {
    const n = this.node(id);
    n.crashed = true;
    this.queue = this.queue.filter((m) => m.from !== id && m.to !== id);
  }

  restart(id: NodeId): void {
    this.node(id).restart();
  }

  private observe(n: TestNode): void {
    const s = n.raw.status();
    if (s.role !== 'leader') return;
    let set = this.leadersByTerm.get(s.term);
    if (!set) this.leadersByTerm.set(s.term, (set = new Set()));
    set.add(n.id);
  }

  /** Propose through the current leader; returns the proposal result. */
  propose(data: string, via?: NodeId): ReturnType<RawNode['propose']> {
    const id = via ?? this.leader();
    if (!id) return { ok: false, reason: 'not_leader' };
    return this.node(id).raw.propose(enc.encode(data));
  }
}

export function encodeText(s: string): Uint8Array {
  return enc.encode(s);
}
