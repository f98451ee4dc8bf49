// What the kernels do to a trunk piece's bytes as it is read, handed to the store at load
// (src/graph/pieces.ts builds it from the kernels), so that the store knows no kernel's limits.

import type { WeightView } from '../formats/weight.js';
import type { CodedRows, TrunkMatrixLayout } from './layout.js';

export interface PieceTransform {
  /** Decode coded rows in place: `buf` is the piece's buffer, the stored bytes at its end. */
  decode?(buf: Uint8Array, run: CodedRows): void;
  /** `--fast`: which trunk matrices are requantized as read, how, and how their bytes are viewed. */
  requantize?: Requantizer;
  /** Most rows one block of column panels may hold (what the panel kernels can address); absent: no panels. */
  panelRows?: number;
}

export interface Requantizer {
  eligible(m: TrunkMatrixLayout): boolean;
  /** Requantize `rows` rows of `cols` columns in place (the rows' bytes first, their scales after). */
  inPlace(buf: Uint8Array, rows: number, cols: number): void;
  /** The view of requantized bytes: all `rows`, or rows [r0, r1) of a matrix held in one buffer. */
  view(name: string, buf: Uint8Array, rows: number, cols: number, r0?: number, r1?: number): WeightView;
}
