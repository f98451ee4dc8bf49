// Emitter pieces the ops share: lanes (a vector or a scalar f32 step, so one generator writes both
// tile kinds), column tiles, the canonical dot of ref.ts, and one row's RMSNorm.

import { type Code, type Fn, type ValType, I32, F32, F64, V128, get, set, block, loop, br, br_if, i32, f32, f64, v128, f32x4 } from '../wasm/emit.js';
import type { EmitCtx } from './op.js';

/** The parameter of f named n, on the stack. */
export const param = (f: Fn) => (n: string): Code => get(f.p(n));

/** Vector (4 lanes) or scalar f32 operations, so one generator writes both tile kinds. */
export interface Lane {
  T: ValType;
  bytes: number;
  load(a: Code, off?: number): Code;
  store(a: Code, v: Code, off?: number): Code;
  mul(a: Code, b: Code): Code;
  add(a: Code, b: Code): Code;
  sub(a: Code, b: Code): Code;
  /** The f32 at address a, in every lane. */
  bcast(a: Code): Code;
  /** An f32 value (scalar on the stack), in every lane. */
  splat(x: Code): Code;
  zero: Code;
}

export const VEC: Lane = {
  T: V128,
  bytes: 16,
  load: v128.load,
  store: v128.store,
  mul: f32x4.mul,
  add: f32x4.add,
  sub: f32x4.sub,
  bcast: (a) => v128.load32_splat(a),
  splat: (x) => f32x4.splat(x),
  zero: v128.i32x4(0, 0, 0, 0),
};

export const SCA: Lane = {
  T: F32,
  bytes: 4,
  load: f32.load,
  store: f32.store,
  mul: f32.mul,
  add: f32.add,
  sub: f32.sub,
  bcast: (a) => f32.load(a),
  splat: (x) => x,
  zero: f32.const(0),
};

/** A column tile: `units` lane groups of `lane` (16 columns = 4 vectors, 4 = 1 vector, 1 = scalar). */
export interface Tile {
  lane: Lane;
  units: number;
  tag: string;
}

/** Byte width of a tile. */
const tileBytes = (t: Tile): number => t.lane.bytes * t.units;

/**
 * for (j = 0; j < jmax; j += width) for each tile kind in turn: the widest tiles while a whole one
 * fits below `limit` (bytes), then narrower ones. `body(t)` must advance nothing: j is advanced here.
 */
export function columnTiles(j: number, limit: number, jend: number, tiles: Tile[], body: (t: Tile) => Code[]): Code[] {
  const out: Code[] = [set(j, i32.const(0))];
  for (const t of tiles) {
    const w = tileBytes(t);
    // jend = limit rounded down to a multiple of w (w is a power of two)
    out.push(
      set(jend, i32.and(get(limit), i32.const(-w))),
      block(loop(br_if(1, i32.ge_u(get(j), get(jend))), ...body(t), set(j, i32.add(get(j), i32.const(w))), br(0))),
    );
  }
  return out;
}

/** A row's columns 4 at a time, then 1 (for columnTiles). */
export const ROW_TILES: Tile[] = [{ lane: VEC, units: 1, tag: 'rv' }, { lane: SCA, units: 1, tag: 'rs' }];

/** l += n (an i32 local). */
export const inc = (l: number, n: number | Code): Code => set(l, i32.add(get(l), typeof n === 'number' ? i32.const(n) : n));

/** Tiles of `cols` columns (when wider than one vector), then 4, then 1. */
export const tilesOf = (cols: number, tag: string): Tile[] => [
  ...(cols > 4 ? [{ lane: VEC, units: cols / 4, tag: `${tag}w` }] : []),
  { lane: VEC, units: 1, tag: `${tag}v` },
  { lane: SCA, units: 1, tag: `${tag}s` },
];

/** Canonical 16-lane dot of n f32 at a and b (ref.ts dot); leaves the f32 on the stack. */
export function dot(c: EmitCtx, f: Fn, a: number, b: number, n: Code, tag: string): Code {
  const acc = [0, 1, 2, 3].map((m) => f.local(`${tag}acc${m}`, V128));
  const pa = f.local(`${tag}pa`, I32), pb = f.local(`${tag}pb`, I32), pend = f.local(`${tag}pend`, I32);
  const r = f.local(`${tag}r`, F32);
  return [
    set(pa, get(a)), set(pb, get(b)),
    set(pend, i32.add(get(a), i32.shl(i32.and(n, i32.const(-16)), i32.const(2)))),
    ...acc.map((x) => set(x, VEC.zero)),
    block(loop(br_if(1, i32.ge_u(get(pa), get(pend))),
      ...acc.map((x, m) => set(x, c.madd.v(v128.load(get(pa), 16 * m), v128.load(get(pb), 16 * m), get(x)))),
      inc(pa, 64), inc(pb, 64), br(0))),
    set(r, c.finalize(f, 'id', acc, tag)),
    set(pend, i32.add(get(a), i32.shl(n, i32.const(2)))),
    block(loop(br_if(1, i32.ge_u(get(pa), get(pend))),
      set(r, c.madd.s(f32.load(get(pa)), f32.load(get(pb)), get(r))),
      inc(pa, 4), inc(pb, 4), br(0))),
    get(r),
  ];
}

/** The module's rms_norm_row(x, w, n, epsPtr, out), added on first use: one row's RMSNorm in place
 *  (model/ops.ts rmsNorm): ss and r in f64, out = f32(w · f32(v · r)). */
export function rmsRow(c: EmitCtx): number {
  return c.fn('rms_norm_row', () => {
    const f = c.fnx('rms_norm_row', { x: I32, w: I32, n: I32, epsPtr: I32, out: I32 }, null, false);
    const A = param(f);
    const i = f.local('i', I32), end = f.local('end', I32);
    const ss = f.local('ss', F64), v = f.local('v', F64), r = f.local('r', F64);
    // (out may be x: each element is read before its own write)
    f.body = [
      set(end, i32.shl(A('n'), i32.const(2))),
      set(ss, f64.const(0)),
      set(i, i32.const(0)),
      block(loop(br_if(1, i32.ge_u(get(i), get(end))),
        set(v, f64.promote_f32(f32.load(i32.add(A('x'), get(i))))),
        set(ss, f64.add(get(ss), f64.mul(get(v), get(v)))),
        inc(i, 4), br(0))),
      set(r, f64.div(f64.const(1), f64.sqrt(f64.add(f64.div(get(ss), f64.convert_i32_s(A('n'))), f64.load(A('epsPtr')))))),
      set(i, i32.const(0)),
      block(loop(br_if(1, i32.ge_u(get(i), get(end))),
        f32.store(i32.add(A('out'), get(i)), f32.mul(f32.load(i32.add(A('w'), get(i))),
          f32.demote_f64(f64.mul(f64.promote_f32(f32.load(i32.add(A('x'), get(i)))), get(r))))),
        inc(i, 4), br(0))),
    ];
    return f;
  });
}
