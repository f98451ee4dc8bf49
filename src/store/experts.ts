// Routed experts: a fixed number of slots of one expert each (expert-cache.ts decides which
// expert a slot holds), filled with parallel reads the moment a router has chosen, and, by
// lookahead, with guesses for the next MoE layer before its router has run. Which experts are
// computed, and on what, never depends on the slots; only which reads happen, and when, does.

import type { ModelConfig } from '../checkpoint/config.js';
import { allSettledOrThrow } from '../util/settle.js';
import { CyclePolicy, ExpertCache, expertKey, keyLayer } from './expert-cache.js';
import { pieceView, type ExpertPart, type Range } from './layout.js';
import { residentMat, type GatedMats } from './mat.js';
import type { StoreParts } from './parts.js';

/** One batch of experts lent at once: each expert with its gate, up and down matrices. */
export type ExpertBatch = { expert: number; w: GatedMats }[];
export type UseExperts = (batch: ExpertBatch) => Promise<void>;

/** Where each part (gate, up, down; data then scale) of an expert goes inside its slot. */
interface ExpertPlace { parts: ExpertPart[]; coalesced: Range | null; offsets: number[] }

export class ExpertSlots {
  /** Lookahead expert prefetch on (guesses decide only what is read early, never what is computed). */
  lookahead = true;
  /** Test hook: replaces each lookahead guess (e.g. with experts sure to be wrong). */
  guessOverride: ((layer: number, guessed: number[]) => number[]) | null = null;
  private readonly cache: ExpertCache<number>;
  private readonly slots: Uint8Array[] = [];
  private readonly freeSlots: number[] = [];
  private readonly places = new Map<number, ExpertPlace>();
  /** Reads into each expert slot, chained: a slot is refilled only after its last read settled. */
  private readonly slotBusy: Promise<void>[] = [];
  /** Expert reads still in flight, by expertKey: a hit on one waits for it. */
  private readonly pending = new Map<number, Promise<void>>();
  /** Experts whose read failed and that no use has been told of yet (by expertKey). */
  private readonly failedReads = new Set<number>();
  /** Lookahead guesses not yet settled by their layer's router, by expertKey. */
  private readonly guessed = new Set<number>();
  /** The last layer begun fits the cache in one batch (only then are guesses read ahead). */
  private oneBatch = false;
  /** The handles lent for the expert each slot holds (built on its first use there). */
  private readonly slotMats: ({ key: number; w: GatedMats } | undefined)[] = [];

  constructor(private readonly s: StoreParts, private readonly cfg: ModelConfig) {
    this.cache = new ExpertCache<number>(s.plan.expertSlots, new CyclePolicy(cfg.numLayers), (l, e, slot) => {
      this.pending.delete(expertKey(l, e));
      this.failedReads.delete(expertKey(l, e));
      if (slot !== undefined) this.freeSlots.push(slot);
    });
  }

  /** Every slot of the plan has its buffer. */
  get buffersMade(): boolean {
    return this.slots.length >= this.s.plan.expertSlots;
  }

  /** Where an expert's parts go in its slot: one read when they lie in one run of the file of exactly an expert's size. */
  private slotLayout(parts: ExpertPart[]): { coalesced: Range | null; offsets: number[] } {
    const ranges = parts.flatMap((p) => (p.scale ? [p.data, p.scale] : [p.data]));
    const file = ranges[0]!.file;
    const lo = Math.min(...ranges.map((r) => r.offset));
    const hi = Math.max(...ranges.map((r) => r.offset + r.length));
    if (ranges.every((r) => r.file === file) && hi - lo === this.s.layout.expertBytes) {
      // One contiguous run per expert (K3 ships them so): one read, parts at their file offsets.
      return { coalesced: { file, offset: lo, length: hi - lo }, offsets: ranges.map((r) => r.offset - lo) };
    }
    let o = 0;
    return { coalesced: null, offsets: ranges.map((r) => ((o += r.length), o - r.length)) };
  }

