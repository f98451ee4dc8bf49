// gather_rows: rows copied by a table of addresses, rows [t0, t1) (reference: gatherRowsRef in
// src/graph/reference.ts: a MoE expert's tokens, back to back): the cols f32 at the i32 tab[t] copied to
// out + t*cols*4.

import { type Code, I32, get, set, block, loop, br, br_if, i32 } from '../wasm/emit.js';
import { columnTiles, ROW_TILES, inc } from './kit.js';
import type { OpDef } from './op.js';

export const GATHER_ROWS: OpDef = {
  name: 'gather_rows',
  summary: 'MoE: an expert\'s token rows gathered back to back',
  args: [
    { name: 'tab', kind: 'table', count: 'T', shape: 'cols', io: 'in' },
    { name: 'cols', kind: 'int' },
    { name: 'out', kind: 'f32', shape: 'T*cols', io: 'out' },
  ],
  split: { unit: 'rows', range: 'T' },
  place: 'the source rows in kernel memory (an earlier step\'s output)',
  dims: { T: [1, 6], cols: [1, 40] },
  ref: {
    name: 'gatherRowsRef (src/graph/reference.ts)',
    fns: { gatherRowsRef: 'graph/reference.js' },
    run(f, a, { cols }) {
      (a.tab as Float32Array[]).forEach((r, t) => f.gatherRowsRef!(r, [0], cols, (a.out as Float32Array).subarray(t * cols)));
    },
  },
  emit(cx) {
    const f = cx.fnx('gather_rows', { tab: I32, cols: I32, out: I32, t0: I32, t1: I32 });
    const A = (n: string): Code => get(f.p(n));
    const t = f.local('t', I32), src = f.local('src', I32), dst = f.local('dst', I32), i = f.local('i', I32), iend = f.local('iend', I32), rowb = f.local('rowb', I32);
    f.body = [
      set(rowb, i32.shl(A('cols'), i32.const(2))),
      set(t, A('t0')),
      block(loop(br_if(1, i32.ge_u(get(t), A('t1'))),
        set(src, i32.load(i32.add(A('tab'), i32.shl(get(t), i32.const(2))))),
        set(dst, i32.add(A('out'), i32.mul(get(t), get(rowb)))),
        ...columnTiles(i, rowb, iend, ROW_TILES, ({ lane: L }) => [L.store(i32.add(get(dst), get(i)), L.load(i32.add(get(src), get(i))))]),
        inc(t, 1), br(0))),
    ];
  },
};
