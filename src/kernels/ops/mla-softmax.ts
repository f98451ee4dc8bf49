// mla_softmax: the softmax of each head's n scores in place, heads [h0, h1) (reference:
// mlaSoftmaxRef in src/graph/reference.ts): max, ex_s = exp(sc_s - max) (Math.exp, imported) kept at
// ex + 8hn, Z = sum ex_s in f64, s ascending from +0, sc_s = f32(ex_s / Z).

import { type Code, I32, F64, get, set, block, loop, br, br_if, call, select, i32, f32, f64 } from '../wasm/emit.js';
import { inc } from './kit.js';
import type { OpDef } from './op.js';

export const MLA_SOFTMAX: OpDef = {
  name: 'mla_softmax',
  summary: 'MLA: softmax of each head\'s scores, in place',
  args: [
    { name: 'sc', kind: 'f32', shape: 'H*n', io: 'inout', draw: [-4, 4] },
    { name: 'n', kind: 'int' },
    { name: 'ex', kind: 'f64', shape: 'H*n', io: 'scratch' },
  ],
  split: { unit: 'heads', range: 'H' },
  place: 'sc in kernel memory (an earlier step\'s scores)',
  dims: { H: [1, 3], n: [1, 40] },
  ref: {
    name: 'mlaSoftmaxRef (src/graph/reference.ts)',
    fns: { mlaSoftmaxRef: 'graph/reference.js' },
    run(f, a, { H, n }) {
      f.mlaSoftmaxRef!(a.sc, n, H);
    },
  },
  emit(cx) {
    // per head h: the n scores at sc + 4hn: max; ex_s = exp(sc_s - max) and Z = sum ex_s in f64,
    // s ascending from +0 (ex kept at ex + 8hn); sc_s = f32(ex_s / Z) (mla.ts attend)
    const f = cx.fnx('mla_softmax', { sc: I32, n: I32, ex: I32, h0: I32, h1: I32 });
    const A = (n: string): Code => get(f.p(n));
    const h = f.local('h', I32), s = f.local('s', I32), b = f.local('b', I32), e = f.local('e', I32);
    const mx = f.local('mx', F64), Z = f.local('Z', F64), v = f.local('v', F64);
    const overS = (...body: Code[]): Code[] => [set(s, i32.const(0)), block(loop(br_if(1, i32.ge_u(get(s), A('n'))), ...body, inc(s, 1), br(0)))];
    const scAt = (): Code => i32.add(get(b), i32.shl(get(s), i32.const(2)));
    const exAt = (): Code => i32.add(get(e), i32.shl(get(s), i32.const(3)));
    f.body = [
      set(h, A('h0')),
      block(loop(br_if(1, i32.ge_u(get(h), A('h1'))),
        set(b, i32.add(A('sc'), i32.shl(i32.mul(get(h), A('n')), i32.const(2)))),
        set(e, i32.add(A('ex'), i32.shl(i32.mul(get(h), A('n')), i32.const(3)))),
        set(mx, f64.const(-Infinity)),
        ...overS(set(v, f64.promote_f32(f32.load(scAt()))), set(mx, select(get(v), get(mx), f64.gt(get(v), get(mx))))),
        set(Z, f64.const(0)),
        ...overS(set(v, call(cx.expFn, f64.sub(f64.promote_f32(f32.load(scAt())), get(mx)))), f64.store(exAt(), get(v)), set(Z, f64.add(get(Z), get(v)))),
        ...overS(f32.store(scAt(), f32.demote_f64(f64.div(f64.load(exAt()), get(Z))))),
        inc(h, 1), br(0))),
    ];
  },
};
