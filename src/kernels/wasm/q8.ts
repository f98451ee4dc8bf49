// Optional fast path for MXFP4 products (the K3 routed experts), behind `fastExperts` (off by
// default): 8-bit activations, integer block dots, as llama.cpp's q8_0 x MXFP4. NOT the exact
// path: it rounds the activations, so its cost is measured (mean KL of next-token distributions
// against the default, `k3 bench --fast-experts`). It is still deterministic: every output is
// reduced in one fixed order that depends neither on the thread count nor on T, and the Wasm
// kernel gives the bytes of the TypeScript reference below (test/kernels/fast-experts.test.ts).
//
// Activations (quantizeQ8, the TypeScript definition, once per call and token; the Kernels class
// runs q8_act, its Wasm twin at the bottom, which writes the same bytes): per token and block b of
// 32 columns (the MXFP4 weight blocks),
//   amax = max |x_i|,  d = f32(amax / 127),  id = d ? f32(1 / d) : 0,
//   q_i = clamp(roundHalfAway(f32(x_i * id)), -127, 127)  (int8),   dh_b = f32(d * 0.5).
// Layout of one token: per block 32 bytes, q of the 16 even columns then of the 16 odd columns
// (the weight byte j holds column 2j in its low nibble, 2j+1 in its high one); after all T
// tokens' bytes come the T * nb f32 scales dh, then T * nb i32 corrections c_b = 12 * sum_b q.
//
// Weights: 2 * E2M1 is an integer n in [-12, 12], so W = n * 2^(e-127) / 2 = n * (2^(e-127) / 2),
// with pow(e) = e8m0ToF32(e) (2^(e-127), e = 0 the subnormal 2^-127, e = 255 -> 0).
//
// One output y[t, r] (nb = cols / 32 blocks, G = nb & ~3):
//   B_b  = sum over the 32 columns of q * n            (i32, exact: |B_b| <= 32*127*12)
//   s_b  = f32(dh_b * pow(e_b))                        (one rounding of the exact product)
//   u_b  = f32(f32(B_b) * s_b)                         (f32(B_b) is exact)
//   lanes l_0..l_3 = +0;  for b < G, ascending: l_{b%4} = f32(l_{b%4} + u_b)
//   acc  = f32(f32(l_0 + l_1) + f32(l_2 + l_3))
//   for G <= b < nb, ascending: acc = f32(acc + u_b)
// Threads split rows, never a dot, and each token is reduced alone (up to 4 tokens share one
// decode of the weight blocks, which changes no operation), so neither changes a bit.
//
// Wasm (mmq8_mxfp4): per block, the 16 weight bytes are split into low and high nibbles, each
// turned into n + 12 (0..24, unsigned 7-bit) by an i8x16.swizzle of a 16-byte table, so that
// B_b = sum q (n + 12) - c_b. Relaxed SIMD: i16x8.relaxed_dot_i8x16_i7x16_s(q, n + 12) of the low
// and of the high nibbles, added as i16, then i32x4.dot_i16x8_s with ones: the second operand
// never has the top bit set, |pair sums| <= 2 * 127 * 24 and the two added <= 12192 never saturate
// i16, so every platform gives the exact integer (four instructions a block on x86 where the
// i32x4 relaxed dot-add, which V8 11 emits with a ones vector built each time, took ten;
// docs/TUNING.md "Kernel forms: the q8 mxfp4 dot"). Where that dot-add is one instruction
// (loader.ts intDotAddIsOne: Arm64's sdot, x86 AVX-VNNI in newer V8) it is used instead, twice a
// block: the same integers. Plain SIMD: i16x8.extmul_{low,high}_i8x16_s
// (|q (n+12)| <= 3048, four added per i16 lane <= 12192, no overflow), then
// i32x4.extadd_pairwise_i16x8_s. Four blocks are reduced to one i32x4 (B_b .. B_{b+3}) by two
// shuffle+add levels. Integer sums are exact, so their order is free and both variants give the
// same bytes. Then convert, one f32x4 multiply by the four s_b and one add into the lanes.

import { type Code, type Fn, I32, F32, V128, get, set, block, loop, br, br_if, if_, select, i32, f32, v128, i8x16, i16x8, i32x4, f32x4, f64x2, uleb, shuffle32 } from './emit.js';
import { E2M1_TABLE, e8m0ToF32 } from '../../formats/dtypes.js';
import type { WeightView } from '../../formats/weight.js';

