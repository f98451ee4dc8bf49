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
// 16 nibbles into a per-scale table, then take the bf16 path; for fewer than TILE_MIN_T.mxfp4 tokens
// the low and high nibbles are looked up apart (no shuffle into column order first), which
// puts columns {0,4,8,12},{2,6,10,14},{1,5,9,13},{3,7,11,15} in the accumulators (perm 'mx'). f16, fp8 and int4 rows are
// decoded to exact f32 values (fp8 and int4 after the one f32 multiply by their scale, as in
// ref.ts) and then dotted. A row is decoded once per call and used for all T tokens.
//
// Memory layout of one kernel memory (see fast.ts): [0, CTRL_BYTES) pool control words,
// then constant tables (MX_PLANES: for each E8M0 scale byte s, the 16 decoded E2M1*2^(s-127)
// values as bf16, low bytes then high bytes; FP8_TAB: the 256 e4m3 values; vector constants
// at KCONST), then, from CONST_END, the arena.

import {
  type Code, Fn, I32, F32, V128, assemble, get, set, call, drop, block, loop, br, br_if, if_, i32,
  f32, v128, i32x4, f32x4,
} from './emit.js';
import { addAct } from './act.js';
import { emitOps } from '../ops/registry.js';
import { addQ8, addQuantizeBlocks } from './q8.js';
import { addQ7 } from './q8-trunk.js';
import {
  Q8_SDT, Q7_SDT, PANEL_SDT, type Perm, PERMS, type Fmt, MM_PERM, ROWS, TILE_ROWS, TILE_MIN_T, TILE_PERM, TILE_CHUNK_COLS, TILE_CHUNK_FROM,
  FMTS, type GenOptions, ZERO, HI16_BYTES, MM_PARAMS, forLt, addp, minU, touchLines, panelBlock, mac, finalize, bf16At,
  type Generated, type Gen, newGen, reg, FUNC_IMPORTS, EXP_FN,
} from './gen.js';
import { type Decoders, addScalarHelpers, addDecoders } from './decode.js';
import { MM1_MIN_DIST, addSingleTokenMatmul } from './mm1.js';