  /** An expert's parts and where they go in its slot (worked out once per expert). */
  private expertPlace(l: number, e: number): ExpertPlace {
    const key = l * 65536 + e;
    let p = this.places.get(key);
    if (!p) {
      const parts = this.s.layout.experts(l, e);
      p = { parts, ...this.slotLayout(parts) };
      this.places.set(key, p);
    }
    return p;
  }

  private async readExpert(l: number, e: number, slot: Uint8Array): Promise<void> {
    const { parts, coalesced, offsets } = this.expertPlace(l, e);
    if (coalesced) await this.s.reads.range(coalesced, slot.subarray(0, coalesced.length));
    else {
      const ranges = parts.flatMap((p) => (p.scale ? [p.data, p.scale] : [p.data]));
      await allSettledOrThrow(ranges.map((r, i) => this.s.reads.range(r, slot.subarray(offsets[i]!, offsets[i]! + r.length))));
    }
    this.s.stats.expertBytesRead += this.s.layout.expertBytes;
  }

  private expertWeights(l: number, e: number, slot: Uint8Array): GatedMats {
    const { parts, offsets } = this.expertPlace(l, e);
    let k = 0;
    const mats = parts.map((p) => {
      const dataOff = offsets[k++]!;
      const view = pieceView({ ...p, scale: null }, slot.subarray(dataOff, dataOff + p.data.length), `expert ${l}.${e}.${p.mat}`);
      if (p.scale) {
        const so = offsets[k++]!;
        view.scale = slot.subarray(so, so + p.scale.length);
        view.scaleDtype = p.scaleDtype;
      }
      return residentMat(view);
    });
    return { gate: mats[0]!, up: mats[1]!, down: mats[2]! };
  }

  private slot(i: number): Uint8Array {
    const { plan, layout, alloc } = this.s;
    if (this.slots.length === 0 && i === 0) {
      // Every slot of the plan at the first one's use (planned memory; pages nobody wrote cost no
      // RSS): no later step allocates expert memory (buffersMade). Slots are handed out in order.
      for (let k = 0; k < plan.expertSlots; k++) this.slots.push(alloc(layout.expertBytes));
      for (let k = plan.expertSlots - 1; k > 0; k--) this.freeSlots.push(k);
    }
    let s = this.slots[i];
    if (!s) {
      s = alloc(layout.expertBytes);
      this.slots[i] = s;
    }
    return s;
  }

  /** Start reading expert (l, e) into a free slot now; the cache maps it to that slot. */
  private startRead(l: number, e: number, guess: boolean, put: (slot: number) => boolean): void {
    const si = this.freeSlots.pop() ?? this.slots.length;
    const buf = this.slot(si);
    if (!put(si)) {
      this.freeSlots.push(si);
      return;
    }
    this.s.trace()?.({ kind: 'read-expert', layer: l, expert: e, guess });
    const read = (this.slotBusy[si] ?? Promise.resolve()).catch(() => {}).then(() => this.readExpert(l, e, buf));
    this.slotBusy[si] = read;
    const key = expertKey(l, e);
    this.pending.set(key, read);
    this.failedReads.delete(key);
    // A failed guess that nobody uses must not surface as an unhandled rejection; a use awaits it.
    read.then(
      () => this.pending.get(key) === read && this.pending.delete(key),
      () => this.pending.get(key) === read && this.failedReads.add(key),
    );
  }

  /** Count layer l's lookahead guesses against what its router chose. */
  private settleGuesses(l: number, chosen: number[]): void {
    for (const e of chosen) if (this.guessed.delete(expertKey(l, e))) this.s.stats.guessHits++;
    for (const k of [...this.guessed]) if (keyLayer(k) === l) this.guessed.delete(k);
  }

  /** Cache step for one batch of layer l and the start of its missing reads. */
  private startBatch(l: number, part: number[]): { part: number[]; missing: Set<number> } {
    const missing = this.cache.step(l, part);
    this.s.stats.expertMisses += missing.length;
    this.s.stats.expertHits += part.length - missing.length;
    for (const e of missing) this.startRead(l, e, false, (si) => this.cache.put(l, e, si));
    return { part, missing: new Set(missing) };
  }

