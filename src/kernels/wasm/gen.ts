// What the kernel emitters share (kernels.ts and the files it draws on): the memory layout's
// constants, the formats and their lane orders, the generator (numbered functions, vector
// constants, options) and the small pieces every product is built from (the dot's multiply-add
// step, the canonical combine, loops).

import {
  type Code, type FuncImport, type ValType, Fn, I32, F64, V128, get, set, block, loop, br, br_if, select,
  i32, f32, v128, i8x16, f32x4, shuffle32,
} from './emit.js';
import { addMadd, type Madd } from './fma.js';

/** `sdt` word of an mxfp4 matmul op that selects the optional 8-bit-activation kernel (q8.ts):
 *  x is then quantizeQ8's output. mxfp4 has E8M0 scales, so sdt is otherwise unused there. */
export const Q8_SDT = 3;
/** `sdt` word of a bf16 matmul op that selects the `--fast` trunk kernel (q8-trunk.ts): w is then a
 *  'q7' matrix (requantized, not bf16) and x quantizeQ8T's output. bf16 has no scales otherwise. */
export const Q7_SDT = 4;
/** `sdt` word of a bf16 matmul op whose rows are stored in column panels (formats/panels.ts): `s`
 *  is then the block rows << 16 | the panel width. */
export const PANEL_SDT = 5;

export const CTRL_BYTES = 16384;
export const MX_PLANES = 16384; // 256 * 32 bytes
export const FP8_TAB = MX_PLANES + 256 * 32; // 256 * 4 bytes
export const CONST_END = 32768;

export type Perm = 'id' | 'bf' | 'mx';
/** PERMS[p][k] = canonical column (within a block of 16) held at register position k (vector k>>2, lane k&3).
 *  'bf': bf16 pairs widened in place (shift left 16: the even column of each pair, mask: the odd).
 *  'mx': the same widening of mxfp4 decoded with its nibble planes apart (decode.ts
 *  mxGroupApart: the even columns' 8 bf16 values, then the odd columns'). */
export const PERMS: Record<Perm, readonly number[]> = {
  id: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
  bf: [0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15],
  mx: [0, 4, 8, 12, 2, 6, 10, 14, 1, 5, 9, 13, 3, 7, 11, 15],
};

export type Fmt = 'f32' | 'bf16' | 'f16' | 'fp8' | 'int4' | 'mxfp4';
/** Activation layout expected by mm_* and the accumulator layout of mvT_*. */
export const MM_PERM: Record<Fmt, Perm> = { f32: 'id', bf16: 'bf', f16: 'id', fp8: 'id', int4: 'bf', mxfp4: 'mx' };
/** How mm_* gets rows: in place, decoded to f32 (dec_*), or decoded to bf16 (dec_mx2bf; the tiled
 *  path decodes mxfp4 to f32, dec_mx2f32). */
export const ROWS: Record<Fmt, 'f32' | 'bf16' | 'dec_f32' | 'dec_bf16'> = {
  f32: 'f32', bf16: 'bf16', mxfp4: 'dec_bf16', f16: 'dec_f32', fp8: 'dec_f32', int4: 'dec_f32',
};
/** Tokens per tile of the multi-token (T >= TILE_MIN_T) matmul (see the tiled path). */
export const TILE_TOKENS = 4;
/** Rows per pass of the tiled path (1 or 2). */
export const TILE_ROWS = 2;
/** Smallest T that takes the tiled path, per format (fast.ts tiles x from this T on; below it,
 *  each token runs the single-token dot over the same rows). The bytes are the same either way.
 *  Why per format: the tiled path first widens or decodes each row pair into f32 scratch, which a
 *  few tokens' multiply-adds pay for sooner where the single-token path is weaker (fp8, int4, f16
 *  decode one row at a time below 4 tokens). Measurements: docs/TUNING.md "TILE_MIN_T"
 *  (`tune.js tile-min-t`). */
export const TILE_MIN_T: Readonly<Record<Fmt, number>> = { f32: 4, bf16: 8, f16: 2, fp8: 2, int4: 2, mxfp4: 4 };
/** Lane order of the tiled activations per format (the order the decoded row holds columns in). */
export const TILE_PERM: Record<Fmt, Perm> = { f32: 'id', bf16: 'id', f16: 'id', fp8: 'id', int4: 'bf', mxfp4: 'id' };
/** Column chunks of the tiled path's lane-group passes: rows wider than TILE_CHUNK_FROM columns are
 *  walked in chunks of at most TILE_CHUNK_COLS (evenly split), each chunk's four passes in turn,
 *  the accumulators kept between chunks; every lane still adds its columns in ascending order, so
 *  the bytes are the same. Why: over a whole wide row the two rows and the tile outgrow L1 and each
 *  of the four passes rereads them from L2. Measurements: docs/TUNING.md "TILE_CHUNK_COLS,
 *  TILE_CHUNK_FROM" (`tune.js tile-chunk`). */
