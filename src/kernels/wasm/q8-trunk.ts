// The `--fast` path for the trunk's bf16 products: the weights REQUANTIZED once at load to 7-bit
// blocks (this is not the stored weights; docs/NUMERICS.md "Opt-in fast paths"), activations
// quantized to 8 bits per call, integer block dots. Deterministic: every output is reduced in one
// fixed order that depends neither on the thread count nor on T, and the Wasm kernel gives the
// bytes of the TypeScript reference below, relaxed SIMD on or off (test/kernels/fast-trunk.test.ts).
//
// Weights (requantizeQ7InPlace, once per piece when it is read, by the store on its thread: the
// Wasm q7_requant at the bottom, on its own memory, in chunks of rows; requantizeQ7Ref is the
// TypeScript definition, same bytes, test/kernels/q7-requant.test.ts): per row and block b of 32
// columns of bf16 values w_i,
//   amax = max |w_i|,  d = f32(amax / 63),  id = d ? f32(1 / d) : 0,
//   q_i = clamp(roundHalfAway(f32(w_i * id)), -63, 63),   stored byte q_i + 64 (1..127).
// Layout ('q7' WeightView): rows * cols bytes, row-major; then the rows * nb f32 scales d. It takes
// 1.125 bytes a weight, so it is written over the bf16 bytes. Within a row, each group of four
// blocks (b < G = nb & ~3, 128 bytes) is laid out by 4-byte words: word v (columns 4v..4v+3) of
// block g + i at byte 32 g + 16 v + 4 i (groupWordsPos in q8.ts); the tail blocks in column order.
// So one 16-byte vector holds a word of each of the group's four blocks, and one integer dot of it
// sums into lane i the products of block g + i: the kernel needs no shuffles to separate the
// blocks' sums. The activations are laid out the same way (the `words` order).
//
// Why 7 bits: i16x8.relaxed_dot_i8x16_i7x16_s(a, b) is exact on every platform only when every
// byte of its SECOND operand b has the top bit clear (0..127); then x86 (pmaddubsw, b as
// unsigned) and Arm (read as signed) see the same values, and the i16 pair sums
// (|.| <= 2 * 127 * 127) never saturate. The weight is that operand, offset by 64 into 1..127.
//
// Activations (quantizeQ8T, per call and token, the words order; the Kernels class runs the Wasm
// q8_act of q8.ts, same bytes): per token and block b,
//   amax = max |x_i|,  d = f32(amax / 127),  id = d ? f32(1 / d) : 0,
//   q_i = clamp(roundHalfAway(f32(x_i * id)), -127, 127) (int8),  c_b = 64 * sum_b q_i.
// One token: cols int8; after all T tokens' bytes come T * nb f32 scales d, then T * nb i32 c_b.
//
// One output y[t, r] (nb = cols / 32 blocks, G = nb & ~3):
//   B_b = sum over the block of q_x * (q_w + 64) - c_b  (i32, exact: |.| <= 32 * 127 * 127)
//   s_b = f32(dx_b * dw_b),  u_b = f32(f32(B_b) * s_b)
//   lanes l_0..l_3 = +0;  for b < G, ascending: l_{b%4} = f32(l_{b%4} + u_b)
//   acc = f32(f32(l_0 + l_1) + f32(l_2 + l_3));  for G <= b < nb, ascending: acc = f32(acc + u_b)
// Threads split rows, never a dot; up to 4 tokens share one load of the weight blocks.
//
// Wasm (mmq7), per group and token: relaxed SIMD, per word vector
// i32x4.dot_i16x8_s(i16x8.relaxed_dot_i8x16_i7x16_s(q_x, q_w + 64), ones) added into one i32x4,
// whose lanes are then B_g..B_g+3 (3 instructions a vector on x86; the i32x4 relaxed dot-add that
// V8 emits with a ones vector built each time, then two shuffle levels to separate the blocks, took
// 49 a group of 8 vectors against 24). Plain SIMD: i16x8.extmul_{low,high} (|q_x (q_w + 64)| <=
// 16129) and i32x4.extadd_pairwise_i16x8_s into two i32x4 (blocks 0, 0, 1, 1 and 2, 2, 3, 3), one
// pairwise add at the end. Where the i32x4 relaxed dot-add is one instruction (loader.ts
// intDotAddIsOne: Arm64's sdot, x86 AVX-VNNI in newer V8) it accumulates each vector instead.
// Tail blocks in column order: the same per half block. Integer sums are exact, so their order is
// free: every variant gives the same i32 and the same bytes. Measurements: docs/TUNING.md
// "Kernel forms: the q7 trunk dot".

