// Plain TypeScript reference kernels. These define the engine's numbers: any fast kernel
// (WebAssembly, threads) must reproduce them byte for byte. See docs/NUMERICS.md.
//
// The canonical dot product of length n (weights and activations are f32 values):
//   16 f32 lanes; element i (i < n - n%16) goes to lane i%16 as  lane = fma32(w, x, lane)
//   (w*x + lane rounded once to f32: a fused multiply-add, what f32x4.relaxed_madd does on a
//   machine with FMA, and what kernels/wasm/fma.ts computes exactly elsewhere);
//   then, with v_k = lanes 4k..4k+3:  s_j = f32(f32(v0_j + v1_j) + f32(v2_j + v3_j)) for j < 4,
//   acc = f32(f32(s_0 + s_1) + f32(s_2 + s_3));
//   then the tail i = n - n%16 .. n-1 in order:  acc = fma32(w, x, acc).
// Every weight format first decodes a row to its exact f32 values (all of them are exact in f32,
// fp8 after the block scale is applied with one f32 rounding), then takes this same dot.

import { decodeRow } from '../formats/decode.js';
import { matmulQ7Ref } from './wasm/q8-trunk.js';
import type { WeightView } from '../formats/weight.js';

export { decodeRow };

const fr = Math.fround;

const F64 = new Float64Array(1);
const U32 = new Uint32Array(F64.buffer);

/**
 * f32 fused multiply-add: a*b + c rounded once to f32 (a, b, c f32 values). a*b is exact in a
 * double; s = a*b + c is rounded to double, and if that rounding was inexact (TwoSum error e != 0)
 * and s is even, s moves one double ulp towards the exact sum: s is then the exact sum rounded to
 * odd, and rounding it to f32 gives the exact sum rounded to nearest (53 >= 24 + 2 bits). The
 * steps of kernels/wasm/fma.ts; here the adjustment is skipped where it cannot change the f32
 * (s not on an f32 midpoint: an odd s never is one, and no midpoint lies between neighbours).
 */
export function fma32(a: number, b: number, c: number): number {
  const p = a * b;
  const s = p + c;
  const r = fr(s);
  // Only a double on an f32 midpoint can round the wrong way (the exact sum may lie on either side
  // of it). s is one iff it is not an f32 and s + (s - r), the f32 on its other side, is one.
  const d = s - r;
  if (d === 0 || fr(s + d) !== s + d) return r;
  const bb = s - p;
  const e = (p - (s - bb)) + (c - bb);
  if (!(e < 0 || e > 0)) return r;
  // s is a midpoint, so even: one ulp away from zero when s and e have one sign, towards zero
  // otherwise (its low word is then even, so nothing carries; it may borrow)
  F64[0] = s;
  const lo = U32[0]!;
  if ((s < 0) === (e < 0)) U32[0] = lo + 1;
  else if (lo !== 0) U32[0] = lo - 1;
  else {
    U32[0] = 0xffffffff;
    U32[1] = U32[1]! - 1;
  }
  return fr(F64[0]!);
}

/**
 * Canonical 16-lane f32 dot of w[wo .. wo+n) and x[xo .. xo+n). Each lane step is fma32 with its
 * common cases written out: s = w*x + a is exact in a double (TwoSum error e = 0: the usual case
 * for bf16 and mxfp4 weights), or it is not on an f32 midpoint; either way f32(s) is the answer.
 * V8 does not inline sixteen calls of fma32; this runs 2-2.5x faster than them.
 */