export {
  Q8_SDT, Q7_SDT, PANEL_SDT, CTRL_BYTES, MX_PLANES, FP8_TAB, CONST_END, KCONST, type Perm, PERMS, type Fmt,
  MM_PERM, TILE_TOKENS, TILE_ROWS, TILE_MIN_T, TILE_PERM, TILE_CHUNK_COLS, TILE_CHUNK_FROM, TILE_SCRATCH, FMTS, type GenOptions,
  type Generated, finalize, FUNC_IMPORTS, EXP_FN,
} from './gen.js';
export { MM1_ROWS, MM1_WIDE_ROWS, MM1_WIDE_FROM, MM1_MIN_DIST, MM1_CHUNK_COLS, MM1_DEC_ROWS, MX_CHUNK_GROUPS } from './mm1.js';

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
// sequential tail. Rows wider than TILE_CHUNK_FROM columns are walked in column chunks, the four
// passes over one chunk before the next (gen.ts TILE_CHUNK_COLS: what one pass walks then stays in
// L1), the accumulators kept in scratch between chunks ----
/** One format's tiled kernel: its locals (in the order the module numbers them) and prologue. */
function tiledLocals(gen: Gen, dec: Decoders, fmt: Fmt) {
  const f = gen.fnx(`mmt_${fmt}`, MM_PARAMS, null, false);
  const P = (n: string) => get(f.p(n));
  const kind = ROWS[fmt];
  const decFn = kind === 'dec_f32' ? dec[fmt]! : null;
  const r = f.local('r', I32), t = f.local('t', I32), xg = f.local('xg', I32);
  const RP = [0, 1].map((i) => f.local(`rp${i}`, I32));
  const n16 = f.local('n16', I32), colsb = f.local('colsb', I32), ab = f.local('ab', I32), rowb = f.local('rowb', I32);
  const p = f.local('p', I32), q = f.local('q', I32), qend = f.local('qend', I32);
  const acc = f.local('acc', F32), c = f.local('c', I32), xt = f.local('xt', I32);
  const hv = f.local('hv', V128), nb = f.local('nb', I32), cw = f.local('cw', I32), tch = f.local('tch', I32);
  const FA = [0, 1, 2, 3].map((k) => f.local(`fa${k}`, V128));
  const S = (i: number): Code => addp(P('scratch'), i32.mul(get(rowb), i32.const(i)));
  f.prologue.push(
    set(colsb, i32.shl(P('cols'), i32.const(2))),
    set(n16, i32.and(P('cols'), i32.const(-16))),
    set(nb, i32.shr_u(get(n16), i32.const(4))),
    // blocks a column chunk: all of them up to TILE_CHUNK_FROM columns, else as even a split as
    // TILE_CHUNK_COLS-column chunks allow
    set(cw, get(nb)),
    if_(i32.gt_u(get(n16), i32.const(TILE_CHUNK_FROM)), [
      set(cw, i32.div_u(i32.add(get(nb), i32.const(TILE_CHUNK_COLS / 16 - 1)), i32.const(TILE_CHUNK_COLS / 16))),
      set(cw, i32.div_u(i32.sub(i32.add(get(nb), get(cw)), i32.const(1)), get(cw))),
    ]),
    // scratch: [decoded bf16 row][f32 row 0][f32 row 1][accumulators between passes]
    set(rowb, i32.and(i32.add(get(colsb), i32.const(63)), i32.const(-64))),
    set(RP[0]!, S(1)), set(RP[1]!, S(2)),
    set(ab, S(3)),
  );
  // bf16 rows stored in column panels (sdt PANEL_SDT, s = block rows << 16 | panel width; the
  // layout of formats/panels.ts): a row is one slice per panel
  const panelled = (): Code => i32.eq(P('sdt'), i32.const(PANEL_SDT));
  const pnRB = f.local('pnRB', I32), pnW = f.local('pnW', I32), pnBs = f.local('pnBs', I32), pnNb = f.local('pnNb', I32);
  const pnP = f.local('pnP', I32), pnN = f.local('pnN', I32), pnA = f.local('pnA', I32), pnRows = f.local('pnRows', I32);
  // the op word's block rows, panel width and panel count, once a call
  if (kind === 'bf16') {
    f.prologue.push(if_(panelled(), [
      set(pnRB, i32.shr_u(P('s'), i32.const(16))), set(pnW, i32.and(P('s'), i32.const(0xffff))),
      set(pnN, i32.div_u(P('cols'), get(pnW))),
    ]));
  }
  const QG = [0, 1, 2, 3].map((g) => f.local(`qg${g}`, I32));
  const PR = [0, 1].map((i) => f.local(`pr${i}`, I32));
  const cb = f.local('cb', I32), ce = f.local('ce', I32);
  /** Bytes of a stored row used in place (bf16: 2 a column, f32: 4). */
  const storedRowBytes = (): Code => (kind === 'bf16' ? i32.shl(P('cols'), i32.const(1)) : get(colsb));
  return {
    gen, dec, fmt, f, P, kind, decFn, r, t, xg, RP, n16, colsb, ab, rowb, p, q, qend, acc, c, xt, hv, nb, cw, tch, FA,
    panelled, pnRB, pnW, pnBs, pnNb, pnP, pnN, pnA, pnRows, QG, PR, cb, ce, storedRowBytes,
  };
}
type TL = ReturnType<typeof tiledLocals>;

/** bf16 row at src -> f32 at dst (natural order): n columns (default the row's). */
function widen(c: TL, src: Code, dst: Code, n: () => Code = () => c.P('cols')): Code[] {
  const { p, q, xt, qend, hv } = c;
  return [
    set(p, src), set(q, dst), set(xt, get(q)),
    set(qend, addp(get(xt), i32.shl(i32.and(n(), i32.const(-8)), i32.const(2)))),
    block(loop(br_if(1, i32.ge_u(get(q), get(qend))),
      set(hv, v128.load(get(p))),
      v128.store(get(q), i32x4.shl(i32x4.extend_low_i16x8_u(get(hv)), i32.const(16))),
      v128.store(get(q), i32x4.shl(i32x4.extend_high_i16x8_u(get(hv)), i32.const(16)), 16),
      set(p, i32.add(get(p), i32.const(16))), set(q, i32.add(get(q), i32.const(32))), br(0))),
    set(qend, addp(get(xt), i32.shl(n(), i32.const(2)))),
    block(loop(br_if(1, i32.ge_u(get(q), get(qend))),
      i32.store(get(q), i32.shl(i32.load16_u(get(p)), i32.const(16))),
      set(p, i32.add(get(p), i32.const(2))), set(q, i32.add(get(q), i32.const(4))), br(0))),
  ];
}