type FnMaker = (name: string, params: Record<string, typeof I32>, result?: typeof I32 | null, exported?: boolean) => Fn;
type ConstLocal = (f: Fn, b: Uint8Array) => number;

const fr = Math.fround;

/** 2 * E2M1 by nibble, as int8 (the -0 nibble is 0). */
export const N2_TABLE: Int8Array = Int8Array.from(E2M1_TABLE, (v) => 2 * v);
/** The offset that makes every 2 * E2M1 value a non-negative 7-bit integer (0..24). */
const N2_OFF = 12;

/** Bytes quantizeQ8 writes for T tokens of `cols` columns (int8 blocks, then f32 scales). */
export function q8Bytes(T: number, cols: number): number {
  return T * cols + T * (cols / 32) * 8;
}

/**
 * How a token's int8 values are laid out: `evenOdd` per block the 16 even columns then the 16 odd
 * (as an mxfp4 block's low and high nibbles); `words` as the q7 trunk weights (groupWordsPos). The
 * code is q8_act's `order` argument.
 */
export const ORDER_CODE = { evenOdd: 1, words: 2 } as const;
export type Q8Order = keyof typeof ORDER_CODE;

/**
 * Where column c of a row of `cols` columns (a multiple of 32) lies in the `words` layout: the
 * blocks of each group of four (b < G = nb & ~3) are laid out by 4-byte words, word v (columns
 * 4v..4v+3) of block g + i at byte 32 g + 16 v + 4 i, so that one 16-byte vector holds a word of
 * each of the four blocks; the tail blocks (b >= G) in column order.
 */
export function groupWordsPos(c: number, cols: number): number {
  const b = c >> 5;
  if (b >= ((cols >> 5) & ~3)) return c;
  const k = c & 31;
  return ((b & ~3) << 5) + ((k >> 2) << 4) + ((b & 3) << 2) + (k & 3);
}

/**
 * Activations to 8-bit blocks, q8_0 style (shared by the --fast-experts and --fast trunk paths):
 * per 32 columns d = f32(amax / 127), n = round-half-away(f32(x / d)) clamped to ±127 (NaN -> 0).
 * Into `out` (offset a multiple of 4): per token the int8 values (laid out by `order`), then all
 * tokens' f32 scales (d times `scaleMul`), then the i32 per-block corrections `offset * sum(n)` for
 * weights stored with that offset.
 */
export function quantizeBlocks(x: Float32Array, T: number, cols: number, out: Uint8Array, o: { order: Q8Order; scaleMul: number; offset: number }): void {
  if (cols % 32) throw new RangeError(`q8: columns ${cols} not a multiple of 32`);
  const nb = cols / 32;
  const q = new Int8Array(out.buffer, out.byteOffset, T * cols);
  const ds = new Float32Array(out.buffer, out.byteOffset + T * cols, T * nb);
  const corr = new Int32Array(out.buffer, out.byteOffset + T * cols + 4 * T * nb, T * nb);
  for (let t = 0; t < T; t++) {
    for (let b = 0; b < nb; b++) {
      const base = t * cols + b * 32;
      let amax = 0;
      for (let i = 0; i < 32; i++) {
        const a = Math.abs(x[base + i]!);
        if (a > amax) amax = a;
      }
      const d = fr(amax / 127);
      const id = d ? fr(1 / d) : 0;
      let sq = 0;
      for (let i = 0; i < 32; i++) {
        const v = fr(x[base + i]! * id);
        let n = v < 0 ? -Math.floor(-v + 0.5) : Math.floor(v + 0.5);
        if (n > 127) n = 127;
        else if (n < -127) n = -127;
        n = n | 0; // NaN -> 0
        q[o.order === 'evenOdd' ? base + (i & 1) * 16 + (i >> 1) : t * cols + groupWordsPos(b * 32 + i, cols)] = n;
        sq += n;
      }
      ds[t * nb + b] = fr(d * o.scaleMul);
      corr[t * nb + b] = o.offset * sq;
    }
  }
}

/** quantizeQ8's layout (the Kernels class passes it to q8_act, the Wasm quantizer below). */
export const Q8_LAYOUT = { order: 'evenOdd', scaleMul: 0.5, offset: N2_OFF } as const;

