// The routed-expert cache (issue 3): a fixed number of equal-sized slots (one K3 expert is
// 17,547,264 bytes of MXFP4, so a byte budget is a slot count), keyed by (layer, expert), with a
// pluggable eviction policy.
//
// The unit of work is a *layer step*: the router of one layer has chosen its experts (16 per
// token; a prefill chunk of T tokens asks for up to 16·T, duplicates collapse) and they are used
// together, so all of them must be resident at once. `step()` counts the hits, makes room for the
// misses in one batch (never evicting anything the current step asked for) and returns the
// experts the caller has to read; the caller reads them (in parallel) and `put()`s them.
// Caching never changes which experts are computed or in what order, only which reads happen.
//
// Policies see only the past plus the current step's router choices (online). The policies only
// benchmarks use (LRU, LFU, SLRU, Belady's offline optimum) and the trace replay are in
// bench/cache-policies.ts.
//
// Shipped policy: `CyclePolicy`. Each token walks the MoE layers in order, so an expert of layer l
// cannot be needed before layer l comes round again; every entry gets an estimated time to its
// next use = (layer steps until its layer is next visited) + (one full layer cycle) × (expected
// number of further visits before it is chosen, from an online, per-entry estimate of the chance
// that its layer's router picks it). The entry with the largest estimate goes first. On a cyclic
// scan through the layers this is MRU-by-layer, which is what beats LRU when the working set of
// one cycle does not fit (LRU evicts exactly the layer that comes next); bench/cache-replay.ts
// measures it against LRU, LFU and Belady on the real K3 routing trace.

/** Bytes of one routed K3 expert (MXFP4 gate/up/down with E8M0 scales). */
export const K3_EXPERT_BYTES = 17_547_264;

/** Slots of `bytes` bytes of expert memory (experts are equal-sized). */
export function slotsForBytes(bytes: number, expertBytes = K3_EXPERT_BYTES): number {
  return Math.floor(bytes / expertBytes);
}

const EXPERT_BITS = 65536; // experts per layer must stay below this

/** One integer key per (layer, expert). */
export function expertKey(layer: number, expert: number): number {
  return layer * EXPERT_BITS + expert;
}
export function keyLayer(key: number): number {
  return Math.floor(key / EXPERT_BITS);
}
export function keyExpert(key: number): number {
  return key % EXPERT_BITS;
}

/**
 * An eviction policy. The cache calls `beginStep` once per layer step, then `touch` for every
 * distinct expert of the step (hit or about to be inserted), `forget` when an entry leaves, and
 * `selectVictims` when it needs room.
 */
export interface EvictionPolicy {
  readonly name: string;
  /** A layer step begins; `experts` are its distinct router choices (current step only). */
  beginStep(layer: number, experts: readonly number[]): void;
  /** `key` is requested in the current step; `hit` says whether it was resident. */
  touch(key: number, hit: boolean): void;
  /** `key` was evicted (or dropped) from the cache. */
  forget(key: number): void;
  /** Choose `count` keys to evict among `candidates` (resident, not requested this step). */
  selectVictims(candidates: readonly number[], count: number): number[];
  /**
   * Whether `key` is unlikely to be used before its layer's next visit but one (a lookahead guess
   * may take its slot). A policy without an estimate leaves guesses only the free slots.
   */
  expendable?(key: number): boolean;
}

