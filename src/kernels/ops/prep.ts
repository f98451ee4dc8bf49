// prep: activations laid out for a matmul inside a chained dispatch (Kernels.gatedMlpBatch): one
// unit, the layout (permx_bf, tilex, q8_act or permx_mx, emitted with the module) of one array,
// run by whichever thread claims it. Reference: the same layout made on the calling thread.

import type { OpDef } from './op.js';

/** The layouts prep runs, by its fn word. */
export const PREP_FNS = ['permx_bf', 'tilex', 'q8_act', 'permx_mx'] as const;

export const PREP: OpDef = {
  name: 'prep',
  summary: 'Activations laid out for a product (permuted, token tiles, 8-bit blocks)',
  args: [
    { name: 'fn', kind: 'int', doc: 'index into PREP_FNS' },
    { name: 'src', kind: 'f32', shape: 'T*cols', io: 'in' },
    { name: 'dst', kind: 'u8', shape: 'the layout\'s bytes', io: 'out' },
    { name: 'T', kind: 'int' },
    { name: 'cols', kind: 'int' },
    { name: 'a', kind: 'int', doc: 'tilex: perm; q8_act: order' },
    { name: 'b', kind: 'int', doc: 'q8_act: scale bits' },
    { name: 'c', kind: 'int', doc: 'q8_act: offset' },
  ],
  split: { unit: 'one unit', range: '1' },
  place: 'src in kernel memory (an earlier step\'s output)',
  refNote: 'prepX / quantizeActs in src/kernels/fast.ts (the eager layouts); test/formats/panels.test.ts, test/kernels/q8-act.test.ts',
  bind(ex) {
    const prep = PREP_FNS.map((f) => ex[f]!);
    return (c, o) => {
      const fn = c[o + 1]!;
      if (fn === 0 || fn === 3) prep[fn]!(c[o + 2]!, c[o + 3]!, c[o + 4]!, c[o + 5]!);
      else if (fn === 1) prep[1]!(c[o + 2]!, c[o + 3]!, c[o + 4]!, c[o + 5]!, c[o + 6]!);
      else prep[2]!(c[o + 2]!, c[o + 3]!, c[o + 4]!, c[o + 5]!, c[o + 6]!, c[o + 7]!, c[o + 8]!);
    };
  },
};