/**
 * Quantize x [T, cols] (cols a multiple of 32) into `out` (q8Bytes(T, cols) bytes, offset a
 * multiple of 4): per token the int8 blocks (even columns, then odd, per block), then all tokens'
 * f32 scales dh = d / 2 (the weights are 2 * E2M1), then the corrections for N2_OFF.
 */
export function quantizeQ8(x: Float32Array, T: number, cols: number, out: Uint8Array): void {
  quantizeBlocks(x, T, cols, out, Q8_LAYOUT);
}

/** x [T, cols] quantized as quantizeBlocks lays it out (`bytes` long, layout o): the int8 values,
 *  each block's f32 scale and its i32 correction, as the references of the 8-bit kernels read them. */
export function quantizedActs(x: Float32Array, T: number, cols: number, bytes: number, o: { order: Q8Order; scaleMul: number; offset: number }) {
  const buf = new Uint8Array(bytes), nb = cols / 32;
  quantizeBlocks(x, T, cols, buf, o);
  return { q: new Int8Array(buf.buffer, 0, T * cols), d: new Float32Array(buf.buffer, T * cols, T * nb), corr: new Int32Array(buf.buffer, T * cols + 4 * T * nb, T * nb) };
}

/** A row's sum of its nb block products u(b), as the 8-bit kernels add them: the blocks of whole
 *  groups of 4 in 4 lanes (l, scratch), the lanes' fixed combine, then the other blocks in order. */
export function blockSum(nb: number, u: (b: number) => number, l: Float32Array): number {
  const G = nb & ~3;
  l.fill(0);
  for (let b = 0; b < G; b++) l[b & 3] = l[b & 3]! + u(b);
  let acc = fr(fr(l[0]! + l[1]!) + fr(l[2]! + l[3]!));
  for (let b = G; b < nb; b++) acc = fr(acc + u(b));
  return acc;
}

/** TypeScript reference of mmq8_mxfp4: y[t*rows + r] for t < T, r in [r0, r1) (see the top). */
export function matmulQ8Ref(w: WeightView, x: Float32Array, T: number, y: Float32Array, r0 = 0, r1 = w.rows): void {
  if (w.format !== 'mxfp4') throw new TypeError(`q8 path: ${w.name} is ${w.format}, not mxfp4`);
  const { rows, cols } = w;
  const nb = cols / 32;
  const { q, d: dh } = quantizedActs(x, T, cols, q8Bytes(T, cols), Q8_LAYOUT);
  const data = w.data, sc = w.scale!;
  const l = new Float32Array(4);
  for (let r = r0; r < r1; r++) {
    for (let t = 0; t < T; t++) {
      const u = (b: number): number => {
        const wp = (r * cols) / 2 + b * 16, xp = t * cols + b * 32;
        let B = 0;
        for (let j = 0; j < 16; j++) {
          const byte = data[wp + j]!;
          B += q[xp + j]! * N2_TABLE[byte & 15]! + q[xp + 16 + j]! * N2_TABLE[byte >> 4]!;
        }
        return fr(B * fr(dh[t * nb + b]! * e8m0ToF32(sc[r * nb + b]!)));
      };
      y[t * rows + r] = blockSum(nb, u, l);
    }
  }
}

// ---- the Wasm kernel -------------------------------------------------------------------------

// SIMD opcodes the integer-dot kernels use (here and in q8-trunk.ts)
export const simd = (op: number): number[] => [0xfd, ...uleb(op)];
export const vbin = (op: number) => (a: Code, b: Code): Code => [a, b, simd(op)];
export const extmulLo = vbin(0x9c); // i16x8.extmul_low_i8x16_s
export const extmulHi = vbin(0x9d); // i16x8.extmul_high_i8x16_s
export const i16add = vbin(0x8e); // i16x8.add
export const extaddPairS = (a: Code): Code => [a, simd(0x7e)]; // i32x4.extadd_pairwise_i16x8_s
/** i32x4.relaxed_dot_i8x16_i7x16_add_s(a signed, b 7-bit, c). */
export const relaxedDotAdd = (a: Code, b: Code, c: Code): Code => [a, b, c, simd(0x113)];
/** i16x8.relaxed_dot_i8x16_i7x16_s(a signed, b 7-bit): pair sums, exact while they fit i16. */
export const relaxedDot16 = vbin(0x112);
/** i32x4.dot_i16x8_s: pair products summed (with a splat of ones: pair sums widened). */
export const dotI16 = vbin(0xba);
const i32mul = (a: Code, b: Code): Code => i32.mul(a, b);
const bytes16 = (a: ArrayLike<number>): Uint8Array => Uint8Array.from(Array.from(a), (v) => v & 0xff);
export const splat32 = (n: number): Uint8Array => new Uint8Array(new Int32Array([n, n, n, n]).buffer);
/** i16x8 ones: the second operand of i32x4.dot_i16x8_s that widens pair sums. */
export const ONES16 = new Uint8Array(new Int16Array(8).fill(1).buffer);

