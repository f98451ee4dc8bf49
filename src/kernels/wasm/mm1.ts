// The single-token products (T < TILE_MIN_T: decode, and the few tokens an expert gets): stored rows
// in pairs far apart, decoded rows three at a time, their lane-group passes taken in turns over
// column chunks; every output the canonical dot of its row alone.

import {
  type Code, Fn, I32, F32, V128, get, set, call, drop, block, loop, br, br_if, if_, select,
  i32, f32, v128, i32x4,
} from './emit.js';
import {
  type Perm, type Fmt, MM_PERM, ROWS, FMTS, ZERO, HI16_BYTES, MM_PARAMS, forLt, addp, minU, touchLines, panelBlock,
  mac, finalize, bf16At, type Gen, reg,
} from './gen.js';
import type { Decoders } from './decode.js';
import type { Madd } from './fma.js';
import { addMm1Chunked } from './mm1-chunked.js';

/** Stored rows (bf16, f32) the single-token matmul walks side by side, and the least distance
 *  between them: rows j and j+q for j in [r0, r0+q) of a range of n rows, q = n/2 when at least
 *  MM1_MIN_DIST, then the rest one by one. Each row is still the canonical dot. Why: two streams
 *  far apart keep the prefetchers busiest; neighbouring rows look like one stream. Measurements:
 *  docs/TUNING.md "MM1_ROWS, MM1_MIN_DIST" (bench/tune: `tune.js mm1-rows`). */
export const MM1_ROWS = 2;
/** Stored rows wider than MM1_WIDE_FROM columns go MM1_WIDE_ROWS at a time (far apart, the same two
 *  lane-group passes over chunks), so that each activation vector loaded serves four rows. Why: a
 *  row's activations (4 bytes a column) outgrow L1 past a few thousand columns while rows stream
 *  through it; the odd columns widen without the mask, which would cost a register (srcBF16's
 *  noMask). Measurements: docs/TUNING.md "MM1_WIDE_ROWS, MM1_WIDE_FROM" (`tune.js mm1-wide`). */
export const MM1_WIDE_ROWS = 4;
export const MM1_WIDE_FROM = 3072;
export const MM1_MIN_DIST = 8;
/** Columns per chunk of the single-token product's lane-group passes (rowsBody): the rows' passes
 *  take turns chunk by chunk (pass 1 then pass 2 over columns 0..255, then over 256..511, ...)
 *  instead of each walking the whole row. Each accumulator sees the same multiply-adds in the same
 *  order, so the bytes are the same. Why: two passes over a chunk fit in the reorder window
 *  together, so 8 multiply-add chains run at once without the 8 live accumulators that V8 spills.
 *  Measurements: docs/TUNING.md "MM1_CHUNK_COLS" (`tune.js mm1-chunk`). */
export const MM1_CHUNK_COLS = 256;
/** mxfp4 rows the single-token matmul decodes (to bf16, into scratch) and then walks side by side,
 *  in two passes over lane groups as MM1_ROWS (6 accumulators live a pass). Why: a row's dot is 4
 *  chains of fused multiply-adds, so one decoded row at a time waits on them, and more than 6 live
 *  accumulators spill on x86 V8. Measurements: docs/TUNING.md "MM1_DEC_ROWS" (`tune.js mm1-dec-rows`). */
export const MM1_DEC_ROWS = 3;
/** 32-column groups per chunk of the single-token mxfp4 / int4 / fp8 product (addMm1Chunked), which
 *  decodes and dots chunk by chunk instead of decoding whole rows first. Why: a chunk's decode (three
 *  rows) and dot fit in the reorder window together. Measurements: docs/TUNING.md "MX_CHUNK_GROUPS"
 *  (`tune.js mx-chunk`). */
export const MX_CHUNK_GROUPS = 4;
const CHUNK = { rows: MM1_DEC_ROWS, groups: MX_CHUNK_GROUPS };

