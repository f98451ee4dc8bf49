// The ops of the kernel pool. An op's code is its index here and its words are its declaration's
// arguments, then its range [a, b): nothing is numbered by hand. Adding an op is its own file and
// one line below. The list is also the order the ops' emitters add their functions to the module.

import { ACT } from './act.js';
import { ADD } from './add.js';
import { ATTNRES_NORM } from './attnres-norm.js';
import { ATTNRES_SCORES } from './attnres-scores.js';
import { ATTNRES_SUM } from './attnres-sum.js';
import { BARRIER } from './barrier.js';
import { GATHER_ROWS } from './gather-rows.js';
import { KDA_BLOCK } from './kda-block.js';
import { KDA_STEP } from './kda-step.js';
import { MATMUL } from './matmul.js';
import { MLA_APPEND } from './mla-append.js';
import { MLA_SCORES } from './mla-scores.js';
import { MLA_SOFTMAX } from './mla-softmax.js';
import { MLA_WSUM } from './mla-wsum.js';
import { MOE_COMBINE } from './moe-combine.js';
import { MVT } from './mvt.js';
import { PREP } from './prep.js';
import { RMS_NORM } from './rms-norm.js';
import { SIGMOID_GATE } from './sigmoid-gate.js';
import type { EmitCtx, OpDef, Runner } from './op.js';

export const OPS: readonly OpDef[] = [
  MATMUL, BARRIER, PREP, ACT, MVT,
  KDA_STEP, MLA_SCORES, ATTNRES_SCORES, ATTNRES_SUM, MLA_WSUM, RMS_NORM, MLA_APPEND, MLA_SOFTMAX, SIGMOID_GATE, MOE_COMBINE,
  GATHER_ROWS, ATTNRES_NORM, KDA_BLOCK, ADD,
];

const CODES = new Map(OPS.map((d, i) => [d, i]));

/** The op code of a registered op. */
export function opCode(d: OpDef): number {
  const c = CODES.get(d);
  if (c === undefined) throw new Error(`op ${d.name} is not in the registry`);
  return c;
}

/** Words of an op: its code, its arguments, its range. */
export const OP_WORDS = 16;
for (const d of OPS) if (d.args.length + 3 > OP_WORDS) throw new Error(`op ${d.name}: ${d.args.length} arguments do not fit ${OP_WORDS} words`);

/** Per code: where the range [a, b) lies from the op's first word. */
export const RANGE_AT: readonly number[] = OPS.map((d) => 1 + d.args.length);

/** Per code: the piece runner on an instance's exports (generic ops: the export called with its words, then a, b). */
export function runners(ex: Record<string, (...a: number[]) => number>): Runner[] {
  return OPS.map((d) => {
    if (d.bind) return d.bind(ex);
    const fn = ex[d.name];
    if (!fn) throw new Error(`kernel module has no ${d.name}`);
    const n = d.args.length;
    return (c, o, a, b) => {
      const args: number[] = [];
      for (let k = 1; k <= n; k++) args.push(c[o + k]!);
      fn(...args, a, b);
    };
  });
}

/** Add every op's functions to the module being generated, in registry order. */
export function emitOps(cx: EmitCtx): void {
  for (const d of OPS) d.emit?.(cx);
}