import { q8Bytes, quantizeBlocks, quantizedActs, blockSum, groupWordsPos, storeBlock, simd, vbin, extmulLo, extmulHi, i16add, extaddPairS, relaxedDotAdd, relaxedDot16, dotI16, splat32, ONES16 } from './q8.js';
import type { WeightView } from '../../formats/weight.js';
import { type Code, Fn, I32, F32, V128, assemble, get, set, call, block, loop, br, br_if, select, i32, f32, v128, i8x16, i16x8, i32x4, f32x4, shuffle32 } from './emit.js';

type FnMaker = (name: string, params: Record<string, typeof I32>, result?: typeof I32 | null, exported?: boolean) => Fn;
type ConstLocal = (f: Fn, b: Uint8Array) => number;

const fr = Math.fround;
/** The offset that makes a 7-bit weight value a non-negative byte. */
export const Q7_OFF = 64;
const QW = 63;

/** Bytes of a [rows, cols] matrix requantized to 'q7' (int bytes, then f32 scales). */
export function q7Bytes(rows: number, cols: number): number {
  return rows * cols + rows * (cols / 32) * 4;
}

/** Rows [r0, r1) of a [rows, cols] matrix requantized in buf (the q bytes of row r at r * cols,
 *  then every row's f32 scales, cols / 32 a row), as a 'q7' view. */
export function q7View(name: string, buf: Uint8Array, rows: number, cols: number, r0 = 0, r1 = rows): WeightView {
  const nb = cols / 32;
  return { name, format: 'q7', rows: r1 - r0, cols, data: buf.subarray(r0 * cols, r1 * cols), scale: buf.subarray(rows * cols + 4 * r0 * nb, rows * cols + 4 * r1 * nb) };
}

/** Bytes quantizeQ8T writes for T tokens of `cols` columns (the layout of quantizeQ8's, unpermuted). */
export function q8tBytes(T: number, cols: number): number {
  return q8Bytes(T, cols);
}

/**
 * TypeScript reference of requantizeQ7InPlace (the definition; the Wasm q7_requant below writes
 * the same bytes, test/kernels/q7-requant.test.ts): `rows` bf16 rows of `cols` columns (a multiple of 32)
 * at buf[0 ..) to the 'q7' layout, in place (see the top). Row r's bytes land at
 * [r*cols, (r+1)*cols), below its bf16 bytes, and the scales are kept aside until every row is
 * read, so nothing is overwritten before it is read.
 */
export function requantizeQ7Ref(buf: Uint8Array, rows: number, cols: number): void {
  if (cols % 32) throw new RangeError(`q7: columns ${cols} not a multiple of 32`);
  const nb = cols / 32;
  const bits = new Uint32Array(cols);
  const vals = new Float32Array(bits.buffer);
  const scales = new Float32Array(rows * nb);
  // bf16 pairs read as u16 where aligned (kernel memory always is), else byte by byte
  const u16 = buf.byteOffset % 2 === 0 ? new Uint16Array(buf.buffer, buf.byteOffset, rows * cols) : null;
  for (let r = 0; r < rows; r++) {
    const o = r * cols;
    if (u16) for (let i = 0; i < cols; i++) bits[i] = u16[o + i]! << 16;
    else for (let i = 0; i < cols; i++) bits[i] = (buf[2 * (o + i)]! | (buf[2 * (o + i) + 1]! << 8)) << 16;
    for (let b = 0; b < nb; b++) {
      const c0 = b * 32;
      let amax = 0;
      for (let i = c0; i < c0 + 32; i++) {
        const a = Math.abs(vals[i]!);
        if (a > amax) amax = a;
      }
      const d = fr(amax / QW);
      const id = d ? fr(1 / d) : 0;
      for (let i = c0; i < c0 + 32; i++) {
        // round half away from zero (|v| <= 63 + rounding, so the int conversions are exact); NaN -> 0
        const v = fr(vals[i]! * id);
        let n = v < 0 ? -((0.5 - v) | 0) : (v + 0.5) | 0;
        if (n > QW) n = QW;
        else if (n < -QW) n = -QW;
        buf[o + groupWordsPos(i, cols)] = n + Q7_OFF;
      }
      scales[r * nb + b] = d;
    }
  }
  buf.set(new Uint8Array(scales.buffer), rows * cols);
}

/** quantizeQ8T's layout (the Kernels class passes it to q8_act, wasm/q8.ts). */
export const Q8T_LAYOUT = { order: 'words', scaleMul: 1, offset: Q7_OFF } as const;

/**
 * Quantize x [T, cols] (cols a multiple of 32) into `out` (q8tBytes(T, cols) bytes, offset a
 * multiple of 4): per token the int8 values, then all tokens' f32 scales, then the i32 c_b.
 */
