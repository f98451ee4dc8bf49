// Multi-head Latent Attention in the absorbed ("latent") form (docs/spec/ARCHITECTURE.md §1.7.5): the cache
// holds, per position, only the normalized latent c (Lk) and the shared rope key (dr), never
// per-head keys and values. Prefill appends a chunk's latents first and then attends token by
// token exactly as decode does, so every position's numbers are the same either way.

import { rowSlice, viewsNow, visitWhole, type Mat } from '../store/mat.js';
import type { Compute } from '../graph/compute.js';
import type { WeightView } from '../formats/weight.js';
import { linear, linearMany, rmsNorm, sigmoid } from './ops.js';
import { applyRope, type Rope } from './rope.js';
import { blockInput, chainInput, inputConstants, type BlockInput } from './block-input.js';
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
 * each part attends over its own cache; each row's numbers are as if alone.
 */
export async function mlaForward(c: Compute, p: MlaParams, w: MlaWeights, xin: Float32Array | BlockInput, T: number, cache: MlaCache | readonly MlaPart[]): Promise<Float32Array> {
  const parts = cache instanceof MlaCache ? [{ T, cache }] : cache;
  const chained = mlaChained(c, p, w, xin, T, parts);
  if (chained) return chained;
  const x = blockInput(c, xin);
  const { heads: H, ropeDim: dr, vDim: dv } = p;
  const dq = p.nopeDim + dr;
  // The products of x in one batch (q_a or q_proj, kv_a, the output gate), then q_b.
  const first = 'direct' in w.q ? w.q.direct : w.q.a;
  const [q0, a, g] = await linearMany(c, [first, w.kva, ...(w.gate ? [w.gate] : [])].map((m) => ({ m, x, T })));
  const q = 'direct' in w.q ? q0! : await linear(c, w.q.b, rmsNorm(q0!, T, w.q.a.rows, w.q.norm, p.latentNormEps), T);
  let r0 = 0;
  const starts = parts.map((part) => {
    const p0 = part.cache.length;
    appendLatents(p, w, a!, r0, part.T, part.cache);
    r0 += part.T;
    return p0;
  });

  const out = new Float32Array(T * H * dv);
  await visitWhole(w.kvb, (kvb) => {
    let r = 0;
    parts.forEach((part, i) => {
      attend(c, p, kvb, q.subarray(r * H * dq, (r + part.T) * H * dq), part.T, starts[i]!, part.cache, out.subarray(r * H * dv, (r + part.T) * H * dv));
      r += part.T;
    });
  });
  return g ? gatedOut(c, w.o, out, g, T) : linear(c, w.o, out, T);
}

/**
 * o_proj of the gated heads' outputs, o · (out ⊙ σ(g)): the gate (an element-wise op split across
 * the threads, Math.exp per element as sigmoidGateRef) and the product in one chained dispatch
 * when o is resident; else the gate here and the product alone. The same bytes either way.
 */
async function gatedOut(c: Compute, o: Mat, out: Float32Array, g: Float32Array, T: number): Promise<Float32Array> {
  const v = viewsNow([o]);
  const ch = v && c.chainFor(v);
  if (!ch) {
    sigmoidGateRef(out, g, out.length);
    return linear(c, o, out, T);
  }
  try {
    const n = out.length, oa = ch.alloc(n), ga = ch.alloc(n);
    oa.set(out);
    ga.set(g.subarray(0, n));
    ch.sigmoidGate(oa, ga, n);
    const y = ch.next().matmul(v[0]!, oa, T, new Float32Array(T * o.rows));
    ch.run();
    return y;
  } finally {
    ch.done();
  }
}

/** The most bytes of scores and exponentials an MLA chain allocates (16 MiB: 87K positions of 16 heads). */
const MLA_CHAIN_SCORE_BYTES = 16 * 2 ** 20;

/**
 * One decode token of one sequence (T = 1) in one chained dispatch (Compute.chainFor): the block's
 * input (when still to compute), the products of x, q_a's norm and q_b, the latent appended to the
 * cache, then attend's steps (q_nope · U_K of every head, the scores, their softmax, the weighted
 * latent sums, U_V per head), the output gate and o_proj. The same operations as mlaForward's
 * dispatches and JavaScript below (the softmax and gate with Math.exp, in the kernel), so the same
 * bytes. Null (nothing done) for a chunk, several sequences, rope (K2; K3's MLA has none), a cache
 * or a weight outside one kernel memory.
 */
