// Gated activations (SwiGLU / SiTU) in WebAssembly SIMD, and their TypeScript reference.
//
// WebAssembly has no exp or tanh, so both sides compute them from the same elementary double
// operations, in the same order (IEEE add, sub, mul, div are exactly rounded, so the bytes match;
// no FMA on either side). Everything is in double (f64x2 lanes); each output is rounded once to
// f32, as before.
//
// em1(x) = expm1(x), for x in [-708, 708] (callers clamp):
//   t = x*LOG2E + SHIFT;  k = t - SHIFT           (k = round-half-even(x / ln2), SHIFT = 1.5*2^52)
//   r = (x - k*LN2HI) - k*LN2LO                   (|r| <= ln2/2; k*LN2HI is exact)
//   p = r + (r*r)*(c2 + r*(c3 + ... + r*c10))     (Taylor degree 10, c_i = 1/i!; |err| < 1e-12 rel)
//   s = 2^k                                       (Wasm: exponent bits from t's low mantissa bits)
//   em1 = s*p + (s - 1)
// tanh(y):    z = 2|y|, z = 40 < z ? 40 : z;  e = em1(z);  t = e / (e + 2);  y < 0 ? -t : t
// sigmoid(g): x = -g clamped to [-708, 708] (pmin/pmax order);  1 / (2 + em1(x))
// SiLU gate:  (g / (2 + em1(x))) * u
// SiTU:       ((β * tanh(g/β)) * sigmoid(g)) * u            (βl null)
//             ((β * tanh(g/β)) * sigmoid(g)) * (βl * tanh(u/βl))
// |tanh| <= 1 and sigmoid <= 1 exactly (e/(e+2) and 1/(2+em1) with em1 >= -1), so the SiTU
// saturation bounds hold exactly. The only bytes that may differ are NaN payloads (NaN in, NaN out).
//
// act_silu / act_situ / act_situ_bl (g, u, o, n, pb): n a multiple of 4, f32 arrays at byte
// offsets g, u, o; β at pb and βl at pb+8 (f64). Four elements per step (two f64x2 halves).

import { type Code, type Fn, I32, F64, V128, get, set, select, block, loop, br, br_if, i32, i64, f64, v128, f32x4, f64x2, i64x2, shuffle32 } from './emit.js';

type FnMaker = (name: string, params: Record<string, typeof I32>, result?: typeof I32 | null, exported?: boolean) => Fn;
type ConstLocal = (f: Fn, b: Uint8Array) => number;

const SHIFT = 6755399441055744; // 1.5 * 2^52
const LOG2E = 1.4426950408889634;
const LN2HI = 6.93147180369123816490e-1; // 0x3fe62e42fee00000: k*LN2HI exact for |k| < 2^21
const LN2LO = 1.90821492927058770002e-10;
/** c2 .. c10 = 1/i!. */
const C = [2, 3, 4, 5, 6, 7, 8, 9, 10].map((i) => {
  let f = 1;
  for (let j = 2; j <= i; j++) f *= j;
  return 1 / f;
});
const [C2, C3, C4, C5, C6, C7, C8, C9, C10] = C as [number, number, number, number, number, number, number, number, number];
/** Clamp of the exp argument: 2^k stays a normal double. */
export const EXP_CLAMP = 708;
/** tanh(y) = 1 in double from 2|y| >= 40 on. */
const TANH_CLAMP = 40;

/** POW2[k + 1022] = 2^k for k in [-1022, 1023], from the exponent bits. */
const POW2 = (() => {
  const a = new Float64Array(2047);
  const dv = new DataView(a.buffer);
  for (let k = -1022; k <= 1023; k++) dv.setUint32(8 * (k + 1022) + 4, (k + 1023) << 20, true);
  return a;
})();

/** 2^k of the last reduceExp. */
let redS = 0;

/** s·p of the reduction of x (see the top of the file), s = 2^k left in redS: expm1 = s·p + (s - 1),
 *  exp = s·p + s. (A module variable rather than a pair: the references call it per element.) */
function reduceExp(x: number): number {
  const t = x * LOG2E + SHIFT;
  const k = t - SHIFT;
  const r = x - k * LN2HI - k * LN2LO;
  const q = C2 + r * (C3 + r * (C4 + r * (C5 + r * (C6 + r * (C7 + r * (C8 + r * (C9 + r * C10)))))));
  const p = r + r * r * q;
  redS = POW2[k + 1022]!;
  return redS * p;
}

/** expm1(x) for x in [-708, 708] (see the top of the file). */
export function em1(x: number): number {
  const sp = reduceExp(x);
  return sp + (redS - 1);
}

/**
 * exp(x) from the same reduction as em1 (s*p + s instead of s*p + (s - 1)), x clamped to
 * [-708, 708] as in sigmoidRef: the exp of the fused KDA block (wasm/kda-block.ts), whose
 * WebAssembly twin is expW.
 */
export function expRef(x: number): number {
  const sp = reduceExp(clampExp(x));
  return sp + redS;
}

export function tanhRef(y: number): number {
  let z = Math.abs(y) * 2;
  z = TANH_CLAMP < z ? TANH_CLAMP : z;
  const e = em1(z);
  const t = e / (e + 2);
  return y < 0 ? -t : t;
}

