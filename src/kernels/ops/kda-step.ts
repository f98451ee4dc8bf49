// kda_step: one KDA delta-rule step of a token, heads [h0, h1) (reference: kdaRecurStep in
// src/graph/reference.ts). Per head h, with S_h = S[h] [d, d] (rows i = key channel, columns j = value
// channel), q/k/v/alpha/o at h*d, beta[h] a scalar:
//   S_ij = f32(S_ij * a_i);  u_j = sum_i f32(k_i S_ij) (i ascending, from +0);  e_j = v_j - u_j;
//   S_ij = f32(S_ij + f32(f32(k_i beta) e_j));  o_j = sum_i f32(q_i S_ij) (i ascending, from +0).
// Columns are independent, so the kernel walks them in tiles (16, then 4, then 1) and, for one
// tile, runs the decay + u pass and the update + o pass down the rows: every element sees the
// reference's operations in its order, the accumulators stay in registers, and S is read and
// written twice instead of four times.

import { type Code, I32, F32, get, set, tee, block, loop, br, br_if, i32, f32 } from '../wasm/emit.js';
import { columnTiles, type Tile, inc, tilesOf } from './kit.js';
import type { OpDef } from './op.js';

export const KDA_STEP: OpDef = {
  name: 'kda_step',
  summary: 'KDA delta rule of one token, in place on the state',
  args: [
    { name: 'S', kind: 'f32', shape: 'H*d*d', io: 'inout', draw: [-0.5, 0.5] },
    { name: 'q', kind: 'f32', shape: 'H*d', io: 'in' },
    { name: 'k', kind: 'f32', shape: 'H*d', io: 'in' },
    { name: 'v', kind: 'f32', shape: 'H*d', io: 'in', draw: [-2, 2] },
    { name: 'alpha', kind: 'f32', shape: 'H*d', io: 'in', draw: [0.5, 1] },
    { name: 'beta', kind: 'f32', shape: 'H', io: 'in', draw: [0, 1] },
    { name: 'o', kind: 'f32', shape: 'H*d', io: 'out' },
    { name: 'd', kind: 'int' },
  ],
  split: { unit: 'heads', range: 'H' },
  place: 'S in kernel memory to run in place (else the reference, kdaRecurStep); the rest is copied in',
  dims: { H: [1, 3], d: [1, 40] },
  ref: {
    name: 'kdaRecurStep (src/graph/reference.ts), per head',
    fns: { kdaRecurStep: 'graph/reference.js' },
    run(f, a, { H, d }) {
      const u = new Float32Array(d);
      for (let h = 0; h < H; h++) f.kdaRecurStep!(a.S, h * d * d, d, a.q, a.k, a.v, a.alpha, (a.beta as Float32Array)[h], a.o, h * d, u);
    },
  },
  emit(cx) {
    const f = cx.fnx('kda_step', { S: I32, q: I32, k: I32, v: I32, alpha: I32, beta: I32, o: I32, d: I32, h0: I32, h1: I32 });
    const P = (n: string): Code => get(f.p(n));
    const h = f.local('h', I32), so = f.local('so', I32), hb = f.local('hb', I32), d4 = f.local('d4', I32);
    const j = f.local('j', I32), jend = f.local('jend', I32), p = f.local('p', I32);
    const kp = f.local('kp', I32), ap = f.local('ap', I32), qp = f.local('qp', I32), iend = f.local('iend', I32);
    const betaF = f.local('betaF', F32);
    const tile = (t: Tile): Code[] => {
      const L = t.lane, B = L.bytes;
      const acc = Array.from({ length: t.units }, (_, m) => f.local(`${t.tag}acc${m}`, L.T));
      const e = Array.from({ length: t.units }, (_, m) => f.local(`${t.tag}e${m}`, L.T));
      const s = f.local(`${t.tag}s`, L.T), a = f.local(`${t.tag}a`, L.T), x = f.local(`${t.tag}x`, L.T);
      const bs = f.local(`${t.tag}bs`, L.T);
      return [
        set(bs, L.splat(get(betaF))),
        // pass 1: decay the rows of the tile and accumulate u = S^T k (rows ascending)
        set(p, i32.add(get(so), get(j))),
        set(kp, i32.add(P('k'), get(hb))),
        set(ap, i32.add(P('alpha'), get(hb))),
        set(iend, i32.add(get(kp), get(d4))),
        ...acc.map((u) => set(u, L.zero)),
        block(loop(br_if(1, i32.ge_u(get(kp), get(iend))),
          set(a, L.bcast(get(ap))),
          set(x, L.bcast(get(kp))),
          ...acc.flatMap((u, m) => [
            L.store(get(p), tee(s, L.mul(L.load(get(p), m * B), get(a))), m * B),
            set(u, L.add(get(u), L.mul(get(x), get(s)))),
          ]),
          inc(p, get(d4)), inc(kp, 4), inc(ap, 4), br(0))),
        // e = v - u
        ...e.map((ev, m) => set(ev, L.sub(L.load(i32.add(i32.add(P('v'), get(hb)), get(j)), m * B), get(acc[m]!)))),
        // pass 2: S += f32(k_i beta) e, and o = S^T q (rows ascending)
        set(p, i32.add(get(so), get(j))),
        set(kp, i32.add(P('k'), get(hb))),
        set(qp, i32.add(P('q'), get(hb))),
        ...acc.map((u) => set(u, L.zero)),
        block(loop(br_if(1, i32.ge_u(get(kp), get(iend))),
          set(a, L.mul(L.bcast(get(kp)), get(bs))),
          set(x, L.bcast(get(qp))),
          ...acc.flatMap((u, m) => [
            L.store(get(p), tee(s, L.add(L.load(get(p), m * B), L.mul(get(a), get(e[m]!)))), m * B),
            set(u, L.add(get(u), L.mul(get(x), get(s)))),
          ]),
          inc(p, get(d4)), inc(kp, 4), inc(qp, 4), br(0))),
        ...acc.map((u, m) => L.store(i32.add(i32.add(P('o'), get(hb)), get(j)), get(u), m * B)),
      ];
    };
    f.body = [
      set(d4, i32.shl(P('d'), i32.const(2))),
      set(h, P('h0')),
      block(loop(br_if(1, i32.ge_u(get(h), P('h1'))),
        set(so, i32.add(P('S'), i32.mul(i32.mul(get(h), P('d')), get(d4)))),
        set(hb, i32.mul(get(h), get(d4))),
        set(betaF, f32.load(i32.add(P('beta'), i32.shl(get(h), i32.const(2))))),
        ...columnTiles(j, d4, jend, tilesOf(cx.opts.kdaTile ?? 16, 'k'), tile),
        inc(h, 1), br(0))),
    ];
  },
};
