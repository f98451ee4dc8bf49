// ggml tensor data encodings for the GGUF bench files: f32 -> f16 / bf16 with round-to-nearest-even,
// BF16/F32 checkpoint bytes -> f32 values, and the lossless MXFP4 repack between the
// compressed-tensors layout of the K3 checkpoint and ggml's `block_mxfp4`.

import { GGML_TYPE, MXFP4_BLOCK, MXFP4_BLOCK_BYTES, type GgmlType } from './format.js';

// ---------------------------------------------------------------------------------------------
// Number formats

const f32buf = new Float32Array(1);
const u32buf = new Uint32Array(f32buf.buffer);

/** f32 value -> IEEE half bits, round to nearest even; overflow gives ±inf, NaN stays NaN. */
export function f32ToF16Bits(x: number): number {
  f32buf[0] = x;
  const b = u32buf[0]!;
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  const mant = b & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127; // unbiased
  if (e >= -14) {
    // Normal half (or overflow): drop 13 mantissa bits with round-to-nearest-even; a carry moves
    // into the exponent, and past the largest finite value it lands exactly on infinity.
    if (e > 15) return sign | 0x7c00;
    let h = ((e + 15) << 10) | (mant >>> 13);
    const rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem === 0x1000 && (h & 1) === 1)) h++;
    return sign | h;
  }
  // Subnormal half: value = m · 2^-24 with m = round(M · 2^(e+1)), M the 24-bit significand.
  const s = -e - 1;
  if (s > 24) return sign;
  const M = exp === 0 ? mant : mant | 0x800000;
  let h = M >>> s;
  const rem = M & ((1 << s) - 1);
  const half = 1 << (s - 1);
  if (rem > half || (rem === half && (h & 1) === 1)) h++;
  return sign | h;
}

/** bf16 bytes -> f32 bytes (exact). */
export function bf16BytesToF32(src: Uint8Array): Uint8Array {
  const n = src.byteLength >>> 1;
  const out = new Uint8Array(n * 4);
  const o32 = new Uint32Array(out.buffer);
  for (let i = 0; i < n; i++) o32[i] = (src[2 * i]! | (src[2 * i + 1]! << 8)) << 16 >>> 0;
  return out;
}

/** Values (f32-exact) -> bytes of `type` (F32, F16 rounded to nearest even, BF16 rounded to nearest even). */
export function encodeFloats(vals: Float32Array, type: GgmlType): Uint8Array {
  if (type === GGML_TYPE.F32) return new Uint8Array(vals.buffer.slice(vals.byteOffset, vals.byteOffset + vals.byteLength));
  const out = new Uint8Array(vals.length * 2);
  const o16 = new Uint16Array(out.buffer);
  if (type === GGML_TYPE.F16) {
    for (let i = 0; i < vals.length; i++) o16[i] = f32ToF16Bits(vals[i]!);
  } else if (type === GGML_TYPE.BF16) {
    const u = new Uint32Array(vals.buffer, vals.byteOffset, vals.length);
    for (let i = 0; i < vals.length; i++) {
      const b = u[i]!;
      o16[i] = (b & 0x7fffffff) > 0x7f800000 ? ((b >>> 16) | 0x40) & 0xffff : ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
    }
  } else {
    throw new Error(`gguf: cannot encode floats as type ${type}`);
  }
  return out;
}

/** Bytes of a BF16 or F32 checkpoint tensor -> f32 values. */
export function decodeFloats(bytes: Uint8Array, dtype: string): Float32Array {
  if (dtype === 'F32') return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
  if (dtype === 'BF16') return new Float32Array(bf16BytesToF32(bytes).buffer);
  throw new Error(`gguf: cannot decode dtype ${dtype} as floats`);
}

// ---------------------------------------------------------------------------------------------
// MXFP4: compressed-tensors (checkpoint) <-> ggml block_mxfp4
//
// Checkpoint (K3.md §5): per row, `packed` [in/2] bytes where byte k holds element 2k in its low
// nibble and element 2k+1 in its high nibble; `scale` [in/32] E8M0 bytes, value = E2M1[code] ·
// 2^(scale−127). ggml: per 32 elements one 17-byte block { u8 e; u8 qs[16] } where qs[j] holds
// element j in its low nibble and element j+16 in its high nibble; value = kvalues[code] · 2^(e−128)
// with kvalues = 2·E2M1, i.e. the same value for the same (code, scale byte). So the repack only
// moves nibbles and copies the scale byte: it is lossless. (One exception in meaning, not in bytes:
// scale 255 is NaN in OCP MX and 0 in our engine, but 2^127 in ggml; the converter refuses it.)

