// How the kernels address a weight (its format's op words, in place or copied into the arena) and
// how a product reads its activations (rows, permuted rows, token tiles, 8-bit blocks), with the
// layouts made eagerly on the calling thread. Kernels (fast.ts) lends its arena as an Arena.

import type { WeightView, WeightFormat, PanelLayout } from '../formats/weight.js';
import type { KernelExports } from './wasm/loader.js';
import { FMTS, MM_PERM, TILE_PERM, TILE_MIN_T, Q8_SDT, Q7_SDT, PANEL_SDT, type Fmt, type Perm } from './wasm/kernels.js';
import { q8Bytes, Q8_LAYOUT, ORDER_CODE, type Q8Order } from './wasm/q8.js';
import { q8tBytes, Q8T_LAYOUT } from './wasm/q8-trunk.js';

/** What the layouts need of a Kernels: its exports and its arena. */
export interface Arena {
  ex: KernelExports;
  contains(a: ArrayBufferView): boolean;
  /** a copied into the arena: its offset. */
  copyIn(a: ArrayBufferView): number;
  allocOffset(bytes: number, alignment?: number): number;
}

/** A weight as its kernels address it: format, byte offsets of data and scales, scale type. */
export interface Resolved {
  readonly fmt: Fmt;
  readonly w: number;
  readonly s: number;
  readonly sdt: number;
  readonly rows: number;
  readonly cols: number;
}

export const FMT_CODE: Record<WeightFormat, number> = Object.fromEntries(FMTS.map((f, i) => [f, i])) as Record<WeightFormat, number>;
const SDT: Record<string, number> = { F32: 0, BF16: 1, F16: 2 };
const SBYTES = [4, 2, 2];
/** The formats whose products the profile counts as experts (K3's routed experts, K2's int4). */
export const EXPERT_FMTS: ReadonlySet<string> = new Set(['mxfp4', 'int4']);
/** A panelled bf16 matrix's op words (wasm/gen.ts PANEL_SDT): s = block rows << 16 | panel width. */
function panelWord(w: WeightView, L: PanelLayout): { s: number; sdt: number } {
  if (w.format !== 'bf16') throw new TypeError(`${w.name}: column panels are for bf16 rows, not ${w.format}`);
  if (!(L.width > 0 && L.width % 16 === 0 && w.cols % L.width === 0 && L.width < 65536)) throw new RangeError(`${w.name}: panels ${L.width} wide do not split ${w.cols} columns in 16-column steps`);
  if (!(L.rows > 0 && L.rows < 32768 && Number.isInteger(L.rows))) throw new RangeError(`${w.name}: panel blocks of ${L.rows} rows (1 .. 32767)`);
  return { s: L.rows * 65536 + L.width, sdt: PANEL_SDT };
}
/** The transposed products read rows in the checkpoint's layouts only: not q7 rows, not panels. */
export function noTransposed(w: WeightView): void {
  if (w.format === 'q7') throw new TypeError(`${w.name}: q7 (requantized by --fast) rows have no transposed product`);
  if (w.panels) throw new TypeError(`${w.name}: rows in column panels have no transposed product`);
}
/** The arguments of q8_act for quantizeQ8's and quantizeQ8T's layouts (scaleMul as f32 bits). */
const actArgs = (o: { order: Q8Order; scaleMul: number; offset: number }): { order: number; scaleBits: number; offset: number } => {
  if (Math.fround(o.scaleMul) !== o.scaleMul) throw new RangeError('q8_act: scaleMul must be an f32');
  return { order: ORDER_CODE[o.order], scaleBits: new Int32Array(new Float32Array([o.scaleMul]).buffer)[0]!, offset: o.offset };
};
const Q8_ACT = actArgs(Q8_LAYOUT), Q8T_ACT = actArgs(Q8T_LAYOUT);

/** Activations prepared for one layout (0/1 rows, 2/3 tiles, id/bf perm; 4 q8; 5 q7) at `off`. */
export interface Prep {
  x: Float32Array;
  layout: number;
  cols: number;
  T: number;
  off: number;
}

/** How a product's kernel reads its activations (layoutOf). */
export interface Layout {
  layout: number;
  tiled: boolean;
  perm: Perm;
  q8: boolean;
  q7: boolean;
}