/** The kernel's locals and constants, in the order the module numbers them (addQ8). */
function q8Locals(fnx: FnMaker, K: ConstLocal, relaxed: boolean, dotAdd: boolean) {
  const f = fnx('mmq8_mxfp4', { w: I32, s: I32, sdt: I32, rows: I32, cols: I32, x: I32, T: I32, y: I32, r0: I32, r1: I32, scratch: I32 }, null, false);
  const P = (n: string): Code => get(f.p(n));
  const swz = relaxed ? i8x16.relaxed_swizzle : i8x16.swizzle;
  const tbl = K(f, bytes16(Array.from(N2_TABLE, (v) => v + N2_OFF))), m0f = K(f, bytes16(new Array(16).fill(15)));
  const zero = K(f, splat32(0)), k255 = K(f, splat32(255)), sub = K(f, splat32(0x400000));
  const ones = relaxed && !dotAdd ? K(f, ONES16) : -1;
  const L = (n: string, t: typeof I32 | typeof V128 = I32): number => f.local(n, t);
  const r = L('r'), t = L('t'), nb = L('nb'), G = L('G'), wrow = L('wrow'), srow = L('srow');
  const p = L('p'), e = L('e'), g = L('g'), dbase = L('dbase'), cbase = L('cbase');
  const acc = f.local('acc', F32), u = f.local('u', F32);
  const wv = L('wv', V128), lo = L('lo', V128), hi = L('hi', V128), ev = L('ev', V128), pw = L('pw', V128), bs = L('bs', V128);
  const TTMAX = 4;
  const per = (n: string, t: typeof I32 | typeof V128 = I32): number[] => Array.from({ length: TTMAX }, (_, k) => L(`${n}${k}`, t));
  const qk = per('q'), dk = per('dp'), ck = per('cp'), lanes = per('lanes', V128);
  const bk = Array.from({ length: TTMAX }, (_, k) => [0, 1, 2, 3].map((j) => L(`b${k}_${j}`, V128)));
  const u01 = per('u01', V128), u23 = per('u23', V128);
  const g2 = L('g2'), p2 = L('p2'), e2 = L('e2');
  return { f, P, relaxed, dotAdd, swz, tbl, m0f, zero, k255, sub, ones, r, t, nb, G, wrow, srow, p, e, g, dbase, cbase, acc, u, wv, lo, hi, ev, pw, bs, qk, dk, ck, lanes, bk, u01, u23, g2, p2, e2 };
}
type Q = ReturnType<typeof q8Locals>;

/** Decode weight block j of the group at p into lo, hi (n + 12 of the even / odd columns). */
const q8Decode = (c: Q, j: number): Code[] => [
  set(c.wv, v128.load(get(c.p), 16 * j)),
  set(c.lo, c.swz(get(c.tbl), v128.and(get(c.wv), get(c.m0f)))),
  set(c.hi, c.swz(get(c.tbl), i8x16.shr_u(get(c.wv), i32.const(4)))),
];

/** i32x4 of partial sums of q (n + 12) of the decoded block against token activations at a + 32 j. */
function q8Dot(c: Q, a: number, j: number): Code {
  const { lo, hi } = c;
  if (c.relaxed && c.dotAdd) return relaxedDotAdd(v128.load(get(a), 32 * j + 16), get(hi), relaxedDotAdd(v128.load(get(a), 32 * j), get(lo), get(c.zero)));
  if (c.relaxed) return dotI16(i16add(relaxedDot16(v128.load(get(a), 32 * j), get(lo)), relaxedDot16(v128.load(get(a), 32 * j + 16), get(hi))), get(c.ones));
  return extaddPairS(i16add(
    i16add(extmulLo(get(lo), v128.load(get(a), 32 * j)), extmulHi(get(lo), v128.load(get(a), 32 * j))),
    i16add(extmulLo(get(hi), v128.load(get(a), 32 * j + 16)), extmulHi(get(hi), v128.load(get(a), 32 * j + 16)))));
}

