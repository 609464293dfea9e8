/**
 * Micro-benchmark of the pure Raft core (no IO): proposals/s committed by a 3-node group with instant delivery,
 * and the cost of one tick across 1,000 idle groups. Prints a summary and writes
 * bench/results/raft-core-<time>.json.   Run: npm run build && node dist/bench/raft-core.js
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Prng } from '../src/core/prng.js';
import type { Message, NodeId, Ready } from '../src/raft/index.js';
import { MemoryStorage, RawNode } from '../src/raft/index.js';

interface Member {
  id: NodeId;
  raw: RawNode;
  storage: MemoryStorage;
  applied: number;
}

function makeGroup(group: number, rand: Prng): Member[] {
  const ids = ['n1', 'n2', 'n3'] as NodeId[];
  return ids.map((id) => {
    const storage = new MemoryStorage({ voters: ids, learners: [] });
    const raw = new RawNode(
      {
        id,
        group,
        electionTicks: 10,
        heartbeatTicks: 1,
        preVote: true,
        checkQuorum: true,
        maxInflightMsgs: 256,
        maxInflightBytes: 8 << 20,
        maxMsgBytes: 1 << 20,
        leaseTicks: 8,
        rand: rand.fork(),
      },
      storage,
    );
    return { id, raw, storage, applied: 0 };
  });
}

/** Handles each member's Ready (persist, collect messages, apply) and delivers; returns whether anything moved. */
function pump(members: Member[]): boolean {
  const byId = new Map(members.map((m) => [m.id, m]));
  let moved = false;
  const outbox: Message[] = [];
  for (const m of members) {
    while (m.raw.hasReady()) {
      const rd: Ready = m.raw.ready();
      if (rd.snapshot) m.storage.applySnapshot(rd.snapshot);
      m.storage.append(rd.entries);
      if (rd.hardState) m.storage.setHardState(rd.hardState);
      for (const msg of rd.messages) outbox.push(msg);
      m.applied += rd.committedEntries.length;
      m.raw.advance();
      moved = true;
    }
  }
  for (const msg of outbox) byId.get(msg.to)!.raw.step(msg);
  return moved || outbox.length > 0;
}

function settle(members: Member[]): void {
  for (let i = 0; i < 1000 && pump(members); i++);
}

function elect(members: Member[]): Member {
  members[0]!.raw.campaign();
  settle(members);
  return members[0]!;
}

function proposalsPerSecond(batch: number, total: number): { proposalsPerSec: number; batch: number; total: number } {
  const members = makeGroup(1, new Prng(1));
  const leader = elect(members);
  const data = new Uint8Array(64);
  const start = performance.now();
  let proposed = 0;
  const target = leader.applied + total;
  while (proposed < total) {
    for (let i = 0; i < batch && proposed < total; i++, proposed++) leader.raw.propose(data);
    settle(members);
  }
  const elapsedMs = performance.now() - start;
  if (leader.applied < target) throw new Error(`only ${leader.applied} of ${target} applied`);
  return { proposalsPerSec: Math.round((total / elapsedMs) * 1000), batch, total };
}

function idleTick(groups: number, rounds: number): { groups: number; tickOnlyUsPerRound: number; tickReadyDeliverUsPerRound: number } {
  const rand = new Prng(2);
  const all: Member[][] = [];
  for (let g = 0; g < groups; g++) {
    const members = makeGroup(g, rand);
    elect(members);
    all.push(members);
  }
  let start = performance.now();
  for (let r = 0; r < rounds; r++) for (const members of all) for (const m of members) m.raw.tick();
  const tickOnly = ((performance.now() - start) * 1000) / rounds;
  for (const members of all) settle(members);
  start = performance.now();
  for (let r = 0; r < rounds; r++) {
    for (const members of all) {
      for (const m of members) m.raw.tick();
      settle(members);
    }
  }
  const full = ((performance.now() - start) * 1000) / rounds;
  return { groups, tickOnlyUsPerRound: Math.round(tickOnly), tickReadyDeliverUsPerRound: Math.round(full) };
}

function main(): void {
  const results = {
    bench: 'raft-core',
    node: process.version,
    at: new Date().toISOString(),
    proposals: [proposalsPerSecond(1, 20_000), proposalsPerSecond(100, 200_000)],
    idleGroups: idleTick(1000, 50),
  };
  for (const p of results.proposals) {
    console.log(`3-node group, ${p.batch} proposal(s) per round: ${p.proposalsPerSec.toLocaleString('en-US')} committed proposals/s`);
  }
  const i = results.idleGroups;
  console.log(`1,000 idle groups x 3 nodes: tick() only ${i.tickOnlyUsPerRound} us/round; tick + Ready + deliver ${i.tickReadyDeliverUsPerRound} us/round`);
  const dir = join(process.cwd(), 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `raft-core-${results.at.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify(results, null, 2) + '\n');
  console.log(`wrote ${file}`);
}

main();