function mlaChained(c: Compute, p: MlaParams, w: MlaWeights, xin: Float32Array | BlockInput, T: number, parts: readonly MlaPart[]): Float32Array | null {
  if (!c.group || p.rope || T !== 1 || parts.length !== 1) return null;
  const cache = parts[0]!.cache;
  const { heads: H, nopeDim: dn, ropeDim: dr, vDim: dv, kvLoraRank: Lk } = p;
  // the scores and their exponentials (12 bytes a head and position) are arena temporaries: past
  // a long context, step by step (the arena's headroom for temporaries is bounded)
  if (12 * H * (cache.length + 1) > MLA_CHAIN_SCORE_BYTES) return null;
  const dq = dn + dr;
  const qa = 'direct' in w.q ? null : w.q;
  const views = viewsNow([qa ? qa.a : (w.q as { direct: Mat }).direct, w.kva, ...(qa ? [qa.b] : []), w.kvb, w.o, ...(w.gate ? [w.gate] : [])]);
  if (!views) return null;
  const [first, kva, ...rest] = views as WeightView[];
  const qb = qa ? rest.shift()! : null;
  const [kvb, o, gate] = rest as [WeightView, WeightView, WeightView | undefined];
  cache.reserve(cache.length + 1); // (before the chain: a cache that grows is allocated anew)
  const consts = [w.kvaNorm, ...(qa ? [qa.norm] : []), ...inputConstants(xin)];
  const placed = c.placedNear(cache.lat, consts);
  const ch = placed && c.chainFor(views, [cache.lat, cache.rope, ...placed]);
  if (!ch) return null;
  try {
    const x = chainInput(ch, xin, placed!.slice(qa ? 2 : 1));
    const q0 = ch.matmul(first!, x, 1), a = ch.matmul(kva!, x, 1), g = gate ? ch.matmul(gate, x, 1) : null;
    const p0 = cache.length, n = p0 + 1;
    ch.next().mlaAppend(a, 1, Lk, dr, placed![0]!, p.latentNormEps, cache.lat.subarray(p0 * Lk), cache.rope.subarray(p0 * dr));
    const qn = qb ? ch.rmsNorm(q0, 1, qa!.a.rows, placed![1]!, p.latentNormEps) : null;
    const q = qb ? ch.next().matmul(qb, qn!, 1) : q0;
    // attend (below) for this token: q_lat, scores, softmax, weighted sums, U_V per head
    const qLat = ch.next().mvtHeads(kvb, 0, dn + dv, dn, q, dq, H);
    const sc = ch.next().mlaScores(qLat, q, dn, dq, cache.lat, cache.rope, n, Lk, dr, p.scale, H);
    ch.next().mlaSoftmax(sc, n, H);
    const oLat = ch.next().mlaWsum(sc, cache.lat, n, Lk, H);
    const out = ch.next().alloc(H * dv);
    for (let h = 0; h < H; h++) ch.matmul(rowSlice(kvb, h * (dn + dv) + dn, h * (dn + dv) + dn + dv), oLat.subarray(h * Lk, (h + 1) * Lk), 1, out.subarray(h * dv, (h + 1) * dv));
    if (g) ch.next().sigmoidGate(out, g, H * dv);
    const y = ch.next().matmul(o, out, 1, new Float32Array(o.rows));
    ch.run();
    cache.length = n;
    return y;
  } finally {
    ch.done();
  }
}

/** Normalized latents and roped keys of rows [r0, r0 + T) of kv_a's output, appended to the cache. */
function appendLatents(p: MlaParams, w: MlaWeights, a: Float32Array, r0: number, T: number, cache: MlaCache): void {
  const { ropeDim: dr, kvLoraRank: Lk } = p;
  const p0 = cache.length;
  cache.reserve(p0 + T);
  for (let i = 0; i < T; i++) {
    const t = r0 + i;
    rmsNorm(a, 1, Lk, w.kvaNorm, p.latentNormEps, cache.lat.subarray((p0 + i) * Lk, (p0 + i + 1) * Lk), t * (Lk + dr));
    cache.rope.set(a.subarray(t * (Lk + dr) + Lk, (t + 1) * (Lk + dr)), (p0 + i) * dr);
    if (p.rope) applyRope(p.rope, cache.rope, (p0 + i) * dr, p0 + i);
  }
  cache.length = p0 + T;
}

