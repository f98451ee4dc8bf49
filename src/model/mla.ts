// Multi-head Latent Attention in the absorbed ("latent") form (docs/spec/ARCHITECTURE.md §1.7.5): the cache
// holds, per position, only the normalized latent c (Lk) and the shared rope key (dr), never
// per-head keys and values. Prefill appends a chunk's latents first and then attends token by
// token exactly as decode does, so every position's numbers are the same either way.

import { rowSlice, type Mat } from '../store/mat.js';
import type { Compute } from '../graph/compute.js';
import { graphFor, readResident, type Graph } from '../graph/graph.js';
import type { WeightView } from '../formats/weight.js';
import { applyRope, type Rope } from './rope.js';
import { inputConstants, type BlockInput } from './block-input.js';

export { mlaSoftmaxRef, sigmoidGateRef } from '../graph/reference.js';
import type { F32Alloc } from './kda.js';

export interface MlaParams {
  heads: number;
  nopeDim: number;
  ropeDim: number;
  vDim: number;
  kvLoraRank: number;
  /** Softmax scale τ (192^-1/2, times the YaRN factor for K2). */
  scale: number;
  latentNormEps: number;
  rope: Rope | null;
}

export interface MlaWeights {
  /** q-LoRA pair with its norm, or a direct q_proj. */
  q: { a: Mat; norm: Float32Array; b: Mat } | { direct: Mat };
  kva: Mat;
  kvaNorm: Float32Array;
  /** kv_b_proj, read by rows per head: used whole. */
  kvb: Mat;
  o: Mat;
  /** K3 sigmoid output gate g_proj [H·dv, D], or null. */
  gate: Mat | null;
}

/**
 * Latent cache of one MLA layer: [cap, Lk] latents and [cap, dr] rope keys.
 *
 * With an allocator (`alloc`, e.g. KernelGroup.allocF32 when the model runs with the
 * WebAssembly kernels), lat and rope are two views of one allocation, so they share one kernel
 * memory and the fused attention kernels read them in place. The kernel arena cannot free: the
 * cache is allocated for the planned context up front (SequenceState passes ctx), and growing past
 * it doubles the capacity into a new allocation (the old one is wasted; growth past the plan is
 * the exception). Without an allocator: plain arrays.
 */
/** Floats the cache holds per position: the latent [Lk] and the rope key [dr]. */
export function mlaFloatsPerPosition(Lk: number, dr: number): number {
  return Lk + dr;
}

export class MlaCache {
  lat: Float32Array;
  rope: Float32Array;
  length = 0;
  constructor(
    readonly Lk: number,
    readonly dr: number,
    capacity = 64,
    private readonly alloc: F32Alloc | null = null,
  ) {
    [this.lat, this.rope] = this.arrays(capacity);
  }

  private arrays(cap: number): [Float32Array, Float32Array] {
    if (!this.alloc) return [new Float32Array(cap * this.Lk), new Float32Array(cap * this.dr)];
    const buf = this.alloc(cap * mlaFloatsPerPosition(this.Lk, this.dr));
    return [buf.subarray(0, cap * this.Lk), buf.subarray(cap * this.Lk)];
  }

  reserve(n: number): void {
    const cap = this.lat.length / this.Lk;
    if (n <= cap) return;
    let c = Math.max(cap, 1);
    while (c < n) c *= 2;
    const [lat, rope] = this.arrays(c);
    lat.set(this.lat.subarray(0, this.length * this.Lk));
    rope.set(this.rope.subarray(0, this.length * this.dr));
    this.lat = lat;
    this.rope = rope;
  }
}

/** One sequence's rows of a batched MLA call: `T` consecutive rows appending to `cache`. */
export interface MlaPart {
  T: number;
  cache: MlaCache;
}

/**
 * MLA for T tokens of normalized input x [T, D] at positions cache.length …; appends to the cache.
 * Given parts (several sequences' rows back to back), the projections run once over all rows and
 * each part attends over its own cache; each row's numbers are as if alone. One graph
 * (graph/graph.ts): the block's input, the products of x, the latents appended, q_a's norm and
 * q_b, attend's steps per token, the output gate, o_proj.
 */