/** pow(e) of the i32x4 of scale bytes in ev: e<<23, e = 0 -> 2^-127 (0x400000), e = 255 -> 0. */
const powOf = (c: Q): Code => v128.andnot(
  v128.or(i32x4.shl(get(c.ev), i32.const(23)), v128.and(i32x4.eq(get(c.ev), get(c.zero)), get(c.sub))),
  i32x4.eq(get(c.ev), get(c.k255)));
const fl = (v: Code, l: number): Code => f32x4.extract_lane(v, l);
const pair = (a: number, b: number): Code => i32x4.add(shuffle32(get(a), get(b), [0, 4, 1, 5]), shuffle32(get(a), get(b), [2, 6, 3, 7]));

/** Whole groups of 4 blocks of tokens ks of row r: the weight blocks decoded once for the tokens. */
function q8Groups(c: Q, ks: readonly number[]): Code[] {
  const { qk, dk, ck, bk, u01, u23, lanes, ev, pw, bs, g } = c;
  return [
    set(g, i32.const(0)),
    block(loop(br_if(1, i32.ge_u(get(g), get(c.G))),
      ...q8Decode(c, 0), ...ks.map((k) => set(bk[k]![0]!, q8Dot(c, qk[k]!, 0))),
      ...q8Decode(c, 1), ...ks.map((k) => set(bk[k]![1]!, q8Dot(c, qk[k]!, 1))),
      ...ks.map((k) => set(u01[k]!, pair(bk[k]![0]!, bk[k]![1]!))),
      ...q8Decode(c, 2), ...ks.map((k) => set(bk[k]![2]!, q8Dot(c, qk[k]!, 2))),
      ...q8Decode(c, 3), ...ks.map((k) => set(bk[k]![3]!, q8Dot(c, qk[k]!, 3))),
      ...ks.map((k) => set(u23[k]!, pair(bk[k]![2]!, bk[k]![3]!))),
      set(ev, i32x4.extend_low_i16x8_u(i16x8.extend_low_i8x16_u(v128.load32_splat(get(c.e))))),
      set(pw, powOf(c)),
      ...ks.flatMap((k) => [
        // (B_g, .., B_g+3) = both pair sums, minus the offset corrections
        set(bs, i32x4.sub(i32x4.add(shuffle32(get(u01[k]!), get(u23[k]!), [0, 1, 4, 5]), shuffle32(get(u01[k]!), get(u23[k]!), [2, 3, 6, 7])), v128.load(get(ck[k]!)))),
        set(lanes[k]!, f32x4.add(get(lanes[k]!), f32x4.mul(f32x4.convert_i32x4_s(get(bs)), f32x4.mul(v128.load(get(dk[k]!)), get(pw))))),
        set(qk[k]!, i32.add(get(qk[k]!), i32.const(128))), set(dk[k]!, i32.add(get(dk[k]!), i32.const(16))), set(ck[k]!, i32.add(get(ck[k]!), i32.const(16))),
      ]),
      set(c.p, i32.add(get(c.p), i32.const(64))), set(c.e, i32.add(get(c.e), i32.const(4))),
      set(g, i32.add(get(g), i32.const(4))), br(0))),
  ];
}

