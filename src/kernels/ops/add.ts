// add_inplace: a += b element-wise in f32, elements [i0, i1) (reference: addInPlace in
// src/model/ops.ts; a residual add), 4 lanes at a time, then 1: each element is one f32 addition.

import { I32, get, set, i32 } from '../wasm/emit.js';
import { ROW_TILES, columnTiles, param } from './kit.js';
import type { OpDef } from './op.js';

export const ADD: OpDef = {
  name: 'add_inplace',
  summary: 'Element-wise sum in place (a residual add)',
  args: [
    { name: 'a', kind: 'f32', shape: 'N', io: 'inout' },
    { name: 'b', kind: 'f32', shape: 'N', io: 'in' },
  ],
  split: { unit: 'elements', range: 'N' },
  place: 'none: arrays outside kernel memory are copied in (and a out)',
  dims: { N: [1, 100] },
  ref: {
    name: 'addInPlace (src/model/ops.ts)',
    fns: { addInPlace: 'model/ops.js' },
    run(f, a) {
      f.addInPlace!(a.a, a.b);
    },
  },
  emit(cx) {
    const f = cx.fnx('add_inplace', { a: I32, b: I32, i0: I32, i1: I32 });
    const A = param(f);
    const pa = f.local('pa', I32), pb = f.local('pb', I32), nb = f.local('nb', I32), j = f.local('j', I32), jend = f.local('jend', I32);
    const at = (p: number): ReturnType<typeof get> => i32.add(get(p), get(j));
    f.body = [
      set(pa, i32.add(A('a'), i32.shl(A('i0'), i32.const(2)))),
      set(pb, i32.add(A('b'), i32.shl(A('i0'), i32.const(2)))),
      set(nb, i32.shl(i32.sub(A('i1'), A('i0')), i32.const(2))),
      ...columnTiles(j, nb, jend, ROW_TILES, ({ lane: L }) => [L.store(at(pa), L.add(L.load(at(pa)), L.load(at(pb))))]),
    ];
  },
};
