// The whole per-token KDA block after the projections, in one WebAssembly kernel (issue 13): the
// element-wise work that ran in JavaScript on the calling thread while the workers idled now runs
// split across the threads by heads, in the same dispatch as the delta rule. Reference:
// kdaBlockRef in src/graph/reference.ts (same operations, same order, all in f64 where it is in
// double there; docs/NUMERICS.md).
//
// kda_block(pb, h0, h1): heads [h0, h1) of T tokens. For head h and token t (channels
// c = h*d + i, i < d; rows of the [T, P] inputs at t*P):
//   short conv + SiLU of q, k, v: u = 0 + Σ_m taps[c*W+m]·tail[m][c] + taps[c*W+W-1]·x[c] (f64,
//     m ascending); out = f32(u · σ(u)); the tail shifts by one (oldest dropped, x appended)
//   L2 per head of q (times qScale) and k: x = f32(f32(x · 1/sqrt(Σx² + 1e-6)) · scale)
//   decay (mode 1, K3's bounded gate): α_c = f32(exp(λ · σ(A_h · (z_c + dtBias_c))));
//     mode 0: α read from the input (computed by the caller)
//   β_h = f32(σ(b_h))
//   kda_step for head h (fused.ts), then the gated RMSNorm:
//     y_c = f32(f32(o_c · 1/sqrt(Σo²/d + eps)) · oNorm_i · σ(γ_c))
// σ and exp are sigmoidRef / expRef of act.ts (our own exp, not Math.exp). Heads are independent
// (each owns its channels, its tail columns, S_h and β_h), so any split gives the same bytes.
//
// Parameter block at pb, i32 words: 0 S, 1 conv tails [3][W-1][P], 2 work (q, k, v, α, o [P
// each], β [H]), 3 qr, 4 kr, 5 vr, 6 z (mode 1) or α [T, P] (mode 0), 7 b [T, H], 8 γ [T, P],
// 9 y [T, P], 10 qConv, 11 kConv, 12 vConv [P, W], 13 dtBias [P], 14 A (f64 [H]), 15 oNorm [d],
// 16 d, 17 H, 18 W, 19 T, 20 mode; f64 at byte 96 eps, 104 λ, 112 qScale.

import { type Code, type Fn, I32, F32, F64, get, set, block, loop, br, br_if, if_, call, i32, f32, f64 } from './emit.js';
import { expS, sigmoidS } from './act.js';

type FnMaker = (name: string, params: Record<string, typeof I32>) => Fn;

/** Bytes of the parameter block. */
export const KDA_BLOCK_BYTES = 128;
export const KDA_BLOCK_WORDS = ['S', 'conv', 'work', 'qr', 'kr', 'vr', 'z', 'b', 'gamma', 'y', 'qConv', 'kConv', 'vConv', 'dtBias', 'A', 'oNorm', 'd', 'H', 'W', 'T', 'mode'] as const;
export const KDA_BLOCK_F64 = { eps: 96, lambda: 104, qScale: 112 } as const;

/** The kernel's locals and the helpers its pieces share (addKdaBlock). */
function kdaLocals(f: Fn) {
  const L = (n: string): number => f.local(n, I32);
  const W: Record<string, number> = {};
  for (const w of KDA_BLOCK_WORDS) W[w] = L(`w_${w}`);
  const g = (n: (typeof KDA_BLOCK_WORDS)[number]): Code => get(W[n]!);
  const h = L('h'), t = L('t'), i = L('i'), m = L('m');
  const P4 = L('P4'), d4 = L('d4'), hb = L('hb'), tb = L('tb'), cb = L('cb'), tl4 = L('tl4'), tail = L('tail');
  const q = L('q'), k = L('k'), v = L('v'), al = L('al'), o = L('o'), be = L('be'), src = L('src'), taps = L('taps'), out = L('out');
  const Ah = f.local('Ah', F64), u = f.local('u', F64), ss = f.local('ss', F64), inv = f.local('inv', F64), xv = f.local('xv', F32);
  const eps = f.local('eps', F64), lam = f.local('lam', F64), qs = f.local('qs', F64);
  const inc = (l: number, n: Code): Code => set(l, i32.add(get(l), n));
  /** for (l = 0; l < n; l++) body */
  const loopTo = (l: number, n: Code, ...body: Code[]): Code[] => [set(l, i32.const(0)), block(loop(br_if(1, i32.ge_s(get(l), n)), ...body, inc(l, i32.const(1)), br(0)))];
  const F = (a: Code): Code => f64.promote_f32(f32.load(a));
  /** byte address of element m*P + c of a tail (c at byte cb within a [P] row) */
  const tailAt = (mm: Code): Code => i32.add(i32.add(get(tail), i32.mul(mm, get(P4))), get(cb));
  return { f, W, g, h, t, i, m, P4, d4, hb, tb, cb, tl4, tail, q, k, v, al, o, be, src, taps, out, Ah, u, ss, inv, xv, eps, lam, qs, inc, loopTo, F, tailAt };
}
type K = ReturnType<typeof kdaLocals>;