export function quantizeQ8T(x: Float32Array, T: number, cols: number, out: Uint8Array): void {
  quantizeBlocks(x, T, cols, out, Q8T_LAYOUT);
}

/** TypeScript reference of mmq7: y[t*rows + r] for t < T, r in [r0, r1) (see the top). */
export function matmulQ7Ref(w: { name: string; format: string; rows: number; cols: number; data: Uint8Array; scale?: Uint8Array }, x: Float32Array, T: number, y: Float32Array, r0 = 0, r1 = w.rows): void {
  if (w.format !== 'q7') throw new TypeError(`q7 path: ${w.name} is ${w.format}, not q7`);
  const { rows, cols } = w;
  const nb = cols / 32;
  const { q, d: dx, corr } = quantizedActs(x, T, cols, q8tBytes(T, cols), Q8T_LAYOUT);
  const data = w.data;
  const sv = new DataView(w.scale!.buffer, w.scale!.byteOffset, w.scale!.byteLength);
  const l = new Float32Array(4);
  for (let r = r0; r < r1; r++) {
    for (let t = 0; t < T; t++) {
      const u = (b: number): number => {
        let B = 0;
        for (let c = b * 32; c < b * 32 + 32; c++) {
          const at = groupWordsPos(c, cols);
          B += q[t * cols + at]! * data[r * cols + at]!;
        }
        B -= corr[t * nb + b]!;
        return fr(B * fr(dx[t * nb + b]! * sv.getFloat32(4 * (r * nb + b), true)));
      };
      y[t * rows + r] = blockSum(nb, u, l);
    }
  }
}

// ---- the Wasm kernel -------------------------------------------------------------------------

/**
 * mmq7(w, s, sdt, rows, cols, x, T, y, r0, r1, scratch): the MM_PARAMS signature; w the q7 bytes,
 * s the f32 scales, x quantizeQ8T's output for T tokens. (sdt and scratch unused.) `minDist`: the
 * least distance of paired rows (mm1.ts MM1_MIN_DIST).
 */
export function addQ7(fnx: FnMaker, K: ConstLocal, relaxed: boolean, minDist: number, dotAdd: boolean): Fn {
  const params: Record<string, typeof I32> = { w: I32, s: I32, sdt: I32, rows: I32, cols: I32, x: I32, T: I32, y: I32, r0: I32, r1: I32, scratch: I32 };
  const one = q7Rows(fnx('mmq7r', params, null, false), K, relaxed, dotAdd, 1);
  // One token: rows in pairs far apart (j and j+qd), two streams from memory, as the exact
  // single-token path does (mm1.ts MM1_ROWS); each row's sums as alone. A function of its
  // own (V8 allocates registers per function).
  const pairs = q7Rows(fnx('mmq7p', { ...params, qd: I32 }, null, false), K, relaxed, dotAdd, 2);
  const f = fnx('mmq7', params, null, false);
  const P = (n: string): Code => get(f.p(n));
  const qd = f.local('qd', I32);
  const args = (r0: Code): Code[] => [P('w'), P('s'), P('sdt'), P('rows'), P('cols'), P('x'), P('T'), P('y'), r0, P('r1'), P('scratch')];
  f.body = [
    set(qd, i32.shr_u(i32.sub(P('r1'), P('r0')), i32.const(1))),
    set(qd, select(get(qd), i32.const(0), i32.and(i32.eq(P('T'), i32.const(1)), i32.ge_u(get(qd), i32.const(minDist))))),
    block(br_if(0, i32.eqz(get(qd))), call(pairs.index, ...args(P('r0')), get(qd))),
    call(one.index, ...args(i32.add(P('r0'), i32.shl(get(qd), i32.const(1))))),
  ];
  return f;
}

/** A row being dotted: its index, weight and scale pointers, and its lanes per token. */
interface Row { r: number; wrow: number; srow: number; p: number; e: number; lanes: number[] }