/** For each panel pnP of row `row` (pnA: the address of its slice), body. */
function eachSlice(c: TL, row: Code, body: Code[]): Code[] {
  const { P, pnBs, pnNb, pnP, pnN, pnA, pnW } = c;
  return [
    ...panelBlock(pnBs, pnNb, row, get(c.pnRB), P('rows')),
    set(pnP, i32.const(0)),
    forLt(pnP, pnN, 1,
      // block start + the panels before it (nb rows each) + the row's slice in this one
      set(pnA, addp(addp(P('w'), i32.mul(get(pnBs), i32.shl(P('cols'), i32.const(1)))),
        i32.shl(i32.mul(get(pnW), i32.add(i32.mul(get(pnNb), get(pnP)), i32.sub(row, get(pnBs)))), i32.const(1)))),
      ...body),
  ];
}

/** Stored rows used in place (bf16, f32): one load per 64-byte line of rows [r, r + nr) first.
 *  Why: the widening loop (or the first pass, for f32) does ~8 operations per 16 bytes, so the
 *  reorder window holds the loads of only ~14 lines and a row pair streams from memory at about
 *  10 GB/s; this loop's 3 operations a line keep ~100 lines in flight, and what follows reads
 *  from the caches. The loaded words are folded into tch, stored once at the end (kept alive);
 *  no number changes. Decoded formats gain nothing (their decoding does more per byte). */
function touchRows(c: TL, nr: number): Code[] {
  const { P, r, pnRows, pnBs, pnNb, pnA, pnW } = c;
  const touch = (from: Code, to: Code): Code[] => touchLines(c.p, c.qend, c.tch, from, to);
  /** The stored bytes of rows [r, r + nr) of a row-major matrix. */
  const touchRowMajor = (): Code[] => touch(addp(P('w'), i32.mul(get(r), c.storedRowBytes())), addp(P('w'), i32.mul(i32.add(get(r), i32.const(nr)), c.storedRowBytes())));
  if (c.kind !== 'bf16') return touchRowMajor();
  return [if_(c.panelled(),
    // panelled rows: every PANEL_TOUCH_ROWS rows of the op, the next ones' slices of each panel
    // (one run a panel, within the block and the op's rows)
    [if_(i32.eqz(i32.and(i32.sub(get(r), P('r0')), i32.const(PANEL_TOUCH_ROWS - 1))),
      eachSlice(c, get(r), [
        set(pnRows, i32.sub(i32.add(get(pnBs), get(pnNb)), get(r))),
        minU(pnRows, i32.sub(P('r1'), get(r))),
        minU(pnRows, i32.const(PANEL_TOUCH_ROWS)),
        ...touch(get(pnA), addp(get(pnA), i32.shl(i32.mul(get(pnW), get(pnRows)), i32.const(1)))),
      ]))],
    touchRowMajor())];
}

/** Row r+i as exact f32 values at RP[i]. */
function loadRow(c: TL, i: number): Code[] {
  const { P, kind, RP } = c;
  const row = i32.add(get(c.r), i32.const(i));
  if (kind === 'dec_f32') return [drop(call(reg(c.decFn!), P('w'), P('s'), P('sdt'), P('rows'), P('cols'), row, get(RP[i]!)))];
  if (kind === 'dec_bf16') return [drop(call(reg(c.dec.mx2f32!), P('w'), P('s'), P('sdt'), P('rows'), P('cols'), row, get(RP[i]!)))];
  if (kind === 'bf16') {
    return [if_(c.panelled(),
      eachSlice(c, row, widen(c, get(c.pnA), addp(get(RP[i]!), i32.shl(i32.mul(get(c.pnP), get(c.pnW)), i32.const(2))), () => get(c.pnW))),
      widen(c, addp(P('w'), i32.mul(row, c.storedRowBytes())), get(RP[i]!)))];
  }
  return [set(RP[i]!, addp(P('w'), i32.mul(row, c.storedRowBytes())))];
}

/** The lane-group passes over one column chunk [cb, ce) of nr rows and tt tokens: accumulators A
 *  (from zero on the first chunk, else from ab), weight vectors W. */
