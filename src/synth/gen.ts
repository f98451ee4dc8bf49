// What each synthetic tensor holds (a small descriptor, cheap to plan and compare) and the fill
// function that streams its bytes (rng.ts does the drawing).

import { DTYPE_BYTES, type DType } from '../formats/dtypes.js';
import { bf16Table, e8m0Table, f32Table, fp8Table, int4Table, mxfp4Table, Rng, type Dist } from './rng.js';

export type Gen =
  /** N(mean, std) values, BF16 or F32. */
  | { kind: 'normal'; mean: number; std: number }
  /** Uniform in [lo, hi], BF16 or F32. */
  | { kind: 'uniform'; lo: number; hi: number }
  /** F32: the first `used` entries log(U[1, 16]), the rest exactly 0 (K3 pads A_log to 128). */
  | { kind: 'alog'; used: number }
  /** Fixed integer values (I32 `weight_shape`). */
  | { kind: 'const'; values: number[] }
  /** MXFP4 nibble pairs (E2M1 codes, low nibble = even column). */
  | { kind: 'mxfp4' }
  /** E8M0 scale bytes: `base`, or `base + 1` with probability pHigh. */
  | { kind: 'e8m0'; base: number; pHigh: number }
  /** INT4 pack-quantized nibble pairs (offset binary, low nibble first), written as bytes of I32 words. */
  | { kind: 'int4' }
  /** float8 e4m3fn bytes. */
  | { kind: 'fp8' };

/** One tensor of a planned checkpoint. */
export interface TensorPlan {
  name: string;
  /** The name its values are drawn for when not `name` (K2.5 draws its decoder as K2 does, so both layouts hold the same weights). */
  key?: string;
  dtype: DType;
  shape: number[];
  gen: Gen;
}

export function planBytes(t: { dtype: DType; shape: number[] }): number {
  return t.shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[t.dtype];
}

/** Writes the next piece of a tensor; pieces arrive in order, at byte `offset` of the tensor. */
export type Fill = (piece: Uint8Array, offset: number) => void;

let scratch = new Uint8Array(0);
/** A 4-byte-aligned view of `piece` (the piece itself, or scratch copied back by `done`). */
function aligned(piece: Uint8Array): { buf: Uint8Array; done: () => void } {
  if (piece.byteOffset % 4 === 0) return { buf: piece, done: () => {} };
  if (scratch.length < piece.length) scratch = new Uint8Array(Math.max(piece.length, 1 << 20));
  const buf = scratch.subarray(0, piece.length);
  return { buf, done: () => piece.set(buf) };
}

function dist(g: Gen): Dist {
  if (g.kind === 'normal') return { kind: 'normal', mean: g.mean, std: g.std };
  if (g.kind === 'uniform') return { kind: 'uniform', lo: g.lo, hi: g.hi };
  throw new Error(`synth: ${g.kind} is not a value distribution`);
}

/**
 * The fill of one tensor: deterministic from (seed, name) and independent of how the writer cuts
 * it into pieces, provided every piece but the last is a multiple of 8 bytes (the writer's are
 * multiples of 64).
 */
export function makeFill(t: TensorPlan, seed: number): Fill {
  const g = t.gen;
  const bytes = planBytes(t);
  const what = `synth: tensor ${t.name}`;
  let rng: Rng | null = null;
  const r = () => (rng ??= new Rng(seed, t.key ?? t.name));
  switch (g.kind) {
    case 'normal':
    case 'uniform': {
      if (t.dtype === 'BF16') {
        const tab = bf16Table(dist(g));
        return (piece) => {
          const { buf, done } = aligned(piece);
          r().map16(new Uint16Array(buf.buffer, buf.byteOffset, buf.length >> 1), tab);
          done();
        };
      }
      if (t.dtype === 'F32') {
        const tab = f32Table(dist(g));
        return (piece) => {
          const { buf, done } = aligned(piece);
          r().map32(new Uint32Array(buf.buffer, buf.byteOffset, buf.length >> 2), tab);
          done();
        };
      }
      throw new Error(`${what}: ${g.kind} values in ${t.dtype} are not supported`);
    }
    case 'mxfp4':
    case 'e8m0':
    case 'int4':
    case 'fp8': {
      const tab = g.kind === 'mxfp4' ? mxfp4Table() : g.kind === 'e8m0' ? e8m0Table(g.base, g.pHigh) : g.kind === 'int4' ? int4Table() : fp8Table();
      return (piece) => r().map8(piece, tab);
    }
    case 'alog':
    case 'const': {
      // Small tensors: built whole once, then sliced.
      let whole: Uint8Array | null = null;
      return (piece, offset) => {
        if (!whole) {
          const n = bytes / DTYPE_BYTES[t.dtype];
          if (g.kind === 'alog') {
            if (t.dtype !== 'F32') throw new Error(`${what}: A_log must be F32`);
            const f = new Float32Array(n);
            for (let i = 0; i < Math.min(g.used, n); i++) f[i] = Math.log(1 + 15 * r().nextFloat());
            whole = new Uint8Array(f.buffer);
          } else {
            if (t.dtype !== 'I32' || g.values.length !== n) throw new Error(`${what}: const needs I32 with ${n} values`);
            whole = new Uint8Array(new Int32Array(g.values).buffer);
          }
        }
        piece.set(whole.subarray(offset, offset + piece.length));
      };
    }
  }
}
