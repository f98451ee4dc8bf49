// A block's input not yet computed: x = RMSNorm(h), h the Attention Residuals mix of the
// candidates (K3, docs/spec/ARCHITECTURE.md §4.7) or the stream itself. A block that runs as one chained
// dispatch computes it as its first step (Chain.attnResNorm: no JavaScript between the previous
// block's last product and this block's first, issue 13); any other calls blockInput. The same
// operations either way, so the same bytes.

import type { Compute } from '../graph/compute.js';
import { inputNow, type InputOperands } from '../graph/graph.js';

/** The snapshots then the current stream (each [T, D]; the stream alone when fold is null), the
 *  AttnRes site's fold (attnres.ts foldWeights) or null, and the block's norm gain [D] and eps. */
export type BlockInput = InputOperands;

/** x itself, or the input computed now (graph.ts inputNow: the AttnRes mix when there is a fold, then rmsNorm). */
export function blockInput(c: Compute, x: Float32Array | BlockInput): Float32Array {
  return x instanceof Float32Array ? x : inputNow(c, x);
}

/** The constants a chain needs in kernel memory for this input (place them before it begins). */
export function inputConstants(x: Float32Array | BlockInput): Float32Array[] {
  return x instanceof Float32Array ? [] : x.fold ? [x.fold, x.norm] : [x.norm];
}
