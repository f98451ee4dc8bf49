// Attention Residuals (docs/spec/ARCHITECTURE.md §4.7, docs/spec/K3.md §6.2): a softmax over depth that replaces the
// residual add. Candidates are the block snapshots then the current partial sum; keys are
// RMS-normalized (no weight), scored against fold = norm_w ⊙ proj_w; values are the RAW candidates.
// Per token, across depth only: nothing is carried across positions.

import { depthSoftmax, type Compute } from '../graph/compute.js';

const fr = Math.fround;

/** fold[d] = ν[d]·ρ[d], computed once per site. */
export function foldWeights(norm: Float32Array, proj: Float32Array): Float32Array {
  const f = new Float32Array(norm.length);
  for (let i = 0; i < f.length; i++) f[i] = norm[i]! * proj[i]!;
  return f;
}

/**
 * Mix for T tokens: candidates = snapshots[0..m-1] then current, each [T, D].
 * score_i = Σ_d (c_i[d] · r_i) · fold[d] with r_i = 1/sqrt(mean(c_i²)+eps); π = softmax(score);
 * out = Σ_i π_i c_i, all in double, rounded to f32 once per element. The reference of the
 * kernels' mix (wasm/fused.ts attnres_scores / attnres_sum, same operations in the same order).
 */
export function attnResMix(snapshots: Float32Array[], current: Float32Array, T: number, D: number, fold: Float32Array, eps: number): Float32Array {
  const cands = [...snapshots, current];
  const m = cands.length;
  const out = new Float32Array(T * D);
  const score = new Float64Array(m);
  for (let t = 0; t < T; t++) {
    const o = t * D;
    for (let i = 0; i < m; i++) {
      const c = cands[i]!;
      let ss = 0;
      for (let d = 0; d < D; d++) ss += c[o + d]! * c[o + d]!;
      const r = 1 / Math.sqrt(ss / D + eps);
      let s = 0;
      for (let d = 0; d < D; d++) s += c[o + d]! * r * fold[d]!;
      score[i] = s;
    }
    depthSoftmax(score);
    for (let d = 0; d < D; d++) {
      let acc = 0;
      for (let i = 0; i < m; i++) acc += score[i]! * cands[i]![o + d]!;
      out[o + d] = fr(acc);
    }
  }
  return out;
}

/** attnResMix on the model's kernels when it has them (WebAssembly, the same bytes), else the reference above. */
export function attnResMixOn(c: Compute, snapshots: Float32Array[], current: Float32Array, T: number, D: number, fold: Float32Array, eps: number): Float32Array {
  return c.attnResMix([...snapshots, current], T, D, fold, eps) ?? attnResMix(snapshots, current, T, D, fold, eps);
}
