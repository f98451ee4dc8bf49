// Products of weights however the store lends them (one resident view, resident row blocks,
// streamed parts): each output element is the canonical dot, so the lending never changes a bit.

import type { Compute, MatmulOp } from './compute.js';
import { viewNow, visitWhole, type Mat } from '../store/mat.js';

/** y = W x for T rows: [T, rows], in a new array (linearInto). */
export async function linear(c: Compute, w: Mat, x: Float32Array, T: number): Promise<Float32Array> {
  return linearInto(c, w, x, T, new Float32Array(T * w.rows));
}

/** y = W x for T rows into y [T, rows]: the matrix visited in row blocks (which the store may stream). */
export async function linearInto(c: Compute, w: Mat, x: Float32Array, T: number, y: Float32Array): Promise<Float32Array> {
  const rows = w.rows;
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

/** One product of linearMany: y = m · x over T rows (y given: linearManyInto). */
export interface LinearItem {
  m: Mat;
  x: Float32Array;
  T: number;
}

/**
 * Several independent products y_i = W_i x_i at once (one kernel dispatch when the weights are
 * resident in kernel memory). Each y_i is exactly what linear() gives.
 */
export async function linearMany(c: Compute, items: readonly LinearItem[]): Promise<Float32Array[]> {
  const ys = carve(items.map(({ m, T }) => T * m.rows));
  await linearManyInto(c, items.map((it, i) => ({ ...it, y: ys[i]! })));
  return ys;
}

/** linearMany into given outputs. */
export async function linearManyInto(c: Compute, items: readonly (LinearItem & { y: Float32Array })[]): Promise<void> {
  // resident views as they are, or (not read yet) after their read; streamed ones go one by one
  const now = items.map(({ m }) => viewNow(m));
  const views = now.every((v, i) => v || !items[i]!.m.resident) ? now
    : await Promise.all(items.map(({ m }, i) => now[i] ?? (m.resident ? visitWhole(m, (v) => v) : null)));
  const batch: MatmulOp[] = [];
  for (let i = 0; i < items.length; i++) {
    const v = views[i], it = items[i]!;
    if (v) batch.push({ w: v, x: it.x, T: it.T, y: it.y });
    else await linearInto(c, it.m, it.x, it.T, it.y);
  }
  c.matmulBatch(batch);
}

/** Zero-filled arrays of the given lengths, views of one allocation: a decode step makes some
 *  hundreds of outputs, and an ArrayBuffer each cost ~2 ms per token (k3-medium, profiled). */
export function carve(lengths: readonly number[]): Float32Array[] {
  let n = 0;
  for (const l of lengths) n += l;
  const all = new Float32Array(n);
  let o = 0;
  return lengths.map((l) => all.subarray(o, (o += l)));
}
