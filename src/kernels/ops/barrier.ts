// barrier: the ops after it start only when every op before it is done (a chained dispatch: one
// publish, one wake-up, no JavaScript between dependent steps). No words, an empty range.

import type { OpDef } from './op.js';

export const BARRIER: OpDef = {
  name: 'barrier',
  summary: 'Step boundary of a chained dispatch',
  args: [],
  split: { unit: 'none', range: '0' },
  place: 'none',
  refNote: 'none (no numbers); test/store/overlap.test.ts, test/kernels/fast-experts.test.ts chain the steps',
  bind: () => () => {},
};
