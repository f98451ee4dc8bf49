// mvt: transposed products of several heads (absorbed MLA), the kernel mvT_<fmt> of FMTS[fmt] once
// per head (wasm/kernels.ts; reference: matvecT in kernels/ref.ts): head h is rows r0 + h*rStride
// .. + n of w, transposed, times x at x + h*xStride, into y at y + h*yStride.

import { FMTS } from '../wasm/gen.js';
import type { OpDef } from './op.js';

export const MVT: OpDef = {
  name: 'mvt',
  summary: 'Transposed products of several heads (absorbed MLA)',
  args: [
    { name: 'fmt', kind: 'int', doc: 'index into FMTS' },
    { name: 'w', kind: 'u8', shape: 'rows*cols in the format', io: 'in' },
    { name: 's', kind: 'u8', shape: 'scales of the format', io: 'in' },
    { name: 'sdt', kind: 'int' },
    { name: 'rows', kind: 'int' },
    { name: 'cols', kind: 'int' },
    { name: 'r0', kind: 'int' },
    { name: 'rStride', kind: 'int', doc: 'rows' },
    { name: 'n', kind: 'int' },
    { name: 'x', kind: 'f32', shape: 'H*n', io: 'in', doc: 'head h at x + h*xStride' },
    { name: 'xStride', kind: 'bytes', value: '4*n' },
    { name: 'y', kind: 'f32', shape: 'H*cols', io: 'out', doc: 'head h at y + h*yStride' },
    { name: 'yStride', kind: 'bytes', value: '4*cols' },
  ],
  split: { unit: 'heads', range: 'H' },
  place: 'the weight in kernel memory (else the reference runs); x is copied in when outside',
  refNote: 'matvecT (src/kernels/ref.ts), per head; test/kernels/kernels.test.ts',
  bind(ex) {
    const mvT = FMTS.map((f) => ex[`mvT_${f}`]!);
    return (c, o, a, b, scratch) => {
      const f = mvT[c[o + 1]!]!;
      for (let h = a; h < b; h++) {
        f(c[o + 2]!, c[o + 3]!, c[o + 4]!, c[o + 5]!, c[o + 6]!, c[o + 7]! + h * c[o + 8]!, c[o + 9]!, c[o + 10]! + h * c[o + 11]!, c[o + 12]! + h * c[o + 13]!, scratch);
      }
    };
  },
};
