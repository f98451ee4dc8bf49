// Element-wise pieces shared by every block. Activations are f32 arrays; each function here works
// in double and rounds its result to f32 once, so the numbers depend only on the inputs.
// Reductions (norm statistics, softmax sums) are sequential in double, in index order.

import type { Compute } from '../graph/compute.js';
import { carve } from '../graph/linear.js';
import { onGraph } from '../graph/graph.js';
import type { GatedMats } from '../store/mat.js';

export { rmsNorm } from '../graph/reference.js';
export { linear, linearMany } from '../graph/linear.js';

export function sigmoid(x: number): number {
  return 1 / (1 + Math.exp(-x));
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

/** gatedMlp of each item, on one graph (Graph.gatedMlps): one chained dispatch when every weight
 *  is in the kernel memory of the first, else three steps; each output what gatedMlp alone gives. */
export async function gatedMlpMany(c: Compute, items: readonly GatedMlpItem[], act: Activation): Promise<Float32Array[]> {
  const ys = carve(items.map(({ w, T }) => T * w.down.rows));
  await onGraph(c, items.flatMap(({ w }) => [w.gate, w.up, w.down]), [], (g) => g.gatedMlps(items.map((it, k) => ({ ...it, y: ys[k]! })), act.kind, act.situBeta, linearBeta(act)));
  return ys;
}
