// act: gated activations of a batch (wasm/act.ts, emitted with the module; reference: gatedActRef
// there), split in units of 4 elements: a piece [a, b) runs act(g + 16a, u + 16a, o + 16a, 4(b - a), pb).

import { ACT_FNS } from '../wasm/act.js';
import type { OpDef } from './op.js';

/** The activations op `act` runs, by its fn word. */
export const ACT_OPS = [ACT_FNS.silu, ACT_FNS.situ, ACT_FNS.situ_bl] as const;

export const ACT: OpDef = {
  name: 'act',
  summary: 'Gated activation (SiLU, SiTU, capped SiTU) of gate and up arrays',
  args: [
    { name: 'fn', kind: 'int', doc: 'index into ACT_OPS' },
    { name: 'g', kind: 'f32', shape: '4*U', io: 'in' },
    { name: 'u', kind: 'f32', shape: '4*U', io: 'in' },
    { name: 'o', kind: 'f32', shape: '4*U', io: 'out' },
    { name: 'pb', kind: 'f64', shape: '2', io: 'in', doc: 'β, βl' },
  ],
  split: { unit: '4-element units', range: 'U' },
  place: 'none eagerly (copied in, back to back); in a chain, g and u are earlier steps\' outputs',
  refNote: 'gatedActRef (src/kernels/wasm/act.ts); test/kernels/act.test.ts',
  bind(ex) {
    const act = ACT_OPS.map((f) => ex[f]!);
    return (c, o, a, b) => {
      act[c[o + 1]!]!(c[o + 2]! + 16 * a, c[o + 3]! + 16 * a, c[o + 4]! + 16 * a, 4 * (b - a), c[o + 5]!);
    };
  },
};