/** The `count` candidates with the lowest `score` (ties: earlier candidate first). */
export function lowestScores(candidates: readonly number[], count: number, score: (key: number) => number): number[] {
  const n = candidates.length;
  if (count <= 0) return [];
  if (count >= n) return candidates.slice();
  const s = new Float64Array(n);
  for (let i = 0; i < n; i++) s[i] = score(candidates[i]!);
  // Bounded max-heap of candidate indices: the root is the worst (highest score, then latest index)
  // of the `count` best so far.
  const heap = new Int32Array(count);
  let size = 0;
  const worse = (a: number, b: number): boolean => s[a]! > s[b]! || (s[a] === s[b] && a > b);
  const siftDown = (i: number): void => {
    for (;;) {
      const l = 2 * i + 1, r = l + 1;
      let m = i;
      if (l < size && worse(heap[l]!, heap[m]!)) m = l;
      if (r < size && worse(heap[r]!, heap[m]!)) m = r;
      if (m === i) return;
      const t = heap[i]!; heap[i] = heap[m]!; heap[m] = t;
      i = m;
    }
  };
  for (let i = 0; i < n; i++) {
    if (size < count) {
      let j = size++;
      heap[j] = i;
      while (j > 0) {
        const p = (j - 1) >> 1;
        if (!worse(heap[j]!, heap[p]!)) break;
        const t = heap[j]!; heap[j] = heap[p]!; heap[p] = t;
        j = p;
      }
    } else if (worse(heap[0]!, i)) {
      heap[0] = i;
      siftDown(0);
    }
  }
  const idx = Array.from(heap.subarray(0, size)).sort((a, b) => (s[a]! - s[b]!) || (a - b));
  return idx.map((i) => candidates[i]!);
}

/** Counts since construction (or `resetStats`). `hits + misses` = distinct experts over all steps. */
export interface CacheStats {
  steps: number;
  hits: number;
  misses: number;
  evictions: number;
}

/** A slot-counted (layer, expert) -> V cache; see the file comment for the step protocol. */
export class ExpertCache<V> {
  private readonly entries = new Map<number, V | undefined>();
  private current = new Set<number>(); // keys of the current step: never evicted during it
  private currentLayer = -1;
  readonly stats: CacheStats = { steps: 0, hits: 0, misses: 0, evictions: 0 };

  /**
   * @param slots   capacity in experts (bytes / expert bytes); 0 caches nothing
   * @param policy  eviction policy (one instance per cache: it keeps per-entry state)
   * @param onEvict called with each evicted value (e.g. to return its buffer to a pool)
   */
  constructor(
    readonly slots: number,
    readonly policy: EvictionPolicy,
    private readonly onEvict?: (layer: number, expert: number, value: V | undefined) => void,
  ) {
    if (!Number.isInteger(slots) || slots < 0) throw new RangeError(`expert cache slots must be a non-negative integer, got ${slots}`);
  }

  get size(): number {
    return this.entries.size;
  }

  has(layer: number, expert: number): boolean {
    return this.entries.has(expertKey(layer, expert));
  }

  /** The resident value, or undefined. Does not count as a use (use `step` for that). */
  get(layer: number, expert: number): V | undefined {
    return this.entries.get(expertKey(layer, expert));
  }

  /**
   * Begin a layer step: `experts` are the router's choices for `layer` (duplicates allowed, e.g.
   * a prefill chunk). Counts hits and misses, evicts what the policy chooses to make room for the
   * misses (never an expert of this step), and returns the distinct missing experts, in first
   * request order, that the caller must read and `put`. When a step asks for more distinct
   * experts than there are slots, the excess is returned too but `put` will not retain it.
   */
  step(layer: number, experts: Iterable<number>): number[] {
    const distinct: number[] = [];
    const seen = new Set<number>();
    for (const e of experts) {
      const k = expertKey(layer, e);
      if (!seen.has(k)) {
        seen.add(k);
        distinct.push(e);
      }
    }
    this.current = seen;
    this.currentLayer = layer;
    this.stats.steps++;
    this.policy.beginStep(layer, distinct);
    const missing: number[] = [];
    for (const e of distinct) {
      const k = expertKey(layer, e);
      const hit = this.entries.has(k);
      if (hit) this.stats.hits++;
      else {
        this.stats.misses++;
        missing.push(e);
      }
      this.policy.touch(k, hit);
    }
    const free = this.slots - this.entries.size;
    const need = Math.min(missing.length, this.slots) - free;
    if (need > 0) {
      const candidates: number[] = [];
      for (const k of this.entries.keys()) if (!seen.has(k)) candidates.push(k);
      for (const k of this.policy.selectVictims(candidates, Math.min(need, candidates.length))) this.evict(k);
    }
    // Reserve the slots now so a replay without values sees the same occupancy as a real run.
    for (const e of missing) {
      if (this.entries.size >= this.slots) break;
      this.entries.set(expertKey(layer, e), undefined);
    }
    return missing;
  }

