// mla_scores: MLA scores of heads [h0, h1) over n cached positions (reference: mlaScoresRef in
// src/graph/reference.ts). Per head h and position s < n:
//   out[h*n + s] = f32(f64(f32(dot(qlat_h, lat_s) + dot(qrope_h, rope_s))) * tau)
// with dot the canonical 16-lane dot of ref.ts and tau the f64 at scalePtr (the JavaScript
// multiplies an f32 by a double and rounds once to f32; so does this, through f64).

import { type Code, I32, F64, get, set, block, loop, br, br_if, i32, f32, f64 } from '../wasm/emit.js';
import { inc, dot } from './kit.js';
import type { OpDef } from './op.js';

export const MLA_SCORES: OpDef = {
  name: 'mla_scores',
  summary: 'MLA scores of each head over the latent cache',
  args: [
    { name: 'qlat', kind: 'f32', shape: 'H*Lk', io: 'in' },
    { name: 'qrope', kind: 'f32', shape: 'H*dr', io: 'in', doc: 'head h at qrope + h*qropeStride' },
    { name: 'qropeStride', kind: 'bytes', value: '4*dr' },
    { name: 'lat', kind: 'f32', shape: 'n*Lk', io: 'in' },
    { name: 'rope', kind: 'f32', shape: 'n*dr', io: 'in' },
    { name: 'n', kind: 'int' },
    { name: 'Lk', kind: 'int' },
    { name: 'dr', kind: 'int' },
    { name: 'scalePtr', kind: 'f64', shape: '1', io: 'in', draw: [0.05, 0.2] },
    { name: 'out', kind: 'f32', shape: 'H*n', io: 'out' },
  ],
  split: { unit: 'heads', range: 'H' },
  place: 'lat and rope (the cache) in kernel memory, else the reference runs; queries are copied in',
  dims: { H: [1, 3], n: [1, 9], Lk: [1, 70], dr: [1, 20] },
  ref: {
    name: 'mlaScoresRef (src/graph/reference.ts)',
    fns: { mlaScoresRef: 'graph/reference.js' },
    run(f, a, { H, n, Lk, dr }) {
      f.mlaScoresRef!(a.qlat, a.qrope, 0, dr, a.lat, a.rope, n, Lk, dr, (a.scalePtr as Float64Array)[0], H, a.out);
    },
  },
  emit(cx) {
    const f = cx.fnx('mla_scores', { qlat: I32, qrope: I32, qropeStride: I32, lat: I32, rope: I32, n: I32, Lk: I32, dr: I32, scalePtr: I32, out: I32, h0: I32, h1: I32 });
    const P = (n: string): Code => get(f.p(n));
    const h = f.local('h', I32), qa = f.local('qa', I32), qr = f.local('qr', I32), op = f.local('op', I32), oend = f.local('oend', I32);
    const lp = f.local('lp', I32), rp = f.local('rp', I32), lk4 = f.local('lk4', I32), dr4 = f.local('dr4', I32);
    const tau = f.local('tau', F64);
    f.body = [
      set(lk4, i32.shl(P('Lk'), i32.const(2))),
      set(dr4, i32.shl(P('dr'), i32.const(2))),
      set(tau, f64.load(P('scalePtr'))),
      set(h, P('h0')),
      block(loop(br_if(1, i32.ge_u(get(h), P('h1'))),
        set(qa, i32.add(P('qlat'), i32.mul(get(h), get(lk4)))),
        set(qr, i32.add(P('qrope'), i32.mul(get(h), P('qropeStride')))),
        set(op, i32.add(P('out'), i32.shl(i32.mul(get(h), P('n')), i32.const(2)))),
        set(oend, i32.add(get(op), i32.shl(P('n'), i32.const(2)))),
        set(lp, P('lat')), set(rp, P('rope')),
        block(loop(br_if(1, i32.ge_u(get(op), get(oend))),
          f32.store(get(op), f32.demote_f64(f64.mul(f64.promote_f32(f32.add(dot(cx, f, qa, lp, P('Lk'), 'l'), dot(cx, f, qr, rp, P('dr'), 'r'))), get(tau)))),
          inc(op, 4), inc(lp, get(lk4)), inc(rp, get(dr4)), br(0))),
        inc(h, 1), br(0))),
    ];
  },
};
