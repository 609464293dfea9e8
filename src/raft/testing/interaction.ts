/**
 * The interpreter of the golden interaction scripts (src/raft/testdata/*.txt, etcd's datadriven style).
 * Each command runs against one Cluster and returns the text it prints; golden.test.ts compares that text with
 * the script's expected block. Node arguments are numbers: `campaign 1` means node n1.
 */
import { decodeConfChange } from '../confchange.js';
import type { ConfChange, Entry, Message, NodeId, Ready } from '../types.js';
import type { TestConfig } from './network.js';
import { Cluster, encodeText } from './network.js';

const dec = new TextDecoder();

export function formatEntry(e: Entry): string {
  if (e.type === 'conf_change') {
    const cc = decodeConfChange(e.data);
    return `${e.index}/${e.term} conf(${cc.type} ${cc.node})`;
  }
  return e.data.length === 0 ? `${e.index}/${e.term} noop` : `${e.index}/${e.term} ${JSON.stringify(dec.decode(e.data))}`;
}

export function formatMessage(m: Message): string {
  const head = `${m.from}->${m.to} ${m.type} term=${m.term}`;
  switch (m.type) {
    case 'pre_vote':
    case 'vote':
      return `${head} last=${m.lastLogIndex}/${m.lastLogTerm}${m.transfer ? ' transfer' : ''}`;
    case 'pre_vote_resp':
    case 'vote_resp':
      return `${head}${m.reject ? ' rejected' : ' granted'}`;
    case 'append':
      return `${head} prev=${m.prevIndex}/${m.prevTerm} commit=${m.commit} entries=[${m.entries.map(formatEntry).join(', ')}]`;
    case 'append_resp':
      return m.reject
        ? `${head} rejected index=${m.index} hint=${m.rejectHint}/${m.hintTerm}`
        : `${head} index=${m.index}`;
    case 'heartbeat':
      return `${head} commit=${m.commit}${m.ctx ? ` ctx=${m.ctx}` : ''}`;
    case 'heartbeat_resp':
      return `${head}${m.ctx ? ` ctx=${m.ctx}` : ''}`;
    case 'snapshot': {
      const s = m.snapshot.metadata;
      return `${head} snapshot=${s.index}/${s.term} voters=[${s.confState.voters.join(',')}] learners=[${s.confState.learners.join(',')}]`;
    }
    case 'timeout_now':
      return head;
    case 'read_index':
      return `${head} ctx=${m.ctx}`;
    case 'read_index_resp':
      return `${head} index=${m.index} ctx=${m.ctx}`;
    case 'transfer_leader':
      return `${head} transferee=${m.transferee}`;
  }
}

function formatReady(id: NodeId, rd: Ready): string[] {
  const out = [`> ${id} handling Ready`];
  if (rd.softState) out.push(`  soft: leader=${rd.softState.leader || '-'} role=${rd.softState.role}`);
  if (rd.hardState) out.push(`  hard: term=${rd.hardState.term} vote=${rd.hardState.vote || '-'} commit=${rd.hardState.commit}`);
  if (rd.snapshot) out.push(`  snapshot: ${rd.snapshot.metadata.index}/${rd.snapshot.metadata.term}`);
  if (rd.entries.length > 0) out.push(`  entries: ${rd.entries.map(formatEntry).join(', ')}`);
  if (rd.committedEntries.length > 0) out.push(`  apply: ${rd.committedEntries.map(formatEntry).join(', ')}`);
  for (const r of rd.readStates) out.push(`  read-state: index=${r.index} ctx=${r.ctx}`);
  if (rd.snapshotRequested) out.push('  snapshot requested');
  for (const m of rd.messages) out.push(`  send ${formatMessage(m)}`);
  return out;
}

function nid(arg: string | undefined): NodeId {
  if (!arg || !/^\d+$/.test(arg)) throw new Error(`expected a node number, got ${JSON.stringify(arg)}`);
  return `n${arg}` as NodeId;
}

function parseConfig(args: string[]): TestConfig {
  const cfg: Record<string, number | boolean> = {};
  for (const a of args) {
    const [k, v] = a.split('=');
    if (!k || v === undefined) throw new Error(`bad option ${a}`);
    cfg[k] = v === 'true' ? true : v === 'false' ? false : Number(v);
  }
  return cfg as TestConfig;
}

