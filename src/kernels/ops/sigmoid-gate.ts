// sigmoid_gate: MLA's output gate in place, elements [i0, i1) (reference: sigmoidGateRef in
// src/graph/reference.ts): out_i = f32(out_i * (1 / (1 + exp(-g_i)))), exp = Math.exp (imported).

import { type Code, I32, get, set, block, loop, br, br_if, call, i32, f32, f64 } from '../wasm/emit.js';
import { inc } from './kit.js';
import type { OpDef } from './op.js';

export const SIGMOID_GATE: OpDef = {
  name: 'sigmoid_gate',
  summary: 'MLA: the sigmoid output gate, in place',
  args: [
    { name: 'out', kind: 'f32', shape: 'N', io: 'inout' },
    { name: 'g', kind: 'f32', shape: 'N', io: 'in', draw: [-6, 6] },
  ],
  split: { unit: 'elements', range: 'N' },
  place: 'out and g in kernel memory (earlier steps\' outputs)',
  dims: { N: [1, 100] },
  ref: {
    name: 'sigmoidGateRef (src/graph/reference.ts)',
    fns: { sigmoidGateRef: 'graph/reference.js' },
    run(f, a, { N }) {
      f.sigmoidGateRef!(a.out, a.g, N);
    },
  },
  emit(cx) {
    // out_i = f32(out_i * (1 / (1 + exp(-g_i)))) for i in [i0, i1) (mla.ts's sigmoid output gate)
    const f = cx.fnx('sigmoid_gate', { out: I32, g: I32, i0: I32, i1: I32 });
    const A = (n: string): Code => get(f.p(n));
    const i = f.local('i', I32), end = f.local('end', I32), o = f.local('o', I32);
    f.body = [
      set(i, i32.shl(A('i0'), i32.const(2))),
      set(end, i32.shl(A('i1'), i32.const(2))),
      block(loop(br_if(1, i32.ge_u(get(i), get(end))),
        set(o, i32.add(A('out'), get(i))),
        f32.store(get(o), f32.demote_f64(f64.mul(f64.promote_f32(f32.load(get(o))),
          f64.div(f64.const(1), f64.add(f64.const(1), call(cx.expFn, f64.neg(f64.promote_f32(f32.load(i32.add(A('g'), get(i))))))))))),
        inc(i, 4), br(0))),
    ];
  },
};
