// The one multiply-add of the canonical dot (docs/NUMERICS.md, src/kernels/ref.ts fma32):
// acc = fma(w, x, acc), w*x + acc rounded once to f32.
//
// Where `f32x4.relaxed_madd` is a fused multiply-add (loader.ts fusedMaddAvailable: x86 with FMA3,
// every Arm64), it is that one instruction. Everywhere else (relaxed SIMD off, or a machine whose
// relaxed_madd multiplies and adds separately) a function of the module computes the same bits in
// f64 lanes, as ref.ts fma32 does in JavaScript:
//   p = w*x is exact in f64 (two 24-bit significands); s = p + acc rounded to f64, and its error
//   e = (p + acc) - s by TwoSum; if e != 0 and s is even, s moves one f64 ulp towards p + acc
//   (s is then p + acc rounded to odd); rounding that s to f32 is p + acc rounded once
//   (rounding to odd with 53 >= 24 + 2 bits, then to nearest, is rounding to nearest).
// The emulation is ~20x slower per multiply-add; it exists so that the bytes do not depend on the
// SIMD path, and the tests compare both.

import { type Code, Fn, V128, get, set, call, v128, f32x4, f64x2, i64x2, shuffle32, i32 } from './emit.js';

/** The canonical multiply-add, emitted. */
export interface Madd {
  /** fma per f32x4 lane: a*b + c rounded once (v128 on the stack). */
  v(a: Code, b: Code, c: Code): Code;
  /** The same on f32 scalars (f32 on the stack): the dot's tail. */
  s(a: Code, b: Code, c: Code): Code;
}

type FnMaker = (name: string, params: Record<string, typeof V128>, result: typeof V128, exported: boolean) => Fn;

/** The multiply-add of this module: relaxed_madd where it is fused, otherwise the emulation
 *  (a function fma_emu added to the module through fnx). */
export function addMadd(fnx: FnMaker, fused: boolean): Madd {
  const v = fused ? f32x4.relaxed_madd : emulated(fnx);
  return { v, s: (a, b, c) => f32x4.extract_lane(v(f32x4.splat(a), f32x4.splat(b), f32x4.splat(c)), 0) };
}

/** fma_emu, added to the module: the f64 emulation the header describes; returns its call. */
function emulated(fnx: FnMaker): (a: Code, b: Code, c: Code) => Code {
  const f = fnx('fma_emu', { a: V128, b: V128, c: V128 }, V128, false);
  const one = v128.i32x4(1, 0, 1, 0), zero = v128.i32x4(0, 0, 0, 0);
  const P = f.local('p', V128), S = f.local('s', V128), B = f.local('bb', V128), E = f.local('e', V128);
  const C = f.local('cw', V128), lo = f.local('lo', V128);
  /** Lanes 2h, 2h+1 of the three operands, as f64x2 a*b + c rounded once to f32 (in lanes 0-1). */
  const half = (h: number): Code[] => {
    const wide = (n: string): Code => f64x2.promote_low_f32x4(h === 0 ? get(f.p(n)) : shuffle32(get(f.p(n)), get(f.p(n)), [2, 3, 2, 3]));
    return [
      set(P, f64x2.mul(wide('a'), wide('b'))),
      set(C, wide('c')),
      set(S, f64x2.add(get(P), get(C))),
      // TwoSum: e = (p - (s - bb)) + (c - bb), bb = s - p
      set(B, f64x2.sub(get(S), get(P))),
      set(E, f64x2.add(f64x2.sub(get(P), f64x2.sub(get(S), get(B))), f64x2.sub(get(C), get(B)))),
      // round to odd: where e != 0 (not NaN) and s is even, s += +1 ulp if s, e have one sign, else -1
      set(S, i64x2.add(get(S), v128.and(
        v128.or(i64x2.shr_s(v128.xor(get(S), get(E)), i32.const(63)), one),
        v128.and(v128.or(f64x2.lt(get(E), zero), f64x2.gt(get(E), zero)), i64x2.eq(v128.and(get(S), one), zero))))),
    ];
  };
  f.body = [
    ...half(0),
    set(lo, f32x4.demote_f64x2_zero(get(S))),
    ...half(1),
    shuffle32(get(lo), f32x4.demote_f64x2_zero(get(S)), [0, 1, 4, 5]),
  ];
  return (a, b, c) => call(f.index, a, b, c);
}
