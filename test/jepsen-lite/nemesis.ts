/**
 * The nemesis: one fault at a time, seeded. Each fault is injected, held for 1-4 s (one in four for 6-9 s, past the
 * misfire threshold), healed; then the nemesis
 * waits until every node answers /readyz (the recovery time) and keeps quiet for 2-5 s before the next one.
 *
 * Kinds: kill (kill -9, restart), pause (SIGSTOP, SIGCONT), clock (restart with PUNCTUAL_TEST_CLOCK_OFFSET_MS, restart
 * without), and with two or more nodes the peer-network faults through the proxies: partition-halves,
 * partition-leader (isolate the node leading most shards), partition-bridge, partition-one-way, net-delay,
 * net-reset. slow-disk is not available: the storage layer has no fault-injection hook (nothing in the public
 * contract slows its fsyncs), so it is reported as unsupported rather than faked.
 */
import { limits } from '../../src/core/limits.js';
import { Prng } from '../../src/core/prng.js';
import { harnessNowMs, sleepMs, type FaultWindow } from './history.js';
import { clusterShards, waitAllReady, type NodeProcess } from './nodes.js';
import type { ProxyMesh } from './proxy.js';

export const processKinds = ['kill', 'pause', 'clock'] as const;
export const networkKinds = ['partition-halves', 'partition-leader', 'partition-bridge', 'partition-one-way', 'net-delay', 'net-reset'] as const;
export const unsupportedKinds = ['slow-disk'] as const;
const longHoldMs = limits.misfireThresholdMs + 1_000;
export type FaultKind = (typeof processKinds)[number] | (typeof networkKinds)[number];

export interface NemesisPlan {
  kinds: FaultKind[];
  /** Requested kinds that cannot run here, with the reason (reported). */
  skipped: Array<{ kind: string; reason: string }>;
}

/** Resolves --nemesis (none | all | a comma list) for a cluster of `nodes`. */
export function planNemesis(spec: string, nodes: number): NemesisPlan {
  const all: string[] = [...processKinds, ...networkKinds, ...unsupportedKinds];
  const asked = spec === 'all' ? all : spec === 'none' ? [] : spec.split(',').map((s) => s.trim());
  const plan: NemesisPlan = { kinds: [], skipped: [] };
  for (const kind of asked) {
    if (!all.includes(kind)) throw new Error(`--nemesis: unknown fault ${JSON.stringify(kind)} (known: none, all, ${all.join(', ')})`);
    if ((unsupportedKinds as readonly string[]).includes(kind)) {
      plan.skipped.push({ kind, reason: 'the storage layer cannot inject slow disks (no hook in the public contract)' });
    } else if ((networkKinds as readonly string[]).includes(kind) && nodes < 2) {
      plan.skipped.push({ kind, reason: 'a single node has no peer links' });
    } else plan.kinds.push(kind as FaultKind);
  }
  return plan;
}

export interface NemesisDeps {
  nodes: readonly NodeProcess[];
  mesh: ProxyMesh | null;
  rng: Prng;
  /** Every positive clock offset used is reported as the early-delivery tolerance. */
  onClockOffset(offsetMs: number): void;
}

interface Injected {
  detail: string;
  heal(): Promise<void>;
}

export class Nemesis {
  readonly windows: FaultWindow[] = [];
  private stopped = false;

  constructor(
    private readonly plan: NemesisPlan,
    private readonly deps: NemesisDeps,
  ) {}

  /** Injects faults until endMs (the last one is healed by endMs + its hold). */
  async run(endMs: number, warmupMs = 2_000): Promise<void> {
    if (this.plan.kinds.length === 0) return;
    const rng = this.deps.rng;
    await sleepMs(warmupMs);
    while (!this.stopped && harnessNowMs() < endMs - 2_000) {
      const kind = this.plan.kinds[rng.int(this.plan.kinds.length)];
      const startMs = harnessNowMs();
      const injected = await this.inject(kind);
      // One fault in four is held past the misfire threshold, so recurring jobs really misfire.
      await sleepMs(rng.int(4) === 0 ? longHoldMs + rng.int(3_001) : 1_000 + rng.int(3_001));
      await injected.heal();
      const window: FaultWindow = { kind, detail: injected.detail, startMs, healMs: harnessNowMs(), recoveredMs: null };
      this.windows.push(window);
      window.recoveredMs = await waitAllReady(this.deps.nodes, 30_000, 50);
      await sleepMs(2_000 + rng.int(3_001));
    }
  }

  stop(): void {
    this.stopped = true;
  }

