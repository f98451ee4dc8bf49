// The references of the ops a graph (graph.ts) or `Compute` runs on kernel memory when the state
// lies there (the KDA block, the MLA scores and weighted sums, the block input): where it does
// not, these run, so a block calls the op and never asks where its bytes live. Same bytes either
// way (docs/NUMERICS.md).

import { depthSoftmax, dot } from '../kernels/ref.js';
import { expRef, sigmoidRef } from '../kernels/wasm/act.js';
import type { KdaBlockArgs } from '../kernels/wasm/kda-block.js';

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

/**
 * RMSNorm of T rows of width n (docs/spec/ARCHITECTURE.md §1.1): r = 1/sqrt(mean(x²) + eps),
 * y = w · f32(x · r) (the reference casts before the weight multiply).
 */
export function rmsNorm(x: Float32Array, T: number, n: number, w: Float32Array, eps: number, out: Float32Array = new Float32Array(T * n), xo = 0, xStride = n): Float32Array {
  for (let t = 0; t < T; t++) {
    const b = xo + t * xStride;
    let ss = 0;
    for (let i = 0; i < n; i++) ss += x[b + i]! * x[b + i]!;
    const r = 1 / Math.sqrt(ss / n + eps);
    for (let i = 0; i < n; i++) out[t * n + i] = fr(w[i]! * fr(x[b + i]! * r));
  }
  return out;
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

/**
 * Causal depthwise conv + SiLU for one token over P channels, updating the tail (docs/spec/K3.md §6.3 K4):
 * u = Σ_m c[j,m]·x_{t-W+1+m}[j] (m = 0 oldest … W-1 current), summed in that order; out = silu(u).
 * σ here and in the rest of the block is sigmoidRef (our own exp, shared with the WebAssembly
 * block kernel wasm/kda-block.ts), not Math.exp.
 */
export function shortConvStep(xt: Float32Array, xo: number, taps: Float32Array, tail: Float32Array, tailOff: number, P: number, W: number, out: Float32Array, oo: number): void {
  for (let j = 0; j < P; j++) {
    let u = 0;
    for (let m = 0; m < W - 1; m++) u += taps[j * W + m]! * tail[tailOff + m * P + j]!;
    u += taps[j * W + W - 1]! * xt[xo + j]!;
    out[oo + j] = u * sigmoidRef(u);
  }
  // Shift the tail: drop the oldest, append the current input.
  for (let m = 0; m < W - 2; m++) tail.copyWithin(tailOff + m * P, tailOff + (m + 1) * P, tailOff + (m + 2) * P);
  if (W > 1) tail.set(xt.subarray(xo, xo + P), tailOff + (W - 2) * P);
}

/** L2-normalize each head of a [P] vector in place: x / sqrt(Σx² + 1e-6), times `scale`. */
function l2Heads(x: Float32Array, heads: number, d: number, scale: number): void {
  for (let h = 0; h < heads; h++) {
    let ss = 0;
    for (let i = 0; i < d; i++) ss += x[h * d + i]! * x[h * d + i]!;
    const inv = 1 / Math.sqrt(ss + 1e-6);
    for (let i = 0; i < d; i++) x[h * d + i] = fr(x[h * d + i]! * inv) * scale;
  }
}

/**
 * The KDA block of a.T tokens after the projections (docs/spec/ARCHITECTURE.md §3.3, docs/spec/K3.md §6.3):
 * per token the short convs, L2 norms, decay (mode 'bounded' from z; 'given': zOrAlpha is α), β,
 * the delta rule per head and the gated RMSNorm into y. The work vectors (q, k, v, α, o, β) are
 * left in a.work as the WebAssembly block (ops/kda-block.ts) leaves them; same bytes.
 */
export function kdaBlockRef(a: KdaBlockArgs): void {
  const { H, d, W, T, work } = a;
  const P = H * d, tailLen = (W - 1) * P;
  const q = work.subarray(0, P), k = work.subarray(P, 2 * P), v = work.subarray(2 * P, 3 * P);
  const alpha = work.subarray(3 * P, 4 * P), o = work.subarray(4 * P, 5 * P), betas = work.subarray(5 * P, 5 * P + H);
  const u = new Float32Array(d);
  for (let t = 0; t < T; t++) {
    shortConvStep(a.qr, t * P, a.qConv, a.conv, 0, P, W, q, 0);
    shortConvStep(a.kr, t * P, a.kConv, a.conv, tailLen, P, W, k, 0);
    shortConvStep(a.vr, t * P, a.vConv, a.conv, 2 * tailLen, P, W, v, 0);
    l2Heads(q, H, d, a.qScale);
    l2Heads(k, H, d, 1);
    if (a.mode === 'given') alpha.set(a.zOrAlpha.subarray(t * P, (t + 1) * P));
    else for (let h = 0; h < H; h++) for (let c = h * d; c < (h + 1) * d; c++) alpha[c] = expRef(a.lambda * sigmoidRef(a.A[h]! * (a.zOrAlpha[t * P + c]! + a.dtBias[c]!)));
    for (let h = 0; h < H; h++) betas[h] = sigmoidRef(a.b[t * H + h]!);
    for (let h = 0; h < H; h++) kdaRecurStep(a.S, h * d * d, d, q, k, v, alpha, betas[h]!, o, h * d, u);
    // gated RMSNorm per head: o · rsqrt(mean(o²)+eps) · w_on · σ(γ) (docs/spec/ARCHITECTURE.md §3.3 P9; norm first, gate second)
    for (let h = 0; h < H; h++) {
      let ss = 0;
      for (let i = 0; i < d; i++) ss += o[h * d + i]! * o[h * d + i]!;
      const r = 1 / Math.sqrt(ss / d + a.eps);
      for (let i = 0; i < d; i++) {
        const c = h * d + i;
        a.y[t * P + c] = fr(o[c]! * r) * a.oNorm[i]! * sigmoidRef(a.gamma[t * P + c]!);
      }
    }
  }
}

/** Reference of mla_append: T rows of kv_a's output a [T, Lk + dr], the latent part RMS-normalized
 *  into lat [T, Lk], the rope part copied into rope [T, dr]. */
export function mlaAppendRef(a: Float32Array, T: number, Lk: number, dr: number, norm: Float32Array, eps: number, lat: Float32Array, rope: Float32Array): void {
  rmsNorm(a, T, Lk, norm, eps, lat, 0, Lk + dr);
  for (let t = 0; t < T; t++) rope.set(a.subarray(t * (Lk + dr) + Lk, (t + 1) * (Lk + dr)), t * dr);
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

/** Reference output gate in place: out[i] = f32(out[i] · σ(g[i])) for i < n (σ in double, as ops.ts
 *  sigmoid). The WebAssembly op (chain sigmoidGate, wasm/fused.ts sigmoid_gate) gives the same bytes. */
export function sigmoidGateRef(out: Float32Array, g: Float32Array, n: number): void {
  for (let i = 0; i < n; i++) out[i] = out[i]! * (1 / (1 + Math.exp(-g[i]!)));
}

/** Rows `rows` of src [*, cols], back to back, into out (ops/gather-rows.ts: a MoE expert's tokens). */
export function gatherRowsRef(src: Float32Array, rows: readonly number[], cols: number, out: Float32Array = new Float32Array(rows.length * cols)): Float32Array {
  rows.forEach((r, i) => out.set(src.subarray(r * cols, (r + 1) * cols), i * cols));
  return out;
}

/**
 * The routed sum and latent norm of T MoE tokens (ops/moe-combine.ts): out[t] = Σ_j f32(w_tj ·
 * ys[t·K + j]) in f32 from +0, j ascending (router order), then RMSNorm with norm (null: none).
 */
export function moeCombineRef(ys: readonly Float32Array[], wts: Float32Array, T: number, K: number, zw: number, norm: Float32Array | null, eps: number, out: Float32Array): Float32Array {
  out.fill(0, 0, T * zw);
  for (let t = 0; t < T; t++) for (let j = 0; j < K; j++) addScaled(out, t * zw, ys[t * K + j]!, wts[t * K + j]!, zw);
  return norm ? rmsNorm(out, T, zw, norm, eps, out) : out;
}

/** acc[o + i] = f32(acc[o + i] + f32(w · y[i])) for i < n (a function of its own: V8 optimizes it apart). */
function addScaled(acc: Float32Array, o: number, y: Float32Array, w: number, n: number): void {
  for (let i = 0; i < n; i++) acc[o + i] = acc[o + i]! + fr(w * y[i]!);
}
