// The exact single-token mxfp4, int4 and fp8 products, decode and dot interleaved (mm1.ts calls
// addMm1Chunked): MM1_DEC_ROWS rows (j + i*qd) at a time, walked in chunks of MX_CHUNK_GROUPS
// 32-column groups; per chunk each row's groups are decoded into a small scratch (mxfp4 to bf16 with
// dec_mx2bf's lookups; int4 to f32 in perm bf as dec_int4 writes, fp8 to f32 as dec_fp8, F32 or BF16
// scales), then dotted in the two lane-group passes of the whole-row path. Each accumulator sees the
// same multiply-adds in the same order as the whole-row path (the chunks only cut the columns where a
// pass resumes), so the bytes are the same. Why: the decode is bound by byte shuffles and the dot by
// the multiply-add chains; a chunk's decode and the previous chunk's dot are independent, so the CPU
// runs them side by side (a whole row's decode is more instructions than the reorder window holds).

import { type Code, type Fn, I32, F32, V128, get, set, block, loop, br, br_if, ifv, i32, f32, v128, i8x16, i16x8, i32x4, f32x4 } from './emit.js';
import { MM_PERM, ZERO, HI16_BYTES, NIB_BYTES, MM_PARAMS, forLt, addp, mac, finalize, bf16At, type Gen } from './gen.js';
import { fp8ToBf16, mxGroupApart, storeBf16Apart, storeBf16Scaled } from './decode.js';

/** Rows decoded and dotted side by side (mm1.ts MM1_DEC_ROWS) and 32-column groups per chunk (MX_CHUNK_GROUPS). */
export interface ChunkShape {
  rows: number;
  groups: number;
}

/** The function's locals and what its pieces share, declared in the order the module numbers them. */
function chunkedLocals(gen: Gen, fmt: 'mxfp4' | 'int4' | 'fp8', shape: ChunkShape) {
  const NR = shape.rows, CG = shape.groups;
  const mx = fmt === 'mxfp4', fp8 = fmt === 'fp8';
  const f = gen.fnx(`mm1c_${fmt}`, { ...MM_PARAMS, qd: I32 }, null, false);
  const P = (n: string): Code => get(f.p(n));
  const j = f.local('j', I32), jend = f.local('jend', I32), g = f.local('g', I32), ng = f.local('ng', I32);
  const half = f.local('half', I32), q = f.local('q', I32), xq = f.local('xq', I32), acc = f.local('acc', F32);
  const sh = f.local('sh', I32); // int4, fp8: log2 of a scale's bytes (F32 4, BF16 2)
  const pw = Array.from({ length: NR }, (_, i) => f.local(`pw${i}`, I32));
  const ps = Array.from({ length: NR }, (_, i) => f.local(`ps${i}`, I32));
  const A = Array.from({ length: NR }, (_, i) => [0, 1, 2, 3].map((k) => f.local(`a${i}_${k}`, V128)));
  const X = [0, 1, 2, 3].map((k) => f.local(`x${k}`, V128));
  const srow = Array.from({ length: NR }, (_, i) => f.local(`srow${i}`, I32)); // fp8: the rows' scale rows
  const colB = mx ? 2 : 4; // decoded bytes a column: bf16 (mxfp4), f32 (int4 in perm bf, fp8 in id)
  const gB = fp8 ? 32 : 16; // stored bytes of a 32-column group
  const CB = CG * 32 * colB; // decoded bytes of a row's chunk
  const hi16 = gen.K(f, HI16_BYTES);
  const qend = f.local('qend', I32), wv = f.local('wv', V128);
  const rowOf = (i: number): Code => (i === 0 ? get(j) : i32.add(get(j), i32.mul(P('qd'), i32.const(i))));
  const out = (i: number, k: number, off: number): [Code, number] => [P('scratch'), i * CB + 32 * colB * k + off];
  /** int4 / fp8: the scale at address a (F32 or BF16, by sh), in every lane. */
  const scaleSplat = (a: Code): Code => f32x4.splat(ifv(F32, i32.eq(get(sh), i32.const(2)), f32.load(a), bf16At(a)));
  return { gen, fmt, f, P, NR, CG, mx, fp8, j, jend, g, ng, half, q, xq, acc, sh, pw, ps, A, X, srow, colB, gB, CB, hi16, qend, wv, rowOf, out, scaleSplat };
}
type C = ReturnType<typeof chunkedLocals>;