/** q7Rows' locals and constants, in the order the module numbers them. */
function q7Locals(f: Fn, K: ConstLocal, relaxed: boolean, dotAdd: boolean, nr: 1 | 2) {
  const P = (n: string): Code => get(f.p(n));
  const zero = K(f, splat32(0));
  const ones = relaxed && !dotAdd ? K(f, ONES16) : -1;
  const L = (n: string, t: typeof I32 | typeof V128 = I32): number => f.local(n, t);
  const t = L('t'), nb = L('nb'), G = L('G');
  const g = L('g'), dbase = L('dbase'), cbase = L('cbase');
  const g2 = L('g2'), p2 = L('p2'), e2 = L('e2');
  const acc = f.local('acc', F32), u = f.local('u', F32);
  const wl = L('wl', V128), wh = L('wh', V128), bs = L('bs', V128), sw = L('sw', V128);
  const vo = L('vo'), xw = L('xw', V128); // the word loop's offset; one token's word vector (rows side by side)
  const TTMAX = 4;
  const per = (n: string, ty: typeof I32 | typeof V128 = I32): number[] => Array.from({ length: TTMAX }, (_, k) => L(`${n}${k}`, ty));
  const qk = per('q'), dk = per('dp'), ck = per('cp');
  const sq = per('sq'), sd = per('sd'), sc = per('sc');
  const ak = per('ak', V128), ah = per('ah', V128);
  const R: Row[] = Array.from({ length: nr }, (_, i) => ({
    r: L(`r${i}`), wrow: L(`wrow${i}`), srow: L(`srow${i}`), p: L(`p${i}`), e: L(`e${i}`),
    lanes: Array.from({ length: TTMAX }, (_, k) => L(`lanes${i}_${k}`, V128)),
  }));
  const j = L('j'), jend = L('jend');
  return { f, P, relaxed, dotAdd, nr, zero, ones, t, nb, G, g, dbase, cbase, g2, p2, e2, acc, u, wl, wh, bs, sw, vo, xw, qk, dk, ck, sq, sd, sc, ak, ah, R, j, jend };
}
type Q7 = ReturnType<typeof q7Locals>;

/** i32x4 of partial sums of q_x (q_w + 64) of a tail block (weights in wl, wh) for the token at a.
 *  Relaxed: the pair sums of each half (<= 32258) widened apart (added, they would overflow i16). */
function q7Dot(c: Q7, a: number): Code {
  const { wl, wh, ones } = c;
  if (c.relaxed && c.dotAdd) return relaxedDotAdd(v128.load(get(a), 16), get(wh), relaxedDotAdd(v128.load(get(a)), get(wl), get(c.zero)));
  if (c.relaxed) return i32x4.add(dotI16(relaxedDot16(v128.load(get(a)), get(wl)), get(ones)), dotI16(relaxedDot16(v128.load(get(a), 16), get(wh)), get(ones)));
  return i32x4.add(
    extaddPairS(i16add(extmulLo(get(wl), v128.load(get(a))), extmulHi(get(wl), v128.load(get(a))))),
    extaddPairS(i16add(extmulLo(get(wh), v128.load(get(a), 16)), extmulHi(get(wh), v128.load(get(a), 16)))));
}

/** Word vector v of a group (a word of each of its 4 blocks, groupWordsPos) dotted with the token's
 *  at a + 16 v, into its sums: relaxed, lane i of ak is block i's; plain, ak (0, 0, 1, 1), ah (2, 2, 3, 3). */
function dotWords(c: Q7, k: number, x: Code, w: Code): Code[] {
  const { ak, ah } = c;
  if (c.relaxed && c.dotAdd) return [set(ak[k]!, relaxedDotAdd(x, w, get(ak[k]!)))];
  if (c.relaxed) return [set(ak[k]!, i32x4.add(get(ak[k]!), dotI16(relaxedDot16(x, w), get(c.ones))))];
  return [
    set(ak[k]!, i32x4.add(get(ak[k]!), extaddPairS(extmulLo(w, x)))),
    set(ah[k]!, i32x4.add(get(ah[k]!), extaddPairS(extmulHi(w, x)))),
  ];
}

/** (B_g .. B_g+3) of accumulator set k before the offset correction. */
const groupSums = (c: Q7, k: number): Code => c.relaxed ? get(c.ak[k]!) : i32x4.add(shuffle32(get(c.ak[k]!), get(c.ah[k]!), [0, 2, 4, 6]), shuffle32(get(c.ak[k]!), get(c.ah[k]!), [1, 3, 5, 7]));
const fl = (v: Code, l: number): Code => f32x4.extract_lane(v, l);

