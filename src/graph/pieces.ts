// The kernels' transforms of trunk bytes as the store reads them (store/pieces.ts): coded rows
// decoded, `--fast` requantization to 7-bit blocks, and the most rows a panel block may hold.
// Made here, at load, so that the store knows no kernel's limits.

import { bf16Decoder, q7View, requantizeQ7InPlace } from '../kernels/fast.js';
import { decodeRunInPlace } from '../formats/bf16-code.js';
import type { PieceTransform } from '../store/pieces.js';

/** Rows a piece in column panels may have: fewer than the panel kernels' op word addresses (fast.ts panelWord). */
const PANEL_ROWS = 32768;

/** The q7 block is 32 columns (kernels/wasm/q8-trunk.ts). */
const Q7_BLOCK = 32;

export const KERNEL_PIECES: PieceTransform = {
  decode: (buf, run) => decodeRunInPlace(buf, run, bf16Decoder()),
  requantize: {
    // bf16 products in whole blocks, not read by rows (MLA's kv_b), not the router (names.ts TrunkMatrix.exact)
    eligible: (m) => m.format === 'bf16' && !m.whole && !m.exact && m.cols % Q7_BLOCK === 0,
    inPlace: requantizeQ7InPlace,
    view: q7View,
  },
  panelRows: PANEL_ROWS,
};
