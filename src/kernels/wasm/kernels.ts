// The WebAssembly SIMD kernels, generated as a module by emit.ts. They reproduce ref.ts byte for
// byte (docs/NUMERICS.md): every output element is the canonical 16-lane dot of a decoded weight
// row with an activation row, each step one fused multiply-add (fma.ts: f32x4.relaxed_madd where
// the machine fuses it, an exact emulation elsewhere).
//
// Lane permutations. The canonical dot puts column i in lane i%16 and adds, per lane, in column
// order. Which register position holds which lane is free, as long as it is fixed. bf16 widens
// cheapest as "shift left 16" (even columns) and "mask the high half" (odd columns), which puts
// columns {0,2,4,6},{1,3,5,7},{8,..,14},{9,..,15} in the four accumulators (perm 'bf'); the
// activations are permuted the same way once per call (permx_bf) and the final reduction puts
// the lanes back in canonical order before the fixed combine
//   s_j = (l_j + l_{j+4}) + (l_{j+8} + l_{j+12}),  acc = (s_0 + s_1) + (s_2 + s_3).
// Columns past the last full block of 16 ("the tail") stay in natural order and are added
// sequentially, as in ref.ts.
//
// Formats. f32 and bf16 are used in place. mxfp4 rows are decoded to bf16 (each E2M1*2^(s-127)
// is exactly a bf16: at most 2 significant bits, f32 exponent range) with two byte lookups per
// 16 nibbles into a per-scale table, then take the bf16 path. f16, fp8 and int4 rows are
// decoded to exact f32 values (fp8 and int4 after the one f32 multiply by their scale, as in
// ref.ts) and then dotted. A row is decoded once per call and used for all T tokens.
//
// Memory layout of one kernel memory (see fast.ts): [0, CTRL_BYTES) pool control words,
// then constant tables (MX_PLANES: for each E8M0 scale byte s, the 16 decoded E2M1*2^(s-127)
// values as bf16, low bytes then high bytes; FP8_TAB: the 256 e4m3 values; vector constants
// at KCONST), then, from CONST_END, the arena.

import {
  type Code, type FuncImport, type ValType, Fn, I32, F32, F64, V128, assemble, get, set, call, drop, block, loop, br, br_if, ifv, if_, select,
  i32, f32, v128, i8x16, i16x8, i32x4, f32x4, shuffle32,
} from './emit.js';
import { addFused } from './fused.js';
import { addAct } from './act.js';
import { addKdaBlock } from './kda-block.js';
import { addQ8, addQuantizeBlocks } from './q8.js';
import { addQ7 } from './q8-trunk.js';
import { addMadd, type Madd } from './fma.js';

/** `sdt` word of an mxfp4 matmul op that selects the optional 8-bit-activation kernel (q8.ts):
 *  x is then quantizeQ8's output. mxfp4 has E8M0 scales, so sdt is otherwise unused there. */
export const Q8_SDT = 3;
/** `sdt` word of a bf16 matmul op that selects the `--fast` trunk kernel (q8-trunk.ts): w is then a
 *  'q7' matrix (requantized, not bf16) and x quantizeQ8T's output. bf16 has no scales otherwise. */
export const Q7_SDT = 4;

export const CTRL_BYTES = 16384;
export const MX_PLANES = 16384; // 256 * 32 bytes
export const FP8_TAB = MX_PLANES + 256 * 32; // 256 * 4 bytes
export const CONST_END = 32768;

export type Perm = 'id' | 'bf';
/** PERMS[p][k] = canonical column (within a block of 16) held at register position k (vector k>>2, lane k&3). */
export const PERMS: Record<Perm, readonly number[]> = {
  id: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
  bf: [0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15],
};

export type Fmt = 'f32' | 'bf16' | 'f16' | 'fp8' | 'int4' | 'mxfp4';
/** Activation layout expected by mm_* and the accumulator layout of mvT_*. */
export const MM_PERM: Record<Fmt, Perm> = { f32: 'id', bf16: 'bf', f16: 'id', fp8: 'id', int4: 'bf', mxfp4: 'bf' };
/** How mm_* gets rows: in place, decoded to f32 (dec_*), or decoded to bf16 (dec_mx2bf; the tiled
 *  path decodes mxfp4 to f32, dec_mx2f32). */
const ROWS: Record<Fmt, 'f32' | 'bf16' | 'dec_f32' | 'dec_bf16'> = {
  f32: 'f32', bf16: 'bf16', mxfp4: 'dec_bf16', f16: 'dec_f32', fp8: 'dec_f32', int4: 'dec_f32',
};
/** Tokens per tile of the multi-token (T >= TILE_MIN_T) matmul (see the tiled path). */
export const TILE_TOKENS = 4;
/** Rows per pass of the tiled path (1 or 2). */
export const TILE_ROWS = 2;
/** Smallest T that takes the tiled path (fast.ts tiles x from this T on; below it, each token
 *  runs the single-token dot, which measured as fast or faster for T < 4). */
export const TILE_MIN_T = 4;
/** Stored rows (bf16, f32) the single-token matmul walks side by side, and the least distance
 *  between them: rows j and j+q for j in [r0, r0+q) of a range of n rows, q = n/2 when at least
 *  MM1_MIN_DIST, then the rest one by one. Each row is still the canonical dot. Why: memory
 *  streams. Measured on Zen 3, one thread, GB/s of 2048-column bf16 rows streamed from DRAM (640
 *  MB) / from L3 (one 8 MB matrix again and again), medians of alternating runs:
 *    one row at a time                        6.9-7.8 / 8.0-13.4
 *    2 rows far apart, two lane-group passes  8.3-9.4 / 11.4-17.1   <- this
 *    2 far, one pass (8 accumulators)         4.8-6.8 / 9.1-12.0
 *    4 far, two passes                        7.2-7.9 / 7.0-7.9
 *    4 far, four passes                       7.6-9.5 / 8.7-9.2
 *  (a plain Wasm read loop: 8-9.6 with one stream, 10-11 with four; rows 1 or 2 apart instead
 *  of far apart were slower than one row: neighbouring pages look like one stream). */
export const MM1_ROWS = 2;
export const MM1_MIN_DIST = 8;
/** Columns per chunk of the single-token product's lane-group passes (rowsBody): the rows' passes
 *  take turns chunk by chunk (pass 1 then pass 2 over columns 0..255, then over 256..511, ...)
 *  instead of each walking the whole row. Each accumulator sees the same multiply-adds in the same
 *  order, so the bytes are the same. Why: a pass is 4 multiply-add chains (2 rows x 2 lane groups)
 *  of 4 cycles each, too few to keep the FMA units busy; two passes over a chunk fit in the reorder
 *  window together, so 8 chains run at once, without the 8 live accumulators that V8 spills.
 *  Measured in one process taking turns (AMD EPYC Zen 5, 1 thread, bf16 2048-column rows, T = 1,
 *  GMAC/s, medians of 11): from DRAM (64 matrices of 2048x2048) whole rows 12.6, chunks of 64
 *  columns 16.3, 128 16.5, 256 16.8, 512 16.2; from L2 (3 matrices of 256x2048) 15.0 / 18.5 / 21.2
 *  / 21.7 / 18.4. k3-medium decode, trunk kernels' time per token, three alternating runs: 1
 *  thread 40.6-50.2 -> 30.2-33.3 ms, 2 threads 31.2-37.1 -> 23.5-26.3 ms. */
export const MM1_CHUNK_COLS = 256;
/** mxfp4 rows the single-token matmul decodes (to bf16, into scratch) and then walks side by side,
 *  in two passes over lane groups as MM1_ROWS (6 accumulators live a pass). Why: a row's dot is 4
 *  chains of fused multiply-adds (4 cycles each), so one decoded row at a time waits on them.
 *  - Two rows in one pass (8 accumulators, the choice until December 2026: Intel Xeon, 1 thread,
 *    k3-medium decode 8.9 tok/s with 1 row, 10.2 with 2) leave x86 V8 short of the 16 xmm
 *    registers: two accumulators went to the stack, each multiply-add then waiting on a store and a
 *    reload (`--print-wasm-code`).
 *  - Measured in one process taking turns (AMD EPYC Zen 4, 1 thread, mxfp4 768x1024, T = 1,
 *    GMAC/s, medians): 2 rows one pass 5.5-5.7; 2 rows two passes 7.4; 3 rows two passes 8.6-9.0
 *    (the same from DRAM, 64 matrices); 4 rows two passes 4.6-5.6 (8 live again); 4 rows four passes
 *    5.1-7.6; 6 rows four passes 5.1-7.4. k3-medium decode, experts' kernel time per token: 1 thread
 *    29.5-38 -> 20.8-23 ms, 2 threads 18.5-21 -> 11.7-13.8. */
export const MM1_DEC_ROWS = 3;
/** 32-column groups per chunk of the single-token mxfp4 / int4 product (addMm1Chunked), which decodes
 *  and dots chunk by chunk instead of decoding whole rows first. Measured in one process taking
 *  turns (AMD EPYC Zen 5, 1 thread, T = 1, GMAC/s, medians of 15): mxfp4 768x1024 from DRAM (64
 *  matrices) whole rows 7.1, chunks of 4 groups 8.6, of 6 8.5, of 8 8.8; from L2 9.9 / 10.7 / 10.9
 *  / 10.9; 1024x768 from DRAM 6.6 / 8.3 (4) / 7.7 (8). k3-medium decode, experts' kernel time per
 *  token, 1 thread, three alternating runs: whole rows 19.5-23.9 ms, chunks of 4 14.4-18.1 (about
 *  0.45 of the trunk's time in the same run against 0.55). A chunk of 4 groups is about 280
 *  instructions of decode (three rows) and as many of dot: the two fit in the reorder window. */
export const MX_CHUNK_GROUPS = 4;
/** Lane order of the tiled activations per format (the order the decoded row holds columns in). */
export const TILE_PERM: Record<Fmt, Perm> = { f32: 'id', bf16: 'id', f16: 'id', fp8: 'id', int4: 'bf', mxfp4: 'id' };
/** Bytes of per-thread scratch the tiled path needs beyond a decoded f32 row. */
export const TILE_SCRATCH = 2 * 16 * 4 * 16 + 64;
export const FMTS: readonly Fmt[] = ['f32', 'bf16', 'f16', 'fp8', 'int4', 'mxfp4'];

