// A block's input not yet computed: x = RMSNorm(h), h the Attention Residuals mix of the
// candidates (K3, docs/spec/ARCHITECTURE.md §4.7) or the stream itself. A block that runs as one chained
// dispatch computes it as its first step (Chain.attnResNorm: no JavaScript between the previous
// block's last product and this block's first, issue 13); any other calls blockInput. The same
// operations either way, so the same bytes.

import type { Chain, Compute } from '../graph/compute.js';
import { attnResMixOn } from './attnres.js';
import { rmsNorm } from './ops.js';

export interface BlockInput {
  /** The snapshots, then the current stream (each [T, D]); the stream alone when fold is null. */
  cands: Float32Array[];
  /** The AttnRes site's fold (attnres.ts foldWeights), or null: no mix. */
  fold: Float32Array | null;
  mixEps: number;
  /** The block's norm gain [D] and eps. */
  norm: Float32Array;
  normEps: number;
  T: number;
  D: number;
}

/** x itself, or the input computed now: attnResMixOn (when there is a fold), then rmsNorm. */
export function blockInput(c: Compute, x: Float32Array | BlockInput): Float32Array {
  if (x instanceof Float32Array) return x;
  const { cands, fold, T, D } = x;
  const h = fold ? attnResMixOn(c, cands.slice(0, -1), cands.at(-1)!, T, D, fold, x.mixEps) : cands[0]!;
  return rmsNorm(h, T, D, x.norm, x.normEps);
}

/** The constants a chain needs in kernel memory for this input (place them before it begins). */
export function inputConstants(x: Float32Array | BlockInput): Float32Array[] {
  return x instanceof Float32Array ? [] : x.fold ? [x.fold, x.norm] : [x.norm];
}

/**
 * x in a chain: itself, or the input as an op of the chain's current step (then the next step
 * begins, which may read it). `placed`: inputConstants(x) as placed in kernel memory.
 */
export function chainInput(ch: Chain, x: Float32Array | BlockInput, placed: readonly Float32Array[]): Float32Array {
  if (x instanceof Float32Array) return x;
  const out = ch.attnResNorm(x.cands, x.fold ? placed[0]! : null, x.mixEps, placed.at(-1)!, x.normEps, x.T, x.D);
  ch.next();
  return out;
}