export function sigmoidRef(g: number): number {
  let x = -g;
  x = EXP_CLAMP < x ? EXP_CLAMP : x;
  x = x < -EXP_CLAMP ? -EXP_CLAMP : x;
  return 1 / (2 + em1(x));
}

export type ActKind = 'silu' | 'situ';

/** out[i] = f32(act(gate[i], up[i])) for i < gate.length: the reference of the act_* kernels. */
export function gatedActRef(gate: Float32Array, up: Float32Array, out: Float32Array, kind: ActKind, b: number, bl: number | null): Float32Array {
  const n = gate.length;
  if (kind === 'silu') {
    for (let i = 0; i < n; i++) {
      const g = gate[i]!;
      out[i] = (g / (2 + em1(clampExp(-g)))) * up[i]!;
    }
  } else if (bl === null) {
    for (let i = 0; i < n; i++) {
      const g = gate[i]!;
      out[i] = b * tanhRef(g / b) * sigmoidRef(g) * up[i]!;
    }
  } else {
    for (let i = 0; i < n; i++) {
      const g = gate[i]!;
      out[i] = b * tanhRef(g / b) * sigmoidRef(g) * (bl * tanhRef(up[i]! / bl));
    }
  }
  return out;
}

function clampExp(x: number): number {
  x = EXP_CLAMP < x ? EXP_CLAMP : x;
  return x < -EXP_CLAMP ? -EXP_CLAMP : x;
}

// ---- WebAssembly ---------------------------------------------------------------------------

const f64s = (x: number): Uint8Array => new Uint8Array(new Float64Array([x, x]).buffer);
const i64s = (x: bigint): Uint8Array => new Uint8Array(new BigInt64Array([x, x]).buffer);
/** bits(SHIFT) - 1023: (bits(t) - this) << 52 = bits(2^k). */
const SHIFT_BIAS = 0x4338000000000000n - 1023n;

export const ACT_FNS = { silu: 'act_silu', situ: 'act_situ', situ_bl: 'act_situ_bl' } as const;

export function addAct(fnx: FnMaker, K: ConstLocal): void {
  for (const mode of ['silu', 'situ', 'situ_bl'] as const) {
    const f = fnx(ACT_FNS[mode], { g: I32, u: I32, o: I32, n: I32, pb: I32 });
    const P = (n: string): Code => get(f.p(n));
    const c = (x: number): Code => get(K(f, f64s(x)));
    const p = f.local('p', I32), end = f.local('end', I32), go = f.local('go', I32), uo = f.local('uo', I32);
    const gv = f.local('gv', V128), uv = f.local('uv', V128), lo = f.local('lo', V128);
    const beta = f.local('beta', V128), betal = f.local('betal', V128);
    const zero = get(K(f, f64s(0)));
    const V = (tag: string): number => f.local(tag, V128);

    /** em1 of the f64x2 in local x; leaves the result on the stack (uses locals with tag). */
    const em1W = (x: number, tag: string): Code[] => {
      const t = V(`${tag}t`), k = V(`${tag}k`), r = V(`${tag}r`), s = V(`${tag}s`);
      let q: Code = c(C10);
      for (const ci of [C9, C8, C7, C6, C5, C4, C3, C2]) q = f64x2.add(c(ci), f64x2.mul(get(r), q));
      return [
        set(t, f64x2.add(f64x2.mul(get(x), c(LOG2E)), c(SHIFT))),
        set(k, f64x2.sub(get(t), c(SHIFT))),
        set(r, f64x2.sub(f64x2.sub(get(x), f64x2.mul(get(k), c(LN2HI))), f64x2.mul(get(k), c(LN2LO)))),
        set(s, i64x2.shl(i64x2.sub(get(t), get(K(f, i64s(SHIFT_BIAS)))), i32.const(52))),
        // s*p + (s - 1), p = r + (r*r)*q
        f64x2.add(f64x2.mul(get(s), f64x2.add(get(r), f64x2.mul(f64x2.mul(get(r), get(r)), q))), f64x2.sub(get(s), c(1))),
      ];
    };
    /** tanh of the f64x2 in local y, left on the stack. */
    const tanhW = (y: number, tag: string): Code[] => {
      const z = V(`${tag}z`), e = V(`${tag}e`), t = V(`${tag}tt`);
      return [
        set(z, f64x2.pmin(f64x2.mul(f64x2.abs(get(y)), c(2)), c(TANH_CLAMP))),
        set(e, em1W(z, tag)),
        set(t, f64x2.div(get(e), f64x2.add(get(e), c(2)))),
        v128.bitselect(f64x2.neg(get(t)), get(t), f64x2.lt(get(y), zero)),
      ];
    };
    /** 2 + em1(clamp(-g)) for the f64x2 in local g, left on the stack. */
    const denW = (g: number, tag: string): Code[] => {
      const x = V(`${tag}x`);
      return [
        set(x, f64x2.pmax(f64x2.pmin(f64x2.neg(get(g)), c(EXP_CLAMP)), c(-EXP_CLAMP))),
        f64x2.add(c(2), em1W(x, tag)),
      ];
    };
    /** The activation of f64x2 locals g, u, left on the stack. */
    const actW = (g: number, u: number, tag: string): Code[] => {
      if (mode === 'silu') return [f64x2.mul(f64x2.div(get(g), denW(g, `${tag}d`)), get(u))];
      const y = V(`${tag}y`), a = V(`${tag}a`);
      const out: Code[] = [
        set(y, f64x2.div(get(g), get(beta))),
        // (β * tanh(g/β)) * (1 / den)
        set(a, f64x2.mul(f64x2.mul(get(beta), tanhW(y, `${tag}g`)), f64x2.div(c(1), denW(g, `${tag}d`)))),
      ];
      if (mode === 'situ') return [...out, f64x2.mul(get(a), get(u))];
      const yl = V(`${tag}yl`);
      return [...out, set(yl, f64x2.div(get(u), get(betal))), f64x2.mul(get(a), f64x2.mul(get(betal), tanhW(yl, `${tag}l`)))];
    };
    const g0 = V('g0'), u0 = V('u0'), g1 = V('g1'), u1 = V('u1');
    f.body = [
      set(beta, f64x2.splat(f64.load(P('pb')))),
      set(betal, f64x2.splat(f64.load(P('pb'), 8))),
      set(p, P('o')), set(go, P('g')), set(uo, P('u')),
      set(end, i32.add(P('o'), i32.shl(P('n'), i32.const(2)))),
      block(loop(br_if(1, i32.ge_u(get(p), get(end))),
        set(gv, v128.load(get(go))),
        set(uv, v128.load(get(uo))),
        set(g0, f64x2.promote_low_f32x4(get(gv))),
        set(u0, f64x2.promote_low_f32x4(get(uv))),
        set(g1, f64x2.promote_low_f32x4(shuffle32(get(gv), get(gv), [2, 3, 2, 3]))),
        set(u1, f64x2.promote_low_f32x4(shuffle32(get(uv), get(uv), [2, 3, 2, 3]))),
        set(lo, f32x4.demote_f64x2_zero(actW(g0, u0, 'a'))),
        v128.store(get(p), shuffle32(get(lo), f32x4.demote_f64x2_zero(actW(g1, u1, 'b')), [0, 1, 4, 5])),
        set(p, i32.add(get(p), i32.const(16))),
        set(go, i32.add(get(go), i32.const(16))),
        set(uo, i32.add(get(uo), i32.const(16))),
        br(0))),
    ];
  }
}