/** Short conv + SiLU of channel block x (taps tp) into dst, the tail at conv + tailOff shifted by one. */
function conv(c: K, x: number, tp: number, tailOff: Code, dst: number): Code[] {
  const { f, g, i, m, u, xv, cb, hb, src, tail, taps, tb, F, tailAt, loopTo } = c;
  return [
    set(src, i32.add(get(x), get(tb))),
    set(tail, i32.add(g('conv'), tailOff)),
    ...loopTo(i, g('d'),
      set(cb, i32.add(get(hb), i32.shl(get(i), i32.const(2)))),
      // taps of channel c at (c*W)*4
      set(taps, i32.add(get(tp), i32.mul(i32.shr_u(get(cb), i32.const(2)), i32.shl(g('W'), i32.const(2))))),
      set(u, f64.const(0)),
      ...loopTo(m, i32.sub(g('W'), i32.const(1)),
        set(u, f64.add(get(u), f64.mul(F(i32.add(get(taps), i32.shl(get(m), i32.const(2)))), F(tailAt(get(m))))))),
      set(xv, f32.load(i32.add(get(src), get(cb)))),
      set(u, f64.add(get(u), f64.mul(F(i32.add(get(taps), i32.shl(i32.sub(g('W'), i32.const(1)), i32.const(2)))), f64.promote_f32(get(xv))))),
      f32.store(i32.add(get(dst), get(cb)), f32.demote_f64(f64.mul(get(u), sigmoidS(f, get(u), 'cs')))),
      // shift the tail of this channel: drop the oldest, append x
      ...loopTo(m, i32.sub(g('W'), i32.const(2)), f32.store(tailAt(get(m)), f32.load(tailAt(i32.add(get(m), i32.const(1)))))),
      if_(i32.gt_s(g('W'), i32.const(1)), [f32.store(tailAt(i32.sub(g('W'), i32.const(2))), get(xv))]),
    ),
  ];
}

/** ss = Σ x² over head h of the [P] vector at base (f64, i ascending). */
function sumSq(c: K, base: number): Code[] {
  const { g, i, u, ss, hb, F, loopTo } = c;
  return [
    set(ss, f64.const(0)),
    ...loopTo(i, g('d'), set(u, F(i32.add(i32.add(get(base), get(hb)), i32.shl(get(i), i32.const(2))))), set(ss, f64.add(get(ss), f64.mul(get(u), get(u))))),
  ];
}

/** L2 norm of head h of the [P] vector at base, times scale. */
function l2(c: K, base: number, scale: Code): Code[] {
  const { g, i, ss, inv, cb, hb, F, loopTo } = c;
  return [
    ...sumSq(c, base),
    set(inv, f64.div(f64.const(1), f64.sqrt(f64.add(get(ss), f64.const(1e-6))))),
    ...loopTo(i, g('d'),
      set(cb, i32.add(i32.add(get(base), get(hb)), i32.shl(get(i), i32.const(2)))),
      f32.store(get(cb), f32.demote_f64(f64.mul(f64.promote_f32(f32.demote_f64(f64.mul(F(get(cb)), get(inv)))), scale)))),
  ];
}

/** The decay α of head h (mode 1: from z and dtBias; mode 0: read), then β_h. */
function decayBeta(c: K): Code[] {
  const { f, g, i, h, t, cb, hb, tb, out, al, be, Ah, lam, F, loopTo } = c;
  return [
    ...loopTo(i, g('d'),
      set(cb, i32.add(get(hb), i32.shl(get(i), i32.const(2)))),
      set(out, i32.add(get(al), get(cb))),
      if_(g('mode'), [
        f32.store(get(out), f32.demote_f64(expS(f, f64.mul(get(lam), sigmoidS(f, f64.mul(get(Ah), f64.add(F(i32.add(i32.add(g('z'), get(tb)), get(cb))), F(i32.add(g('dtBias'), get(cb))))), 'ds')), 'de'))),
      ], [f32.store(get(out), f32.load(i32.add(i32.add(g('z'), get(tb)), get(cb))))]),
    ),
    f32.store(i32.add(get(be), i32.shl(get(h), i32.const(2))),
      f32.demote_f64(sigmoidS(f, F(i32.add(g('b'), i32.shl(i32.add(i32.mul(get(t), g('H')), get(h)), i32.const(2)))), 'bs'))),
  ];
}