  /** Store the value of an expert `step` reported missing. Returns false if it is not retained. */
  put(layer: number, expert: number, value: V): boolean {
    const k = expertKey(layer, expert);
    if (layer !== this.currentLayer || !this.current.has(k)) {
      throw new Error(`expert cache: put(${layer}, ${expert}) outside the step that requested it`);
    }
    if (!this.entries.has(k)) {
      if (this.entries.size >= this.slots) return false; // step larger than the cache
      this.entries.set(k, value);
      return true;
    }
    this.entries.set(k, value);
    return true;
  }

  /**
   * Lookahead (issue 9): reserve slots for guessed experts of an upcoming `layer` step, taking free
   * slots first, then victims the policy picks among entries that neither the current step nor
   * this guess uses and that it deems expendable. Not a use: no hit or miss is counted and the policy is not told. Returns the
   * guesses that got a slot, for the caller to read and `putGuess`.
   */
  reserveGuesses(layer: number, experts: Iterable<number>): number[] {
    const guess = new Set<number>();
    for (const e of experts) if (!this.entries.has(expertKey(layer, e))) guess.add(e);
    const keys = new Set([...guess].map((e) => expertKey(layer, e)));
    const free = this.slots - this.entries.size;
    const need = guess.size - free;
    if (need > 0 && this.policy.expendable) {
      // Only entries the policy expects to sit unused for a while: a guess that evicted a likely
      // hit would trade one read for another.
      const candidates: number[] = [];
      for (const k of this.entries.keys()) if (!this.current.has(k) && !keys.has(k) && this.policy.expendable(k)) candidates.push(k);
      for (const k of this.policy.selectVictims(candidates, Math.min(need, candidates.length))) this.evict(k);
    }
    const got: number[] = [];
    for (const e of guess) {
      if (this.entries.size >= this.slots) break;
      this.entries.set(expertKey(layer, e), undefined);
      got.push(e);
    }
    return got;
  }

  /** Store the value of a guess `reserveGuesses` gave a slot (false if it has been evicted since). */
  putGuess(layer: number, expert: number, value: V): boolean {
    const k = expertKey(layer, expert);
    if (!this.entries.has(k)) return false;
    this.entries.set(k, value);
    return true;
  }

  /** Drop one entry, if held (its read failed: it must not count as resident). */
  drop(layer: number, expert: number): void {
    const k = expertKey(layer, expert);
    if (this.entries.has(k)) this.evict(k);
  }

  /** Drop everything (stats and policy state are kept). */
  clear(): void {
    for (const k of [...this.entries.keys()]) this.evict(k);
  }

  private evict(k: number): void {
    const v = this.entries.get(k);
    this.entries.delete(k);
    this.policy.forget(k);
    this.stats.evictions++;
    this.onEvict?.(keyLayer(k), keyExpert(k), v);
  }
}

// ---------------------------------------------------------------------------------------------
// The shipped policy (the ones only benchmarks use: bench/cache-policies.ts). Time is counted in
// layer steps.

const DEFAULT_DECAY = 2 ** (-1 / 32);

/**
 * Layer-cycle aware, the shipped policy (see the file comment). `layers` is the length of the
 * layer cycle (any number above the largest layer index works; K3: 93). The chance p that the
 * router picks an entry at a visit of its layer is estimated online as
 *   (steps that chose it + prior·p0) / (visits of its layer since it was first chosen + prior),
 * counts decaying by `decay` per visit of the layer, with p0 the layer's mean share of chosen
 * experts. Estimated steps to the next use: d + layers·(1 − p)/p, d = steps until the layer is
 * next visited (1..layers). Evict the largest.
 *
 * Defaults (prior 2, half-life of 32 visits) were picked on the K3 trace: prior 0 matches Belady
 * exactly on the recorded (full-recompute) trace, where every expert a layer chose comes back at
 * its next visit; prior 2 gives up ~1% of that and gains ~60% relative at laptop size on the
 * decode view (recompute stripped), where a once-chosen expert is not a sure bet. `distanceOnly`
 * drops the estimate (p = 1): pure MRU-by-layer, kept for comparison.
 */
