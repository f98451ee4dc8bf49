// rms_norm_rows: RMSNorm of rows [t0, t1) (reference: rmsNorm in src/graph/reference.ts). Per row t:
// ss = sum v*v, r = 1 / sqrt(ss / n + eps) in f64, out = f32(w[i] * f32(v * r)); row t of x at
// x + t*xStride, of out at out + t*outStride (out may be x). rms_norm_row (kit.ts) does one row.

import { type Code, I32, get, set, block, loop, br, br_if, call, i32 } from '../wasm/emit.js';
import { inc, rmsRow } from './kit.js';
import type { OpDef } from './op.js';

export const RMS_NORM: OpDef = {
  name: 'rms_norm_rows',
  summary: 'RMSNorm of rows',
  args: [
    { name: 'x', kind: 'f32', shape: 'T*n', io: 'in', doc: 'row t at x + t*xStride' },
    { name: 'xStride', kind: 'bytes', value: '4*n' },
    { name: 'w', kind: 'f32', shape: 'n', io: 'in' },
    { name: 'n', kind: 'int' },
    { name: 'epsPtr', kind: 'f64', shape: '1', io: 'in', draw: [1e-6, 1e-5] },
    { name: 'out', kind: 'f32', shape: 'T*n', io: 'out' },
    { name: 'outStride', kind: 'bytes', value: '4*n' },
  ],
  split: { unit: 'rows', range: 'T' },
  place: 'x from an earlier step, or copied in; w a constant in kernel memory',
  dims: { T: [1, 4], n: [1, 70] },
  ref: {
    name: 'rmsNorm (src/graph/reference.ts)',
    fns: { rmsNorm: 'graph/reference.js' },
    run(f, a, { T, n }) {
      f.rmsNorm!(a.x, T, n, a.w, (a.epsPtr as Float64Array)[0], a.out);
    },
  },
  emit(cx) {
    const row = rmsRow(cx); // (first: the module numbered it before rms_norm_rows)
    const f = cx.fnx('rms_norm_rows', { x: I32, xStride: I32, w: I32, n: I32, epsPtr: I32, out: I32, outStride: I32, t0: I32, t1: I32 });
    const A = (n: string): Code => get(f.p(n));
    const t = f.local('t', I32);
    f.body = [
      set(t, A('t0')),
      block(loop(br_if(1, i32.ge_u(get(t), A('t1'))),
        call(row, i32.add(A('x'), i32.mul(get(t), A('xStride'))), A('w'), A('n'), A('epsPtr'), i32.add(A('out'), i32.mul(get(t), A('outStride')))),
        inc(t, 1), br(0))),
    ];
  },
};