  private weightsOf(l: number, e: number): { expert: number; w: GatedMats } {
    const si = this.cache.get(l, e);
    if (si === undefined) throw new Error(`expert ${l}.${e} not resident after its read`);
    this.s.trace()?.({ kind: 'use-expert', layer: l, expert: e });
    const key = expertKey(l, e), held = this.slotMats[si];
    if (held?.key === key) return { expert: e, w: held.w };
    const w = this.expertWeights(l, e, this.slot(si));
    this.slotMats[si] = { key, w };
    return { expert: e, w };
  }

  /** Lend one started batch: the experts already resident first, the rest once their reads are in. */
  private async lendBatch(l: number, b: { part: number[]; missing: Set<number> }, use: UseExperts): Promise<void> {
    const ready = b.part.filter((e) => !b.missing.has(e) && !this.pending.has(expertKey(l, e)));
    const later = b.part.filter((e) => !ready.includes(e));
    if (ready.length > 0) await use(ready.map((e) => this.weightsOf(l, e)));
    if (later.length === 0) return;
    const t0 = performance.now();
    try {
      await Promise.all(later.map((e) => this.pending.get(expertKey(l, e))));
    } catch (err) {
      // The use that is told of a failed read drops the expert: the next step reads it anew.
      for (const e of later) if (this.failedReads.has(expertKey(l, e))) this.cache.drop(l, e);
      throw err;
    }
    this.s.stats.ioWaitMs += performance.now() - t0;
    await use(later.map((e) => this.weightsOf(l, e)));
  }

  /** See WeightStore.beginExperts. */
  begin(l: number, ids: number[]): ((use: UseExperts) => Promise<void>) & { ready: boolean } {
    this.s.trace()?.({ kind: 'routed', layer: l, experts: ids });
    this.settleGuesses(l, ids);
    const size = Math.max(1, this.s.plan.expertSlots);
    this.oneBatch = ids.length <= size;
    const first = this.startBatch(l, ids.slice(0, size));
    const lend = async (use: UseExperts): Promise<void> => {
      for (let i = 0, b = first; ; b = this.startBatch(l, ids.slice(i, i + size))) {
        await this.lendBatch(l, b, use);
        i += size;
        if (i >= ids.length) return;
      }
    };
    // in memory already: one batch, nothing missing, no read of an earlier step still in flight
    const ready = this.oneBatch && first.missing.size === 0 && first.part.every((e) => !this.pending.has(expertKey(l, e)));
    return Object.assign(lend, { ready });
  }

  /** See WeightStore.lookaheadLayer. */
  lookaheadLayer(l: number): number | null {
    const { plan } = this.s;
    if (!this.lookahead || plan.expertSlots >= plan.expertsTotal) return null;
    for (let n = l + 1; n < this.cfg.numLayers; n++) if (this.cfg.layers[n]!.ffn === 'moe') return n;
    return null;
  }

  /** See WeightStore.guessExperts. */
  guess(l: number, guess: number[]): void {
    // A layer lent in several batches evicts its own earlier batches; guesses would not survive it.
    if (!this.oneBatch) return;
    const ids = this.guessOverride ? this.guessOverride(l, guess) : guess;
    for (const e of ids) this.guessed.add(expertKey(l, e));
    this.s.stats.guesses += ids.length;
    for (const e of this.cache.reserveGuesses(l, ids)) {
      this.s.stats.guessReads++;
      this.startRead(l, e, true, (si) => this.cache.putGuess(l, e, si));
    }
  }

  /** Whether the slots hold every expert, so that preload reads them all. */
  get holdAll(): boolean {
    return this.s.plan.expertSlots > 0 && this.s.plan.expertSlots >= this.s.plan.expertsTotal;
  }

  /** Read every expert of every MoE layer (holdAll); `report` after each layer. */
  async preload(report: () => void): Promise<void> {
    const all = Array.from({ length: this.cfg.moe.experts }, (_, e) => e);
    for (let l = 0; l < this.cfg.numLayers; l++) {
      if (this.cfg.layers[l]!.ffn === 'moe') await this.begin(l, all)(async () => {});
      report();
    }
  }

  /** Wait for every slot's last read to settle. */
  async drain(): Promise<void> {
    await Promise.allSettled(this.slotBusy);
  }
}
