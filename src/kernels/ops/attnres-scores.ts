// attnres_scores: the depth scores of Attention Residuals, tokens [t0, t1) (reference: attnResMix
// in src/graph/reference.ts, its scores). Per token t and candidate i < m (candidate i's rows start
// at the i32 cands[i]; token t's at + t*D*4), in f64 from the f32 values, d ascending from +0:
//   ss = sum c[d]*c[d];  r = 1 / sqrt(ss / D + eps);  scores[t*m + i] = sum (c[d]*r) * fold[d]
// with eps the f64 at epsPtr: the operations the JavaScript does on doubles, in its order.

import { type Code, I32, F64, get, set, block, loop, br, br_if, i32, f32, f64 } from '../wasm/emit.js';
import { inc } from './kit.js';
import type { OpDef } from './op.js';

export const ATTNRES_SCORES: OpDef = {
  name: 'attnres_scores',
  summary: 'Attention Residuals: the depth scores of each token',
  args: [
    { name: 'cands', kind: 'table', count: 'm', shape: 'T*D', io: 'in' },
    { name: 'm', kind: 'int' },
    { name: 'D', kind: 'int' },
    { name: 'fold', kind: 'f32', shape: 'D', io: 'in' },
    { name: 'epsPtr', kind: 'f64', shape: '1', io: 'in', draw: [1e-6, 1e-5] },
    { name: 'scores', kind: 'f64', shape: 'T*m', io: 'out' },
  ],
  split: { unit: 'tokens', range: 'T' },
  place: 'none: candidates and fold are copied in when outside',
  dims: { T: [1, 4], m: [1, 4], D: [1, 40] },
  ref: {
    name: 'attnResMix (src/graph/reference.ts), its scores',
    fns: {},
    run(_f, a, { T, m, D }) {
      const c = a.cands as Float32Array[], fold = a.fold as Float32Array, out = a.scores as Float64Array, eps = (a.epsPtr as Float64Array)[0]!;
      for (let t = 0; t < T; t++) {
        for (let i = 0; i < m; i++) {
          const row = c[i]!.subarray(t * D, (t + 1) * D);
          let ss = 0, sc = 0;
          for (const v of row) ss += v * v;
          const r = 1 / Math.sqrt(ss / D + eps);
          row.forEach((v, d) => (sc += v * r * fold[d]!));
          out[t * m + i] = sc;
        }
      }
    },
  },
  emit(cx) {
    const f = cx.fnx('attnres_scores', { cands: I32, m: I32, D: I32, fold: I32, epsPtr: I32, scores: I32, t0: I32, t1: I32 });
    const A = (n: string): Code => get(f.p(n));
    const t = f.local('t', I32), i = f.local('i', I32), c = f.local('c', I32), fp = f.local('fp', I32), cend = f.local('cend', I32);
    const rowb = f.local('rowb', I32), sp = f.local('sp', I32);
    const ss = f.local('ss', F64), r = f.local('r', F64), sc = f.local('sc', F64), v = f.local('v', F64), eps = f.local('eps', F64), Df = f.local('Df', F64);
    f.body = [
      set(eps, f64.load(A('epsPtr'))),
      set(Df, f64.convert_i32_s(A('D'))),
      set(rowb, i32.shl(A('D'), i32.const(2))),
      set(t, A('t0')),
      block(loop(br_if(1, i32.ge_u(get(t), A('t1'))),
        set(sp, i32.add(A('scores'), i32.shl(i32.mul(get(t), A('m')), i32.const(3)))),
        set(i, i32.const(0)),
        block(loop(br_if(1, i32.ge_u(get(i), A('m'))),
          set(c, i32.add(i32.load(i32.add(A('cands'), i32.shl(get(i), i32.const(2)))), i32.mul(get(t), get(rowb)))),
          set(cend, i32.add(get(c), get(rowb))),
          set(ss, f64.const(0)),
          set(fp, get(c)),
          block(loop(br_if(1, i32.ge_u(get(fp), get(cend))),
            set(v, f64.promote_f32(f32.load(get(fp)))),
            set(ss, f64.add(get(ss), f64.mul(get(v), get(v)))),
            inc(fp, 4), br(0))),
          set(r, f64.div(f64.const(1), f64.sqrt(f64.add(f64.div(get(ss), get(Df)), get(eps))))),
          set(sc, f64.const(0)),
          set(fp, A('fold')),
          block(loop(br_if(1, i32.ge_u(get(c), get(cend))),
            set(sc, f64.add(get(sc), f64.mul(f64.mul(f64.promote_f32(f32.load(get(c))), get(r)), f64.promote_f32(f32.load(get(fp)))))),
            inc(c, 4), inc(fp, 4), br(0))),
          f64.store(i32.add(get(sp), i32.shl(get(i), i32.const(3))), get(sc)),
          inc(i, 1), br(0))),
        inc(t, 1), br(0))),
    ];
  },
};