export class Interaction {
  cluster: Cluster | null = null;

  private c(): Cluster {
    if (!this.cluster) throw new Error('add-nodes first');
    return this.cluster;
  }

  /** Runs one command line; returns its output lines. */
  run(line: string): string[] {
    const [cmd, ...args] = line.trim().split(/\s+/);
    switch (cmd) {
      case 'add-nodes':
        return this.addNodes(args);
      case 'campaign':
        this.c().node(nid(args[0])).raw.campaign();
        return [];
      case 'propose':
        return this.propose(args);
      case 'process-ready':
        return this.processReady(args);
      case 'deliver-msgs':
        return this.deliverMsgs(args);
      case 'stabilize':
        return this.stabilize();
      case 'tick':
        return this.tick(args);
      case 'run-ticks':
        return this.runTicks(Number(args[0] ?? '1'));
      default:
        return this.runMore(cmd ?? '', args);
    }
  }

  private runMore(cmd: string, args: string[]): string[] {
    const c = this.c();
    switch (cmd) {
      case 'drop': {
        // drop: every queued message; drop 1 2: queued messages from n1 to n2.
        const n = args.length === 2 ? c.dropQueued((m) => m.from === nid(args[0]) && m.to === nid(args[1])) : c.dropQueued();
        return [`dropped ${n}`];
      }
      case 'partition':
        c.partition(...args.join(' ').split('|').map((g) => g.trim().split(/\s+/).map(nid)));
        return [];
      case 'heal':
        c.heal();
        return [];
      case 'compact':
        return this.compact(args);
      case 'transfer-leader':
        c.node(nid(args[0])).raw.transferLeader(nid(args[1]));
        return [];
      case 'add-member':
      case 'remove-member':
        return this.member(cmd, args);
      case 'read-index':
        return [`accepted=${c.node(nid(args[0])).raw.readIndex(args[1] ?? 'r')}`];
      case 'crash':
        c.crash(nid(args[0]));
        return [];
      case 'restart':
        c.restart(nid(args[0]));
        return [];
      case 'status':
        return this.status();
      case 'log':
        return this.log(args);
      default:
        throw new Error(`unknown command ${cmd}`);
    }
  }

  private addNodes(args: string[]): string[] {
    if (!this.cluster) this.cluster = new Cluster({ config: parseConfig(args.slice(1)), seed: 1 });
    const ids = this.cluster.addNodes(Number(args[0]));
    return [`added ${ids.join(' ')}`];
  }

  private propose(args: string[]): string[] {
    const r = this.c().node(nid(args[0])).raw.propose(encodeText(args.slice(1).join(' ')));
    return [r.ok ? `ok index=${r.index} term=${r.term}` : `rejected ${r.reason}`];
  }

  private processReady(args: string[]): string[] {
    const c = this.c();
    const out: string[] = [];
    for (const id of args.length > 0 ? args.map(nid) : c.ids()) {
      for (const rd of c.processReady(id)) out.push(...formatReady(id, rd));
    }
    return out;
  }

  private deliverMsgs(args: string[]): string[] {
    const c = this.c();
    const to = args.length > 0 ? args.map(nid) : undefined;
    const before = c.dropped;
    const out = c.deliver(to).map((m) => `deliver ${formatMessage(m)}`);
    if (c.dropped > before) out.push(`(${c.dropped - before} lost to partition or crash)`);
    return out;
  }

  private stabilize(): string[] {
    const out: string[] = [];
    for (let round = 0; round < 1000; round++) {
      const ready = this.processReady([]);
      const delivered = this.deliverMsgs([]);
      if (ready.length === 0 && delivered.length === 0) return out;
      out.push(...ready, ...delivered);
    }
    throw new Error('stabilize: no fixed point');
  }

  private tick(args: string[]): string[] {
    const c = this.c();
    const times = Number(args[1] ?? '1');
    const ids = args[0] === 'all' ? c.ids() : [nid(args[0])];
    for (let t = 0; t < times; t++) for (const id of ids) if (!c.node(id).crashed) c.node(id).raw.tick();
    return [];
  }