export interface GenOptions {
  /** Use relaxed_swizzle for table lookups (indices are always 0..15, so results are identical). */
  relaxed: boolean;
  /** f32x4.relaxed_madd is a fused multiply-add on this machine (loader.ts fusedMaddAvailable):
   *  the dots use it; otherwise they use fma.ts's exact emulation (same bytes, slower). */
  fusedMadd?: boolean;
  /** The 8-bit paths' integer dots as i32x4.relaxed_dot_i8x16_i7x16_add_s, accumulating, where it is
   *  one instruction (loader.ts intDotAddIsOne); else as i16x8 relaxed dots widened by a dot with
   *  ones. The same integers either way, so the same bytes; only the speed differs. */
  intDotAdd?: boolean;
  /** Tokens per tile of the multi-token path, and the smallest T that takes it (tuning only: the
   *  defaults TILE_TOKENS and TILE_MIN_T are what fast.ts lays the activations out for). */
  tileTokens?: number;
  tileMinT?: number;
  tileRows?: number;
  /** Column tile widths of the fused kernels (fused.ts), for tuning. */
  kdaTile?: number;
  wsumTile?: number;
}

const ZERO = v128.i32x4(0, 0, 0, 0);
const bytesOf = (a: ArrayLike<number>, T: typeof Int32Array | typeof Uint8Array): Uint8Array =>
  new Uint8Array(new T(Array.from(a)).buffer);
const HI16_BYTES = bytesOf([-65536, -65536, -65536, -65536], Int32Array);
const NIB_BYTES = bytesOf(new Array(16).fill(15), Uint8Array);

/** Vector constants live in memory at KCONST (written by the loader) and are loaded into locals in
 *  the prologue: V8 then keeps them in registers instead of rebuilding them in every loop. */
export const KCONST = FP8_TAB + 1024;
const splat32 = (n: number): Uint8Array => bytesOf([n, n, n, n], Int32Array);
const splatF = (x: number): Uint8Array => new Uint8Array(new Float32Array([x, x, x, x]).buffer);

/** Common parameter list of the matmul kernels. */
const MM_PARAMS = {
  w: I32, s: I32, sdt: I32, rows: I32, cols: I32, x: I32, T: I32, y: I32, r0: I32, r1: I32, scratch: I32,
} as const;
const DEC_PARAMS = { w: I32, s: I32, sdt: I32, rows: I32, cols: I32, r: I32, out: I32 } as const;

/** while (i < end) { body; i += step } with i, end locals (unsigned compare). */
function forLt(i: number, end: number, step: number, ...body: Code[]): Code {
  return block(loop(br_if(1, i32.ge_u(get(i), get(end))), ...body, set(i, i32.add(get(i), i32.const(step))), br(0)));
}