/** Token k's sum: its lanes, then the tail blocks ascending (p, e from the end of the groups), stored. */
function q8Tail(c: Q, k: number): Code[] {
  const { P, qk, dk, ck, lanes, acc, u, g2, p2, e2, wv, lo, hi, bs, ev, pw } = c;
  return [
    set(acc, f32.add(f32.add(fl(get(lanes[k]!), 0), fl(get(lanes[k]!), 1)), f32.add(fl(get(lanes[k]!), 2), fl(get(lanes[k]!), 3)))),
    set(g2, get(c.g)), set(p2, get(c.p)), set(e2, get(c.e)),
    block(loop(br_if(1, i32.ge_u(get(g2), get(c.nb))),
      set(wv, v128.load(get(p2))),
      set(lo, c.swz(get(c.tbl), v128.and(get(wv), get(c.m0f)))),
      set(hi, c.swz(get(c.tbl), i8x16.shr_u(get(wv), i32.const(4)))),
      set(bs, q8Dot(c, qk[k]!, 0)),
      set(ev, i32x4.splat(i32.load8_u(get(e2)))),
      set(pw, powOf(c)),
      set(u, f32.mul(f32.convert_i32_s(
        i32.sub(i32.add(i32.add(i32x4.extract_lane(get(bs), 0), i32x4.extract_lane(get(bs), 1)),
          i32.add(i32x4.extract_lane(get(bs), 2), i32x4.extract_lane(get(bs), 3))), i32.load(get(ck[k]!)))),
      fl(f32x4.mul(v128.load32_splat(get(dk[k]!)), get(pw)), 0))),
      set(acc, f32.add(get(acc), get(u))),
      set(p2, i32.add(get(p2), i32.const(16))), set(qk[k]!, i32.add(get(qk[k]!), i32.const(32))),
      set(e2, i32.add(get(e2), i32.const(1))), set(dk[k]!, i32.add(get(dk[k]!), i32.const(4))), set(ck[k]!, i32.add(get(ck[k]!), i32.const(4))),
      set(g2, i32.add(get(g2), i32.const(1))), br(0))),
    f32.store(i32.add(P('y'), i32.shl(i32.add(i32mul(i32.add(get(c.t), i32.const(k)), P('rows')), get(c.r)), i32.const(2))), get(acc)),
  ];
}

/** Tokens t .. t + TT - 1 of row r. */
function q8Tokens(c: Q, TT: number): Code[] {
  const { P, t, qk, dk, ck, lanes } = c;
  const ks = Array.from({ length: TT }, (_, k) => k);
  return [
    set(c.p, get(c.wrow)), set(c.e, get(c.srow)),
    ...ks.flatMap((k) => [
      set(qk[k]!, i32.add(P('x'), i32mul(i32.add(get(t), i32.const(k)), P('cols')))),
      set(dk[k]!, i32.add(get(c.dbase), i32.shl(i32mul(i32.add(get(t), i32.const(k)), get(c.nb)), i32.const(2)))),
      set(ck[k]!, i32.add(get(c.cbase), i32.shl(i32mul(i32.add(get(t), i32.const(k)), get(c.nb)), i32.const(2)))),
      set(lanes[k]!, get(c.zero)),
    ]),
    ...q8Groups(c, ks),
    ...ks.flatMap((k) => q8Tail(c, k)),
  ];
}

/**
 * mmq8_mxfp4(w, s, sdt, rows, cols, x, T, y, r0, r1, scratch): the MM_PARAMS signature; x is
 * quantizeQ8's output for T tokens. (sdt and scratch unused.)
 */
export function addQ8(fnx: FnMaker, K: ConstLocal, relaxed: boolean, dotAdd: boolean): Fn {
  const c = q8Locals(fnx, K, relaxed, dotAdd);
  const { f, P, r, t, nb, G, dbase, cbase, wrow, srow } = c;
  f.body = [
    set(nb, i32.shr_u(P('cols'), i32.const(5))),
    set(G, i32.and(get(nb), i32.const(-4))),
    set(dbase, i32.add(P('x'), i32mul(P('T'), P('cols')))),
    set(cbase, i32.add(get(dbase), i32.shl(i32mul(P('T'), get(nb)), i32.const(2)))),
    set(r, P('r0')),
    block(loop(br_if(1, i32.ge_u(get(r), P('r1'))),
      set(wrow, i32.add(P('w'), i32mul(get(r), i32.shr_u(P('cols'), i32.const(1))))),
      set(srow, i32.add(P('s'), i32mul(get(r), get(nb)))),
      set(t, i32.const(0)),
      ...[4, 2, 1].map((TT) => block(loop(br_if(1, i32.gt_u(i32.add(get(t), i32.const(TT)), P('T'))),
        ...q8Tokens(c, TT),
        set(t, i32.add(get(t), i32.const(TT))), br(0)))),
      set(r, i32.add(get(r), i32.const(1))), br(0))),
  ];
  return f;
}

/**
 * Store a block's 32 int8 values (qa: columns 0..15, qb: 16..31; natural position qp, block bi of
 * its row): as 8 words at qp - 28 (bi & 3) + 16 v (groupWordsPos) where `words` holds and bi < G,
 * else in column order at qp.
 */
