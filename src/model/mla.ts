// Multi-head Latent Attention in the absorbed ("latent") form (ARCHITECTURE.md §1.7.5): the cache
// holds, per position, only the normalized latent c (Lk) and the shared rope key (dr), never
// per-head keys and values. Prefill appends a chunk's latents first and then attends token by
// token exactly as decode does, so every position's numbers are the same either way.

import type { Mat } from '../store/mat.js';
import { dot } from '../kernels/ref.js';
import { matmul, matvecT } from '../kernels/dispatch.js';
import { rowSlice } from '../store/mat.js';
import type { WeightView } from '../kernels/types.js';
import { linear, rmsNorm, sigmoid } from './ops.js';
import { applyRope, type Rope } from './rope.js';

const fr = Math.fround;

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

/** Latent cache of one MLA layer: [cap, Lk] latents and [cap, dr] rope keys. */
export class MlaCache {
  lat: Float32Array;
  rope: Float32Array;
  length = 0;
  constructor(
    readonly Lk: number,
    readonly dr: number,
    capacity = 64,
  ) {
    this.lat = new Float32Array(capacity * Lk);
    this.rope = new Float32Array(capacity * dr);
  }
  reserve(n: number): void {
    const cap = this.lat.length / this.Lk;
    if (n <= cap) return;
    let c = Math.max(cap, 1);
    while (c < n) c *= 2;
    const lat = new Float32Array(c * this.Lk);
    lat.set(this.lat.subarray(0, this.length * this.Lk));
    const rope = new Float32Array(c * this.dr);
    rope.set(this.rope.subarray(0, this.length * this.dr));
    this.lat = lat;
    this.rope = rope;
  }
}

/** MLA for T tokens of normalized input x [T, D] at positions cache.length …; appends to the cache. */
export async function mlaForward(p: MlaParams, w: MlaWeights, x: Float32Array, T: number, cache: MlaCache): Promise<Float32Array> {
  const { heads: H, ropeDim: dr, vDim: dv, kvLoraRank: Lk } = p;
  const q = 'direct' in w.q ? await linear(w.q.direct, x, T) : await linear(w.q.b, rmsNorm(await linear(w.q.a, x, T), T, w.q.a.rows, w.q.norm, p.latentNormEps), T);
  const a = await linear(w.kva, x, T); // [T, Lk + dr]
  const p0 = cache.length;
  cache.reserve(p0 + T);
  for (let t = 0; t < T; t++) {
    rmsNorm(a, 1, Lk, w.kvaNorm, p.latentNormEps, cache.lat.subarray((p0 + t) * Lk, (p0 + t + 1) * Lk), t * (Lk + dr));
    cache.rope.set(a.subarray(t * (Lk + dr) + Lk, (t + 1) * (Lk + dr)), (p0 + t) * dr);
    if (p.rope) applyRope(p.rope, cache.rope, (p0 + t) * dr, p0 + t);
  }
  cache.length = p0 + T;

  const out = new Float32Array(T * H * dv);
  await w.kvb.whole((kvb) => attend(p, kvb, q, T, p0, cache, out));
  if (w.gate) {
    const g = await linear(w.gate, x, T);
    for (let i = 0; i < out.length; i++) out[i] = out[i]! * sigmoid(g[i]!);
  }
  return linear(w.o, out, T);
}

/** Absorbed attention of T queries at positions p0 … over the cache; writes [T, H·dv] into out. */
function attend(p: MlaParams, kvb: WeightView, q: Float32Array, T: number, p0: number, cache: MlaCache, out: Float32Array): void {
  const { heads: H, nopeDim: dn, ropeDim: dr, vDim: dv, kvLoraRank: Lk } = p;
  const dq = dn + dr;
  const qLat = new Float32Array(Lk);
  const oLat = new Float32Array(Lk);
  const oH = new Float32Array(dv);
  for (let t = 0; t < T; t++) {
    const pos = p0 + t;
    const n = pos + 1;
    const scores = new Float32Array(n);
    for (let h = 0; h < H; h++) {
      const qo = t * H * dq + h * dq;
      if (p.rope) applyRope(p.rope, q, qo + dn, pos);
      // q_lat = q_nope · U_K[h]  (U_K = rows h·(dn+dv) … +dn of kv_b_proj)
      matvecT(kvb, h * (dn + dv), dn, q, qo, qLat);
      let max = -Infinity;
      for (let s = 0; s < n; s++) {
        const sc = fr(fr(dot(qLat, 0, cache.lat, s * Lk, Lk) + dot(q, qo + dn, cache.rope, s * dr, dr)) * p.scale);
        scores[s] = sc;
        if (sc > max) max = sc;
      }
      let Z = 0;
      for (let s = 0; s < n; s++) Z += Math.exp(scores[s]! - max);
      oLat.fill(0);
      for (let s = 0; s < n; s++) {
        const P = fr(Math.exp(scores[s]! - max) / Z);
        const c = s * Lk;
        for (let i = 0; i < Lk; i++) oLat[i] = oLat[i]! + fr(P * cache.lat[c + i]!);
      }
      // o[h] = U_V[h] · o_lat  (U_V = rows h·(dn+dv)+dn … +dv)
      matmul(rowSlice(kvb, h * (dn + dv) + dn, h * (dn + dv) + dn + dv), oLat, 1, oH);
      out.set(oH, t * H * dv + h * dv);
    }
  }
}