/** The gated RMSNorm of head h's output into y. */
function gatedNorm(c: K): Code[] {
  const { f, g, i, o, ss, inv, eps, cb, hb, tb, F, loopTo } = c;
  return [
    ...sumSq(c, o),
    set(inv, f64.div(f64.const(1), f64.sqrt(f64.add(f64.div(get(ss), f64.convert_i32_s(g('d'))), get(eps))))),
    ...loopTo(i, g('d'),
      set(cb, i32.add(get(hb), i32.shl(get(i), i32.const(2)))),
      f32.store(i32.add(i32.add(g('y'), get(tb)), get(cb)), f32.demote_f64(f64.mul(
        f64.mul(f64.promote_f32(f32.demote_f64(f64.mul(F(i32.add(get(o), get(cb))), get(inv)))), F(i32.add(g('oNorm'), i32.shl(get(i), i32.const(2))))),
        sigmoidS(f, F(i32.add(i32.add(g('gamma'), get(tb)), get(cb))), 'gs'))))),
  ];
}

export function addKdaBlock(fnx: FnMaker, kdaStep: number): void {
  const f = fnx('kda_block', { pb: I32, h0: I32, h1: I32 });
  const G = (n: string): Code => get(f.p(n));
  const c = kdaLocals(f);
  const { W, g, h, t, d4, P4, tl4, hb, tb, q, k, v, al, o, be, Ah, eps, lam, qs, inc, loopTo } = c;
  f.body = [
    ...KDA_BLOCK_WORDS.map((w, j) => set(W[w]!, i32.load(G('pb'), 4 * j))),
    set(eps, f64.load(G('pb'), 96)), set(lam, f64.load(G('pb'), 104)), set(qs, f64.load(G('pb'), 112)),
    set(d4, i32.shl(g('d'), i32.const(2))),
    set(P4, i32.mul(g('H'), get(d4))),
    set(tl4, i32.mul(i32.sub(g('W'), i32.const(1)), get(P4))),
    set(q, g('work')), set(k, i32.add(get(q), get(P4))), set(v, i32.add(get(k), get(P4))),
    set(al, i32.add(get(v), get(P4))), set(o, i32.add(get(al), get(P4))), set(be, i32.add(get(o), get(P4))),
    set(h, G('h0')),
    block(loop(br_if(1, i32.ge_u(get(h), G('h1'))),
      set(hb, i32.mul(get(h), get(d4))),
      set(Ah, f64.load(i32.add(g('A'), i32.shl(get(h), i32.const(3))))),
      ...loopTo(t, g('T'),
        set(tb, i32.mul(get(t), get(P4))),
        ...conv(c, W.qr!, W.qConv!, i32.const(0), q),
        ...conv(c, W.kr!, W.kConv!, get(tl4), k),
        ...conv(c, W.vr!, W.vConv!, i32.shl(get(tl4), i32.const(1)), v),
        ...l2(c, q, get(qs)),
        ...l2(c, k, f64.const(1)),
        ...decayBeta(c),
        call(kdaStep, g('S'), get(q), get(k), get(v), get(al), get(be), get(o), g('d'), get(h), i32.add(get(h), i32.const(1))),
        ...gatedNorm(c),
      ),
      inc(h, i32.const(1)), br(0))),
  ];
}

/** Arguments of Kernels.kdaBlock (the numbers: this file's kernel). */
export interface KdaBlockArgs {
  S: Float32Array;
  conv: Float32Array;
  work: Float32Array;
  qr: Float32Array;
  kr: Float32Array;
  vr: Float32Array;
  zOrAlpha: Float32Array;
  b: Float32Array;
  gamma: Float32Array;
  y: Float32Array;
  qConv: Float32Array;
  kConv: Float32Array;
  vConv: Float32Array;
  dtBias: Float32Array;
  /** exp(A_log) per head, in double. */
  A: Float64Array;
  oNorm: Float32Array;
  H: number;
  d: number;
  W: number;
  T: number;
  mode: 'bounded' | 'given';
  eps: number;
  lambda: number;
  qScale: number;
}