function tiledPasses(c: TL, tt: number, nr: number, A: number[][][], W: number[][], gg: number): Code[] {
  const { f, gen, ab, cb, ce, PR, QG, RP, qend, xg, n16 } = c;
  const G = Array.from({ length: gg }, (_, g) => g);
  const R = Array.from({ length: nr }, (_, i) => i);
  const slot = (i: number, k0: number, g: number, j: number): number => (((i * 4) + k0 + g) * tt + j) * 16;
  const passes: Code[] = [];
  for (let k0 = 0; k0 < 4; k0 += gg) {
    passes.push(
      // the first chunk starts from zero, the others from where the previous chunk left off
      if_(i32.eqz(get(cb)), A.flat(2).map((a) => set(a, ZERO)),
        R.flatMap((i) => G.flatMap((g) => A[i]![g]!.map((a, j) => set(a, v128.load(get(ab), slot(i, k0, g, j))))))),
      ...R.map((i) => set(PR[i]!, addp(get(RP[i]!), i32.shl(get(cb), i32.const(6))))),
      ...G.map((g) => set(QG[g]!, addp(get(xg), addp(i32.mul(get(n16), i32.const(tt * (k0 + g))), i32.mul(get(cb), i32.const(16 * tt)))))),
      set(qend, addp(get(QG[0]!), i32.mul(i32.sub(get(ce), get(cb)), i32.const(16 * tt)))),
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
      ...R.flatMap((i) => G.flatMap((g) => A[i]![g]!.map((a, j) => v128.store(get(ab), get(a), slot(i, k0, g, j))))),
    );
  }
  return passes;
}

/** Row i's outputs for the tt tokens: the lanes combined, then the tail columns, stored. */
function tiledTail(c: TL, tt: number, i: number): Code[] {
  const { f, gen, P, FA, acc, q, xt, RP, n16, xg } = c;
  // token j's tail at xg + n16*4*tt + j*(cols - n16)*4
  const out: Code[] = [set(q, addp(get(xg), i32.mul(get(n16), i32.const(4 * tt))))];
  for (let j = 0; j < tt; j++) {
    for (let k = 0; k < 4; k++) out.push(set(FA[k]!, v128.load(get(c.ab), ((i * 4 + k) * tt + j) * 16)));
    out.push(
      set(acc, finalize(f, TILE_PERM[c.fmt], FA, `tt${tt}_${j}`)),
      set(c.c, get(n16)),
      set(xt, get(q)),
      block(loop(br_if(1, i32.ge_u(get(c.c), P('cols'))),
        set(acc, gen.madd.s(f32.load(addp(get(RP[i]!), i32.shl(get(c.c), i32.const(2)))), f32.load(get(xt)), get(acc))),
        set(xt, i32.add(get(xt), i32.const(4))),
        set(c.c, i32.add(get(c.c), i32.const(1))), br(0))),
      set(q, get(xt)),
      f32.store(addp(P('y'), i32.shl(addp(i32.mul(i32.add(get(c.t), i32.const(j)), P('rows')), i32.add(get(c.r), i32.const(i))), i32.const(2))), get(acc)),
    );
  }
  return out;
}

/** tt tokens of nr rows: the column chunks' passes, then each row's tails. */
function tiledGroup(c: TL, tt: number, nr: number): Code[] {
  const { f, cb, ce, cw, nb } = c;
  // lane groups per pass: enough independent chains (nr*gg*tt) to hide the add latency, few
  // enough registers (V8 hoists the gg*tt activation loads: nr*gg*tt + gg*tt + nr*gg <= 15)
  const gg = nr === 2 ? (tt === 1 ? 2 : 1) : tt === 1 ? 4 : tt <= 3 ? 2 : 1;
  const A = Array.from({ length: nr }, (_, i) => Array.from({ length: gg }, (_, g) => Array.from({ length: tt }, (_, j) => f.local(`a${nr}_${tt}_${i}_${g}_${j}`, V128))));
  const W = Array.from({ length: nr }, (_, i) => Array.from({ length: gg }, (_, g) => f.local(`wv${i}_${g}`, V128)));
  const passes = tiledPasses(c, tt, nr, A, W, gg);
  // the column chunks (TILE_CHUNK_COLS), at least one: rows shorter than 16 columns are all tail
  return [
    set(cb, i32.const(0)),
    loop(
      set(ce, i32.add(get(cb), get(cw))),
      if_(i32.gt_u(get(ce), get(nb)), [set(ce, get(nb))]),
      ...passes,
      set(cb, get(ce)),
      br_if(0, i32.lt_u(get(cb), get(nb))),
    ),
    ...Array.from({ length: nr }, (_, i) => tiledTail(c, tt, i)).flat(),
  ];
}