export function resolveView(A: Arena, w: WeightView, maxCols: number): Resolved {
  const { rows, cols, format } = w;
  if (!(rows >= 0 && cols >= 0 && Number.isInteger(rows) && Number.isInteger(cols))) throw new RangeError(`${w.name}: bad shape`);
  if (cols > maxCols) throw new RangeError(`${w.name}: ${cols} columns exceed maxCols ${maxCols} (createKernels option)`);
  if (format === 'q7') return resolveQ7(A, w);
  const fmt = format as Fmt;
  if (!(format in FMT_CODE)) throw new TypeError(`${w.name}: unknown format ${format}`);
  const sdt = SDT[w.scaleDtype ?? 'F32'];
  if (sdt === undefined) throw new TypeError(`${w.name}: bad scale dtype ${w.scaleDtype}`);
  let dataBytes: number, scaleBytes = 0;
  switch (fmt) {
    case 'f32': dataBytes = rows * cols * 4; break;
    case 'bf16': case 'f16': dataBytes = rows * cols * 2; break;
    case 'fp8':
      dataBytes = rows * cols;
      scaleBytes = Math.ceil(rows / 128) * Math.ceil(cols / 128) * SBYTES[sdt]!;
      break;
    case 'int4':
      dataBytes = rows * Math.ceil(cols / 8) * 4;
      scaleBytes = rows * Math.ceil(cols / 32) * SBYTES[sdt]!;
      break;
    case 'mxfp4':
      if (cols % 32) throw new RangeError(`${w.name}: mxfp4 needs columns in multiples of 32, got ${cols}`);
      dataBytes = (rows * cols) / 2;
      scaleBytes = (rows * cols) / 32;
      break;
  }
  if (w.data.byteLength < dataBytes) throw new RangeError(`${w.name}: ${w.data.byteLength} data bytes, need ${dataBytes}`);
  if (scaleBytes && (!w.scale || w.scale.byteLength < scaleBytes)) throw new RangeError(`${w.name}: scale has ${w.scale?.byteLength ?? 0} bytes, need ${scaleBytes}`);
  const d = A.contains(w.data) ? w.data.byteOffset : A.copyIn(w.data.subarray(0, dataBytes));
  if (w.panels) return { fmt, w: d, ...panelWord(w, w.panels), rows, cols };
  const s = !scaleBytes ? 0 : A.contains(w.scale!) ? w.scale!.byteOffset : A.copyIn(w.scale!.subarray(0, scaleBytes));
  return { fmt, w: d, s, sdt, rows, cols };
}

/** A requantized trunk matrix (`--fast`, wasm/q8-trunk.ts): the bf16 entry with sdt Q7_SDT runs it. */
function resolveQ7(A: Arena, w: WeightView): Resolved {
  const { rows, cols } = w;
  if (cols % 32) throw new RangeError(`${w.name}: q7 needs columns in multiples of 32, got ${cols}`);
  const dataBytes = rows * cols, scaleBytes = rows * (cols / 32) * 4;
  if (w.data.byteLength < dataBytes) throw new RangeError(`${w.name}: ${w.data.byteLength} data bytes, need ${dataBytes}`);
  if (!w.scale || w.scale.byteLength < scaleBytes) throw new RangeError(`${w.name}: scale has ${w.scale?.byteLength ?? 0} bytes, need ${scaleBytes}`);
  const d = A.contains(w.data) ? w.data.byteOffset : A.copyIn(w.data.subarray(0, dataBytes));
  const s = A.contains(w.scale) ? w.scale.byteOffset : A.copyIn(w.scale.subarray(0, scaleBytes));
  return { fmt: 'bf16', w: d, s, sdt: Q7_SDT, rows, cols };
}

/**
 * x [T, cols] in the layout the format's kernel wants: for T >= TILE_MIN_T[fmt] token tiles
 * (tilex), below that the rows themselves or their permuted copy.
 */
function prepX(A: Arena, x: Float32Array, T: number, cols: number, perm: Perm, tiled: boolean): number {
  const n = T * cols;
  if (x.length < n) throw new RangeError(`activations: ${x.length} values, need ${n}`);
  const inMem = A.contains(x);
  if (tiled) {
    const src = inMem ? x.byteOffset : A.copyIn(x.subarray(0, n));
    const dst = A.allocOffset(n * 4);
    A.ex.tilex!(src, dst, T, cols, perm === 'bf' ? 1 : 0);
    return dst;
  }
  if (perm === 'id') return inMem ? x.byteOffset : A.copyIn(x.subarray(0, n));
  const src = inMem ? x.byteOffset : A.copyIn(x.subarray(0, n));
  const dst = A.allocOffset(n * 4);
  A.ex[`permx_${perm}`]!(src, dst, T, cols);
  return dst;
}