export function storeBlock(qp: number, bi: number, G: number, qa: number, qb: number, words: Code): Code {
  const at = i32.sub(get(qp), i32.mul(i32.and(get(bi), i32.const(3)), i32.const(28)));
  return if_(i32.and(words, i32.lt_u(get(bi), get(G))),
    [0, 1, 2, 3, 4, 5, 6, 7].map((v) => i32.store(at, i32x4.extract_lane(get(v < 4 ? qa : qb), v & 3), 16 * v)),
    [v128.store(get(qp), get(qa)), v128.store(get(qp), get(qb), 16)]);
}

// ---- the activation quantizer in Wasm ----------------------------------------------------------

/**
 * q8_act(x, out, T, cols, order, scaleBits, offset): the bytes quantizeBlocks writes (the
 * TypeScript reference above, which stays the definition; test/kernels/q8-act.test.ts compares them byte
 * for byte), `scaleMul` given as its f32 bits, `order` an ORDER_CODE. x [T, cols] and the output are
 * contiguous, so the T * nb blocks are one run. Per block, quantizeBlocks' operations, each giving
 * the same value:
 *   amax: JS `if (a > amax) amax = a` from 0 skips NaN. f32x4.pmax(acc, a) = acc < a ? a : acc
 *     keeps acc when a is NaN, so each chain starts from +0 with the |x| as second operand; the
 *     max of non-NaN values does not depend on the order: two chains of four, then a horizontal
 *     pmax of (non-NaN) lanes.
 *   d = f32(amax / 127), id = d ? f32(1 / d) : 0, f32(d * scaleMul): JS divides / multiplies in
 *     double and rounds to f32; f32.div / f32.mul round once, which is the same (53 >= 2 * 24 + 2
 *     bits, so double rounding is innocuous), Infinity and subnormals included.
 *   v = f32(x * id): |v| = f32(|x| * id) by f32x4.mul (rounding is sign-symmetric).
 *   n: JS takes floor(-v + 0.5) (v < 0) or floor(v + 0.5) in DOUBLE, i.e. floor(|v| + 0.5) with
 *     v's sign. The same here: |v| promoted to f64 (exact), + 0.5 in f64 (not f32: f32 would
 *     round 0.49999997 + 0.5 up to 1), then i32x4.trunc_sat_f64x2_s_zero, which is floor for
 *     these non-negative values, NaN -> 0 as JS's `n | 0`, and saturates (then the clamp to 127
 *     gives JS's clamp). The sign is x's: v < 0 needs x < 0 (id >= 0), and where x is negative
 *     but v is not (v = -0 or NaN) the magnitude is 0.
 *   sum of n: exact integers, any order; corr = offset * sum (i32.mul: |.| <= 64 * 32 * 127).
 *   int8 bytes: saturating narrows (exact, |n| <= 127), then for the evenOdd layout one
 *     shuffle to the 16 even columns then the 16 odd; for the words layout stored as 8 words
 *     (storeBlock).
 * Nothing depends on relaxed SIMD.
 */
