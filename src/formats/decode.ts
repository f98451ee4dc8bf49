// Row decoding: every weight format to its exact f32 values (docs/spec/ARCHITECTURE.md §5). The reference
// kernels (kernels/ref.ts) take their canonical dot over these values, and the store uses them
// for embedding rows; the WebAssembly kernels decode the same values in registers.

import { E2M1_TABLE, FP8_TABLE, e8m0ToF32, f16ToF32 } from './dtypes.js';
import type { WeightView } from './weight.js';
import { panelSliceOffset } from './panels.js';

/** Decode row r of a weight to exact f32 values in out[0 .. cols). */
export function decodeRow(w: WeightView, r: number, out: Float32Array): void {
  const { cols, data } = w;
  switch (w.format) {
    case 'q7':
      // requantized rows (`--fast`) have no exact f32 values to stand for: only their kernel reads them
      throw new TypeError(`${w.name}: q7 rows (requantized by --fast) are only read by the q7 product kernel`);
    case 'f32': {
      const src = new Float32Array(data.buffer, data.byteOffset + r * cols * 4, cols);
      out.set(src);
      return;
    }
    case 'bf16': {
      const o32 = new Uint32Array(out.buffer, out.byteOffset, cols);
      const L = w.panels;
      if (L) {
        // one slice per column panel (formats/panels.ts)
        for (let p = 0, c0 = 0; c0 < cols; p++, c0 += L.width) {
          const src = new Uint16Array(data.buffer, data.byteOffset + panelSliceOffset(w.rows, cols, L, r, p), L.width);
          for (let i = 0; i < L.width; i++) o32[c0 + i] = src[i]! << 16;
        }
        return;
      }
      const src = new Uint16Array(data.buffer, data.byteOffset + r * cols * 2, cols);
      for (let i = 0; i < cols; i++) o32[i] = src[i]! << 16;
      return;
    }
    case 'f16': {
      const src = new Uint16Array(data.buffer, data.byteOffset + r * cols * 2, cols);
      for (let i = 0; i < cols; i++) out[i] = f16ToF32(src[i]!);
      return;
    }
    case 'fp8': {
      // W[r,c] = fp8[r,c] * scale_inv[r/128, c/128] (docs/spec/ARCHITECTURE.md §5.1), rounded once to f32.
      const sc = scaleF32(w);
      const sCols = Math.ceil(cols / 128);
      const srow = Math.floor(r / 128) * sCols;
      const base = r * cols;
      for (let c = 0; c < cols; c++) out[c] = FP8_TABLE[data[base + c]!]! * sc[srow + (c >> 7)]!;
      return;
    }
    case 'int4': {
      // word = packed[r, c/8]; nibble = (word >> 4*(c%8)) & 15; W = (nibble - 8) * scale[r, c/32] (docs/spec/ARCHITECTURE.md §5.2).
      const words = Math.ceil(cols / 8);
      const sc = scaleF32(w);
      const gpr = Math.ceil(cols / 32);
      const base = r * words * 4;
      for (let c = 0; c < cols; c++) {
        const byte = data[base + (c >> 1)]!;
        const nib = c & 1 ? byte >> 4 : byte & 15;
        out[c] = (nib - 8) * sc[r * gpr + (c >> 5)]!;
      }
      return;
    }
    case 'mxfp4': {
      // nibble = even column low, odd column high; W = E2M1[nibble] * 2^(scale-127) (docs/spec/ARCHITECTURE.md §5.3).
      const half = cols >> 1;
      const gpr = cols >> 5;
      const sc = w.scale!;
      const base = r * half;
      for (let g = 0; g < gpr; g++) {
        const s = e8m0ToF32(sc[r * gpr + g]!);
        for (let j = 0; j < 16; j++) {
          const byte = data[base + g * 16 + j]!;
          const c = g * 32 + 2 * j;
          out[c] = E2M1_TABLE[byte & 15]! * s;
          out[c + 1] = E2M1_TABLE[byte >> 4]! * s;
        }
      }
      return;
    }
  }
}

const scaleCache = new WeakMap<Uint8Array, Float32Array>();

/** The scale tensor of an fp8 / int4 weight as f32 values (decoded once per buffer). */
function scaleF32(w: WeightView): Float32Array {
  const s = w.scale!;
  let f = scaleCache.get(s);
  if (f) return f;
  const dt = w.scaleDtype ?? 'F32';
  if (dt === 'F32') {
    f = new Float32Array(s.byteLength / 4);
    new Uint8Array(f.buffer).set(s);
  } else {
    const n = s.byteLength / 2;
    f = new Float32Array(n);
    const dv = new DataView(s.buffer, s.byteOffset, s.byteLength);
    for (let i = 0; i < n; i++) {
      const bits = dv.getUint16(i * 2, true);
      f[i] = dt === 'BF16' ? bf16Bits(bits) : f16ToF32(bits);
    }
  }
  scaleCache.set(s, f);
  return f;
}

const cvF = new Float32Array(1);
const cvU = new Uint32Array(cvF.buffer);
function bf16Bits(b: number): number {
  cvU[0] = b << 16;
  return cvF[0]!;
}