function addTiledMatmul(gen: Gen, dec: Decoders): void {
  const TT = gen.TT;
  const TR = gen.opts.tileRows ?? TILE_ROWS;
  for (const fmt of FMTS) {
    const c = tiledLocals(gen, dec, fmt);
    const { f, P, r, t, xg, colsb } = c;
    const inPlace = c.kind === 'bf16' || c.kind === 'f32';
    const tiles = (nr: number): Code[] => {
      const out: Code[] = [set(t, i32.const(0)), set(xg, P('x'))];
      for (let tt = TT; tt >= 1; tt--) {
        out.push(block(loop(
          br_if(1, i32.gt_u(i32.add(get(t), i32.const(tt)), P('T'))),
          ...tiledGroup(c, tt, nr),
          set(t, i32.add(get(t), i32.const(tt))),
          set(xg, addp(get(xg), i32.mul(get(colsb), i32.const(tt)))), br(0))));
      }
      return out;
    };
    const body: Code[] = [set(r, P('r0'))];
    for (const nr of TR === 2 ? [2, 1] : [1]) {
      body.push(block(loop(
        br_if(1, i32.gt_u(i32.add(get(r), i32.const(nr)), P('r1'))),
        ...(inPlace ? touchRows(c, nr) : []),
        ...Array.from({ length: nr }, (_, i) => loadRow(c, i)).flat(),
        ...tiles(nr),
        set(r, i32.add(get(r), i32.const(nr))), br(0))));
    }
    // the touched words, kept alive (scratch's first bytes: a decoded row's, unused here)
    if (inPlace) body.push(i32.store(P('scratch'), get(c.tch)));
    f.body = body;
  }
}

/** Rows of panelled bf16 (formats/panels.ts) whose slices the tiled product touches together, a run
 *  per panel. Why: one row pair's slices are short runs in four places, which the prefetchers
 *  serve badly. docs/TUNING.md "PANEL_TOUCH_ROWS" (`tune.js panel-touch-rows`). */
const PANEL_TOUCH_ROWS = 16;

/** The exported matmul entry points mm_<fmt>: single-token or tiled by T, and the q8 fast path for mxfp4. */
function addMatmulEntries(gen: Gen, mm1: Partial<Record<Fmt, Fn>>, panelled: Fn): void {
  // optional fast path (q8.ts): mm_mxfp4 with sdt = Q8_SDT runs it instead
  const { fnx, K, opts, fns } = gen;
  const mmq8 = addQ8(fnx, K, opts.relaxed, opts.intDotAdd ?? false);
  const mmq7 = addQ7(fnx, K, opts.relaxed, MM1_MIN_DIST, opts.intDotAdd ?? false);
  for (const fmt of FMTS) {
    const f = fnx(`mm_${fmt}`, MM_PARAMS);
    const args = Object.keys(MM_PARAMS).map((n) => get(f.p(n)));
    const mmt = fns.find((g) => g.name === `mmt_${fmt}`)!;
    const single = call(reg(mm1[fmt]!), ...args);
    // bf16 rows in column panels: single tokens take mm1p; the tiled product reads them by panel (loadRow)
    const singleOrPanels = fmt === 'bf16' ? if_(i32.eq(get(f.p('sdt')), i32.const(PANEL_SDT)), [call(reg(panelled), ...args)], [single]) : single;
    const exact = if_(i32.ge_u(get(f.p('T')), i32.const(opts.tileMinT ?? TILE_MIN_T[fmt])), [call(reg(mmt), ...args)], [singleOrPanels]);
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
  for (const perm of ['bf', 'mx'] as Perm[]) {
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
  const { mm1, panelled } = addSingleTokenMatmul(gen, dec);
  addTiledMatmul(gen, dec);
  addMatmulEntries(gen, mm1, panelled);
  addTileX(gen);
  addPermutes(gen);
  addMatvecT(gen, dec);

  // ---- the fused ops of the registry (ops/), in its order ----
  emitOps({
    fnx, finalize, madd: gen.madd, expFn: EXP_FN, opts: { kdaTile: opts.kdaTile, wsumTile: opts.wsumTile },
    fn: (name, make) => {
      const f = fns.find((g) => g.name === name) ?? make?.();
      if (!f) throw new Error(`kernel module: no function ${name} yet`);
      return f.index;
    },
  });

  // ---- gated activations: SiLU / SiTU with their own exp and tanh (act.ts) ----
  addAct(fnx, K);

  // ---- the activation quantizer of the 8-bit paths (q8.ts quantizeBlocks) ----
  addQuantizeBlocks(fnx, K);

  const bytes = assemble(fns, { module: 'env', name: 'memory', minPages: 1, maxPages: 65536, shared: true }, FUNC_IMPORTS);
  const consts = new Uint8Array(16 * pool.length);
  pool.forEach((k, i) => consts.set(k, 16 * i));
  return { bytes, exports: fns.filter((f) => f.exported).map((f) => f.name), consts };
}