/** Repack `rows` rows of `cols` elements from the checkpoint layout to ggml blocks. */
export function mxfp4ToGgml(packed: Uint8Array, scale: Uint8Array, rows: number, cols: number): Uint8Array {
  if (cols % MXFP4_BLOCK !== 0) throw new Error(`mxfp4: ${cols} columns is not a multiple of ${MXFP4_BLOCK}`);
  const nb = cols / MXFP4_BLOCK;
  if (packed.byteLength !== rows * (cols / 2)) throw new Error(`mxfp4: packed has ${packed.byteLength} bytes, want ${rows * (cols / 2)}`);
  if (scale.byteLength !== rows * nb) throw new Error(`mxfp4: scale has ${scale.byteLength} bytes, want ${rows * nb}`);
  const out = new Uint8Array(rows * nb * MXFP4_BLOCK_BYTES);
  const codes = new Uint8Array(MXFP4_BLOCK);
  for (let r = 0; r < rows; r++) {
    for (let b = 0; b < nb; b++) {
      const src = r * (cols / 2) + b * 16;
      for (let k = 0; k < 16; k++) {
        const byte = packed[src + k]!;
        codes[2 * k] = byte & 0x0f;
        codes[2 * k + 1] = byte >>> 4;
      }
      const dst = (r * nb + b) * MXFP4_BLOCK_BYTES;
      out[dst] = scale[r * nb + b]!;
      for (let j = 0; j < 16; j++) out[dst + 1 + j] = codes[j]! | (codes[j + 16]! << 4);
    }
  }
  return out;
}

/** The inverse of `mxfp4ToGgml`. */
export function ggmlToMxfp4(blocks: Uint8Array, rows: number, cols: number): { packed: Uint8Array; scale: Uint8Array } {
  if (cols % MXFP4_BLOCK !== 0) throw new Error(`mxfp4: ${cols} columns is not a multiple of ${MXFP4_BLOCK}`);
  const nb = cols / MXFP4_BLOCK;
  if (blocks.byteLength !== rows * nb * MXFP4_BLOCK_BYTES) throw new Error(`mxfp4: ${blocks.byteLength} block bytes, want ${rows * nb * MXFP4_BLOCK_BYTES}`);
  const packed = new Uint8Array(rows * (cols / 2));
  const scale = new Uint8Array(rows * nb);
  const codes = new Uint8Array(MXFP4_BLOCK);
  for (let r = 0; r < rows; r++) {
    for (let b = 0; b < nb; b++) {
      const src = (r * nb + b) * MXFP4_BLOCK_BYTES;
      scale[r * nb + b] = blocks[src]!;
      for (let j = 0; j < 16; j++) {
        const byte = blocks[src + 1 + j]!;
        codes[j] = byte & 0x0f;
        codes[j + 16] = byte >>> 4;
      }
      const dst = r * (cols / 2) + b * 16;
      for (let k = 0; k < 16; k++) packed[dst + k] = codes[2 * k]! | (codes[2 * k + 1]! << 4);
    }
  }
  return { packed, scale };
}

/** Values of ggml MXFP4 blocks (as ggml decodes them), for checks. */
export function ggmlMxfp4Values(blocks: Uint8Array): Float32Array {
  const kv = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];
  const nb = blocks.byteLength / MXFP4_BLOCK_BYTES;
  const out = new Float32Array(nb * MXFP4_BLOCK);
  for (let b = 0; b < nb; b++) {
    const d = 2 ** (blocks[b * MXFP4_BLOCK_BYTES]! - 128);
    for (let j = 0; j < 16; j++) {
      const byte = blocks[b * MXFP4_BLOCK_BYTES + 1 + j]!;
      out[b * MXFP4_BLOCK + j] = kv[byte & 0x0f]! * d;
      out[b * MXFP4_BLOCK + j + 16] = kv[byte >>> 4]! * d;
    }
  }
  return out;
}
