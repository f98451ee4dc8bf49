// What a kernel needs to know about a weight matrix: its format tag, shape, and packed bytes.
// Kernels multiply straight from these bytes; nothing is dequantized into a second copy.

export type WeightFormat = 'f32' | 'bf16' | 'f16' | 'fp8' | 'int4' | 'mxfp4';
/** A view's format: a checkpoint format, or 'q7', bf16 rows requantized at load by `--fast`. */
export type ViewFormat = WeightFormat | 'q7';

/**
 * A [rows, cols] matrix in one of the checkpoint formats (docs/spec/ARCHITECTURE.md §5):
 * - f32 / bf16 / f16: `data` row-major.
 * - fp8: `data` e4m3 bytes row-major; `scale` f32 [ceil(rows/128), ceil(cols/128)] (weight_scale_inv; multiply).
 * - int4: `data` little-endian i32 words [rows, ceil(cols/8)], low nibble first, value nibble-8;
 *         `scale` [rows, cols/32] in `scaleDtype`.
 * - mxfp4: `data` u8 [rows, cols/2], even column = low nibble, E2M1; `scale` u8 E8M0 [rows, cols/32].
 * - q7: never in a checkpoint: bf16 trunk rows REQUANTIZED at load under `--fast`; `data` u8
 *       [rows, cols] (7-bit value + 64), `scale` f32 [rows, cols/32] (kernels/wasm/q8-trunk.ts).
 * A bf16 view with `panels` holds the same values laid out in column panels (formats/panels.ts):
 * a resident wide trunk matrix, so that a single-token product's activations stay in L1.
 */
export interface WeightView {
  name: string;
  format: ViewFormat;
  rows: number;
  cols: number;
  data: Uint8Array;
  scale?: Uint8Array;
  scaleDtype?: 'F32' | 'BF16' | 'F16';
  /** bf16 only: `data` in blocks of `rows` rows, each in column panels `width` wide (formats/panels.ts). */
  panels?: PanelLayout;
}

/** Column panels of a bf16 matrix (formats/panels.ts): rows per block, columns per panel. */
export interface PanelLayout {
  rows: number;
  width: number;
}

/** Bytes a weight occupies (data + scales), for plans and reports. */
export function weightBytes(w: WeightView): number {
  return w.data.byteLength + (w.scale?.byteLength ?? 0);
}
