// attnres_sum: the depth mix of Attention Residuals, tokens [t0, t1) (reference: attnResMix in
// src/graph/reference.ts, its weighted sum): out[t*D + d] = f32(sum_i pi[t*m + i] * c_i[t*D + d]),
// i ascending from +0, in f64 (pi f64, the softmax of attnres_scores).

import { type Code, I32, F64, get, set, block, loop, br, br_if, i32, f32, f64 } from '../wasm/emit.js';
import { inc } from './kit.js';
import type { OpDef } from './op.js';

export const ATTNRES_SUM: OpDef = {
  name: 'attnres_sum',
  summary: 'Attention Residuals: the weighted sum of the candidates',
  args: [
    { name: 'cands', kind: 'table', count: 'm', shape: 'T*D', io: 'in' },
    { name: 'm', kind: 'int' },
    { name: 'D', kind: 'int' },
    { name: 'pi', kind: 'f64', shape: 'T*m', io: 'in', draw: [0, 1] },
    { name: 'out', kind: 'f32', shape: 'T*D', io: 'out' },
  ],
  split: { unit: 'tokens', range: 'T' },
  place: 'none: candidates are copied in when outside',
  dims: { T: [1, 4], m: [1, 4], D: [1, 40] },
  ref: {
    name: 'attnResMix (src/graph/reference.ts), its weighted sum',
    fns: {},
    run(_f, a, { T, m, D }) {
      const c = a.cands as Float32Array[], pi = a.pi as Float64Array, out = a.out as Float32Array;
      for (let t = 0; t < T; t++) {
        for (let d = 0; d < D; d++) {
          let acc = 0;
          for (let i = 0; i < m; i++) acc += pi[t * m + i]! * c[i]![t * D + d]!;
          out[t * D + d] = acc;
        }
      }
    },
  },
  emit(cx) {
    const f = cx.fnx('attnres_sum', { cands: I32, m: I32, D: I32, pi: I32, out: I32, t0: I32, t1: I32 });
    const A = (n: string): Code => get(f.p(n));
    const t = f.local('t', I32), i = f.local('i', I32), d = f.local('d', I32), off = f.local('off', I32), pp = f.local('pp', I32);
    const acc = f.local('acc', F64);
    f.body = [
      set(t, A('t0')),
      block(loop(br_if(1, i32.ge_u(get(t), A('t1'))),
        set(pp, i32.add(A('pi'), i32.shl(i32.mul(get(t), A('m')), i32.const(3)))),
        set(d, i32.const(0)),
        block(loop(br_if(1, i32.ge_u(get(d), A('D'))),
          set(off, i32.shl(i32.add(i32.mul(get(t), A('D')), get(d)), i32.const(2))),
          set(acc, f64.const(0)),
          set(i, i32.const(0)),
          block(loop(br_if(1, i32.ge_u(get(i), A('m'))),
            set(acc, f64.add(get(acc), f64.mul(f64.load(i32.add(get(pp), i32.shl(get(i), i32.const(3)))),
              f64.promote_f32(f32.load(i32.add(i32.load(i32.add(A('cands'), i32.shl(get(i), i32.const(2)))), get(off))))))),
            inc(i, 1), br(0))),
          f32.store(i32.add(A('out'), get(off)), f32.demote_f64(get(acc))),
          inc(d, 1), br(0))),
        inc(t, 1), br(0))),
    ];
  },
};