/** int4 group k of row i: 16 bytes of nibbles at pw_i + 16k (byte b: columns 2b, 2b+1), scale
 *  ps_i + (k << sh); (n - 8) * scale to f32 in perm bf, as dec_int4 (n - 8 in bytes, exact). */
function int4Group(c: C, i: number, k: number): Code[] {
  const { gen, f, out } = c;
  const V = (n: string): number => f.local(`i4_${n}`, V128);
  const B = V('B'), lo = V('lo'), hi = V('hi'), h = V('h'), sc = V('sc');
  const a = i32.add(get(c.ps[i]!), i32.shl(i32.const(k), get(c.sh)));
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
    set(sc, c.scaleSplat(a)),
    set(B, v128.load(get(c.pw[i]!), 16 * k)),
    set(lo, i8x16.sub(v128.and(get(B), nib), eight)),
    set(hi, i8x16.sub(v128.and(i16x8.shr_u(get(B), i32.const(4)), nib), eight)),
    ...block16(0), ...block16(1),
  ];
}

/** fp8 group k of row i: 32 bytes at pw_i + 32k, the scale of its 128x128 block (columns g + k
 *  >> 2 of the row's scale row); exact bf16 values (fp8ToBf16), widened, times the scale, as dec_fp8. */
function fp8Group(c: C, i: number, k: number): Code[] {
  const { gen, f, P } = c;
  const V = (n: string): number => f.local(`f8_${n}`, V128);
  const v = V('v'), lo = V('lo'), hi = V('hi'), sc = V('sc');
  const a = i32.add(P('s'), i32.shl(i32.add(get(c.srow[i]!), i32.shr_u(i32.add(get(c.g), i32.const(k)), i32.const(2))), get(c.sh)));
  return [
    set(sc, c.scaleSplat(a)),
    ...[0, 1].flatMap((h) => [
      set(v, v128.load(get(c.pw[i]!), 32 * k + 16 * h)),
      ...fp8ToBf16(gen, f, v, lo, hi),
      ...[lo, hi].flatMap((b, bi) => storeBf16Scaled(gen, f, b, sc, ...c.out(i, k, 64 * h + 32 * bi))),
    ]),
  ];
}

function decode(c: C, i: number, k: number): Code[] {
  if (c.fp8) return fp8Group(c, i, k);
  if (!c.mx) return int4Group(c, i, k);
  return mxGroupApart(c.gen, c.f, get(c.pw[i]!), get(c.ps[i]!), k, (lbE, hbE, lbO, hbO) => storeBf16Apart(lbE, hbE, lbO, hbO, (jj) => c.out(i, k, 16 * jj)));
}

/** The chunk's dot, n groups: a loop over lane groups ks, 16 columns a step (scratch offset q,
 *  x at xq + q * 4 / colB: a loop, so that V8 does not hoist a whole chunk's loads and spill them). */