// ---- scalar f64 twins of em1 / expRef / sigmoidRef, for kernels that work one element at a time ----

/**
 * em1 (or expRef's s*p + s when `exp`) of the f64 in local x, clamped or not by the caller; leaves
 * the result on the stack. Same operations in the same order as em1 / expRef above.
 */
export function em1S(f: Fn, x: number, tag: string, exp = false): Code[] {
  const t = f.local(`${tag}t`, F64), k = f.local(`${tag}k`, F64), r = f.local(`${tag}r`, F64), s = f.local(`${tag}s`, F64);
  let q: Code = f64.const(C10);
  for (const ci of [C9, C8, C7, C6, C5, C4, C3, C2]) q = f64.add(f64.const(ci), f64.mul(get(r), q));
  return [
    set(t, f64.add(f64.mul(get(x), f64.const(LOG2E)), f64.const(SHIFT))),
    set(k, f64.sub(get(t), f64.const(SHIFT))),
    set(r, f64.sub(f64.sub(get(x), f64.mul(get(k), f64.const(LN2HI))), f64.mul(get(k), f64.const(LN2LO)))),
    set(s, f64.reinterpret_i64(i64.shl(i64.sub(i64.reinterpret_f64(get(t)), i64.const(SHIFT_BIAS)), i64.const(52n)))),
    f64.add(f64.mul(get(s), f64.add(get(r), f64.mul(f64.mul(get(r), get(r)), q))), exp ? get(s) : f64.sub(get(s), f64.const(1))),
  ];
}

/** Clamp local x to [-708, 708] in place, as clampExp (NaN stays NaN). */
function clampS(x: number): Code[] {
  return [
    set(x, select(f64.const(EXP_CLAMP), get(x), f64.lt(f64.const(EXP_CLAMP), get(x)))),
    set(x, select(f64.const(-EXP_CLAMP), get(x), f64.lt(get(x), f64.const(-EXP_CLAMP)))),
  ];
}

/** sigmoidRef of the f64 `g` (an expression), left on the stack. */
export function sigmoidS(f: Fn, g: Code, tag: string): Code[] {
  const x = f.local(`${tag}x`, F64);
  return [set(x, f64.neg(g)), ...clampS(x), f64.div(f64.const(1), f64.add(f64.const(2), em1S(f, x, tag)))];
}

/** expRef of the f64 `v` (an expression), left on the stack. */
export function expS(f: Fn, v: Code, tag: string): Code[] {
  const x = f.local(`${tag}x`, F64);
  return [set(x, v), ...clampS(x), ...em1S(f, x, tag, true)];
}
