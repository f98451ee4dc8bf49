// The speculative-sampling acceptance rule (Leviathan et al. 2023; Chen et al. 2023) for a
// drafter that proposes one token with certainty (q = a point mass on the draft d): accept d
// with probability min(1, p(d)/q(d)) = p(d); on refusal draw from the residual max(0, p - q),
// normalized, which is p without d. Each emitted id is then distributed exactly as the sampler's
// p, so speculation does not change the output distribution. The draws come from the sampler's
// seeded generator: a given seed gives the same text every run.

import { drawIndex, type Sampler } from './sampling.js';
import type { Choice } from './spec.js';

/** Decide draft `draft` at a position with these logits, for sampler `s` (history: ids seen, for penalties). */
export function acceptDraft(s: Sampler, logits: Float32Array, draft: number, history: readonly number[], V: number): Choice {
  const { ids, probs } = s.distribution(logits, history, V);
  if (s.greedy) return { id: ids[0]!, accepted: ids[0] === draft };
  const at = ids.indexOf(draft);
  const pd = at < 0 ? 0 : probs[at]!;
  if (s.rng.nextFloat() < pd) return { id: draft, accepted: true };
  // residual: p without the draft, renormalized (in the distribution's order, as Sampler.sample)
  const rest = 1 - pd;
  const i = drawIndex(probs, s.rng.nextFloat() * rest, ids.length, at);
  // no other id with a non-zero probability: the draft
  return i >= 0 ? { id: ids[i]!, accepted: false } : { id: draft, accepted: true };
}

/**
 * The rule for a drafter with its own distribution q (a DSpark drafter sampling its block): accept
 * `draft` (drawn from q) with probability min(1, p(d)/q(d)); on refusal draw from max(0, p - q),
 * normalized. `q` is over the whole vocabulary; p is the sampler's. Greedy: as acceptDraft.
 */
export function acceptDraftFrom(s: Sampler, logits: Float32Array, draft: number, q: ArrayLike<number>, history: readonly number[], V: number): Choice {
  const { ids, probs } = s.distribution(logits, history, V);
  if (s.greedy) return { id: ids[0]!, accepted: ids[0] === draft };
  const at = ids.indexOf(draft);
  const pd = at < 0 ? 0 : probs[at]!;
  const qd = q[draft]!;
  if (s.rng.nextFloat() * qd < pd) return { id: draft, accepted: true };
  const rest = ids.map((id, i) => Math.max(0, probs[i]! - q[id]!));
  const total = rest.reduce((a, b) => a + b, 0);
  // p <= q everywhere but rounding: p itself (then the refusal had probability ~0)
  const w = total > 0 ? rest : probs;
  return { id: ids[drawIndex(w, s.rng.nextFloat() * (total > 0 ? total : 1), ids.length)]!, accepted: false };
}
