// The expert-cache eviction policies only benchmarks and tests use, beside the shipped one
// (src/store/expert-cache.ts CyclePolicy): plain LRU, aged LFU, segmented LRU, Belady's offline
// optimum (the upper bound: it needs the whole future), and the replay of a routing trace through
// an ExpertCache. bench/cache-replay.ts compares them on the real K3 routing trace. Time is
// counted in layer steps (`now` increments at each beginStep).

import { ExpertCache, expertKey, lowestScores, type CacheStats, type EvictionPolicy } from '../src/store/expert-cache.js';

/** Least recently used: evict the entry whose last step is oldest. */
export class LruPolicy implements EvictionPolicy {
  readonly name: string = 'lru';
  protected now = 0;
  protected readonly last = new Map<number, number>();
  beginStep(): void {
    this.now++;
  }
  touch(key: number, _hit?: boolean): void {
    this.last.set(key, this.now);
  }
  forget(key: number): void {
    this.last.delete(key);
  }
  selectVictims(c: readonly number[], n: number): number[] {
    return lowestScores(c, n, (k) => this.last.get(k) ?? 0);
  }
}

/**
 * Least frequently used with exponential aging: each use adds 1 to a count that halves every
 * `halfLife` layer steps (Infinity: no aging, i.e. "pin the hot experts" learnt online). Counts
 * survive eviction, so a returning expert keeps its history. Ties: least recently used first.
 */
export class LfuPolicy implements EvictionPolicy {
  readonly name: string;
  private now = 0;
  private readonly logCount = new Map<number, number>(); // log2(count) at time `at`
  private readonly at = new Map<number, number>();
  constructor(readonly halfLife = 8 * 92) {
    this.name = halfLife === Infinity ? 'lfu-noaging' : 'lfu';
  }
  private value(k: number): number {
    const lc = this.logCount.get(k);
    if (lc === undefined) return -Infinity;
    return this.halfLife === Infinity ? lc : lc - (this.now - this.at.get(k)!) / this.halfLife;
  }
  beginStep(): void {
    this.now++;
  }
  touch(key: number): void {
    const v = this.value(key);
    this.logCount.set(key, Math.log2((v === -Infinity ? 0 : 2 ** v) + 1));
    this.at.set(key, this.now);
  }
  forget(): void {}
  selectVictims(c: readonly number[], n: number): number[] {
    // Recency as a tiny tie-break (a step is worth far less than any count difference).
    return lowestScores(c, n, (k) => this.value(k) + 1e-9 * this.at.get(k)!);
  }
}

/**
 * Segmented LRU (a 2Q-style scan-resistant LRU): entries hit again move to a protected segment
 * of at most `protectedShare` of the slots; victims come from the probationary segment first,
 * least recently used first.
 */
export class SlruPolicy extends LruPolicy {
  override readonly name = 'slru';
  private readonly prot = new Set<number>();
  constructor(private readonly slots: number, private readonly protectedShare = 0.8) {
    super();
  }
  override touch(key: number, hit: boolean): void {
    super.touch(key);
    if (hit && !this.prot.has(key)) {
      this.prot.add(key);
      const cap = Math.floor(this.slots * this.protectedShare);
      if (this.prot.size > cap) {
        // Demote the least recently used protected entries back to probation.
        const over = lowestScores([...this.prot], this.prot.size - cap, (k) => this.last.get(k) ?? 0);
        for (const k of over) this.prot.delete(k);
      }
    }
  }
  override forget(key: number): void {
    super.forget(key);
    this.prot.delete(key);
  }
  override selectVictims(c: readonly number[], n: number): number[] {
    const big = 1e12;
    return lowestScores(c, n, (k) => (this.prot.has(k) ? big : 0) + (this.last.get(k) ?? 0));
  }
}

/**
 * Belady's optimum (offline): evict the entry whose next use is farthest in the future. Built
 * from the whole sequence of layer steps the cache will see, in order; for comparison only.
 */
export class BeladyPolicy implements EvictionPolicy {
  readonly name = 'belady';
  private t = -1;
  private readonly uses = new Map<number, number[]>(); // key -> steps that use it, ascending
  private readonly ptr = new Map<number, number>();
  constructor(private readonly steps: readonly { layer: number; experts: readonly number[] }[]) {
    steps.forEach((s, t) => {
      for (const e of s.experts) {
        const k = expertKey(s.layer, e);
        let u = this.uses.get(k);
        if (!u) this.uses.set(k, (u = []));
        if (u[u.length - 1] !== t) u.push(t);
      }
    });
  }
  beginStep(layer: number): void {
    this.t++;
    if (this.steps[this.t]?.layer !== layer) throw new Error(`belady: step ${this.t} is layer ${this.steps[this.t]?.layer}, cache saw ${layer}`);
  }
  touch(): void {}
  forget(): void {}
  /** First step after the current one that uses `key` (Infinity: never). */
  nextUse(key: number): number {
    const u = this.uses.get(key);
    if (!u) return Infinity;
    let i = this.ptr.get(key) ?? 0;
    while (i < u.length && u[i]! <= this.t) i++;
    this.ptr.set(key, i);
    return i < u.length ? u[i]! : Infinity;
  }
  selectVictims(c: readonly number[], n: number): number[] {
    return lowestScores(c, n, (k) => -this.nextUse(k));
  }
}

// ---------------------------------------------------------------------------------------------
// Replaying a routing trace.

/** One layer step of a trace: the layer and its requests in order (duplicates kept). */
export interface TraceStep {
  layer: number;
  experts: number[];
}

/**
 * Group a flat (layer, expert) request sequence (int32 pairs) into layer steps: consecutive
 * requests of the same layer form one step (K3: 16 per token, a whole recomputed prefix per step).
 */
export function groupSteps(pairs: Int32Array): TraceStep[] {
  const steps: TraceStep[] = [];
  let cur: TraceStep | undefined;
  for (let i = 0; i + 1 < pairs.length; i += 2) {
    const layer = pairs[i]!, expert = pairs[i + 1]!;
    if (!cur || cur.layer !== layer) steps.push((cur = { layer, experts: [] }));
    cur.experts.push(expert);
  }
  return steps;
}

export interface ReplayResult extends CacheStats {
  policy: string;
  slots: number;
  /** hits / (hits + misses): share of distinct per-step expert requests served without a read. */
  hitRate: number;
}

/** Replay `steps` through an ExpertCache of `slots` slots with `policy` (no values stored). */
export function replay(steps: readonly TraceStep[], slots: number, policy: EvictionPolicy): ReplayResult {
  const cache = new ExpertCache<undefined>(slots, policy);
  for (const s of steps) cache.step(s.layer, s.experts);
  const { hits, misses } = cache.stats;
  return { policy: policy.name, slots, ...cache.stats, hitRate: hits + misses ? hits / (hits + misses) : 0 };
}
