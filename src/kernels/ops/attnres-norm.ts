// attnres_norm: a block's input, tokens [t0, t1) (reference: attnResMix then rmsNorm, as k3.ts
// feeds a block: blockInput in src/model/block-input.ts). Per token t: unless fold is 0,
// attnres_scores into scores[t*m ..], depthSoftmax (kernels/ref.ts) on them with Math.exp (the
// imported env.exp) in its order, attnres_sum into out; with fold 0, candidate 0's row copied (no
// mix). Then the row's RMSNorm in place with the f32 weights at norm and the f64 eps at epsPtr + 8
// (the mix's at epsPtr).

import { type Code, I32, F64, get, set, block, loop, br, br_if, call, if_, select, i32, f32, f64 } from '../wasm/emit.js';
import { inc, rmsRow } from './kit.js';
import type { OpDef } from './op.js';

export const ATTNRES_NORM: OpDef = {
  name: 'attnres_norm',
  summary: 'A block\'s input: the Attention Residuals mix, then RMSNorm',
  args: [
    { name: 'cands', kind: 'table', count: 'm', shape: 'T*D', io: 'in', doc: 'the snapshots, then the current stream' },
    { name: 'm', kind: 'int' },
    { name: 'D', kind: 'int' },
    { name: 'fold', kind: 'f32', shape: 'D', io: 'in', doc: '0: no mix (m = 1)' },
    { name: 'epsPtr', kind: 'f64', shape: '2', io: 'in', draw: [1e-6, 1e-5], doc: 'the mix\'s eps, the norm\'s' },
    { name: 'norm', kind: 'f32', shape: 'D', io: 'in' },
    { name: 'scores', kind: 'f64', shape: 'T*m', io: 'scratch' },
    { name: 'out', kind: 'f32', shape: 'T*D', io: 'out' },
  ],
  split: { unit: 'tokens', range: 'T' },
  place: 'fold and norm in kernel memory (placed before the chain); candidates outside it are copied in',
  dims: { T: [1, 4], m: [1, 4], D: [1, 40] },
  ref: {
    name: 'blockInput (src/model/block-input.ts): attnResMix, then rmsNorm',
    fns: { attnResMix: 'graph/reference.js', rmsNorm: 'graph/reference.js' },
    run(f, a, { T, m, D }) {
      const c = a.cands as Float32Array[], eps = a.epsPtr as Float64Array;
      f.rmsNorm!(f.attnResMix!(c.slice(0, m - 1), c[m - 1], T, D, a.fold, eps[0]), T, D, a.norm, eps[1], a.out);
    },
  },
  emit(cx) {
    const f = cx.fnx('attnres_norm', { cands: I32, m: I32, D: I32, fold: I32, epsPtr: I32, norm: I32, scores: I32, out: I32, t0: I32, t1: I32 });
    const A = (n: string): Code => get(f.p(n));
    const t = f.local('t', I32), i = f.local('i', I32), sp = f.local('sp', I32), o = f.local('o', I32), c = f.local('c', I32), rowb = f.local('rowb', I32);
    const mx = f.local('mx', F64), Z = f.local('Z', F64), v = f.local('v', F64);
    const si = (): Code => i32.add(get(sp), i32.shl(get(i), i32.const(3)));
    const overScores = (...body: Code[]): Code[] => [set(i, i32.const(0)), block(loop(br_if(1, i32.ge_u(get(i), A('m'))), ...body, inc(i, 1), br(0)))];
    f.body = [
      set(rowb, i32.shl(A('D'), i32.const(2))),
      set(t, A('t0')),
      block(loop(br_if(1, i32.ge_u(get(t), A('t1'))),
        set(o, i32.add(A('out'), i32.mul(get(t), get(rowb)))),
        if_(i32.eqz(A('fold')), [
          // no mix (no snapshots yet): the current candidate itself
          set(c, i32.add(i32.load(A('cands')), i32.mul(get(t), get(rowb)))),
          set(i, i32.const(0)),
          block(loop(br_if(1, i32.ge_u(get(i), get(rowb))),
            f32.store(i32.add(get(o), get(i)), f32.load(i32.add(get(c), get(i)))),
            inc(i, 4), br(0))),
        ], [
          call(cx.fn('attnres_scores'), A('cands'), A('m'), A('D'), A('fold'), A('epsPtr'), A('scores'), get(t), i32.add(get(t), i32.const(1))),
          // depthSoftmax (kernels/ref.ts), its operations in its order, exp = Math.exp (imported)
          set(sp, i32.add(A('scores'), i32.shl(i32.mul(get(t), A('m')), i32.const(3)))),
          set(mx, f64.const(-Infinity)),
          ...overScores(set(v, f64.load(si())), set(mx, select(get(v), get(mx), f64.gt(get(v), get(mx))))),
          set(Z, f64.const(0)),
          ...overScores(set(v, call(cx.expFn, f64.sub(f64.load(si()), get(mx)))), f64.store(si(), get(v)), set(Z, f64.add(get(Z), get(v)))),
          ...overScores(f64.store(si(), f64.div(f64.load(si()), get(Z)))),
          call(cx.fn('attnres_sum'), A('cands'), A('m'), A('D'), A('scores'), A('out'), get(t), i32.add(get(t), i32.const(1))),
        ]),
        call(rmsRow(cx), get(o), A('norm'), A('D'), i32.add(A('epsPtr'), i32.const(8)), get(o)),
        inc(t, 1), br(0))),
    ];
  },
};
