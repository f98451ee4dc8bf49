// mla_append: MLA's latents of tokens [t0, t1) appended to the cache (reference: mlaAppendRef in
// src/graph/reference.ts, without rope): lat row t = RMSNorm of a row t [0, Lk), rope row t = a row t
// [Lk, Lk + dr).

import { type Code, I32, get, set, block, loop, br, br_if, call, i32, f32 } from '../wasm/emit.js';
import { inc, rmsRow } from './kit.js';
import type { OpDef } from './op.js';

export const MLA_APPEND: OpDef = {
  name: 'mla_append',
  summary: 'MLA: normalized latents and rope keys appended to the cache',
  args: [
    { name: 'a', kind: 'f32', shape: 'T*Lk+T*dr', io: 'in', doc: 'row t at a + t*aStride' },
    { name: 'aStride', kind: 'bytes', value: '4*Lk+4*dr' },
    { name: 'norm', kind: 'f32', shape: 'Lk', io: 'in' },
    { name: 'Lk', kind: 'int' },
    { name: 'dr', kind: 'int' },
    { name: 'epsPtr', kind: 'f64', shape: '1', io: 'in', draw: [1e-6, 1e-5] },
    { name: 'lat', kind: 'f32', shape: 'T*Lk', io: 'out' },
    { name: 'rope', kind: 'f32', shape: 'T*dr', io: 'out' },
  ],
  split: { unit: 'tokens', range: 'T' },
  place: 'a, norm and the cache rows lat, rope in kernel memory',
  dims: { T: [1, 4], Lk: [1, 70], dr: [1, 20] },
  ref: {
    name: 'mlaAppendRef (src/graph/reference.ts): rmsNorm of the latent part, the rope part copied',
    fns: { mlaAppendRef: 'graph/reference.js' },
    run(f, a, { T, Lk, dr }) {
      f.mlaAppendRef!(a.a, T, Lk, dr, a.norm, (a.epsPtr as Float64Array)[0], a.lat, a.rope);
    },
  },
  emit(cx) {
    // per token t: lat row t = RMSNorm(a row t [0, Lk)); rope row t = a row t [Lk, Lk + dr) (mlaAppendRef; rope, K2, is a later step)
    const f = cx.fnx('mla_append', { a: I32, aStride: I32, norm: I32, Lk: I32, dr: I32, epsPtr: I32, lat: I32, rope: I32, t0: I32, t1: I32 });
    const A = (n: string): Code => get(f.p(n));
    const t = f.local('t', I32), row = f.local('row', I32), src = f.local('src', I32), dst = f.local('dst', I32), end = f.local('end', I32);
    f.body = [
      set(t, A('t0')),
      block(loop(br_if(1, i32.ge_u(get(t), A('t1'))),
        set(row, i32.add(A('a'), i32.mul(get(t), A('aStride')))),
        call(rmsRow(cx), get(row), A('norm'), A('Lk'), A('epsPtr'), i32.add(A('lat'), i32.shl(i32.mul(get(t), A('Lk')), i32.const(2)))),
        set(src, i32.add(get(row), i32.shl(A('Lk'), i32.const(2)))),
        set(end, i32.add(get(src), i32.shl(A('dr'), i32.const(2)))),
        set(dst, i32.add(A('rope'), i32.shl(i32.mul(get(t), A('dr')), i32.const(2)))),
        block(loop(br_if(1, i32.ge_u(get(src), get(end))),
          f32.store(get(dst), f32.load(get(src))),
          inc(src, 4), inc(dst, 4), br(0))),
        inc(t, 1), br(0))),
    ];
  },
};