/** The whole groups of tokens ks of the rows: each weight vector loaded once for the tokens. */
function q7Groups(c: Q7, ks: readonly number[]): Code[] {
  const { R, nr, qk, dk, ck, ak, ah, vo, xw, wl, bs, g } = c;
  const TT = ks.length;
  return [
    set(g, i32.const(0)),
    block(loop(br_if(1, i32.ge_u(get(g), get(c.G))),
      ...R.flatMap((_, i) => ks.flatMap((k) => (c.relaxed ? [set(ak[i * TT + k]!, get(c.zero))] : [set(ak[i * TT + k]!, get(c.zero)), set(ah[i * TT + k]!, get(c.zero))]))),
      // the group's 8 word vectors in a loop of their own, each row's and token's integer sums in
      // accumulator set i * TT + k (nr * TT <= 4); written out, V8 loaded every vector of the
      // group first (loads keep their order, the arithmetic sinks to its use) and spilled a dozen
      set(vo, i32.const(0)),
      block(loop(br_if(1, i32.ge_u(get(vo), i32.const(128))),
        ...(nr > 1
          // (one token: its word vector shared by the rows)
          ? [set(xw, v128.load(i32.add(get(qk[0]!), get(vo)))), ...R.flatMap((w, i) => dotWords(c, i * TT, get(xw), v128.load(i32.add(get(w.p), get(vo)))))]
          : [set(wl, v128.load(i32.add(get(R[0]!.p), get(vo)))), ...ks.flatMap((k) => dotWords(c, k, v128.load(i32.add(get(qk[k]!), get(vo))), get(wl)))]),
        set(vo, i32.add(get(vo), i32.const(16))), br(0))),
      ...R.flatMap((w, i) => [
        set(c.sw, v128.load(get(w.e))),
        ...ks.flatMap((k) => [
          // (B_g, .., B_g+3) minus the offset corrections, then u_b = f32(f32(B_b) * f32(dx_b * dw_b))
          set(bs, i32x4.sub(groupSums(c, i * TT + k), v128.load(get(ck[k]!)))),
          set(w.lanes[k]!, f32x4.add(get(w.lanes[k]!), f32x4.mul(f32x4.convert_i32x4_s(get(bs)), f32x4.mul(v128.load(get(dk[k]!)), get(c.sw))))),
        ]),
        set(w.p, i32.add(get(w.p), i32.const(128))), set(w.e, i32.add(get(w.e), i32.const(16))),
      ]),
      ...ks.flatMap((k) => [
        set(qk[k]!, i32.add(get(qk[k]!), i32.const(128))), set(dk[k]!, i32.add(get(dk[k]!), i32.const(16))), set(ck[k]!, i32.add(get(ck[k]!), i32.const(16))),
      ]),
      set(g, i32.add(get(g), i32.const(4))), br(0))),
  ];
}

/** Row w's sum for token k: its lanes, then its tail blocks ascending, stored. */
function q7Tail(c: Q7, w: Row, k: number): Code[] {
  const { P, qk, dk, ck, acc, u, g2, p2, e2, bs } = c;
  return [
    set(acc, f32.add(f32.add(fl(get(w.lanes[k]!), 0), fl(get(w.lanes[k]!), 1)), f32.add(fl(get(w.lanes[k]!), 2), fl(get(w.lanes[k]!), 3)))),
    // tail blocks, ascending (pointers of this token; p, e from the end of the groups)
    set(g2, get(c.g)), set(p2, get(w.p)), set(e2, get(w.e)),
    block(loop(br_if(1, i32.ge_u(get(g2), get(c.nb))),
      set(c.wl, v128.load(get(p2))), set(c.wh, v128.load(get(p2), 16)),
      set(bs, q7Dot(c, qk[k]!)),
      set(u, f32.mul(f32.convert_i32_s(
        i32.sub(i32.add(i32.add(i32x4.extract_lane(get(bs), 0), i32x4.extract_lane(get(bs), 1)),
          i32.add(i32x4.extract_lane(get(bs), 2), i32x4.extract_lane(get(bs), 3))), i32.load(get(ck[k]!)))),
      f32.mul(f32.load(get(dk[k]!)), f32.load(get(e2))))),
      set(acc, f32.add(get(acc), get(u))),
      set(p2, i32.add(get(p2), i32.const(32))), set(qk[k]!, i32.add(get(qk[k]!), i32.const(32))),
      set(e2, i32.add(get(e2), i32.const(4))), set(dk[k]!, i32.add(get(dk[k]!), i32.const(4))), set(ck[k]!, i32.add(get(ck[k]!), i32.const(4))),
      set(g2, i32.add(get(g2), i32.const(1))), br(0))),
    f32.store(i32.add(P('y'), i32.shl(i32.add(i32.mul(i32.add(get(c.t), i32.const(k)), P('rows')), get(w.r)), i32.const(2))), get(acc)),
  ];
}

