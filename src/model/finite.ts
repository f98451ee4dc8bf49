// Numbers that cannot be right stop the run: a NaN or an infinity in a hidden state or in the
// logits means the weights, the state or the arithmetic went wrong, and any token picked from
// them (argmax of NaNs is token 0) would be a plausible wrong answer. The check is one sum per
// layer output (NaN and ±inf survive a sum) and one pass over the logits: cheap next to a layer.
// `k3 run --allow-nonfinite` switches it off for people debugging a model.

import { UserError } from '../util/errors.js';

export class FiniteWatch {
  /** First layer (0-based) whose output held a NaN / inf in the current chunk, or null. */
  private firstBad: number | null = null;
  enabled = true;

  /** Called with each layer's output [T, D]. */
  layer(l: number, h: Float32Array): void {
    if (!this.enabled || this.firstBad !== null) return;
    let s = 0;
    for (let i = 0; i < h.length; i++) s += h[i]!;
    if (!Number.isFinite(s)) this.firstBad = l;
  }

  /** After a chunk: throws (exit 4) naming where non-finite values first appeared; resets. */
  endChunk(logits: Float32Array, firstPosition: number, numLayers: number): void {
    const bad = this.firstBad;
    this.firstBad = null;
    if (!this.enabled) return;
    let s = 0;
    for (let i = 0; i < logits.length; i++) s += logits[i]!;
    if (bad === null && Number.isFinite(s)) return;
    const where = bad !== null ? `the output of layer ${bad} (of ${numLayers}, 0-based)` : 'the logits (after the last layer and the head)';
    throw new UserError(`non-finite values (NaN or inf) first appeared in ${where}, positions from ${firstPosition}: stopping rather than picking a token from them (the weights or the state are damaged; --allow-nonfinite computes on)`, 4);
  }
}