  private pickNode(): NodeProcess {
    const up = this.deps.nodes.filter((n) => n.status === 'up');
    const from = up.length > 0 ? up : this.deps.nodes;
    return from[this.deps.rng.int(from.length)];
  }

  private async inject(kind: FaultKind): Promise<Injected> {
    const rng = this.deps.rng;
    switch (kind) {
      case 'kill': {
        const n = this.pickNode();
        await n.kill9();
        return { detail: n.spec.id, heal: async () => n.start(n.clockOffsetMs) };
      }
      case 'pause': {
        const n = this.pickNode();
        n.pause();
        return { detail: n.spec.id, heal: async () => n.resume() };
      }
      case 'clock': {
        const n = this.pickNode();
        const offsetMs = (rng.int(2) === 0 ? -1 : 1) * (200 + rng.int(1_301));
        this.deps.onClockOffset(offsetMs);
        await n.stop();
        n.start(offsetMs);
        return { detail: `${n.spec.id} ${offsetMs > 0 ? '+' : ''}${offsetMs} ms`, heal: async () => this.restart(n, 0) };
      }
      default:
        return this.injectNetwork(kind);
    }
  }

  private async restart(n: NodeProcess, offsetMs: number): Promise<void> {
    await n.stop();
    n.start(offsetMs);
  }

  private async injectNetwork(kind: FaultKind): Promise<Injected> {
    const mesh = this.deps.mesh;
    if (!mesh) throw new Error(`${kind} needs the proxy mesh`);
    const heal = async (): Promise<void> => mesh.heal();
    const ids = shuffle([...mesh.nodeIds], this.deps.rng);
    switch (kind) {
      case 'partition-halves': {
        const cut = 1 + this.deps.rng.int(ids.length - 1);
        const groups = [ids.slice(0, cut), ids.slice(cut)];
        mesh.partition(groups);
        return { detail: groups.map((g) => g.join('+')).join(' | '), heal };
      }
      case 'partition-leader': {
        const leader = (await this.leaderOfMostShards()) ?? ids[0];
        mesh.partition([[leader], ids.filter((id) => id !== leader)]);
        return { detail: `isolate ${leader}`, heal };
      }
      case 'partition-bridge': {
        // Two sides that cannot talk, one bridge node that talks to both.
        const [bridge, ...rest] = ids;
        const half = Math.ceil(rest.length / 2);
        const left = rest.slice(0, half);
        const right = rest.slice(half);
        for (const a of ids) for (const b of ids) {
          if (a === b) continue;
          const cut = (left.includes(a) && right.includes(b)) || (right.includes(a) && left.includes(b));
          mesh.link(a, b).set({ mode: cut ? 'blackhole' : 'pass', delayMs: 0 });
        }
        return { detail: `${left.join('+')} | ${right.join('+')} via ${bridge}`, heal };
      }
      case 'partition-one-way': {
        mesh.oneWay(ids[0]);
        return { detail: `${ids[0]} sends, hears nothing`, heal };
      }
      case 'net-delay': {
        const delayMs = 20 + this.deps.rng.int(181);
        mesh.setAll({ mode: 'pass', delayMs });
        return { detail: `${delayMs} ms on every link`, heal };
      }
      case 'net-reset':
        mesh.setAll({ mode: 'reset', delayMs: 0 });
        return { detail: 'reset every peer connection', heal };
      default:
        throw new Error(`not a network fault: ${kind}`);
    }
  }

  private async leaderOfMostShards(): Promise<string | null> {
    for (const n of this.deps.nodes) {
      if (n.status !== 'up') continue;
      const shards = await clusterShards(n.url);
      if (!shards) continue;
      const counts = new Map<string, number>();
      for (const s of shards) if (s.leader) counts.set(s.leader, (counts.get(s.leader) ?? 0) + 1);
      const best = [...counts].sort((a, b) => b[1] - a[1])[0];
      if (best) return best[0];
    }
    return null;
  }
}

function shuffle<T>(a: T[], rng: Prng): T[] {
  for (let i = a.length - 1; i > 0; i--) {
    const j = rng.int(i + 1);
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

/** Brings every node back: continued, started, clock offset 0, every link passing. */
export async function healAll(nodes: readonly NodeProcess[], mesh: ProxyMesh | null): Promise<void> {
  mesh?.heal();
  for (const n of nodes) {
    if (n.status === 'paused') n.resume();
    if (n.status === 'down') n.start(0);
    else if (n.clockOffsetMs !== 0) {
      await n.stop();
      n.start(0);
    }
  }
}