/**
 * Reference softmax of H heads' n scores in place, in double: max, then ex_s = exp(score_s − max)
 * (each computed once, kept in ex [≥ n]) and Z = Σ ex_s, s ascending; P_s = f32(ex_s / Z). The
 * WebAssembly op (chain mlaSoftmax, wasm/fused.ts mla_softmax) gives the same bytes.
 */
export function mlaSoftmaxRef(sc: Float32Array, n: number, H: number, ex: Float64Array = new Float64Array(n)): void {
  for (let h = 0; h < H; h++) {
    const b = h * n;
    let max = -Infinity;
    for (let s = 0; s < n; s++) if (sc[b + s]! > max) max = sc[b + s]!;
    let Z = 0;
    for (let s = 0; s < n; s++) Z += ex[s] = Math.exp(sc[b + s]! - max);
    for (let s = 0; s < n; s++) sc[b + s] = ex[s]! / Z;
  }
}

/** Reference output gate in place: out[i] = f32(out[i] · σ(g[i])) for i < n (ops.ts sigmoid, in
 *  double). The WebAssembly op (chain sigmoidGate, wasm/fused.ts sigmoid_gate) gives the same bytes. */
export function sigmoidGateRef(out: Float32Array, g: Float32Array, n: number): void {
  for (let i = 0; i < n; i++) out[i] = out[i]! * sigmoid(g[i]!);
}

/**
 * Absorbed attention of T queries at positions p0 … over the cache; writes [T, H·dv] into out.
 * Per token: q_lat of every head, then the scores of all heads (WebAssembly when the cache lives
 * in kernel memory), the softmax per head in double, the weighted latent sums, then U_V per head.
 * Each head's numbers are independent of the others, so doing the heads stage by stage changes
 * nothing.
 */
function attend(c: Compute, p: MlaParams, kvb: WeightView, q: Float32Array, T: number, p0: number, cache: MlaCache, out: Float32Array): void {
  const { heads: H, nopeDim: dn, ropeDim: dr, vDim: dv, kvLoraRank: Lk } = p;
  const dq = dn + dr;
  const qLat = new Float32Array(H * Lk);
  const oLat = new Float32Array(H * Lk);
  const scoreBuf = new Float32Array(H * (p0 + T));
  const ex = new Float64Array(p0 + T); // one head's exp(score - max), each computed once
  for (let t = 0; t < T; t++) {
    const pos = p0 + t;
    const n = pos + 1;
    if (p.rope) for (let h = 0; h < H; h++) applyRope(p.rope, q, t * H * dq + h * dq + dn, pos);
    // q_lat[h] = q_nope[h] · U_K[h]  (U_K = rows h·(dn+dv) … +dn of kv_b_proj), all heads in one dispatch
    c.matvecTHeads(kvb, 0, dn + dv, dn, q, t * H * dq, dq, qLat, H);
    const sc = scoreBuf.subarray(0, H * n);
    const qr = t * H * dq + dn;
    c.mlaScores(qLat, q, qr, dq, cache.lat, cache.rope, n, Lk, dr, p.scale, H, sc);
    mlaSoftmaxRef(sc, n, H, ex);
    c.mlaWeightedSum(sc, cache.lat, n, Lk, H, oLat);
    // o[h] = U_V[h] · o_lat  (U_V = rows h·(dn+dv)+dn … +dv), the heads' products in one dispatch
    c.matmulBatch(Array.from({ length: H }, (_, h) => ({
      w: rowSlice(kvb, h * (dn + dv) + dn, h * (dn + dv) + dn + dv), x: oLat.subarray(h * Lk, (h + 1) * Lk), T: 1, y: out.subarray(t * H * dv + h * dv, t * H * dv + (h + 1) * dv),
    })));
  }
}