export const TILE_CHUNK_COLS = 1024;
export const TILE_CHUNK_FROM = 4096;
/** Bytes of per-thread scratch the tiled path needs beyond a decoded f32 row. */
export const TILE_SCRATCH = 2 * 16 * 4 * 16 + 64;
export const FMTS: readonly Fmt[] = ['f32', 'bf16', 'f16', 'fp8', 'int4', 'mxfp4'];

export interface GenOptions {
  /** Use relaxed_swizzle for byte lookups (indices are always 0..15, or 0x80 for a zero byte, where
   *  both instructions give the same result; widenBf16 in decode.ts). */
  relaxed: boolean;
  /** f32x4.relaxed_madd is a fused multiply-add on this machine (loader.ts fusedMaddAvailable):
   *  the dots use it; otherwise they use fma.ts's exact emulation (same bytes, slower). */
  fusedMadd?: boolean;
  /** The 8-bit paths' integer dots as i32x4.relaxed_dot_i8x16_i7x16_add_s, accumulating, where it is
   *  one instruction (loader.ts intDotAddIsOne); else as i16x8 relaxed dots widened by a dot with
   *  ones. The same integers either way, so the same bytes; only the speed differs. */
  intDotAdd?: boolean;
  /** Tokens per tile of the multi-token path, and the smallest T that takes it, for every format
   *  (tuning only: the defaults TILE_TOKENS and TILE_MIN_T are what fast.ts lays the activations
   *  out for). */
  tileTokens?: number;
  tileMinT?: number;
  tileRows?: number;
  /** Column tile widths of the fused kernels (fused.ts), for tuning. */
  kdaTile?: number;
  wsumTile?: number;
}

export const ZERO = v128.i32x4(0, 0, 0, 0);
export const bytesOf = (a: ArrayLike<number>, T: typeof Int32Array | typeof Uint8Array): Uint8Array =>
  new Uint8Array(new T(Array.from(a)).buffer);
export const HI16_BYTES = bytesOf([-65536, -65536, -65536, -65536], Int32Array);
export const NIB_BYTES = bytesOf(new Array(16).fill(15), Uint8Array);

/** Vector constants live in memory at KCONST (written by the loader) and are loaded into locals in
 *  the prologue: V8 then keeps them in registers instead of rebuilding them in every loop. */
export const KCONST = FP8_TAB + 1024;
export const splat32 = (n: number): Uint8Array => bytesOf([n, n, n, n], Int32Array);
export const splatF = (x: number): Uint8Array => new Uint8Array(new Float32Array([x, x, x, x]).buffer);

/** Common parameter list of the matmul kernels. */
export const MM_PARAMS = {
  w: I32, s: I32, sdt: I32, rows: I32, cols: I32, x: I32, T: I32, y: I32, r0: I32, r1: I32, scratch: I32,
} as const;
export const DEC_PARAMS = { w: I32, s: I32, sdt: I32, rows: I32, cols: I32, r: I32, out: I32 } as const;

/** while (i < end) { body; i += step } with i, end locals (unsigned compare). */
export function forLt(i: number, end: number, step: number, ...body: Code[]): Code {
  return block(loop(br_if(1, i32.ge_u(get(i), get(end))), ...body, set(i, i32.add(get(i), i32.const(step))), br(0)));
}

export const addp = (a: Code, b: Code): Code => i32.add(a, b);
/** x = min(x, y), unsigned (x an i32 local). */
export const minU = (x: number, y: Code): Code => set(x, select(get(x), y, i32.lt_u(get(x), y)));
/** The row block of `row` in a matrix of `rows` rows stored in column panels of `blockRows`-row
 *  blocks (formats/panels.ts): its first row bs and its row count nb (bs, nb: i32 locals). */
export const panelBlock = (bs: number, nb: number, row: Code, blockRows: Code, rows: Code): Code[] => [
  set(bs, i32.mul(i32.div_u(row, blockRows), blockRows)),
  set(nb, i32.sub(rows, get(bs))),
  minU(nb, blockRows),
];
/** Load one word of each 64-byte line of [from, to) (p, end, tch: i32 locals), folded into tch, so
 *  that the lines are in the caches before the kernel reads them: ~100 lines in flight where the
 *  kernel's own loop holds ~14. The caller stores tch once at the end, which keeps the loads. */
export const touchLines = (p: number, end: number, tch: number, from: Code, to: Code): Code[] => [
  set(p, i32.and(from, i32.const(-64))), set(end, to),
  block(loop(br_if(1, i32.ge_u(get(p), get(end))),
    set(tch, i32.xor(get(tch), i32.load(get(p)))),
    set(p, i32.add(get(p), i32.const(64))), br(0))),
];
/** acc = fma(w, x, acc) per lane: the canonical dot's step. */
export const mac = (m: Madd, acc: number, w: Code, x: Code): Code => set(acc, m.v(w, x, get(acc)));

/**
 * Canonical reduction of 4 accumulators held in permutation `perm` to one f32 (left on the stack).
 * Uses locals sv (v128).
 */
