// matmul: y[t, r] = W[r, :] · x[t, :] for t < T and rows [r0, r1), the kernel mm_<fmt> of FMTS[fmt]
// (wasm/kernels.ts; reference: matmul in kernels/ref.ts). Emitted with the module's matmuls, not here.

import { FMTS } from '../wasm/gen.js';
import type { OpDef } from './op.js';

/** A claimed piece of a matmul is at least this many multiply-adds (a few microseconds), so the
 *  claims (one compare-exchange each) cost little next to the products. */
const MIN_PIECE_MACS = 1 << 15;

export const MATMUL: OpDef = {
  name: 'matmul',
  summary: 'Product of a weight matrix (any format) with T activation rows',
  args: [
    { name: 'fmt', kind: 'int', doc: 'index into FMTS' },
    { name: 'w', kind: 'u8', shape: 'rows*cols in the format', io: 'in', doc: 'weight data' },
    { name: 's', kind: 'u8', shape: 'scales of the format', io: 'in', doc: 'scales, or a panel word' },
    { name: 'sdt', kind: 'int', doc: 'scale dtype, or Q8_SDT / Q7_SDT / PANEL_SDT' },
    { name: 'rows', kind: 'int' },
    { name: 'cols', kind: 'int' },
    { name: 'x', kind: 'f32', shape: 'T*cols', io: 'in', doc: 'laid out for the kernel (prep, or layout.ts stageX)' },
    { name: 'T', kind: 'int' },
    { name: 'y', kind: 'f32', shape: 'T*rows', io: 'out' },
  ],
  split: { unit: 'rows (claimed in pairs)', range: 'rows' },
  place: 'the weight in kernel memory runs in place (else copied per call); x laid out in the arena',
  refNote: 'matmul (src/kernels/ref.ts); test/kernels/kernels.test.ts, test/kernels/fast-trunk.test.ts, test/kernels/fast-experts.test.ts',
  bind(ex) {
    const mm = FMTS.map((f) => ex[`mm_${f}`]!);
    return (c, o, a, b, scratch) => {
      mm[c[o + 1]!]!(c[o + 2]!, c[o + 3]!, c[o + 4]!, c[o + 5]!, c[o + 6]!, c[o + 7]!, c[o + 8]!, c[o + 9]!, a, b, scratch);
    };
  },
  // an even number of rows (the tiled kernel takes rows in pairs), enough work each
  claim: { gran: 2, min: (c, o) => Math.max(2, Math.ceil(MIN_PIECE_MACS / Math.max(1, c[o + 6]! * c[o + 8]!))) },
};
