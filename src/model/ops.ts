// Element-wise pieces shared by every block. Activations are f32 arrays; each function here works
// in double and rounds its result to f32 once, so the numbers depend only on the inputs.
// Reductions (norm statistics, softmax sums) are sequential in double, in index order.

import type { Compute, MatmulOp } from '../graph/compute.js';
import { viewNow, viewsNow, visitWhole, type GatedMats, type Mat } from '../store/mat.js';

const fr = Math.fround;

export function sigmoid(x: number): number {
  return 1 / (1 + Math.exp(-x));
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
 * y = W x for T rows: [T, rows]. The matrix is visited in row blocks (which the store may stream);
 * each output element is the canonical dot, so the blocking never changes a bit.
 */
export async function linear(c: Compute, w: Mat, x: Float32Array, T: number): Promise<Float32Array> {
  const rows = w.rows;
  const y = new Float32Array(T * rows);
  const l = w.lease();
  if (l.kind === 'resident') {
    c.matmul(l.view, x, T, y);
    return y;
  }
  if (l.kind === 'blocks') {
    // every block resident: one dispatch; one token's outputs are slices of y, several tokens' are copied in
    const blocks = l.blocks;
    const outs = T === 1 ? blocks.map(({ view, r0 }) => y.subarray(r0, r0 + view.rows)) : carve(blocks.map(({ view }) => T * view.rows));
    c.matmulBatch(blocks.map(({ view }, i) => ({ w: view, x, T, y: outs[i]! })));
    if (T > 1) blocks.forEach(({ view, r0 }, i) => placeBlock(y, rows, outs[i]!, view.rows, r0, T));
    return y;
  }
  await l.parts((v, r0) => {
    if (r0 === 0 && v.rows === rows) {
      c.matmul(v, x, T, y);
      return;
    }
    const part = new Float32Array(T * v.rows);
    c.matmul(v, x, T, part);
    placeBlock(y, rows, part, v.rows, r0, T);
  });
  return y;
}

/** A row block's outputs [T, n] into y [T, rows] at column r0. */
function placeBlock(y: Float32Array, rows: number, part: Float32Array, n: number, r0: number, T: number): void {
  for (let t = 0; t < T; t++) y.set(part.subarray(t * n, (t + 1) * n), t * rows + r0);
}

/**
 * Several independent products y_i = W_i x_i at once (one kernel dispatch when the weights are
 * resident in kernel memory). Each y_i is exactly what linear() gives.
 */
export async function linearMany(c: Compute, items: { m: Mat; x: Float32Array; T: number }[]): Promise<Float32Array[]> {
  const ys = carve(items.map(({ m, T }) => T * m.rows));
  // resident views as they are, or (not read yet) after their read; streamed ones go one by one
  const now = items.map(({ m }) => viewNow(m));
  const views = now.every((v, i) => v || !items[i]!.m.resident) ? now
    : await Promise.all(items.map(({ m }, i) => now[i] ?? (m.resident ? visitWhole(m, (v) => v) : null)));
  const batch: MatmulOp[] = [];
  for (let i = 0; i < items.length; i++) {
    const v = views[i];
    if (v) batch.push({ w: v, x: items[i]!.x, T: items[i]!.T, y: ys[i]! });
    else ys[i] = await linear(c, items[i]!.m, items[i]!.x, items[i]!.T);
  }
  c.matmulBatch(batch);
  return ys;
}

/** Zero-filled arrays of the given lengths, views of one allocation: a decode step makes some
 *  hundreds of outputs, and an ArrayBuffer each cost ~2 ms per token (k3-medium, profiled). */
function carve(lengths: readonly number[]): Float32Array[] {
  let n = 0;
  for (const l of lengths) n += l;
  const all = new Float32Array(n);
  let o = 0;
  return lengths.map((l) => all.subarray(o, (o += l)));
}

/** a += b, element-wise in f32. */
export function addInPlace(a: Float32Array, b: Float32Array): Float32Array {
  for (let i = 0; i < a.length; i++) a[i] = a[i]! + b[i]!;
  return a;
}

/** Gated activation h = act(gate) ⊙ up, per element (docs/spec/ARCHITECTURE.md §1.2 SwiGLU, §4.6 SiTU). */
export interface Activation {
  kind: 'silu' | 'situ';
  situBeta: number;
  situLinearBeta: number | null;
}

/** The kernels' cap on up (βl): SiTU's linear beta, none for SiLU. */
export function linearBeta(act: Activation): number | null {
  return act.kind === 'situ' ? act.situLinearBeta : null;
}

/** gatedAct of several (gate, up) pairs in one kernel dispatch; each output as gatedAct gives it. */
export function gatedActMany(c: Compute, pairs: readonly (readonly [Float32Array, Float32Array])[], act: Activation): Float32Array[] {
  const outs = carve(pairs.map(([gate]) => gate.length));
  const items = pairs.map(([gate, up], k) => ({ gate, up, out: outs[k]! }));
  c.gatedActBatch(items, act.kind, act.situBeta, linearBeta(act));
  return items.map((i) => i.out);
}

export function gatedAct(c: Compute, gate: Float32Array, up: Float32Array, act: Activation): Float32Array {
  // SiTU(a, u) = [β·tanh(a/β)·σ(a)] · [βl·tanh(u/βl)]; σ takes the uncapped gate. exp, tanh and σ
  // are the shared numerics of the activation kernels (Compute.gatedAct: WebAssembly or its
  // reference, the same bytes).
  const out = new Float32Array(gate.length);
  c.gatedAct(gate, up, out, act.kind, act.situBeta, linearBeta(act));
  return out;
}

/** Gate/up/down weights of one gated MLP (dense MLP, shared experts, one routed expert). */
export type MlpWeights = GatedMats;

/** down · act(gate · x, up · x) for T rows. */
export async function gatedMlp(c: Compute, w: MlpWeights, x: Float32Array, T: number, act: Activation): Promise<Float32Array> {
  return (await gatedMlpMany(c, [{ w, x, T }], act))[0]!;
}

/** One gated MLP's weights and its input x [T, cols]. */
export interface GatedMlpItem {
  w: MlpWeights;
  x: Float32Array;
  T: number;
}

/** gatedMlp of each item: in one chained dispatch when every weight is in kernel memory now
 *  (chainedMlps), else in three (gate and up products, activations, down products);
 *  each output what gatedMlp alone gives. */
export async function gatedMlpMany(c: Compute, items: readonly GatedMlpItem[], act: Activation): Promise<Float32Array[]> {
  const chained = chainedMlps(c, items, act);
  if (chained) return chained;
  const gu = await linearMany(c, items.flatMap(({ w, x, T }) => [{ m: w.gate, x, T }, { m: w.up, x, T }]));
  const h = gatedActMany(c, items.map((_, k) => [gu[2 * k]!, gu[2 * k + 1]!] as const), act);
  return linearMany(c, items.map(({ w, T }, k) => ({ m: w.down, x: h[k]!, T })));
}

/** gatedMlpMany in one chained dispatch (Chain.gatedMlps), or null when some weight is not a resident view in one kernel memory. */
function chainedMlps(c: Compute, items: readonly GatedMlpItem[], act: Activation): Float32Array[] | null {
  const views = c.group ? viewsNow(items.flatMap(({ w }) => [w.gate, w.up, w.down])) : null;
  const ch = views && c.chainFor(views);
  if (!ch) return null;
  try {
    const ys = carve(items.map(({ w, T }) => T * w.down.rows));
    ch.gatedMlps(items.map(({ x, T }, k) => ({ gate: views![3 * k]!, up: views![3 * k + 1]!, down: views![3 * k + 2]!, x, T, y: ys[k]! })), act.kind, act.situBeta, linearBeta(act));
    ch.run();
    return ys;
  } finally {
    ch.done();
  }
}