export function finalize(f: Fn, perm: Perm, acc: readonly number[], tag: string): Code {
  const P = PERMS[perm];
  const pos: number[] = [];
  P.forEach((col, k) => {
    pos[col] = k;
  });
  const V = (k: number): Code => {
    const el = [0, 1, 2, 3].map((j) => {
      const p = pos[4 * k + j]!;
      return { v: p >> 2, l: p & 3 };
    });
    const vs = [...new Set(el.map((e) => e.v))];
    if (vs.length === 1 && el.every((e, j) => e.l === j)) return get(acc[vs[0]!]!);
    if (vs.length <= 2) {
      const a = vs[0]!, b = vs[1] ?? vs[0]!;
      return shuffle32(get(acc[a]!), get(acc[b]!), el.map((e) => (e.v === a ? e.l : 4 + e.l)));
    }
    const pair = (e0: { v: number; l: number }, e1: { v: number; l: number }): Code =>
      shuffle32(get(acc[e0.v]!), get(acc[e1.v]!), [e0.l, 4 + e1.l, 0, 0]);
    return shuffle32(pair(el[0]!, el[1]!), pair(el[2]!, el[3]!), [0, 1, 4, 5]);
  };
  const sv = f.local(`sv_${tag}`, V128);
  return [
    set(sv, f32x4.add(f32x4.add(V(0), V(1)), f32x4.add(V(2), V(3)))),
    // t = s + swap_pairs(s): lane 0 = s0+s1, lane 2 = s2+s3
    set(sv, f32x4.add(get(sv), shuffle32(get(sv), get(sv), [1, 0, 3, 2]))),
    f32.add(f32x4.extract_lane(get(sv), 0), f32x4.extract_lane(get(sv), 2)),
  ];
}

/** bf16 bits at address a -> f32. */
export const bf16At = (a: Code): Code => f32.reinterpret_i32(i32.shl(i32.load16_u(a), i32.const(16)));

export interface Generated {
  bytes: Uint8Array<ArrayBuffer>;
  exports: string[];
  /** Bytes to write at KCONST before the kernels run. */
  consts: Uint8Array;
}

/**
 * What every emitter shares while one module is generated: the module's functions (an emitter
 * calls fnx in the order the functions are to be numbered, so the emitters run in a fixed order),
 * the pool of vector constants and the options.
 */
export interface Gen {
  opts: GenOptions;
  fns: Fn[];
  pool: Uint8Array[];
  /** A new function of the module, numbered in creation order. */
  fnx: (name: string, params: Record<string, ValType>, result?: ValType | null, exported?: boolean) => Fn;
  /** A local holding vector constant b (16 bytes), loaded from the pool in f's prologue. */
  K: (f: Fn, b: Uint8Array) => number;
  Kg: (f: Fn, b: Uint8Array) => Code;
  swz: typeof i8x16.swizzle;
  /** Tokens per tile of the tiled matmul (opts.tileTokens, default TILE_TOKENS). */
  TT: number;
  /** The dot's multiply-add (fma.ts). */
  madd: Madd;
}

export function newGen(opts: GenOptions): Gen {
  const pool: Uint8Array[] = [];
  /** A local holding vector constant b (16 bytes), loaded from the pool in f's prologue. */
  const K = (f: Fn, b: Uint8Array): number => {
    let i = pool.findIndex((k) => k.every((x, j) => x === b[j]));
    if (i < 0) {
      i = pool.length;
      pool.push(b);
      if (KCONST + 16 * pool.length > CONST_END) throw new Error('constant pool full');
    }
    const name = `k${i}`;
    const had = f.has(name);
    const l = f.local(name, V128);
    if (!had) f.prologue.push(set(l, v128.load(i32.const(KCONST + 16 * i))));
    return l;
  };
  const Kg = (f: Fn, b: Uint8Array): Code => get(K(f, b));
  const swz = opts.relaxed ? i8x16.relaxed_swizzle : i8x16.swizzle;
  const fns: Fn[] = [];
  const fnx = (name: string, params: Record<string, ValType>, result: ValType | null = null, exported = true): Fn => {
    const f = new Fn(name, params, result, exported);
    f.index = FUNC_IMPORTS.length + fns.length;
    fns.push(f);
    return f;
  };
  const TT = Math.max(1, Math.min(16, opts.tileTokens ?? TILE_TOKENS));
  // first of the module's functions when emulated (fma_emu)
  const madd = addMadd(fnx, opts.fusedMadd ?? false);
  return { opts, fns, pool, fnx, K, Kg, swz, TT, madd };
}

export const reg = (f: Fn): number => f.index;

/**
 * The module's imported functions, before its own in the index space: `exp` is JavaScript's
 * Math.exp (loader.ts instantiate), so a softmax run in a kernel takes the very exponentials the
 * JavaScript reference does (V8 calls the same routine for both).
 */
export const FUNC_IMPORTS: readonly FuncImport[] = [{ module: 'env', name: 'exp', params: [F64], result: F64 }];
/** The function index of the imported exp (f64 -> f64). */
export const EXP_FN = 0;
