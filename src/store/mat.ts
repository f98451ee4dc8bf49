// A borrowed weight matrix. The model never holds weight bytes: it asks a Mat to show itself,
// either as row blocks in order (for y = W x, the blocks may be streamed from disk one at a time)
// or whole (for matrices read by row, like MLA's kv_b). A view is valid only inside the callback;
// after it returns the store may reuse the memory.

import type { ViewFormat, WeightView } from '../formats/weight.js';
import { decodeRow } from '../formats/decode.js';

export interface Mat {
  readonly name: string;
  readonly rows: number;
  readonly cols: number;
  readonly format: ViewFormat;
  /** Held in memory for as long as the Mat is lent (its view may be used outside the callbacks while the lender's call lasts). */
  readonly resident?: boolean;
  /** Visit the matrix as consecutive row blocks [r0, r0 + view.rows), in order. */
  parts(fn: (view: WeightView, r0: number) => void): Promise<void>;
  /** The whole matrix as one view. */
  whole<R>(fn: (view: WeightView) => R): Promise<R>;
  /** Only on resident matrices, and on split ones whose pinned pieces share one buffer (the
   *  store's pinBuffer): their view now, without waiting, once it has been read (null before),
   *  valid for as long as the lender lives. Saves the awaits of `whole` per product; the chained
   *  dispatches take only such views. */
  now?(): WeightView | null;
  /** Only on matrices split into several pieces, all of them resident: their row blocks now (as
   *  `parts` visits them), once read (null before), valid for as long as the lender lives; so
   *  that one dispatch can take them all (the lm_head of a pinned trunk). */
  partsNow?(): { view: WeightView; r0: number }[] | null;
}

/** Every matrix's view now (Mat.now), or null when one is not resident and read yet. */
export function viewsNow(mats: readonly Mat[]): WeightView[] | null {
  const views: WeightView[] = [];
  for (const m of mats) {
    const v = m.now?.();
    if (!v) return null;
    views.push(v);
  }
  return views;
}

/** The gate, up and down matrices of one gated MLP (a routed expert, as the store lends it). */
export interface GatedMats {
  gate: Mat;
  up: Mat;
  down: Mat;
}

/** A Mat over a view that is already in memory (tests, resident stores). */
export function residentMat(view: WeightView): Mat {
  return {
    name: view.name,
    rows: view.rows,
    cols: view.cols,
    format: view.format,
    resident: true,
    async parts(fn) {
      fn(view, 0);
    },
    async whole(fn) {
      return fn(view);
    },
    now: () => view,
  };
}

/**
 * Rows [r0, r1) of a view as a view of its own. An fp8 slice that does not start on a 128-row
 * scale block, or rows in column panels, are decoded to their exact f32 values instead (same
 * numbers, no shared scale rows or panel blocks).
 */
export function rowSlice(v: WeightView, r0: number, r1: number): WeightView {
  if (r0 === 0 && r1 === v.rows) return v;
  if ((v.format === 'fp8' && r0 % 128 !== 0) || v.panels) {
    const f = new Float32Array((r1 - r0) * v.cols);
    for (let r = r0; r < r1; r++) decodeRow(v, r, f.subarray((r - r0) * v.cols, (r - r0 + 1) * v.cols));
    return { name: `${v.name}[${r0}:${r1}]`, format: 'f32', rows: r1 - r0, cols: v.cols, data: new Uint8Array(f.buffer) };
  }
  const rowBytes = v.data.byteLength / v.rows;
  const out: WeightView = { ...v, name: `${v.name}[${r0}:${r1}]`, rows: r1 - r0, data: v.data.subarray(r0 * rowBytes, r1 * rowBytes) };
  if (v.scale) {
    if (v.format === 'fp8') {
      const sRow = (v.scale.byteLength / Math.ceil(v.rows / 128));
      out.scale = v.scale.subarray((r0 / 128) * sRow, Math.ceil(r1 / 128) * sRow);
    } else {
      const sRow = v.scale.byteLength / v.rows;
      out.scale = v.scale.subarray(r0 * sRow, r1 * sRow);
    }
  }
  return out;
}