/** Tokens t .. t + TT - 1 of the rows. */
function q7Tokens(c: Q7, TT: number): Code[] {
  const { P, R, t, qk, dk, ck, sq, sd, sc } = c;
  const ks = Array.from({ length: TT }, (_, k) => k);
  return [
    ...R.flatMap((w) => [set(w.p, get(w.wrow)), set(w.e, get(w.srow)), ...ks.map((k) => set(w.lanes[k]!, get(c.zero)))]),
    ...ks.flatMap((k) => [
      set(qk[k]!, i32.add(P('x'), i32.mul(i32.add(get(t), i32.const(k)), P('cols')))),
      set(dk[k]!, i32.add(get(c.dbase), i32.shl(i32.mul(i32.add(get(t), i32.const(k)), get(c.nb)), i32.const(2)))),
      set(ck[k]!, i32.add(get(c.cbase), i32.shl(i32.mul(i32.add(get(t), i32.const(k)), get(c.nb)), i32.const(2)))),
    ]),
    ...q7Groups(c, ks),
    // the tokens' pointers at the tail blocks, for each row's tail
    ...(c.nr > 1 ? ks.flatMap((k) => [set(sq[k]!, get(qk[k]!)), set(sd[k]!, get(dk[k]!)), set(sc[k]!, get(ck[k]!))]) : []),
    ...R.flatMap((w, i) => [
      ...(i > 0 ? ks.flatMap((k) => [set(qk[k]!, get(sq[k]!)), set(dk[k]!, get(sd[k]!)), set(ck[k]!, get(sc[k]!))]) : []),
      ...ks.flatMap((k) => q7Tail(c, w, k)),
    ]),
  ];
}

/** The body of f: rows [r0, r1) one at a time, all T tokens (nr = 1); or (nr = 2, T = 1) rows j
 *  and j + qd side by side for j in [r0, r0 + qd). */
function q7Rows(f: Fn, K: ConstLocal, relaxed: boolean, dotAdd: boolean, nr: 1 | 2): Fn {
  const c = q7Locals(f, K, relaxed, dotAdd, nr);
  const { P, R, t, nb, G, dbase, cbase, j, jend } = c;
  const rowPtrs = (w: Row, r: Code): Code[] => [
    set(w.r, r),
    set(w.wrow, i32.add(P('w'), i32.mul(get(w.r), P('cols')))),
    set(w.srow, i32.add(P('s'), i32.shl(i32.mul(get(w.r), get(nb)), i32.const(2)))),
  ];
  f.body = [
    set(nb, i32.shr_u(P('cols'), i32.const(5))),
    set(G, i32.and(get(nb), i32.const(-4))),
    set(dbase, i32.add(P('x'), i32.mul(P('T'), P('cols')))),
    set(cbase, i32.add(get(dbase), i32.shl(i32.mul(P('T'), get(nb)), i32.const(2)))),
    set(j, P('r0')),
    set(jend, nr === 1 ? P('r1') : i32.add(P('r0'), P('qd'))),
    block(loop(br_if(1, i32.ge_u(get(j), get(jend))),
      ...R.flatMap((w, i) => rowPtrs(w, i === 0 ? get(j) : i32.add(get(j), P('qd')))),
      set(t, i32.const(0)),
      ...(nr === 1 ? [4, 2, 1] : [1]).map((TT) => block(loop(br_if(1, i32.gt_u(i32.add(get(t), i32.const(TT)), P('T'))),
        ...q7Tokens(c, TT),
        set(t, i32.add(get(t), i32.const(TT))), br(0)))),
      set(j, i32.add(get(j), i32.const(1))), br(0))),
  ];
  return f;
}

// ---- the weight requantizer in Wasm --------------------------------------------------------

const f32x4ge = vbin(0x46); // f32x4.ge
const truncSatS = (a: Code): Code => [a, simd(0xf8)]; // i32x4.trunc_sat_f32x4_s (NaN -> 0, saturating)

