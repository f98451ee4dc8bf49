// moe_combine: the routed outputs' weighted sum and latent norm of MoE tokens [t0, t1)
// (reference: moeCombineRef in src/graph/reference.ts). Per token t:
// out[t*zw + i] = sum_j f32(w_tj * y_tj[i]) in f32, j < K ascending from +0, with y_tj the row at
// the i32 ys[t*K + j] and w_tj the f32 wts[t*K + j]; then, unless norm is 0, ops.ts rmsNorm in
// place. Columns are independent, so each element's sum is the scalar one, 4 columns at a time.

import { type Code, I32, F32, V128, get, set, block, loop, br, br_if, call, i32, f32, f32x4 } from '../wasm/emit.js';
import { columnTiles, VEC, ROW_TILES, inc, rmsRow } from './kit.js';
import type { OpDef } from './op.js';

export const MOE_COMBINE: OpDef = {
  name: 'moe_combine',
  summary: 'MoE: routed expert outputs summed in router order, then the latent norm',
  args: [
    { name: 'ys', kind: 'table', count: 'T*K', shape: 'zw', io: 'in' },
    { name: 'wts', kind: 'f32', shape: 'T*K', io: 'in', draw: [0, 1] },
    { name: 'K', kind: 'int' },
    { name: 'zw', kind: 'int' },
    { name: 'norm', kind: 'f32', shape: 'zw', io: 'in', doc: '0: no norm' },
    { name: 'epsPtr', kind: 'f64', shape: '1', io: 'in', draw: [1e-6, 1e-5] },
    { name: 'out', kind: 'f32', shape: 'T*zw', io: 'out' },
  ],
  split: { unit: 'tokens', range: 'T' },
  place: 'the expert rows (earlier steps\' outputs) and norm in kernel memory; the tables are built in the arena',
  dims: { T: [1, 4], K: [1, 4], zw: [1, 40] },
  ref: {
    name: 'moeCombineRef (src/graph/reference.ts)',
    fns: { moeCombineRef: 'graph/reference.js' },
    run(f, a, { T, K, zw }) {
      f.moeCombineRef!(a.ys, a.wts, T, K, zw, a.norm, (a.epsPtr as Float64Array)[0], a.out);
    },
  },
  emit(cx) {
    const f = cx.fnx('moe_combine', { ys: I32, wts: I32, K: I32, zw: I32, norm: I32, epsPtr: I32, out: I32, t0: I32, t1: I32 });
    const A = (n: string): Code => get(f.p(n));
    // the row starts at +0 and takes the K terms in order, 4 columns at a time, then 1 (columns
    // are independent: each element's sum is the scalar one)
    const t = f.local('t', I32), i = f.local('i', I32), iend = f.local('iend', I32), j = f.local('j', I32), o = f.local('o', I32), tk = f.local('tk', I32), y = f.local('y', I32);
    const rowb = f.local('rowb', I32), wj = f.local('wj', F32), wv = f.local('wv', V128);
    const at = (k: Code): Code => i32.shl(i32.add(get(tk), k), i32.const(2));
    const oi = (): Code => i32.add(get(o), get(i)), yi = (): Code => i32.add(get(y), get(i));
    f.body = [
      set(rowb, i32.shl(A('zw'), i32.const(2))),
      set(t, A('t0')),
      block(loop(br_if(1, i32.ge_u(get(t), A('t1'))),
        set(o, i32.add(A('out'), i32.mul(get(t), get(rowb)))),
        set(tk, i32.mul(get(t), A('K'))),
        ...columnTiles(i, rowb, iend, ROW_TILES, ({ lane: L }) => [L.store(oi(), L.zero)]),
        set(j, i32.const(0)),
        block(loop(br_if(1, i32.ge_u(get(j), A('K'))),
          set(wj, f32.load(i32.add(A('wts'), at(get(j))))),
          set(wv, f32x4.splat(get(wj))),
          set(y, i32.load(i32.add(A('ys'), at(get(j))))),
          ...columnTiles(i, rowb, iend, ROW_TILES, ({ lane: L }) => [L.store(oi(), L.add(L.load(oi()), L.mul(get(L === VEC ? wv : wj), L.load(yi()))))]),
          inc(j, 1), br(0))),
        block(br_if(0, i32.eqz(A('norm'))), call(rmsRow(cx), get(o), A('norm'), A('zw'), A('epsPtr'), get(o))),
        inc(t, 1), br(0))),
    ];
  },
};
