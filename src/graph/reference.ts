// The references of the ops `Compute` runs on kernel memory when the state lies there (the MLA
// scores and weighted sums, the KDA delta-rule step): where it does not, Compute runs these, so a
// block calls the op and never asks where its bytes live. Same bytes either way (docs/NUMERICS.md).

import { dot } from '../kernels/ref.js';

const fr = Math.fround;

/**
 * One delta-rule step for one head (docs/spec/ARCHITECTURE.md §3.3 R1–R4), all in f32:
 * S ← diag(α)·S; u = Sᵀk; S ← S + (β·k) ⊗ (v − u); o = Sᵀq. Sums over the key index i ascending.
 */
export function kdaRecurStep(S: Float32Array, so: number, d: number, q: Float32Array, k: Float32Array, v: Float32Array, alpha: Float32Array, beta: number, o: Float32Array, off: number, u: Float32Array): void {
  for (let i = 0; i < d; i++) {
    const a = alpha[off + i]!;
    const r = so + i * d;
    for (let j = 0; j < d; j++) S[r + j] = S[r + j]! * a;
  }
  u.fill(0, 0, d);
  for (let i = 0; i < d; i++) {
    const ki = k[off + i]!;
    const r = so + i * d;
    for (let j = 0; j < d; j++) u[j] = u[j]! + fr(ki * S[r + j]!);
  }
  for (let j = 0; j < d; j++) u[j] = v[off + j]! - u[j]!; // u now holds the error e
  for (let i = 0; i < d; i++) {
    const kb = fr(k[off + i]! * beta);
    const r = so + i * d;
    for (let j = 0; j < d; j++) S[r + j] = S[r + j]! + fr(kb * u[j]!);
  }
  for (let j = 0; j < d; j++) o[off + j] = 0;
  for (let i = 0; i < d; i++) {
    const qi = q[off + i]!;
    const r = so + i * d;
    for (let j = 0; j < d; j++) o[off + j] = o[off + j]! + fr(qi * S[r + j]!);
  }
}

/**
 * Reference MLA scores: for heads h < H and positions s < n,
 * out[h*n + s] = f32(f32(dot(qLat_h, c_s) + dot(q_rope_h, k_s)) * scale) with the canonical dot,
 * qLat_h = qLat[h*Lk ..], q_rope_h = q[qo + h*qStride ..], c_s = lat[s*Lk ..], k_s = rope[s*dr ..].
 * The WebAssembly kernel (Kernels.mlaScores) gives the same bytes.
 */
export function mlaScoresRef(qLat: Float32Array, q: Float32Array, qo: number, qStride: number, lat: Float32Array, rope: Float32Array, n: number, Lk: number, dr: number, scale: number, H: number, out: Float32Array): void {
  for (let h = 0; h < H; h++) {
    for (let s = 0; s < n; s++) out[h * n + s] = fr(fr(dot(qLat, h * Lk, lat, s * Lk, Lk) + dot(q, qo + h * qStride, rope, s * dr, dr)) * scale);
  }
}

/**
 * Reference weighted latent sum: out[h*Lk + i] = Σ_s f32(P[h*n + s] · lat[s*Lk + i]), s ascending
 * from 0, each step rounded to f32. The WebAssembly kernel (Kernels.mlaWeightedSum) gives the same bytes.
 */
export function mlaWeightedSumRef(P: Float32Array, lat: Float32Array, n: number, Lk: number, H: number, out: Float32Array): void {
  for (let h = 0; h < H; h++) {
    const o = h * Lk;
    out.fill(0, o, o + Lk);
    for (let s = 0; s < n; s++) {
      const p = P[h * n + s]!;
      const c = s * Lk;
      for (let i = 0; i < Lk; i++) out[o + i] = out[o + i]! + fr(p * lat[c + i]!);
    }
  }
}
