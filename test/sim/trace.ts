/**
 * The event trace of a run, folded into a 64-bit hash (two 32-bit lanes) so determinism is cheap to test: the
 * same seed and options must give the same hash. With `keep`, readable lines are kept too (for --seed runs).
 */
import type { Entry, Message } from '../../src/raft/index.js';

const typeCodes: Record<Message['type'], number> = {
  pre_vote: 1,
  vote: 2,
  pre_vote_resp: 3,
  vote_resp: 4,
  append: 5,
  append_resp: 6,
  heartbeat: 7,
  heartbeat_resp: 8,
  snapshot: 9,
  timeout_now: 10,
  read_index: 11,
  read_index_resp: 12,
  transfer_leader: 13,
};

export class Trace {
  private a = 0x811c9dc5;
  private b = 0x01000193;
  readonly lines: string[] = [];

  constructor(private readonly keep: boolean) {}

  private mix(x: number): void {
    this.a = Math.imul(this.a ^ (x >>> 0), 0x01000193) >>> 0;
    this.b = Math.imul(this.b ^ this.a, 0x5bd1e995) >>> 0;
    this.b = (this.b ^ (this.b >>> 13)) >>> 0;
  }

  event(what: string, code: number, arg: number): void {
    this.mix(code);
    this.mix(arg);
    if (this.keep) this.lines.push(what);
  }

  /** An event known only by its text (the whole-node simulator): every character goes into the hash. */
  text(line: string, atMs: number): void {
    this.mix(atMs);
    for (let i = 0; i < line.length; i++) this.mix(line.charCodeAt(i));
    if (this.keep) this.lines.push(`${atMs} ${line}`);
  }

  message(m: Message, step: number): void {
    this.mix(step);
    this.mix(typeCodes[m.type]);
    this.mix(m.group);
    this.mix(m.from.charCodeAt(1));
    this.mix(m.to.charCodeAt(1));
    this.mix(m.term);
    if (this.keep) this.lines.push(`${step} ${m.from}->${m.to} g${m.group} ${m.type} t${m.term}${describe(m)}`);
  }

  apply(group: number, e: Entry): void {
    this.mix(group);
    this.mix(e.index);
    this.mix(e.crc);
  }

  hash(): string {
    return this.a.toString(16).padStart(8, '0') + this.b.toString(16).padStart(8, '0');
  }
}

function describe(m: Message): string {
  switch (m.type) {
    case 'append':
      return ` prev ${m.prevIndex}/${m.prevTerm} n${m.entries.length} commit ${m.commit}`;
    case 'append_resp':
      return ` ${m.reject ? 'reject' : 'ok'} ${m.index}`;
    case 'vote':
    case 'pre_vote':
      return ` last ${m.lastLogIndex}/${m.lastLogTerm}`;
    case 'vote_resp':
    case 'pre_vote_resp':
      return m.reject ? ' reject' : ' grant';
    case 'snapshot':
      return ` at ${m.snapshot.metadata.index}`;
    default:
      return '';
  }
}