export function dot(w: Float32Array, wo: number, x: Float32Array, xo: number, n: number): number {
  let a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
  let a8 = 0, a9 = 0, a10 = 0, a11 = 0, a12 = 0, a13 = 0, a14 = 0, a15 = 0;
  const n16 = n - (n % 16);
  let i = 0, m: number, s: number, r: number, b: number, e: number, d: number;
  for (; i < n16; i += 16) {
    const p = wo + i, q = xo + i;
    m = w[p]! * x[q]!; s = m + a0; r = fr(s); b = s - m; e = (m - (s - b)) + (a0 - b); d = s - r;
    a0 = e === 0 || fr(s + d) !== s + d ? r : fma32(w[p]!, x[q]!, a0);
    m = w[p + 1]! * x[q + 1]!; s = m + a1; r = fr(s); b = s - m; e = (m - (s - b)) + (a1 - b); d = s - r;
    a1 = e === 0 || fr(s + d) !== s + d ? r : fma32(w[p + 1]!, x[q + 1]!, a1);
    m = w[p + 2]! * x[q + 2]!; s = m + a2; r = fr(s); b = s - m; e = (m - (s - b)) + (a2 - b); d = s - r;
    a2 = e === 0 || fr(s + d) !== s + d ? r : fma32(w[p + 2]!, x[q + 2]!, a2);
    m = w[p + 3]! * x[q + 3]!; s = m + a3; r = fr(s); b = s - m; e = (m - (s - b)) + (a3 - b); d = s - r;
    a3 = e === 0 || fr(s + d) !== s + d ? r : fma32(w[p + 3]!, x[q + 3]!, a3);
    m = w[p + 4]! * x[q + 4]!; s = m + a4; r = fr(s); b = s - m; e = (m - (s - b)) + (a4 - b); d = s - r;
    a4 = e === 0 || fr(s + d) !== s + d ? r : fma32(w[p + 4]!, x[q + 4]!, a4);
    m = w[p + 5]! * x[q + 5]!; s = m + a5; r = fr(s); b = s - m; e = (m - (s - b)) + (a5 - b); d = s - r;
    a5 = e === 0 || fr(s + d) !== s + d ? r : fma32(w[p + 5]!, x[q + 5]!, a5);
    m = w[p + 6]! * x[q + 6]!; s = m + a6; r = fr(s); b = s - m; e = (m - (s - b)) + (a6 - b); d = s - r;
    a6 = e === 0 || fr(s + d) !== s + d ? r : fma32(w[p + 6]!, x[q + 6]!, a6);
    m = w[p + 7]! * x[q + 7]!; s = m + a7; r = fr(s); b = s - m; e = (m - (s - b)) + (a7 - b); d = s - r;
    a7 = e === 0 || fr(s + d) !== s + d ? r : fma32(w[p + 7]!, x[q + 7]!, a7);
    m = w[p + 8]! * x[q + 8]!; s = m + a8; r = fr(s); b = s - m; e = (m - (s - b)) + (a8 - b); d = s - r;
    a8 = e === 0 || fr(s + d) !== s + d ? r : fma32(w[p + 8]!, x[q + 8]!, a8);
    m = w[p + 9]! * x[q + 9]!; s = m + a9; r = fr(s); b = s - m; e = (m - (s - b)) + (a9 - b); d = s - r;
    a9 = e === 0 || fr(s + d) !== s + d ? r : fma32(w[p + 9]!, x[q + 9]!, a9);
    m = w[p + 10]! * x[q + 10]!; s = m + a10; r = fr(s); b = s - m; e = (m - (s - b)) + (a10 - b); d = s - r;
    a10 = e === 0 || fr(s + d) !== s + d ? r : fma32(w[p + 10]!, x[q + 10]!, a10);
    m = w[p + 11]! * x[q + 11]!; s = m + a11; r = fr(s); b = s - m; e = (m - (s - b)) + (a11 - b); d = s - r;
    a11 = e === 0 || fr(s + d) !== s + d ? r : fma32(w[p + 11]!, x[q + 11]!, a11);
    m = w[p + 12]! * x[q + 12]!; s = m + a12; r = fr(s); b = s - m; e = (m - (s - b)) + (a12 - b); d = s - r;
    a12 = e === 0 || fr(s + d) !== s + d ? r : fma32(w[p + 12]!, x[q + 12]!, a12);
    m = w[p + 13]! * x[q + 13]!; s = m + a13; r = fr(s); b = s - m; e = (m - (s - b)) + (a13 - b); d = s - r;
    a13 = e === 0 || fr(s + d) !== s + d ? r : fma32(w[p + 13]!, x[q + 13]!, a13);
    m = w[p + 14]! * x[q + 14]!; s = m + a14; r = fr(s); b = s - m; e = (m - (s - b)) + (a14 - b); d = s - r;
    a14 = e === 0 || fr(s + d) !== s + d ? r : fma32(w[p + 14]!, x[q + 14]!, a14);
    m = w[p + 15]! * x[q + 15]!; s = m + a15; r = fr(s); b = s - m; e = (m - (s - b)) + (a15 - b); d = s - r;
    a15 = e === 0 || fr(s + d) !== s + d ? r : fma32(w[p + 15]!, x[q + 15]!, a15);
  }
  const s0 = fr(fr(a0 + a4) + fr(a8 + a12));
  const s1 = fr(fr(a1 + a5) + fr(a9 + a13));
  const s2 = fr(fr(a2 + a6) + fr(a10 + a14));
  const s3 = fr(fr(a3 + a7) + fr(a11 + a15));
  let acc = fr(fr(s0 + s1) + fr(s2 + s3));
  for (; i < n; i++) acc = fma32(w[wo + i]!, x[xo + i]!, acc);
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