export class CyclePolicy implements EvictionPolicy {
  readonly name: string;
  private cursor = 0;
  private readonly visits: number[] = []; // per layer: visits so far
  private readonly chosenSum: number[] = []; // per layer: distinct experts chosen, summed over visits
  private readonly seenPerLayer: number[] = []; // per layer: distinct experts ever chosen
  private readonly chosen = new Map<number, number>(); // key -> decayed count of steps that chose it
  private readonly span = new Map<number, number>(); // key -> decayed visits since first chosen
  private readonly lastVisit = new Map<number, number>(); // key -> layer visit index at last update

  constructor(
    readonly layers: number,
    readonly options: {
      /** weight of the layer-wide prior p0 in the chance estimate (default 2) */
      prior?: number;
      /** per-visit decay of the counts (default 2^(-1/32): half-life of 32 visits) */
      decay?: number;
      name?: string;
      /** ignore frequency (p = 1): pure MRU by layer distance */
      distanceOnly?: boolean;
    } = {},
  ) {
    this.name = options.name ?? 'cycle';
  }

  beginStep(layer: number, experts: readonly number[]): void {
    this.cursor = layer;
    this.visits[layer] = (this.visits[layer] ?? 0) + 1;
    this.chosenSum[layer] = (this.chosenSum[layer] ?? 0) + experts.length;
  }

  /** Bring key's counts up to the current visit count of its layer (decay and span). */
  private advance(key: number, layer: number): void {
    const v = this.visits[layer] ?? 0;
    const last = this.lastVisit.get(key);
    if (last === undefined || last === v) return;
    const dv = v - last;
    const g = this.options.decay ?? DEFAULT_DECAY;
    const f = g === 1 ? 1 : g ** dv;
    this.chosen.set(key, this.chosen.get(key)! * f);
    // span accumulates one per visit, each decaying: s·g^dv + (1 + g + … + g^(dv−1))
    this.span.set(key, this.span.get(key)! * f + (g === 1 ? dv : (1 - f) / (1 - g)));
    this.lastVisit.set(key, v);
  }

  touch(key: number): void {
    const layer = keyLayer(key);
    if (!this.chosen.has(key)) {
      this.chosen.set(key, 1);
      this.span.set(key, 1);
      this.lastVisit.set(key, this.visits[layer] ?? 0);
      this.seenPerLayer[layer] = (this.seenPerLayer[layer] ?? 0) + 1;
      return;
    }
    this.advance(key, layer);
    this.chosen.set(key, this.chosen.get(key)! + 1);
  }

  forget(): void {}

  /** Online estimate of the chance the router picks `key` at a visit of its layer. */
  chance(key: number): number {
    if (this.options.distanceOnly) return 1;
    const layer = keyLayer(key);
    this.advance(key, layer);
    const prior = this.options.prior ?? 2;
    const vis = this.visits[layer] ?? 1;
    const p0 = Math.min(1, (this.chosenSum[layer] ?? 0) / vis / Math.max(1, this.seenPerLayer[layer] ?? 1));
    const c = this.chosen.get(key) ?? 0;
    const s = this.span.get(key) ?? 0;
    return (c + prior * p0) / (s + prior || 1);
  }

  /** Less than an even chance of being chosen at its layer's next visit (expected next use beyond one cycle). */
  expendable(key: number): boolean {
    return this.expectedNextUse(key) > this.layers;
  }

  /** Estimated layer steps until `key` is next used. */
  expectedNextUse(key: number): number {
    const L = this.layers;
    const d = ((keyLayer(key) - this.cursor - 1 + 2 * L) % L) + 1;
    const p = Math.max(this.chance(key), 1e-9);
    return d + (L * (1 - p)) / p;
  }

  selectVictims(c: readonly number[], n: number): number[] {
    return lowestScores(c, n, (k) => -this.expectedNextUse(k));
  }
}