const addp = (a: Code, b: Code): Code => i32.add(a, b);
/** acc = fma(w, x, acc) per lane: the canonical dot's step. */
const mac = (m: Madd, acc: number, w: Code, x: Code): Code => set(acc, m.v(w, x, get(acc)));

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
const bf16At = (a: Code): Code => f32.reinterpret_i32(i32.shl(i32.load16_u(a), i32.const(16)));

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
interface Gen {
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

function newGen(opts: GenOptions): Gen {
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

const reg = (f: Fn): number => f.index;

/**
 * The module's imported functions, before its own in the index space: `exp` is JavaScript's
 * Math.exp (loader.ts instantiate), so a softmax run in a kernel takes the very exponentials the
 * JavaScript reference does (V8 calls the same routine for both).
 */
export const FUNC_IMPORTS: readonly FuncImport[] = [{ module: 'env', name: 'exp', params: [F64], result: F64 }];
/** The function index of the imported exp (f64 -> f64). */
export const EXP_FN = 0;

// ---- scalar helpers ----
function addScalarHelpers(gen: Gen): Fn {
  const f16s = gen.fnx('f16_to_f32', { h: I32 }, F32);
  {
    const f = f16s;
    const mag = f.local('mag', I32), sign = f.local('sign', I32);
    f.body = [
      set(mag, i32.and(get(f.p('h')), i32.const(0x7fff))),
      set(sign, i32.shl(i32.and(get(f.p('h')), i32.const(0x8000)), i32.const(16))),
      ifv(F32, i32.lt_u(get(mag), i32.const(0x400)),
        f32.reinterpret_i32(i32.or(i32.reinterpret_f32(f32.mul(f32.convert_i32_s(get(mag)), f32.const(2 ** -24))), get(sign))),
        f32.reinterpret_i32(i32.or(
          i32.add(i32.add(i32.shl(get(mag), i32.const(13)), i32.const(0x38000000)),
            ifv(I32, i32.gt_u(get(mag), i32.const(0x7bff)), i32.const(0x38000000), i32.const(0))),
          get(sign)))),
    ];
  }
  return f16s;
}

/** Scale number idx of a scale tensor at s in dtype sdt (0 F32, 1 BF16, 2 F16), as f32 (f16s: the f16 helper). */
function scaleAt(f16s: Fn, sdt: number, S: Code, idx: Code): Code {
  return sdt === 0 ? f32.load(addp(S, i32.shl(idx, i32.const(2))))
    : sdt === 1 ? bf16At(addp(S, i32.shl(idx, i32.const(1))))
    : call(reg(f16s), i32.load16_u(addp(S, i32.shl(idx, i32.const(1)))));
}

/** A decoder per scale dtype, and a dispatcher on sdt (once per row). */
function perSdt(gen: Gen, name: string, build: (f: Fn, sdt: number) => void): Fn {
  const v = [0, 1, 2].map((sdt) => {
    const f = gen.fnx(`${name}_${sdt}`, DEC_PARAMS, I32, false);
    build(f, sdt);
    return f;
  });
  const f = gen.fnx(name, DEC_PARAMS, I32);
  const args = Object.keys(DEC_PARAMS).map((n) => get(f.p(n)));
  f.body = ifv(I32, i32.eqz(get(f.p('sdt'))), call(reg(v[0]!), ...args),
    ifv(I32, i32.eq(get(f.p('sdt')), i32.const(1)), call(reg(v[1]!), ...args), call(reg(v[2]!), ...args)));
  return f;
}

// ---- decoders: row r -> exact f32 values at out (perm MM_PERM[fmt]), or bf16 for mxfp4 ----
type Decoders = Partial<Record<Fmt | 'mx2bf' | 'mx2f32', Fn>>;

/** Common frame for decoders: loop over 16-column blocks c = 0, 16, .. < n16, then the tail. */
function decFrame(f: Fn, blockBody: (c: number, o: number) => Code[], tail: (c: number, o: number) => Code): Code {
  const c = f.local('c', I32), o = f.local('o', I32), n16 = f.local('n16', I32), cols = f.local('cols_', I32);
  return [
    set(n16, i32.and(get(f.p('cols')), i32.const(-16))),
    set(cols, get(f.p('cols'))),
    set(c, i32.const(0)),
    set(o, get(f.p('out'))),
    block(loop(br_if(1, i32.ge_u(get(c), get(n16))), ...blockBody(c, o),
      set(c, i32.add(get(c), i32.const(16))), set(o, i32.add(get(o), i32.const(64))), br(0))),
    // tail, natural order
    block(loop(br_if(1, i32.ge_u(get(c), get(cols))),
      f32.store(get(o), tail(c, o)),
      set(c, i32.add(get(c), i32.const(1))), set(o, i32.add(get(o), i32.const(4))), br(0))),
    get(f.p('out')),
  ];
}

// f16 (perm id): exact widening with integer ops; subnormals via an exact convert * 2^-24.
function f16vec(gen: Gen, f: Fn, h: Code, tmp: number): Code {
  const { Kg } = gen;
  // h: i32x4 of half bits. Result f32x4 bits.
  const sp = (n: number): Code => Kg(f, splat32(n));
  const mag = v128.and(get(tmp), sp(0x7fff));
  const c38 = sp(0x38000000);
  return [
    set(tmp, h),
    v128.or(
      v128.bitselect(
        f32x4.mul(f32x4.convert_i32x4_s(mag), Kg(f, splatF(2 ** -24))),
        i32x4.add(i32x4.add(i32x4.shl(mag, i32.const(13)), c38),
          v128.and(i32x4.gt_s(mag, sp(0x7bff)), c38)),
        i32x4.lt_s(mag, sp(0x400))),
      i32x4.shl(v128.and(get(tmp), sp(0x8000)), i32.const(16))),
  ];
}

function addDecF16(gen: Gen, f16s: Fn): Fn {
  const f = gen.fnx('dec_f16', DEC_PARAMS, I32);
  const rb = f.local('rb', I32), v = f.local('v', V128), t = f.local('t', V128);
  f.body = [
    set(rb, addp(get(f.p('w')), i32.mul(i32.mul(get(f.p('r')), get(f.p('cols'))), i32.const(2)))),
    decFrame(f, (c, o) => {
      const a = addp(get(rb), i32.shl(get(c), i32.const(1)));
      const out: Code[] = [];
      for (let k = 0; k < 2; k++) {
        out.push(set(v, v128.load(a, 16 * k)));
        out.push(v128.store(get(o), f16vec(gen, f, i32x4.extend_low_i16x8_u(get(v)), t), 32 * k));
        out.push(v128.store(get(o), f16vec(gen, f, i32x4.extend_high_i16x8_u(get(v)), t), 32 * k + 16));
      }
      return out;
    }, (c) => call(reg(f16s), i32.load16_u(addp(get(rb), i32.shl(get(c), i32.const(1)))))),
  ];
  return f;
}

// fp8 e4m3 (perm id): 16 bytes at a time made exact bf16 values (every e4m3 value is one: 3
// mantissa bits, exponents 2^-9 .. 2^8), widened to f32, then one f32 multiply by the 128x128
// block scale. Per byte b = s eeee mmm: the bf16's high byte is s | (60 + (e >> 1)) (a lookup on
// b >> 4) and its low byte (e & 1) << 7 | m << 4 = (b & 15) << 4. Subnormals (e = 0: m * 2^-9)
// are corrected by XOR with lookups on b & 0x7f, which the plain swizzle reads as 0 from 16 on
// (so only e = 0 changes); NaN (b & 0x7f = 0x7f, e4m3fn has no infinities) gets the high byte
// s | 0x7f, a bf16 NaN with the low byte 0xf0. Measured: fp8 1024x1024, 1 thread (AMD EPYC Zen
// 5), GMAC/s: T = 1 2.4 -> 4.5, T = 8 12.4 -> 15.2, against the integer/convert formula per f32
// lane it replaced (about twice the instructions). test/kernels.test.ts checks all 256 codes.
const FP8_HB = Array.from({ length: 16 }, (_, i) => ((i & 8) << 4) | (60 + (i & 7)));
/** e = 0: XOR turning the normal formula's bytes into those of m * 2^-9 (m = index), 0 past 7. */
const FP8_SUB_LB = [0x00, 0x10, 0xa0, 0xf0, 0x40, 0x70, 0x20, 0x10, 0, 0, 0, 0, 0, 0, 0, 0];
const FP8_SUB_HB = [0x3c, 0x07, 0x07, 0x07, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
const splat8 = (n: number): Uint8Array => new Uint8Array(16).fill(n);

/** 16 e4m3 bytes (v) -> two vectors of 8 bf16 (lo: bytes 0-7, hi: 8-15), natural order. */
function fp8ToBf16(gen: Gen, f: Fn, v: number, lo: number, hi: number): Code[] {
  const { Kg } = gen;
  const v7 = f.local('f8v7', V128), hb = f.local('f8hb', V128), lb = f.local('f8lb', V128);
  return [
    set(v7, v128.and(get(v), Kg(f, splat8(0x7f)))),
    set(hb, i8x16.swizzle(Kg(f, Uint8Array.from(FP8_HB)), v128.and(i16x8.shr_u(get(v), i32.const(4)), Kg(f, splat8(0x0f))))),
    set(hb, v128.xor(get(hb), i8x16.swizzle(Kg(f, Uint8Array.from(FP8_SUB_HB)), get(v7)))),
    set(hb, v128.or(get(hb), v128.and(i8x16.eq(get(v7), Kg(f, splat8(0x7f))), Kg(f, splat8(0x7f))))),
    set(lb, v128.and(i16x8.shl(get(v), i32.const(4)), Kg(f, splat8(0xf0)))),
    set(lb, v128.xor(get(lb), i8x16.swizzle(Kg(f, Uint8Array.from(FP8_SUB_LB)), get(v7)))),
    set(lo, i8x16.shuffle(get(lb), get(hb), ilLo)),
    set(hi, i8x16.shuffle(get(lb), get(hb), ilHi)),
  ];
}

function addDecFp8(gen: Gen, f16s: Fn): Fn {
  return perSdt(gen, 'dec_fp8', (f, sdt) => {
    const rb = f.local('rb', I32), srow = f.local('srow', I32), v = f.local('v', V128), h = f.local('h', V128);
    const t = f.local('t', V128), sc = f.local('sc', V128);
    f.body = [
      set(rb, addp(get(f.p('w')), i32.mul(get(f.p('r')), get(f.p('cols'))))),
      // srow = floor(r/128) * ceil(cols/128)
      set(srow, i32.mul(i32.shr_u(get(f.p('r')), i32.const(7)), i32.shr_u(i32.add(get(f.p('cols')), i32.const(127)), i32.const(7)))),
      decFrame(f, (c, o) => [
        set(sc, f32x4.splat(scaleAt(f16s, sdt, get(f.p('s')), addp(get(srow), i32.shr_u(get(c), i32.const(7)))))),
        set(v, v128.load(addp(get(rb), get(c)))),
        ...fp8ToBf16(gen, f, v, h, t),
        ...[h, t].flatMap((b, k) => [
          v128.store(get(o), f32x4.mul(i32x4.shl(i32x4.extend_low_i16x8_u(get(b)), i32.const(16)), get(sc)), 32 * k),
          v128.store(get(o), f32x4.mul(i32x4.shl(i32x4.extend_high_i16x8_u(get(b)), i32.const(16)), get(sc)), 32 * k + 16),
        ]),
      ], (c) => f32.mul(
        f32.load(addp(i32.const(FP8_TAB), i32.shl(i32.load8_u(addp(get(rb), get(c))), i32.const(2)))),
        scaleAt(f16s, sdt, get(f.p('s')), addp(get(srow), i32.shr_u(get(c), i32.const(7)))))),
    ];
  });
}

// int4 (perm bf): 8 bytes = 16 nibbles widened to u16, low/high nibbles split, (n-8) * scale.
function addDecInt4(gen: Gen, f16s: Fn): Fn {
  return perSdt(gen, 'dec_int4', (f, sdt) => {
    const rb = f.local('rb', I32), sb = f.local('sb', I32), v = f.local('v', V128), lo = f.local('lo', V128), hi = f.local('hi', V128);
    const sc = f.local('sc', V128);
    const cols = get(f.p('cols'));
    const eight = gen.Kg(f, splat32(8)), nib16 = gen.Kg(f, splat32(0x000f000f));
    const val = (n: Code): Code => f32x4.mul(f32x4.convert_i32x4_s(i32x4.sub(n, eight)), get(sc));
    f.body = [
      // row stride ceil(cols/8)*4 bytes; scale row r*ceil(cols/32)
      set(rb, addp(get(f.p('w')), i32.mul(get(f.p('r')), i32.shl(i32.shr_u(i32.add(cols, i32.const(7)), i32.const(3)), i32.const(2))))),
      set(sb, i32.mul(get(f.p('r')), i32.shr_u(i32.add(cols, i32.const(31)), i32.const(5)))),
      decFrame(f, (c, o) => [
        set(sc, f32x4.splat(scaleAt(f16s, sdt, get(f.p('s')), addp(get(sb), i32.shr_u(get(c), i32.const(5)))))),
        set(v, v128.load8x8_u(addp(get(rb), i32.shr_u(get(c), i32.const(1))))),
        set(lo, v128.and(get(v), nib16)),
        set(hi, i16x8.shr_u(get(v), i32.const(4))),
        v128.store(get(o), val(i32x4.extend_low_i16x8_u(get(lo)))),
        v128.store(get(o), val(i32x4.extend_low_i16x8_u(get(hi))), 16),
        v128.store(get(o), val(i32x4.extend_high_i16x8_u(get(lo))), 32),
        v128.store(get(o), val(i32x4.extend_high_i16x8_u(get(hi))), 48),
      ], (c) => {
        const byte = i32.load8_u(addp(get(rb), i32.shr_u(get(c), i32.const(1))));
        const nib = i32.and(i32.shr_u(byte, i32.shl(i32.and(get(c), i32.const(1)), i32.const(2))), i32.const(15));
        return f32.mul(f32.convert_i32_s(i32.sub(nib, i32.const(8))),
          scaleAt(f16s, sdt, get(f.p('s')), addp(get(sb), i32.shr_u(get(c), i32.const(5)))));
      }),
    ];
  });
}

const ilLo = [0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23];
const ilHi = ilLo.map((x) => x + 8);
// mxfp4 -> bf16 row in natural column order. One 16-byte load = one 32-column group with one
// scale; the per-scale table (MX_PLANES) holds the 16 exact values E2M1*2^(s-127) as bf16, low-byte
// plane then high-byte plane, so two byte lookups + a byte interleave give 8 bf16 values.
// Why a separate pass (measured on Zen 3, V8 11): the T = 1 product is bound by the byte
// shuffles and shifts, which share two SIMD pipes; decoding in registers inside the dot needs the
// same shuffles (and V8 then spills), and multiplying each 32-column partial by the E8M0 scale
// (constant tables) only adds multiplies. Both measured 6-15% slower than this path.
/** Stores 16 columns as bf16 from their low and high bytes: at o + off (o a local), or o an address. */
const storeBf16x16 = (lb: number, hb: number, at: (h: number) => [Code, number]): Code[] => [ilLo, ilHi].map((il, h) =>
  v128.store(at(h)[0], i8x16.shuffle(get(lb), get(hb), il), at(h)[1]));

function addDecMx2bf(gen: Gen): Fn {
  return addMxDecoder(gen, 'dec_mx2bf', true, 2, (f, lb, hb, o, off) => storeBf16x16(lb, hb, (h) => [get(o), off + 16 * h]));
}

/** mxfp4 -> f32 row in natural column order, for the tiled path: dec_mx2bf's lookups and byte
 *  interleave, each bf16 vector then widened to two f32 vectors in registers (what the tiled path's
 *  widen does from memory), so the row is written once and never reread as bf16. */
function addDecMx2f32(gen: Gen): Fn {
  return addMxDecoder(gen, 'dec_mx2f32', false, 4, (f, lb, hb, o, off) => {
    const bf = f.local('bf', V128);
    return [ilLo, ilHi].flatMap((il, h) => [
      set(bf, i8x16.shuffle(get(lb), get(hb), il)),
      v128.store(get(o), i32x4.shl(i32x4.extend_low_i16x8_u(get(bf)), i32.const(16)), off + 32 * h),
      v128.store(get(o), i32x4.shl(i32x4.extend_high_i16x8_u(get(bf)), i32.const(16)), off + 32 * h + 16),
    ]);
  });
}

/** 32-column groups an mxfp4 decoder's loop takes a pass (then the rest one at a time): the
 *  loop's own instructions (V8's moves of the pointers, the interrupt check, the branch) are about
 *  a sixth of a one-group pass. Measured in one process taking turns, mxfp4 768x1024 T = 1, AMD
 *  EPYC Zen 4, 1 thread, medians of three series (GMAC/s): 1 group 5.8-6.2, 2 groups 6.4-6.5, 4
 *  groups 6.3-6.6; T = 8 (the tiled path's decoder) 12.1-12.9 / 13.0 / 12.9-13.1. */
const MX_DEC_UNROLL = 4;

/**
 * One 32-column mxfp4 group in registers: the 16 bytes at pw + 16k, the scale byte at ps + k; the
 * scale's planes (MX_PLANES) looked up with the nibbles in column order; emit(lb, hb, h) takes the
 * low and high bytes of the bf16 values of columns 16h .. 16h + 15. Uses locals prefixed mx_.
 */
function mxGroup(gen: Gen, f: Fn, pw: Code, ps: Code, k: number, emit: (lb: number, hb: number, h: number) => Code[]): Code[] {
  const { swz } = gen;
  const V = (n: string): number => f.local(`mx_${n}`, V128);
  const pl = f.local('mx_pl', I32), L = V('L'), H = V('H'), B = V('B'), lo = V('lo'), hi = V('hi');
  const idx = [V('i0'), V('i1')], lb = V('lb'), hb = V('hb');
  const nib = gen.Kg(f, NIB_BYTES);
  return [
    set(pl, addp(i32.const(MX_PLANES), i32.shl(i32.load8_u(ps, k), i32.const(5)))),
    set(L, v128.load(get(pl))),
    set(H, v128.load(get(pl), 16)),
    set(B, v128.load(pw, 16 * k)),
    set(lo, v128.and(get(B), nib)),
    set(hi, v128.and(i16x8.shr_u(get(B), i32.const(4)), nib)),
    // nibble indices in column order: cols 0..15, then 16..31
    set(idx[0]!, i8x16.shuffle(get(lo), get(hi), ilLo)),
    set(idx[1]!, i8x16.shuffle(get(lo), get(hi), ilHi)),
    ...[0, 1].flatMap((h) => [set(lb, swz(get(L), get(idx[h]!))), set(hb, swz(get(H), get(idx[h]!))), ...emit(lb, hb, h)]),
  ];
}

/**
 * The frame of the mxfp4 decoders: per 32-column group (16 bytes, one scale byte), the scale's
 * planes and the nibble indices in column order; emit16(f, lb, hb, o, off) stores 16 columns from
 * their low and high bytes (lb, hb) at o + off. Output columns take colBytes each (2: bf16, 4: f32).
 */
function addMxDecoder(gen: Gen, name: string, exported: boolean, colBytes: 2 | 4,
  emit16: (f: Fn, lb: number, hb: number, o: number, off: number) => Code[]): Fn {
  const f = gen.fnx(name, DEC_PARAMS, I32, exported);
  const p = f.local('p', I32), pend = f.local('pend', I32), sp = f.local('sp', I32), o = f.local('o', I32);
  const half = i32.shr_u(get(f.p('cols')), i32.const(1));
  /** Group k after p (16 bytes, scale byte at sp + k) to o + k * 32 columns. */
  const group = (k: number): Code[] => mxGroup(gen, f, get(p), get(sp), k,
    (lb, hb, h) => emit16(f, lb, hb, o, 32 * colBytes * k + 16 * colBytes * h));
  const U = MX_DEC_UNROLL;
  const step = (n: number): Code[] => [
    set(p, i32.add(get(p), i32.const(16 * n))), set(sp, i32.add(get(sp), i32.const(n))),
    set(o, i32.add(get(o), i32.const(32 * colBytes * n))),
  ];
  f.body = [
    set(p, addp(get(f.p('w')), i32.mul(get(f.p('r')), half))),
    set(pend, addp(get(p), half)),
    set(sp, addp(get(f.p('s')), i32.mul(get(f.p('r')), i32.shr_u(get(f.p('cols')), i32.const(5))))),
    set(o, get(f.p('out'))),
    ...(U > 1 ? [block(loop(br_if(1, i32.gt_u(i32.add(get(p), i32.const(16 * U)), get(pend))),
      ...Array.from({ length: U }, (_, k) => group(k)).flat(), ...step(U), br(0)))] : []),
    block(loop(br_if(1, i32.ge_u(get(p), get(pend))), ...group(0), ...step(1), br(0))),
    get(f.p('out')),
  ];
  return f;
}

function addDecoders(gen: Gen, f16s: Fn): Decoders {
  const dec: Decoders = {};
  dec.f16 = addDecF16(gen, f16s);
  dec.fp8 = addDecFp8(gen, f16s);
  dec.int4 = addDecInt4(gen, f16s);
  dec.mx2bf = addDecMx2bf(gen);
  dec.mx2f32 = addDecMx2f32(gen);
  return dec;
}

// ---- rows of the single-token path: a row's 4 accumulators per token. Several tokens per row
// (TB >= 2 in registers) made V8 hoist the loads and spill accumulators (Zen 5 / V8 11): the
// tiled path below is how several tokens share a row. Several rows share the loop only when they
// lie far apart (MM1_ROWS) ----

/** How a kernel gets the weights of one row: per step of `stepCols` columns. */
interface RowSource {
  stepCols: 16 | 32;
  /** Weight bytes a step advances (32: bf16, 64: f32). */
  stepBytes: 32 | 64;
  /** Set the pointer of row i (base + i*stride). */
  init(f: Fn, i: number): Code[];
  /** Emit the step's weight vectors for row i: emit(k, w) for k < stepCols/4 (k&3 = accumulator),
   *  or only for the accumulators in ks. */
  step(f: Fn, i: number, emit: (k: number, w: Code) => Code, ks?: readonly number[]): Code[];
  advance(f: Fn, i: number): Code[];
  /** Move row i's pointer on by n bytes (after init: to a chunk's first column). */
  skip(f: Fn, i: number, n: Code): Code;
  /** Scalar weight of row i at (natural) column c, for the tail. */
  tail(f: Fn, i: number, c: Code): Code;
}

/**
 * Dot NR rows (src rows 0..NR-1) with one activation row at xq (perm layout) and store row i's
 * result at yAddr(i). The rows are walked side by side, step by step, each with its own 4
 * accumulators and the canonical per-lane fused multiply-add sequence, so its numbers are those of
 * the row alone. `passes` split the lanes: each pass walks the columns once for its accumulators
 * (every lane is an independent chain, so the split changes nothing). Uses locals prefixed by tag.
 */
function rowsBody(m: Madd, f: Fn, perm: Perm, NR: number, src: RowSource, xq: Code, yAddr: (i: number) => Code, tag: string,
  passes: readonly (readonly number[])[] = [[0, 1, 2, 3]]): Code[] {
  const A = Array.from({ length: NR }, (_, i) => [0, 1, 2, 3].map((k) => f.local(`${tag}a${i}_${k}`, V128)));
  const q = f.local(`${tag}q`, I32), q0 = f.local(`${tag}q0`, I32), qend = f.local(`${tag}qend`, I32);
  const acc = f.local('acc', F32), c = f.local('c', I32), cols = get(f.p('cols'));
  const R = Array.from({ length: NR }, (_, i) => i);
  const out: Code[] = [set(q0, xq)];
  out.push(...A.flat().map((a) => set(a, ZERO)));
  out.push(set(qend, addp(get(q0), i32.shl(i32.and(cols, i32.const(-16)), i32.const(2)))));
  // several rows: each activation vector loaded once for all of them (fewer instructions per
  // weight byte, so more of the rows' bytes in flight)
  const X = NR > 1 ? [0, 1, 2, 3].map((k) => f.local(`${tag}x${k}`, V128)) : [];
  const xk = (k: number): Code => (NR > 1 ? get(X[k]!) : v128.load(get(q), 16 * k));
  /** One pass over the columns from x at q to qe for the lane groups ks (row pointers set). */
  const walk = (ks: readonly number[], qe: number): Code => block(loop(br_if(1, i32.ge_u(get(q), get(qe))),
    ...(NR > 1 ? ks.map((k) => set(X[k]!, v128.load(get(q), 16 * k))) : []),
    ...R.flatMap((i) => src.step(f, i, (k, w) => mac(m, A[i]![k & 3]!, w, xk(k)), ks)),
    ...R.flatMap((i) => src.advance(f, i)),
    set(q, i32.add(get(q), i32.const(src.stepCols * 4))), br(0)));
  if (passes.length === 1) {
    out.push(set(q, get(q0)), ...R.flatMap((i) => src.init(f, i)), walk(passes[0]!, qend));
  } else {
    // several passes: taken in turns over chunks of MM1_CHUNK_COLS columns, so that one chunk's
    // pass and the next one's are in the reorder window together (their chains are independent)
    const qc = f.local(`${tag}qc`, I32), qce = f.local(`${tag}qce`, I32);
    const toW = (xBytes: Code): Code => (src.stepBytes === 64 ? xBytes : i32.shr_u(xBytes, i32.const(1))); // bf16: 2 bytes a column
    out.push(set(qc, get(q0)), block(loop(br_if(1, i32.ge_u(get(qc), get(qend))),
      set(qce, i32.add(get(qc), i32.const(MM1_CHUNK_COLS * 4))),
      set(qce, select(get(qce), get(qend), i32.lt_u(get(qce), get(qend)))),
      ...passes.flatMap((ks) => [
        set(q, get(qc)),
        ...R.flatMap((i) => [...src.init(f, i), src.skip(f, i, toW(i32.sub(get(qc), get(q0))))]),
        walk(ks, qce),
      ]),
      set(qc, get(qce)), br(0))));
  }
  for (const i of R) {
    // after the loop q points at the token's tail
    out.push(
      set(acc, finalize(f, perm, A[i]!, `${tag}${i}`)),
      set(c, i32.and(cols, i32.const(-16))),
      block(loop(br_if(1, i32.ge_u(get(c), cols)),
        set(acc, m.s(src.tail(f, i, get(c)),
          f32.load(addp(get(q), i32.shl(i32.sub(get(c), i32.and(cols, i32.const(-16))), i32.const(2)))), get(acc))),
        set(c, i32.add(get(c), i32.const(1))), br(0))),
      f32.store(yAddr(i), get(acc)),
    );
  }
  return out;
}

// Row sources. f32 rows (weights or decoded scratch) in the layout of the permuted x; bf16 rows
// in natural column order, widened in registers (perm bf). Row i at (base + i*stride).
function srcF32(base: number, stride: number): RowSource {
  return {
    stepCols: 16, stepBytes: 64,
    init: (f, i) => [set(f.local(`p${i}`, I32), addp(get(base), i32.mul(i32.const(i), get(stride))))],
    step: (f, i, emit, ks = [0, 1, 2, 3]) => ks.map((k) => emit(k, v128.load(get(f.local(`p${i}`, I32)), 16 * k))),
    advance: (f, i) => [set(f.local(`p${i}`, I32), i32.add(get(f.local(`p${i}`, I32)), i32.const(64)))],
    skip: (f, i, n) => set(f.local(`p${i}`, I32), i32.add(get(f.local(`p${i}`, I32)), n)),
    // after the loop p points at the tail
    tail: (f, i, c) => f32.load(addp(get(f.local(`p${i}`, I32)), i32.shl(i32.sub(c, i32.and(get(f.p('cols')), i32.const(-16))), i32.const(2)))),
  };
}
function srcBF16(gen: Gen, base: number, stride: number): RowSource {
  return {
    stepCols: 16, stepBytes: 32,
    init: (f, i) => [set(f.local(`p${i}`, I32), addp(get(base), i32.mul(i32.const(i), get(stride))))],
    step: (f, i, emit, ks = [0, 1, 2, 3]) => {
      // accumulators 0, 1 take the first 8 columns of the step (v), 2, 3 the next 8 (u)
      const v = f.local('v', V128), u = f.local('u', V128), hi16 = gen.K(f, HI16_BYTES);
      const half = (h: number, r: number): Code[] => [
        set(r, v128.load(get(f.local(`p${i}`, I32)), 16 * h)),
        ...(ks.includes(2 * h) ? [emit(2 * h, i32x4.shl(get(r), i32.const(16)))] : []),
        ...(ks.includes(2 * h + 1) ? [emit(2 * h + 1, v128.and(get(r), get(hi16)))] : []),
      ];
      return [...(ks.some((k) => k < 2) ? half(0, v) : []), ...(ks.some((k) => k >= 2) ? half(1, u) : [])];
    },
    advance: (f, i) => [set(f.local(`p${i}`, I32), i32.add(get(f.local(`p${i}`, I32)), i32.const(32)))],
    skip: (f, i, n) => set(f.local(`p${i}`, I32), i32.add(get(f.local(`p${i}`, I32)), n)),
    tail: (f, i, c) => bf16At(addp(get(f.local(`p${i}`, I32)), i32.shl(i32.sub(c, i32.and(get(f.p('cols')), i32.const(-16))), i32.const(1)))),
  };
}

/**
 * Exact single-token mxfp4, int4 or fp8 product, decode and dot interleaved: MM1_DEC_ROWS rows (j +
 * i*qd) at a time, walked in chunks of MX_CHUNK_GROUPS 32-column groups; per chunk each row's
 * groups are decoded into a small scratch (mxfp4 to bf16 with dec_mx2bf's lookups; int4 to f32 in
 * perm bf as dec_int4 writes, fp8 to f32 as dec_fp8, F32 or BF16 scales), then dotted in the two
 * lane-group passes of the whole-row path. Each accumulator sees the same multiply-adds in the same
 * order as the whole-row path (the chunks only cut the columns where a pass resumes), so the bytes
 * are the same. Why: the decode is bound by byte shuffles and the dot by the multiply-add chains;
 * a chunk's decode and the previous chunk's dot are independent, so the CPU runs them side by side
 * (a whole row's decode is more instructions than the reorder window holds).
 */
function addMm1Chunked(gen: Gen, fmt: 'mxfp4' | 'int4' | 'fp8'): Fn {
  const NR = MM1_DEC_ROWS;
  const CG = MX_CHUNK_GROUPS;
  const mx = fmt === 'mxfp4';
  const f = gen.fnx(`mm1c_${fmt}`, { ...MM_PARAMS, qd: I32 }, null, false);
  const P = (n: string) => get(f.p(n));
  const j = f.local('j', I32), jend = f.local('jend', I32), g = f.local('g', I32), ng = f.local('ng', I32);
  const half = f.local('half', I32), q = f.local('q', I32), xq = f.local('xq', I32), acc = f.local('acc', F32);
  const sh = f.local('sh', I32); // int4: log2 of a scale's bytes (F32 4, BF16 2)
  const pw = Array.from({ length: NR }, (_, i) => f.local(`pw${i}`, I32));
  const ps = Array.from({ length: NR }, (_, i) => f.local(`ps${i}`, I32));
  const A = Array.from({ length: NR }, (_, i) => [0, 1, 2, 3].map((k) => f.local(`a${i}_${k}`, V128)));
  const X = [0, 1, 2, 3].map((k) => f.local(`x${k}`, V128));
  const fp8 = fmt === 'fp8';
  const srow = Array.from({ length: NR }, (_, i) => f.local(`srow${i}`, I32)); // fp8: the rows' scale rows
  const colB = mx ? 2 : 4; // decoded bytes a column: bf16 (mxfp4), f32 (int4 in perm bf, fp8 in id)
  const gB = fp8 ? 32 : 16; // stored bytes of a 32-column group
  const CB = CG * 32 * colB; // decoded bytes of a row's chunk
  const rowOf = (i: number): Code => (i === 0 ? get(j) : i32.add(get(j), i32.mul(P('qd'), i32.const(i))));
  const out = (i: number, k: number, off: number): [Code, number] => [P('scratch'), i * CB + 32 * colB * k + off];
  /** int4 group k of row i: 16 bytes of nibbles at pw_i + 16k (byte b: columns 2b, 2b+1), scale
   *  ps_i + (k << sh); (n - 8) * scale to f32 in perm bf, as dec_int4 (n - 8 in bytes, exact). */
  const int4Group = (i: number, k: number): Code[] => {
    const V = (n: string): number => f.local(`i4_${n}`, V128);
    const B = V('B'), lo = V('lo'), hi = V('hi'), h = V('h'), sc = V('sc');
    const a = i32.add(get(ps[i]!), i32.shl(i32.const(k), get(sh)));
    const eight = gen.Kg(f, new Uint8Array(16).fill(8)), nib = gen.Kg(f, NIB_BYTES);
    const val = (v: Code): Code => f32x4.mul(f32x4.convert_i32x4_s(v), get(sc));
    // columns 16b .. 16b+15 of the group: lo bytes 8b .. 8b+7 (even columns), hi bytes (odd)
    const block16 = (b: number): Code[] => [lo, hi].flatMap((src, par) => {
      const [at, off] = out(i, k, 64 * b + 16 * par);
      return [
        set(h, (b === 0 ? i16x8.extend_low_i8x16_s : i16x8.extend_high_i8x16_s)(get(src))),
        v128.store(at, val(i32x4.extend_low_i16x8_s(get(h))), off),
        v128.store(at, val(i32x4.extend_high_i16x8_s(get(h))), off + 32),
      ];
    });
    return [
      set(sc, f32x4.splat(ifv(F32, i32.eq(get(sh), i32.const(2)), f32.load(a), bf16At(a)))),
      set(B, v128.load(get(pw[i]!), 16 * k)),
      set(lo, i8x16.sub(v128.and(get(B), nib), eight)),
      set(hi, i8x16.sub(v128.and(i16x8.shr_u(get(B), i32.const(4)), nib), eight)),
      ...block16(0), ...block16(1),
    ];
  };
  /** fp8 group k of row i: 32 bytes at pw_i + 32k, the scale of its 128x128 block (columns g + k
   *  >> 2 of the row's scale row); exact bf16 values (fp8ToBf16), widened, times the scale, as dec_fp8. */
  const fp8Group = (i: number, k: number): Code[] => {
    const V = (n: string): number => f.local(`f8_${n}`, V128);
    const v = V('v'), lo = V('lo'), hi = V('hi'), sc = V('sc');
    const a = i32.add(P('s'), i32.shl(i32.add(get(srow[i]!), i32.shr_u(i32.add(get(g), i32.const(k)), i32.const(2))), get(sh)));
    return [
      set(sc, f32x4.splat(ifv(F32, i32.eq(get(sh), i32.const(2)), f32.load(a), bf16At(a)))),
      ...[0, 1].flatMap((h) => [
        set(v, v128.load(get(pw[i]!), 32 * k + 16 * h)),
        ...fp8ToBf16(gen, f, v, lo, hi),
        ...[lo, hi].flatMap((b, bi) => {
          const [at, off] = out(i, k, 64 * h + 32 * bi);
          return [
            v128.store(at, f32x4.mul(i32x4.shl(i32x4.extend_low_i16x8_u(get(b)), i32.const(16)), get(sc)), off),
            v128.store(at, f32x4.mul(i32x4.shl(i32x4.extend_high_i16x8_u(get(b)), i32.const(16)), get(sc)), off + 16),
          ];
        }),
      ]),
    ];
  };
  const decode = (i: number, k: number): Code[] => fp8 ? fp8Group(i, k) : (mx
    ? mxGroup(gen, f, get(pw[i]!), get(ps[i]!), k, (lb, hb, h) => storeBf16x16(lb, hb, (hh) => out(i, k, 32 * h + 16 * hh)))
    : int4Group(i, k));
  const hi16 = gen.K(f, HI16_BYTES);
  /** The chunk's dot, n groups: a loop over lane groups ks, 16 columns a step (scratch offset q,
   *  x at xq + q * 4 / colB: a loop, so that V8 does not hoist a whole chunk's loads and spill them). */
  const qend = f.local('qend', I32), wv = f.local('wv', V128);
  const xAt = (): Code => addp(get(xq), mx ? i32.shl(get(q), i32.const(1)) : get(q));
  const pass = (n: number, ks: readonly number[]): Code[] => [
    set(q, i32.const(0)), set(qend, i32.const(32 * colB * n)),
    block(loop(br_if(1, i32.ge_u(get(q), get(qend))),
      ...ks.map((k) => set(X[k]!, v128.load(xAt(), 16 * k))),
      ...Array.from({ length: NR }, (_, i) => mx
        ? [
          set(wv, v128.load(addp(P('scratch'), get(q)), i * CB + 16 * (ks[0]! >> 1))),
          ...ks.map((k) => mac(gen.madd, A[i]![k]!, (k & 1) === 0 ? i32x4.shl(get(wv), i32.const(16)) : v128.and(get(wv), get(hi16)), get(X[k]!))),
        ]
        : ks.map((k) => mac(gen.madd, A[i]![k]!, v128.load(addp(P('scratch'), get(q)), i * CB + 16 * k), get(X[k]!)))).flat(),
      set(q, i32.add(get(q), i32.const(16 * colB))), br(0))),
  ];
  const chunk = (n: number): Code[] => [
    ...Array.from({ length: NR }, (_, i) => Array.from({ length: n }, (_, k) => decode(i, k)).flat()).flat(),
    ...pass(n, [0, 1]), ...pass(n, [2, 3]),
    ...pw.map((p) => set(p, i32.add(get(p), i32.const(gB * n)))),
    ...(fp8 ? [] : ps.map((p) => set(p, i32.add(get(p), mx ? i32.const(n) : i32.shl(i32.const(n), get(sh)))))),
    set(xq, i32.add(get(xq), i32.const(128 * n))),
    set(g, i32.add(get(g), i32.const(n))),
  ];
  f.body = [
    set(half, i32.shr_u(P('cols'), i32.const(1))),
    set(ng, i32.shr_u(P('cols'), i32.const(5))),
    // int4 / fp8 scales: F32 (sdt 0) 4 bytes, BF16 (1) 2; F16 (2) does not come here
    set(sh, i32.sub(i32.const(2), P('sdt'))),
    set(jend, i32.add(P('r0'), P('qd'))),
    set(j, P('r0')),
    forLt(j, jend, 1,
      ...Array.from({ length: NR }, (_, i) => fp8
        ? [
          set(pw[i]!, addp(P('w'), i32.mul(rowOf(i), P('cols')))),
          // floor(r/128) * ceil(cols/128)
          set(srow[i]!, i32.mul(i32.shr_u(rowOf(i), i32.const(7)), i32.shr_u(i32.add(P('cols'), i32.const(127)), i32.const(7)))),
        ]
        : [
          set(pw[i]!, addp(P('w'), i32.mul(rowOf(i), get(half)))),
          set(ps[i]!, addp(P('s'), mx ? i32.mul(rowOf(i), get(ng)) : i32.shl(i32.mul(rowOf(i), get(ng)), get(sh)))),
        ]).flat(),
      ...A.flat().map((a) => set(a, ZERO)),
      set(xq, P('x')), set(g, i32.const(0)),
      block(loop(br_if(1, i32.gt_u(i32.add(get(g), i32.const(CG)), get(ng))), ...chunk(CG), br(0))),
      block(loop(br_if(1, i32.ge_u(get(g), get(ng))), ...chunk(1), br(0))),
      ...Array.from({ length: NR }, (_, i) => [
        set(acc, finalize(f, fp8 ? 'id' : 'bf', A[i]!, `c${i}`)),
        f32.store(addp(P('y'), i32.shl(rowOf(i), i32.const(2))), get(acc)),
      ]).flat(),
    ),
  ];
  return f;
}

// ---- single-token matmul (T < TILE_MIN_T): y[t, r] for t < T, r in [r0, r1). A row is
// decoded once (if its format needs it) and then dotted with each token in turn ----
function addSingleTokenMatmul(gen: Gen, dec: Decoders): Partial<Record<Fmt, Fn>> {
  const mm1: Partial<Record<Fmt, Fn>> = {};
  for (const fmt of FMTS) {
    const kind = ROWS[fmt];
    const perm = MM_PERM[fmt];
    const inPlace = kind === 'f32' || kind === 'bf16';
    /** Rows [r0, r1) (nr = 1), or the groups of rows j + i*qd, i < nr, for j in [r0, r0 + qd). */
    const rowFn = (name: string, nr: number, passes: readonly (readonly number[])[]): Fn => {
      const f = gen.fnx(`${name}_${fmt}`, nr === 1 ? MM_PARAMS : { ...MM_PARAMS, qd: I32 }, null, false);
      const P = (n: string) => get(f.p(n));
      const base = f.local('base', I32), stride = f.local('stride', I32), t = f.local('t', I32), colsb = f.local('colsb', I32);
      const rowb = f.local('rowb', I32), j = f.local('j', I32), jend = f.local('jend', I32);
      f.prologue.push(
        set(colsb, i32.shl(P('cols'), i32.const(2))),
        set(rowb, kind === 'f32' ? get(colsb) : i32.shl(P('cols'), i32.const(1))),
      );
      const src = kind === 'bf16' || kind === 'dec_bf16' ? srcBF16(gen, base, stride) : srcF32(base, stride);
      const rowOf = (i: number): Code => (i === 0 ? get(j) : i32.add(get(j), i32.mul(P('qd'), i32.const(i))));
      const yAt = (row: Code): Code => addp(P('y'), i32.shl(addp(i32.mul(get(t), P('rows')), row), i32.const(2)));
      const decFn = inPlace ? -1 : reg(kind === 'dec_bf16' ? dec.mx2bf! : dec[fmt]!);
      // decoded rows of a group: one after another in scratch (bf16 rows, 16-byte aligned)
      const decStride = i32.and(i32.add(get(rowb), i32.const(15)), i32.const(-16));
      f.body = [
        set(jend, nr === 1 ? P('r1') : i32.add(P('r0'), P('qd'))),
        set(j, P('r0')),
        forLt(j, jend, 1,
          // a stored row used in place, or rows decoded into scratch
          ...(inPlace
            ? [set(stride, nr === 1 ? get(rowb) : i32.mul(P('qd'), get(rowb))), set(base, addp(P('w'), i32.mul(get(j), get(rowb))))]
            : [
              set(stride, decStride), set(base, P('scratch')),
              ...Array.from({ length: nr }, (_, i) =>
                drop(call(decFn, P('w'), P('s'), P('sdt'), P('rows'), P('cols'), rowOf(i), addp(get(base), i32.mul(get(stride), i32.const(i)))))),
            ]),
          set(t, i32.const(0)),
          forLt(t, f.p('T'), 1, ...rowsBody(gen.madd, f, perm, nr, src, addp(P('x'), i32.mul(get(t), get(colsb))), (i) => yAt(rowOf(i)), 'r_', passes))),
      ];
      return f;
    };
    const grouped = inPlace || kind === 'dec_bf16';
    const one = rowFn('mm1r', 1, [[0, 1, 2, 3]]);
    if (fmt === 'int4' || fmt === 'fp8') {
      // one token, F32 or BF16 scales, whole 32-column groups: three rows at a time, decoded and
      // dotted chunk by chunk (addMm1Chunked); else (and the rows left over) one row at a time
      const c4 = addMm1Chunked(gen, fmt);
      const f = gen.fnx(`mm1_${fmt}`, MM_PARAMS, null, false);
      mm1[fmt] = f;
      const P = (n: string) => get(f.p(n));
      const qd = f.local('qd', I32);
      const args = (r0: Code): Code[] => [P('w'), P('s'), P('sdt'), P('rows'), P('cols'), P('x'), P('T'), P('y'), r0, P('r1'), P('scratch')];
      f.body = [
        set(qd, i32.div_u(i32.sub(P('r1'), P('r0')), i32.const(MM1_DEC_ROWS))),
        set(qd, select(get(qd), i32.const(0), i32.and(i32.and(i32.eq(P('T'), i32.const(1)), i32.lt_u(P('sdt'), i32.const(2))),
          i32.eqz(i32.and(P('cols'), i32.const(31)))))),
        block(br_if(0, i32.eqz(get(qd))), call(reg(c4), ...args(P('r0')), get(qd))),
        call(reg(one), ...args(i32.add(P('r0'), i32.mul(get(qd), i32.const(MM1_DEC_ROWS))))),
      ];
      continue;
    }
    if (!grouped) {
      mm1[fmt] = one;
      continue;
    }
    const NRg = inPlace ? MM1_ROWS : MM1_DEC_ROWS;
    // Stored rows (bf16, f32) MM1_ROWS at a time, far apart: two streams from memory. Their loop
    // makes two passes over lane groups (accumulators 0, 1, then 2, 3), the rows' bytes in L1 for
    // the second pass: 4 live accumulators (V8 spilled them when all 8 were live). Decoded mxfp4
    // rows MM1_DEC_ROWS at a time, in the same two passes (from L1). A function of its own, as V8
    // allocates registers per function. Other decoded formats (f16, fp8, int4: f32 rows) go one row
    // at a time (int4 with three rows measured 5.0 -> 5.5 GMAC/s, not worth a third path).
    const group = rowFn('mm1g', NRg, [[0, 1], [2, 3]]);
    // mxfp4 at T = 1 (decode): the groups of rows decoded and dotted chunk by chunk
    const chunked = kind === 'dec_bf16' ? addMm1Chunked(gen, 'mxfp4') : null;
    const f = gen.fnx(`mm1_${fmt}`, MM_PARAMS, null, false);
    mm1[fmt] = f;
    const P = (n: string) => get(f.p(n));
    const qd = f.local('qd', I32);
    const args = (r0: Code): Code[] => [P('w'), P('s'), P('sdt'), P('rows'), P('cols'), P('x'), P('T'), P('y'), r0, P('r1'), P('scratch')];
    f.body = [
      set(qd, i32.div_u(i32.sub(P('r1'), P('r0')), i32.const(NRg))),
      if_(i32.ge_u(get(qd), i32.const(inPlace ? MM1_MIN_DIST : 1)), [
        chunked ? if_(i32.eq(P('T'), i32.const(1)), [call(reg(chunked), ...args(P('r0')), get(qd))], [call(reg(group), ...args(P('r0')), get(qd))])
        : call(reg(group), ...args(P('r0')), get(qd)),
        call(reg(one), ...args(i32.add(P('r0'), i32.mul(get(qd), i32.const(NRg))))),
      ], [call(reg(one), ...args(P('r0')))]),
    ];
  }
  return mm1;
}

// ---- tiled multi-token matmul (T >= 2). The activations come as tiles of TT tokens (the last
// tile has T mod TT tokens, tt). A tile is 4 regions, one per lane group k (the 4 lanes holding
// columns TILE_PERM[4k..4k+3] of each block of 16): region k holds, per block, the 4 values of
// token 0, 1, .., tt-1 (16 bytes each); then come the tokens' tail columns in natural order.
// Rows are first made exact f32 values in scratch (decoded, mxfp4 straight to f32, or bf16
// widened: widening in the inner loop measured ~25% slower), TILE_ROWS (2) at a time. One pass
// over the rows per lane group keeps that group of the 2 rows x tt tokens in registers (8 chains
// for tt = 4, which hide the multiply-add latency; V8 hoists the loads, so more tokens spill):
// per step, each row's weight vector is loaded once and used for tt tokens, each activation
// vector once for both rows, and the activations stream contiguously. Each lane is an
// independent chain, so splitting the 16 lanes into passes changes nothing: every output element
// sees the canonical per-lane fused multiply-add sequence, then the fixed combine and the
// sequential tail ----
function addTiledMatmul(gen: Gen, dec: Decoders): void {
  const TT = gen.TT;
  const TR = gen.opts.tileRows ?? TILE_ROWS;
  for (const fmt of FMTS) {
    const f = gen.fnx(`mmt_${fmt}`, MM_PARAMS, null, false);
    const P = (n: string) => get(f.p(n));
    const kind = ROWS[fmt];
    const decFn = kind === 'dec_f32' ? dec[fmt]! : null;
    const r = f.local('r', I32), t = f.local('t', I32), xg = f.local('xg', I32);
    const RP = [0, 1].map((i) => f.local(`rp${i}`, I32));
    const n16 = f.local('n16', I32), colsb = f.local('colsb', I32), ab = f.local('ab', I32), rowb = f.local('rowb', I32);
    const p = f.local('p', I32), q = f.local('q', I32), qend = f.local('qend', I32);
    const acc = f.local('acc', F32), c = f.local('c', I32), xt = f.local('xt', I32);
    const hv = f.local('hv', V128);
    const FA = [0, 1, 2, 3].map((k) => f.local(`fa${k}`, V128));
    const S = (i: number): Code => addp(P('scratch'), i32.mul(get(rowb), i32.const(i)));
    f.prologue.push(
      set(colsb, i32.shl(P('cols'), i32.const(2))),
      set(n16, i32.and(P('cols'), i32.const(-16))),
      // scratch: [decoded bf16 row][f32 row 0][f32 row 1][accumulators between passes]
      set(rowb, i32.and(i32.add(get(colsb), i32.const(63)), i32.const(-64))),
      set(RP[0]!, S(1)), set(RP[1]!, S(2)),
      set(ab, S(3)),
    );
    /** bf16 row at src -> f32 at dst (natural order). */
    const widen = (src: Code, dst: Code): Code[] => [
      set(p, src), set(q, dst), set(xt, get(q)),
      set(qend, addp(get(xt), i32.shl(i32.and(P('cols'), i32.const(-8)), i32.const(2)))),
      block(loop(br_if(1, i32.ge_u(get(q), get(qend))),
        set(hv, v128.load(get(p))),
        v128.store(get(q), i32x4.shl(i32x4.extend_low_i16x8_u(get(hv)), i32.const(16))),
        v128.store(get(q), i32x4.shl(i32x4.extend_high_i16x8_u(get(hv)), i32.const(16)), 16),
        set(p, i32.add(get(p), i32.const(16))), set(q, i32.add(get(q), i32.const(32))), br(0))),
      set(qend, addp(get(xt), get(colsb))),
      block(loop(br_if(1, i32.ge_u(get(q), get(qend))),
        i32.store(get(q), i32.shl(i32.load16_u(get(p)), i32.const(16))),
        set(p, i32.add(get(p), i32.const(2))), set(q, i32.add(get(q), i32.const(4))), br(0))),
    ];
    /** Row r+i as exact f32 values at RP[i]. */
    const loadRow = (i: number): Code[] => {
      const row = i32.add(get(r), i32.const(i));
      if (kind === 'dec_f32') return [drop(call(reg(decFn!), P('w'), P('s'), P('sdt'), P('rows'), P('cols'), row, get(RP[i]!)))];
      if (kind === 'dec_bf16') return [drop(call(reg(dec.mx2f32!), P('w'), P('s'), P('sdt'), P('rows'), P('cols'), row, get(RP[i]!)))];
      if (kind === 'bf16') return widen(addp(P('w'), i32.mul(row, i32.shl(P('cols'), i32.const(1)))), get(RP[i]!));
      return [set(RP[i]!, addp(P('w'), i32.mul(row, get(colsb))))];
    };
    const QG = [0, 1, 2, 3].map((g) => f.local(`qg${g}`, I32));
    const PR = [0, 1].map((i) => f.local(`pr${i}`, I32));
    const group = (tt: number, nr: number): Code[] => {
      // lane groups per pass: enough independent chains (nr*gg*tt) to hide the add latency, few
      // enough registers (V8 hoists the gg*tt activation loads: nr*gg*tt + gg*tt + nr*gg <= 15)
      const gg = nr === 2 ? (tt === 1 ? 2 : 1) : tt === 1 ? 4 : tt <= 3 ? 2 : 1;
      const A = Array.from({ length: nr }, (_, i) => Array.from({ length: gg }, (_, g) => Array.from({ length: tt }, (_, j) => f.local(`a${nr}_${tt}_${i}_${g}_${j}`, V128))));
      const W = Array.from({ length: nr }, (_, i) => Array.from({ length: gg }, (_, g) => f.local(`wv${i}_${g}`, V128)));
      const out: Code[] = [];
      const G = Array.from({ length: gg }, (_, g) => g);
      const R = Array.from({ length: nr }, (_, i) => i);
      for (let k0 = 0; k0 < 4; k0 += gg) {
        out.push(
          ...A.flat(2).map((a) => set(a, ZERO)),
          ...R.map((i) => set(PR[i]!, get(RP[i]!))),
          ...G.map((g) => set(QG[g]!, addp(get(xg), i32.mul(get(n16), i32.const(tt * (k0 + g)))))),
          set(qend, addp(get(QG[0]!), i32.mul(get(n16), i32.const(tt)))),
          block(loop(br_if(1, i32.ge_u(get(QG[0]!), get(qend))),
            ...G.flatMap((g) => [
              ...R.map((i) => set(W[i]![g]!, v128.load(get(PR[i]!), 16 * (k0 + g)))),
              ...Array.from({ length: tt }, (_, j) => {
                const xj = f.local('xj', V128);
                return nr === 1
                  ? mac(gen.madd, A[0]![g]![j]!, get(W[0]![g]!), v128.load(get(QG[g]!), 16 * j))
                  : [set(xj, v128.load(get(QG[g]!), 16 * j)), ...R.map((i) => mac(gen.madd, A[i]![g]![j]!, get(W[i]![g]!), get(xj)))];
              }),
            ]),
            ...R.map((i) => set(PR[i]!, i32.add(get(PR[i]!), i32.const(64)))),
            ...G.map((g) => set(QG[g]!, i32.add(get(QG[g]!), i32.const(16 * tt)))), br(0))),
          ...R.flatMap((i) => G.flatMap((g) => A[i]![g]!.map((a, j) => v128.store(get(ab), get(a), (((i * 4) + k0 + g) * tt + j) * 16)))),
        );
      }
      for (const i of R) {
        // token j's tail at xg + n16*4*tt + j*(cols - n16)*4
        out.push(set(q, addp(get(xg), i32.mul(get(n16), i32.const(4 * tt)))));
        for (let j = 0; j < tt; j++) {
          for (let k = 0; k < 4; k++) out.push(set(FA[k]!, v128.load(get(ab), ((i * 4 + k) * tt + j) * 16)));
          out.push(
            set(acc, finalize(f, TILE_PERM[fmt], FA, `tt${tt}_${j}`)),
            set(c, get(n16)),
            set(xt, get(q)),
            block(loop(br_if(1, i32.ge_u(get(c), P('cols'))),
              set(acc, gen.madd.s(f32.load(addp(get(RP[i]!), i32.shl(get(c), i32.const(2)))), f32.load(get(xt)), get(acc))),
              set(xt, i32.add(get(xt), i32.const(4))),
              set(c, i32.add(get(c), i32.const(1))), br(0))),
            set(q, get(xt)),
            f32.store(addp(P('y'), i32.shl(addp(i32.mul(i32.add(get(t), i32.const(j)), P('rows')), i32.add(get(r), i32.const(i))), i32.const(2))), get(acc)),
          );
        }
      }
      return out;
    };
    const tiles = (nr: number): Code[] => {
      const out: Code[] = [set(t, i32.const(0)), set(xg, P('x'))];
      for (let tt = TT; tt >= 1; tt--) {
        out.push(block(loop(
          br_if(1, i32.gt_u(i32.add(get(t), i32.const(tt)), P('T'))),
          ...group(tt, nr),
          set(t, i32.add(get(t), i32.const(tt))),
          set(xg, addp(get(xg), i32.mul(get(colsb), i32.const(tt)))), br(0))));
      }
      return out;
    };
    const body: Code[] = [set(r, P('r0'))];
    for (const nr of TR === 2 ? [2, 1] : [1]) {
      body.push(block(loop(
        br_if(1, i32.gt_u(i32.add(get(r), i32.const(nr)), P('r1'))),
        ...Array.from({ length: nr }, (_, i) => loadRow(i)).flat(),
        ...tiles(nr),
        set(r, i32.add(get(r), i32.const(nr))), br(0))));
    }
    f.body = body;
  }
}

/** The exported matmul entry points mm_<fmt>: single-token or tiled by T, and the q8 fast path for mxfp4. */
function addMatmulEntries(gen: Gen, mm1: Partial<Record<Fmt, Fn>>): void {
  // optional fast path (q8.ts): mm_mxfp4 with sdt = Q8_SDT runs it instead
  const { fnx, K, opts, fns } = gen;
  const mmq8 = addQ8(fnx, K, opts.relaxed, opts.intDotAdd ?? false);
  const mmq7 = addQ7(fnx, K, opts.relaxed, MM1_MIN_DIST, opts.intDotAdd ?? false);
  for (const fmt of FMTS) {
    const f = fnx(`mm_${fmt}`, MM_PARAMS);
    const args = Object.keys(MM_PARAMS).map((n) => get(f.p(n)));
    const mmt = fns.find((g) => g.name === `mmt_${fmt}`)!;
    const exact = if_(i32.ge_u(get(f.p('T')), i32.const(opts.tileMinT ?? TILE_MIN_T)), [call(reg(mmt), ...args)], [call(reg(mm1[fmt]!), ...args)]);
    f.body = fmt === 'mxfp4' ? if_(i32.eq(get(f.p('sdt')), i32.const(Q8_SDT)), [call(reg(mmq8), ...args)], [exact])
      : fmt === 'bf16' ? if_(i32.eq(get(f.p('sdt')), i32.const(Q7_SDT)), [call(reg(mmq7), ...args)], [exact]) : exact;
  }
}

// ---- tile activations for mmt_*: natural [T, cols] -> tiles of TT tokens (layout above) ----
function addTileX(gen: Gen): void {
  const TT = gen.TT;
  const f = gen.fnx('tilex', { src: I32, dst: I32, T: I32, cols: I32, perm: I32 });
  const P = (n: string) => get(f.p(n));
  const t = f.local('t', I32), tt = f.local('tt', I32), d = f.local('d', I32), b = f.local('b', I32);
  const j = f.local('j', I32), sp = f.local('sp', I32), n16 = f.local('n16', I32), c = f.local('c', I32);
  const row = (jj: Code): Code => addp(P('src'), i32.shl(i32.mul(i32.add(get(t), jj), P('cols')), i32.const(2)));
  /** Region k of the tile: per block b, the lane group's 4 columns of tokens 0..tt-1. */
  const region = (perm: Perm, k: number): Code => {
    const PM = PERMS[perm];
    return [
      set(b, i32.const(0)),
      forLt(b, n16, 16,
        set(j, i32.const(0)),
        forLt(j, tt, 1,
          set(sp, addp(row(get(j)), i32.shl(get(b), i32.const(2)))),
          ...[0, 1, 2, 3].map((l) => f32.store(get(d), f32.load(get(sp), 4 * PM[4 * k + l]!), 4 * l)),
          set(d, i32.add(get(d), i32.const(16))))),
    ];
  };
  f.body = [
    set(n16, i32.and(P('cols'), i32.const(-16))),
    set(t, i32.const(0)), set(d, P('dst')),
    block(loop(br_if(1, i32.ge_u(get(t), P('T'))),
      set(tt, i32.sub(P('T'), get(t))),
      if_(i32.gt_u(get(tt), i32.const(TT)), [set(tt, i32.const(TT))]),
      if_(i32.eqz(P('perm')), [0, 1, 2, 3].map((k) => region('id', k)), [0, 1, 2, 3].map((k) => region('bf', k))),
      set(j, i32.const(0)),
      forLt(j, tt, 1,
        set(c, get(n16)),
        forLt(c, f.p('cols'), 1,
          f32.store(get(d), f32.load(addp(row(get(j)), i32.shl(get(c), i32.const(2))))),
          set(d, i32.add(get(d), i32.const(4))))),
      set(t, i32.add(get(t), get(tt))), br(0))),
  ];
}

// ---- activation permutation (natural -> perm) and its inverse, per token ----
function addPermutes(gen: Gen): void {
  for (const perm of ['bf'] as Perm[]) {
    const P = PERMS[perm];
    for (const inverse of [false, true]) {
      const f = gen.fnx(inverse ? `unperm_${perm}` : `permx_${perm}`, { src: I32, dst: I32, T: I32, cols: I32 });
      const t = f.local('t', I32), s = f.local('s', I32), d = f.local('d', I32), send = f.local('send', I32);
      const tend = f.local('tend', I32);
      const moves: Code[] = [];
      for (let k = 0; k < 16; k++) {
        const from = inverse ? k : P[k]!, to = inverse ? P[k]! : k;
        moves.push(f32.store(get(d), f32.load(get(s), 4 * from), 4 * to));
      }
      f.body = [
        set(t, i32.const(0)),
        set(s, get(f.p('src'))), set(d, get(f.p('dst'))),
        forLt(t, f.p('T'), 1,
          set(send, addp(get(s), i32.shl(i32.and(get(f.p('cols')), i32.const(-16)), i32.const(2)))),
          set(tend, addp(get(s), i32.shl(get(f.p('cols')), i32.const(2)))),
          block(loop(br_if(1, i32.ge_u(get(s), get(send))), ...moves,
            set(s, i32.add(get(s), i32.const(64))), set(d, i32.add(get(d), i32.const(64))), br(0))),
          block(loop(br_if(1, i32.ge_u(get(s), get(tend))), f32.store(get(d), f32.load(get(s))),
            set(s, i32.add(get(s), i32.const(4))), set(d, i32.add(get(d), i32.const(4))), br(0)))),
      ];
    }
  }
}

// ---- transposed product: y[c] = sum_k x[k] * W[r0+k, c], k ascending, each step
// y = f32(y + f32(x*w)); columns are independent, so any lane order works; y natural ----
function addMatvecT(gen: Gen, dec: Decoders): void {
  for (const fmt of FMTS) {
    const f = gen.fnx(`mvT_${fmt}`, { w: I32, s: I32, sdt: I32, rows: I32, cols: I32, r0: I32, n: I32, x: I32, y: I32, scratch: I32 });
    const P = (n: string) => get(f.p(n));
    const perm = MM_PERM[fmt], kind = ROWS[fmt];
    const bf = kind === 'bf16' || kind === 'dec_bf16';
    const yp = f.local('yp', I32), k = f.local('k', I32), rp = f.local('rp', I32), o = f.local('o', I32), p = f.local('p', I32);
    const n16b = f.local('n16b', I32), colsb = f.local('colsb', I32), xv = f.local('xv', V128), xs = f.local('xs', F32);
    const row = i32.add(P('r0'), get(k));
    const v = f.local('v', V128), u = f.local('u', V128), hi16 = gen.K(f, HI16_BYTES);
    const axpy = (j: number, w: Code): Code =>
      v128.store(get(o), f32x4.add(v128.load(get(o), 16 * j), f32x4.mul(get(xv), w)), 16 * j);
    f.body = [
      set(n16b, i32.shl(i32.and(P('cols'), i32.const(-16)), i32.const(2))),
      set(colsb, i32.shl(P('cols'), i32.const(2))),
      // the permuted accumulator row sits after the decode scratch
      set(yp, perm === 'id' ? P('y') : addp(P('scratch'), i32.and(i32.add(get(colsb), i32.const(63)), i32.const(-64)))),
      set(o, i32.const(0)),
      forLt(o, colsb, 4, f32.store(addp(get(yp), get(o)), f32.const(0))),
      set(k, i32.const(0)),
      forLt(k, f.p('n'), 1,
        set(rp, kind === 'f32' ? addp(P('w'), i32.mul(row, get(colsb)))
          : kind === 'bf16' ? addp(P('w'), i32.mul(row, i32.shl(P('cols'), i32.const(1))))
          : call(reg(kind === 'dec_bf16' ? dec.mx2bf! : dec[fmt]!), P('w'), P('s'), P('sdt'), P('rows'), P('cols'), row, P('scratch'))),
        set(xs, f32.load(addp(P('x'), i32.shl(get(k), i32.const(2))))),
        set(xv, f32x4.splat(get(xs))),
        set(o, get(yp)),
        set(p, get(rp)),
        block(loop(br_if(1, i32.ge_u(get(o), addp(get(yp), get(n16b)))),
          ...(bf
            ? [
              set(v, v128.load(get(p))),
              set(u, v128.load(get(p), 16)),
              axpy(0, i32x4.shl(get(v), i32.const(16))),
              axpy(1, v128.and(get(v), get(hi16))),
              axpy(2, i32x4.shl(get(u), i32.const(16))),
              axpy(3, v128.and(get(u), get(hi16))),
              set(p, i32.add(get(p), i32.const(32))),
            ]
            : [0, 1, 2, 3].map((j) => axpy(j, v128.load(get(p), 16 * j))).concat([set(p, i32.add(get(p), i32.const(64)))])),
          set(o, i32.add(get(o), i32.const(64))), br(0))),
        // tail, natural order: o and p point at column n16
        block(loop(br_if(1, i32.ge_u(get(o), addp(get(yp), get(colsb)))),
          f32.store(get(o), f32.add(f32.load(get(o)), f32.mul(get(xs), bf ? bf16At(get(p)) : f32.load(get(p))))),
          set(o, i32.add(get(o), i32.const(4))), set(p, i32.add(get(p), i32.const(bf ? 2 : 4))), br(0)))),
      perm === 'id' ? [] : call(reg(gen.fns.find((g) => g.name === `unperm_${perm}`)!), get(yp), P('y'), i32.const(1), P('cols')),
    ];
  }
}

export function generate(opts: GenOptions): Generated {
  const gen = newGen(opts);
  const { fnx, K, fns, pool } = gen;
  // The emitters in the order their functions are numbered (the module's bytes depend on it).
  const f16s = addScalarHelpers(gen);
  const dec = addDecoders(gen, f16s);
  const mm1 = addSingleTokenMatmul(gen, dec);
  addTiledMatmul(gen, dec);
  addMatmulEntries(gen, mm1);
  addTileX(gen);
  addPermutes(gen);
  addMatvecT(gen, dec);

  // ---- fused pieces: KDA delta rule, MLA scores and weighted latent sum (fused.ts) ----
  addFused(fnx, finalize, { kdaTile: opts.kdaTile, wsumTile: opts.wsumTile, expFn: EXP_FN, madd: gen.madd });
  // ---- the whole KDA block of a token around that delta rule (kda-block.ts) ----
  addKdaBlock(fnx, fns.find((g) => g.name === 'kda_step')!.index);

  // ---- gated activations: SiLU / SiTU with their own exp and tanh (act.ts) ----
  addAct(fnx, K);

  // ---- the activation quantizer of the 8-bit paths (q8.ts quantizeBlocks) ----
  addQuantizeBlocks(fnx, K);

  const bytes = assemble(fns, { module: 'env', name: 'memory', minPages: 1, maxPages: 65536, shared: true }, FUNC_IMPORTS);
  const consts = new Uint8Array(16 * pool.length);
  pool.forEach((k, i) => consts.set(k, 16 * i));
  return { bytes, exports: fns.filter((f) => f.exported).map((f) => f.name), consts };
}