export async function mlaForward(c: Compute, p: MlaParams, w: MlaWeights, xin: Float32Array | BlockInput, T: number, cache: MlaCache | readonly MlaPart[]): Promise<Float32Array> {
  const parts = cache instanceof MlaCache ? [{ T, cache }] : cache;
  const { heads: H, ropeDim: dr, vDim: dv, kvLoraRank: Lk } = p;
  const dq = p.nopeDim + dr;
  const qa = 'direct' in w.q ? null : w.q;
  const first = qa ? qa.a : (w.q as { direct: Mat }).direct;
  await readResident([first, w.kva, ...(w.gate ? [w.gate] : []), ...(qa ? [qa.b] : []), w.kvb, w.o]); // (forward order: checkpoint/names.ts trunkOrder)
  for (const { T: n, cache: k } of parts) k.reserve(k.length + n); // (before the graph: a cache that grows is allocated anew)
  const near = chainScoreBytes(H, parts) <= MLA_CHAIN_SCORE_BYTES ? parts.flatMap(({ cache: k }) => [k.lat, k.rope]) : [];
  const g = graphFor(c, near, [w.kvaNorm, ...(qa ? [qa.norm] : []), ...inputConstants(xin)]);
  try {
    const x = g.input(xin);
    const q0 = g.matmul(first, x, T), a = g.matmul(w.kva, x, T), gate = w.gate ? g.matmul(w.gate, x, T) : null;
    g.next();
    const rows = rowStarts(parts);
    const starts = parts.map(({ T: n, cache: k }, i) => {
      const p0 = k.length;
      g.mlaAppend(a.subarray(rows[i]! * (Lk + dr)), n, Lk, dr, w.kvaNorm, p.latentNormEps, k.lat.subarray(p0 * Lk), k.rope.subarray(p0 * dr));
      return p0;
    });
    if (p.rope) ropeKeys(g.next(), p.rope, dr, parts, starts);
    const qn = qa ? g.rmsNorm(q0, T, qa.a.rows, qa.norm, p.latentNormEps) : null;
    const q = qa ? g.next().matmul(qa.b, qn!, T) : q0;
    g.next();
    const out = g.alloc(T * H * dv);
    const attendAll = (ops: Graph, kvb: WeightView): void => parts.forEach(({ T: n, cache: k }, i) => {
      const r = rows[i]!;
      attend(ops, p, kvb, q.subarray(r * H * dq, (r + n) * H * dq), n, starts[i]!, k, out.subarray(r * H * dv, (r + n) * H * dv));
    });
    g.visitWhole(w.kvb, attendAll);
    if (gate) g.next().sigmoidGate(out, gate, T * H * dv);
    const y = g.next().matmul(w.o, out, T, new Float32Array(T * w.o.rows));
    await g.run();
    parts.forEach(({ T: n, cache: k }, i) => (k.length = starts[i]! + n));
    return y;
  } finally {
    g.done();
  }
}

/** The most bytes of scores and exponentials an MLA graph keeps in kernel memory (16 MiB: 87K
 *  positions of 16 heads); past it, the block runs on the host (the arena's headroom for temporaries is bounded). */
const MLA_CHAIN_SCORE_BYTES = 16 * 2 ** 20;

/** Bytes of scores (one buffer a part) and softmax exponentials (one a token) the parts' attention takes. */
function chainScoreBytes(H: number, parts: readonly MlaPart[]): number {
  let bytes = 0;
  for (const { T, cache } of parts) {
    const p0 = cache.length;
    bytes += 4 * H * (p0 + T) + 8 * H * (T * (p0 + 1) + (T * (T - 1)) / 2);
  }
  return bytes;
}

/** Each part's first row in the batch. */
function rowStarts(parts: readonly MlaPart[]): number[] {
  let r = 0;
  return parts.map(({ T }) => (r += T) - T);
}

/** K2's rope on the appended keys (positions starts[i] …), a JavaScript step. */
function ropeKeys(g: Graph, rope: Rope, dr: number, parts: readonly MlaPart[], starts: readonly number[]): void {
  g.host(() => parts.forEach(({ T, cache }, i) => {
    for (let j = 0; j < T; j++) applyRope(rope, cache.rope, (starts[i]! + j) * dr, starts[i]! + j);
  }));
}

/**
 * Absorbed attention of T queries at positions p0 … over the cache; writes [T, H·dv] into out.
 * Per token: q_lat of every head (q_nope · U_K, U_K = rows h·(dn+dv) … +dn of kv_b_proj), the
 * scores of all heads, their softmax, the weighted latent sums, then U_V per head (rows
 * h·(dn+dv)+dn … +dv). Each head's numbers are independent of the others, so doing the heads stage
 * by stage changes nothing.
 */
function attend(g: Graph, p: MlaParams, kvb: WeightView, q: Float32Array, T: number, p0: number, cache: MlaCache, out: Float32Array): void {
  const { heads: H, nopeDim: dn, ropeDim: dr, vDim: dv, kvLoraRank: Lk } = p;
  const dq = dn + dr;
  const qLat = g.alloc(H * Lk), oLat = g.alloc(H * Lk), scores = g.alloc(H * (p0 + T));
  for (let t = 0; t < T; t++) {
    const pos = p0 + t, n = pos + 1, qt = q.subarray(t * H * dq, (t + 1) * H * dq);
    if (p.rope) {
      const rope = p.rope;
      g.host(() => {
        for (let h = 0; h < H; h++) applyRope(rope, qt, h * dq + dn, pos);
      });
      g.next();
    }
    g.mvtHeads(kvb, 0, dn + dv, dn, qt, dq, H, qLat);
    const sc = g.next().mlaScores(qLat, qt, dn, dq, cache.lat, cache.rope, n, Lk, dr, p.scale, H, scores.subarray(0, H * n));
    g.next().mlaSoftmax(sc, n, H);
    g.next().mlaWsum(sc, cache.lat, n, Lk, H, oLat);
    g.next();
    for (let h = 0; h < H; h++) {
      const u = h * (dn + dv) + dn;
      g.matmulView(rowSlice(kvb, u, u + dv), oLat.subarray(h * Lk, (h + 1) * Lk), 1, out.subarray((t * H + h) * dv, (t * H + h + 1) * dv));
    }
    g.next();
  }
}
