// Element types found in safetensors headers, and exact scalar decoders for the small formats.
// Every decoder returns the exact value the bits mean; all of them are representable in f32
// (docs/spec/ARCHITECTURE.md §5).

export type DType = 'F64' | 'F32' | 'F16' | 'BF16' | 'I64' | 'I32' | 'I16' | 'I8' | 'U8' | 'BOOL' | 'F8_E4M3';

export const DTYPE_BYTES: Record<DType, number> = {
  F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, I8: 1, U8: 1, BOOL: 1, F8_E4M3: 1,
};

export function isDType(s: string): s is DType {
  return Object.prototype.hasOwnProperty.call(DTYPE_BYTES, s);
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** bf16 bits -> exact value (a bf16 is the top half of an f32). */
export function bf16ToF32(bits: number): number {
  u32[0] = (bits & 0xffff) << 16;
  return f32[0]!;
}

/** f32 -> bf16 bits, round to nearest even (used by the checkpoint writer). NaN stays NaN. */
export function f32ToBf16(x: number): number {
  f32[0] = x;
  const b = u32[0]!;
  if ((b & 0x7fffffff) > 0x7f800000) return ((b >>> 16) | 0x40) & 0xffff;
  const rounded = b + 0x7fff + ((b >>> 16) & 1);
  return (rounded >>> 16) & 0xffff;
}

/** IEEE half bits -> exact value. */
export function f16ToF32(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >>> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

/** float8 e4m3fn byte -> exact value (docs/spec/ARCHITECTURE.md §5.1): bias 7, no infinities, 0x7f/0xff are NaN. */
export function fp8e4m3ToF32(b: number): number {
  const s = b & 0x80 ? -1 : 1;
  const e = (b >>> 3) & 0xf;
  const m = b & 7;
  if (e === 0) return s * 2 ** -6 * (m / 8);
  if (e === 15 && m === 7) return NaN;
  return s * 2 ** (e - 7) * (1 + m / 8);
}

/** Nearest e4m3fn byte for a value (writer side; saturates at +-448). */
export function f32ToFp8e4m3(x: number): number {
  let best = 0;
  let bestErr = Infinity;
  for (let b = 0; b < 256; b++) {
    const v = FP8_TABLE[b]!;
    if (Number.isNaN(v)) continue;
    const err = Math.abs(v - x);
    if (err < bestErr || (err === bestErr && (b & 1) === 0)) {
      best = b;
      bestErr = err;
    }
  }
  return best;
}

/** All 256 e4m3fn values, for table lookups in kernels. */
export const FP8_TABLE: Float32Array = (() => {
  const t = new Float32Array(256);
  for (let b = 0; b < 256; b++) t[b] = fp8e4m3ToF32(b);
  return t;
})();

/** E2M1 (FP4) values by nibble; bit 3 is the sign (docs/spec/ARCHITECTURE.md §5.3). */
export const E2M1_TABLE: Float32Array = new Float32Array([
  0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6,
]);

/** E8M0 scale byte -> 2^(e-127). 255 is NaN in OCP; like the C engine we map it to 0 (the group adds nothing). */
export function e8m0ToF32(e: number): number {
  return e === 255 ? 0 : 2 ** (e - 127);
}
