// Row decoders of the stored formats (f16, fp8, int4, mxfp4) to exact values, and the pieces of
// them that the fused single-token products (mm1.ts) decode inline: mxfp4 groups, fp8 bytes.

import {
  type Code, Fn, I32, F32, V128, get, set, call, block, loop, br, br_if, ifv, i32, f32, v128,
  i8x16, i16x8, i32x4, f32x4,
} from './emit.js';
import {
  MX_PLANES, FP8_TAB, type Fmt, NIB_BYTES, splat32, splatF, DEC_PARAMS, addp, bf16At, type Gen,
  reg,
} from './gen.js';

// ---- scalar helpers ----
export function addScalarHelpers(gen: Gen): Fn {
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
export type Decoders = Partial<Record<Fmt | 'mx2bf' | 'mx2f32', Fn>>;

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
// s | 0x7f, a bf16 NaN with the low byte 0xf0. It replaced an integer/convert formula per f32 lane
// (about twice the instructions; docs/TUNING.md "Kernel forms: the fp8 decoder").
// test/kernels/kernels.test.ts checks all 256 codes.
const FP8_HB = Array.from({ length: 16 }, (_, i) => ((i & 8) << 4) | (60 + (i & 7)));
/** e = 0: XOR turning the normal formula's bytes into those of m * 2^-9 (m = index), 0 past 7. */
const FP8_SUB_LB = [0x00, 0x10, 0xa0, 0xf0, 0x40, 0x70, 0x20, 0x10, 0, 0, 0, 0, 0, 0, 0, 0];
const FP8_SUB_HB = [0x3c, 0x07, 0x07, 0x07, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
const splat8 = (n: number): Uint8Array => new Uint8Array(16).fill(n);

/** 16 e4m3 bytes (v) -> two vectors of 8 bf16 (lo: bytes 0-7, hi: 8-15), natural order. */
export function fp8ToBf16(gen: Gen, f: Fn, v: number, lo: number, hi: number): Code[] {
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

/** Byte indices that put bf16 values 4h..4h+3 of a vector in the high halves of four f32 lanes:
 *  0x80 (a set top bit) gives a zero byte, in i8x16.swizzle and, as the relaxed SIMD spec
 *  guarantees, in relaxed_swizzle too. */
const WIDEN_IDX = [0, 1].map((h) => Uint8Array.from({ length: 16 }, (_, j) => ((j & 3) < 2 ? 0x80 : 8 * h + 2 * (j >> 2) + (j & 1))));
/** bf16 values 4h..4h+3 of b as f32 (bf16 << 16): one byte shuffle instead of a widening and a
 *  shift (relaxed_swizzle is one x86 pshufb; the plain swizzle adds an index fix-up V8 cannot
 *  drop, so without relaxed SIMD this is no faster, only the same bytes). */
export const widenBf16 = (gen: Gen, f: Fn, b: Code, h: 0 | 1): Code => gen.swz(b, gen.Kg(f, WIDEN_IDX[h]!));

/** Stores 8 bf16 values (b) at at + off as f32 times sc (f32x4): one rounding each, the fp8 decode's. */
export const storeBf16Scaled = (gen: Gen, f: Fn, b: number, sc: number, at: Code, off: number): Code[] => [
  v128.store(at, f32x4.mul(widenBf16(gen, f, get(b), 0), get(sc)), off),
  v128.store(at, f32x4.mul(widenBf16(gen, f, get(b), 1), get(sc)), off + 16),
];

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
        ...[h, t].flatMap((b, k) => storeBf16Scaled(gen, f, b, sc, get(o), 32 * k)),
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
// mxfp4 -> bf16 row in the 'mx' layout (gen.ts PERMS: per 16 columns the even columns' 8 values,
// then the odd columns'), which the single-token products widen as they do bf16 rows. One 16-byte
// load = one 32-column group with one scale; the per-scale table (MX_PLANES) holds the 16 exact
// values E2M1*2^(s-127) as bf16, low-byte plane then high-byte plane, so two byte lookups + a byte
// interleave give 8 bf16 values (mxGroupApart, storeBf16Apart).
// Why a separate pass: the T = 1 product is bound by the byte shuffles and shifts, which share two
// SIMD pipes; decoding in registers inside the dot needs the same shuffles (and V8 then spills),
// and scaling each 32-column partial only adds multiplies (docs/TUNING.md "Kernel forms: mxfp4
// decoded in a pass of its own").
function addDecMx2bf(gen: Gen): Fn {
  return addMxDecoder(gen, 'dec_mx2bf', true, 2, (f, p, sp, o, k) =>
    mxGroupApart(gen, f, get(p), get(sp), k, (lbE, hbE, lbO, hbO) => storeBf16Apart(lbE, hbE, lbO, hbO, (j) => [get(o), 64 * k + 16 * j])));
}

/** mxfp4 -> f32 row in natural column order, for the tiled path: dec_mx2bf's lookups and byte
 *  interleave, each bf16 vector then widened to two f32 vectors in registers (what the tiled path's
 *  widen does from memory), so the row is written once and never reread as bf16. */
function addDecMx2f32(gen: Gen): Fn {
  return addMxDecoder(gen, 'dec_mx2f32', false, 4, (f, p, sp, o, k) => mxGroup(gen, f, get(p), get(sp), k, (lb, hb, h16) => {
    const bf = f.local('bf', V128), off = 128 * k + 64 * h16;
    return [ilLo, ilHi].flatMap((il, h) => [
      set(bf, i8x16.shuffle(get(lb), get(hb), il)),
      v128.store(get(o), widenBf16(gen, f, get(bf), 0), off + 32 * h),
      v128.store(get(o), widenBf16(gen, f, get(bf), 1), off + 32 * h + 16),
    ]);
  }));
}

/** 32-column groups an mxfp4 decoder's loop takes a pass (then the rest one at a time): the
 *  loop's own instructions (V8's moves of the pointers, the interrupt check, the branch) are about
 *  a sixth of a one-group pass. docs/TUNING.md "MX_DEC_UNROLL" (`tune.js mx-dec-unroll`). */
const MX_DEC_UNROLL = 4;

/**
 * The start of a 32-column mxfp4 group: the 16 bytes at pw + 16k split into their low nibbles (the
 * even columns, byte j: column 2j) and high nibbles (the odd ones), and the planes (MX_PLANES) of
 * the scale byte at ps + k. Its locals (prefixed mx_) and code.
 */
function mxNibbles(gen: Gen, f: Fn, pw: Code, ps: Code, k: number): { L: number; H: number; lo: number; hi: number; code: Code[] } {
  const V = (n: string): number => f.local(`mx_${n}`, V128);
  const pl = f.local('mx_pl', I32), L = V('L'), H = V('H'), B = V('B'), lo = V('lo'), hi = V('hi');
  const nib = gen.Kg(f, NIB_BYTES);
  return {
    L, H, lo, hi, code: [
      set(pl, addp(i32.const(MX_PLANES), i32.shl(i32.load8_u(ps, k), i32.const(5)))),
      set(L, v128.load(get(pl))),
      set(H, v128.load(get(pl), 16)),
      set(B, v128.load(pw, 16 * k)),
      set(lo, v128.and(get(B), nib)),
      set(hi, v128.and(i16x8.shr_u(get(B), i32.const(4)), nib)),
    ],
  };
}

/**
 * One 32-column mxfp4 group in registers (mxNibbles), the planes looked up with the nibbles in
 * column order; emit(lb, hb, h) takes the low and high bytes of the bf16 values of columns 16h ..
 * 16h + 15.
 */
function mxGroup(gen: Gen, f: Fn, pw: Code, ps: Code, k: number, emit: (lb: number, hb: number, h: number) => Code[]): Code[] {
  const { L, H, lo, hi, code } = mxNibbles(gen, f, pw, ps, k);
  const idx = [f.local('mx_i0', V128), f.local('mx_i1', V128)], lb = f.local('mx_lb', V128), hb = f.local('mx_hb', V128);
  return [
    ...code,
    // nibble indices in column order: cols 0..15, then 16..31
    set(idx[0]!, i8x16.shuffle(get(lo), get(hi), ilLo)),
    set(idx[1]!, i8x16.shuffle(get(lo), get(hi), ilHi)),
    ...[0, 1].flatMap((h) => [set(lb, gen.swz(get(L), get(idx[h]!))), set(hb, gen.swz(get(H), get(idx[h]!))), ...emit(lb, hb, h)]),
  ];
}

/**
 * One 32-column mxfp4 group in registers (mxNibbles), its nibble planes apart: the even columns'
 * (low nibbles) and the odd columns' (high nibbles) low and high bf16 bytes (emit(lbE, hbE, lbO,
 * hbO)), looked up without first putting the nibbles in column order (two byte shuffles fewer
 * than mxGroup).
 */
export function mxGroupApart(gen: Gen, f: Fn, pw: Code, ps: Code, k: number, emit: (lbE: number, hbE: number, lbO: number, hbO: number) => Code[]): Code[] {
  const { L, H, lo, hi, code } = mxNibbles(gen, f, pw, ps, k);
  const [lbE, hbE, lbO, hbO] = ['lbE', 'hbE', 'lbO', 'hbO'].map((n) => f.local(`mx_${n}`, V128)) as [number, number, number, number];
  return [
    ...code,
    set(lbE, gen.swz(get(L), get(lo))), set(hbE, gen.swz(get(H), get(lo))),
    set(lbO, gen.swz(get(L), get(hi))), set(hbO, gen.swz(get(H), get(hi))),
    ...emit(lbE, hbE, lbO, hbO),
  ];
}

/** Stores a group from mxGroupApart's bytes as 'mx' layout bf16: per 16 columns, the even
 *  columns' 8 values, then the odd columns' (at(j) for j = 0..3: columns 0-14 even, 1-15 odd,
 *  16-30 even, 17-31 odd). */
export const storeBf16Apart = (lbE: number, hbE: number, lbO: number, hbO: number, at: (j: number) => [Code, number]): Code[] =>
  [[lbE, hbE], [lbO, hbO], [lbE, hbE], [lbO, hbO]].map(([l, h], j) =>
    v128.store(at(j)[0], i8x16.shuffle(get(l!), get(h!), j < 2 ? ilLo : ilHi), at(j)[1]));

/**
 * The frame of the mxfp4 decoders: a row's 32-column groups (16 bytes, one scale byte each) in a
 * loop; group(f, p, sp, o, k) decodes group k after p (its scale byte at sp + k) to o + k * 32
 * columns. Output columns take colBytes each (2: bf16, 4: f32).
 */
function addMxDecoder(gen: Gen, name: string, exported: boolean, colBytes: 2 | 4,
  groupAt: (f: Fn, p: number, sp: number, o: number, k: number) => Code[]): Fn {
  const f = gen.fnx(name, DEC_PARAMS, I32, exported);
  const p = f.local('p', I32), pend = f.local('pend', I32), sp = f.local('sp', I32), o = f.local('o', I32);
  const half = i32.shr_u(get(f.p('cols')), i32.const(1));
  const group = (k: number): Code[] => groupAt(f, p, sp, o, k);
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

export function addDecoders(gen: Gen, f16s: Fn): Decoders {
  const dec: Decoders = {};
  dec.f16 = addDecF16(gen, f16s);
  dec.fp8 = addDecFp8(gen, f16s);
  dec.int4 = addDecInt4(gen, f16s);
  dec.mx2bf = addDecMx2bf(gen);
  dec.mx2f32 = addDecMx2f32(gen);
  return dec;
}