  /** Ticks every live node `times` times, stabilizing after each; prints only role and leader changes. */
  private runTicks(times: number): string[] {
    const c = this.c();
    const out: string[] = [];
    for (let t = 1; t <= times; t++) {
      for (const id of c.ids()) if (!c.node(id).crashed) c.node(id).raw.tick();
      for (let round = 0; round < 1000; round++) {
        let moved = 0;
        for (const id of c.ids()) {
          for (const rd of c.processReady(id)) {
            moved++;
            if (rd.softState) out.push(`tick ${t}: ${id} ${rd.softState.role} leader=${rd.softState.leader || '-'}`);
          }
        }
        moved += c.deliver().length;
        if (moved === 0) break;
      }
    }
    return out;
  }

  private compact(args: string[]): string[] {
    const n = this.c().node(nid(args[0]));
    const index = Number(args[1] ?? n.appliedIndex);
    if (index !== n.appliedIndex) throw new Error(`compact: snapshot at the applied index ${n.appliedIndex} only`);
    const keep = Number(args[2] ?? '0');
    n.snapshotNow();
    n.storage.compact(Math.max(0, index - keep) as never);
    return [`${n.id} first=${n.storage.firstIndex()} last=${n.storage.lastIndex()}`];
  }

  private member(cmd: string, args: string[]): string[] {
    const via = this.c().node(nid(args[0]));
    const node = nid(args[1]);
    let cc: ConfChange;
    if (cmd === 'remove-member') cc = { type: 'remove', node };
    else cc = { type: args[2] === 'voter' ? 'add_voter' : 'add_learner', node };
    const r = via.raw.proposeConfChange(cc);
    return [r.ok ? `ok index=${r.index} term=${r.term}` : `rejected ${r.reason}`];
  }

  private status(): string[] {
    return this.c()
      .ids()
      .map((id) => {
        const n = this.c().node(id);
        if (n.crashed) return `${id}: crashed`;
        const s = n.raw.status();
        const cs = `voters=[${s.confState.voters.join(',')}] learners=[${s.confState.learners.join(',')}]`;
        return `${id}: ${s.role} term=${s.term} lead=${s.lead || '-'} commit=${s.commit} applied=${s.applied} last=${s.lastIndex} lease=${s.leaseValid} ${cs}`;
      });
  }

  private log(args: string[]): string[] {
    const n = this.c().node(nid(args[0]));
    const s = n.storage;
    const ents = s.entries(s.firstIndex(), (s.lastIndex() + 1) as never, Infinity);
    return [`${n.id} first=${s.firstIndex()} last=${s.lastIndex()}: ${ents.map(formatEntry).join(', ')}`];
  }
}

export interface ScriptBlock {
  readonly before: string[];
  readonly command: string;
  readonly expected: string[];
}

/** Splits a script into blocks: free text (comments, blank lines), a command line, `----`, output, blank line. */
export function parseScript(text: string): { blocks: ScriptBlock[]; trailer: string[] } {
  const lines = text.split('\n');
  const blocks: ScriptBlock[] = [];
  let before: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (line.trim() === '' || line.startsWith('#')) {
      before.push(line);
      continue;
    }
    if (lines[i + 1] !== '----') throw new Error(`line ${i + 2}: expected ---- after ${JSON.stringify(line)}`);
    const expected: string[] = [];
    let j = i + 2;
    while (j < lines.length && lines[j] !== '') expected.push(lines[j++]!);
    blocks.push({ before, command: line, expected });
    before = [];
    i = j; // skip the blank line that ends the output

  }
  return { blocks, trailer: before };
}

/** Runs a script; returns the actual output per block and the script text rewritten with it. */
export function runScript(text: string): { actual: string[][]; rewritten: string } {
  const { blocks, trailer } = parseScript(text);
  const it = new Interaction();
  const actual: string[][] = [];
  const out: string[] = [];
  for (const b of blocks) {
    let lines: string[];
    try {
      lines = it.run(b.command);
    } catch (err) {
      lines = [`error: ${(err as Error).message}`];
    }
    if (lines.length === 0) lines = ['ok'];
    actual.push(lines);
    out.push(...b.before, b.command, '----', ...lines, '');
  }
  // Keep the file's free-text tail but never stack blank lines.
  const tail = trailer.filter((l, k) => !(l === '' && (k === 0 || trailer[k - 1] === '')));
  return { actual, rewritten: [...out, ...tail].join('\n').replace(/\n+$/, '\n') };
}