/**
 * q7_requant(src, dst, sc, n, nb): n blocks of 32 bf16 values at src (whole rows of nb blocks, one
 * run) to n * 32 q7 bytes at dst (each row's groups of four blocks by words, groupWordsPos) and n
 * f32 scales at sc. Per block, requantizeQ7Ref's
 * operations, each giving the same value:
 *   w: bf16 bits << 16, the f32 exactly (i32x4.extend_{low,high}_i16x8_u, then a shift).
 *   amax: JS `if (a > amax) amax = a` from 0 skips NaN; f32x4.pmax(acc, a) = acc < a ? a : acc
 *     keeps acc when a is NaN, so each chain starts from +0 with the |w| second (as q8_act).
 *   d = f32(amax / 63), f32(1 / d): JS divides in double and rounds to f32; f32.div rounds once,
 *     the same (53 >= 2 * 24 + 2 bits: double rounding is innocuous), overflow to Infinity too.
 *   id: JS's `d ? f32(1 / d) : 0`, except that id = Infinity (d = 0, or d tiny: amax below about
 *     2^-122) is replaced by 0. Same bytes: with JS's id = Infinity every v is ±Infinity (w != 0)
 *     or NaN, and `(±Infinity + 0.5) | 0` and `(NaN + 0.5) | 0` are 0, so every byte is 64 (n = 0
 *     or -0); with id = 0 every v is ±0 or NaN, n = 0 again. d (stored) is not changed.
 *   v = f32(w * id): |v| = f32(|w| * id) by f32x4.mul (rounding is sign-symmetric). Otherwise
 *     |v| <= amax * id (1 + 2^-24) < 127 (d >= amax / 63 / 2: amax >= 2^-133, the least bf16,
 *     so amax / 63 is far above the f32 subnormal step), so JS's `| 0` is a plain truncation.
 *   n: JS takes trunc(0.5 - v) (v < 0) or trunc(v + 0.5) in DOUBLE, i.e. floor(|v| + 0.5) with
 *     v's sign. Here t = trunc(|v|) (i32x4.trunc_sat_f32x4_s: NaN -> 0), and t + 1 where
 *     |v| - t >= 0.5: |v| - t is exact in f32 (the fraction of |v|), so this is floor(|v| + 0.5)
 *     exactly; NaN gives t = 0 and a false compare, 0 as JS. Then min(., 63), JS's clamp.
 *     The sign is w's: v < 0 needs w < 0 (id >= 0), and where w is negative but v is not (v = -0
 *     or NaN) the magnitude is 0.
 *   byte n + 64 (1..127): saturating narrows, exact; stored by words in a group (storeBlock).
 * Nothing depends on relaxed SIMD.
 */
function requantFn(): Fn {
  const f = new Fn('q7_requant', { src: I32, dst: I32, sc: I32, n: I32, nb: I32 });
  const [src, dst, sc] = [f.p('src'), f.p('dst'), f.p('sc')];
  const L = (n: string, t: typeof I32 | typeof F32 | typeof V128 = I32): number => f.local(n, t);
  const end = L('end'), d = L('d', F32), id = L('id', F32), bi = L('bi'), G = L('G');
  const qa = L('qa', V128), qb = L('qb', V128);
  const zero = L('zero', V128), half = L('half', V128), k63 = L('k63', V128), k64 = L('k64', V128);
  const h = L('h', V128), m = L('m', V128), idv = L('idv', V128), s = L('s', V128), t = L('t', V128);
  const xv = Array.from({ length: 8 }, (_, k) => L(`x${k}`, V128));
  const av = Array.from({ length: 8 }, (_, k) => L(`a${k}`, V128));
  const nv = Array.from({ length: 8 }, (_, k) => L(`n${k}`, V128));
  const chain = (ks: number[]): Code => ks.reduce<Code>((acc, k) => f32x4.pmax(acc, get(av[k]!)), get(zero));
  const narrow = (k: number): Code => i8x16.narrow_i16x8_s(i16x8.narrow_i32x4_s(get(nv[k]!), get(nv[k + 1]!)), i16x8.narrow_i32x4_s(get(nv[k + 2]!), get(nv[k + 3]!)));
  f.prologue.push(
    set(zero, i32x4.splat(i32.const(0))),
    set(half, f32x4.splat(f32.const(0.5))),
    set(k63, i32x4.splat(i32.const(QW))),
    set(k64, i32x4.splat(i32.const(Q7_OFF))),
    set(end, i32.add(get(src), i32.shl(get(f.p('n')), i32.const(6)))),
    set(G, i32.and(get(f.p('nb')), i32.const(-4))),
    set(bi, i32.const(0)),
  );
  f.body = [
    block(loop(br_if(1, i32.ge_u(get(src), get(end))),
      ...[0, 1, 2, 3].flatMap((j) => [
        set(h, v128.load(get(src), 16 * j)),
        set(xv[2 * j]!, i32x4.shl(i32x4.extend_low_i16x8_u(get(h)), i32.const(16))),
        set(xv[2 * j + 1]!, i32x4.shl(i32x4.extend_high_i16x8_u(get(h)), i32.const(16))),
      ]),
      ...xv.map((x, k) => set(av[k]!, f32x4.abs(get(x)))),
      set(m, f32x4.pmax(chain([0, 1, 2, 3]), chain([4, 5, 6, 7]))),
      set(m, f32x4.pmax(get(m), shuffle32(get(m), get(m), [2, 3, 0, 1]))),
      set(m, f32x4.pmax(get(m), shuffle32(get(m), get(m), [1, 0, 3, 2]))),
      set(d, f32.div(f32x4.extract_lane(get(m), 0), f32.const(QW))),
      set(id, f32.div(f32.const(1), get(d))),
      set(idv, f32x4.splat(select(get(id), f32.const(0), f32.ne(get(id), f32.const(Infinity))))),
      ...av.flatMap((a, k) => [
        set(a, f32x4.mul(get(a), get(idv))),
        set(t, truncSatS(get(a))),
        // t - (-1 where |v| - t >= 0.5), at most 63
        set(t, i32x4.min_s(i32x4.sub(get(t), f32x4ge(f32x4.sub(get(a), f32x4.convert_i32x4_s(get(t))), get(half))), get(k63))),
        set(s, i32x4.shr_s(get(xv[k]!), i32.const(31))), // -1 where w's sign bit is set
        set(nv[k]!, i32x4.add(i32x4.sub(v128.xor(get(t), get(s)), get(s)), get(k64))),
      ]),
      set(qa, narrow(0)), set(qb, narrow(4)),
      storeBlock(dst, bi, G, qa, qb, i32.const(1)),
      set(bi, i32.add(get(bi), i32.const(1))),
      set(bi, select(i32.const(0), get(bi), i32.eq(get(bi), get(f.p('nb'))))),
      f32.store(get(sc), get(d)),
      set(src, i32.add(get(src), i32.const(64))), set(dst, i32.add(get(dst), i32.const(32))), set(sc, i32.add(get(sc), i32.const(4))),
      br(0))),
  ];
  return f;
}