function pass(c: C, n: number, ks: readonly number[]): Code[] {
  const { gen, P, q, qend, wv, X, A, mx, colB, CB } = c;
  const xAt = (): Code => addp(get(c.xq), mx ? i32.shl(get(q), i32.const(1)) : get(q));
  return [
    set(q, i32.const(0)), set(qend, i32.const(32 * colB * n)),
    block(loop(br_if(1, i32.ge_u(get(q), get(qend))),
      ...ks.map((k) => set(X[k]!, v128.load(xAt(), 16 * k))),
      ...Array.from({ length: c.NR }, (_, i) => mx
        ? [
          set(wv, v128.load(addp(P('scratch'), get(q)), i * CB + 16 * (ks[0]! >> 1))),
          ...ks.map((k) => mac(gen.madd, A[i]![k]!, (k & 1) === 0 ? i32x4.shl(get(wv), i32.const(16)) : v128.and(get(wv), get(c.hi16)), get(X[k]!))),
        ]
        : ks.map((k) => mac(gen.madd, A[i]![k]!, v128.load(addp(P('scratch'), get(q)), i * CB + 16 * k), get(X[k]!)))).flat(),
      set(q, i32.add(get(q), i32.const(16 * colB))), br(0))),
  ];
}

/** n groups of every row: decoded, dotted, the pointers moved on. */
function chunk(c: C, n: number): Code[] {
  return [
    ...Array.from({ length: c.NR }, (_, i) => Array.from({ length: n }, (_, k) => decode(c, i, k)).flat()).flat(),
    ...pass(c, n, [0, 1]), ...pass(c, n, [2, 3]),
    ...c.pw.map((p) => set(p, i32.add(get(p), i32.const(c.gB * n)))),
    ...(c.fp8 ? [] : c.ps.map((p) => set(p, i32.add(get(p), c.mx ? i32.const(n) : i32.shl(i32.const(n), get(c.sh)))))),
    set(c.xq, i32.add(get(c.xq), i32.const(128 * n))),
    set(c.g, i32.add(get(c.g), i32.const(n))),
  ];
}

/** Row i's data (and scale) pointers at the start of its row. */
function rowStart(c: C, i: number): Code[] {
  const { P, rowOf } = c;
  if (c.fp8) {
    return [
      set(c.pw[i]!, addp(P('w'), i32.mul(rowOf(i), P('cols')))),
      // floor(r/128) * ceil(cols/128)
      set(c.srow[i]!, i32.mul(i32.shr_u(rowOf(i), i32.const(7)), i32.shr_u(i32.add(P('cols'), i32.const(127)), i32.const(7)))),
    ];
  }
  return [
    set(c.pw[i]!, addp(P('w'), i32.mul(rowOf(i), get(c.half)))),
    set(c.ps[i]!, addp(P('s'), c.mx ? i32.mul(rowOf(i), get(c.ng)) : i32.shl(i32.mul(rowOf(i), get(c.ng)), get(c.sh)))),
  ];
}

export function addMm1Chunked(gen: Gen, fmt: 'mxfp4' | 'int4' | 'fp8', shape: ChunkShape): Fn {
  const c = chunkedLocals(gen, fmt, shape);
  const { f, P, NR, CG, j, jend, g, ng, A, acc } = c;
  f.body = [
    set(c.half, i32.shr_u(P('cols'), i32.const(1))),
    set(ng, i32.shr_u(P('cols'), i32.const(5))),
    // int4 / fp8 scales: F32 (sdt 0) 4 bytes, BF16 (1) 2; F16 (2) does not come here
    set(c.sh, i32.sub(i32.const(2), P('sdt'))),
    set(jend, i32.add(P('r0'), P('qd'))),
    set(j, P('r0')),
    forLt(j, jend, 1,
      ...Array.from({ length: NR }, (_, i) => rowStart(c, i)).flat(),
      ...A.flat().map((a) => set(a, ZERO)),
      set(c.xq, P('x')), set(g, i32.const(0)),
      block(loop(br_if(1, i32.gt_u(i32.add(get(g), i32.const(CG)), get(ng))), ...chunk(c, CG), br(0))),
      block(loop(br_if(1, i32.ge_u(get(g), get(ng))), ...chunk(c, 1), br(0))),
      ...Array.from({ length: NR }, (_, i) => [
        set(acc, finalize(f, MM_PERM[fmt], A[i]!, `c${i}`)),
        f32.store(addp(P('y'), i32.shl(c.rowOf(i), i32.const(2))), get(acc)),
      ]).flat(),
    ),
  ];
  return f;
}