// ---- rows of the single-token path: a row's 4 accumulators per token. Several tokens per row
// (TB >= 2 in registers) made V8 hoist the loads and spill accumulators (Zen 5 / V8 11): the
// tiled path (kernels.ts) is how several tokens share a row. Several rows share the loop only when they
// lie far apart (MM1_ROWS) ----

/** How a kernel gets the weights of one row: per step of `stepCols` columns. */
interface RowSource {
  stepCols: 16 | 32;
  /** Set the pointer of row i (base + i*stride). */
  init(f: Fn, i: number): Code[];
  /** Emit the step's weight vectors for row i: emit(k, w) for k < stepCols/4 (k&3 = accumulator),
   *  or only for the accumulators in ks. */
  step(f: Fn, i: number, emit: (k: number, w: Code) => Code, ks?: readonly number[]): Code[];
  advance(f: Fn, i: number): Code[];
  /** Move row i's pointer on by the columns that xBytes of (f32) activations hold (after init: to
   *  a chunk's first column). */
  skip(f: Fn, i: number, xBytes: Code): Code;
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
  passes: readonly (readonly number[])[] = [[0, 1, 2, 3]], carry?: Carry): Code[] {
  const A = Array.from({ length: NR }, (_, i) => [0, 1, 2, 3].map((k) => f.local(`${tag}a${i}_${k}`, V128)));
  const q = f.local(`${tag}q`, I32), q0 = f.local(`${tag}q0`, I32), qend = f.local(`${tag}qend`, I32);
  const acc = f.local('acc', F32), c = f.local('c', I32), cols = carry ? carry.cols : get(f.p('cols'));
  const R = Array.from({ length: NR }, (_, i) => i);
  const out: Code[] = [set(q0, xq)];
  out.push(...R.flatMap((i) => A[i]!.map((a, k) => set(a, carry ? v128.load(carry.at(i), 16 * k) : ZERO))));
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
    out.push(set(qc, get(q0)), block(loop(br_if(1, i32.ge_u(get(qc), get(qend))),
      set(qce, i32.add(get(qc), i32.const(MM1_CHUNK_COLS * 4))),
      minU(qce, get(qend)),
      ...passes.flatMap((ks) => [
        set(q, get(qc)),
        ...R.flatMap((i) => [...src.init(f, i), src.skip(f, i, i32.sub(get(qc), get(q0)))]),
        walk(ks, qce),
      ]),
      set(qc, get(qce)), br(0))));
  }
  if (carry) {
    // the columns were a multiple of 16: no tail; the accumulators go on in the next panel
    out.push(...R.flatMap((i) => A[i]!.map((a, k) => v128.store(carry.at(i), get(a), 16 * k))));
    return out;
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

/** rowsBody over a panel (addPanelled): `cols` columns (a multiple of 16), row i's 4 accumulators
 *  loaded from and stored back to at(i) instead of started at zero and finished. */
interface Carry {
  cols: Code;
  at: (i: number) => Code;
}

// Row sources. f32 rows (weights or decoded scratch) in the layout of the permuted x; bf16 rows
// in natural column order, widened in registers (perm bf). Row i at (base + i*stride).
/** Row i's pointer p_i: set to base + i*stride, and moved on by the weight bytes of xBytes of
 *  activations (shr: log2 of 4 / the weight's bytes a column). */
const rowPointer = (base: number, stride: number, shr: 0 | 1): Pick<RowSource, 'init' | 'skip'> => ({
  init: (f, i) => [set(f.local(`p${i}`, I32), addp(get(base), i32.mul(i32.const(i), get(stride))))],
  skip: (f, i, xBytes) => set(f.local(`p${i}`, I32), i32.add(get(f.local(`p${i}`, I32)), shr ? i32.shr_u(xBytes, i32.const(shr)) : xBytes)),
});
function srcF32(base: number, stride: number): RowSource {
  return {
    stepCols: 16,
    ...rowPointer(base, stride, 0),
    step: (f, i, emit, ks = [0, 1, 2, 3]) => ks.map((k) => emit(k, v128.load(get(f.local(`p${i}`, I32)), 16 * k))),
    advance: (f, i) => [set(f.local(`p${i}`, I32), i32.add(get(f.local(`p${i}`, I32)), i32.const(64)))],
    // after the loop p points at the tail
    tail: (f, i, c) => f32.load(addp(get(f.local(`p${i}`, I32)), i32.shl(i32.sub(c, i32.and(get(f.p('cols')), i32.const(-16))), i32.const(2)))),
  };
}
function srcBF16(gen: Gen, base: number, stride: number, noMask = false): RowSource {
  return {
    stepCols: 16,
    ...rowPointer(base, stride, 1),
    step: (f, i, emit, ks = [0, 1, 2, 3]) => {
      // accumulators 0, 1 take the first 8 columns of the step (v), 2, 3 the next 8 (u)
      const v = f.local('v', V128), u = f.local('u', V128);
      const half = (h: number, r: number): Code[] => {
        if (noMask && ks.includes(2 * h) && ks.includes(2 * h + 1)) {
          // the odd columns without the mask constant (one register fewer): r with its low half
          // cleared, r ^ (even >> 16), the same bits as r & HI16
          const e = f.local('e', V128);
          return [
            set(r, v128.load(get(f.local(`p${i}`, I32)), 16 * h)),
            set(e, i32x4.shl(get(r), i32.const(16))),
            emit(2 * h, get(e)),
            emit(2 * h + 1, v128.xor(get(r), i32x4.shr_u(get(e), i32.const(16)))),
          ];
        }
        const hi16 = gen.K(f, HI16_BYTES);
        return [
          set(r, v128.load(get(f.local(`p${i}`, I32)), 16 * h)),
          ...(ks.includes(2 * h) ? [emit(2 * h, i32x4.shl(get(r), i32.const(16)))] : []),
          ...(ks.includes(2 * h + 1) ? [emit(2 * h + 1, v128.and(get(r), get(hi16)))] : []),
        ];
      };
      return [...(ks.some((k) => k < 2) ? half(0, v) : []), ...(ks.some((k) => k >= 2) ? half(1, u) : [])];
    },
    advance: (f, i) => [set(f.local(`p${i}`, I32), i32.add(get(f.local(`p${i}`, I32)), i32.const(32)))],
    tail: (f, i, c) => bf16At(addp(get(f.local(`p${i}`, I32)), i32.shl(i32.sub(c, i32.and(get(f.p('cols')), i32.const(-16))), i32.const(1)))),
  };
}

/** Rows of a panelled matrix (formats/panels.ts) that the single-token product takes through all
 *  the panels before the next ones: at most this many, their accumulators (64 bytes a row and
 *  token) within PANEL_ACC_BYTES of the thread's scratch. docs/TUNING.md "PANEL_SUB_ROWS". */
export const PANEL_SUB_ROWS = 128;
export const PANEL_ACC_BYTES = 896 * 64;
/** Tokens from which the product of panels first reads a sub-block's run of a panel once (one load
 *  a line, as the tiled path's touchRows), then computes from the caches. Why: from 3 tokens on,
 *  the row pairs' two streams advance too slowly for the prefetchers. docs/TUNING.md "PANEL_TOUCH_T". */
export const PANEL_TOUCH_T = 3;

/**
 * The single-token (T < TILE_MIN_T) product of bf16 rows stored in column panels (sdt PANEL_SDT, s
 * = block rows << 16 | panel width; the layout is formats/panels.ts's). Rows [r0, r1) go in
 * sub-blocks of at most PANEL_SUB_ROWS rows within one row block: for each panel in turn, the rows
 * in pairs far apart (MM1_ROWS, as mm1g) or one at a time, each row's 4 accumulators carried in
 * scratch from panel to panel, then finished (the canonical combine; panels are whole 16-column
 * steps, so there is no tail). Each lane sees the multiply-adds of the row-major product in the same
 * order, so the bytes are the same. Why: a wide row's activations (4 bytes a column: 28 KB at K3's
 * 7168) do not stay in L1 while rows stream through it; a panel's (7 KB) do, and a panel's rows are
 * long runs of memory. Measurements: docs/TUNING.md "Column panels".
 */
function addPanelled(gen: Gen): Fn {
  const f = gen.fnx('mm1p_bf16', MM_PARAMS, null, false);
  const P = (n: string) => get(f.p(n));
  const L = (n: string): number => f.local(n, I32);
  const RB = L('RB'), pw = L('pw'), nP = L('nP'), a = L('a'), b = L('b'), bs = L('bs'), nb = L('nb'), bb = L('bb');
  const sb = L('sb'), pp = L('pp'), pb = L('pb'), j = L('j'), jend = L('jend'), qd = L('qd'), t = L('t'), k = L('k'), kend = L('kend');
  const base = L('base'), stride = L('stride'), colsb = L('colsb'), pwb = L('pwb'), xo = L('xo'), tch = L('tch');
  const acc = f.local('acc', F32);
  const FA = [0, 1, 2, 3].map((i) => f.local(`pf${i}`, V128));
  const src = srcBF16(gen, base, stride);
  /** Row `row`'s accumulators for token t in scratch. */
  const slot = (row: Code): Code => addp(P('scratch'), i32.shl(i32.add(i32.mul(i32.sub(row, get(a)), P('T')), get(t)), i32.const(6)));
  /** Row `row`'s slice of the current panel. */
  const rowAt = (row: Code): Code => addp(get(pb), i32.mul(i32.sub(row, get(bs)), get(pwb)));
  const xq = (): Code => addp(addp(P('x'), i32.mul(get(t), get(colsb))), get(xo));
  f.body = [
    set(RB, i32.shr_u(P('s'), i32.const(16))),
    set(pw, i32.and(P('s'), i32.const(0xffff))),
    set(nP, i32.div_u(P('cols'), get(pw))),
    set(colsb, i32.shl(P('cols'), i32.const(2))),
    set(pwb, i32.shl(get(pw), i32.const(1))),
    // (no tokens: nothing to do, and no division by zero below)
    set(sb, i32.div_u(i32.const(PANEL_ACC_BYTES / 64), select(P('T'), i32.const(1), P('T')))),
    minU(sb, i32.const(PANEL_SUB_ROWS)),
    set(a, P('r0')),
    block(loop(br_if(1, i32.ge_u(get(a), P('r1'))),
      // the row block of a: rows [bs, bs + nb), stored from bb (row-major bytes before it)
      ...panelBlock(bs, nb, get(a), get(RB), P('rows')),
      set(bb, addp(P('w'), i32.mul(get(bs), i32.shl(P('cols'), i32.const(1))))),
      // the sub-block [a, b)
      set(b, i32.add(get(a), get(sb))), minU(b, P('r1')), minU(b, i32.add(get(bs), get(nb))),
      set(k, P('scratch')), set(kend, addp(P('scratch'), i32.shl(i32.mul(i32.sub(get(b), get(a)), P('T')), i32.const(6)))),
      forLt(k, kend, 16, v128.store(get(k), ZERO)),
      set(qd, i32.shr_u(i32.sub(get(b), get(a)), i32.const(1))),
      set(pp, i32.const(0)),
      forLt(pp, nP, 1,
        set(pb, addp(get(bb), i32.mul(i32.mul(get(nb), get(pp)), get(pwb)))),
        set(xo, i32.shl(i32.mul(get(pp), get(pw)), i32.const(2))),
        // from PANEL_TOUCH_T tokens: the sub-block's rows of this panel (one run) read once first
        if_(i32.ge_u(P('T'), i32.const(PANEL_TOUCH_T)), touchLines(k, kend, tch, rowAt(get(a)), rowAt(get(b)))),
        set(j, get(a)),
        if_(i32.ge_u(get(qd), i32.const(MM1_MIN_DIST)), [
          set(jend, i32.add(get(a), get(qd))),
          forLt(j, jend, 1,
            set(base, rowAt(get(j))), set(stride, i32.mul(get(qd), get(pwb))),
            set(t, i32.const(0)),
            forLt(t, f.p('T'), 1, ...rowsBody(gen.madd, f, 'bf', MM1_ROWS, src, xq(), () => i32.const(0), 'p2_', [[0, 1], [2, 3]],
              { cols: get(pw), at: (i) => slot(i32.add(get(j), i32.mul(get(qd), i32.const(i)))) }))),
          set(j, i32.add(get(a), i32.shl(get(qd), i32.const(1)))),
        ]),
        forLt(j, b, 1,
          set(base, rowAt(get(j))),
          set(t, i32.const(0)),
          forLt(t, f.p('T'), 1, ...rowsBody(gen.madd, f, 'bf', 1, src, xq(), () => i32.const(0), 'p1_', [[0, 1, 2, 3]],
            { cols: get(pw), at: () => slot(get(j)) }))),
      ),
      set(j, get(a)),
      forLt(j, b, 1,
        set(t, i32.const(0)),
        forLt(t, f.p('T'), 1,
          ...FA.map((v, i) => set(v, v128.load(slot(get(j)), 16 * i))),
          set(acc, finalize(f, 'bf', FA, 'pf')),
          f32.store(addp(P('y'), i32.shl(i32.add(i32.mul(get(t), P('rows')), get(j)), i32.const(2))), get(acc)))),
      set(a, get(b)), br(0))),
    // the touched words, kept alive (scratch's first word: an accumulator already used)
    i32.store(P('scratch'), get(tch)),
  ];
  return f;
}

// ---- single-token matmul (T < TILE_MIN_T): y[t, r] for t < T, r in [r0, r1). A row is
// decoded once (if its format needs it) and then dotted with each token in turn ----
/** The single-token rows function <name>_<fmt>: rows [r0, r1) (nr = 1), or the groups of rows
 *  j + i*qd, i < nr, for j in [r0, r0 + qd); stored rows in place, other formats decoded first. */
function addRowFn(gen: Gen, dec: Decoders, fmt: Fmt, name: string, nr: number, passes: readonly (readonly number[])[], noMask = false): Fn {
  const kind = ROWS[fmt];
  const inPlace = kind === 'f32' || kind === 'bf16';
  const f = gen.fnx(`${name}_${fmt}`, nr === 1 ? MM_PARAMS : { ...MM_PARAMS, qd: I32 }, null, false);
  const P = (n: string) => get(f.p(n));
  const base = f.local('base', I32), stride = f.local('stride', I32), t = f.local('t', I32), colsb = f.local('colsb', I32);
  const rowb = f.local('rowb', I32), j = f.local('j', I32), jend = f.local('jend', I32);
  f.prologue.push(
    set(colsb, i32.shl(P('cols'), i32.const(2))),
    set(rowb, kind === 'f32' ? get(colsb) : i32.shl(P('cols'), i32.const(1))),
  );
  const src = kind === 'bf16' || kind === 'dec_bf16' ? srcBF16(gen, base, stride, noMask) : srcF32(base, stride);
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
      forLt(t, f.p('T'), 1, ...rowsBody(gen.madd, f, MM_PERM[fmt], nr, src, addp(P('x'), i32.mul(get(t), get(colsb))), (i) => yAt(rowOf(i)), 'r_', passes))),
  ];
  return f;
}