/** x [T, cols] quantized for the q8 kernel (wasm/q8.ts quantizeQ8's bytes), in the arena. */
function prepQ8(A: Arena, x: Float32Array, T: number, cols: number): number {
  return quantizeActs(A, x, T, cols, q8Bytes(T, cols), Q8_ACT);
}

/** x [T, cols] quantized for the q7 trunk kernel (wasm/q8-trunk.ts quantizeQ8T's bytes), in the arena. */
function prepQ8T(A: Arena, x: Float32Array, T: number, cols: number): number {
  return quantizeActs(A, x, T, cols, q8tBytes(T, cols), Q8T_ACT);
}

/**
 * quantizeBlocks (wasm/q8.ts) by the Wasm q8_act, on the calling thread: the same bytes, a
 * tenth of the time. x is read in place when it lies in this memory, else copied in first.
 */
function quantizeActs(A: Arena, x: Float32Array, T: number, cols: number, bytes: number, o: { order: number; scaleBits: number; offset: number }): number {
  const n = T * cols;
  if (x.length < n) throw new RangeError(`activations: ${x.length} values, need ${n}`);
  if (cols % 32) throw new RangeError(`q8: columns ${cols} not a multiple of 32`);
  const src = A.contains(x) ? x.byteOffset : A.copyIn(x.subarray(0, n));
  const r = A.allocOffset(bytes, 64);
  A.ex.q8_act!(src, r, T, cols, o.order, o.scaleBits, o.offset);
  return r;
}

/** How a product of R with T tokens wants its activations (wasm/kernels.ts): token tiles from
 *  TILE_MIN_T[fmt] tokens on, else rows; permuted or not; or 8-bit blocks (q8 experts, q7 trunk). */
export function layoutOf(R: Resolved, T: number, fastMxfp4: boolean): Layout {
  const tiled = T >= TILE_MIN_T[R.fmt];
  const perm = tiled ? TILE_PERM[R.fmt] : MM_PERM[R.fmt];
  const q8 = fastMxfp4 && R.fmt === 'mxfp4';
  const q7 = R.sdt === Q7_SDT;
  return { layout: q8 ? 4 : q7 ? 5 : perm === 'mx' ? 6 : (tiled ? 2 : 0) + (perm === 'bf' ? 1 : 0), tiled, perm, q8, q7 };
}

/** The sdt word of R's matmul op: Q8_SDT sends mxfp4 to the 8-bit kernel (fastMxfp4). */
export function opSdt(R: Resolved, fastMxfp4: boolean): number {
  return fastMxfp4 && R.fmt === 'mxfp4' ? Q8_SDT : R.sdt;
}

/** x [T, R.cols] prepared for R's kernel on the calling thread, once per (array, layout): its offset. */
export function stageX(A: Arena, preps: Prep[], xa: Float32Array, T: number, R: Resolved, L: Layout): number {
  for (const p of preps) if (p.x === xa && p.layout === L.layout && p.cols === R.cols && p.T === T) return p.off;
  const x = L.q8 ? prepQ8(A, xa, T, R.cols) : L.q7 ? prepQ8T(A, xa, T, R.cols) : prepX(A, xa, T, R.cols, L.perm, L.tiled);
  preps.push({ x: xa, layout: L.layout, cols: R.cols, T, off: x });
  return x;
}

/**
 * The same preparation of x [T, R.cols] at `src` (in this memory) for a chained dispatch: where
 * the prepared x will be, and the writer of its OP_PREP (null: plain rows, which the kernel
 * reads at src itself).
 */
export function prepOpArgs(A: Arena, src: number, T: number, R: Resolved, L: Layout): [number, number[] | null] {
  const cols = R.cols, n = T * cols;
  if (!L.q8 && !L.q7 && !L.tiled && L.perm === 'id') return [src, null];
  let dst: number, args: number[];
  if (L.q8 || L.q7) {
    if (cols % 32) throw new RangeError(`q8: columns ${cols} not a multiple of 32`);
    const o = L.q8 ? Q8_ACT : Q8T_ACT;
    dst = A.allocOffset(L.q8 ? q8Bytes(T, cols) : q8tBytes(T, cols), 64);
    args = [2, src, dst, T, cols, o.order, o.scaleBits, o.offset];
  } else {
    dst = A.allocOffset(n * 4);
    args = L.tiled ? [1, src, dst, T, cols, L.perm === 'bf' ? 1 : 0, 0, 0] : [L.perm === 'mx' ? 3 : 0, src, dst, T, cols, 0, 0, 0];
  }
  return [dst, args];
}
