// Column panels: how a resident wide bf16 matrix is laid out in memory (never on disk), so that the
// single-token product walks a few thousand columns of every row before the next columns and its
// activations stay in L1 (kernels/wasm/mm1.ts addPanelled says what that buys). The values are the
// stored ones, only their places change, and every product is still the canonical dot of its row
// (docs/NUMERICS.md): the same bytes as the row-major matrix.
//
// A [rows, cols] matrix in blocks of B rows (the last may be shorter: n_b rows), each block's bytes
// where its rows are in the row-major matrix (from b*B*cols*2), and within a block the columns in
// P panels of equal width w = cols / P (a multiple of 16): panel p (columns [p*w, (p+1)*w)) holds
// the block's n_b rows' slices one after another. So the value (r, c) lies at
//   2 * (b*B*cols + n_b*p*w + (r - b*B)*w + (c - p*w)),   b = floor(r / B), p = floor(c / w).
// A block is one piece of the store (B = the matrix's rows per piece), laid out in place once its
// bytes are read; a matrix pinned in one buffer is then its pieces one after another.

import type { PanelLayout } from './weight.js';

/** Columns a panel aims at: 2048 bf16 activations (8 KB of f32) stay in L1 beside the rows. */
export const PANEL_COLS = 2048;
/** Matrices wider than this go in panels (the wide single-token path's threshold, wasm/mm1.ts MM1_WIDE_FROM). */
export const PANEL_FROM = 3072;

/**
 * The panel width for `cols` columns: the widest w <= target with w a multiple of 16 dividing
 * cols, and at least target / 2 (else 0: no panels). K3's 7168 -> 1792, 12288 -> 2048, 6144 ->
 * 2048, 3584 -> 1792.
 */
export function panelWidth(cols: number, target = PANEL_COLS): number {
  if (cols % 16) return 0;
  for (let n = Math.ceil(cols / target); n <= cols / 16; n++) {
    const w = cols / n;
    if (Number.isInteger(w) && w % 16 === 0) return w >= target / 2 ? w : 0;
  }
  return 0;
}

/** The byte offset of row r's slice in panel p of a panelled [rows, cols] bf16 matrix. */
export function panelSliceOffset(rows: number, cols: number, L: PanelLayout, r: number, p: number): number {
  const b0 = Math.floor(r / L.rows) * L.rows;
  const nb = Math.min(L.rows, rows - b0);
  return 2 * (b0 * cols + nb * p * L.width + (r - b0) * L.width);
}

/**
 * Lay `rows` row-major bf16 rows of `cols` columns at buf[0 ..) out as one block of panels `width`
 * wide, in place: the transposition of a rows x P matrix of cells (a row's slice of a panel) by
 * following its cycles, one cell held aside at a time (width * 2 bytes) and a bit a cell to mark
 * the placed ones.
 */
export function toPanelsInPlace(buf: Uint8Array, rows: number, cols: number, width: number): void {
  if (width <= 0 || cols % width || width % 16) throw new RangeError(`panels: width ${width} does not split ${cols} columns in 16-column steps`);
  const P = cols / width, n = rows * P, cell = width * 2;
  if (P === 1 || rows <= 1) return;
  if (buf.byteLength < n * cell) throw new RangeError(`panels: ${buf.byteLength} bytes, need ${n * cell}`);
  const held = new Uint8Array(cell);
  const placed = new Uint8Array(Math.ceil(n / 8));
  // the cell that belongs at position d = p*rows + r is the one at r*P + p
  const from = (d: number): number => (d % rows) * P + Math.floor(d / rows);
  for (let start = 0; start < n; start++) {
    if (placed[start >> 3]! & (1 << (start & 7))) continue;
    placed[start >> 3]! |= 1 << (start & 7);
    let d = start, s = from(d);
    if (s === start) continue;
    held.set(buf.subarray(start * cell, start * cell + cell));
    while (s !== start) {
      buf.copyWithin(d * cell, s * cell, s * cell + cell);
      d = s;
      placed[d >> 3]! |= 1 << (d & 7);
      s = from(d);
    }
    buf.set(held, d * cell);
  }
}