const PAGE = 65536;
/** bf16 bytes a chunk of rows copied into the requantizer's memory holds (at least one row). */
const RQ_CHUNK = 1 << 17;

let requantModule: WebAssembly.Module | null = null;

/**
 * The Wasm requantizer: the q7_requant module on its own small (not shared) memory, so it works on
 * any buffer, in kernel memory or not. Memory: [bf16 rows of a chunk][their q7 bytes][all scales].
 */
class Q7Requantizer {
  private readonly memory: WebAssembly.Memory;
  private readonly run: (src: number, dst: number, sc: number, n: number, nb: number) => void;
  private u8: Uint8Array;

  constructor() {
    requantModule ??= new WebAssembly.Module(assemble([requantFn()], { module: 'env', name: 'memory', minPages: 1, maxPages: 65535, shared: false }));
    this.memory = new WebAssembly.Memory({ initial: 8, maximum: 65535 });
    const ex = new WebAssembly.Instance(requantModule, { env: { memory: this.memory } }).exports as unknown as { q7_requant: Q7Requantizer['run'] };
    this.run = ex.q7_requant;
    this.u8 = new Uint8Array(this.memory.buffer);
  }

  requantize(buf: Uint8Array, rows: number, cols: number): void {
    const nb = cols / 32;
    const cr = Math.max(1, Math.min(rows, Math.floor(RQ_CHUNK / (2 * cols))));
    const out = 2 * cr * cols, sc = out + cr * cols, need = sc + 4 * rows * nb;
    if (need > this.memory.buffer.byteLength) {
      this.memory.grow(Math.ceil((need - this.memory.buffer.byteLength) / PAGE));
      this.u8 = new Uint8Array(this.memory.buffer);
    }
    const u8 = this.u8;
    // Chunks in ascending order: the q bytes of rows [a, b) go to buf[a*cols, b*cols), which holds
    // only bf16 bytes of rows below b, all copied in already.
    for (let a = 0; a < rows; a += cr) {
      const b = Math.min(rows, a + cr);
      u8.set(buf.subarray(2 * a * cols, 2 * b * cols), 0);
      this.run(0, out, sc + 4 * a * nb, (b - a) * nb, nb);
      buf.set(u8.subarray(out, out + (b - a) * cols), a * cols);
    }
    buf.set(u8.subarray(sc, need), rows * cols);
  }
}

let requantizer: Q7Requantizer | null = null;

/**
 * Requantize `rows` bf16 rows of `cols` columns (a multiple of 32) at buf[0 ..) to the 'q7' layout,
 * in place (see the top), in WebAssembly: the bytes of requantizeQ7Ref. Row r's bytes land at
 * [r*cols, (r+1)*cols) and the rows * cols / 32 f32 scales after all rows. Any buffer (any byte
 * offset, shared or not); synchronous, on the calling thread, in chunks of rows through the
 * process's requantizer (created on first use).
 */
export function requantizeQ7InPlace(buf: Uint8Array, rows: number, cols: number): void {
  if (cols % 32) throw new RangeError(`q7: columns ${cols} not a multiple of 32`);
  if (buf.length < 2 * rows * cols) throw new RangeError(`q7: ${buf.length} bytes do not hold ${rows} x ${cols} bf16 values`);
  requantizer ??= new Q7Requantizer();
  requantizer.requantize(buf, rows, cols);
}
