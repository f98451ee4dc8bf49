// Plain TypeScript reference kernels. These define the engine's numbers: any fast kernel
// (WebAssembly, threads) must reproduce them byte for byte. See docs/NUMERICS.md.
//
// The canonical dot product of length n (weights and activations are f32 values):
//   16 f32 lanes; element i (i < n - n%16) goes to lane i%16 as  lane = f32(lane + f32(w*x))
//   (a multiply and an add, each rounded to f32: what f32x4.mul + f32x4.add do, no FMA);
//   then, with v_k = lanes 4k..4k+3:  s_j = f32(f32(v0_j + v1_j) + f32(v2_j + v3_j)) for j < 4,
//   acc = f32(f32(s_0 + s_1) + f32(s_2 + s_3));
//   then the tail i = n - n%16 .. n-1 in order:  acc = f32(acc + f32(w*x)).
// Every weight format first decodes a row to its exact f32 values (all of them are exact in f32,
// fp8 after the block scale is applied with one f32 rounding), then takes this same dot.

import { decodeRow } from '../formats/decode.js';
import { matmulQ7Ref } from './wasm/q8-trunk.js';
import type { WeightView } from '../formats/weight.js';

export { decodeRow };

const fr = Math.fround;

/** Canonical 16-lane f32 dot of w[wo .. wo+n) and x[xo .. xo+n). */
export function dot(w: Float32Array, wo: number, x: Float32Array, xo: number, n: number): number {
  let a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
  let a8 = 0, a9 = 0, a10 = 0, a11 = 0, a12 = 0, a13 = 0, a14 = 0, a15 = 0;
  const n16 = n - (n % 16);
  let i = 0;
  for (; i < n16; i += 16) {
    const p = wo + i, q = xo + i;
    a0 = fr(a0 + fr(w[p]! * x[q]!));
    a1 = fr(a1 + fr(w[p + 1]! * x[q + 1]!));
    a2 = fr(a2 + fr(w[p + 2]! * x[q + 2]!));
    a3 = fr(a3 + fr(w[p + 3]! * x[q + 3]!));
    a4 = fr(a4 + fr(w[p + 4]! * x[q + 4]!));
    a5 = fr(a5 + fr(w[p + 5]! * x[q + 5]!));
    a6 = fr(a6 + fr(w[p + 6]! * x[q + 6]!));
    a7 = fr(a7 + fr(w[p + 7]! * x[q + 7]!));
    a8 = fr(a8 + fr(w[p + 8]! * x[q + 8]!));
    a9 = fr(a9 + fr(w[p + 9]! * x[q + 9]!));
    a10 = fr(a10 + fr(w[p + 10]! * x[q + 10]!));
    a11 = fr(a11 + fr(w[p + 11]! * x[q + 11]!));
    a12 = fr(a12 + fr(w[p + 12]! * x[q + 12]!));
    a13 = fr(a13 + fr(w[p + 13]! * x[q + 13]!));
    a14 = fr(a14 + fr(w[p + 14]! * x[q + 14]!));
    a15 = fr(a15 + fr(w[p + 15]! * x[q + 15]!));
  }
  const s0 = fr(fr(a0 + a4) + fr(a8 + a12));
  const s1 = fr(fr(a1 + a5) + fr(a9 + a13));
  const s2 = fr(fr(a2 + a6) + fr(a10 + a14));
  const s3 = fr(fr(a3 + a7) + fr(a11 + a15));
  let acc = fr(fr(s0 + s1) + fr(s2 + s3));
  for (; i < n; i++) acc = fr(acc + fr(w[wo + i]! * x[xo + i]!));
  return acc;
}

/**
 * y[t, r] = dot(W[r, :], x[t, :]) for t < T: x is [T, cols], y is [T, rows] (f32, row-major).
 * Rows [r0, r1) only, so callers can split rows; each element is the canonical dot, so the
 * result does not depend on T, on the row split, or on which tokens share the call.
 */
export function matmul(w: WeightView, x: Float32Array, T: number, y: Float32Array, r0 = 0, r1 = w.rows): void {
  // requantized trunk rows (`--fast`) have their own product: 8-bit activations, integer blocks
  if (w.format === 'q7') return matmulQ7Ref(w, x, T, y, r0, r1);
  const { rows, cols } = w;
  const row = new Float32Array(cols);
  for (let r = r0; r < r1; r++) {
    decodeRow(w, r, row);
    for (let t = 0; t < T; t++) y[t * rows + r] = dot(row, 0, x, t * cols, cols);
  }
}

/**
 * Transposed product over a block of rows: y[c] = sum_{k<n} x[k] * W[r0+k, c], k ascending, each
 * step f32(y + f32(x*w)). Used by absorbed MLA (q_nope . U_K). y is [cols].
 */
export function matvecT(w: WeightView, r0: number, n: number, x: Float32Array, xo: number, y: Float32Array): void {
  const cols = w.cols;
  const row = new Float32Array(cols);
  y.fill(0, 0, cols);
  for (let k = 0; k < n; k++) {
    decodeRow(w, r0 + k, row);
    const xk = x[xo + k]!;
    for (let c = 0; c < cols; c++) y[c] = y[c]! + fr(xk * row[c]!);
  }
}

/**
 * Softmax over the m depth scores of one token, in place, in double (Attention Residuals,
 * src/model/attnres.ts): max by `s > max` in order, pi_i = exp(s_i - max), Z summed in order,
 * pi_i / Z. Shared by the reference mix and the kernels' (Kernels.attnResMix), so both are the
 * same operations.
 */
export function depthSoftmax(s: Float64Array): void {
  let max = -Infinity;
  for (let i = 0; i < s.length; i++) if (s[i]! > max) max = s[i]!;
  let Z = 0;
  for (let i = 0; i < s.length; i++) {
    s[i] = Math.exp(s[i]! - max);
    Z += s[i]!;
  }
  for (let i = 0; i < s.length; i++) s[i] = s[i]! / Z;
}