/** The entry mm1_<fmt>: rows [r0, r1) with args(r0) of the range, qd = rows / n; rest() runs the
 *  rows after q groups of g one at a time (`one`). */
function addEntry(gen: Gen, fmt: Fmt, one: Fn, n: number) {
  const f = gen.fnx(`mm1_${fmt}`, MM_PARAMS, null, false);
  const P = (name: string) => get(f.p(name));
  const qd = f.local('qd', I32);
  const args = (r0: Code): Code[] => [P('w'), P('s'), P('sdt'), P('rows'), P('cols'), P('x'), P('T'), P('y'), r0, P('r1'), P('scratch')];
  const rest = (q: number, g: number): Code => call(reg(one), ...args(i32.add(P('r0'), i32.mul(get(q), i32.const(g)))));
  return { f, P, qd, args, rest, setQd: set(qd, i32.div_u(i32.sub(P('r1'), P('r0')), i32.const(n))) };
}

export function addSingleTokenMatmul(gen: Gen, dec: Decoders): { mm1: Partial<Record<Fmt, Fn>>; panelled: Fn } {
  const mm1: Partial<Record<Fmt, Fn>> = {};
  for (const fmt of FMTS) {
    const kind = ROWS[fmt];
    const inPlace = kind === 'f32' || kind === 'bf16';
    const rowFn = (name: string, nr: number, passes: readonly (readonly number[])[], noMask = false): Fn => addRowFn(gen, dec, fmt, name, nr, passes, noMask);
    const entry = (n: number): ReturnType<typeof addEntry> => {
      const e = addEntry(gen, fmt, one, n);
      mm1[fmt] = e.f;
      return e;
    };
    const grouped = inPlace || kind === 'dec_bf16';
    const one = rowFn('mm1r', 1, [[0, 1, 2, 3]]);
    if (fmt === 'int4' || fmt === 'fp8') {
      // one token, F32 or BF16 scales, whole 32-column groups: three rows at a time, decoded and
      // dotted chunk by chunk (addMm1Chunked); else (and the rows left over) one row at a time
      const c4 = addMm1Chunked(gen, fmt, CHUNK);
      const { f, P, qd, args, rest, setQd } = entry(MM1_DEC_ROWS);
      f.body = [
        setQd,
        set(qd, select(get(qd), i32.const(0), i32.and(i32.and(i32.eq(P('T'), i32.const(1)), i32.lt_u(P('sdt'), i32.const(2))),
          i32.eqz(i32.and(P('cols'), i32.const(31)))))),
        block(br_if(0, i32.eqz(get(qd))), call(reg(c4), ...args(P('r0')), get(qd))),
        rest(qd, MM1_DEC_ROWS),
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
    // allocates registers per function. int4 and fp8 (above) take the chunked kernel at one token;
    // f16 rows go one at a time.
    const group = rowFn('mm1g', NRg, [[0, 1], [2, 3]]);
    // mxfp4 at T = 1 (decode): the groups of rows decoded and dotted chunk by chunk
    const chunked = kind === 'dec_bf16' ? addMm1Chunked(gen, 'mxfp4', CHUNK) : null;
    const { f, P, qd, args, rest, setQd } = entry(NRg);
    const narrow = if_(i32.ge_u(get(qd), i32.const(inPlace ? MM1_MIN_DIST : 1)), [
      chunked ? if_(i32.eq(P('T'), i32.const(1)), [call(reg(chunked), ...args(P('r0')), get(qd))], [call(reg(group), ...args(P('r0')), get(qd))])
      : call(reg(group), ...args(P('r0')), get(qd)),
      rest(qd, NRg),
    ], [call(reg(one), ...args(P('r0')))]);
    if (!inPlace) {
      f.body = [setQd, narrow];
      continue;
    }
    // wide stored rows at T = 1 (more than MM1_WIDE_FROM columns): MM1_WIDE_ROWS rows at a time
    const wide = rowFn('mm1w', MM1_WIDE_ROWS, [[0, 1], [2, 3]], true);
    const qw = f.local('qw', I32);
    f.body = [
      setQd,
      set(qw, i32.div_u(i32.sub(P('r1'), P('r0')), i32.const(MM1_WIDE_ROWS))),
      if_(i32.and(i32.and(i32.eq(P('T'), i32.const(1)), i32.gt_u(P('cols'), i32.const(MM1_WIDE_FROM))), i32.ge_u(get(qw), i32.const(MM1_MIN_DIST))), [
        call(reg(wide), ...args(P('r0')), get(qw)),
        rest(qw, MM1_WIDE_ROWS),
      ], [narrow]),
    ];
  }
  return { mm1, panelled: addPanelled(gen) };
}
