// Attention Residuals (ARCHITECTURE.md §4.7, K3.md §6.2): a softmax over depth that replaces the
// residual add. Candidates are the block snapshots then the current partial sum; keys are
// RMS-normalized (no weight), scored against fold = norm_w ⊙ proj_w; values are the RAW candidates.
// Per token, across depth only: nothing is carried across positions.

const fr = Math.fround;

/** fold[d] = ν[d]·ρ[d], computed once per site. */
export function foldWeights(norm: Float32Array, proj: Float32Array): Float32Array {
  const f = new Float32Array(norm.length);
  for (let i = 0; i < f.length; i++) f[i] = norm[i]! * proj[i]!;
  return f;
}

/** 1/sqrt(mean(c²)+eps) of each token of a snapshot, worked out once: a snapshot is a candidate
 *  at every later site, and its norm never changes (the same double operations as below). */
const snapshotRms = new WeakMap<Float32Array, Float64Array>();

function rmsOf(c: Float32Array, o: number, D: number, eps: number): number {
  let ss = 0;
  for (let d = 0; d < D; d++) ss += c[o + d]! * c[o + d]!;
  return 1 / Math.sqrt(ss / D + eps);
}

function snapshotRmsOf(c: Float32Array, T: number, D: number, eps: number): Float64Array {
  let r = snapshotRms.get(c);
  if (!r) {
    r = new Float64Array(T);
    for (let t = 0; t < T; t++) r[t] = rmsOf(c, t * D, D, eps);
    snapshotRms.set(c, r);
  }
  return r;
}

/**
 * Mix for T tokens: candidates = snapshots[0..m-1] then current, each [T, D].
 * score_i = Σ_d (c_i[d] · r_i) · fold[d] with r_i = 1/sqrt(mean(c_i²)+eps); π = softmax(score);
 * out = Σ_i π_i c_i, all in double, rounded to f32 once per element.
 */
export function attnResMix(snapshots: Float32Array[], current: Float32Array, T: number, D: number, fold: Float32Array, eps: number): Float32Array {
  const cands = [...snapshots, current];
  const m = cands.length;
  const rms = snapshots.map((c) => snapshotRmsOf(c, T, D, eps));
  const out = new Float32Array(T * D);
  const score = new Float64Array(m);
  const pi = new Float64Array(m);
  const acc = new Float64Array(D);
  for (let t = 0; t < T; t++) {
    const o = t * D;
    let max = -Infinity;
    for (let i = 0; i < m; i++) {
      const c = cands[i]!;
      const r = i < m - 1 ? rms[i]![t]! : rmsOf(c, o, D, eps);
      let s = 0;
      for (let d = 0; d < D; d++) s += c[o + d]! * r * fold[d]!;
      score[i] = s;
      if (s > max) max = s;
    }
    let Z = 0;
    for (let i = 0; i < m; i++) {
      pi[i] = Math.exp(score[i]! - max);
      Z += pi[i]!;
    }
    for (let i = 0; i < m; i++) pi[i] = pi[i]! / Z;
    // per element: acc = 0 + π_0 c_0 + π_1 c_1 + ..., i ascending (candidate-major loops, same sums)
    acc.fill(0);
    for (let i = 0; i < m; i++) {
      const c = cands[i]!, p = pi[i]!;
      for (let d = 0; d < D; d++) acc[d] = acc[d]! + p * c[o + d]!;
    }
    for (let d = 0; d < D; d++) out[o + d] = fr(acc[d]!);
  }
  return out;
}
