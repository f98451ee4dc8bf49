// Attention Residuals (docs/spec/ARCHITECTURE.md §4.7, docs/spec/K3.md §6.2): a softmax over depth that replaces the
// residual add. Candidates are the block snapshots then the current partial sum; keys are
// RMS-normalized (no weight), scored against fold = norm_w ⊙ proj_w; values are the RAW candidates.
// Per token, across depth only: nothing is carried across positions.

export { attnResMix } from '../graph/reference.js';

/** fold[d] = ν[d]·ρ[d], computed once per site. */
export function foldWeights(norm: Float32Array, proj: Float32Array): Float32Array {
  const f = new Float32Array(norm.length);
  for (let i = 0; i < f.length; i++) f[i] = norm[i]! * proj[i]!;
  return f;
}