export function addQuantizeBlocks(fnx: FnMaker, K: ConstLocal): Fn {
  const f = fnx('q8_act', { x: I32, out: I32, T: I32, cols: I32, order: I32, smul: I32, off: I32 });
  const P = (n: string): Code => get(f.p(n));
  const L = (n: string, t: typeof I32 | typeof F32 | typeof V128 = I32): number => f.local(n, t);
  const zero = K(f, splat32(0)), k127 = K(f, splat32(127));
  const half = K(f, new Uint8Array(new Float64Array([0.5, 0.5]).buffer));
  const xp = L('xp'), end = L('end'), qp = L('qp'), dp = L('dp'), cp = L('cp'), sum = L('sum');
  const bi = L('bi'), nb = L('nb'), G = L('G');
  const d = L('d', F32), ms = L('ms', F32);
  const xv = Array.from({ length: 8 }, (_, k) => L(`x${k}`, V128));
  const av = Array.from({ length: 8 }, (_, k) => L(`a${k}`, V128));
  const nv = Array.from({ length: 8 }, (_, k) => L(`n${k}`, V128));
  const m = L('m', V128), idv = L('idv', V128), qa = L('qa', V128), qb = L('qb', V128), s = L('s', V128);
  const chain = (ks: number[]): Code => ks.reduce<Code>((acc, k) => f32x4.pmax(acc, get(av[k]!)), get(zero));
  /** floor(f64(a) + 0.5) of the f32x4 a (non-negative or NaN) as i32x4, NaN -> 0, saturated. */
  const round = (a: number): Code => shuffle32(
    i32x4.trunc_sat_f64x2_s_zero(f64x2.add(f64x2.promote_low_f32x4(get(a)), get(half))),
    i32x4.trunc_sat_f64x2_s_zero(f64x2.add(f64x2.promote_low_f32x4(shuffle32(get(a), get(a), [2, 3, 0, 1])), get(half))),
    [0, 1, 4, 5]);
  const narrow = (k: number): Code => i8x16.narrow_i16x8_s(i16x8.narrow_i32x4_s(get(nv[k]!), get(nv[k + 1]!)), i16x8.narrow_i32x4_s(get(nv[k + 2]!), get(nv[k + 3]!)));
  f.body = [
    set(xp, P('x')),
    set(end, i32.add(P('x'), i32.shl(i32.mul(P('T'), P('cols')), i32.const(2)))),
    set(qp, P('out')),
    set(dp, i32.add(P('out'), i32.mul(P('T'), P('cols')))),
    set(cp, i32.add(get(dp), i32.mul(P('T'), i32.shr_u(P('cols'), i32.const(3))))), // + 4 * T * nb
    set(ms, f32.reinterpret_i32(P('smul'))),
    set(nb, i32.shr_u(P('cols'), i32.const(5))),
    set(G, i32.and(get(nb), i32.const(-4))),
    set(bi, i32.const(0)),
    block(loop(br_if(1, i32.ge_u(get(xp), get(end))),
      ...xv.flatMap((x, k) => [set(x, v128.load(get(xp), 16 * k)), set(av[k]!, f32x4.abs(get(x)))]),
      set(m, f32x4.pmax(chain([0, 1, 2, 3]), chain([4, 5, 6, 7]))),
      set(m, f32x4.pmax(get(m), shuffle32(get(m), get(m), [2, 3, 0, 1]))),
      set(m, f32x4.pmax(get(m), shuffle32(get(m), get(m), [1, 0, 3, 2]))),
      set(d, f32.div(f32x4.extract_lane(get(m), 0), f32.const(127))),
      set(idv, f32x4.splat(select(f32.div(f32.const(1), get(d)), f32.const(0), f32.ne(get(d), f32.const(0))))),
      ...av.flatMap((a, k) => [
        set(a, f32x4.mul(get(a), get(idv))),
        set(s, i32x4.shr_s(get(xv[k]!), i32.const(31))), // -1 where x's sign bit is set
        set(nv[k]!, i32x4.sub(v128.xor(i32x4.min_s(round(a), get(k127)), get(s)), get(s))),
      ]),
      set(m, i32x4.add(i32x4.add(i32x4.add(get(nv[0]!), get(nv[1]!)), i32x4.add(get(nv[2]!), get(nv[3]!))),
        i32x4.add(i32x4.add(get(nv[4]!), get(nv[5]!)), i32x4.add(get(nv[6]!), get(nv[7]!))))),
      set(sum, i32.add(i32.add(i32x4.extract_lane(get(m), 0), i32x4.extract_lane(get(m), 1)), i32.add(i32x4.extract_lane(get(m), 2), i32x4.extract_lane(get(m), 3)))),
      set(qa, narrow(0)), set(qb, narrow(4)),
      if_(i32.eq(P('order'), i32.const(ORDER_CODE.evenOdd)), [
        v128.store(get(qp), i8x16.shuffle(get(qa), get(qb), Array.from({ length: 16 }, (_, i) => 2 * i))),
        v128.store(get(qp), i8x16.shuffle(get(qa), get(qb), Array.from({ length: 16 }, (_, i) => 2 * i + 1)), 16),
      ], [storeBlock(qp, bi, G, qa, qb, i32.eq(P('order'), i32.const(ORDER_CODE.words)))]),
      set(bi, i32.add(get(bi), i32.const(1))),
      set(bi, select(i32.const(0), get(bi), i32.eq(get(bi), get(nb)))),
      f32.store(get(dp), f32.mul(get(d), get(ms))),
      i32.store(get(cp), i32.mul(P('off'), get(sum))),
      set(xp, i32.add(get(xp), i32.const(128))), set(qp, i32.add(get(qp), i32.const(32))),
      set(dp, i32.add(get(dp), i32.const(4))), set(cp, i32.add(get(cp), i32.const(4))),
      br(0))),
  ];
  return f;
}
