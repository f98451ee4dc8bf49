// A borrowed weight matrix. The model never holds weight bytes: it asks a Mat for a lease, which
// says how the bytes can be had now: one resident view, resident row blocks, or streamed (row
// blocks in order, which the store may read from disk one at a time, or whole).

import type { ViewFormat, WeightView } from '../formats/weight.js';
import { decodeRow } from '../formats/decode.js';

/** A matrix's row block: its view and first row. */
export interface Block {
  view: WeightView;
  r0: number;
}

/**
 * How a Mat lends its bytes now:
 * - resident: one view, without waiting, valid for as long as the lender lives (a pinned matrix
 *   once read; a split one whose pieces share one buffer; an expert in its slot).
 * - blocks: its row blocks, every one resident and read (a split matrix pinned piece by piece),
 *   valid as long, so that one dispatch can take them all (the lm_head of a pinned trunk).
 * - streamed: visit it through `parts` (consecutive row blocks, in order; for y = W x) or `whole`
 *   (one view; for matrices read by row, like MLA's kv_b): reads are awaited, and a view is valid
 *   only inside the callback; after it returns the store may reuse the memory.
 */
export type Lease =
  | { kind: 'resident'; view: WeightView }
  | { kind: 'blocks'; blocks: Block[] }
  | { kind: 'streamed'; parts(fn: (view: WeightView, r0: number) => void): Promise<void>; whole<R>(fn: (view: WeightView) => R): Promise<R> };

export interface Mat {
  readonly name: string;
  readonly rows: number;
  readonly cols: number;
  readonly format: ViewFormat;
  /** Held in memory for as long as the Mat is lent (resident once read). */
  readonly resident?: boolean;
  lease(): Lease;
}

/** The matrix's one view now (a resident lease), or null. */
export function viewNow(m: Mat): WeightView | null {
  const l = m.lease();
  return l.kind === 'resident' ? l.view : null;
}

/** Visit the matrix as consecutive row blocks [r0, r0 + view.rows), in order, whatever its lease. */
export async function visitParts(m: Mat, fn: (view: WeightView, r0: number) => void): Promise<void> {
  const l = m.lease();
  switch (l.kind) {
    case 'resident':
      return fn(l.view, 0);
    case 'blocks':
      for (const b of l.blocks) fn(b.view, b.r0);
      return;
    case 'streamed':
      return l.parts(fn);
  }
}

/** The whole matrix as one view, whatever its lease (a matrix lent in blocks has none). */
export async function visitWhole<R>(m: Mat, fn: (view: WeightView) => R): Promise<R> {
  const l = m.lease();
  switch (l.kind) {
    case 'resident':
      return fn(l.view);
    case 'blocks':
      throw new Error(`${m.name}: one view of a matrix lent in ${l.blocks.length} blocks`);
    case 'streamed':
      return l.whole(fn);
  }
}

/** The gate, up and down matrices of one gated MLP (a routed expert, as the store lends it). */
export interface GatedMats {
  gate: Mat;
  up: Mat;
  down: Mat;
}

/** A Mat over a view that is already in memory (tests, resident stores). */
export function residentMat(view: WeightView): Mat {
  const lease: Lease = { kind: 'resident', view };
  return {
    name: view.name,
    rows: view.rows,
    cols: view.cols,
    format: view.format,
    resident: true,
    lease: () => lease,
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
