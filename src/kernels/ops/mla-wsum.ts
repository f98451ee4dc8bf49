// mla_wsum: MLA's weighted latent sums of heads [h0, h1) (reference: mlaWeightedSumRef in
// src/graph/reference.ts): out[h*Lk + i] = sum_s f32(P[h*n + s] * lat[s*Lk + i]) for s ascending, from
// +0; vectorized over i (columns independent), tiles of 16, 4, then 1 columns (16 measured fastest).

import { type Code, I32, get, set, block, loop, br, br_if, i32 } from '../wasm/emit.js';
import { columnTiles, type Tile, inc, tilesOf } from './kit.js';
import type { OpDef } from './op.js';

export const MLA_WSUM: OpDef = {
  name: 'mla_wsum',
  summary: 'MLA: the probabilities times the latent cache, per head',
  args: [
    { name: 'P', kind: 'f32', shape: 'H*n', io: 'in', draw: [0, 1] },
    { name: 'lat', kind: 'f32', shape: 'n*Lk', io: 'in' },
    { name: 'n', kind: 'int' },
    { name: 'Lk', kind: 'int' },
    { name: 'out', kind: 'f32', shape: 'H*Lk', io: 'out' },
  ],
  split: { unit: 'heads', range: 'H' },
  place: 'lat (the cache) in kernel memory, else the reference runs; P is copied in',
  dims: { H: [1, 3], n: [1, 9], Lk: [1, 70] },
  ref: {
    name: 'mlaWeightedSumRef (src/graph/reference.ts)',
    fns: { mlaWeightedSumRef: 'graph/reference.js' },
    run(f, a, { H, n, Lk }) {
      f.mlaWeightedSumRef!(a.P, a.lat, n, Lk, H, a.out);
    },
  },
  emit(cx) {
    const f = cx.fnx('mla_wsum', { P: I32, lat: I32, n: I32, Lk: I32, out: I32, h0: I32, h1: I32 });
    const A = (n: string): Code => get(f.p(n));
    const h = f.local('h', I32), ph = f.local('ph', I32), oh = f.local('oh', I32), lk4 = f.local('lk4', I32);
    const j = f.local('j', I32), jend = f.local('jend', I32), p = f.local('p', I32), pp = f.local('pp', I32), pend = f.local('pend', I32);
    const tile = (t: Tile): Code[] => {
      const L = t.lane, B = L.bytes;
      const acc = Array.from({ length: t.units }, (_, m) => f.local(`${t.tag}acc${m}`, L.T));
      const x = f.local(`${t.tag}x`, L.T);
      return [
        ...acc.map((u) => set(u, L.zero)),
        set(p, i32.add(A('lat'), get(j))),
        set(pp, get(ph)),
        block(loop(br_if(1, i32.ge_u(get(pp), get(pend))),
          set(x, L.bcast(get(pp))),
          ...acc.map((u, m) => set(u, L.add(get(u), L.mul(get(x), L.load(get(p), m * B))))),
          inc(p, get(lk4)), inc(pp, 4), br(0))),
        ...acc.map((u, m) => L.store(i32.add(get(oh), get(j)), get(u), m * B)),
      ];
    };
    f.body = [
      set(lk4, i32.shl(A('Lk'), i32.const(2))),
      set(h, A('h0')),
      block(loop(br_if(1, i32.ge_u(get(h), A('h1'))),
        set(ph, i32.add(A('P'), i32.shl(i32.mul(get(h), A('n')), i32.const(2)))),
        set(pend, i32.add(get(ph), i32.shl(A('n'), i32.const(2)))),
        set(oh, i32.add(A('out'), i32.mul(get(h), get(lk4)))),
        ...columnTiles(j, lk4, jend, tilesOf(cx.opts.wsumTile ?? 16, 'w'), tile),
        inc(h, 1), br(0))),
    ];
  },
};
